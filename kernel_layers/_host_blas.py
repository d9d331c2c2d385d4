"""Symmetric kernels of DI's solve by the host BLAS / LAPACK that SciPy exposes (CPU).

PyTorch has no ``syrk``: on the CPU its Gram matrix ``a^T a`` is a general product,
twice the multiply-adds the symmetric result needs. SciPy's BLAS ``?syrk`` computes
one triangle only; on the machine measured it forms the ``[1000, 1000]`` Gram of a
``[2000, 1000]`` matrix in 41 ms (float64) and 22 ms (float32), against 75 ms / 36 ms
for a block-triangular product in PyTorch and 86 ms / 45 ms for the full product. Its
LAPACK ``?potrf`` factorises a float64 ``[1000, 1000]`` matrix in 10.2 ms against
13.1 ms for ``torch.linalg.cholesky_ex`` (one thread each, benchmarks/README.md). Where
PyTorch runs AVX-512 kernels its own LAPACK (MKL in the x86 wheels) is the faster one
(7.7 ms against 10.2 ms on an AVX-512 Xeon, 2026-11-25), so the host Cholesky serves
the other CPUs only (:func:`host_cholesky_preferred`); the host ``syrk`` wins on both
(15.0 ms against 23.3 ms for PyTorch's full float32 product there).

Both serve DI's forward pass only (inside a custom autograd function, no graph), and
only while PyTorch runs one intra-op thread (``torch.set_num_threads(1)``, as in
single-threaded and one-process-per-core data-parallel runs): next to PyTorch's
OpenMP threads a second pool of BLAS threads oversubscribes the cores (measured on 2
cores with 2 threads each: a DI step at ``(1000, 64, 100)`` took 15.9 ms against 2.8 ms
with PyTorch's kernels alone). Tensors that need gradients, CUDA tensors, compiled or
exported code, several intra-op threads and small inputs keep PyTorch's own kernels
(the functions return ``None``).
"""

from __future__ import annotations

import functools
from typing import Any

import torch
from torch import Tensor

__all__ = [
    "HOST_CHOLESKY_MIN_SIZE",
    "HOST_SYRK_MIN_WORK",
    "host_cholesky_ex",
    "host_cholesky_preferred",
    "host_lower_gram",
]

#: Below this many multiply-adds (``rows * width**2``) PyTorch's own product is used:
#: the host call's fixed cost (tens of microseconds) would outweigh what it saves.
HOST_SYRK_MIN_WORK = 1 << 22

#: Below this order PyTorch's own Cholesky factorisation is used (same reason).
HOST_CHOLESKY_MIN_SIZE = 256

_HOST_DTYPES = (torch.float32, torch.float64)


@functools.cache
def _thread_controller() -> Any:
    """A :mod:`threadpoolctl` controller of the loaded native thread pools (built once,
    after SciPy's BLAS is loaded, so that it is among them)."""
    import scipy.linalg  # noqa: F401  (loads the BLAS / LAPACK the host kernels call)
    from threadpoolctl import ThreadpoolController

    return ThreadpoolController()


@functools.cache
def _syrk(dtype: torch.dtype) -> Any:
    """SciPy's ``ssyrk`` / ``dsyrk`` for ``dtype``."""
    from scipy.linalg import blas

    return blas.ssyrk if dtype == torch.float32 else blas.dsyrk


@functools.cache
def _potrf(dtype: torch.dtype) -> Any:
    """SciPy's ``spotrf`` / ``dpotrf`` for ``dtype``."""
    from scipy.linalg import lapack

    return lapack.spotrf if dtype == torch.float32 else lapack.dpotrf


@functools.cache
def host_cholesky_preferred() -> bool:
    """Whether SciPy's ``?potrf`` beats ``torch.linalg.cholesky_ex`` on this CPU: not
    where PyTorch dispatches AVX-512 kernels (measured, float64, one thread, orders
    500 / 1000 / 2000: 1.67 / 10.15 / 78.0 ms for the host routine against 1.14 / 7.72 /
    53.1 ms for PyTorch's on an AVX-512 Xeon; on an earlier machine 1.6 / 10.2 / 69 ms
    against 2.1 / 13.1 / 92 ms). Decided once per process from the CPU alone, so that
    every run on a machine takes the same path (bit-for-bit reproducible)."""
    return torch.backends.cpu.get_cpu_capability() != "AVX512"


def _eligible(a: Tensor) -> bool:
    """Whether ``a`` can go through the host BLAS: a plain float32 / float64 CPU matrix
    outside autograd and compilation, while PyTorch runs one intra-op thread."""
    if a.device.type != "cpu" or a.dtype not in _HOST_DTYPES or a.ndim != 2:
        return False
    if torch.compiler.is_compiling() or torch.compiler.is_exporting():
        return False
    if a.requires_grad and torch.is_grad_enabled():
        return False
    if torch.get_num_threads() != 1:  # two thread pools would oversubscribe the cores
        return False
    # Subclasses (fake, functional, batched tensors) keep PyTorch's path.
    return type(a) is Tensor or type(a) is torch.nn.Parameter


def _host_threads() -> Any:
    """A context running the host BLAS on one thread (its default is every core)."""
    return _thread_controller().limit(limits=1, user_api="blas")


def host_lower_gram(a: Tensor) -> Tensor | None:
    """The lower triangle of ``a^T a`` by the host BLAS, or ``None`` when not applicable.

    Runs the BLAS on one thread (its thread count is restored afterwards), and only
    when PyTorch does too (``torch.get_num_threads() == 1``). Not differentiable: callers use
    it inside a custom ``backward`` or without gradients (``None`` is returned otherwise).

    Args:
        a (Tensor[B, J]): the matrix (any strides).

    Returns:
        Tensor[J, J] | None: ``a^T a`` on and below the diagonal, zeros above (row-major
        strides), in ``a``'s dtype; ``None`` for CUDA tensors, other dtypes, tensors that
        need gradients, compiled or exported code, several PyTorch threads and small
        products.
    """
    if not _eligible(a) or a.shape[0] * a.shape[1] ** 2 < HOST_SYRK_MIN_WORK:
        return None
    a = a.detach()
    # A row-major [B, J] array is a column-major [J, B] one: C = A A^T, no copy.
    if a.is_contiguous():
        operand, trans = a.numpy().T, 0
    elif a.mT.is_contiguous():
        operand, trans = a.numpy(), 1
    else:
        operand, trans = a.contiguous().numpy().T, 0
    # The upper triangle in column-major order is the lower one in row-major order:
    # LAPACK-backed routines downstream (PyTorch's Cholesky) run faster on the latter.
    with _host_threads():
        gram = _syrk(a.dtype)(1.0, operand, trans=trans, lower=0)
    return torch.from_numpy(gram).mT


def host_cholesky_ex(matrix: Tensor) -> tuple[Tensor, Tensor] | None:
    """``torch.linalg.cholesky_ex(matrix)`` by the host LAPACK, or ``None`` when not
    applicable (see :func:`host_lower_gram`) or not the faster routine on this CPU
    (:func:`host_cholesky_preferred`).

    Reads the lower triangle only, like PyTorch's. A non-finite pivot counts as a
    failure (``info`` = its 1-based index), as in PyTorch: the host routine itself
    reports success on NaN input.

    Args:
        matrix (Tensor[n, n]): symmetric matrix.

    Returns:
        tuple[Tensor[n, n], Tensor[]] | None: the lower factor (zeros above) and ``info``
        (int32, 0 on success), as ``torch.linalg.cholesky_ex`` returns them.
    """
    if not _eligible(matrix) or matrix.shape[0] != matrix.shape[1]:
        return None
    if matrix.shape[0] < HOST_CHOLESKY_MIN_SIZE or not host_cholesky_preferred():
        return None
    matrix = matrix.detach()
    with _host_threads():
        if matrix.is_contiguous():
            # Row-major: the column-major transpose, whose upper triangle is this lower
            # one, factorised as U^T U in place of a copy; L = U^T.
            factor, info = _potrf(matrix.dtype)(matrix.numpy().T, lower=0, clean=1)
            result = torch.from_numpy(factor).mT
        else:
            factor, info = _potrf(matrix.dtype)(matrix.numpy(), lower=1, clean=1)
            result = torch.from_numpy(factor)
    if info == 0:
        bad = (~torch.isfinite(result.diagonal())).nonzero()
        info = int(bad[0, 0]) + 1 if len(bad) else 0
    return result, torch.tensor(max(info, 0), dtype=torch.int32)
