"""Numerically guarded dense linear algebra shared by the layers and objectives: the
Gram matrix, the Cholesky factorisation with escalating jitter, the landmark kernel's
jitter.

The dtype rules live in :mod:`kernel_layers.numerics.precision`.
"""

from __future__ import annotations

import warnings
from typing import Any

import torch
from torch import Tensor

from kernel_layers._validation import caller_stacklevel
from kernel_layers.numerics.deferred import active_checks
from kernel_layers.numerics.precision import (
    SOLVE_DTYPE,
)

__all__ = [
    "CHOLESKY_JITTER",
    "JITTER",
    "JITTER_GROWTH",
    "MAX_JITTER_TRIES",
    "default_jitter",
    "gram_matrix",
    "landmark_gram",
    "refuse_double_backward",
    "robust_cholesky",
]


def gram_matrix(a: Tensor, *, transpose: bool = False) -> Tensor:
    """The Gram matrix ``a^T a`` (``a a^T`` if ``transpose``).

    Args:
        a (Tensor[B, J]): the matrix (``Tensor[J, B]`` when ``transpose``).

    Returns:
        Tensor[J, J]: the symmetric Gram matrix.
    """
    return a @ a.mT if transpose else a.mT @ a


#: First jitter, relative to the mean diagonal, tried when a Cholesky factorisation fails.
CHOLESKY_JITTER = 1e-12
#: Factor by which the jitter grows between attempts.
JITTER_GROWTH = 100.0
#: Number of jittered attempts before giving up.
MAX_JITTER_TRIES = 6


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
    factor, info = torch.linalg.cholesky_ex(matrix)
    if _deferred_failure(owner, matrix, info) or int(info) == 0:
        return factor
    scale = float(matrix.detach().diagonal().abs().mean()) or 1.0
    eye = torch.eye(matrix.shape[-1], dtype=matrix.dtype, device=matrix.device)
    eps = jitter
    for _ in range(MAX_JITTER_TRIES):
        factor, info = torch.linalg.cholesky_ex(matrix + (eps * scale) * eye)
        if int(info) == 0:
            warnings.warn(
                f"{owner}: Cholesky factorisation failed; succeeded after adding a jitter of "
                f"{eps:.1e} x mean diagonal ({eps * scale:.3e})",
                RuntimeWarning,
                stacklevel=caller_stacklevel(),
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
