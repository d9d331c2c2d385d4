"""Numerically guarded dense linear algebra shared by the layers and objectives."""

from __future__ import annotations

import warnings

import torch
from torch import Tensor

__all__ = [
    "CHOLESKY_JITTER",
    "HALF_DTYPES",
    "JITTER_GROWTH",
    "MAX_JITTER_TRIES",
    "SOLVE_DTYPE",
    "autocast_off",
    "refuse_double_backward",
    "robust_cholesky",
    "upcast",
]

#: Low-precision dtypes that kernel distances and DI solves never run in.
HALF_DTYPES = (torch.float16, torch.bfloat16)


def upcast(x: Tensor) -> Tensor:
    """``x`` in float32 if it is float16 / bfloat16, else ``x`` itself."""
    return x.float() if x.dtype in HALF_DTYPES else x


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
    if torch.compiler.is_exporting():  # no data-dependent branch in an exported graph:
        return torch.linalg.cholesky(matrix)  # the exported program raises if not PD
    factor, info = torch.linalg.cholesky_ex(matrix)
    if int(info) == 0:
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
                stacklevel=3,
            )
            return factor
        eps *= JITTER_GROWTH
    raise RuntimeError(
        f"{owner}: Cholesky factorisation failed even with a jitter of "
        f"{eps / JITTER_GROWTH:.1e} x mean diagonal; the matrix of shape "
        f"{list(matrix.shape)} is not positive semi-definite (non-finite or corrupted input?)"
    )


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
