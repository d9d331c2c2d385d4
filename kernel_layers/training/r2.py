"""R² of float targets at any scale: torchmetrics' ``R2Score`` sums, taken in float64,
read out without absolute tolerances."""

from __future__ import annotations

import torch
from torch import Tensor
from torchmetrics.regression import R2Score

__all__ = ["CONSTANT_TARGET", "TargetR2"]

#: A target column whose sum of squares about its mean is at most this fraction of its
#: sum of squares is constant to float64's resolution (its ``R^2`` is then 1 for an
#: exact fit, else 0, as scikit-learn's ``r2_score`` gives for a constant column).
CONSTANT_TARGET = 16 * torch.finfo(torch.float64).eps


class TargetR2(R2Score):
    """``R^2`` averaged uniformly over the targets (scikit-learn's ``r2_score``).

    torchmetrics' ``R2Score`` keeps the sums (of the targets, their squares and the
    squared residuals; summed over processes under DDP), here in float64 whatever the
    inputs' dtype: in float32 the sum of squares about the mean cancels for targets far
    from zero. Its own read-out takes sums within ``1e-4`` of zero as zero, which makes
    ``R^2`` 1 for any targets of small scale; here ``1 - RSS / TSS`` holds at any scale.

    Args:
        split: the rows' name for the message (``"validation"``, ``"test"``).

    Shape:
        ``update(preds Tensor[N] | Tensor[N, L], target Tensor of the same shape)``.
    """

    def __init__(self, split: str) -> None:
        super().__init__(multioutput="uniform_average")
        self.split = split

    def update(self, preds: Tensor, target: Tensor) -> None:
        super().update(preds.double(), target.double())

    def compute(self) -> Tensor:
        rows = int(self.total)  # all processes' rows: compute runs after the sync
        if rows < 2:
            raise ValueError(
                f"KernelRegressor: R² of the {self.split} rows needs at least 2 rows, got "
                f"{rows}; give the {self.split} split more rows"
            )
        squares, sums, residual = self.sum_squared_error, self.sum_error, self.residual
        spread = squares - sums * (sums / rows)  # TSS per target
        varies = spread > CONSTANT_TARGET * squares
        exact = (residual == 0).to(residual.dtype)
        scores = torch.where(varies, 1.0 - residual / torch.where(varies, spread, 1.0), exact)
        return scores.mean()
