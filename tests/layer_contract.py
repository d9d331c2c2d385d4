"""Shared test bases for kernel feature maps; each map's test class supplies ``make_layer``.

:class:`FeatureMapContract` is what any :class:`KernelFeatureMap` keeps, a user's own
included (shapes, dtype and device moves, serialisation, ``get_config`` rebuilds, the
default DI); :class:`LayerContract` adds what the library's maps promise on top (input
validation with named arguments, seeds, trainability). Every behaviour is checked on
each device of the ``device`` fixture (``tests/conftest.py``).
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


class FeatureMapContract:
    """Behaviour every kernel feature map must have.

    ``make_layer(seed=s)`` builds a map of ``IN_FEATURES`` inputs and ``OUT_FEATURES``
    features whose random draws depend on ``s``.
    """

    def make_layer(self, **kwargs: object) -> KernelFeatureMap:
        raise NotImplementedError

    def layer_on(self, device: torch.device, **kwargs: object) -> KernelFeatureMap:
        """``make_layer(**kwargs)`` moved to ``device``."""
        return self.make_layer(**kwargs).to(device)

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

    def test_output_shape(self, device: torch.device) -> None:
        layer = self.layer_on(device)
        out = layer(torch.rand(11, IN_FEATURES, device=device))
        assert out.shape == (11, OUT_FEATURES) and out.device.type == device.type

    def test_leading_dimensions(self, device: torch.device) -> None:
        layer = self.layer_on(device)
        x = torch.rand(2, 3, IN_FEATURES, device=device)
        out = layer(x)
        assert out.shape == (2, 3, OUT_FEATURES)
        torch.testing.assert_close(out[1], layer(x[1]))

    def test_batch_of_one(self, device: torch.device) -> None:
        layer = self.layer_on(device)
        x = torch.rand(4, IN_FEATURES, device=device)
        torch.testing.assert_close(layer(x[2:3]), layer(x)[2:3])

    def test_non_contiguous_input(self, device: torch.device) -> None:
        layer = self.layer_on(device)
        x = torch.rand(IN_FEATURES, 9, device=device).T
        assert not x.is_contiguous()
        torch.testing.assert_close(layer(x), layer(x.contiguous()))

    def test_to_float64(self, device: torch.device) -> None:
        layer = self.layer_on(device)
        x = torch.rand(6, IN_FEATURES, device=device)
        out32 = layer(x)
        layer64 = layer.to(torch.float64)
        out64 = layer64(x.double())
        assert out64.dtype == torch.float64
        assert all(p.dtype == torch.float64 for p in layer64.parameters())
        torch.testing.assert_close(out64.float(), out32, rtol=1e-4, atol=1e-5)

    def test_state_dict_round_trip_before_forward(self, device: torch.device) -> None:
        a, b = self.layer_on(device, seed=1), self.layer_on(device, seed=2)
        x = torch.rand(6, IN_FEATURES, device=device)
        assert not torch.allclose(a(x), b(x))
        b.load_state_dict(a.state_dict())
        torch.testing.assert_close(a(x), b(x))

    def test_torch_save_load(self, device: torch.device) -> None:
        layer = self.layer_on(device)
        buffer = io.BytesIO()
        torch.save(layer.state_dict(), buffer)
        buffer.seek(0)
        state = torch.load(buffer, weights_only=True, map_location=device)
        fresh = self.layer_on(device, seed=99)
        fresh.load_state_dict(state)
        x = torch.rand(3, IN_FEATURES, device=device)
        torch.testing.assert_close(fresh(x), layer(x))

    def test_meta_build_then_to_empty_and_load_state_dict(self, device: torch.device) -> None:
        """The deferred-initialisation route (Lightning's ``empty_init``, FSDP): a map
        built on the meta device, given storage, then a state: the original's features."""
        layer = self.layer_on(device)
        with torch.device("meta"):
            shell = self.make_layer(seed=99)
        shell = shell.to_empty(device=device)
        shell.load_state_dict(layer.state_dict())
        x = torch.rand(4, IN_FEATURES, device=device)
        torch.testing.assert_close(shell(x), layer(x))

    def test_pickle(self, device: torch.device) -> None:
        layer = self.layer_on(device)
        clone = pickle.loads(pickle.dumps(layer))
        x = torch.rand(3, IN_FEATURES, device=device)
        torch.testing.assert_close(clone(x), layer(x))

    def test_seed_reproducible(self, device: torch.device) -> None:
        x = torch.rand(3, IN_FEATURES, device=device)
        torch.testing.assert_close(
            self.layer_on(device, seed=5)(x), self.layer_on(device, seed=5)(x)
        )

    def test_get_config_rebuilds_the_map(self, device: torch.device) -> None:
        layer = self.layer_on(device, seed=3)
        config = layer.get_config()
        assert {"in_features", "out_features"} <= set(config)
        rebuilt = type(layer)(**config).to(device)
        assert rebuilt.get_config() == config
        rebuilt.load_state_dict(layer.state_dict())
        x = torch.rand(4, IN_FEATURES, device=device)
        torch.testing.assert_close(rebuilt(x), layer(x))

    def test_device_move(self, device: torch.device) -> None:
        """Moved from the CPU, the map computes the CPU's features on ``device``."""
        layer = self.make_layer()
        x = torch.rand(5, IN_FEATURES)
        want = layer(x)
        moved = layer.to(device)
        tensors = [*moved.parameters(), *moved.buffers()]
        assert all(t.device.type == device.type for t in tensors)
        got = moved(x.to(device))
        assert got.device.type == device.type
        torch.testing.assert_close(got.cpu(), want, rtol=1e-4, atol=1e-5)

    def test_discriminant_information_is_that_of_the_features(self, device: torch.device) -> None:
        layer = self.layer_on(device).to(torch.float64)
        x = torch.rand(40, IN_FEATURES, dtype=torch.float64, device=device)
        y = torch.arange(40, device=device) % 3
        got = layer.discriminant_information(x, y, rho=0.1, num_classes=3)
        want = discriminant_information(layer(x), y, rho=0.1, num_classes=3)
        torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-8)


class LayerContract(FeatureMapContract):
    """What the library's maps add: input validation, seeds, trainability, kernels."""

    #: Whether the map takes ``kernel=`` (FastfoodLayer is Gaussian only).
    takes_kernel = True

    def test_gradients_reach_parameters(self, device: torch.device) -> None:
        layer = self.layer_on(device)
        layer(torch.rand(8, IN_FEATURES, device=device)).pow(2).sum().backward()
        params = [p for p in layer.parameters() if p.requires_grad]
        assert params
        assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in params)

    def test_untrainable_has_no_trainable_parameters(self) -> None:
        layer = self.make_layer(trainable=False)
        assert not any(p.requires_grad for p in layer.parameters())

    def test_rejects_wrong_width(self, device: torch.device) -> None:
        layer = self.layer_on(device)
        name = type(layer).__name__
        with pytest.raises(
            ValueError, match=rf"{name}: argument 'x' must have last dimension {IN_FEATURES}"
        ):
            layer(torch.rand(3, IN_FEATURES + 1, device=device))

    def test_rejects_input_on_another_device(self, device: torch.device) -> None:
        """A map on ``device`` names its device when given rows from elsewhere (on the
        CPU: a map moved to ``meta``)."""
        layer = self.layer_on(device if device.type != "cpu" else torch.device("meta"))
        here = "meta" if device.type == "cpu" else device.type
        with pytest.raises(
            ValueError, match=rf"argument 'x' must be on the layer's device {here}.*, got cpu"
        ):
            layer(torch.rand(3, IN_FEATURES))

    def test_rejects_scalar_input(self) -> None:
        with pytest.raises(ValueError, match="at least 1 dimension"):
            self.make_layer()(torch.tensor(1.0))

    def test_rejects_non_finite_input(self, device: torch.device) -> None:
        x = torch.rand(3, IN_FEATURES, device=device)
        x[1, 2] = float("inf")
        with pytest.raises(ValueError, match="'x' must be finite, got 1 NaN/Inf"):
            self.layer_on(device)(x)

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
