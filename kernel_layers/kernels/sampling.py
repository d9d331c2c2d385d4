"""Random Fourier frequencies drawn from a registered kernel's spectral law."""

from __future__ import annotations

import torch
from torch import Tensor

from kernel_layers._validation import check_positive
from kernel_layers.kernels.registry import Kernel, get_kernel

__all__ = ["UNIFORM_EPS", "sample_frequencies", "spectral_quantiles"]

#: Uniform draws are kept inside ``[UNIFORM_EPS, 1 - UNIFORM_EPS]`` so that quantiles
#: with unbounded support (``erfinv``, ``tan``, ``log``) stay finite.
UNIFORM_EPS = 1e-12


def spectral_quantiles(
    kernel: str | Kernel,
    in_features: int,
    out_features: int,
    *,
    generator: torch.Generator | None = None,
    dtype: torch.dtype | None = None,
    device: torch.device | str | None = None,
) -> Tensor:
    """Standardised spectral draws ``h(Omega)``, ``Omega ~ U(0, 1)``, of a kernel.

    The base frequencies of Fourier kernel learning: ``W = diag(sigma) h(Omega)`` has
    the kernel's spectral law when every ``sigma_i = scale(gamma)``. ``Omega`` is drawn
    in float64 on the CPU (so a seed gives the same draw on every device and dtype),
    exactly as in :func:`sample_frequencies`.

    Args:
        kernel: a spectral kernel's name or :class:`Kernel`.
        in_features: input dimension ``D``.
        out_features: number of frequencies ``J``.
        generator: a CPU ``torch.Generator`` for reproducible draws.
        dtype: dtype of the result (default: ``torch.get_default_dtype()``).
        device: device of the result.

    Returns:
        Tensor[D, J]: ``h(Omega)``.
    """
    spec = get_kernel(kernel, owner="spectral_quantiles", spectral=True)
    return _quantiles(spec, in_features, out_features, generator).to(
        dtype=dtype or torch.get_default_dtype(), device=device
    )


def _quantiles(
    spec: Kernel, in_features: int, out_features: int, generator: torch.Generator | None
) -> Tensor:
    u = torch.rand(in_features, out_features, generator=generator, dtype=torch.float64)
    assert spec.quantile is not None  # get_kernel(..., spectral=True) checked it
    return spec.quantile(u.clamp(UNIFORM_EPS, 1.0 - UNIFORM_EPS))


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
        Tensor[D, J]: the frequencies ``W`` (of the transformed inputs, for kernels
        with an input :attr:`~Kernel.transform`).
    """
    spec = get_kernel(kernel, owner="sample_frequencies", spectral=True)
    gamma = check_positive("sample_frequencies", "gamma", gamma)
    assert spec.scale is not None  # get_kernel(..., spectral=True) checked it
    w = spec.scale(gamma) * _quantiles(spec, in_features, out_features, generator)
    return w.to(dtype=dtype or torch.get_default_dtype(), device=device)
