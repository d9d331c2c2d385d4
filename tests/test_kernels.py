"""Kernel matrices, spectral samplers and the registry."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from kernel_layers.kernels import (
    Kernel,
    available_kernels,
    gaussian_kernel,
    get_kernel,
    laplacian_kernel,
    register_kernel,
    sample_frequencies,
    squared_distances,
)
from tests import references as ref


def test_gaussian_matches_reference() -> None:
    x, z = torch.rand(9, 4, dtype=torch.float64), torch.rand(6, 4, dtype=torch.float64)
    want = ref.gaussian(x.numpy(), z.numpy(), 0.3)
    np.testing.assert_allclose(gaussian_kernel(x, z, 0.3).numpy(), want, rtol=1e-12)


def test_laplacian_matches_reference() -> None:
    x, z = torch.rand(9, 4, dtype=torch.float64), torch.rand(6, 4, dtype=torch.float64)
    want = ref.laplacian(x.numpy(), z.numpy(), 0.3)
    np.testing.assert_allclose(laplacian_kernel(x, z, 0.3).numpy(), want, rtol=1e-12)


def test_squared_distances_clamped_and_exact_diagonal() -> None:
    # Large offsets make ||x||^2 + ||z||^2 - 2 x.z cancel; the result must stay >= 0.
    x = 1e4 + torch.rand(50, 3)
    d = squared_distances(x, x)
    assert (d >= 0).all()
    assert (d.diagonal() == 0).all()
    dup = squared_distances(x, x.clone())
    assert (dup >= 0).all()


def test_sklearn_gamma_convention() -> None:
    from sklearn.metrics.pairwise import laplacian_kernel as sk_lap
    from sklearn.metrics.pairwise import rbf_kernel

    rng = np.random.default_rng(0)
    x, z = rng.random((5, 3)), rng.random((4, 3))
    tx, tz = torch.tensor(x), torch.tensor(z)
    np.testing.assert_allclose(gaussian_kernel(tx, tz, 0.7).numpy(), rbf_kernel(x, z, gamma=0.7))
    np.testing.assert_allclose(laplacian_kernel(tx, tz, 0.7).numpy(), sk_lap(x, z, gamma=0.7))


def test_sample_frequencies_seeded_and_cast() -> None:
    a = sample_frequencies("gaussian", 3, 5, 1.0, generator=torch.Generator().manual_seed(0))
    b = sample_frequencies(
        "gaussian", 3, 5, 1.0, generator=torch.Generator().manual_seed(0), dtype=torch.float64
    )
    assert a.dtype == torch.float32 and b.dtype == torch.float64
    torch.testing.assert_close(a.double(), b, rtol=1e-6, atol=1e-7)


def test_registry_lists_and_rejects() -> None:
    assert {"gaussian", "laplacian"} <= set(available_kernels())
    assert get_kernel("gaussian").has_spectrum
    with pytest.raises(ValueError, match=r"get_kernel: argument 'kernel' must be one of \["):
        get_kernel("nope")
    with pytest.raises(ValueError, match="already registered"):
        register_kernel(Kernel("gaussian", gaussian_kernel))


def test_registry_plugs_in_a_new_kernel() -> None:
    linear = Kernel("test-linear", lambda x, z, gamma: gamma * x @ z.mT)
    register_kernel(linear)
    assert "test-linear" in available_kernels()
    assert "test-linear" not in available_kernels(spectral=True)
    with pytest.raises(ValueError, match="must have a spectral law"):
        get_kernel("test-linear", spectral=True)
    with pytest.raises(ValueError, match="must have a spectral law"):
        sample_frequencies("test-linear", 2, 2, 1.0)
