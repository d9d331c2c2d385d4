"""Symmetric kernels of DI's solve by the host BLAS / LAPACK that SciPy exposes (CPU).

PyTorch has no ``syrk``: on the CPU its Gram matrix ``a^T a`` is a general product,
twice the multiply-adds the symmetric result needs. SciPy's BLAS ``?syrk`` computes
one triangle only; on the machine measured it forms the ``[1000, 1000]`` Gram of a
``[2000, 1000]`` matrix in 41 ms (float64) and 22 ms (float32), against 75 ms / 36 ms
for a block-triangular product in PyTorch and 86 ms / 45 ms for the full product. Its
LAPACK ``?potrf`` factorises a float64 ``[1000, 1000]`` matrix in 10.2 ms against
13.1 ms for ``torch.linalg.cholesky_ex`` (one thread each, benchmarks/README.md). Where
PyTorch runs AVX-512 kernels on an Intel CPU its own LAPACK (MKL in the x86 wheels) is
the faster one (7.7 ms against 10.2 ms on an AVX-512 Xeon, 2026-11-25), so the host
Cholesky serves the other CPUs only, AMD's AVX-512 ones among them
(:func:`host_cholesky_preferred`); the host ``syrk`` wins on both (15.0 ms against
23.3 ms for PyTorch's full float32 product on that Xeon).

Both serve DI's forward pass only (inside a custom autograd function, no graph), and
only while PyTorch runs one intra-op thread (``torch.set_num_threads(1)``, as in
single-threaded and one-process-per-core data-parallel runs): next to PyTorch's
OpenMP threads a second pool of BLAS threads oversubscribes the cores (measured on 2
cores with 2 threads each: a DI step at ``(1000, 64, 100)`` took 15.9 ms against 2.8 ms
with PyTorch's kernels alone). Tensors that need gradients, CUDA tensors, compiled or
exported code, several intra-op threads and small inputs keep PyTorch's own kernels
(the functions return ``None``).

Elsewhere the Cholesky factorisation calls the LAPACK ``?potrf`` that PyTorch itself
links (MKL in the x86-64 Linux wheels; :func:`pytorch_potrf`) directly on a row-major
copy of the lower triangle. ``torch.linalg.cholesky_ex`` runs the same routine, but on
the CPU it first copies the matrix into a column-major buffer and cleans its upper
triangle through two more transposing copies; inside a DI step, where these buffers
are out of cache, that took longer than the factorisation itself (float32, order 500:
a Fourier step at (1000, 54, 500) 0.7-1.3 ms faster, at (2000, 784, 1000) 3.9 ms;
benchmarks/README.md). That routine shares PyTorch's thread pool, so it serves any
thread count.
"""

from __future__ import annotations

import ctypes
import functools
import os
import sys
from typing import Any

import torch
from torch import Tensor

__all__ = [
    "HOST_CHOLESKY_MIN_SIZE",
    "HOST_SYRK_MIN_WORK",
    "cpu_vendor",
    "host_cholesky_ex",
    "host_cholesky_preferred",
    "host_lower_gram",
    "pytorch_potrf",
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


def cpu_vendor(path: str = "/proc/cpuinfo") -> str:
    """The CPU's vendor string (``GenuineIntel``, ``AuthenticAMD``, ...) from Linux's
    ``/proc/cpuinfo`` (``path``), or ``""`` where that file is missing or does not say."""
    try:
        with open(path, encoding="ascii", errors="replace") as info:
            for line in info:
                if line.startswith("vendor_id"):
                    return line.partition(":")[2].strip()
    except OSError:
        pass
    return ""


@functools.cache
def host_cholesky_preferred() -> bool:
    """Whether SciPy's ``?potrf`` beats ``torch.linalg.cholesky_ex`` on this CPU: not
    on an Intel CPU where PyTorch dispatches AVX-512 kernels (measured, float64, one
    thread, orders 500 / 1000 / 2000: 1.67 / 10.15 / 78.0 ms for the host routine
    against 1.14 / 7.72 / 53.1 ms for PyTorch's MKL on an AVX-512 Xeon; on an earlier
    machine 1.6 / 10.2 / 69 ms against 2.1 / 13.1 / 92 ms), and so on an AMD CPU with
    AVX-512 as well, where MKL does not take its fast paths (an AVX-512 EPYC: 1.55 /
    9.83 / 65.9 ms against 2.02 / 9.93 / 70.3 ms; float32 1.41 / 5.37 / 33.4 against
    1.37 / 6.29 / 39.5). Decided once per process from the CPU alone, so that every
    run on a machine takes the same path (bit-for-bit reproducible); a CPU whose vendor
    is unknown is taken for an Intel one."""
    if torch.backends.cpu.get_cpu_capability() != "AVX512":
        return True
    return cpu_vendor() not in ("", "GenuineIntel")


def _plain_cpu_matrix(a: Tensor) -> bool:
    """Whether ``a`` is a plain float32 / float64 CPU matrix outside autograd and
    compilation (what a native routine can take by its data pointer)."""
    if a.device.type != "cpu" or a.dtype not in _HOST_DTYPES or a.ndim != 2:
        return False
    if torch.compiler.is_compiling() or torch.compiler.is_exporting():
        return False
    if a.requires_grad and torch.is_grad_enabled():
        return False
    # Subclasses (fake, functional, batched tensors) keep PyTorch's path.
    return type(a) is Tensor or type(a) is torch.nn.Parameter


def _eligible(a: Tensor) -> bool:
    """Whether ``a`` can go through the host BLAS: a plain float32 / float64 CPU matrix
    outside autograd and compilation, while PyTorch runs one intra-op thread."""
    # Two thread pools would oversubscribe the cores.
    return _plain_cpu_matrix(a) and torch.get_num_threads() == 1


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


#: PyTorch's native library on Linux, whose LAPACK :func:`pytorch_potrf` looks up.
_PYTORCH_LIBRARY = os.path.join(os.path.dirname(torch.__file__), "lib", "libtorch_cpu.so")


def _lapack_int(value: int = 0) -> Any:
    """A LAPACK integer argument that both integer ABIs read alike: two zeroed 32-bit
    words, ``value`` in the first, so that an LP64 routine reads ``value`` from the
    first word and an ILP64 one reads the same value from both (little-endian)."""
    return (ctypes.c_int32 * 2)(value, 0)


def _call_potrf(routine: Any, matrix: Tensor) -> int:
    """Factorise ``matrix`` in place with a LAPACK ``?potrf`` (``routine``).

    ``matrix`` is row-major, so LAPACK sees its transpose: the column-major upper
    triangle it factorises as ``U^T U`` is the row-major lower one, which becomes
    ``L = U^T`` in place; the row-major upper triangle is not touched.

    Returns:
        int: LAPACK's ``info`` (0 on success, ``i > 0`` when the leading minor of order
        ``i`` is not positive definite).
    """
    order, info = _lapack_int(matrix.shape[0]), _lapack_int()
    # The trailing 1 is the hidden length of the string argument (Fortran ABI).
    routine(b"U", order, ctypes.c_void_p(matrix.data_ptr()), order, info, 1)
    return int(info[0])


def _passes_self_test(routine: Any, dtype: torch.dtype) -> bool:
    """Whether ``routine`` factorises a known matrix as PyTorch does and reports a
    failure where PyTorch does (a guard against a symbol of another meaning)."""
    gen = torch.Generator().manual_seed(0)
    a = torch.randn(7, 5, dtype=torch.float64, generator=gen)
    spd = (a.mT @ a + torch.eye(5, dtype=torch.float64)).to(dtype)
    factor = spd.tril()
    if _call_potrf(routine, factor) != 0:
        return False
    expected = torch.linalg.cholesky(spd)
    tol = 1e-5 if dtype == torch.float32 else 1e-12
    if not torch.allclose(factor, expected, rtol=tol, atol=tol):
        return False
    broken = spd.clone()
    broken[2, 2] = -1.0
    return _call_potrf(routine, broken.tril()) == 3


@functools.cache
def pytorch_potrf(dtype: torch.dtype) -> Any | None:
    """The LAPACK ``spotrf_`` / ``dpotrf_`` that PyTorch itself links, or ``None``.

    ``torch.linalg.cholesky_ex`` calls this routine on the CPU (MKL in the x86-64 Linux
    wheels, OpenBLAS in the aarch64 ones); calling it directly skips PyTorch's
    column-major copy and its clean-up of the upper triangle. Looked up once per dtype in
    PyTorch's native library, and kept only if it passes a self-test against
    ``torch.linalg.cholesky``; ``None`` off little-endian Linux, where the library or the
    symbol is missing, or where the self-test fails.

    Args:
        dtype: ``torch.float32`` or ``torch.float64``.

    Returns:
        The ctypes function, or ``None``.
    """
    if not sys.platform.startswith("linux") or sys.byteorder != "little":
        return None
    if dtype not in _HOST_DTYPES or not os.path.exists(_PYTORCH_LIBRARY):
        return None
    try:
        library = ctypes.CDLL(_PYTORCH_LIBRARY)  # already loaded: the same handle
        routine = getattr(library, "spotrf_" if dtype == torch.float32 else "dpotrf_")
    except (OSError, AttributeError):
        return None
    routine.argtypes = [ctypes.c_char_p] + [ctypes.c_void_p] * 4 + [ctypes.c_size_t]
    routine.restype = None
    return routine if _passes_self_test(routine, dtype) else None


def host_cholesky_ex(
    matrix: Tensor, *, overwrite: bool = False, clean: bool = True
) -> tuple[Tensor, Tensor] | None:
    """``torch.linalg.cholesky_ex(matrix)`` by a LAPACK ``?potrf`` called directly, or
    ``None`` when not applicable.

    SciPy's where it is the faster routine (:func:`host_cholesky_preferred`) and PyTorch
    runs one thread (see :func:`host_lower_gram`); otherwise PyTorch's own
    (:func:`pytorch_potrf`), at any thread count. Reads the lower triangle only, like
    PyTorch's. A non-finite pivot counts as a failure (``info`` = its 1-based index), as
    in PyTorch: a LAPACK routine may report success on NaN input.

    Args:
        matrix (Tensor[n, n]): symmetric matrix.
        overwrite: ``matrix`` may be overwritten by the factor (it is when row-major
            and PyTorch's routine serves): one copy fewer.
        clean: zero the factor's upper triangle. ``False`` leaves ``matrix``'s upper
            triangle there when it is overwritten (a pass fewer, for callers that only
            solve with the factor: triangular solves read their own triangle).

    Returns:
        tuple[Tensor[n, n], Tensor[]] | None: the lower factor (zeros above, unless
        ``clean=False`` and ``matrix`` was overwritten) and ``info``
        (int32, 0 on success), as ``torch.linalg.cholesky_ex`` returns them; ``None`` for
        CUDA tensors, other dtypes, tensors that need gradients, compiled or exported
        code, orders below :data:`HOST_CHOLESKY_MIN_SIZE`, where no routine is found and
        where PyTorch's routine refuses an argument (``info < 0``).
    """
    if not _plain_cpu_matrix(matrix) or matrix.shape[0] != matrix.shape[1]:
        return None
    if matrix.shape[0] < HOST_CHOLESKY_MIN_SIZE:
        return None
    matrix = matrix.detach()
    if host_cholesky_preferred() and torch.get_num_threads() == 1:
        result, info = _scipy_cholesky(matrix)
    else:
        routine = pytorch_potrf(matrix.dtype)
        if routine is None:
            return None
        if overwrite and matrix.is_contiguous():
            result = matrix.tril_() if clean else matrix
        else:  # a row-major copy (faster than an out-of-place tril)
            result = matrix.clone(memory_format=torch.contiguous_format).tril_()
        info = _call_potrf(routine, result)
        if info < 0:  # an argument refused (not expected after the self-test): PyTorch's
            return None
    if info == 0:
        bad = (~torch.isfinite(result.diagonal())).nonzero()
        info = int(bad[0, 0]) + 1 if len(bad) else 0
    return result, torch.tensor(max(info, 0), dtype=torch.int32)


def _scipy_cholesky(matrix: Tensor) -> tuple[Tensor, int]:
    """The lower Cholesky factor of ``matrix (Tensor[n, n])`` by SciPy's ``?potrf`` on one
    thread (zeros above), and LAPACK's ``info``."""
    with _host_threads():
        if matrix.is_contiguous():
            # Row-major: the column-major transpose, whose upper triangle is this lower
            # one, factorised as U^T U in place of a copy; L = U^T.
            factor, info = _potrf(matrix.dtype)(matrix.numpy().T, lower=0, clean=1)
            return torch.from_numpy(factor).mT, int(info)
        factor, info = _potrf(matrix.dtype)(matrix.numpy(), lower=1, clean=1)
        return torch.from_numpy(factor), int(info)
