"""DI, NysDI and the LS loss against float64 NumPy references and their known identities."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
import references as ref
import torch
from sklearn.datasets import load_digits

from kernel_layers import (
    DILoss,
    FourierLayer,
    NystromLayer,
    discriminant_information,
    least_squares_loss,
    nystrom_discriminant_information,
)
from kernel_layers.objectives import di_statistics, encode_targets, merge_statistics


@pytest.fixture(scope="module")
def digits() -> tuple[torch.Tensor, torch.Tensor]:
    x, y = load_digits(return_X_y=True)
    return torch.tensor(x / 16.0), torch.tensor(y)


def _features(b: int = 60, j: int = 12, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(b, j, generator=g, dtype=torch.float64)


@pytest.mark.parametrize("form", ["primal", "dual", "auto"])
@pytest.mark.parametrize(("b", "j"), [(60, 12), (12, 30)])
def test_di_matches_numpy_labels(form: str, b: int, j: int, device: torch.device) -> None:
    phi = _features(b, j)
    labels = torch.arange(b) % 4
    got = discriminant_information(phi.to(device), labels.to(device), rho=1e-3, form=form)
    want = ref.di(phi.numpy(), ref.onehot_unit(labels.numpy(), 4), 1e-3)
    assert got.dtype == torch.float64
    assert got.item() == pytest.approx(want, rel=1e-10)


def _svd_di(phi: np.ndarray, y: np.ndarray, rho: float) -> float:
    """DI by the SVD of the centred features: ``sum_k s_k^2 / (s_k^2 + rho) ||u_k^T
    Y_c||^2``, no Gram formed (float64)."""
    u, sv, _ = np.linalg.svd(phi - phi.mean(0), full_matrices=False)
    projected = (u.T @ (y - y.mean(0))) ** 2
    return float((sv**2 / (sv**2 + rho) * projected.sum(1)).sum())


@pytest.mark.parametrize(("scale", "rho"), [(1.0, 1e-8), (1e2, 1e-4), (1e4, 1e-4)])
def test_auto_form_of_rank_deficient_features_keeps_every_digit(scale: float, rho: float) -> None:
    # B < J with features of rank 5: the dual Gram's null space rests on rho next to its
    # norm, so "auto" takes the primal form here.
    g = torch.Generator().manual_seed(0)
    phi = (
        scale
        * torch.randn(50, 5, generator=g, dtype=torch.float64)
        @ torch.randn(5, 100, generator=g, dtype=torch.float64)
    )
    labels = torch.arange(50) % 4
    y = ref.onehot_unit(labels.numpy(), 4)
    got = discriminant_information(phi, labels, rho=rho)
    assert got.item() == pytest.approx(_svd_di(phi.numpy(), y, rho), rel=1e-12)


@pytest.mark.parametrize(
    ("dtype", "offset", "rel"),
    [
        (torch.float64, 1e3, 1e-9),  # within its bound eps tr(G) / rho (7e-10 here)
        (torch.float32, 0.0, 1e-6),
        (torch.float32, 1e3, 1e-6),
    ],
)
def test_auto_form_takes_the_dual_form_within_its_round_off_bound(
    dtype: torch.dtype, offset: float, rel: float, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The bound is that of the centred features (the dual Gram's): a common offset, as
    # all-positive kernel features have, no longer sends B < J to the J^3 primal form.
    # Float32 features of rank 5: the dual Gram is formed in float64 beyond its float32
    # bound (a float32 Gram accepted by its pivots alone was 3e-3 off here).
    from kernel_layers.objectives import solve

    calls: list[bool] = []
    original = solve._solve_dual

    def spy(*args, **kwargs):  # type: ignore[no-untyped-def]
        solved = original(*args, **kwargs)
        calls.append(solved is not None)
        return solved

    monkeypatch.setattr(solve, "_solve_dual", spy)
    g = torch.Generator().manual_seed(0)
    low_rank = torch.randn(20, 5, generator=g, dtype=torch.float64)
    phi = (low_rank @ torch.randn(5, 300, generator=g, dtype=torch.float64) + offset).to(dtype)
    labels = torch.arange(20) % 4
    got = discriminant_information(phi, labels, rho=1e-2)
    assert calls == [True]
    want = _svd_di(phi.double().numpy(), ref.onehot_unit(labels.numpy(), 4), 1e-2)
    assert got.item() == pytest.approx(want, rel=rel)


@pytest.mark.parametrize(("b", "j", "offset"), [(12, 100, 1e4), (64, 512, 0.0)])
def test_forced_dual_form_of_float32_features_of_low_rank_keeps_float32_accuracy(
    b: int, j: int, offset: float
) -> None:
    # A float32 Gram whose pivots passed its precision check lost up to a quarter of DI
    # on features of low rank; the primal form keeps the float32 input's accuracy.
    g = torch.Generator().manual_seed(1)
    low_rank = torch.randn(b, 5, generator=g, dtype=torch.float64) * 0.15
    phi = (low_rank @ torch.randn(5, j, generator=g, dtype=torch.float64) + offset).float()
    labels = torch.arange(b) % 3
    want = _svd_di(phi.double().numpy(), ref.onehot_unit(labels.numpy(), 3), 1e-2)
    primal = discriminant_information(phi, labels, rho=1e-2, form="primal").item()
    dual = discriminant_information(phi, labels, rho=1e-2, form="dual").item()
    assert dual == pytest.approx(want, rel=max(2 * abs(primal - want) / want, 1e-6))


@pytest.mark.parametrize(("scale", "rho"), [(1e4, 1e-4), (1e4, 1e-6), (1e6, 1e-4)])
def test_forced_dual_form_of_rank_deficient_features_stays_within_its_bounds(
    scale: float, rho: float
) -> None:
    # Forced, the dual form's round-off swamps DI here (it gave -2.74, and 2.99 for a
    # true 0.18 where robust_cholesky added a jitter): a result outside 0 <= DI <=
    # ||Y_c||^2 is recomputed in the primal form, and within them DI is that of the
    # (jittered) system factorised.
    g = torch.Generator().manual_seed(0)
    low_rank = torch.randn(50, 5, generator=g, dtype=torch.float64)
    phi = scale * low_rank @ torch.randn(5, 100, generator=g, dtype=torch.float64)
    labels = torch.arange(50) % 4
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # the jitter's own warning
        got = discriminant_information(phi, labels, rho=rho, form="dual")
    want = _svd_di(phi.numpy(), ref.onehot_unit(labels.numpy(), 4), rho)
    assert got.item() == pytest.approx(want, rel=1e-2) and 0.0 <= got.item() <= 3.0


@pytest.mark.parametrize(
    ("dtype", "value", "sums_in"),
    [(torch.float64, 1e200, "torch.float64"), (torch.float32, 1e40, "torch.float32")],
)
def test_float_targets_whose_squares_overflow_are_refused(
    dtype: torch.dtype, value: float, sums_in: str
) -> None:
    # Finite targets whose sum of squares is not: DI was inf or NaN.
    phi = _features().to(dtype)
    y = torch.full((60, 1), value, dtype=torch.float64)
    y[::2] = -value
    with pytest.raises(
        ValueError,
        match=rf"argument 'targets' must have entries with \|value\| <= .* in {sums_in} "
        r"\(larger ones overflow the sums of squares over the batch\)",
    ):
        discriminant_information(phi, y)


@pytest.mark.parametrize(
    ("b", "j", "form"), [(60, 12, "primal"), (12, 30, "auto"), (12, 30, "dual")]
)
def test_features_whose_squares_overflow_are_named(b: int, j: int, form: str) -> None:
    # Finite float64 features whose scatter is not: the factorisation failed naming a
    # matrix, not the argument. Entries within the limit still factorise.
    phi = _features(b, j)
    labels = torch.arange(b) % 3
    with pytest.raises(
        ValueError,
        match=r"argument 'features' must have entries with \|value\| <= .* in torch.float64 "
        r"\(larger ones overflow the sums of squares over the batch\), got max \|value\| = "
        r".*e\+160; scale the inputs \(e.g. to \[0, 1\]\)$",
    ):
        discriminant_information(phi * 1e160, labels, form=form)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a jitter, at this size
        assert math.isfinite(discriminant_information(phi * 1e150, labels, form=form).item())


def test_di_regression_targets_used_as_is() -> None:
    phi = _features()
    y = torch.randn(60, 3, dtype=torch.float64)
    got = discriminant_information(phi, y, rho=1e-2)
    assert got.item() == pytest.approx(ref.di(phi.numpy(), y.numpy(), 1e-2), rel=1e-10)


def test_absent_classes_contribute_nothing() -> None:
    phi = _features()
    labels = torch.arange(60) % 3
    a = discriminant_information(phi, labels)
    b = discriminant_information(phi, labels, num_classes=7)
    assert a.item() == pytest.approx(b.item(), rel=1e-12)


def test_di_bounds_and_maximum() -> None:
    phi = _features(200, 20)
    labels = torch.arange(200) % 5
    di = discriminant_information(phi, labels).item()
    assert 0.0 <= di <= 4.0
    # Features that contain the one-hot targets reach the bound L - 1 as rho -> 0.
    onehot = torch.nn.functional.one_hot(labels, 5).double()
    top = discriminant_information(torch.cat([onehot, phi], 1), labels, rho=1e-10).item()
    assert top == pytest.approx(4.0, rel=1e-8)
    # Features independent of the labels carry almost no information.
    noise = torch.randn(20000, 3, dtype=torch.float64)
    assert discriminant_information(noise, torch.arange(20000) % 5).item() < 0.01


def test_di_permutation_invariance() -> None:
    phi, labels = _features(), torch.arange(60) % 4
    perm = torch.randperm(12)
    rows = torch.randperm(60)
    a = discriminant_information(phi, labels)
    assert discriminant_information(phi[:, perm], labels).item() == pytest.approx(
        a.item(), rel=1e-12
    )
    assert discriminant_information(phi[rows], labels[rows]).item() == pytest.approx(
        a.item(), rel=1e-12
    )


def test_di_linear_invariance_as_rho_vanishes() -> None:
    phi, labels = _features(), torch.arange(60) % 4
    mix = torch.randn(12, 12, dtype=torch.float64) + 3 * torch.eye(12, dtype=torch.float64)
    a = discriminant_information(phi, labels, rho=1e-12)
    b = discriminant_information(phi @ mix, labels, rho=1e-12)
    assert b.item() == pytest.approx(a.item(), rel=1e-8)


def test_mrlse_identity() -> None:
    phi, labels = _features(), torch.arange(60) % 4
    y = ref.onehot_unit(labels.numpy(), 4)
    yc = y - y.mean(0)
    di = discriminant_information(phi, labels, rho=0.5).item()
    assert (yc**2).sum() - di == pytest.approx(ref.ridge_residual(phi.numpy(), y, 0.5), rel=1e-10)


def test_least_squares_loss_at_ridge_optimum_equals_mrlse() -> None:
    phi, labels = _features(), torch.arange(60) % 4
    y = torch.tensor(ref.onehot_unit(labels.numpy(), 4))
    pc, yc = phi - phi.mean(0), y - y.mean(0)
    w = torch.linalg.solve(pc.T @ pc + 0.5 * torch.eye(12, dtype=torch.float64), pc.T @ yc)
    b = y.mean(0) - phi.mean(0) @ w
    loss = least_squares_loss(phi, labels, w, b, rho=0.5)
    di = discriminant_information(phi, labels, rho=0.5)
    assert loss.item() == pytest.approx(((yc**2).sum() - di).item(), rel=1e-10)
    # Any other read-out is worse.
    assert least_squares_loss(phi, labels, w * 1.01, b, rho=0.5) > loss


def test_statistics_merge_exactly() -> None:
    phi = _features(100, 8) + 1e3  # large offset: naive S - s s^T / n would cancel
    y = torch.randn(100, 3, dtype=torch.float64)
    whole = di_statistics(phi, y)
    merged = merge_statistics(di_statistics(phi[:37], y[:37]), di_statistics(phi[37:], y[37:]))
    for a, b in zip(whole, merged, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-8)


@pytest.mark.parametrize("joint", [False, True])
def test_shared_statistics_centre_scale_and_multiply_as_float64_reference(joint: bool) -> None:
    # The one implementation of centring, unit-norm target scaling (an absent class
    # gets a zero column) and the centred products that DI and NysDI both use.
    from kernel_layers.objectives.statistics import (
        centre,
        centred_products,
        compute_moments,
        moment_sums,
    )

    phi = _features(50, 7, seed=3) * 3.0 + 10.0
    labels = torch.arange(50) % 3  # class 3 of 4 absent
    y = torch.nn.functional.one_hot(labels, 4).double()
    buffer = torch.cat([phi, y], dim=1) if joint else None
    parts = (buffer[:, :7], buffer[:, 7:]) if buffer is not None else (phi, y)
    sums = moment_sums(*parts, joint=buffer)
    moments = compute_moments(sums, 7, scale_columns=True)
    phi_c, y_c = centre(*parts, moments, joint=buffer)
    scatter, cross = centred_products(phi_c, y_c, joint=buffer)

    x, yn = phi.numpy(), ref.onehot_unit(labels.numpy(), 4)
    xc, ycn = x - x.mean(0), yn - yn.mean(0)
    assert moments.rows.item() == 50
    np.testing.assert_allclose(moments.mean.numpy(), x.mean(0), rtol=1e-14)
    np.testing.assert_allclose(moments.target_mean.numpy(), yn.mean(0), rtol=1e-14, atol=1e-16)
    np.testing.assert_allclose(y_c.numpy(), ycn, rtol=1e-13, atol=1e-15)
    np.testing.assert_allclose(phi_c.numpy(), xc, rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(np.tril(scatter.numpy()), np.tril(xc.T @ xc), rtol=1e-12)
    np.testing.assert_allclose(cross.numpy(), xc.T @ ycn, rtol=1e-12, atol=1e-12)
    assert (y_c[:, 3] == 0).all()


def test_float32_agrees_with_float64_at_paper_size(device: torch.device) -> None:
    # (B, J) = (4000, 2000): random Fourier features of the digits, resampled.
    x, labels = load_digits(return_X_y=True)
    idx = torch.randint(0, len(x), (4000,))
    xt = torch.tensor(x / 16.0)[idx] + 0.01 * torch.randn(4000, 64, dtype=torch.float64)
    layer = FourierLayer(64, 2000, gamma=0.05, seed=1, dtype=torch.float64)
    with torch.no_grad():
        phi = layer(xt)
    phi, y = phi.to(device), torch.tensor(labels)[idx].to(device)
    d64 = discriminant_information(phi, y).item()
    d32 = discriminant_information(phi.float(), y).item()
    assert d32 == pytest.approx(d64, rel=1e-5)


def test_nysdi_matches_pinv_reference(
    digits: tuple[torch.Tensor, torch.Tensor], device: torch.device
) -> None:
    x, y = digits
    z = x[torch.randperm(len(x))[:150]]
    on = [t.to(device) for t in (x, y, z)]
    got = nystrom_discriminant_information(*on, gamma=0.02, jitter=1e-12)
    g, k = ref.gaussian(x.numpy(), z.numpy(), 0.02), ref.gaussian(z.numpy(), z.numpy(), 0.02)
    want = ref.nysdi(g, k, ref.onehot_unit(y.numpy(), 10), 1e-4)
    assert got.item() == pytest.approx(want, rel=1e-7)


def test_nysdi_laplacian_matches_reference(digits: tuple[torch.Tensor, torch.Tensor]) -> None:
    x, y = digits[0][:300], digits[1][:300]
    z = x[:40]
    got = nystrom_discriminant_information(x, y, z, kernel="laplacian", gamma=0.05, jitter=1e-12)
    g, k = ref.laplacian(x.numpy(), z.numpy(), 0.05), ref.laplacian(z.numpy(), z.numpy(), 0.05)
    want = ref.nysdi(g, k, ref.onehot_unit(y.numpy(), 10), 1e-4)
    assert got.item() == pytest.approx(want, rel=1e-7)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_nysdi_equals_di_on_layer_features(
    digits: tuple[torch.Tensor, torch.Tensor], dtype: torch.dtype, device: torch.device
) -> None:
    x, y = digits[0].to(device, dtype), digits[1].to(device)
    layer = NystromLayer.from_data(x.cpu(), 200, gamma=0.02, seed=3).to(device)
    with torch.no_grad():
        di = discriminant_information(layer(x), y)
        nys = nystrom_discriminant_information(
            x, y, layer.landmarks, gamma=0.02, jitter=layer.jitter
        )
    rel = 1e-9 if dtype == torch.float64 else 1e-4
    assert nys.item() == pytest.approx(di.item(), rel=rel)


def test_nysdi_float32_close_to_float64(
    digits: tuple[torch.Tensor, torch.Tensor], device: torch.device
) -> None:
    x, y = digits[0].to(device), digits[1].to(device)
    z = x[torch.randperm(len(x))[:400].to(device)]
    d64 = nystrom_discriminant_information(x, y, z, gamma=0.005, jitter=1e-6).item()
    d32 = nystrom_discriminant_information(x.float(), y, z.float(), gamma=0.005, jitter=1e-6)
    assert d32.dtype == torch.float32
    assert d32.item() == pytest.approx(d64, rel=1e-4)


def test_nysdi_duplicate_landmarks_finite(digits: tuple[torch.Tensor, torch.Tensor]) -> None:
    x, y = digits[0][:200].clone(), digits[1][:200]
    z = torch.cat([x[:10], x[:10]]).requires_grad_(True)
    val = nystrom_discriminant_information(x, y, z, gamma=0.05)
    val.backward()
    assert torch.isfinite(val)
    assert torch.isfinite(z.grad).all()
    unique = nystrom_discriminant_information(x, y, x[:10], gamma=0.05)
    assert val.item() == pytest.approx(unique.item(), rel=1e-5)


def test_di_loss_is_negative_di() -> None:
    phi, labels = _features(), torch.arange(60) % 4
    loss = DILoss(rho=1e-3, num_classes=4)(phi, labels)
    assert loss.item() == -discriminant_information(phi, labels, rho=1e-3).item()
    assert "rho=0.001" in repr(DILoss(rho=1e-3))


def test_encode_targets_one_hot() -> None:
    y, scale = encode_targets(torch.tensor([2, 0, 2]), 3, num_classes=4)
    assert scale
    assert y.tolist() == [[0, 0, 1, 0], [1, 0, 0, 0], [0, 0, 1, 0]]


# --- errors -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "exc", "match"),
    [
        (
            {"features": torch.zeros(5)},
            ValueError,
            r"'features' must have shape \[N, D\], got \[5\]",
        ),
        ({"features": torch.zeros(5, 2, dtype=torch.long)}, TypeError, "floating-point"),
        ({"features": torch.full((5, 2), float("nan"))}, ValueError, "must be finite, got 10 NaN"),
        (
            {"features": torch.zeros(1, 2), "targets": torch.zeros(1, dtype=torch.long)},
            ValueError,
            "at least 2 rows, got 1",
        ),
        ({"targets": torch.zeros(4, dtype=torch.long)}, ValueError, "must have 5 rows"),
        ({"targets": torch.tensor([0, 1, -1, 0, 1])}, ValueError, "labels >= 0, got -1"),
        (
            {"targets": torch.tensor([0, 1, 5, 0, 1]), "num_classes": 3},
            ValueError,
            "labels < num_classes=3, got 5",
        ),
        ({"targets": torch.zeros(5)}, ValueError, r"float tensor of shape \[5\]"),
        ({"targets": torch.zeros(5, 2, dtype=torch.long)}, ValueError, r"labels of shape \[B\]"),
        ({"targets": torch.ones(5, dtype=torch.bool)}, TypeError, "dtype torch.bool"),
        (
            {"targets": torch.tensor([[0.0], [1.0], [float("inf")], [0.0], [1.0]])},
            ValueError,
            "'targets' must be finite",
        ),
        ({"rho": 0.0}, ValueError, "'rho' must be a finite number > 0, got 0.0"),
        ({"rho": "big"}, TypeError, "'rho' must be a number"),
        ({"form": "svd"}, ValueError, "'form' must be one of"),
        ({"num_classes": 0}, ValueError, "'num_classes' must be an integer >= 1, got 0"),
    ],
)
def test_di_errors(kwargs: dict, exc: type, match: str) -> None:
    args = {"features": torch.randn(5, 2), "targets": torch.tensor([0, 1, 0, 1, 0])}
    args.update(kwargs)
    features, targets = args.pop("features"), args.pop("targets")
    with pytest.raises(exc, match=match):
        discriminant_information(features, targets, **args)


def test_nysdi_errors() -> None:
    x, y, z = torch.rand(10, 3), torch.arange(10) % 2, torch.rand(4, 3)
    with pytest.raises(ValueError, match=r"'x' must have last dimension 3, got shape \[10, 2\]"):
        nystrom_discriminant_information(x[:, :2], y, z, gamma=1.0)
    with pytest.raises(ValueError, match=r"'landmarks' must have shape \[N, D\], got \[4\]"):
        nystrom_discriminant_information(x, y, z[:, 0], gamma=1.0)
    with pytest.raises(ValueError, match=r"'gamma' must be a finite number > 0, got -1\.0"):
        nystrom_discriminant_information(x, y, z, gamma=-1.0)
    with pytest.raises(ValueError, match="'jitter' must be a finite number > 0"):
        nystrom_discriminant_information(x, y, z, gamma=1.0, jitter=0.0)
    with pytest.raises(ValueError, match="'kernel' must be one of"):
        nystrom_discriminant_information(x, y, z, gamma=1.0, kernel="rbf")


def test_least_squares_loss_errors() -> None:
    with pytest.raises(ValueError, match=r"'weight' must have shape \[3, 2\], got \[2, 2\]"):
        least_squares_loss(torch.rand(6, 3), torch.arange(6) % 2, torch.zeros(2, 2))
    match = r"'weight' must have the features' dtype \(torch.float32; under autocast"
    with pytest.raises(TypeError, match=match + r".*got torch.float64"):
        least_squares_loss(torch.rand(6, 3), torch.arange(6) % 2, torch.zeros(3, 2).double())
    with torch.autocast("cpu", dtype=torch.bfloat16):  # autocast casts both: accepted
        features = torch.rand(6, 3).bfloat16()
        loss = least_squares_loss(features, torch.arange(6) % 2, torch.zeros(3, 2))
    assert torch.isfinite(loss)


def test_di_loss_errors() -> None:
    with pytest.raises(ValueError, match="DILoss: argument 'rho'"):
        DILoss(rho=-1)
    with pytest.raises(ValueError, match="DILoss: argument 'form' must be one of"):
        DILoss(form="x")
    with pytest.raises(TypeError, match="DILoss: argument 'num_classes' must be an integer"):
        DILoss(num_classes=2.5)


def test_nonfinite_di_is_impossible_for_degenerate_features() -> None:
    # Constant features: S = rho I, M = 0, DI = 0 exactly (no NaN).
    di = discriminant_information(torch.ones(10, 4), torch.arange(10) % 2)
    assert di.item() == 0.0
    np.testing.assert_equal(np.isfinite(di.item()), True)


@pytest.mark.parametrize("form", ["primal", "dual"])
@pytest.mark.parametrize(
    ("bad", "match"),
    [
        (float("nan"), r"'features' must be finite, got 1 NaN/Inf value\(s\)"),
        (float("-inf"), r"'features' must be finite, got 1 NaN/Inf value\(s\)"),
        # Two entries whose float32 sum overflows although each is finite.
        (3e38, r"'features' must have entries with \|value\| <= 1\.7e\+37 .*overflow the sums"),
    ],
)
def test_di_refuses_bad_features_found_from_its_column_sums(
    bad: float, match: str, form: str
) -> None:
    features = torch.rand(10, 4, generator=torch.Generator().manual_seed(0))
    features[3, 2] = bad
    features[7, 2] = bad if bad == 3e38 else features[7, 2]
    with pytest.raises(ValueError, match=rf"discriminant_information: argument {match}"):
        discriminant_information(features, torch.arange(10) % 2, form=form)


def test_di_checks_feature_values_without_a_pass_of_its_own() -> None:
    from torch.overrides import TorchFunctionMode

    class Count(TorchFunctionMode):
        def __init__(self) -> None:
            super().__init__()
            self.names: list[str] = []

        def __torch_function__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
            self.names.append(getattr(func, "__name__", str(func)))
            return func(*args, **(kwargs or {}))

    features = torch.rand(50, 8, generator=torch.Generator().manual_seed(0))
    with Count() as count:
        discriminant_information(features, torch.arange(50) % 3)
    assert "aminmax" not in count.names and "isfinite" in count.names
    from kernel_layers.numerics.deferred import DeferredChecks, deferred_checks

    flags = DeferredChecks()  # deferred checks cannot read sums: the scan stays
    with Count() as count, deferred_checks(flags):
        discriminant_information(features, torch.arange(50) % 3)
    assert "amax" in count.names and flags.first_failure() is None


def test_di_of_large_features_whose_sums_stay_finite_matches_float64() -> None:
    # 2e37 is beyond the per-entry bound that guarantees finite sums of 10 rows
    # (1.7e37) but this column's sum is finite: DI is computed (in float64, since the
    # float32 Gram overflows), no longer refused.
    features = torch.rand(10, 4, generator=torch.Generator().manual_seed(0))
    features[3, 2] = 2e37
    labels = np.arange(10) % 2
    got = discriminant_information(features, torch.tensor(labels)).item()
    want = ref.di(features.double().numpy(), ref.onehot_unit(labels, 2), 1e-4)
    assert got == pytest.approx(want, rel=1e-6)


def test_nysdi_float32_landmark_gradient_stays_near_float64_on_wide_inputs() -> None:
    """Digits widened to 128 columns (float32 kernel matrices): the float32 landmark
    gradient within 5e-3 (max-relative) of float64's, 5.5e-4 measured. Centring ``G``
    with a mean from float32 sums moved it by 0.19: the closed-form gradient needs
    exactly centred columns where ``S`` is ill-conditioned."""
    x_np, labels_np = load_digits(return_X_y=True)
    x = torch.tensor(x_np / 16.0)
    x = torch.cat([x, x.sqrt()], dim=1)
    rows = torch.randperm(len(x), generator=torch.Generator().manual_seed(0))
    xb, labels, landmarks = x[rows[:1200]], torch.tensor(labels_np)[rows[:1200]], x[rows[1200:1700]]
    grads = {}
    for dtype in (torch.float64, torch.float32):
        z = landmarks.to(dtype).clone().requires_grad_(True)
        nystrom_discriminant_information(
            xb.to(dtype), labels, z, gamma=0.02, num_classes=10, jitter=1e-6
        ).backward()
        assert z.grad is not None
        grads[dtype] = z.grad.double()
    g64 = grads[torch.float64]
    assert float((grads[torch.float32] - g64).abs().max() / g64.abs().max()) < 5e-3


@pytest.mark.parametrize("width", [20, 300])  # narrow (float64 kernels) and wide inputs
@pytest.mark.parametrize("kernel", ["gaussian", "laplacian"])
def test_nysdi_compiles_to_eager_value_and_gradients(
    width: int, kernel: str, device: torch.device
) -> None:
    # torch.compile traces NysDI's autograd functions (Dynamo + AOTAutograd, the
    # ``aot_eager`` backend: no C++ code generation on CI). The narrow Gaussian case is
    # the float32 function that evaluates G and K_Z in float64.
    torch._dynamo.reset()
    gen = torch.Generator().manual_seed(width)
    x = torch.rand(300, width, generator=gen).to(device)
    labels = torch.randint(0, 5, (300,), generator=gen).to(device)

    def nysdi(x: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        return nystrom_discriminant_information(
            x, labels, z, kernel=kernel, gamma=0.1, num_classes=5
        )

    z_eager = x[:100].clone().requires_grad_(True)
    z_compiled = x[:100].clone().requires_grad_(True)
    want = nysdi(x, z_eager)
    want.backward()
    got = torch.compile(nysdi, backend="aot_eager")(x, z_compiled)
    got.backward()
    torch.testing.assert_close(got, want, rtol=1e-6, atol=0)
    assert z_eager.grad is not None and z_compiled.grad is not None
    torch.testing.assert_close(z_compiled.grad, z_eager.grad, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("width", [40, 600])  # a narrow and a wide map
def test_di_compiles_to_eager_value_and_gradients(width: int, device: torch.device) -> None:
    torch._dynamo.reset()
    gen = torch.Generator().manual_seed(width)
    phi = torch.rand(800, width, generator=gen).to(device)
    labels = torch.randint(0, 5, (800,), generator=gen).to(device)

    def di(phi: torch.Tensor) -> torch.Tensor:
        return discriminant_information(phi, labels, num_classes=5)

    eager, compiled = phi.clone().requires_grad_(True), phi.clone().requires_grad_(True)
    want = di(eager)
    want.backward()
    got = torch.compile(di, backend="aot_eager")(compiled)
    got.backward()
    torch.testing.assert_close(got, want, rtol=1e-6, atol=0)
    assert eager.grad is not None and compiled.grad is not None
    torch.testing.assert_close(compiled.grad, eager.grad, rtol=1e-5, atol=1e-7)
