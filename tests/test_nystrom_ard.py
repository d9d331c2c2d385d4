"""NystromLayer with learned bandwidths (ARD): exact against float64 NumPy references,
NysDI with a bandwidth, gradients, precision of narrow inputs, errors and training."""

from __future__ import annotations

import numpy as np
import pytest
import references as ref
import torch
from torch.autograd import gradcheck

from kernel_layers import (
    NystromLayer,
    discriminant_information,
    nystrom_discriminant_information,
)

GAMMA = 0.7


def _layer(**kwargs: object) -> NystromLayer:
    """A float64 ARD layer on 4 inputs with 6 landmarks and non-trivial bandwidths."""
    gen = torch.Generator().manual_seed(0)
    landmarks = torch.rand(6, 4, generator=gen, dtype=torch.float64)
    layer = NystromLayer(
        4, 6, gamma=GAMMA, landmarks=landmarks, ard=True, dtype=torch.float64, **kwargs
    )
    assert layer.log_bandwidth is not None
    with torch.no_grad():
        layer.log_bandwidth.copy_(
            torch.linspace(-0.7, 0.9, len(layer.log_bandwidth), dtype=torch.float64)
        )
    return layer


def _numpy_features(x: np.ndarray, z: np.ndarray, kernel, gamma: float, jitter: float):
    """Nystrom features ``G R^-T`` (``K_Z + jitter * mean(diag) I = R R^T``) in NumPy."""
    k_z = kernel(z, z, gamma)
    k_z = k_z + jitter * np.mean(np.diag(k_z)) * np.eye(len(z))
    factor = np.linalg.cholesky(k_z)
    return np.linalg.solve(factor, kernel(x, z, gamma).T).T


def test_ard_starts_as_the_isotropic_layer() -> None:
    x = torch.rand(9, 4, dtype=torch.float64)
    z = torch.rand(5, 4, dtype=torch.float64)
    plain = NystromLayer(4, 5, gamma=GAMMA, landmarks=z, dtype=torch.float64)
    ard = NystromLayer(4, 5, gamma=GAMMA, landmarks=z, ard=True, dtype=torch.float64)
    assert torch.equal(ard(x), plain(x))
    torch.testing.assert_close(ard.bandwidth, torch.ones(4, dtype=torch.float64))
    assert set(ard.state_dict()) == {"landmarks", "log_bandwidth"}
    assert set(plain.state_dict()) == {"landmarks"}
    assert plain.log_bandwidth is None and plain.input_bandwidth is None


@pytest.mark.parametrize(
    ("kernel", "reference"), [("gaussian", ref.gaussian), ("laplacian", ref.laplacian)]
)
def test_ard_features_match_numpy_on_scaled_inputs(kernel: str, reference) -> None:
    """Features = NumPy's ``G R^-T`` on ``x * sigma``, ``Z * sigma``; and the map is exact
    at the landmarks: ``phi(Z) phi(x)^T = k(Z * sigma, x * sigma)``."""
    layer = _layer(kernel=kernel)
    x = torch.rand(11, 4, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    sigma = np.exp(np.linspace(-0.7, 0.9, 4))
    z = layer.landmarks.detach().numpy()
    want = _numpy_features(x.numpy() * sigma, z * sigma, reference, GAMMA, layer.jitter)
    got = layer(x).detach().numpy()
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)
    at_landmarks = layer(layer.landmarks).detach().numpy() @ got.T
    exact = reference(z * sigma, x.numpy() * sigma, GAMMA)
    np.testing.assert_allclose(at_landmarks, exact, rtol=0, atol=1e-8)
    assert not np.allclose(exact, reference(z, x.numpy(), GAMMA), atol=1e-3)  # sigma matters
    layer.eval()  # the cached inference map gives the same features
    with torch.no_grad():
        np.testing.assert_allclose(layer(x).numpy(), got, rtol=0, atol=1e-10)


def test_blocks_share_one_bandwidth() -> None:
    blocked = _layer(blocks=[[0, 2], [1, 3]])
    sigma = torch.exp(torch.tensor([-0.7, 0.9], dtype=torch.float64))
    assert blocked.input_bandwidth is not None
    torch.testing.assert_close(blocked.input_bandwidth, sigma[[0, 1, 0, 1]])
    per_dim = _layer()
    assert per_dim.log_bandwidth is not None
    with torch.no_grad():
        per_dim.log_bandwidth.copy_(sigma[[0, 1, 0, 1]].log())
    x = torch.rand(7, 4, dtype=torch.float64)
    torch.testing.assert_close(blocked(x), per_dim(x), rtol=1e-12, atol=1e-14)
    assert "blocks=[[0, 2], [1, 3]]" in repr(blocked) and "ard=True" in repr(blocked)
    sizes = _layer(blocks=[1, 3])
    assert sizes.blocks == ((0,), (1, 2, 3)) and sizes.bandwidth.shape == (2,)


def test_layer_nysdi_equals_di_of_its_features_and_numpy() -> None:
    layer = _layer()
    gen = torch.Generator().manual_seed(2)
    x = torch.rand(40, 4, generator=gen, dtype=torch.float64)
    labels = torch.randint(0, 3, (40,), generator=gen)
    nysdi = float(layer.discriminant_information(x, labels, rho=1e-3).detach())
    features = layer(x).detach().numpy()
    y = ref.onehot_unit(labels.numpy(), 3)
    assert nysdi == pytest.approx(ref.di(features, y, 1e-3), rel=1e-9)
    assert nysdi == pytest.approx(
        float(discriminant_information(layer(x), labels, rho=1e-3).detach()), rel=1e-9
    )
    sigma = np.exp(np.linspace(-0.7, 0.9, 4))
    xs, zs = x.numpy() * sigma, layer.landmarks.detach().numpy() * sigma
    k_z = ref.gaussian(zs, zs, GAMMA)
    k_z = k_z + layer.jitter * np.mean(np.diag(k_z)) * np.eye(6)
    assert nysdi == pytest.approx(ref.nysdi(ref.gaussian(xs, zs, GAMMA), k_z, y, 1e-3), rel=1e-6)


def test_nysdi_bandwidth_gradcheck() -> None:
    gen = torch.Generator().manual_seed(3)
    x = torch.rand(12, 3, generator=gen, dtype=torch.float64)
    labels = torch.randint(0, 3, (12,), generator=gen)
    z = torch.rand(4, 3, generator=gen, dtype=torch.float64, requires_grad=True)
    sigma = torch.tensor([0.5, 1.2, 2.0], dtype=torch.float64, requires_grad=True)

    def nysdi(z: torch.Tensor, sigma: torch.Tensor) -> torch.Tensor:
        return nystrom_discriminant_information(
            x, labels, z, gamma=GAMMA, rho=1e-2, jitter=1e-8, bandwidth=sigma
        )

    assert gradcheck(nysdi, (z, sigma), eps=1e-6, atol=1e-6)


def test_layer_gradcheck_to_the_log_bandwidth() -> None:
    layer = _layer(blocks=[[0, 1], [2, 3]])
    x = torch.rand(8, 4, dtype=torch.float64)
    assert layer.log_bandwidth is not None
    log_bandwidth = layer.log_bandwidth.detach().clone().requires_grad_(True)

    def features(log_bandwidth: torch.Tensor) -> torch.Tensor:
        return torch.func.functional_call(
            layer, {"log_bandwidth": log_bandwidth, "landmarks": layer.landmarks}, (x,)
        )

    assert gradcheck(features, (log_bandwidth,), eps=1e-6, atol=1e-6)


def test_narrow_float32_nysdi_keeps_float64_precision_with_a_bandwidth() -> None:
    """The bandwidth scales narrow inputs after they are widened to float64: float32
    inputs give float64's NysDI to float32 round-off (2e-8 here; scaled in float32 first,
    the inputs' rounding moves this ill-conditioned case's NysDI by 1.7e-6)."""
    gen = torch.Generator().manual_seed(4)
    x = torch.rand(600, 6, generator=gen)
    labels = torch.randint(0, 4, (600,), generator=gen)
    z = torch.rand(200, 6, generator=gen)
    sigma = torch.rand(6, generator=gen) + 0.5
    args = {"gamma": 0.1, "jitter": 1e-10, "num_classes": 4}
    di32 = nystrom_discriminant_information(x, labels, z, bandwidth=sigma, **args)
    di64 = nystrom_discriminant_information(
        x.double(), labels, z.double(), bandwidth=sigma.double(), **args
    )
    assert di32.dtype == torch.float32
    assert float(di32) == pytest.approx(float(di64), rel=2e-7)


def test_untrainable_ard_layer_has_no_trainable_parameters() -> None:
    layer = NystromLayer(4, 6, ard=True, trainable=False, seed=0)
    assert not any(p.requires_grad for p in layer.parameters())
    assert layer.get_config()["ard"] is True


def test_eval_cache_follows_changed_bandwidths() -> None:
    layer = _layer().eval()
    x = torch.rand(5, 4, dtype=torch.float64)
    with torch.no_grad():
        before = layer(x)
        assert layer.log_bandwidth is not None
        layer.log_bandwidth.mul_(0.5)
        after = layer(x)
    layer.train()
    torch.testing.assert_close(after, layer(x).detach())
    assert not torch.allclose(before, after)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        (
            {"blocks": [2, 2]},
            r"NystromLayer: argument 'blocks' must be None when ard=False \(one bandwidth "
            r"per block needs ard=True\), got \[2, 2\]",
        ),
        (
            {"ard": True, "kernel": "chi2"},
            r"NystromLayer: argument 'ard' must be False with kernel 'chi2', whose inputs are "
            r"restricted to a domain",
        ),
        (
            {"ard": True, "kernel": "skewed_intersection"},
            r"argument 'ard' must be False with kernel 'skewed_intersection'",
        ),
        (
            {"ard": True, "blocks": [1, 2]},
            r"NystromLayer: argument 'blocks' must be a list of block sizes summing to "
            r"in_features=4 .*got sizes \[1, 2\] \(sum 3\)",
        ),
        ({"ard": "yes"}, r"NystromLayer: argument 'ard' must be a bool, got 'yes'"),
    ],
)
def test_constructor_errors(kwargs: dict, match: str) -> None:
    with pytest.raises(
        ValueError if "'ard' must be a bool" not in match else TypeError, match=match
    ):
        NystromLayer(4, 6, seed=0, **kwargs)


@pytest.mark.parametrize(
    ("bandwidth", "exc", "match"),
    [
        (
            torch.ones(3),
            ValueError,
            r"argument 'bandwidth' must have last dimension 4, got shape \[3\]",
        ),
        (torch.ones(2, 4), ValueError, r"argument 'bandwidth' must have shape \[4\], got \[2, 4\]"),
        (
            torch.tensor([1.0, 0.0, 1.0, 1.0]),
            ValueError,
            r"nystrom_discriminant_information: argument 'bandwidth' must be positive, got "
            r"minimum 0",
        ),
        (torch.tensor([1.0, float("nan"), 1.0, 1.0]), ValueError, r"'bandwidth' must be finite"),
        ([1.0, 1.0, 1.0, 1.0], TypeError, r"'bandwidth' must be a torch.Tensor, got list"),
    ],
)
def test_nysdi_bandwidth_errors(bandwidth: object, exc: type, match: str) -> None:
    x, labels, z = torch.rand(10, 4), torch.randint(0, 2, (10,)), torch.rand(3, 4)
    with pytest.raises(exc, match=match):
        nystrom_discriminant_information(x, labels, z, gamma=1.0, bandwidth=bandwidth)  # type: ignore[arg-type]


def test_di_training_learns_which_inputs_matter() -> None:
    """Labels from the first 2 of 6 inputs: DI training widens their bandwidths above
    those of the 4 noise inputs (and DI rises)."""
    gen = torch.Generator().manual_seed(5)
    x = torch.rand(600, 6, generator=gen)
    labels = ((x[:, 0] > 0.5).long() * 2 + (x[:, 1] > 0.5).long()).long()
    layer = NystromLayer.from_data(x, 30, gamma=0.5, ard=True, seed=0)
    optimizer = torch.optim.Adam(layer.parameters(), lr=3e-2)
    first = None
    for _ in range(60):
        di = layer.discriminant_information(x, labels, num_classes=4)
        first = float(di) if first is None else first
        optimizer.zero_grad()
        (-di).backward()
        optimizer.step()
    sigma = layer.bandwidth.detach()
    assert sigma[:2].min() > 1.5 * sigma[2:].max(), sigma
    assert float(layer.discriminant_information(x, labels, num_classes=4)) > first + 0.3
