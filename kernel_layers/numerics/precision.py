"""The dtype rules that keep kernel matrices and DI solves of float32 features close to
float64: a float32 factorisation only where its estimated round-off is small
(:data:`FLOAT32_FACTOR_LIMIT`), float64 otherwise, and a float32 Gram kept only where its
estimated round-off is small (:data:`GRAM_PRECISION_LIMIT`).

* Kernel distances and DI solves never run in float16 / bfloat16 (:func:`upcast`,
  :func:`autocast_off`).
* The ``J x J`` (or ``n x n``) factorisation and solves run in :data:`SOLVE_DTYPE`,
  but for DI's float32 scatter within :data:`FLOAT32_FACTOR_LIMIT`.
* NysDI evaluates the kernel matrices of narrow inputs in :data:`SOLVE_DTYPE`
  (:func:`kernel_dtype`).
* A Gram matrix formed in float32 is kept only while its round-off, amplified by its
  conditioning (:func:`roundoff_estimate`), stays within :data:`GRAM_PRECISION_LIMIT`;
  it is factorised in float32 only within :data:`FLOAT32_FACTOR_LIMIT`.
* Inputs are bounded so that sums and squared distances stay finite in their dtype
  (:func:`sum_limit`, :func:`distance_limit`).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

__all__ = [
    "DISTANCE_OVERFLOW",
    "FLOAT32_FACTOR_LIMIT",
    "GRAM_PRECISION_LIMIT",
    "HALF_DTYPES",
    "NARROW_INPUT_RATIO",
    "NARROW_INPUT_WIDTH",
    "SOLVE_DTYPE",
    "SQUARE_OVERFLOW",
    "SUM_OVERFLOW",
    "autocast_off",
    "data_limit",
    "distance_limit",
    "kernel_dtype",
    "power_limit",
    "roundoff_estimate",
    "square_sum_limit",
    "sum_limit",
    "upcast",
]

#: Low-precision dtypes that kernel distances and DI solves never run in.
HALF_DTYPES = (torch.float16, torch.bfloat16)
#: dtype of the ``J x J`` factorisation and solves (the ``B x J`` products keep the
#: features' dtype).
SOLVE_DTYPE = torch.float64

#: Inputs at most ``1 / NARROW_INPUT_RATIO`` as wide as the landmark count, or at most
#: ``NARROW_INPUT_WIDTH`` wide, are "narrow": their kernel matrices ``k(X, Z)``, ``k(Z, Z)``
#: (``B n D + n^2 D`` products) cost a small share of the float64 ``B n^2`` Gram that
#: NysDI forms anyway, so they are evaluated in float64 too (see :func:`kernel_dtype`).
NARROW_INPUT_RATIO = 4
NARROW_INPUT_WIDTH = 64

#: A Gram matrix formed in float32 is recomputed in float64 when its round-off estimate
#: (:func:`roundoff_estimate`) exceeds this, or when the float32 ``S`` is not positive
#: definite at all (nearly rank-deficient features): above it float32 DI of nearly
#: rank-deficient features can err by percents. Below it the relative error of DI is
#: within ``sqrt(B)`` times the estimate for a batch of ``B`` rows: the float32 products
#: accumulate round-off over the rows, which the estimate leaves out, and two nearly
#: collinear features come within a small factor of that bound. The DI of the
#: benchmarks' rows is within the agreement table's bound (benchmarks/README.md).
#: Float64 features are exact to float64 round-off.
GRAM_PRECISION_LIMIT = 3e-3

#: A float32 scatter is factorised, and solved, in float32 when its round-off estimate
#: is at most this (no float64 copy; see benchmarks/di_step.py, whose agreement table
#: measures float32 DI against float64 on real rows). Above it the float64
#: factorisation is used; 0 turns the float32 factorisation off.
FLOAT32_FACTOR_LIMIT = 3e-4

#: What overflows beyond :func:`sum_limit` (for messages).
SUM_OVERFLOW = "larger ones overflow the sums over the batch"
#: What overflows beyond :func:`square_sum_limit` (for messages).
SQUARE_OVERFLOW = "larger ones overflow the sums of squares over the batch"
#: What overflows beyond :func:`distance_limit` (for messages).
DISTANCE_OVERFLOW = "larger ones overflow squared distances"


def upcast(x: Tensor) -> Tensor:
    """``x`` in float32 if it is float16 / bfloat16, else ``x`` itself."""
    return x.float() if x.dtype in HALF_DTYPES else x


def autocast_off(x: Tensor) -> torch.autocast:
    """A context that disables autocast on ``x``'s device type (mixed-precision safety)."""
    return torch.autocast(device_type=x.device.type, enabled=False)


def kernel_dtype(dtype: torch.dtype, width: int, landmarks: int) -> torch.dtype:
    """The dtype in which NysDI evaluates its kernel matrices.

    Float64 (:data:`SOLVE_DTYPE`) for narrow inputs (``NARROW_INPUT_RATIO * width <=
    landmarks`` or ``width <= NARROW_INPUT_WIDTH``, e.g. CovType's 54 columns), whose
    float32 kernel entries would otherwise move a nearly singular ``K_Z`` (NysDI on
    CovType off by 1.3e-3 relative at gamma 0.01 with float32 matrices); ``dtype``
    otherwise (wide inputs such as MNIST pixels, where float32 already agrees to 1e-7;
    see benchmarks/nysdi_precision.py).

    Args:
        dtype: the inputs' (upcast) floating dtype.
        width: the input width ``D``.
        landmarks: the landmark count ``n``.

    Returns:
        torch.dtype: ``SOLVE_DTYPE`` or ``dtype``.
    """
    narrow = width <= NARROW_INPUT_WIDTH or NARROW_INPUT_RATIO * width <= landmarks
    return SOLVE_DTYPE if narrow else dtype


def roundoff_estimate(dtype: torch.dtype, largest: Tensor, factor: Tensor) -> Tensor:
    """How far the round-off of a Gram matrix formed in ``dtype`` can move its solves:
    ``eps(dtype) * max(diag S) / min(pivot of chol(S))^2``, from the one factorisation
    the solve needs anyway.

    Args:
        dtype: the dtype the Gram matrix was formed in.
        largest (Tensor[]): ``max(diag S)`` (read before a factorisation in place).
        factor (Tensor[n, n]): the lower Cholesky factor of ``S``.

    Returns:
        Tensor[]: the estimate, compared with :data:`GRAM_PRECISION_LIMIT` and
        :data:`FLOAT32_FACTOR_LIMIT`.
    """
    return torch.finfo(dtype).eps * largest / factor.diagonal().square().amin()


def distance_limit(dtype: torch.dtype, width: int) -> float:
    """The largest input magnitude whose squared distances ``sum_i (x_i - z_i)^2`` over
    ``width`` dimensions (points within that magnitude) stay finite in ``dtype``."""
    if not dtype.is_floating_point:  # refused by the dtype check that follows
        return math.inf
    return math.sqrt(torch.finfo(dtype).max / (4.0 * max(width, 1)))


def power_limit(dtype: torch.dtype, width: int, gamma: float, degree: int, coef0: float) -> float:
    """The largest input magnitude whose polynomial kernel ``(gamma x^T z + coef0)^degree``
    over ``width`` dimensions (points within that magnitude) stays finite in ``dtype``."""
    if not dtype.is_floating_point:
        return math.inf
    root = torch.finfo(dtype).max ** (1.0 / degree) - coef0
    return math.sqrt(max(root, 0.0) / (gamma * max(width, 1)))


def data_limit(x: object) -> float:
    """:func:`distance_limit` for a data matrix ``x (Tensor[N, D])`` (inf for non-tensors:
    their type check reports them)."""
    if not isinstance(x, Tensor) or x.ndim != 2:
        return math.inf
    return distance_limit(x.dtype, x.shape[1])


def square_sum_limit(rows: int, dtype: torch.dtype) -> float:
    """The largest magnitude whose squares summed over ``rows`` rows (a scatter, a total
    sum of squares) stay finite in ``dtype``."""
    return math.sqrt(torch.finfo(dtype).max / (2.0 * max(rows, 1)))


def sum_limit(x: object) -> float:
    """The largest magnitude whose sums over the rows of ``x (Tensor[..., D])`` (a batch
    mean, a centring) stay finite in its dtype (inf for non-float inputs: their type check
    reports them)."""
    if not isinstance(x, Tensor) or not x.is_floating_point() or x.ndim == 0:
        return math.inf
    rows = x.numel() // max(x.shape[-1], 1)
    return torch.finfo(x.dtype).max / (2.0 * max(rows, 1))
