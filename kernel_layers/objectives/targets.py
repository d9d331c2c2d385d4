"""Target encoding shared by DI, NysDI and the least-squares objective."""

from __future__ import annotations

import torch
from torch import Tensor

from kernel_layers._validation import check_finite, check_int, check_matrix
from kernel_layers.numerics.deferred import active_checks
from kernel_layers.numerics.precision import SQUARE_OVERFLOW, square_sum_limit
from kernel_layers.objectives.statistics import (
    Sync,
    centre,
    compute_moments,
    moment_sums,
    unit_column_scale,
)

__all__ = ["CONSTANT_COLUMN", "encode_targets", "unit_norm_columns"]

#: A target column whose centred sum of squares is at most this fraction of its sum of
#: squares is constant (its centred values are the round-off of its float64 mean).
CONSTANT_COLUMN = (16 * torch.finfo(torch.float64).eps) ** 2


def encode_targets(
    targets: Tensor,
    batch: int,
    *,
    num_classes: int | None = None,
    owner: str = "discriminant_information",
    dtype: torch.dtype | None = None,
) -> tuple[Tensor, bool]:
    """Turn labels into a one-hot matrix, or check a float target matrix.

    Args:
        targets (Tensor[B] | Tensor[B, L]): integer class labels in ``[0, num_classes)``
            or a floating target matrix used as is.
        batch: the number of feature rows ``B``.
        num_classes: ``L`` for labels (default ``max(label) + 1``).
        owner: the caller's name for messages.
        dtype: the dtype a float target matrix's squares are summed in: its entries must
            keep those sums finite (``None``: only finite entries are checked).

    Returns:
        tuple[Tensor[B, L], bool]: the (unscaled) target matrix, and whether its columns
        are one-hot class indicators (to be scaled to unit norm).
    """
    if not isinstance(targets, Tensor):
        raise TypeError(
            f"{owner}: argument 'targets' must be a torch.Tensor, got {type(targets).__name__}"
        )
    if targets.shape[0:1] != (batch,):
        raise ValueError(
            f"{owner}: argument 'targets' must have {batch} rows (one per feature row), "
            f"got shape {list(targets.shape)}"
        )
    if targets.is_floating_point():
        if targets.ndim != 2:
            raise ValueError(
                f"{owner}: argument 'targets' must be integer labels [B] or a float matrix "
                f"[B, L], got a float tensor of shape {list(targets.shape)} "
                "(use targets[:, None] for a single regression target, or .long() for labels)"
            )
        if dtype is None:
            check_finite(owner, "targets", targets)
        else:  # their squares are summed in dtype
            limit = square_sum_limit(batch, dtype)
            check_finite(owner, "targets", targets, max_abs=limit, why=SQUARE_OVERFLOW, dtype=dtype)
        return targets, False
    if targets.is_complex() or targets.dtype == torch.bool:
        raise TypeError(
            f"{owner}: argument 'targets' must be integer labels or a float matrix, "
            f"got dtype {targets.dtype}"
        )
    if targets.ndim != 1:
        raise ValueError(
            f"{owner}: argument 'targets' must be integer labels of shape [B], "
            f"got shape {list(targets.shape)}"
        )
    if targets.numel() == 0:
        raise ValueError(f"{owner}: argument 'targets' must hold at least one label, got none")
    checks = active_checks()
    if checks is not None and num_classes is not None:  # recorded, read later
        num_classes = check_int(owner, "num_classes", num_classes)
        checks.record(
            ValueError,
            f"{owner}: argument 'targets' must be labels in [0, num_classes={num_classes}), "
            "and a batch's were not",
            (targets.min() < 0) | (targets.max() >= num_classes),
        )
        # Clamped so that no device-side assertion fires before the report.
        targets = targets.clamp(0, num_classes - 1)
    else:
        low, high = int(targets.min()), int(targets.max())
        if low < 0:
            raise ValueError(f"{owner}: argument 'targets' must be labels >= 0, got {low}")
        if num_classes is None:
            num_classes = high + 1
        num_classes = check_int(owner, "num_classes", num_classes)
        if high >= num_classes:
            raise ValueError(
                f"{owner}: argument 'targets' must be labels < num_classes={num_classes}, "
                f"got {high}"
            )
    onehot = torch.zeros(batch, num_classes, dtype=torch.get_default_dtype(), device=targets.device)
    onehot.scatter_(1, targets.long()[:, None], 1.0)
    return onehot, True


def unit_norm_columns(targets: Tensor, *, sync_dist: bool = False) -> Tensor:
    """Centre each column of a float target matrix and scale it to unit norm.

    With such targets ``DI = sum_l (1 - MRLSE_l / ||y_l,c||^2)``: the sum over the
    targets of the batch's ridge ``R^2``, at most ``L`` (as one-hot columns scaled to
    unit norm bound a classifier's DI by ``L - 1``), whatever the targets' units. A
    constant column becomes zeros (it carries no information). The means and norms are
    computed in float64.

    Args:
        targets (Tensor[B, L]): float targets.
        sync_dist: under ``torch.distributed``, centre and scale by the means and norms
            of the global batch (every process's rows), as DI with ``sync_dist`` treats
            the global batch as one.

    Returns:
        Tensor[B, L]: ``Y_c`` with unit-norm columns (zero columns kept at zero).

    Raises:
        TypeError: ``targets`` is not a floating tensor.
        ValueError: ``targets`` is not 2-D, or holds NaN/Inf.
    """
    check_matrix("unit_norm_columns", "targets", targets)
    sync = Sync.create(sync_dist, None)
    wide = targets.double()  # a float32 column's sum or norm could overflow
    none = wide[:, :0]  # no features: the statistics of the targets alone
    moments = compute_moments(moment_sums(none, wide), 0, scale_columns=False, sync=sync)
    _, centred = centre(none, wide, moments)
    squares = torch.stack([centred.square().sum(0), wide.square().sum(0)])  # [2, L]
    if sync is not None:
        sync.all_reduce(squares)
    # a constant column whose mean is not exact in float64 keeps round-off, not spread
    spread = torch.where(squares[0] > CONSTANT_COLUMN * squares[1], squares[0], 0.0)
    return (centred * unit_column_scale(spread)).to(targets.dtype)
