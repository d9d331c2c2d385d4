"""scikit-learn's bundled 8x8 digits: the offline quick start's data."""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar

import numpy as np

from kernel_layers.data.base import DEFAULT_VAL_FRACTION, ArrayDataModule, RawArrays, Scaling

__all__ = ["DigitsDataModule"]

#: Fraction of ``load_digits`` held out (stratified) as the test split.
DIGITS_TEST_FRACTION = 0.25
DIGITS_IMAGE_SHAPE = (1, 8, 8)


class DigitsDataModule(ArrayDataModule):
    """scikit-learn's bundled digits: 1797 8x8 images (64 features), 10 classes, offline.

    The offline quick start: ``sklearn.datasets.load_digits`` ships with scikit-learn,
    so this module never downloads. A stratified split with the fixed ``seed`` holds out
    25% as the test set (1347 / 450 rows). Pixels (``0..16``) are min-max scaled with
    the global training minimum and maximum (``scaling="global"``).

    Args:
        flatten: serve ``x (Tensor[B, 64])``; ``False`` serves ``x (Tensor[B, 1, 8, 8])``.
        batch_size: see :class:`ArrayDataModule` (the other arguments too).
        num_features: kernel layer width ``J`` for the batch-size rule ``max(1000, 2J)``.
        val_fraction: fraction of the training split held out for validation.
        scaling: ``"global"`` (default) or ``"feature"``.
        clip: clip validation / test features to ``[0, 1]``.
        num_workers: ``DataLoader`` workers.
        pin_memory: pin batches in page-locked memory.
        seed: seed of the train / test and validation splits.
        shuffle: shuffle training batches.
        drop_last: drop the incomplete last training batch.
    """

    num_classes = 10
    image_shape = DIGITS_IMAGE_SHAPE
    in_features = int(np.prod(DIGITS_IMAGE_SHAPE))
    default_scaling: ClassVar[Scaling] = "global"

    def __init__(
        self,
        *,
        flatten: bool = True,
        batch_size: int | None = None,
        num_features: int | None = None,
        val_fraction: float = DEFAULT_VAL_FRACTION,
        scaling: Scaling | None = None,
        clip: bool = False,
        num_workers: int = 0,
        pin_memory: bool = False,
        seed: int = 0,
        shuffle: bool = True,
        drop_last: bool = True,
    ) -> None:
        super().__init__(
            batch_size=batch_size,
            num_features=num_features,
            val_fraction=val_fraction,
            scaling=scaling,
            clip=clip,
            num_workers=num_workers,
            pin_memory=pin_memory,
            seed=seed,
            shuffle=shuffle,
            drop_last=drop_last,
        )
        self._check_bool("flatten", flatten)
        self.flatten = flatten
        self.input_shape = (self.in_features,) if flatten else DIGITS_IMAGE_SHAPE
        self.save_hyperparameters()

    def _locate(self) -> Callable[[], RawArrays]:
        return self._load

    def _load(self) -> RawArrays:
        from sklearn.datasets import load_digits
        from sklearn.model_selection import train_test_split

        x, y = load_digits(return_X_y=True)
        x_train, x_test, y_train, y_test = train_test_split(
            x, y, test_size=DIGITS_TEST_FRACTION, stratify=y, random_state=self.seed
        )
        return x_train, y_train, x_test, y_test
