"""TargetR2: R² of float targets at any scale and offset, against scikit-learn."""

from __future__ import annotations

import pytest
import torch
from sklearn.metrics import r2_score

from kernel_layers.training.r2 import TargetR2


def _r2(preds: torch.Tensor, target: torch.Tensor, batches: int = 3) -> float:
    metric = TargetR2("test")
    for p, t in zip(preds.chunk(batches), target.chunk(batches), strict=True):
        metric.update(p, t)
    return float(metric.compute())


@pytest.mark.parametrize(("scale", "offset"), [(1.0, 0.0), (1e-9, 0.0), (1e9, 0.0), (1.0, 3e4)])
@pytest.mark.parametrize("outputs", [1, 3])
def test_r2_equals_scikit_learns_at_any_scale(scale: float, offset: float, outputs: int) -> None:
    # torchmetrics' R2Score gave 1.0 at 1e-9 (sums within its 1e-4 tolerance of zero),
    # and float32 sums about the mean cancelled at an offset of 3e4
    gen = torch.Generator().manual_seed(0)
    target = torch.randn(300, outputs, generator=gen) * scale + offset
    preds = target + 0.3 * scale * torch.randn(300, outputs, generator=gen)
    target, preds = target.float(), preds.float()
    if outputs == 1:
        target, preds = target[:, 0], preds[:, 0]
    expected = r2_score(target.double().numpy(), preds.double().numpy())
    assert _r2(preds, target) == pytest.approx(expected, rel=1e-10)


def test_a_constant_target_scores_one_for_an_exact_fit_and_zero_otherwise() -> None:
    # 0.1 repeated: its float64 mean is inexact, and scikit-learn's r2_score divides by
    # the round-off left about it (-2.6e29); here the column counts as constant
    target = torch.stack([torch.full((10,), 0.1, dtype=torch.float64), torch.arange(10.0)], 1)
    assert _r2(target.clone(), target, batches=2) == 1.0
    off = target.clone()
    off[:, 0] += 0.01
    off[:, 1] += torch.linspace(-1, 1, 10, dtype=torch.float64)
    varying = r2_score(target[:, 1].numpy(), off[:, 1].numpy())
    assert _r2(off, target, batches=2) == pytest.approx((0.0 + varying) / 2, rel=1e-12)


@pytest.mark.parametrize("batches", [1, 50, 500])
def test_a_constant_column_stays_constant_over_many_batches(batches: int) -> None:
    # sums of squares about zero, added batch by batch, left round-off that R² divided by
    target = torch.stack([torch.full((1000,), 0.1), torch.arange(1000.0)], 1).float()
    preds = target + 0.01 * torch.randn(1000, 2, generator=torch.Generator().manual_seed(0))
    varying = r2_score(target[:, 1].double().numpy(), preds[:, 1].double().numpy())
    assert _r2(preds, target, batches) == pytest.approx(varying / 2, rel=1e-12)


def test_a_tiny_spread_far_from_zero_is_resolved() -> None:
    gen = torch.Generator().manual_seed(0)
    target = 1e4 + 5e-4 * torch.randn(600, generator=gen, dtype=torch.float64)
    preds = target + 1.5e-4 * torch.randn(600, generator=gen, dtype=torch.float64)
    expected = r2_score(target.numpy(), preds.numpy())
    assert _r2(preds, target, batches=30) == pytest.approx(expected, rel=1e-9)


def test_fewer_than_two_rows_name_the_split() -> None:
    metric = TargetR2("validation")
    metric.update(torch.ones(1), torch.ones(1))
    with pytest.raises(ValueError, match=r"R² of the validation rows needs at least 2 rows, got 1"):
        metric.compute()
