"""One shared test base for kernel layers; each layer's test class supplies ``make_layer``."""

from __future__ import annotations

import io
import pickle

import pytest
import torch
from torch import nn

IN_FEATURES = 5
OUT_FEATURES = 7


class LayerContract:
    """Behaviour every kernel layer must have: shapes, dtypes, serialisation, validation."""

    def make_layer(self, **kwargs: object) -> nn.Module:
        raise NotImplementedError

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

    def test_gradients_reach_parameters(self) -> None:
        layer = self.make_layer()
        layer(torch.rand(8, IN_FEATURES)).pow(2).sum().backward()
        params = [p for p in layer.parameters() if p.requires_grad]
        assert params
        assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in params)

    def test_untrainable_has_no_trainable_parameters(self) -> None:
        layer = self.make_layer(trainable=False)
        assert not any(p.requires_grad for p in layer.parameters())

    def test_repr_names_the_sizes(self) -> None:
        text = repr(self.make_layer())
        assert f"in_features={IN_FEATURES}" in text
        assert f"out_features={OUT_FEATURES}" in text

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
            ({"kernel": "rbf"}, ValueError, r"argument 'kernel' must be one of \[.*'gaussian'"),
        ],
    )
    def test_constructor_errors(self, kwargs: dict, exc: type, match: str) -> None:
        with pytest.raises(exc, match=match):
            self.make_layer(**kwargs)

    def test_seed_and_generator_are_exclusive(self) -> None:
        with pytest.raises(ValueError, match="'seed' and 'generator' are exclusive"):
            self.make_layer(seed=1, generator=torch.Generator())
