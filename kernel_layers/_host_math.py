"""Float32 cosine and sine by NumPy's AVX-512 loops where they beat PyTorch's (CPU).

The Fourier map ``cos(x W + b)`` and its backward's ``sin`` are a visible part of a DI
step at small sizes. On an AMD EPYC with AVX-512 (2026-11-28, one thread) NumPy's
float32 ``cos`` took 0.27 ms for 500,000 values against 0.65 ms for ``torch.cos``, and
the Fourier step at ``(1000, 54, 500)`` ran 0.83 ms (9 %) faster with NumPy's ``cos``
and ``sin`` (ten alternating pairs of processes, 200 steps each; benchmarks/README.md).
NumPy's loops are within 1.5 units in the last place (7.1e-8 absolute) against 0.6
(3.6e-8) for PyTorch's, below the float32 rounding of the argument ``x W + b`` itself
once ``|x W + b| > 1``.

They serve only where NumPy dispatches its AVX-512 code for both functions
(:func:`numpy_trig_preferred`; other CPUs were not measured), and only while PyTorch
runs one intra-op thread: NumPy's loops are single-threaded, and beside PyTorch's two
threads the step took the same time either way. Tensors that need gradients, other
dtypes and devices, and compiled, exported, traced or scripted code keep PyTorch's
functions.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import numpy as np
import torch
from torch import Tensor

__all__ = ["HOST_TRIG_MIN_SIZE", "cos", "numpy_trig_preferred", "sin"]

#: Below this many elements PyTorch's functions are used: NumPy's call costs about 6 µs
#: more (one thread, the EPYC above: 8.3 against 2.6 µs for 1024 values, 18.6 against
#: 22.7 µs for 16384).
HOST_TRIG_MIN_SIZE = 1 << 14

#: The NumPy targets that count as its AVX-512 code (names before and since NumPy 2.4).
_AVX512_TARGETS = ("AVX512F", "AVX512_SKX", "AVX512_CLX", "AVX512_CNL", "AVX512_ICL", "X86_V4")


@functools.cache
def numpy_trig_preferred() -> bool:
    """Whether NumPy's float32 ``cos`` and ``sin`` both run AVX-512 loops on this CPU, as
    :func:`numpy.lib.introspect.opt_func_info` reports (NumPy 2.0 or later; ``False``
    where it is missing, fails or names other targets). Decided once per process."""
    try:
        from numpy.lib.introspect import opt_func_info

        report = opt_func_info(func_name="^(cos|sin)$", signature="float32")
        targets = [str(report[name]["ff"]["current"]) for name in ("cos", "sin")]
    except Exception:  # NumPy 1.x, or an introspection API of another shape
        return False
    return all(target in _AVX512_TARGETS for target in targets)


def _eligible(x: Tensor) -> bool:
    """Whether ``x`` can go through NumPy: a plain float32 CPU tensor of at least
    :data:`HOST_TRIG_MIN_SIZE` elements outside autograd, compilers and tracers, while
    PyTorch runs one intra-op thread, on a CPU where NumPy's loops are the faster ones."""
    if x.device.type != "cpu" or x.dtype != torch.float32 or type(x) is not Tensor:
        return False
    if x.numel() < HOST_TRIG_MIN_SIZE:
        return False
    if x.requires_grad and torch.is_grad_enabled():
        return False
    if torch.compiler.is_compiling() or torch.compiler.is_exporting():
        return False
    if torch.jit.is_tracing() or torch.jit.is_scripting():
        return False
    return torch.get_num_threads() == 1 and numpy_trig_preferred()


def _apply(ufunc: np.ufunc, fallback: Callable[[Tensor], Tensor], x: Tensor) -> Tensor:
    if not _eligible(x):
        return fallback(x)
    try:
        values = x.detach().numpy()
    except (RuntimeError, TypeError):  # no plain storage (e.g. a functorch wrapper)
        return fallback(x)
    out = torch.empty(x.shape, dtype=x.dtype)
    with np.errstate(invalid="ignore"):  # cos(inf) = nan, silently as in PyTorch
        ufunc(values, out=out.numpy())
    return out


def cos(x: Tensor) -> Tensor:
    """``torch.cos(x)``, by NumPy's loop where it serves (see the module's notes).

    Args:
        x (Tensor[...]): any shape and strides.

    Returns:
        Tensor[...]: a new tensor (row-major when NumPy serves).
    """
    return _apply(np.cos, torch.cos, x)


def sin(x: Tensor) -> Tensor:
    """``torch.sin(x)``, by NumPy's loop where it serves (see :func:`cos`)."""
    return _apply(np.sin, torch.sin, x)
