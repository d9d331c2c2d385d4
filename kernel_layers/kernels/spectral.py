"""Spectral laws of the shift-invariant kernels: quantiles ``h(u)`` and scales ``sigma(gamma)``.

By Bochner's theorem ``k(x, y) = E_w[cos(w^T (x - y))]`` for ``w`` drawn from the
kernel's spectral density; ``sigma(gamma) * h(U)``, ``U ~ U(0, 1)``, has that law
(Bazavan, Li and Sminchisescu, "Fourier kernel learning", ECCV 2012).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

__all__ = [
    "cauchy_quantile",
    "gaussian_quantile",
    "half_gamma",
    "laplace_quantile",
    "same_gamma",
    "sech_quantile",
    "sqrt_gamma",
    "sqrt_two_gamma",
]


def gaussian_quantile(u: Tensor) -> Tensor:
    """Quantile of the standard normal law, ``sqrt(2) erfinv(2u - 1)``."""
    return math.sqrt(2.0) * torch.erfinv(2.0 * u - 1.0)


def cauchy_quantile(u: Tensor) -> Tensor:
    """Quantile of the standard Cauchy law, ``tan(pi (u - 1/2))``."""
    return torch.tan(math.pi * (u - 0.5))


def laplace_quantile(u: Tensor) -> Tensor:
    """Quantile of the standard Laplace law, ``-sign(u - 1/2) log(1 - 2 |u - 1/2|)``."""
    v = u - 0.5
    return -torch.sign(v) * torch.log1p(-2.0 * v.abs())


def sech_quantile(u: Tensor) -> Tensor:
    """Quantile of the density ``sech(pi w / 2) / 2`` (spectral law of ``sech(t)``).

    ``(2/pi) log tan(pi u / 2)``; scaled by ``1/2`` it is scikit-learn's
    ``SkewedChi2Sampler`` draw ``(1/pi) log tan(pi u / 2)``.
    """
    return (2.0 / math.pi) * torch.log(torch.tan(0.5 * math.pi * u))


def sqrt_two_gamma(gamma: float) -> float:
    return math.sqrt(2.0 * gamma)


def sqrt_gamma(gamma: float) -> float:
    return math.sqrt(gamma)


def same_gamma(gamma: float) -> float:
    return gamma


def half_gamma(gamma: float) -> float:
    return 0.5 * gamma
