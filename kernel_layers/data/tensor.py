"""The data module over arrays already in memory."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from torch import Tensor

from kernel_layers._validation import check_positive
from kernel_layers.data.base import ArrayDataModule, RawArrays
from kernel_layers.data.splits import (
    check_feature_values,
    check_label_values,
    check_target_values,
)

__all__ = ["TensorDataModule"]


#: How to pass regression targets, told where class labels are not integers.
_REGRESSION_HINT = " (regression targets: pass float_targets=True)"


class TensorDataModule(ArrayDataModule):
    """Data module over arrays already in memory (generated data, user data, tests).

    Args:
        x_train (Tensor[N, *S] | np.ndarray): raw training features of sample shape ``S``:
            real numbers (bool, integer or float) with ``|value| <=``
            :data:`~kernel_layers.data.splits.MAX_RAW_MAGNITUDE`.
        y_train (Tensor[N] | np.ndarray): integer training labels in ``[0, num_classes)``;
            with ``float_targets``, real targets ``[N]`` or ``[N, L]`` (regression).
        x_test (Tensor[M, *S] | np.ndarray): raw test features.
        y_test (Tensor[M] | np.ndarray): integer test labels (float targets of the same
            width with ``float_targets``).
        num_classes: number of classes. ``None`` infers it from the labels of both
            splits, which must then be the contiguous classes ``0..L-1``, each present
            (``L`` classes); other labels (``{0, 1, 255}``, ``1e9``) need an explicit
            ``num_classes`` (labels in ``[0, num_classes)``) or a mapping to ``0..L-1``.
            Ignored with ``float_targets`` (``num_classes`` is then ``0``).
        float_targets: the targets are real numbers, served unscaled as float32
            ``Tensor[N, L]`` (:attr:`num_targets` ``= L``), for
            :class:`~kernel_layers.KernelRegressor`.
        pixel_max: the largest pixel value in the units of ``x_train`` (e.g. ``255``
            for 8-bit pixels, ``1.0`` for pixels in ``[0, 1]``), for image data: the
            pixels of an image folder given to ``predict`` are converted to these units.
            ``None`` refuses image folders.
        **kwargs: the options of :class:`ArrayDataModule` (``batch_size``,
            ``num_features``, ``val_fraction``, ``scaling``, ...).

    Raises:
        TypeError: features or labels that are not real numbers (strings, objects,
            complex or datetime values).
        ValueError: a meta or sparse tensor, features that are NaN / Inf or too large,
            labels that are not integers in range, or float targets that are NaN / Inf
            or of different widths (each message names the argument).
    """

    def __init__(
        self,
        x_train: Tensor | np.ndarray,
        y_train: Tensor | np.ndarray,
        x_test: Tensor | np.ndarray,
        y_test: Tensor | np.ndarray,
        *,
        num_classes: int | None = None,
        pixel_max: float | None = None,
        float_targets: bool = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self._check_int("num_classes", num_classes, 1, optional=True)
        if pixel_max is not None:
            check_positive(self._name, "pixel_max", pixel_max)
        named = {"x_train": x_train, "y_train": y_train, "x_test": x_test, "y_test": y_test}
        arrays = [self._as_array(name, value) for name, value in named.items()]
        if arrays[0].ndim < 2 or arrays[2].ndim < 2 or arrays[2].shape[1:] != arrays[0].shape[1:]:
            raise ValueError(
                f"{self._name}: x_train must be [N, *S] and x_test [M, *S] with the same S, "
                f"got {list(arrays[0].shape)} and {list(arrays[2].shape)}"
            )
        for name, array in zip(("x_train", "x_test"), arrays[::2], strict=True):
            check_feature_values(self._name, f"argument {name!r}", array)
        self._check_bool("float_targets", float_targets)
        if float_targets:
            targets = [
                check_target_values(self._name, f"argument {name!r}", array)
                for name, array in zip(("y_train", "y_test"), arrays[1::2], strict=True)
            ]
            if targets[0].shape[1] != targets[1].shape[1]:
                raise ValueError(
                    f"{self._name}: y_train and y_test must have the same number of "
                    f"targets, got {targets[0].shape[1]} and {targets[1].shape[1]}"
                )
            arrays[1], arrays[3] = targets
            self.num_targets = int(targets[0].shape[1])
        else:
            for name, array in zip(("y_train", "y_test"), arrays[1::2], strict=True):
                check_label_values(
                    self._name, f"argument {name!r}", array, num_classes, _REGRESSION_HINT
                )
        self._arrays: RawArrays = (arrays[0], arrays[1], arrays[2], arrays[3])
        self.input_shape = tuple(int(s) for s in arrays[0].shape[1:])
        self.in_features = int(np.prod(self.input_shape))
        if float_targets:
            self.num_classes = 0
        elif num_classes is not None:
            self.num_classes = num_classes
        else:
            self.num_classes = self._infer_classes(arrays[1], arrays[3])
        self.pixel_max = None if pixel_max is None else float(pixel_max)
        if not float_targets:
            # The hyperparameters hold the classes in use, inferred or given: a logger
            # merges them with the module's and refuses a ``num_classes`` of another value.
            num_classes = self.num_classes
        self._save_options(ignore=["x_train", "y_train", "x_test", "y_test"])

    def _as_array(self, name: str, value: object) -> np.ndarray:
        """``value`` as a NumPy array of real numbers (a tensor is copied to the host)."""
        if isinstance(value, Tensor):
            if value.is_meta:
                raise ValueError(
                    f"{self._name}: argument {name!r} must hold data, got a meta tensor of "
                    f"shape {list(value.shape)}"
                )
            if value.layout != torch.strided:
                raise ValueError(
                    f"{self._name}: argument {name!r} must be a dense tensor, got layout "
                    f"{value.layout} (call .to_dense())"
                )
            if value.is_complex():
                raise TypeError(
                    f"{self._name}: argument {name!r} must hold real numbers, got dtype "
                    f"{value.dtype}"
                )
            value = value.detach().cpu()
            if value.dtype == torch.bfloat16:  # NumPy has no bfloat16
                value = value.float()
            return value.numpy()
        if hasattr(value, "toarray"):  # a SciPy sparse matrix or array
            raise ValueError(
                f"{self._name}: argument {name!r} must be a dense array, got "
                f"{type(value).__name__} (call .toarray())"
            )
        return np.asarray(value)

    def _infer_classes(self, y_train: np.ndarray, y_test: np.ndarray) -> int:
        """``L`` when the labels present are exactly ``0..L-1`` (``1`` without labels)."""
        present = np.unique(np.concatenate([y_train.ravel(), y_test.ravel()]).astype(np.int64))
        if not present.size:
            return 1
        if present[-1] != present.size - 1:
            missing = np.setdiff1d(np.arange(min(int(present[-1]), 10**6)), present)
            raise ValueError(
                f"{self._name}: argument 'num_classes' is None, so the labels of 'y_train' "
                f"and 'y_test' must be the classes 0..L-1, each present; got "
                f"{present.size} distinct labels in [0, {int(present[-1])}] (missing: "
                f"{missing[:5].tolist()}{' ...' if missing.size > 5 else ''}); pass "
                "num_classes (labels in [0, num_classes)) or map the labels to 0..L-1 "
                "(e.g. sklearn.preprocessing.LabelEncoder)"
            )
        return int(present.size)

    def _locate(self) -> Callable[[], RawArrays]:
        return lambda: self._arrays
