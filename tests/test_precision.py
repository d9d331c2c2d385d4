"""Mixed precision, dtype mismatches and double backward."""

from __future__ import annotations

import numpy as np
import pytest
import references as ref
import torch
from torch import nn

from kernel_layers import (
    FourierLayer,
    KernelClassifier,
    NystromLayer,
    discriminant_information,
    nystrom_discriminant_information,
)
from kernel_layers.training.heads import RidgeHead


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("layer_cls", [FourierLayer, NystromLayer])
def test_layers_under_autocast_compute_in_float32(layer_cls: type, dtype: torch.dtype) -> None:
    layer = layer_cls(8, 16, gamma=0.5, seed=0)
    x = torch.rand(64, 8)
    reference = layer(x)
    backbone = nn.Linear(8, 8)
    nn.init.eye_(backbone.weight)
    nn.init.zeros_(backbone.bias)
    with torch.autocast("cpu", dtype=dtype):
        h = backbone(x)  # a low-precision activation, as from an autocast backbone
        assert h.dtype == dtype
        out = layer(h)
    assert out.dtype == torch.float32
    # Only the input's rounding to low precision differs from the float32 reference.
    torch.testing.assert_close(out, layer(h.float()), rtol=1e-6, atol=1e-6)
    assert (out - reference).abs().max() < 0.05
    out.sum().backward()
    assert all(torch.isfinite(p.grad).all() for p in layer.parameters())


def test_di_and_nysdi_under_autocast_match_float32() -> None:
    g = torch.Generator().manual_seed(0)
    x, labels = torch.rand(600, 10, generator=g), torch.randint(0, 4, (600,), generator=g)
    z = x[:40].clone()
    phi = FourierLayer(10, 50, gamma=0.5, seed=0)(x).detach()
    di32 = discriminant_information(phi, labels)
    nys32 = nystrom_discriminant_information(x, labels, z, gamma=0.5)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        di_amp = discriminant_information(phi, labels)
        nys_amp = nystrom_discriminant_information(x, labels, z, gamma=0.5)
    assert di_amp.dtype == torch.float32 and nys_amp.dtype == torch.float32
    torch.testing.assert_close(di_amp, di32, rtol=1e-6, atol=0)
    torch.testing.assert_close(nys_amp, nys32, rtol=1e-6, atol=0)
    half = discriminant_information(phi.bfloat16(), labels)  # bf16 features: solved in float32
    assert half.dtype == torch.float32
    assert half.item() == pytest.approx(di32.item(), rel=2e-2)


def test_backbone_in_bf16_autocast_trains_kernel_layer_in_float32(device: torch.device) -> None:
    model = KernelClassifier(
        NystromLayer(6, 10, gamma=0.5, seed=0), num_classes=3, backbone=nn.Linear(6, 6)
    ).to(device)
    x, y = torch.rand(40, 6, device=device), torch.arange(40, device=device) % 3
    with torch.autocast(device.type, dtype=torch.bfloat16):
        h = model.embed(x)
        di = model._di(h, y)
    assert h.dtype == torch.bfloat16 and di.dtype == torch.float32
    (-di).backward()
    assert torch.isfinite(model.backbone.weight.grad).all()
    assert model.backbone.weight.grad.abs().sum() > 0


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_ridge_read_out_under_autocast_scores_in_float32(dtype: torch.dtype) -> None:
    g = torch.Generator().manual_seed(0)
    features, targets = torch.rand(50, 12, generator=g), torch.rand(50, 2, generator=g) + 1e3
    head = RidgeHead(12, 2, rho=0.1)
    head.update(features, targets)
    head.fit()
    reference = features.double() @ head.weight.double() + head.bias.double()
    with torch.autocast("cpu", dtype=dtype):
        scores = head(features)
    assert scores.dtype == torch.float32
    torch.testing.assert_close(scores.double(), reference, rtol=1e-6, atol=0)


@pytest.mark.parametrize("layer_cls", [FourierLayer, NystromLayer])
def test_float64_input_to_float32_layer_is_a_clear_error(layer_cls: type) -> None:
    layer = layer_cls(3, 4, seed=0)
    with pytest.raises(
        TypeError,
        match=rf"{layer_cls.__name__}: argument 'x' must have the layer's dtype torch.float32",
    ):
        layer(torch.rand(5, 3, dtype=torch.float64))


def test_nysdi_dtype_mismatch_is_a_clear_error() -> None:
    with pytest.raises(TypeError, match="nystrom_discriminant_information: argument 'x' must"):
        nystrom_discriminant_information(
            torch.rand(6, 2, dtype=torch.float64),
            torch.arange(6) % 2,
            torch.rand(3, 2),
            gamma=1.0,
        )


def test_double_backward_refuses_instead_of_being_silently_wrong() -> None:
    phi = torch.randn(20, 4, dtype=torch.float64, requires_grad=True)
    di = discriminant_information(phi, torch.arange(20) % 2)
    with pytest.raises(RuntimeError, match=r"double backward \(create_graph=True\) is not"):
        torch.autograd.grad(di, phi, create_graph=True)
    layer = FourierLayer(3, 5, seed=0, dtype=torch.float64)
    x = torch.rand(4, 3, dtype=torch.float64, requires_grad=True)
    with pytest.raises(RuntimeError, match=r"FourierLayer: double backward"):
        torch.autograd.grad(layer(x).sum(), x, create_graph=True)
    # First-order gradients are unaffected.
    (grad,) = torch.autograd.grad(discriminant_information(phi, torch.arange(20) % 2), phi)
    assert torch.isfinite(grad).all()


@pytest.mark.parametrize("kernel", ["cauchy", "chi2", "skewed_chi2"])
def test_product_kernels_refuse_double_backward(kernel: str) -> None:
    # A gradient penalty through a Linear in front: the closed-form backward would act
    # as a constant and give wrong second derivatives.
    layer = NystromLayer(3, 5, kernel=kernel, gamma=0.5, seed=0, dtype=torch.float64)
    front = nn.Linear(3, 3, dtype=torch.float64)
    x = torch.rand(4, 3, dtype=torch.float64, requires_grad=True)
    with pytest.raises(RuntimeError, match=r"product kernels .*: double backward"):
        torch.autograd.grad(layer(front(x).abs()).sum(), x, create_graph=True)
    (grad,) = torch.autograd.grad(layer(front(x).abs()).sum(), x)  # first order still works
    assert torch.isfinite(grad).all()


def _covtype_like(rows: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """CovType's layout: 10 continuous columns in [0, 1], then a one-hot block of 4
    (wilderness) and one of 40 (soil type); 7 classes."""
    rng = np.random.default_rng(seed)
    x = np.zeros((rows, 54))
    x[:, :10] = rng.random((rows, 10))
    x[np.arange(rows), 10 + rng.integers(0, 4, rows)] = 1.0
    x[np.arange(rows), 14 + rng.integers(0, 40, rows)] = 1.0
    return x, rng.integers(0, 7, rows)


@pytest.mark.parametrize("narrow", [True, False])
def test_float32_nysdi_on_narrow_inputs_matches_float64_reference(
    narrow: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Narrow inputs (D = 54 <= 64) with a small gamma: K_Z is nearly
    # singular and float32 kernel entries alone move NysDI by ~4e-4 here (1.3e-3 on
    # CovType at gamma 0.01); the library evaluates those kernel matrices in float64.
    from kernel_layers.numerics import precision

    if not narrow:  # the float32 path, to show this data does need float64 kernels
        monkeypatch.setattr(precision, "NARROW_INPUT_RATIO", 10**9)
        monkeypatch.setattr(precision, "NARROW_INPUT_WIDTH", 0)
    x, labels = _covtype_like(500, seed=0)
    z = _covtype_like(300, seed=1)[0]
    gamma, jitter = 0.003, 1e-6
    want = ref.nysdi(
        ref.gaussian(x, z, gamma),
        ref.gaussian(z, z, gamma) + jitter * np.eye(len(z)),
        ref.onehot_unit(labels, 7),
        1e-4,
    )
    got = nystrom_discriminant_information(
        torch.tensor(x, dtype=torch.float32),
        torch.tensor(labels),
        torch.tensor(z, dtype=torch.float32),
        gamma=gamma,
        jitter=jitter,
        num_classes=7,
    )
    assert got.dtype == torch.float32
    error = abs(got.item() - want) / want
    if narrow:  # measured: 3.5e-9
        assert error < 1e-6
    else:  # measured: 3.8e-4
        assert error > 1e-5


@pytest.mark.parametrize("training", [True, False])
@pytest.mark.parametrize("narrow", [True, False])
def test_float32_nystrom_features_of_narrow_inputs_match_float64_reference(
    narrow: bool, training: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The features the read-out and predictions see, G R^-T with K_Z = R R^T: on narrow
    # inputs at a small gamma a float32 G holds too few digits of 1 - k for the
    # ill-conditioned R^-T, so the map evaluates G and G R^-T in float64, as NysDI does.
    # Both paths: the training map (Cholesky solve) and the cached eval map.
    from kernel_layers.numerics import precision

    if not narrow:  # the float32 path, to show this data does need float64 kernels
        monkeypatch.setattr(precision, "NARROW_INPUT_RATIO", 10**9)
        monkeypatch.setattr(precision, "NARROW_INPUT_WIDTH", 0)
    rng = np.random.default_rng(0)
    x, z = rng.random((400, 10)), rng.random((100, 10))
    labels = rng.integers(0, 5, 400)
    gamma, jitter = 0.01, 1e-6
    factor = np.linalg.cholesky(ref.gaussian(z, z, gamma) + jitter * np.eye(len(z)))
    want = np.linalg.solve(factor, ref.gaussian(x, z, gamma).T).T
    layer = NystromLayer(
        10, 100, landmarks=torch.tensor(z, dtype=torch.float32), gamma=gamma, jitter=jitter
    )
    layer.train(training)
    with torch.no_grad():
        got = layer(torch.tensor(x, dtype=torch.float32))
    assert got.dtype == torch.float32
    feature_error = np.linalg.norm(got.double().numpy() - want) / np.linalg.norm(want)
    di_want = ref.di(want, ref.onehot_unit(labels, 5), 1e-4)
    di_error = abs(ref.di(got.double().numpy(), ref.onehot_unit(labels, 5), 1e-4) - di_want)
    if narrow:  # measured: features 2.7e-8, DI 8e-10 relative
        assert feature_error < 1e-6
        assert di_error / di_want < 1e-5
    else:  # measured: features 5.2e-4 to 5.8e-4, DI 8e-3 to 1.3e-2 relative
        assert feature_error > 1e-5
        assert di_error / di_want > 1e-3


def test_float32_nysdi_on_narrow_inputs_differentiates_in_float32() -> None:
    # The Gaussian kernel on narrow float32 inputs: G and K_Z in float64 for the value,
    # the backward in float32. The value is the general path's bit for bit (a callable
    # wrapping the same kernel takes that path, differentiating in float64); both
    # float32 gradients stay near the float64 inputs' gradients.
    from kernel_layers.kernels.functions import gaussian_kernel

    x, labels = _covtype_like(500, seed=0)
    z = _covtype_like(300, seed=1)[0]
    gamma, jitter = 0.003, 1e-6
    kernels = {
        "fast": "gaussian",
        "general": lambda a, b: gaussian_kernel(a, b, gamma),
        "float64": "gaussian",
    }
    values, grads = {}, {}
    for name, kernel in kernels.items():
        dtype = torch.float64 if name == "float64" else torch.float32
        xt = torch.tensor(x, dtype=dtype, requires_grad=True)
        zt = torch.tensor(z, dtype=dtype, requires_grad=True)
        di = nystrom_discriminant_information(
            xt, torch.tensor(labels), zt, kernel=kernel, gamma=gamma, jitter=jitter, num_classes=7
        )
        fast = type(di.grad_fn).__name__.startswith("_GaussianNysDI")
        assert fast == (name == "fast"), (name, type(di.grad_fn).__name__)
        di.backward()
        assert xt.grad is not None and zt.grad is not None
        assert xt.grad.dtype == zt.grad.dtype == dtype
        values[name], grads[name] = di.item(), (xt.grad.double(), zt.grad.double())
    assert values["fast"] == values["general"]
    # max-relative errors measured (x, landmarks): fast 3.2e-4, 1.9e-6; general 9.5e-8,
    # 1.1e-7 (the float32 wide-input landmark gradient: 5.5e-4, test_objectives.py)
    bounds = {"fast": (2e-3, 2e-5), "general": (1e-6, 1e-6)}
    for name, bound in bounds.items():
        for got, want, limit in zip(grads[name], grads["float64"], bound, strict=True):
            error = float((got - want).abs().max() / want.abs().max())
            assert error < limit, (name, error)


def _factor_dtypes(monkeypatch: pytest.MonkeyPatch) -> list[torch.dtype | None]:
    """Record the dtype of every factor DI's primal solve gets (``None``: the Gram was
    redone in float64)."""
    from kernel_layers.objectives import solve

    seen: list[torch.dtype | None] = []
    original = solve.factor_scatter

    def spy(scatter, ridge, dtype, owner):  # type: ignore[no-untyped-def]
        factor = original(scatter, ridge, dtype, owner)
        seen.append(None if factor is None else factor.dtype)
        return factor

    monkeypatch.setattr(solve, "factor_scatter", spy)
    return seen


def _scaled_columns(ratio: float, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """``[400, 60]`` Gaussian features whose column scales fall geometrically by
    ``ratio`` overall (the scatter's condition about ``ratio^2``), and 5-class labels."""
    rng = np.random.default_rng(seed)
    scales = ratio ** -np.linspace(0.0, 1.0, 60)
    return rng.standard_normal((400, 60)) * scales, rng.integers(0, 5, 400)


@pytest.mark.parametrize(("ratio", "factor_dtype"), [(3.0, torch.float32), (90.0, torch.float64)])
def test_float32_di_factorises_in_float32_only_when_its_round_off_allows(
    ratio: float, factor_dtype: torch.dtype, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Estimate eps32 * max diag / min pivot^2: about 1e-6 at ratio 3, 1e-3 at ratio 90
    # (above FLOAT32_FACTOR_LIMIT, within the float32 Gram's limit): float64 factor.
    seen = _factor_dtypes(monkeypatch)
    x, labels = _scaled_columns(ratio)
    y = ref.onehot_unit(labels, 5)
    phi = torch.tensor(x, dtype=torch.float32, requires_grad=True)
    got = discriminant_information(phi, torch.tensor(labels), num_classes=5)
    (grad,) = torch.autograd.grad(got, phi)
    assert seen == [factor_dtype]
    assert got.dtype == torch.float32
    exact = x.astype(np.float32).astype(np.float64)  # the same float32 features
    want = ref.di(exact, y, 1e-4)
    assert abs(got.item() - want) / want < 1e-6  # measured 1.5e-7 (ratio 3), 1.6e-8 (90)
    want_grad = ref.di_closed_gradient(exact, y, 1e-4)
    assert np.abs(grad.numpy() - want_grad).max() / np.abs(want_grad).max() < 1e-5


def test_float32_factor_can_be_turned_off(monkeypatch: pytest.MonkeyPatch) -> None:
    from kernel_layers.numerics import precision

    seen = _factor_dtypes(monkeypatch)
    x, labels = _scaled_columns(3.0)
    phi, target = torch.tensor(x, dtype=torch.float32), torch.tensor(labels)
    fast = discriminant_information(phi, target).item()
    monkeypatch.setattr(precision, "FLOAT32_FACTOR_LIMIT", 0.0)
    slow = discriminant_information(phi, target).item()
    assert seen == [torch.float32, torch.float64]
    assert fast == pytest.approx(slow, rel=1e-6)


def test_a_cached_projection_cast_by_a_module_move_is_recomputed() -> None:
    # Lightning's precision="bf16-true" calls .to(bfloat16) at every stage: on a map
    # already in bf16 only the float64 cache is cast, and must not serve rounded
    x = torch.rand(40, 6)
    layer = NystromLayer.from_data(x, 12, gamma=0.5, seed=0).to(torch.bfloat16).eval()
    with torch.no_grad():
        before = layer(x.bfloat16())
        layer.to(torch.bfloat16)
        assert torch.equal(layer(x.bfloat16()), before)
