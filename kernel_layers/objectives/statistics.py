"""DI's sufficient statistics: the one place where centring, target column scaling and
the all-reduce across processes happen.

DI depends on a batch only through ``n``, the feature and target means, ``Phi_c^T
Phi_c`` and ``Phi_c^T Y_c``. Every DI path (plain DI, NysDI, the ridge read-out) forms
them with the functions below, in the torchmetrics style:

* update: :func:`moment_sums` (the batch's sums), then the centred products;
* reduce: under ``torch.distributed`` the sums, then the products, are all-reduced
  (:class:`Sync`), so every process holds the statistics of the union of the batches;
* compute: :func:`compute_moments` (means, unit-norm scaling of one-hot columns),
  :func:`centre`, :func:`centred_products`.

Across batches, :class:`DIStatistics` (:func:`di_statistics`) merge exactly with
:func:`merge_statistics` (Chan's parallel update, no ``S - s s^T / n`` cancellation).
"""

from __future__ import annotations

from typing import NamedTuple

import torch
import torch.distributed as dist
from torch import Tensor

from kernel_layers.numerics.linalg import gram_matrix

#: The dtype the moment sums and means are accumulated in, whatever the features'.
SUMS_DTYPE = torch.float64

__all__ = [
    "SUMS_DTYPE",
    "DIStatistics",
    "Moments",
    "Sync",
    "centre",
    "centred_products",
    "compute_moments",
    "di_statistics",
    "global_num_classes",
    "merge_statistics",
    "moment_sums",
    "unit_column_scale",
]


class Sync:
    """Sum-reduction of DI's statistics across the processes of a ``torch.distributed`` group.

    Args:
        group: the process group (``None``: the world).
    """

    def __init__(self, group: dist.ProcessGroup | None) -> None:
        self.group = group
        self.world_size = dist.get_world_size(group)

    def all_reduce(self, tensor: Tensor) -> Tensor:
        """Sum ``tensor`` over the group, in place; returns it."""
        dist.all_reduce(tensor, op=dist.ReduceOp.SUM, group=self.group)
        return tensor

    @staticmethod
    def create(enabled: bool, group: dist.ProcessGroup | None) -> Sync | None:
        """A reducer when ``enabled`` and a process group of size > 1 exists, else ``None``."""
        if not enabled or not dist.is_available() or not dist.is_initialized():
            return None
        return Sync(group) if dist.get_world_size(group) > 1 else None


def global_num_classes(targets: Tensor, num_classes: int | None, sync: Sync | None) -> int | None:
    """``num_classes`` agreed across processes for integer labels (max label + 1)."""
    if sync is None or num_classes is not None or targets.is_floating_point():
        return num_classes
    top = targets.max().reshape(1).to(torch.float64)
    dist.all_reduce(top, op=dist.ReduceOp.MAX, group=sync.group)
    return int(top.item()) + 1


def unit_column_scale(norm_sq: Tensor) -> Tensor:
    """``1 / sqrt(norm_sq)`` for present columns, 0 for empty ones.

    Args:
        norm_sq (Tensor[L]): the squared column norms (class counts for one-hot columns).

    Returns:
        Tensor[L]: the column scale.
    """
    safe = torch.where(norm_sq > 0, norm_sq, torch.ones_like(norm_sq))
    return torch.where(norm_sq > 0, safe.rsqrt(), torch.zeros_like(norm_sq))


def moment_sums(features: Tensor, targets: Tensor, *, joint: Tensor | None = None) -> Tensor:
    """A batch's sums ``[n, sum phi, sum y, sum y^2]``, packed for one all-reduce.

    Args:
        features (Tensor[B, J]): features.
        targets (Tensor[B, L]): targets, in the features' dtype.
        joint (Tensor[B, J + L] | None): ``[features, targets]`` side by side, when the
            caller holds them so (one pass sums both).

    Returns:
        Tensor[1 + J + 2 L]: the packed sums, accumulated in float64 (:data:`SUMS_DTYPE`):
        a float32 mean of columns far from zero is off by a fraction of their spread,
        and the centred columns with it.
    """
    wide = SUMS_DTYPE
    count = torch.full((1,), float(features.shape[0]), dtype=wide, device=features.device)
    if joint is None:
        columns = [features.sum(0, dtype=wide), targets.sum(0, dtype=wide)]
    else:
        columns = [joint.sum(0, dtype=wide)]
    return torch.cat([count, *columns, targets.square().sum(0, dtype=wide)])


class Moments(NamedTuple):
    """The means a DI computation centres with (of the union of the batches under a
    :class:`Sync`).

    Attributes:
        rows (Tensor[]): the row count ``n``.
        means (Tensor[J + L]): the feature means, then the (scaled) target means, in
            :data:`SUMS_DTYPE`.
        scale (Tensor[L] | None): the target column scale, ``None`` when not scaled.
        width (int): ``J``.
    """

    rows: Tensor
    means: Tensor
    scale: Tensor | None
    width: int

    @property
    def mean(self) -> Tensor:
        """Tensor[J]: the feature means."""
        return self.means[: self.width]

    @property
    def target_mean(self) -> Tensor:
        """Tensor[L]: the (scaled) target means."""
        return self.means[self.width :]


def compute_moments(
    sums: Tensor, width: int, *, scale_columns: bool, sync: Sync | None = None
) -> Moments:
    """The means from :func:`moment_sums`, all-reduced first under ``sync``.

    Args:
        sums (Tensor[1 + J + 2 L]): the packed sums (summed over the group in place).
        width: ``J``.
        scale_columns: scale each target column to unit norm (one-hot labels: by the
            class counts of the union of the batches).
        sync: the reducer, or ``None`` for one process.

    Returns:
        Moments: the means and the column scale.
    """
    if sync is not None:
        sync.all_reduce(sums)
    outputs = (sums.shape[0] - 1 - width) // 2
    rows = sums[0]
    means = sums[1 : 1 + width + outputs] / rows
    scale = None
    if scale_columns:
        scale = unit_column_scale(sums[1 + width + outputs :])
        means[width:] *= scale
    return Moments(rows=rows, means=means, scale=scale, width=width)


def centre(
    features: Tensor, targets: Tensor, moments: Moments, *, joint: Tensor | None = None
) -> tuple[Tensor, Tensor]:
    """The centred (and scaled) features and targets ``Phi_c``, ``Y_c``.

    Args:
        features (Tensor[B, J]): features.
        targets (Tensor[B, L]): targets, in the features' dtype.
        moments: their means (:func:`compute_moments`).
        joint (Tensor[B, J + L] | None): ``[features, targets]`` side by side: centred
            in place, and the results are views of it.

    Returns:
        tuple[Tensor[B, J], Tensor[B, L]]: ``Phi_c`` and ``Y_c``.
    """
    dtype = features.dtype if joint is None else joint.dtype
    # the float64 means as a sum hi + lo of two numbers of the columns' dtype: x - hi is
    # exact for x near hi, and - lo then rounds at the centred values' own scale
    high = moments.means.to(dtype)
    low = (moments.means - high.to(moments.means.dtype)).to(dtype)
    scale = None if moments.scale is None else moments.scale.to(dtype)
    width = moments.width
    if joint is None:
        if scale is not None:
            targets = targets * scale
        phi_c = features - high[:width] - low[:width]
        return phi_c, targets - high[width:] - low[width:]
    if scale is not None:
        joint[:, width:].mul_(scale)
    joint.sub_(high).sub_(low)
    return joint[:, :width], joint[:, width:]


def centred_products(
    phi_c: Tensor, y_c: Tensor, sync: Sync | None = None, *, joint: Tensor | None = None
) -> tuple[Tensor, Tensor]:
    """``Phi_c^T Phi_c`` (valid in its lower triangle) and ``Phi_c^T Y_c``, summed over
    the group under ``sync``.

    Args:
        phi_c (Tensor[B, J]): centred features.
        y_c (Tensor[B, L]): centred targets.
        sync: the reducer, or ``None`` for one process.
        joint (Tensor[B, J + L] | None): ``[phi_c, y_c]`` side by side: one symmetric
            product gives both.

    Returns:
        tuple[Tensor[J, J], Tensor[J, L]]: the scatter and the cross term.
    """
    width = phi_c.shape[1]
    if joint is None:
        # The cross term as (Y_c^T Phi_c)^T, the faster product (see benchmarks/di_step.py).
        scatter, cross = gram_matrix(phi_c), (y_c.mT @ phi_c).mT
    else:
        # [S, .; M^T, .]: the joint Gram's lower triangle holds S's and the cross term.
        gram = gram_matrix(joint)
        scatter, cross = gram[:width, :width], gram[width:, :width].mT
    if sync is not None:
        packed = sync.all_reduce(torch.cat([scatter, cross], dim=1))
        scatter, cross = packed[:, :width], packed[:, width:]
    return scatter, cross


class DIStatistics(NamedTuple):
    """Sufficient statistics of a batch for DI (centred, so they merge without cancellation).

    Attributes:
        rows (Tensor[]): number of rows ``n``.
        mean (Tensor[J]): feature mean.
        scatter (Tensor[J, J]): ``sum (phi - mean)(phi - mean)^T`` (valid in its lower
            triangle).
        target_mean (Tensor[L]): target mean.
        cross (Tensor[J, L]): ``sum (phi - mean)(y - target_mean)^T``.
        target_scatter (Tensor[L]): ``sum (y - target_mean)^2`` per column.
        target_norm (Tensor[L]): ``sum y^2`` per column (class counts for one-hot).
    """

    rows: Tensor
    mean: Tensor
    scatter: Tensor
    target_mean: Tensor
    cross: Tensor
    target_scatter: Tensor
    target_norm: Tensor


def di_statistics(features: Tensor, targets: Tensor) -> DIStatistics:
    """Statistics of one batch (no validation; see
    :func:`~kernel_layers.objectives.discriminant_information`), targets not scaled.

    Args:
        features (Tensor[B, J]): features.
        targets (Tensor[B, L]): target matrix.

    Returns:
        DIStatistics: in the features' dtype.

    Raises:
        TypeError: ``features`` is not a floating tensor, or ``targets`` not a real one.
        ValueError: they are not ``[B, J]`` and ``[B, L]`` with the same ``B`` (labels
            ``[B]`` are to be one-hot encoded first).
    """
    if not isinstance(features, Tensor) or not features.is_floating_point():
        raise TypeError(
            "di_statistics: argument 'features' must be a floating torch.Tensor, got "
            f"{getattr(features, 'dtype', type(features).__name__)}"
        )
    if not isinstance(targets, Tensor) or targets.is_complex():
        raise TypeError(
            "di_statistics: argument 'targets' must be a real torch.Tensor [B, L], got "
            f"{getattr(targets, 'dtype', type(targets).__name__)}"
        )
    if features.ndim != 2 or targets.ndim != 2 or features.shape[0] != targets.shape[0]:
        raise ValueError(
            "di_statistics: arguments 'features' and 'targets' must have shapes [B, J] and "
            f"[B, L], got {list(features.shape)} and {list(targets.shape)}"
        )
    targets = targets.to(features.dtype)
    width = features.shape[1]
    sums = moment_sums(features, targets)
    moments = compute_moments(sums, width, scale_columns=False)
    phi_c, y_c = centre(features, targets, moments)
    scatter, cross = centred_products(phi_c, y_c)
    dtype = features.dtype
    return DIStatistics(
        rows=moments.rows.to(dtype),
        mean=moments.mean.to(dtype),
        scatter=scatter,
        target_mean=moments.target_mean.to(dtype),
        cross=cross,
        target_scatter=(y_c * y_c).sum(0),
        target_norm=sums[1 + width + targets.shape[1] :].to(dtype),
    )


def merge_statistics(a: DIStatistics, b: DIStatistics) -> DIStatistics:
    """Statistics of the union of two batches (Chan, Golub and LeVeque's update).

    Exact in exact arithmetic and free of the ``S - s s^T / n`` cancellation.

    Raises:
        TypeError: ``a`` or ``b`` is not a :class:`DIStatistics`.
        ValueError: their feature or target widths differ.
    """
    for name, value in (("a", a), ("b", b)):
        if not isinstance(value, DIStatistics):
            raise TypeError(
                f"merge_statistics: argument '{name}' must be a DIStatistics, got "
                f"{type(value).__name__}"
            )
    if a.cross.shape != b.cross.shape:
        raise ValueError(
            "merge_statistics: arguments 'a' and 'b' must have the same widths [J, L], got "
            f"{list(a.cross.shape)} and {list(b.cross.shape)}"
        )
    n = a.rows + b.rows
    w = a.rows * b.rows / n
    dm, dy = b.mean - a.mean, b.target_mean - a.target_mean
    return DIStatistics(
        rows=n,
        mean=a.mean + dm * (b.rows / n),
        scatter=a.scatter + b.scatter + w * torch.outer(dm, dm),
        target_mean=a.target_mean + dy * (b.rows / n),
        cross=a.cross + b.cross + w * torch.outer(dm, dy),
        target_scatter=a.target_scatter + b.target_scatter + w * dy * dy,
        target_norm=a.target_norm + b.target_norm,
    )
