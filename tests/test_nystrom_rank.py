"""Rank-k truncation of NystromLayer: ``G U_k S_k^-1/2``, the ``K_Z[k]^+`` map."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
import references as ref
import torch

from kernel_layers.layers.nystrom import NystromLayer, rank_k_map

JITTER = 1e-12


def _data(n: int = 8, batch: int = 20) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(0)
    x = torch.rand(batch, 3, generator=gen, dtype=torch.float64)
    z = torch.rand(n, 3, generator=gen, dtype=torch.float64)
    return x, z


def _reference_kernel(x: np.ndarray, z: np.ndarray, gamma: float, rank: int) -> np.ndarray:
    """``G U_k S_k^-1 U_k^T G^T`` with the layer's jitter, from NumPy's eigh."""
    g = ref.gaussian(x, z, gamma)
    k = ref.gaussian(z, z, gamma)
    k = k + JITTER * np.mean(np.diag(k)) * np.eye(len(z))
    s, u = np.linalg.eigh(k)
    s, u = s[::-1][:rank], u[:, ::-1][:, :rank]
    return g @ u @ np.diag(1.0 / s) @ u.T @ g.T


def test_rank_n_equals_the_full_map() -> None:
    x, z = _data()
    full = NystromLayer(3, 8, gamma=1.5, landmarks=z, jitter=JITTER)
    truncated = NystromLayer(3, 8, gamma=1.5, landmarks=z, jitter=JITTER, rank=8)
    a, b = full(x), truncated(x)
    assert b.shape == (20, 8)
    # same kernel; the features differ by an orthogonal rotation
    torch.testing.assert_close(b @ b.T, a @ a.T, rtol=1e-8, atol=1e-9)
    rotation = torch.linalg.lstsq(b, a).solution
    torch.testing.assert_close(rotation.T @ rotation, torch.eye(8, dtype=torch.float64))


@pytest.mark.parametrize("rank", [1, 3, 6])
def test_rank_k_kernel_matches_numpy(rank: int) -> None:
    x, z = _data()
    layer = NystromLayer(3, 8, gamma=1.5, landmarks=z, jitter=JITTER, rank=rank)
    phi = layer(x)
    assert phi.shape == (20, rank)
    want = _reference_kernel(x.numpy(), z.numpy(), 1.5, rank)
    np.testing.assert_allclose((phi @ phi.T).detach().numpy(), want, rtol=1e-7, atol=1e-9)


def test_rank_k_leading_dimensions_and_float32() -> None:
    x, z = _data()
    layer = NystromLayer(3, 8, gamma=1.5, landmarks=z.float(), rank=4)
    out = layer(x.float().reshape(4, 5, 3))
    assert out.shape == (4, 5, 4) and out.dtype == torch.float32
    layer64 = NystromLayer(3, 8, gamma=1.5, landmarks=z, rank=4, jitter=layer.jitter)
    k32 = (out.reshape(20, 4) @ out.reshape(20, 4).T).double()
    k64 = layer64(x) @ layer64(x).T
    torch.testing.assert_close(k32, k64, rtol=1e-4, atol=1e-5)


def test_rank_columns_ordered_by_eigenvalue() -> None:
    _, z = _data(n=10)
    phi = NystromLayer(3, 10, gamma=1.0, landmarks=z, rank=10, jitter=JITTER)(z)
    # on the landmarks, phi = U S^1/2: column energies are the eigenvalues, descending
    energy = (phi * phi).sum(0).detach()
    assert torch.all(energy[:-1] >= energy[1:])


def test_rank_setter_and_repr() -> None:
    x, z = _data()
    layer = NystromLayer(3, 8, gamma=1.5, landmarks=z)
    assert layer.rank is None and "rank" not in repr(layer)
    layer.rank = 2
    assert layer(x).shape == (20, 2) and "rank=2" in repr(layer)
    clone = pickle.loads(pickle.dumps(layer))
    torch.testing.assert_close(clone(x), layer(x))
    layer.rank = None
    assert layer(x).shape == (20, 8)


def test_rank_gradients_finite() -> None:
    x, z = _data()
    layer = NystromLayer(3, 8, gamma=1.5, landmarks=z, rank=3)
    layer(x).pow(2).sum().backward()
    assert torch.isfinite(layer.landmarks.grad).all()
    assert layer.landmarks.grad.abs().sum() > 0


def test_rank_k_map_rank_deficient_is_finite() -> None:
    z = torch.rand(3, 2, dtype=torch.float64)
    z = torch.cat([z, z])  # rank 3 of 6
    k_z = torch.from_numpy(ref.gaussian(z.numpy(), z.numpy(), 1.0))
    k_z.requires_grad_(True)
    m = rank_k_map(k_z, 6)
    assert torch.isfinite(m).all()
    assert (m[:, 3:] == 0).all()  # zero eigenvalues: zero columns (pseudo-inverse)
    g = torch.from_numpy(ref.gaussian(z.numpy(), z.numpy(), 1.0))
    torch.testing.assert_close(g @ m @ m.T @ g.T, g.detach(), atol=1e-8, rtol=1e-8)
    m.sum().backward()
    assert torch.isfinite(k_z.grad).all()


@pytest.mark.parametrize(
    ("rank", "exc", "match"),
    [
        (0, ValueError, "NystromLayer: argument 'rank' must be an integer >= 1, got 0"),
        (9, ValueError, r"NystromLayer: argument 'rank' must be None or <= out_features=8, got 9"),
        (2.5, TypeError, "NystromLayer: argument 'rank' must be an integer >= 1, got 2.5"),
    ],
)
def test_rank_errors(rank: object, exc: type, match: str) -> None:
    with pytest.raises(exc, match=match):
        NystromLayer(3, 8, rank=rank)
    layer = NystromLayer(3, 8)
    with pytest.raises(exc, match=match):
        layer.rank = rank
    assert layer.rank is None


def test_from_data_passes_rank() -> None:
    x = torch.rand(50, 3)
    layer = NystromLayer.from_data(x, 10, init="kmeans++", rank=4, seed=0)
    assert layer(x).shape == (50, 4)
