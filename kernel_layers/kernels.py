"""Kernel functions, their spectral distributions and a registry to look them up by name.

A shift-invariant kernel ``k(x, y) = kappa(x - y)`` is, by Bochner's theorem, the
Fourier transform of a probability density ``p(w)``:
``k(x, y) = E_w[cos(w^T (x - y))]``. Random Fourier features draw ``w`` from
``p``; learning frequencies as ``W = diag(sigma) h(Omega)`` with ``Omega ~ U(0, 1)``
(Bazavan, Li and Sminchisescu, "Fourier kernel learning", ECCV 2012) needs the
*quantile* ``h`` of the standardised one-dimensional spectral law and the scale
``sigma(gamma)`` that matches the kernel's bandwidth, so each registered kernel
carries both.

Conventions follow scikit-learn: Gaussian ``k(x, y) = exp(-gamma ||x - y||^2)``
(spectral law ``N(0, 2 gamma I)``) and Laplacian
``k(x, y) = exp(-gamma ||x - y||_1)`` (independent Cauchy frequencies of scale
``gamma``).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

__all__ = [
    "Kernel",
    "available_kernels",
    "gaussian_kernel",
    "get_kernel",
    "laplacian_kernel",
    "register_kernel",
    "sample_frequencies",
    "squared_distances",
]

#: Uniform draws are kept inside ``[UNIFORM_EPS, 1 - UNIFORM_EPS]`` so that quantiles
#: with unbounded support (``erfinv``, ``tan``) stay finite.
UNIFORM_EPS = 1e-12

KernelMatrix = Callable[[Tensor, Tensor, float], Tensor]


def _as_matrix(x: Tensor) -> tuple[Tensor, tuple[int, ...]]:
    """Flatten ``[..., D]`` to ``[N, D]`` and return the leading shape."""
    return x.reshape(-1, x.shape[-1]), tuple(x.shape[:-1])


def squared_distances(x: Tensor, z: Tensor) -> Tensor:
    """Squared Euclidean distances from one matrix product (not differentiable).

    ``||x - z||^2 = ||x||^2 + ||z||^2 - 2 x^T z``, built in place on the product's
    buffer, clamped at 0 against round-off; no ``[B, n, D]`` tensor is formed. When
    ``z`` is ``x`` the diagonal is exactly 0. Differentiate through
    :func:`gaussian_kernel` instead.

    Args:
        x (Tensor[B, D]): first set of points.
        z (Tensor[n, D]): second set of points.

    Returns:
        Tensor[B, n]: ``d[i, j] = ||x_i - z_j||^2 >= 0``.
    """
    with torch.no_grad():
        x_sq = (x * x).sum(dim=-1, keepdim=True)
        z_sq = (z * z).sum(dim=-1)
        d = torch.addmm(z_sq, x, z.mT, alpha=-2.0).add_(x_sq).clamp_min_(0.0)
        if x is z:
            d.diagonal().zero_()
    return d


class _GaussianKernel(torch.autograd.Function):
    """``exp(-gamma ||x - z||^2)`` with one allocation forward and a fused backward.

    Forward: ``G = exp(-gamma (||x||^2 + ||z||^2 - 2 x z^T)^+)`` in place on the
    product's buffer. Backward, with ``E = dL/dG * G * (-gamma)``:
    ``dx = 2 (x * rowsum(E) - E z)``, ``dz = 2 (z * colsum(E) - E^T x)``.
    """

    @staticmethod
    def forward(ctx, x: Tensor, z: Tensor, gamma: float, symmetric: bool) -> Tensor:  # type: ignore[override]
        g = squared_distances(x, x if symmetric else z).mul_(-gamma).exp_()
        ctx.save_for_backward(x, z, g)
        ctx.gamma = gamma
        return g

    @staticmethod
    def backward(ctx, grad: Tensor):  # type: ignore[override]
        x, z, g = ctx.saved_tensors
        e = grad * g
        e.mul_(-2.0 * ctx.gamma)
        grad_x = grad_z = None
        if ctx.needs_input_grad[0]:
            grad_x = torch.addmm(x * e.sum(1, keepdim=True), e, z, alpha=-1.0)
        if ctx.needs_input_grad[1]:
            grad_z = torch.addmm(z * e.sum(0)[:, None], e.mT, x, alpha=-1.0)
        return grad_x, grad_z, None, None


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
    return _GaussianKernel.apply(x, z, float(gamma), x is z)


def laplacian_kernel(x: Tensor, z: Tensor, gamma: float) -> Tensor:
    """Laplacian kernel matrix ``exp(-gamma ||x - z||_1)`` (scikit-learn's convention).

    The L1 distances come from ``torch.cdist(p=1)``, which loops over pairs without
    forming a ``[B, n, D]`` tensor.

    Args:
        x (Tensor[B, D]): first set of points.
        z (Tensor[n, D]): second set of points.
        gamma: inverse bandwidth, ``> 0``.

    Returns:
        Tensor[B, n]: the kernel matrix, entries in ``(0, 1]``.
    """
    return torch.exp(torch.cdist(x, z, p=1.0) * (-gamma))


def _gaussian_quantile(u: Tensor) -> Tensor:
    """Quantile of the standard normal law, ``sqrt(2) erfinv(2u - 1)``."""
    return math.sqrt(2.0) * torch.erfinv(2.0 * u - 1.0)


def _cauchy_quantile(u: Tensor) -> Tensor:
    """Quantile of the standard Cauchy law, ``tan(pi (u - 1/2))``."""
    return torch.tan(math.pi * (u - 0.5))


@dataclass(frozen=True)
class Kernel:
    """A named kernel: its matrix function and, if shift-invariant, its spectral law.

    Attributes:
        name: registry key.
        matrix: ``matrix(x, z, gamma) -> Tensor[B, n]`` for ``x (Tensor[B, D])``,
            ``z (Tensor[n, D])``.
        quantile: quantile ``h(u)`` of the standardised 1-D spectral law, or ``None``
            when the kernel has no random Fourier map.
        scale: ``scale(gamma)``, the frequency scale so that ``scale(gamma) * h(U)``
            has the kernel's spectral law.
    """

    name: str
    matrix: KernelMatrix
    quantile: Callable[[Tensor], Tensor] | None = None
    scale: Callable[[float], float] | None = None

    @property
    def has_spectrum(self) -> bool:
        """Whether random Fourier features exist for this kernel."""
        return self.quantile is not None and self.scale is not None


_REGISTRY: dict[str, Kernel] = {}


def register_kernel(kernel: Kernel, *, overwrite: bool = False) -> Kernel:
    """Add ``kernel`` to the registry so layers accept ``kernel=kernel.name``.

    Raises:
        ValueError: the name is taken and ``overwrite`` is false.
    """
    if kernel.name in _REGISTRY and not overwrite:
        raise ValueError(
            f"register_kernel: argument 'kernel' must have a new name, "
            f"got {kernel.name!r} which is already registered"
        )
    _REGISTRY[kernel.name] = kernel
    return kernel


def available_kernels(*, spectral: bool = False) -> list[str]:
    """Names of the registered kernels (only those with a spectral law if ``spectral``)."""
    return sorted(k for k, v in _REGISTRY.items() if v.has_spectrum or not spectral)


def get_kernel(name: str | Kernel, *, owner: str = "get_kernel", spectral: bool = False) -> Kernel:
    """Look a kernel up by name.

    Args:
        name: a registered name, or a :class:`Kernel` (returned as is).
        owner: the caller's name for error messages.
        spectral: require a spectral law (for random Fourier features).

    Raises:
        ValueError: unknown name, or no spectral law when one is required; the message
            lists the valid options.
    """
    kernel = name if isinstance(name, Kernel) else _REGISTRY.get(name)  # type: ignore[arg-type]
    if kernel is None:
        raise ValueError(
            f"{owner}: argument 'kernel' must be one of {available_kernels()}, got {name!r}"
        )
    if spectral and not kernel.has_spectrum:
        raise ValueError(
            f"{owner}: argument 'kernel' must have a spectral law (one of "
            f"{available_kernels(spectral=True)}), got {kernel.name!r}"
        )
    return kernel


register_kernel(
    Kernel(
        "gaussian",
        gaussian_kernel,
        quantile=_gaussian_quantile,
        scale=lambda gamma: math.sqrt(2.0 * gamma),
    )
)
register_kernel(
    Kernel("laplacian", laplacian_kernel, quantile=_cauchy_quantile, scale=lambda gamma: gamma)
)


def sample_frequencies(
    kernel: str | Kernel,
    in_features: int,
    out_features: int,
    gamma: float,
    *,
    generator: torch.Generator | None = None,
    dtype: torch.dtype | None = None,
    device: torch.device | str | None = None,
) -> Tensor:
    """Draw random Fourier frequencies from the kernel's spectral law.

    Each entry is ``scale(gamma) * h(u)`` with ``u ~ U(0, 1)`` drawn in float64 on the
    CPU (so a seed gives the same draw on every device and dtype), then cast.

    Args:
        kernel: a spectral kernel's name or :class:`Kernel`.
        in_features: input dimension ``D``.
        out_features: number of frequencies ``J``.
        gamma: the kernel's bandwidth parameter.
        generator: a CPU ``torch.Generator`` for reproducible draws.
        dtype: dtype of the result (default: ``torch.get_default_dtype()``).
        device: device of the result.

    Returns:
        Tensor[D, J]: the frequencies ``W``.
    """
    spec = get_kernel(kernel, owner="sample_frequencies", spectral=True)
    u = torch.rand(in_features, out_features, generator=generator, dtype=torch.float64)
    u = u.clamp(UNIFORM_EPS, 1.0 - UNIFORM_EPS)
    w = spec.scale(gamma) * spec.quantile(u)  # type: ignore[misc]
    return w.to(dtype=dtype or torch.get_default_dtype(), device=device)
