"""FourierLayer's kernel learning (ARD bandwidths, blocks) and its cos/sin feature map."""

from __future__ import annotations

import math
import pickle

import numpy as np
import pytest
import torch
from torch.autograd import gradcheck

from kernel_layers import FourierLayer, discriminant_information
from kernel_layers.kernels import get_kernel

#: ARD DI training: only the first RELEVANT of INPUTS dimensions carry the labels.
INPUTS, RELEVANT = 6, 2


def test_ard_starts_from_the_plain_draw() -> None:
    """Every sigma starts at scale(gamma): same seed, same W, b and features as ard=False."""
    x = torch.rand(7, 4, dtype=torch.float64)
    for kernel in ("gaussian", "laplacian", "cauchy", "skewed_chi2"):
        plain = FourierLayer(4, 9, kernel=kernel, gamma=0.6, seed=3, dtype=torch.float64)
        ard = FourierLayer(4, 9, kernel=kernel, gamma=0.6, seed=3, ard=True, dtype=torch.float64)
        torch.testing.assert_close(ard.frequencies, plain.frequencies, rtol=1e-14, atol=0)
        torch.testing.assert_close(ard.phases, plain.phases)
        torch.testing.assert_close(ard(x), plain(x), rtol=1e-12, atol=1e-14)
        scale = get_kernel(kernel).scale(0.6)
        torch.testing.assert_close(ard.bandwidth, torch.full((4,), scale, dtype=torch.float64))


def test_ard_frequencies_are_diag_sigma_times_base() -> None:
    layer = FourierLayer(3, 5, ard=True, seed=0, dtype=torch.float64)
    with torch.no_grad():
        layer.log_bandwidth.copy_(torch.tensor([0.0, -1.0, 2.0]))
    sigma = torch.tensor([1.0, math.exp(-1.0), math.exp(2.0)], dtype=torch.float64)
    torch.testing.assert_close(layer.frequencies, sigma[:, None] * layer.base_frequencies)
    torch.testing.assert_close(layer.input_bandwidth, sigma)
    x = torch.rand(4, 3, dtype=torch.float64)
    want = math.sqrt(2 / 5) * torch.cos(x @ layer.frequencies + layer.phases)
    torch.testing.assert_close(layer(x), want)


def test_ard_parameters_buffers_and_state_dict() -> None:
    frozen = FourierLayer(3, 5, ard=True, seed=0)
    assert {n for n, _ in frozen.named_parameters()} == {"log_bandwidth", "phases"}
    assert set(frozen.state_dict()) == {"log_bandwidth", "phases", "base_frequencies"}
    assert "frequencies" not in frozen._parameters
    free = FourierLayer(3, 5, ard=True, trainable_frequencies=True, seed=0)
    assert {n for n, p in free.named_parameters() if p.requires_grad} == {
        "log_bandwidth",
        "base_frequencies",
        "phases",
    }
    # plain layers keep their state-dict keys
    assert set(FourierLayer(3, 5, seed=0).state_dict()) == {"frequencies", "phases"}
    off = FourierLayer(3, 5, ard=True, trainable=False, seed=0)
    assert not any(p.requires_grad for p in off.parameters())
    assert not off.frequencies.requires_grad


def test_plain_layer_with_frozen_frequencies() -> None:
    layer = FourierLayer(3, 5, trainable_frequencies=False, seed=0)
    assert not layer.frequencies.requires_grad and layer.phases.requires_grad


def test_ard_gradients_reach_the_bandwidth() -> None:
    layer = FourierLayer(3, 4, ard=True, trainable_frequencies=True, seed=0)
    layer(torch.rand(6, 3)).pow(2).sum().backward()
    for p in (layer.log_bandwidth, layer.base_frequencies, layer.phases):
        assert p.grad is not None and torch.isfinite(p.grad).all() and p.grad.abs().sum() > 0


@pytest.mark.parametrize("features", ["cos", "cossin"])
@pytest.mark.parametrize("blocks", [None, [[0, 2], [1]]])
def test_ard_gradcheck(features: str, blocks: list | None) -> None:
    layer = FourierLayer(
        3,
        4,
        kernel="skewed_chi2",
        gamma=0.7,
        ard=True,
        blocks=blocks,
        trainable_frequencies=True,
        features=features,
        seed=0,
        dtype=torch.float64,
    )
    x = torch.rand(5, 3, dtype=torch.float64, requires_grad=True)
    names = ["log_bandwidth", "base_frequencies"] + (["phases"] if features == "cos" else [])
    values = [getattr(layer, n).detach().clone().requires_grad_(True) for n in names]

    def f(x_: torch.Tensor, *params: torch.Tensor) -> torch.Tensor:
        return torch.func.functional_call(layer, dict(zip(names, params, strict=True)), (x_,))

    assert gradcheck(f, (x, *values))


def test_blocks_by_sizes_and_by_index_groups() -> None:
    by_size = FourierLayer(5, 6, ard=True, blocks=[2, 3], seed=0)
    assert by_size.blocks == ((0, 1), (2, 3, 4))
    assert by_size.log_bandwidth.shape == (2,)
    with torch.no_grad():
        by_size.log_bandwidth.copy_(torch.tensor([0.0, 1.0]))
    want = torch.tensor([1.0, 1.0, math.e, math.e, math.e])
    torch.testing.assert_close(by_size.input_bandwidth, want)
    by_group = FourierLayer(5, 6, ard=True, blocks=[[0, 3], [4, 1, 2]], seed=0)
    with torch.no_grad():
        by_group.log_bandwidth.copy_(torch.tensor([0.0, 1.0]))
    want = torch.tensor([1.0, math.e, math.e, 1.0, math.e])
    torch.testing.assert_close(by_group.input_bandwidth, want)
    torch.testing.assert_close(
        by_group.frequencies, want[:, None] * by_group.base_frequencies, rtol=1e-6, atol=0
    )
    # the block index is derived from the constructor: not in the state dict, but moved
    assert "block_index" not in by_group.state_dict()
    assert by_group.to(torch.float64).block_index.dtype == torch.long
    assert "blocks=[[0, 3], [4, 1, 2]]" in repr(by_group)


def test_block_gradients_sum_over_the_block() -> None:
    """A shared sigma's gradient is the sum of its dimensions' per-dimension gradients."""
    x = torch.rand(8, 4, dtype=torch.float64)
    shared = FourierLayer(4, 6, ard=True, blocks=[1, 3], seed=2, dtype=torch.float64)
    single = FourierLayer(4, 6, ard=True, seed=2, dtype=torch.float64)
    shared(x).sin().sum().backward()
    single(x).sin().sum().backward()
    g = single.log_bandwidth.grad
    torch.testing.assert_close(shared.log_bandwidth.grad, torch.stack([g[0], g[1:].sum()]))


@pytest.mark.parametrize(
    ("kwargs", "exc", "match"),
    [
        (
            {"blocks": [2, 3]},
            ValueError,
            r"FourierLayer: argument 'blocks' must be None when ard=False \(one bandwidth per "
            r"block needs ard=True\), got \[2, 3\]",
        ),
        (
            {"ard": True, "blocks": [2, 2]},
            ValueError,
            r"FourierLayer: argument 'blocks' must be a list of block sizes summing to "
            r"in_features=5 or a list of index groups partitioning range\(5\), got sizes "
            r"\[2, 2\] \(sum 4\)",
        ),
        ({"ard": True, "blocks": [0, 5]}, ValueError, r"got sizes \[0, 5\] \(sum 5\)"),
        ({"ard": True, "blocks": []}, ValueError, r"argument 'blocks' must be a list .*got \[\]"),
        ({"ard": True, "blocks": "12"}, ValueError, r"argument 'blocks' must be a list"),
        (
            {"ard": True, "blocks": [[0, 1], [1, 2, 3]]},
            ValueError,
            r"partitioning range\(5\), got \[\[0, 1\], \[1, 2, 3\]\] \(missing \[4\], out of "
            r"range or repeated \[1\]\)",
        ),
        (
            {"ard": True, "blocks": [[0, 1, 2, 3, 7]]},
            ValueError,
            r"\(missing \[4\], out of range or repeated \[7\]\)",
        ),
        (
            {"ard": True, "blocks": [[0, 1], []]},
            ValueError,
            r"\(entry \[\] is neither a size nor a non-empty list of indices\)",
        ),
        ({"ard": 1}, TypeError, r"FourierLayer: argument 'ard' must be a bool, got 1"),
        (
            {"trainable": False, "trainable_frequencies": True},
            ValueError,
            r"FourierLayer: argument 'trainable_frequencies' must be False or None when "
            r"trainable=False, got True",
        ),
        (
            {"features": "sin"},
            ValueError,
            r"FourierLayer: argument 'features' must be one of \['cos', 'cossin'\], got 'sin'",
        ),
        (
            {"features": "cossin", "out_features": 7},
            ValueError,
            r"FourierLayer: argument 'out_features' must be even for features='cossin' "
            r"\(cos/sin pairs\), got 7",
        ),
    ],
)
def test_constructor_errors(kwargs: dict, exc: type, match: str) -> None:
    args = {"out_features": 6, **kwargs}
    with pytest.raises(exc, match=match):
        FourierLayer(5, **args)


def test_bandwidth_needs_ard() -> None:
    layer = FourierLayer(3, 4, seed=0)
    with pytest.raises(AttributeError, match="object has no attribute 'bandwidth'"):
        _ = layer.bandwidth


# --- cos/sin features ------------------------------------------------------------------


def test_cossin_shape_and_formula() -> None:
    layer = FourierLayer(3, 8, features="cossin", gamma=0.5, seed=0, dtype=torch.float64)
    assert layer.frequencies.shape == (3, 4) and layer.phases is None
    assert set(layer.state_dict()) == {"frequencies"}
    x = torch.rand(5, 3, dtype=torch.float64)
    h = x @ layer.frequencies
    want = torch.cat([torch.cos(h), torch.sin(h)], dim=1) / 2.0  # sqrt(1/4)
    torch.testing.assert_close(layer(x), want)
    # inner products are exactly (1/J') sum_j cos(w_j (x - y))
    phi = layer(x)
    diff = x[:, None, :] - x[None, :, :]
    torch.testing.assert_close(phi @ phi.T, torch.cos(diff @ layer.frequencies).mean(-1))
    assert layer(torch.rand(2, 3, 3, dtype=torch.float64)).shape == (2, 3, 8)
    assert "features='cossin'" in repr(layer)


def test_cossin_beats_phased_cos_at_equal_width() -> None:
    """Same number of output features: the phase-free pairs have a lower kernel error."""
    x = torch.rand(40, 3, dtype=torch.float64)
    exact = get_kernel("gaussian").matrix(x, x, 1.0)
    errors = {}
    for features in ("cos", "cossin"):
        errs = []
        for seed in range(5):
            layer = FourierLayer(3, 400, features=features, seed=seed, dtype=torch.float64)
            phi = layer(x).detach()
            errs.append(float((phi @ phi.T - exact).square().mean().sqrt()))
        errors[features] = np.mean(errs)
    assert errors["cossin"] < errors["cos"]


def test_ard_cossin_pickles_and_round_trips_before_forward() -> None:
    make = lambda seed: FourierLayer(  # noqa: E731
        4, 6, ard=True, blocks=[1, 3], features="cossin", trainable_frequencies=True, seed=seed
    )
    a, b = make(1), make(2)
    x = torch.rand(3, 4)
    b.load_state_dict(a.state_dict())
    torch.testing.assert_close(b(x), a(x))
    torch.testing.assert_close(pickle.loads(pickle.dumps(a))(x), a(x))


def test_ard_skewed_kernel_checks_its_domain() -> None:
    layer = FourierLayer(2, 4, kernel="skewed_intersection", ard=True, seed=0)
    with pytest.raises(ValueError, match="FourierLayer: argument 'x' must have all entries > -c"):
        layer(torch.tensor([[-1.0, 0.0]]))


# --- learning the bandwidths with DI ----------------------------------------------------


def test_di_training_switches_irrelevant_dimensions_off() -> None:
    """Labels depend on dims 0 and 1 only (XOR): DI drives the other bandwidths down."""
    gen = torch.Generator().manual_seed(0)
    x = torch.rand(600, INPUTS, generator=gen)
    labels = ((x[:, 0] > 0.5) ^ (x[:, 1] > 0.5)).long()
    gamma = 2.0
    layer = FourierLayer(INPUTS, 64, gamma=gamma, ard=True, seed=0)
    optimizer = torch.optim.Adam(layer.parameters(), lr=0.05)
    start = layer.bandwidth.detach().clone()
    for _ in range(100):
        index = torch.randint(0, len(x), (256,), generator=gen)
        loss = -discriminant_information(layer(x[index]), labels[index], rho=1e-3)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    sigma = layer.bandwidth.detach()
    relevant, irrelevant = sigma[:RELEVANT], sigma[RELEVANT:]
    torch.testing.assert_close(start, torch.full((INPUTS,), math.sqrt(2 * gamma)))
    assert irrelevant.max() < 0.5 * start[0]  # switched (mostly) off
    assert relevant.min() > start[0]  # sharpened where the labels vary
    assert relevant.min() > 4 * irrelevant.max()  # a clear margin
