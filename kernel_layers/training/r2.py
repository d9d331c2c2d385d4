"""R² of float targets at any scale: each batch's mean, squares about it and residuals
in float64, merged exactly (Chan, Golub and LeVeque), with no absolute tolerance."""

from __future__ import annotations

import torch
from torch import Tensor
from torchmetrics import Metric
from torchmetrics.utilities import dim_zero_cat

from kernel_layers.objectives.targets import CONSTANT_COLUMN

__all__ = ["TargetR2"]


class TargetR2(Metric):
    """``R^2`` averaged uniformly over the targets (scikit-learn's ``r2_score``).

    Each batch adds its rows, its targets' mean, their squares about that mean and the
    squared residuals, in float64 whatever the inputs' dtype (gathered from every process
    under DDP); the batches merge exactly, so the targets' spread is resolved at any
    offset float64 resolves. torchmetrics' ``R2Score`` sums squares about zero, which
    cancel for targets far from zero, and takes sums within ``1e-4`` of zero as zero,
    which makes ``R^2`` 1 for any targets of small scale.

    Args:
        split: the rows' name for the message (``"validation"``, ``"test"``).

    Shape:
        ``update(preds Tensor[N] | Tensor[N, L], target Tensor of the same shape)``.
    """

    full_state_update = False
    higher_is_better = True
    is_differentiable = False
    #: One ``[4, L]`` tensor per batch: rows, mean, squares about it, squared residuals.
    parts: list[Tensor]

    def __init__(self, split: str) -> None:
        super().__init__()
        self.split = split
        self.add_state("parts", default=[], dist_reduce_fx="cat")

    def update(self, preds: Tensor, target: Tensor) -> None:
        truth = target.detach().double().reshape(len(target), -1)  # [B, L]
        guess = preds.detach().double().reshape(len(preds), -1)
        mean = truth.mean(0)
        part = torch.stack(
            [
                torch.full_like(mean, len(truth)),
                mean,
                (truth - mean).square().sum(0),
                (truth - guess).square().sum(0),
            ]
        )
        self.parts.append(part)

    def compute(self) -> Tensor:
        parts = dim_zero_cat(self.parts)
        parts = parts.reshape(-1, 4, parts.shape[-1])  # [batches, 4, L]
        counts, means, spreads, residuals = parts.unbind(1)
        rows = int(counts[:, 0].sum()) if len(parts) else 0
        if rows < 2:
            raise ValueError(
                f"KernelRegressor: R² of the {self.split} rows needs at least 2 rows, got "
                f"{rows}; give the {self.split} split more rows"
            )
        grand = (counts * means).sum(0) / rows
        spread = spreads.sum(0) + (counts * (means - grand).square()).sum(0)  # TSS
        squares = spreads.sum(0) + (counts * means.square()).sum(0)
        residual = residuals.sum(0)
        # a constant column (CONSTANT_COLUMN) scores 1 for an exact fit, else 0, as
        # scikit-learn's r2_score gives for one
        varies = spread > CONSTANT_COLUMN * squares
        exact = (residual == 0).to(residual.dtype)
        scores = torch.where(varies, 1.0 - residual / torch.where(varies, spread, 1.0), exact)
        return scores.mean()
