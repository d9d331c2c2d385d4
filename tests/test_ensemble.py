"""EnsembleNystrom: the shared layer contract, the weighted-average kernel, disjoint sets."""

from __future__ import annotations

import numpy as np
import pytest
import references as ref
import torch
from layer_contract import IN_FEATURES, OUT_FEATURES, LayerContract

from kernel_layers.layers.ensemble import EnsembleNystrom, split_sizes
from kernel_layers.layers.nystrom import NystromLayer

JITTER = 1e-12


class TestEnsembleContract(LayerContract):
    def make_layer(self, **kwargs: object) -> torch.nn.Module:
        args = {"in_features": IN_FEATURES, "out_features": OUT_FEATURES, "gamma": 0.5}
        args |= {"seed": 0, "num_maps": 2}
        args.update(kwargs)
        if "generator" in kwargs and "seed" not in kwargs:
            args.pop("seed")
        return EnsembleNystrom(args.pop("in_features"), args.pop("out_features"), **args)


def _nystrom_kernel(x: np.ndarray, z: np.ndarray, gamma: float) -> np.ndarray:
    g, k = ref.gaussian(x, z, gamma), ref.gaussian(z, z, gamma)
    k = k + JITTER * np.mean(np.diag(k)) * np.eye(len(z))
    return g @ np.linalg.solve(k, g.T)


def test_weighted_average_of_nystrom_kernels() -> None:
    x = torch.rand(60, 3, dtype=torch.float64)
    weights = [0.2, 0.5, 0.3]
    layer = EnsembleNystrom.from_data(
        x, [5, 6, 7], weights=weights, gamma=2.0, jitter=JITTER, seed=0
    )
    phi = layer(x).detach().numpy()
    assert phi.shape == (60, 18)
    want = sum(
        w * _nystrom_kernel(x.numpy(), m.landmarks.detach().numpy(), 2.0)
        for w, m in zip(weights, layer.maps, strict=True)
    )
    np.testing.assert_allclose(phi @ phi.T, want, atol=1e-9)
    # the same from the maps themselves
    parts = [m(x) for m in layer.maps]
    mixed = sum(w * p @ p.T for w, p in zip(weights, parts, strict=True))
    np.testing.assert_allclose(phi @ phi.T, mixed.detach().numpy(), atol=1e-12)


def test_uniform_weights_and_normalisation() -> None:
    layer = EnsembleNystrom(3, 12, num_maps=3)
    torch.testing.assert_close(layer.weights, torch.full((3,), 1 / 3))
    scaled = EnsembleNystrom(3, 12, num_maps=3, weights=[2.0, 2.0, 4.0])
    torch.testing.assert_close(scaled.weights, torch.tensor([0.25, 0.25, 0.5]))
    assert "weights" in scaled.state_dict()


def test_disjoint_landmarks_from_data() -> None:
    x = torch.rand(40, 2)
    layer = EnsembleNystrom.from_data(x, 40, num_maps=4, seed=1)
    rows = [tuple(r) for m in layer.maps for r in m.landmarks.tolist()]
    assert len(rows) == len(set(rows)) == 40  # every row used once: disjoint sets
    assert set(rows) == {tuple(r) for r in x.tolist()}
    assert layer.sizes == [10, 10, 10, 10]


def test_single_map_equals_nystrom_layer() -> None:
    x = torch.rand(30, 3)
    z = torch.rand(6, 3)
    ens = EnsembleNystrom(3, 6, num_maps=1, landmarks=[z], gamma=0.7)
    torch.testing.assert_close(ens(x), NystromLayer(3, 6, landmarks=z, gamma=0.7)(x))


def test_sizes_and_repr() -> None:
    assert split_sizes(7, 3) == [3, 2, 2]
    layer = EnsembleNystrom(4, [2, 5], gamma=0.3, trainable=False)
    assert layer.sizes == [2, 5] and layer.out_features == 7 and layer.num_maps == 2
    text = repr(layer)
    assert "num_maps=2" in text and "sizes=[2, 5]" in text and "trainable=False" in text
    assert EnsembleNystrom(4, 9).sizes == [3, 2, 2, 2]  # DEFAULT_NUM_MAPS = 4


def test_zero_weight_map_contributes_nothing() -> None:
    x = torch.rand(10, 3)
    layer = EnsembleNystrom(3, [3, 4], weights=[1.0, 0.0], seed=0)
    out = layer(x)
    assert (out[:, 3:] == 0).all()
    torch.testing.assert_close(out[:, :3], layer.maps[0](x))


@pytest.mark.parametrize(
    ("kwargs", "exc", "match"),
    [
        ({"out_features": 3, "num_maps": 4}, ValueError, "'num_maps' must be <= out_features=3"),
        (
            {"out_features": [2, 0]},
            ValueError,
            r"'out_features\[1\]' must be an integer >= 1, got 0",
        ),
        ({"out_features": []}, ValueError, r"'out_features' must be non-empty, got \[\]"),
        ({"out_features": "4"}, TypeError, "'out_features' must be an integer >= 1 or a sequence"),
        ({"out_features": [2, 2], "num_maps": 3}, ValueError, r"'num_maps' must equal len"),
        ({"num_maps": 0}, ValueError, "'num_maps' must be an integer >= 1, got 0"),
        ({"weights": [1.0]}, ValueError, r"'weights' must have one entry per map \(2\)"),
        ({"weights": [1.0, -1.0]}, ValueError, "'weights' must be finite, >= 0 and not all 0"),
        ({"weights": [0.0, 0.0]}, ValueError, "'weights' must be finite, >= 0 and not all 0"),
        ({"weights": ["a", "b"]}, TypeError, "'weights' must be a sequence of 2 numbers"),
        ({"landmarks": torch.rand(4, 3)}, TypeError, "'landmarks' must be a sequence of 2"),
        ({"landmarks": [torch.rand(2, 3)]}, ValueError, "'landmarks' must hold one tensor per"),
        (
            {"landmarks": [torch.rand(2, 3), torch.rand(3, 3)]},
            ValueError,
            r"'landmarks\[1\]' must have 2 rows \(the map's size\), got shape \[3, 3\]",
        ),
        (
            {"landmarks": [torch.rand(2, 3), torch.rand(2, 4)]},
            ValueError,
            r"'landmarks\[1\]' must have last dimension 3",
        ),
        ({"jitter": 0.0}, ValueError, "'jitter' must be a finite number > 0"),
    ],
)
def test_errors(kwargs: dict, exc: type, match: str) -> None:
    args = {"in_features": 3, "out_features": 4, "num_maps": 2}
    args.update(kwargs)
    if isinstance(args["out_features"], list | str) and "num_maps" not in kwargs:
        args.pop("num_maps")
    with pytest.raises(exc, match="EnsembleNystrom: argument " + match):
        EnsembleNystrom(args.pop("in_features"), args.pop("out_features"), **args)


def test_from_data_errors() -> None:
    with pytest.raises(
        ValueError,
        match=r"EnsembleNystrom.from_data: argument 'out_features' must total <= the number "
        r"of rows of x \(5\), got 6",
    ):
        EnsembleNystrom.from_data(torch.rand(5, 2), 6, num_maps=2)
    with pytest.raises(ValueError, match=r"EnsembleNystrom.from_data: argument 'x' must have"):
        EnsembleNystrom.from_data(torch.rand(5), 2)


@pytest.mark.parametrize("half", [torch.float16, torch.bfloat16])
def test_half_rows_are_weighted_in_the_maps_output_dtype(half: torch.dtype) -> None:
    # the maps read half rows in float32; the weights' square roots must not be rounded
    # to half precision (0.7071 became 0.70703125)
    x = torch.rand(50, 4, generator=torch.Generator().manual_seed(0)).to(half)
    ensemble = EnsembleNystrom.from_data(x.float(), 20, num_maps=2, gamma=0.5, seed=0)
    out = ensemble(x)
    assert out.dtype == torch.float32
    torch.testing.assert_close(out, ensemble(x.float()), rtol=0, atol=0)
