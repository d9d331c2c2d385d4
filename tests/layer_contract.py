"""Shared test bases for kernel feature maps; each map's test class supplies ``make_layer``.

:class:`FeatureMapContract` is what any :class:`KernelFeatureMap` keeps, a user's own
included (shapes, dtype and device moves, serialisation, ``get_config`` rebuilds, the
default DI); :class:`LayerContract` adds what the library's maps promise on top (input
validation with named arguments, seeds, trainability).
"""

from __future__ import annotations

import io
import pickle

import pytest
import torch

from kernel_layers import discriminant_information
from kernel_layers.layers.base import KernelFeatureMap

IN_FEATURES = 5
OUT_FEATURES = 7
DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


class FeatureMapContract:
    """Behaviour every kernel feature map must have.

    ``make_layer(seed=s)`` builds a map of ``IN_FEATURES`` inputs and ``OUT_FEATURES``
    features whose random draws depend on ``s``.
    """

    def make_layer(self, **kwargs: object) -> KernelFeatureMap:
        raise NotImplementedError

    def test_is_a_kernel_feature_map(self) -> None:
        layer = self.make_layer()
        assert isinstance(layer, KernelFeatureMap)
        assert (layer.in_features, layer.out_features) == (IN_FEATURES, OUT_FEATURES)
        assert layer.feature_width == OUT_FEATURES
        columns = [i for block in layer.feature_blocks for i in block]
        assert columns == list(range(layer.feature_width))

    def test_repr_names_the_sizes(self) -> None:
        text = repr(self.make_layer())
        assert f"in_features={IN_FEATURES}" in text
        assert f"out_features={OUT_FEATURES}" in text

    def test_output_shape(self) -> None:
        layer = self.make_layer()
        assert layer(torch.rand(11, IN_FEATURES)).shape == (11, OUT_FEATURES)

    def test_leading_dimensions(self) -> None:
        layer = self.make_layer()
        x = torch.rand(2, 3, IN_FEATURES)
        out = layer(x)
        assert out.shape == (2, 3, OUT_FEATURES)
        torch.testing.assert_close(out[1], layer(x[1]))

    def test_batch_of_one(self) -> None:
        layer = self.make_layer()
        x = torch.rand(4, IN_FEATURES)
        torch.testing.assert_close(layer(x[2:3]), layer(x)[2:3])

    def test_non_contiguous_input(self) -> None:
        layer = self.make_layer()
        x = torch.rand(IN_FEATURES, 9).T
        assert not x.is_contiguous()
        torch.testing.assert_close(layer(x), layer(x.contiguous()))

    def test_to_float64(self) -> None:
        layer = self.make_layer()
        x = torch.rand(6, IN_FEATURES)
        out32 = layer(x)
        layer64 = layer.to(torch.float64)
        out64 = layer64(x.double())
        assert out64.dtype == torch.float64
        assert all(p.dtype == torch.float64 for p in layer64.parameters())
        torch.testing.assert_close(out64.float(), out32, rtol=1e-4, atol=1e-5)

    def test_state_dict_round_trip_before_forward(self) -> None:
        a, b = self.make_layer(seed=1), self.make_layer(seed=2)
        x = torch.rand(6, IN_FEATURES)
        assert not torch.allclose(a(x), b(x))
        b.load_state_dict(a.state_dict())
        torch.testing.assert_close(a(x), b(x))

    def test_torch_save_load(self) -> None:
        layer = self.make_layer()
        buffer = io.BytesIO()
        torch.save(layer.state_dict(), buffer)
        buffer.seek(0)
        state = torch.load(buffer, weights_only=True)
        fresh = self.make_layer(seed=99)
        fresh.load_state_dict(state)
        x = torch.rand(3, IN_FEATURES)
        torch.testing.assert_close(fresh(x), layer(x))

    def test_pickle(self) -> None:
        layer = self.make_layer()
        clone = pickle.loads(pickle.dumps(layer))
        x = torch.rand(3, IN_FEATURES)
        torch.testing.assert_close(clone(x), layer(x))

    def test_seed_reproducible(self) -> None:
        x = torch.rand(3, IN_FEATURES)
        torch.testing.assert_close(self.make_layer(seed=5)(x), self.make_layer(seed=5)(x))

    def test_get_config_rebuilds_the_map(self) -> None:
        layer = self.make_layer(seed=3)
        config = layer.get_config()
        assert {"in_features", "out_features"} <= set(config)
        rebuilt = type(layer)(**config)
        assert rebuilt.get_config() == config
        rebuilt.load_state_dict(layer.state_dict())
        x = torch.rand(4, IN_FEATURES)
        torch.testing.assert_close(rebuilt(x), layer(x))

    @pytest.mark.parametrize("device", DEVICES)
    def test_device_move(self, device: str) -> None:
        layer = self.make_layer()
        x = torch.rand(5, IN_FEATURES)
        want = layer(x)
        moved = layer.to(device)
        assert all(t.device.type == device for t in [*moved.parameters(), *moved.buffers()])
        got = moved(x.to(device))
        assert got.device.type == device
        torch.testing.assert_close(got.cpu(), want, rtol=1e-4, atol=1e-5)

    def test_discriminant_information_is_that_of_the_features(self) -> None:
        layer = self.make_layer().to(torch.float64)
        x = torch.rand(40, IN_FEATURES, dtype=torch.float64)
        y = torch.arange(40) % 3
        got = layer.discriminant_information(x, y, rho=0.1, num_classes=3)
        want = discriminant_information(layer(x), y, rho=0.1, num_classes=3)
        torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-8)


class LayerContract(FeatureMapContract):
    """What the library's maps add: input validation, seeds, trainability, kernels."""

    #: Whether the map takes ``kernel=`` (FastfoodLayer is Gaussian only).
    takes_kernel = True

    def test_gradients_reach_parameters(self) -> None:
        layer = self.make_layer()
        layer(torch.rand(8, IN_FEATURES)).pow(2).sum().backward()
        params = [p for p in layer.parameters() if p.requires_grad]
        assert params
        assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in params)

    def test_untrainable_has_no_trainable_parameters(self) -> None:
        layer = self.make_layer(trainable=False)
        assert not any(p.requires_grad for p in layer.parameters())

    def test_rejects_wrong_width(self) -> None:
        name = type(self.make_layer()).__name__
        with pytest.raises(
            ValueError, match=rf"{name}: argument 'x' must have last dimension {IN_FEATURES}"
        ):
            self.make_layer()(torch.rand(3, IN_FEATURES + 1))

    def test_rejects_scalar_input(self) -> None:
        with pytest.raises(ValueError, match="at least 1 dimension"):
            self.make_layer()(torch.tensor(1.0))

    def test_rejects_non_finite_input(self) -> None:
        x = torch.rand(3, IN_FEATURES)
        x[1, 2] = float("inf")
        with pytest.raises(ValueError, match="'x' must be finite, got 1 NaN/Inf"):
            self.make_layer()(x)

    def test_rejects_integer_input(self) -> None:
        with pytest.raises(TypeError, match="'x' must be a floating-point tensor"):
            self.make_layer()(torch.ones(3, IN_FEATURES, dtype=torch.long))

    @pytest.mark.parametrize(
        ("kwargs", "exc", "match"),
        [
            ({"gamma": 0.0}, ValueError, "argument 'gamma' must be a finite number > 0, got 0.0"),
            ({"gamma": float("nan")}, ValueError, "argument 'gamma' must be a finite number > 0"),
            (
                {"out_features": 0},
                ValueError,
                "argument 'out_features' must be an integer >= 1, got 0",
            ),
            ({"in_features": 2.5}, TypeError, "argument 'in_features' must be an integer"),
            (
                {"in_features": 0},
                ValueError,
                "argument 'in_features' must be an integer >= 1, got 0",
            ),
        ],
    )
    def test_constructor_errors(self, kwargs: dict, exc: type, match: str) -> None:
        with pytest.raises(exc, match=match):
            self.make_layer(**kwargs)

    def test_rejects_unknown_kernel(self) -> None:
        if not self.takes_kernel:
            pytest.skip("the map has one fixed kernel")
        with pytest.raises(ValueError, match=r"argument 'kernel' must be one of \[.*'gaussian'"):
            self.make_layer(kernel="rbf")

    @pytest.mark.filterwarnings("ignore::FutureWarning", "ignore::DeprecationWarning")
    def test_refuses_torch_jit_script(self) -> None:
        layer = self.make_layer()
        with pytest.raises(RuntimeError, match=rf"{type(layer).__name__}: torch.jit.script is not"):
            torch.jit.script(layer)

    def test_seed_and_generator_are_exclusive(self) -> None:
        with pytest.raises(ValueError, match="'seed' and 'generator' are exclusive"):
            self.make_layer(seed=1, generator=torch.Generator())
