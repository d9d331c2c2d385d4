"""A data module's min-max scaling of raw features: fitting it, applying it, and as a module."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from torch import Tensor, nn

__all__ = [
    "CONSTANT_COLUMN_RTOL",
    "MAX_SCALED_MAGNITUDE",
    "SCALE_CHUNK_ROWS",
    "InputScaling",
    "check_scaled",
    "fit_min_max",
    "scale_rows",
]

#: A column whose training range is at most this (relative to its magnitude) is constant.
CONSTANT_COLUMN_RTOL = 1e-12
#: Rows scaled per chunk (bounds the float64 working memory of the scaler).
SCALE_CHUNK_ROWS = 8192
#: Largest scaled feature served: its square stays finite in float32.
MAX_SCALED_MAGNITUDE = float(np.sqrt(np.finfo(np.float32).max))


def fit_min_max(
    x: np.ndarray, *, global_range: bool
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Min-max statistics of the training rows ``x (np.ndarray[N, D])``.

    Args:
        x: raw training features.
        global_range: one minimum and maximum for all columns instead of per column.

    Returns:
        tuple: float64 ``lo``, ``hi``, ``divisor`` and ``keep`` (each ``np.ndarray[D]``);
        a constant column has divisor ``1`` and keep ``0``, every other column divisor
        ``hi - lo`` and keep ``1``.
    """
    if global_range:
        lo = np.full(x.shape[1], x.min(), dtype=np.float64)
        hi = np.full(x.shape[1], x.max(), dtype=np.float64)
    else:
        lo = x.min(axis=0).astype(np.float64)
        hi = x.max(axis=0).astype(np.float64)
    span = hi - lo
    constant = span <= CONSTANT_COLUMN_RTOL * np.maximum(1.0, np.maximum(abs(lo), abs(hi)))
    return lo, hi, np.where(constant, 1.0, span), (~constant).astype(np.float64)


def scale_rows(
    x: np.ndarray, shift: np.ndarray, divisor: np.ndarray, keep: np.ndarray, *, clip: bool
) -> Tensor:
    """``(x - shift) / divisor * keep`` in float64, chunk by chunk, as float32.

    Args:
        x (np.ndarray[N, D]): raw features.
        shift (np.ndarray[D]): per-column minimum.
        divisor (np.ndarray[D]): per-column span (``1`` for constant columns).
        keep (np.ndarray[D]): ``1`` for varying columns, ``0`` for constant ones.
        clip: clip the scaled values to ``[0, 1]``.

    Returns:
        Tensor[N, D]: a new float32 tensor.
    """
    out = torch.empty(x.shape, dtype=torch.float32)
    for start in range(0, len(x), SCALE_CHUNK_ROWS):
        chunk = x[start : start + SCALE_CHUNK_ROWS].astype(np.float64)
        chunk = (chunk - shift) / divisor * keep
        if clip:
            np.clip(chunk, 0.0, 1.0, out=chunk)
        out[start : start + len(chunk)] = torch.from_numpy(chunk)
    return out


def check_scaled(owner: str, what: str, scaled: Tensor, lo: np.ndarray, hi: np.ndarray) -> None:
    """Raise if a scaled value's square overflows float32 (a row far outside the range).

    Args:
        owner: the data module's name for messages.
        what: the rows, for messages (``"test features"``, ``"argument 'x'"``).
        scaled (Tensor[N, D]): the output of :func:`scale_rows`.
        lo (np.ndarray[D]): the training minimum (for the message).
        hi (np.ndarray[D]): the training maximum (for the message).

    Raises:
        ValueError: ``|value| > MAX_SCALED_MAGNITUDE`` (or Inf / NaN) after scaling.
    """
    largest = float(scaled.abs().max()) if scaled.numel() else 0.0
    if not largest <= MAX_SCALED_MAGNITUDE:
        raise ValueError(
            f"{owner}: {what} scale to values up to |{largest:.4g}| with the training rows' "
            f"min-max statistics (min {float(lo.min()):.4g}, max {float(hi.max()):.4g}); "
            f"their squares overflow float32 (|value| <= {MAX_SCALED_MAGNITUDE:.4g}), the "
            "kernel layers' precision: bring the rows to the training data's units and range"
        )


class InputScaling(nn.Module):
    """Raw feature rows to the scaled inputs a model was trained on.

    ``x' = (x - shift) / divisor * keep``, then clipped to ``[0, 1]`` with ``clip``,
    computed in float64 and returned in float32 with the sample shape, the arithmetic of
    :class:`~kernel_layers.data.base.ArrayDataModule` (so the results agree bit for bit).
    The statistics are float64 buffers: they travel with ``state_dict`` and into
    ``torch.onnx.export``.

    Args:
        shift (Tensor[D] | np.ndarray): per-column minimum of the training rows.
        divisor (Tensor[D] | np.ndarray): per-column span (``1`` for constant columns).
        keep (Tensor[D] | np.ndarray): ``1`` for varying columns, ``0`` for constant ones.
        clip: clip the scaled values to ``[0, 1]``.
        input_shape: shape of one sample, ``(D,)`` or ``(C, H, W)``.
        dtype: dtype of the output (float32, the data modules' tensors; float64 for a
            model evaluated in float64).

    Shape:
        ``x (Tensor[B, D] | Tensor[B, *input_shape])`` of any real dtype ->
        ``Tensor[B, *input_shape]`` in ``dtype``.
    """

    shift: Tensor
    divisor: Tensor
    keep: Tensor

    def __init__(
        self,
        shift: Tensor | np.ndarray,
        divisor: Tensor | np.ndarray,
        keep: Tensor | np.ndarray,
        *,
        clip: bool,
        input_shape: Sequence[int],
        dtype: torch.dtype = torch.float32,
    ) -> None:
        super().__init__()
        stats = [
            torch.as_tensor(v, dtype=torch.float64).reshape(-1) for v in (shift, divisor, keep)
        ]
        width = stats[0].numel()
        shape = tuple(int(s) for s in input_shape)
        if any(v.numel() != width for v in stats) or int(np.prod(shape)) != width:
            raise ValueError(
                "InputScaling: arguments 'shift', 'divisor', 'keep' and 'input_shape' must "
                f"describe the same number of features, got {[v.numel() for v in stats]} "
                f"and input_shape {list(shape)}"
            )
        for name, value in zip(("shift", "divisor", "keep"), stats, strict=True):
            self.register_buffer(name, value.clone())
        if dtype not in (torch.float32, torch.float64):
            raise ValueError(
                "InputScaling: argument 'dtype' must be torch.float32 or torch.float64, "
                f"got {dtype}"
            )
        self.clip = bool(clip)
        self.input_shape = shape
        self.dtype = dtype

    @property
    def in_features(self) -> int:
        """Number of raw features ``D`` per row."""
        return self.shift.numel()

    def forward(self, x: Tensor) -> Tensor:
        rows = x.reshape(x.shape[0], -1)
        if rows.shape[1] != self.in_features:
            raise ValueError(
                f"InputScaling: argument 'x' must have {self.in_features} features per row "
                f"(shape [B, {self.in_features}] or [B, *{list(self.input_shape)}]), got "
                f"shape {list(x.shape)}"
            )
        scaled = (rows.to(torch.float64) - self.shift) / self.divisor * self.keep
        if self.clip:
            scaled = scaled.clamp(0.0, 1.0)
        return scaled.to(self.dtype).reshape(x.shape[0], *self.input_shape)

    def extra_repr(self) -> str:
        return (
            f"in_features={self.in_features}, clip={self.clip}, input_shape={self.input_shape}, "
            f"dtype={self.dtype}"
        )
