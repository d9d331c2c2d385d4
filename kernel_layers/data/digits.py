"""scikit-learn's bundled 8x8 digits: the offline quick start's data."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

import numpy as np

from kernel_layers.data.base import ArrayDataModule, RawArrays, Scaling

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
        **kwargs: the common options of :class:`~kernel_layers.data.base.ArrayDataModule`
            (``batch_size``, ``num_features``, ``val_fraction``, ``scaling``, ``clip``,
            ``num_workers``, ``pin_memory``, ``seed``, ``shuffle``, ``drop_last``).
    """

    num_classes = 10
    image_shape = DIGITS_IMAGE_SHAPE
    in_features = int(np.prod(DIGITS_IMAGE_SHAPE))
    default_scaling: ClassVar[Scaling] = "global"
    pixel_max = 16.0

    def __init__(
        self,
        *,
        flatten: bool = True,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self._check_bool("flatten", flatten)
        self.flatten = flatten
        self.input_shape = (self.in_features,) if flatten else DIGITS_IMAGE_SHAPE
        self._save_options()

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
