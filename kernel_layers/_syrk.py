"""The lower triangle of a Gram matrix by the host BLAS's symmetric rank-k update.

PyTorch has no ``syrk``: on the CPU its Gram matrix ``a^T a`` is a general product,
twice the multiply-adds the symmetric result needs. SciPy exposes the BLAS ``?syrk``
routines, which compute one triangle only; on the machine measured they form the
``[1000, 1000]`` Gram of a ``[2000, 1000]`` matrix in 45 ms (float64) and 25 ms
(float32), against 75 ms / 36 ms for a block-triangular product in PyTorch and
92 ms / 57 ms for the full product (one thread each, benchmarks/README.md).
"""

from __future__ import annotations

import functools
from typing import Any

import torch
from torch import Tensor

__all__ = ["HOST_SYRK_MIN_WORK", "host_lower_gram"]

#: Below this many multiply-adds (``rows * width**2``) PyTorch's own product is used:
#: the host call's fixed cost (tens of microseconds) would outweigh what it saves.
HOST_SYRK_MIN_WORK = 1 << 22

_HOST_DTYPES = (torch.float32, torch.float64)


@functools.cache
def _thread_controller() -> Any:
    """A :mod:`threadpoolctl` controller of the loaded native thread pools (built once)."""
    from threadpoolctl import ThreadpoolController

    return ThreadpoolController()


@functools.cache
def _syrk(dtype: torch.dtype) -> Any:
    """SciPy's ``ssyrk`` / ``dsyrk`` for ``dtype``."""
    from scipy.linalg import blas

    return blas.ssyrk if dtype == torch.float32 else blas.dsyrk


def _eligible(a: Tensor) -> bool:
    """Whether ``a`` can go through the host BLAS: a plain float32 / float64 CPU matrix
    outside autograd and compilation, large enough for the call to pay off."""
    if a.device.type != "cpu" or a.dtype not in _HOST_DTYPES or a.ndim != 2:
        return False
    if torch.compiler.is_compiling() or torch.compiler.is_exporting():
        return False
    if a.requires_grad and torch.is_grad_enabled():
        return False
    if type(a) is not Tensor and not isinstance(a, torch.nn.Parameter):
        return False  # subclasses (fake, functional, batched tensors) keep PyTorch's path
    rows, width = a.shape
    return rows * width * width >= HOST_SYRK_MIN_WORK


def host_lower_gram(a: Tensor) -> Tensor | None:
    """The lower triangle of ``a^T a`` by the host BLAS, or ``None`` when not applicable.

    Runs with as many BLAS threads as PyTorch's intra-op pool
    (``torch.get_num_threads()``), restored afterwards. Not differentiable: callers use
    it inside a custom ``backward`` or without gradients (``None`` is returned otherwise).

    Args:
        a (Tensor[B, J]): the matrix (any strides).

    Returns:
        Tensor[J, J] | None: ``a^T a`` on and below the diagonal, zeros above (column-major
        strides), in ``a``'s dtype; ``None`` for CUDA tensors, other dtypes, tensors that
        need gradients, compiled or exported code and small products.
    """
    if not _eligible(a):
        return None
    a = a.detach()
    # A row-major [B, J] array is a column-major [J, B] one: C = A A^T, no copy.
    if a.is_contiguous():
        operand, trans = a.numpy().T, 0
    elif a.mT.is_contiguous():
        operand, trans = a.numpy(), 1
    else:
        operand, trans = a.contiguous().numpy().T, 0
    with _thread_controller().limit(limits=torch.get_num_threads(), user_api="blas"):
        gram = _syrk(a.dtype)(1.0, operand, trans=trans, lower=1)
    return torch.from_numpy(gram)
