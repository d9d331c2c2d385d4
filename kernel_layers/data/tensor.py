"""The data module over arrays already in memory."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from torch import Tensor

from kernel_layers.data.base import ArrayDataModule, RawArrays

__all__ = ["TensorDataModule"]


class TensorDataModule(ArrayDataModule):
    """Data module over arrays already in memory (generated data, user data, tests).

    Args:
        x_train (Tensor[N, *S] | np.ndarray): raw training features of sample shape ``S``.
        y_train (Tensor[N] | np.ndarray): integer training labels in ``[0, num_classes)``.
        x_test (Tensor[M, *S] | np.ndarray): raw test features.
        y_test (Tensor[M] | np.ndarray): integer test labels.
        num_classes: number of classes; ``None`` infers ``max(label) + 1``.
        **kwargs: the options of :class:`ArrayDataModule` (``batch_size``,
            ``num_features``, ``val_fraction``, ``scaling``, ...).
    """

    def __init__(
        self,
        x_train: Tensor | np.ndarray,
        y_train: Tensor | np.ndarray,
        x_test: Tensor | np.ndarray,
        y_test: Tensor | np.ndarray,
        *,
        num_classes: int | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self._check_int("num_classes", num_classes, 1, optional=True)
        arrays = [
            t.detach().cpu().numpy() if isinstance(t, Tensor) else np.asarray(t)
            for t in (x_train, y_train, x_test, y_test)
        ]
        if arrays[0].ndim < 2 or arrays[2].shape[1:] != arrays[0].shape[1:]:
            raise ValueError(
                f"{self._name}: x_train must be [N, *S] and x_test [M, *S] with the same S, "
                f"got {list(arrays[0].shape)} and {list(arrays[2].shape)}"
            )
        self._arrays: RawArrays = (arrays[0], arrays[1], arrays[2], arrays[3])
        self.input_shape = tuple(int(s) for s in arrays[0].shape[1:])
        self.in_features = int(np.prod(self.input_shape))
        if num_classes is None:
            labels = np.concatenate([arrays[1].ravel(), arrays[3].ravel()])
            num_classes = int(labels.max()) + 1 if labels.size else 1
        self.num_classes = num_classes
        self._save_options(ignore=["x_train", "y_train", "x_test", "y_test"])

    def _locate(self) -> Callable[[], RawArrays]:
        return lambda: self._arrays
