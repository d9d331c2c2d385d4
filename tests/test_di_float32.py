"""DI on float32 features: huge values, nearly rank-deficient features and the choice of
the float32 or float64 factorisation, against float64."""

from __future__ import annotations

import logging
import warnings

import pytest
import torch

from kernel_layers import (
    FourierLayer,
    NystromLayer,
    discriminant_information,
)
from kernel_layers.data import DigitsDataModule


@pytest.fixture(autouse=True)
def _quiet() -> None:
    logging.getLogger("lightning").setLevel(logging.ERROR)


def test_di_of_huge_float32_features_is_correct() -> None:
    gen = torch.Generator().manual_seed(0)
    x, y = torch.rand(100, 20, generator=gen), torch.randint(0, 3, (100,), generator=gen)
    reference = discriminant_information((x * 1e19).double(), y).item()
    value = discriminant_information(x * 1e19, y).item()
    assert value == pytest.approx(reference, abs=1e-4)


@pytest.mark.parametrize("rows", [500, 4000])
def test_float32_di_of_nearly_collinear_features_within_sqrt_rows_times_its_estimate(
    rows: int,
) -> None:
    # two features 0.01 apart (cond(S) about 3e4): the float32 Gram is kept (estimate
    # below GRAM_PRECISION_LIMIT), and its products' round-off, accumulated over the
    # rows, moves DI by several times the estimate
    from kernel_layers.numerics.precision import GRAM_PRECISION_LIMIT, roundoff_estimate

    gen = torch.Generator().manual_seed(0)
    y = torch.randint(0, 2, (rows,), generator=gen)
    base = torch.randn(rows, generator=gen)
    noise = torch.randn(rows, generator=gen)
    x = torch.stack([base, base + 0.01 * (y + noise)], 1)
    phi = x.double() - x.double().mean(0)
    onehot = torch.nn.functional.one_hot(y, 2).double()
    y_c = onehot / onehot.norm(dim=0) - (onehot / onehot.norm(dim=0)).mean(0)
    scatter = phi.T @ phi + 1e-4 * torch.eye(2, dtype=torch.float64)
    cross = phi.T @ y_c
    reference = float((cross * torch.linalg.solve(scatter, cross)).sum())
    estimate = float(
        roundoff_estimate(torch.float32, scatter.diagonal().max(), torch.linalg.cholesky(scatter))
    )
    assert estimate < GRAM_PRECISION_LIMIT  # the float32 Gram is kept
    value = discriminant_information(x, y, rho=1e-4).item()
    assert abs(value - reference) <= rows**0.5 * estimate * reference


@pytest.mark.parametrize(("offset", "form"), [(1e6, "primal"), (1e6, "dual"), (1e4, "auto")])
def test_float32_features_far_from_zero_are_centred_with_their_exact_mean(
    offset: float, form: str
) -> None:
    # a mean summed in float32 is off by a twentieth of the columns' spread at 1e6; the
    # reference is float64 arithmetic on the very same float32 values
    gen = torch.Generator().manual_seed(0)
    rows = 300 if form == "dual" else 2000
    x = offset + torch.randn(rows, 20, generator=gen)
    y = torch.randint(0, 3, (rows,), generator=gen)
    onehot = torch.nn.functional.one_hot(y, 3).double()
    targets = onehot / onehot.norm(dim=0)
    phi = x.double() - x.double().mean(0)
    y_c = targets - targets.mean(0)
    cross = phi.T @ y_c
    scatter = phi.T @ phi + 1e-4 * torch.eye(20, dtype=torch.float64)
    reference = float((cross * torch.linalg.solve(scatter, cross)).sum())
    value = discriminant_information(x, y, rho=1e-4, form=form).item()
    assert value == pytest.approx(reference, rel=1e-5)


@pytest.mark.parametrize(
    ("batch", "width", "form"),
    [(50, 500, "dual"), (50, 500, "primal"), (1000, 100, "primal"), (600, 300, "auto")],
)
def test_float32_di_of_nearly_rank_deficient_features_matches_float64(
    batch: int, width: int, form: str
) -> None:
    gen = torch.Generator().manual_seed(0)
    low_rank = torch.randn(batch, 5, generator=gen, dtype=torch.float64) @ torch.randn(
        5, width, generator=gen, dtype=torch.float64
    )
    x = low_rank + 1e-3 * torch.randn(batch, width, generator=gen, dtype=torch.float64)
    y = torch.randint(0, 10, (batch,), generator=gen)
    reference = discriminant_information(x, y, form=form).item()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no jitter warning either: the Gram is exact
        value = discriminant_information(x.float(), y, form=form).item()
    assert abs(value - reference) < 1e-3


def test_well_conditioned_float32_features_keep_float32_products(monkeypatch) -> None:
    from kernel_layers.objectives import solve

    factors = []
    original = solve.factor_scatter

    def spy(scatter, ridge, dtype, owner):
        factor = original(scatter, ridge, dtype, owner)
        factors.append(None if factor is None else factor.dtype)
        return factor

    monkeypatch.setattr(solve, "factor_scatter", spy)
    dm = DigitsDataModule()
    x, y = dm.train_features()[:1000], dm.train_targets()[:1000]
    for layer in (FourierLayer(64, 300, gamma=0.02, seed=0), NystromLayer(64, 300, gamma=0.02)):
        with torch.no_grad():
            discriminant_information(layer(x), y)
    # Both keep the float32 Gram (None would mean it was redone in float64); Fourier's
    # round-off estimate also allows a float32 factor, the Nystrom features' does not.
    assert factors == [torch.float32, torch.float64]


@pytest.mark.parametrize("offset", [0.0, 100.0])
def test_forced_dual_form_of_float32_features_with_more_rows_than_columns(offset: float) -> None:
    # B > J: B - J eigenvalues of the dual Gram are rho alone, where a float32 Gram's
    # round-off is not bounded by its pivots (it moved DI by 1.8e-3 with the offset,
    # which DI ignores); the dual Gram is then formed in float64
    import references as ref

    generator = torch.Generator().manual_seed(0)
    x = torch.rand(1000, 784, generator=generator)
    labels = torch.randint(0, 10, (1000,), generator=generator)
    phi = FourierLayer(784, 400, gamma=0.02, seed=0)(x).detach() + offset
    want = ref.di(phi.double().numpy(), ref.onehot_unit(labels.numpy(), 10), 1e-4)
    for form in ("dual", "primal"):
        got = discriminant_information(phi, labels, rho=1e-4, num_classes=10, form=form)
        assert got.dtype == torch.float32
        assert abs(float(got) - want) / want < 1e-5, form
