"""The layers' input limits: inputs and gammas that would overflow float32 are refused by
name, float64 layers take them; bad seeds, meta tensors, wrong devices and widths fail at
once."""

from __future__ import annotations

import logging

import pytest
import torch

from kernel_layers import (
    EnsembleNystrom,
    FastfoodLayer,
    FourierLayer,
    NystromLayer,
)


@pytest.fixture(autouse=True)
def _quiet() -> None:
    logging.getLogger("lightning").setLevel(logging.ERROR)


F32_MAX = torch.finfo(torch.float32).max


def test_inputs_near_the_float32_limit_are_refused_by_name() -> None:
    with pytest.raises(
        ValueError,
        match=r"NystromLayer: argument 'x' must have entries with \|value\| <= 4.61e\+18 in "
        r"torch.float32 \(larger ones overflow the squared distances to the landmarks\), "
        r"got max \|value\| = 3e\+38",
    ):
        NystromLayer(4, 8)(torch.full((16, 4), 3e38))
    with pytest.raises(ValueError, match=r"FourierLayer: argument 'x' must have entries with"):
        FourierLayer(4, 8)(torch.full((2, 4), 3e38))
    # The old check summed the entries: the sum overflowed and reported a count of 0.
    with pytest.raises(ValueError, match=r"argument 'x' must be finite, got 1 NaN/Inf"):
        NystromLayer(4, 8)(torch.tensor([[F32_MAX, F32_MAX, 1.0, float("inf")]]))


def test_float64_layers_take_large_inputs() -> None:
    x = torch.full((3, 4), 1e30, dtype=torch.float64)
    out = NystromLayer(4, 8, dtype=torch.float64)(x)
    assert torch.isfinite(out).all()


@pytest.mark.parametrize(
    ("cls", "what", "wide_gamma"),
    [(FourierLayer, "the phases x W", 1e300), (FastfoodLayer, "the projections V x", 1e200)],
)
def test_a_gamma_that_overflows_the_map_in_its_dtype_is_refused(
    cls: type, what: str, wide_gamma: float
) -> None:
    with pytest.raises(
        ValueError,
        match=rf"{cls.__name__}: argument 'gamma' must keep {what} of inputs in \[0, 1\] "
        r"finite in torch.float32, got gamma=1e\+300",
    ):
        cls(4, 8, gamma=1e300)
    wide = cls(4, 8, gamma=wide_gamma, dtype=torch.float64)  # float64 holds it
    assert torch.isfinite(wide(torch.rand(2, 4, dtype=torch.float64))).all()


def test_kernel_params_are_read_only_and_gamma_is_checked_when_set() -> None:
    layer = NystromLayer(4, 6, kernel="polynomial", kernel_params={"degree": 3}, seed=0)
    with pytest.raises(TypeError, match="does not support item assignment"):
        layer.kernel_params["degree"] = 1  # type: ignore[index]
    assert layer.get_config()["kernel_params"] == {"degree": 3, "coef0": 1.0}
    with pytest.raises(
        ValueError, match="NystromLayer: argument 'gamma' must be a finite number > 0"
    ):
        layer.gamma = -1.0
    layer.gamma = 2  # an accepted value is stored as a float
    assert layer.gamma == 2.0 and type(layer.gamma) is float


@pytest.mark.parametrize("seed", [1.5, True, "1"])
def test_non_integer_seed_is_refused(seed: object) -> None:
    with pytest.raises(TypeError, match=r"argument 'seed' must be an integer >= 0"):
        FourierLayer(4, 8, seed=seed)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"argument 'seed' must be an integer >= 0"):
        NystromLayer(4, 8, seed=seed)  # type: ignore[arg-type]


@pytest.mark.parametrize("cls", [NystromLayer, FourierLayer])
def test_meta_wrong_device_and_wrong_width_inputs_fail_at_the_first_call(cls: type) -> None:
    name = cls.__name__
    with pytest.raises(ValueError, match=rf"{name}: argument 'x' must have last dimension 4"):
        cls(4, 8)(torch.rand(3, 5))
    with pytest.raises(ValueError, match=rf"{name}: argument 'x' must hold data, got a meta"):
        cls(4, 8)(torch.rand(3, 4, device="meta"))
    layer = cls(4, 8)
    layer.to("meta")
    with pytest.raises(
        ValueError, match=rf"{name}: argument 'x' must be on the layer's device meta, got cpu"
    ):
        layer(torch.rand(3, 4))


@pytest.mark.parametrize("cls", [NystromLayer, FourierLayer])
def test_a_map_pickled_with_plain_gamma_attributes_loads(cls: type) -> None:
    # Before gamma and kernel_params were checked properties, a pickle stored them as
    # plain attributes: such a state still loads into the same map.
    layer = cls(4, 6, seed=0)
    state = layer.__getstate__().copy()
    state["gamma"], state["kernel_params"] = state.pop("_gamma"), state.pop("_kernel_params")
    old = cls.__new__(cls)
    old.__setstate__(state)
    x = torch.rand(3, 4)
    assert torch.equal(old(x), layer(x)) and old.gamma == layer.gamma


def test_a_new_gamma_reaches_every_map_of_an_ensemble() -> None:
    ensemble = EnsembleNystrom(3, [6, 6], gamma=1.0, seed=0, dtype=torch.float64)
    ensemble.gamma = 4.0
    assert [m.gamma for m in ensemble.maps] == [4.0, 4.0]
    rebuilt = EnsembleNystrom(**ensemble.get_config(), dtype=torch.float64)
    rebuilt.load_state_dict(ensemble.state_dict())
    x = torch.rand(5, 3, dtype=torch.float64)
    torch.testing.assert_close(rebuilt(x), ensemble(x), rtol=0, atol=0)


@pytest.mark.parametrize("make", [FourierLayer, FastfoodLayer])
def test_a_map_drawn_from_gamma_refuses_a_new_one(make) -> None:
    layer = make(3, 8, gamma=1.0, seed=0)
    with pytest.raises(AttributeError, match=r"'gamma' is fixed once the map is built .*"):
        layer.gamma = 2.0
    with pytest.raises(ValueError, match=r"argument 'gamma' must be a finite number > 0"):
        layer.gamma = -1.0
    layer.gamma = 1.0  # its own value: nothing changes
    assert layer.gamma == 1.0


def test_an_ensemble_of_float64_landmarks_weighs_in_float64() -> None:
    landmarks = [torch.rand(4, 3, dtype=torch.float64) for _ in range(2)]
    ensemble = EnsembleNystrom(3, [4, 4], landmarks=landmarks, weights=[1.0, 2.0])
    assert ensemble.weights.dtype == torch.float64
    torch.testing.assert_close(ensemble.weights, torch.tensor([1 / 3, 2 / 3], dtype=torch.float64))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_the_polynomial_kernels_limit_keeps_its_features_finite(dtype: torch.dtype) -> None:
    layer = NystromLayer(3, 4, kernel="polynomial", kernel_params={"degree": 3}, seed=0)
    layer = layer.to(dtype)
    limit = layer.input_limit()
    # float64 reference: (gamma D L^2 + coef0)^3 at the limit L is the dtype's largest
    assert (1.0 * 3 * limit**2 + 1.0) ** 3 == pytest.approx(torch.finfo(dtype).max, rel=1e-6)
    near = torch.full((2, 3), 0.99 * limit, dtype=dtype)
    assert torch.isfinite(layer(near)).all()
    with pytest.raises(ValueError, match=r"overflow the powers of inner products"):
        layer(torch.full((2, 3), 2 * limit, dtype=dtype))
