"""Kernel matrix functions ``k(x (Tensor[B, D]), z (Tensor[n, D]), gamma, ...) -> Tensor[B, n]``.

scikit-learn's conventions where it has the kernel; see :mod:`kernel_layers.kernels` for
the list and the maths. Differentiable in both arguments; the Gaussian and product
kernels use the fused backward passes of :mod:`kernel_layers.kernels.autograd`.
"""

from __future__ import annotations

import torch
from torch import Tensor

from kernel_layers._validation import is_compiling
from kernel_layers.kernels.autograd import (
    GaussianKernelFunction,
    ProductKernelFunction,
    cauchy_factor,
    chi2_factor,
    sech_factor,
)

__all__ = [
    "DEFAULT_COEF0",
    "DEFAULT_DEGREE",
    "DEFAULT_SKEWEDNESS",
    "DOMAIN_MARGIN",
    "cauchy_kernel",
    "check_above_shift",
    "check_nonnegative_input",
    "chi2_kernel",
    "gaussian_gram",
    "gaussian_kernel",
    "laplacian_kernel",
    "linear_kernel",
    "log_shift",
    "polynomial_kernel",
    "project_above_shift",
    "project_nonnegative",
    "shifted_log",
    "skewed_chi2_kernel",
    "skewed_intersection_kernel",
]

#: Default ``c`` of the skewed kernels (scikit-learn's ``skewedness``).
DEFAULT_SKEWEDNESS = 1.0
#: Default ``degree`` and ``coef0`` of the polynomial kernel (scikit-learn's).
DEFAULT_DEGREE = 3
DEFAULT_COEF0 = 1.0


def _distinct(x: Tensor, z: Tensor) -> Tensor:
    """``z``, or a view of it when it is ``x``: an autograd function then gets two
    distinct tensor inputs (``torch.compile`` refuses the same tensor twice), and
    autograd still sums both gradients into ``x``."""
    return x.view_as(x) if z is x else z


def check_above_shift(owner: str, name: str, x: Tensor, c: float = DEFAULT_SKEWEDNESS) -> None:
    """Raise unless every entry of ``x`` is ``> -c`` (skipped under ``torch.compile``)."""
    if is_compiling() or x.numel() == 0:
        return
    low = float(x.detach().min())
    if not low > -c:
        raise ValueError(
            f"{owner}: argument '{name}' must have all entries > -c = {-c:g} (skewed "
            f"kernels act on log(x + c), c = kernel parameter 'c'), got minimum {low:g}"
        )


def check_nonnegative_input(owner: str, name: str, x: Tensor) -> None:
    """Raise unless every entry of ``x`` is ``>= 0`` (skipped under ``torch.compile``)."""
    if is_compiling() or x.numel() == 0:
        return
    low = float(x.detach().min())
    if not low >= 0.0:
        raise ValueError(
            f"{owner}: argument '{name}' must have all entries >= 0 (chi2 kernel), "
            f"got minimum {low:g}"
        )


#: The skewed kernels' projection (:func:`project_above_shift`) raises entries to
#: ``-c + DOMAIN_MARGIN * |c|`` (at least two steps of the dtype's resolution above
#: ``-c``): inside their open domain ``x > -c``.
DOMAIN_MARGIN = 1e-6


def _raise_to(x: Tensor, floor: float) -> Tensor:
    """``max(x, floor)`` whose gradient passes at ``x == floor`` (``clamp_min``'s does
    not: entries exactly on the boundary, such as the zeros of pixel data, would never
    move) and is 0 below it."""
    return x.masked_fill(x < floor, floor)


def project_nonnegative(x: Tensor) -> Tensor:
    """``x`` projected onto the chi2 kernel's domain ``x >= 0``."""
    return _raise_to(x, 0.0)


def project_above_shift(x: Tensor, c: float = DEFAULT_SKEWEDNESS) -> Tensor:
    """``x`` projected into the skewed kernels' domain ``x > -c`` (a small margin inside)."""
    info = torch.finfo(x.dtype)
    margin = max(DOMAIN_MARGIN, 2.0 * info.eps) * abs(c)
    return _raise_to(x, -c + max(margin, info.tiny))


def gaussian_kernel(x: Tensor, z: Tensor, gamma: float) -> Tensor:
    """Gaussian (RBF) kernel matrix ``exp(-gamma ||x - z||^2)``.

    Distances come from one matrix product (clamped at 0 against round-off, exactly 0
    on the diagonal when ``z`` is ``x``); the backward pass is fused (two products, no
    ``[B, n, D]`` tensor).

    Args:
        x (Tensor[B, D]): first set of points.
        z (Tensor[n, D]): second set of points.
        gamma: inverse squared bandwidth, ``> 0``.

    Returns:
        Tensor[B, n]: the kernel matrix, entries in ``(0, 1]``.
    """
    return GaussianKernelFunction.apply(x, _distinct(x, z), float(gamma), x is z)


def gaussian_gram(z: Tensor, gamma: float) -> Tensor:
    """``gaussian_kernel(z, z, gamma)`` for a consumer whose gradient to it is symmetric.

    For functions of the matrix as a symmetric one (NysDI reads ``K_Z`` through its
    Cholesky factor; its gradient ``-rho A A^T`` is symmetric): the backward takes
    ``dL/dK + dL/dK^T`` as ``2 dL/dK`` and skips the transposed sum, which costs as much
    as the kernel's other element-wise passes together on large matrices. The gradient
    it receives must be symmetric: any other is taken as twice itself instead of its sum
    with its transpose (a wrong result).

    Args:
        z (Tensor[n, D]): points.
        gamma: inverse squared bandwidth, ``> 0``.

    Returns:
        Tensor[n, n]: the kernel matrix, ones on the diagonal.
    """
    return GaussianKernelFunction.apply(z, _distinct(z, z), float(gamma), True, True)


def laplacian_kernel(x: Tensor, z: Tensor, gamma: float) -> Tensor:
    """Laplacian kernel matrix ``exp(-gamma ||x - z||_1)`` (scikit-learn's convention).

    The L1 distances come from ``torch.cdist(p=1)``, which loops over pairs without
    forming a ``[B, n, D]`` tensor (forward or backward).

    Args:
        x (Tensor[B, D]): first set of points.
        z (Tensor[n, D]): second set of points.
        gamma: inverse bandwidth, ``> 0``.

    Returns:
        Tensor[B, n]: the kernel matrix, entries in ``(0, 1]``.
    """
    if torch.compiler.is_exporting():  # ONNX has no cdist: broadcast (B x n x D memory)
        return torch.exp((x[:, None, :] - z[None, :, :]).abs().sum(-1) * (-gamma))
    return torch.exp(torch.cdist(x, z, p=1.0) * (-gamma))


def cauchy_kernel(x: Tensor, z: Tensor, gamma: float) -> Tensor:
    """Cauchy kernel matrix ``prod_i 1 / (1 + gamma (x_i - z_i)^2)``.

    The Laplacian kernel's spectral dual: its frequencies are Laplace-distributed with
    scale ``sqrt(gamma)``. Memory ``O(B n)`` forward and backward.

    Args:
        x (Tensor[B, D]): first set of points.
        z (Tensor[n, D]): second set of points.
        gamma: inverse squared bandwidth, ``> 0``.

    Returns:
        Tensor[B, n]: the kernel matrix, entries in ``(0, 1]``.
    """
    return ProductKernelFunction.apply(x, _distinct(x, z), float(gamma), *cauchy_factor)


def log_shift(
    x: Tensor, c: float = DEFAULT_SKEWEDNESS, *, owner: str = "log_shift", name: str = "x"
) -> Tensor:
    """``log(x + c)``, the input map of the skewed kernels, after checking ``x > -c``.

    Args:
        x (Tensor[..., D]): inputs, all entries ``> -c``.
        c: the shift (scikit-learn's ``skewedness``).
        owner: the caller's name for error messages.
        name: the argument's name for error messages.

    Returns:
        Tensor[..., D]: ``log(x + c)``.

    Raises:
        ValueError: an entry is ``<= -c``.
    """
    check_above_shift(owner, name, x, c)
    return shifted_log(x, c)


def shifted_log(x: Tensor, c: float = DEFAULT_SKEWEDNESS) -> Tensor:
    """``log(x + c)`` without the domain check (the skewed kernels' input transform)."""
    return torch.log(x + c)


def skewed_chi2_kernel(x: Tensor, z: Tensor, gamma: float, c: float = DEFAULT_SKEWEDNESS) -> Tensor:
    """Skewed chi-square kernel matrix ``prod_i sech(gamma (log(x_i+c) - log(z_i+c)) / 2)``.

    With ``a = x + c``, ``b = z + c`` this is
    ``prod_i 2 (a_i b_i)^(gamma/2) / (a_i^gamma + b_i^gamma)``; ``gamma = 1`` gives
    scikit-learn's :class:`~sklearn.kernel_approximation.SkewedChi2Sampler` kernel
    ``prod_i 2 sqrt(a_i b_i) / (a_i + b_i)``. Memory ``O(B n)`` forward and backward.

    Args:
        x (Tensor[B, D]): first set of points, entries ``> -c``.
        z (Tensor[n, D]): second set of points, entries ``> -c``.
        gamma: bandwidth in log space, ``> 0``.
        c: the shift (scikit-learn's ``skewedness``).

    Returns:
        Tensor[B, n]: the kernel matrix, entries in ``(0, 1]``.

    Raises:
        ValueError: an entry of ``x`` or ``z`` is ``<= -c``.
    """
    owner = "skewed_chi2_kernel"
    u = log_shift(x, c, owner=owner, name="x")
    v = u if z is x else log_shift(z, c, owner=owner, name="z")
    return ProductKernelFunction.apply(u, _distinct(u, v), float(gamma), *sech_factor)


def skewed_intersection_kernel(
    x: Tensor, z: Tensor, gamma: float, c: float = DEFAULT_SKEWEDNESS
) -> Tensor:
    """Skewed intersection kernel matrix ``exp(-gamma ||log(x + c) - log(z + c)||_1)``.

    A Laplacian kernel in log space; ``gamma = 1/2`` gives the classic
    ``prod_i min(sqrt((x_i+c)/(z_i+c)), sqrt((z_i+c)/(x_i+c)))``.

    Args:
        x (Tensor[B, D]): first set of points, entries ``> -c``.
        z (Tensor[n, D]): second set of points, entries ``> -c``.
        gamma: inverse bandwidth in log space, ``> 0``.
        c: the shift.

    Returns:
        Tensor[B, n]: the kernel matrix, entries in ``(0, 1]``.

    Raises:
        ValueError: an entry of ``x`` or ``z`` is ``<= -c``.
    """
    owner = "skewed_intersection_kernel"
    u = log_shift(x, c, owner=owner, name="x")
    v = u if z is x else log_shift(z, c, owner=owner, name="z")
    return laplacian_kernel(u, v, gamma)


def polynomial_kernel(
    x: Tensor,
    z: Tensor,
    gamma: float,
    degree: int = DEFAULT_DEGREE,
    coef0: float = DEFAULT_COEF0,
) -> Tensor:
    """Polynomial kernel matrix ``(gamma x^T z + coef0)^degree`` (scikit-learn's).

    Args:
        x (Tensor[B, D]): first set of points.
        z (Tensor[n, D]): second set of points.
        gamma: scale of the inner product, ``> 0``.
        degree: integer ``>= 1``.
        coef0: offset ``>= 0``.

    Returns:
        Tensor[B, n]: the kernel matrix.
    """
    return (x @ z.mT).mul(gamma).add(coef0).pow(int(degree))


def linear_kernel(x: Tensor, z: Tensor, gamma: float = 1.0) -> Tensor:
    """Linear kernel matrix ``x^T z`` (scikit-learn's; ``gamma`` is ignored).

    Args:
        x (Tensor[B, D]): first set of points.
        z (Tensor[n, D]): second set of points.
        gamma: ignored (the registry passes every kernel a ``gamma``).

    Returns:
        Tensor[B, n]: the kernel matrix.
    """
    return x @ z.mT


def chi2_kernel(x: Tensor, z: Tensor, gamma: float) -> Tensor:
    """Exponential chi-square kernel ``exp(-gamma sum_i (x_i - z_i)^2 / (x_i + z_i))``.

    scikit-learn's ``chi2_kernel`` (terms with ``x_i + z_i = 0`` count 0), for
    non-negative inputs such as histograms. Memory ``O(B n)`` forward and backward.

    Args:
        x (Tensor[B, D]): first set of points, entries ``>= 0``.
        z (Tensor[n, D]): second set of points, entries ``>= 0``.
        gamma: ``> 0``.

    Returns:
        Tensor[B, n]: the kernel matrix, entries in ``(0, 1]``.

    Raises:
        ValueError: an entry of ``x`` or ``z`` is negative.
    """
    check_nonnegative_input("chi2_kernel", "x", x)
    if z is not x:
        check_nonnegative_input("chi2_kernel", "z", z)
    return ProductKernelFunction.apply(x, _distinct(x, z), float(gamma), *chi2_factor)
