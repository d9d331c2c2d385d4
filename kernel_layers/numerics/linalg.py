"""Numerically guarded dense linear algebra shared by the layers and objectives."""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from kernel_layers.training.deferred import active_checks

__all__ = [
    "CHOLESKY_JITTER",
    "DISTANCE_OVERFLOW",
    "HALF_DTYPES",
    "JITTER",
    "JITTER_GROWTH",
    "MAX_JITTER_TRIES",
    "NARROW_INPUT_RATIO",
    "NARROW_INPUT_WIDTH",
    "SOLVE_DTYPE",
    "SUM_OVERFLOW",
    "autocast_off",
    "cholesky_ex",
    "data_limit",
    "default_jitter",
    "distance_limit",
    "gram_matrix",
    "kernel_dtype",
    "landmark_gram",
    "refuse_double_backward",
    "robust_cholesky",
    "robust_cholesky_in_place",
    "sum_limit",
    "upcast",
]

#: Low-precision dtypes that kernel distances and DI solves never run in.
HALF_DTYPES = (torch.float16, torch.bfloat16)


def gram_matrix(a: Tensor, *, transpose: bool = False) -> Tensor:
    """The Gram matrix ``a^T a`` (``a a^T`` if ``transpose``).

    Args:
        a (Tensor[B, J]): the matrix (``Tensor[J, B]`` when ``transpose``).

    Returns:
        Tensor[J, J]: the symmetric Gram matrix.
    """
    return a @ a.mT if transpose else a.mT @ a


def upcast(x: Tensor) -> Tensor:
    """``x`` in float32 if it is float16 / bfloat16, else ``x`` itself."""
    return x.float() if x.dtype in HALF_DTYPES else x


#: Inputs at most ``1 / NARROW_INPUT_RATIO`` as wide as the landmark count, or at most
#: ``NARROW_INPUT_WIDTH`` wide, are "narrow": their kernel matrices ``k(X, Z)``, ``k(Z, Z)``
#: (``B n D + n^2 D`` products) cost a small share of the float64 ``B n^2`` Gram that
#: NysDI forms anyway, or a small step in absolute terms, so they are evaluated in
#: float64 too (see :func:`kernel_dtype`).
NARROW_INPUT_RATIO = 4
NARROW_INPUT_WIDTH = 64


def kernel_dtype(dtype: torch.dtype, width: int, landmarks: int) -> torch.dtype:
    """The dtype in which NysDI evaluates its kernel matrices.

    Float64 (:data:`SOLVE_DTYPE`) for narrow inputs (``NARROW_INPUT_RATIO * width <=
    landmarks`` or ``width <= NARROW_INPUT_WIDTH``, e.g. CovType's 54 columns), whose
    float32 kernel entries would otherwise move a nearly singular ``K_Z`` (measured:
    NysDI on CovType off by 1.3e-3 relative at gamma 0.01 with float32 matrices);
    ``dtype`` otherwise (wide inputs such as MNIST pixels, where float64 matrices would
    cost +50 % of the step and float32 already agrees to 1e-7).

    Args:
        dtype: the inputs' (upcast) floating dtype.
        width: the input width ``D``.
        landmarks: the landmark count ``n``.

    Returns:
        torch.dtype: ``SOLVE_DTYPE`` or ``dtype``.
    """
    narrow = width <= NARROW_INPUT_WIDTH or NARROW_INPUT_RATIO * width <= landmarks
    return SOLVE_DTYPE if narrow else dtype


def autocast_off(x: Tensor) -> torch.autocast:
    """A context that disables autocast on ``x``'s device type (mixed-precision safety)."""
    return torch.autocast(device_type=x.device.type, enabled=False)


#: dtype of the ``J x J`` factorisation and solves (the ``B x J`` products keep the
#: features' dtype).
SOLVE_DTYPE = torch.float64
#: First jitter, relative to the mean diagonal, tried when a Cholesky factorisation fails.
CHOLESKY_JITTER = 1e-12
#: Factor by which the jitter grows between attempts.
JITTER_GROWTH = 100.0
#: Number of jittered attempts before giving up.
MAX_JITTER_TRIES = 6


def distance_limit(dtype: torch.dtype, width: int) -> float:
    """The largest input magnitude whose squared distances ``sum_i (x_i - z_i)^2`` over
    ``width`` dimensions (points within that magnitude) stay finite in ``dtype``."""
    if not dtype.is_floating_point:  # refused by the dtype check that follows
        return math.inf
    return math.sqrt(torch.finfo(dtype).max / (4.0 * max(width, 1)))


def data_limit(x: object) -> float:
    """:func:`distance_limit` for a data matrix ``x (Tensor[N, D])`` (inf for non-tensors:
    their type check reports them)."""
    if not isinstance(x, Tensor) or x.ndim != 2:
        return math.inf
    return distance_limit(x.dtype, x.shape[1])


def sum_limit(x: object) -> float:
    """The largest magnitude whose sums over the rows of ``x (Tensor[..., D])`` (a batch
    mean, a centring) stay finite in its dtype (inf for non-float inputs: their type check
    reports them)."""
    if not isinstance(x, Tensor) or not x.is_floating_point() or x.ndim == 0:
        return math.inf
    rows = x.numel() // max(x.shape[-1], 1)
    return torch.finfo(x.dtype).max / (2.0 * max(rows, 1))


#: What overflows beyond :func:`sum_limit` (for messages).
SUM_OVERFLOW = "larger ones overflow the sums over the batch"
#: What overflows beyond :func:`distance_limit` (for messages).
DISTANCE_OVERFLOW = "larger ones overflow squared distances"


def cholesky_ex(matrix: Tensor) -> tuple[Tensor, Tensor]:
    """``torch.linalg.cholesky_ex(matrix)``: the lower factor and ``info`` (0 on success).

    Args:
        matrix (Tensor[n, n]): symmetric matrix (its lower triangle is read).

    Returns:
        tuple[Tensor[n, n], Tensor[]]: the lower factor and ``info``.
    """
    factor, info = torch.linalg.cholesky_ex(matrix)
    return factor, info


def robust_cholesky(matrix: Tensor, *, owner: str, jitter: float = CHOLESKY_JITTER) -> Tensor:
    """Lower Cholesky factor of a symmetric positive (semi-)definite matrix.

    Tries ``matrix`` as is; on failure adds ``jitter * mean(diag)`` to the diagonal,
    growing by :data:`JITTER_GROWTH`, with a warning naming the jitter that worked.

    Args:
        matrix (Tensor[n, n]): symmetric matrix.
        owner: the caller's name for messages.
        jitter: first relative jitter tried after a failure.

    Returns:
        Tensor[n, n]: lower-triangular ``L`` with ``L L^T = matrix + eps I``.

    Raises:
        RuntimeError: no jitter up to ``jitter * JITTER_GROWTH**(MAX_JITTER_TRIES-1)``
            made the matrix factorisable (it is not close to positive semi-definite).
    """
    if torch.compiler.is_compiling():  # no data-dependent branch in a compiled or
        return torch.linalg.cholesky(matrix)  # exported graph: it raises if not PD
    factor, info = cholesky_ex(matrix)
    if _deferred_failure(owner, matrix, info) or int(info) == 0:
        return factor
    scale = float(matrix.detach().diagonal().abs().mean()) or 1.0
    eye = torch.eye(matrix.shape[-1], dtype=matrix.dtype, device=matrix.device)
    eps = jitter
    for _ in range(MAX_JITTER_TRIES):
        factor, info = cholesky_ex(matrix + (eps * scale) * eye)
        if int(info) == 0:
            warnings.warn(
                f"{owner}: Cholesky factorisation failed; succeeded after adding a jitter of "
                f"{eps:.1e} x mean diagonal ({eps * scale:.3e})",
                RuntimeWarning,
                stacklevel=3,
            )
            return factor
        eps *= JITTER_GROWTH
    raise RuntimeError(
        f"{owner}: Cholesky factorisation failed even with a jitter of "
        f"{eps / JITTER_GROWTH:.1e} x mean diagonal; the matrix of shape "
        f"{list(matrix.shape)} is not positive semi-definite (non-finite or corrupted input?)"
    )


def _deferred_failure(owner: str, matrix: Tensor, info: Tensor) -> bool:
    """Under deferred checks, record a failed factorisation of ``matrix`` (``info != 0``)
    and return ``True``: no host read, hence no jitter retry. ``False`` otherwise."""
    checks = active_checks()
    if checks is None:
        return False
    checks.record(
        RuntimeError,
        f"{owner}: Cholesky factorisation of a {list(matrix.shape)} matrix failed "
        "(not positive definite); with checks deferred it is not retried with a "
        "jitter: check every step to let it be (check_every='step')",
        info != 0,
    )
    return True


def robust_cholesky_in_place(build: Callable[[], Tensor], *, owner: str) -> Tensor:
    """:func:`robust_cholesky` of ``build()``, first tried in place on the fresh matrix
    ``build()`` returns (no copy, the factor's upper triangle not cleaned: for triangular
    solves, which read their own triangle); ``build`` runs again only if that attempt
    fails, for the retries with a jitter.

    Args:
        build: returns a new symmetric matrix (Tensor[n, n]) each call.
        owner: the caller's name for messages.

    Returns:
        Tensor[n, n]: ``L`` (lower triangle; above it, what ``build()`` put there).
    """
    if torch.compiler.is_compiling():
        return torch.linalg.cholesky(build())
    matrix = build()
    factor, info = cholesky_ex(matrix)
    if _deferred_failure(owner, matrix, info) or int(info) == 0:
        return factor
    return robust_cholesky(build(), owner=owner)


def refuse_double_backward(owner: str) -> None:
    """Raise inside a closed-form ``backward`` when a graph of it is requested.

    The closed-form backward passes are once differentiable; with ``create_graph=True``
    their output would silently act as a constant, so refuse instead.

    Raises:
        RuntimeError: grad mode is on during the backward pass (``create_graph=True``).
    """
    if torch.is_grad_enabled():
        raise RuntimeError(
            f"{owner}: double backward (create_graph=True) is not supported: the "
            "closed-form backward is once differentiable"
        )


#: Relative diagonal jitter of ``K_Z`` by dtype of the landmarks: about the size below
#: which float32 round-off in ``k(Z, Z)`` makes eigenvalues meaningless.
JITTER = {torch.float16: 1e-3, torch.bfloat16: 1e-3, torch.float32: 1e-6, torch.float64: 1e-10}


def default_jitter(dtype: torch.dtype) -> float:
    """The default relative jitter of ``K_Z`` for landmarks of ``dtype``."""
    return JITTER.get(dtype, JITTER[torch.float32])


def landmark_gram(landmarks: Tensor, kernel: Any, gamma: float, jitter: float) -> Tensor:
    """``K_Z + jitter * mean(diag K_Z) I`` in :data:`SOLVE_DTYPE`.

    Args:
        landmarks (Tensor[n, D]): landmarks ``Z``.
        kernel: a :class:`~kernel_layers.kernels.Kernel` (its ``matrix`` is used).
        gamma: kernel parameter.
        jitter: relative jitter.

    Returns:
        Tensor[n, n]: the symmetric, jittered landmark kernel matrix.
    """
    k_z = kernel.matrix(landmarks, landmarks, gamma).to(SOLVE_DTYPE)
    k_z = 0.5 * (k_z + k_z.mT)
    shift = jitter * k_z.diagonal().mean().detach()
    return k_z + shift * torch.eye(k_z.shape[0], dtype=k_z.dtype, device=k_z.device)
