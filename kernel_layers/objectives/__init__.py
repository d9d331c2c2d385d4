"""Discriminant Information (DI), its Nystrom form (NysDI) and the least-squares objective.

For a mini-batch of features ``Phi (B x J)``, targets ``Y (B x L)`` and the centring
``C = I - 11^T / B``, with ``Phi_c = C Phi`` and ``Y_c = C Y``::

    DI = tr((Phi_c^T Phi_c + rho I)^-1 Phi_c^T Y Y^T Phi_c)

(Kung, "Discriminant component analysis for privacy protection and visualization of
big data", 2017; Al-Qershi/Li/Kung, "Kernel approximation via the Discriminant
Information criterion", the *DI paper*). ``||Y_c||^2 - DI`` is the minimum
regularised least-squares error (MRLSE) of a ridge fit of ``Y`` on ``Phi``, so
maximising DI makes the features linearly separable.

Numerics. ``S = Phi_c^T Phi_c + R`` (``R = rho I`` for DI, ``rho K_Z`` for NysDI) is
factorised as ``S = L L^T`` in :data:`SOLVE_DTYPE` and ``DI = ||L^-1 M||_F^2`` with
``M = Phi_c^T Y_c``; no inverse is formed. With ``A = S^-1 M`` the gradient has the
closed form ``dDI/dPhi = 2 (Y_c - Phi_c A) A^T`` (already centred), so the backward
pass costs ``O(B J L)`` and needs no ``B x J x J`` product; ``dDI/dR = -A A^T``.
When ``B < J`` the dual form ``DI = ||Y_c||^2 - rho tr(Y_c^T (Phi_c Phi_c^T + rho I)^-1
Y_c)`` gives the same value and gradient at ``O(B^2 J)``.

Statistics. Everything above depends on the batch only through ``n``, the feature and
target means, ``Phi_c^T Phi_c`` and ``Phi_c^T Y``: :class:`DIStatistics` holds them and
:func:`merge_statistics` combines two batches exactly (Chan's parallel update, no
``S - s s^T / n`` cancellation), which is what makes DI exact across processes.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
import torch.distributed as dist
from torch import Tensor, nn

from kernel_layers._validation import (
    check_choice,
    check_dtype,
    check_features,
    check_finite,
    check_int,
    check_matrix,
    check_positive,
)
from kernel_layers.kernels import Kernel, get_kernel
from kernel_layers.kernels.autograd import gaussian_grads, gaussian_matrix
from kernel_layers.kernels.functions import gaussian_gram, gaussian_kernel
from kernel_layers.numerics.deferred import active_checks
from kernel_layers.numerics.linalg import (
    DISTANCE_OVERFLOW,
    SOLVE_DTYPE,
    SUM_OVERFLOW,
    autocast_off,
    cholesky_ex,
    data_limit,
    default_jitter,
    gram_matrix,
    kernel_dtype,
    refuse_double_backward,
    robust_cholesky,
    robust_cholesky_in_place,
    sum_limit,
    upcast,
)

__all__ = [
    "DEFAULT_RHO",
    "DILoss",
    "DIStatistics",
    "di_statistics",
    "discriminant_information",
    "encode_targets",
    "least_squares_loss",
    "merge_statistics",
    "nystrom_discriminant_information",
]

#: The paper's ridge parameter.
DEFAULT_RHO = 1e-4
#: Forms of the DI computation: ``"auto"``, ``"primal"`` (``J x J``), ``"dual"`` (``B x B``).
FORMS = ("auto", "primal", "dual")


def encode_targets(
    targets: Tensor,
    batch: int,
    *,
    num_classes: int | None = None,
    owner: str = "discriminant_information",
) -> tuple[Tensor, bool]:
    """Turn labels into a one-hot matrix, or check a float target matrix.

    Args:
        targets (Tensor[B] | Tensor[B, L]): integer class labels in ``[0, num_classes)``
            or a floating target matrix used as is.
        batch: the number of feature rows ``B``.
        num_classes: ``L`` for labels (default ``max(label) + 1``).
        owner: the caller's name for messages.

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
        check_finite(owner, "targets", targets)
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


class DIStatistics(NamedTuple):
    """Sufficient statistics of a batch for DI (centred, so they merge without cancellation).

    Attributes:
        rows (Tensor[]): number of rows ``n``.
        mean (Tensor[J]): feature mean.
        scatter (Tensor[J, J]): ``sum (phi - mean)(phi - mean)^T``.
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
    """Statistics of one batch (no validation; see :func:`discriminant_information`).

    Args:
        features (Tensor[B, J]): features.
        targets (Tensor[B, L]): target matrix.

    Returns:
        DIStatistics: in the features' dtype.
    """
    targets = targets.to(features.dtype)
    mean, target_mean = features.mean(0), targets.mean(0)
    phi_c, y_c = features - mean, targets - target_mean
    return DIStatistics(
        rows=torch.tensor(float(features.shape[0]), dtype=features.dtype, device=features.device),
        mean=mean,
        scatter=phi_c.mT @ phi_c,
        target_mean=target_mean,
        cross=phi_c.mT @ y_c,
        target_scatter=(y_c * y_c).sum(0),
        target_norm=(targets * targets).sum(0),
    )


def merge_statistics(a: DIStatistics, b: DIStatistics) -> DIStatistics:
    """Statistics of the union of two batches (Chan, Golub and LeVeque's update).

    Exact in exact arithmetic and free of the ``S - s s^T / n`` cancellation.
    """
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


def _unit_column_scale(norm_sq: Tensor) -> Tensor:
    """``1 / sqrt(norm_sq)`` for present columns, 0 for empty ones."""
    safe = torch.where(norm_sq > 0, norm_sq, torch.ones_like(norm_sq))
    return torch.where(norm_sq > 0, safe.rsqrt(), torch.zeros_like(norm_sq))


#: A Gram matrix formed in float32 is recomputed in float64 when its float32 round-off,
#: amplified by its conditioning, could move DI: when ``eps(float32) * max(diag S) /
#: min(pivot of chol(S))^2`` exceeds this, or when the float32 ``S`` is not positive
#: definite at all (nearly rank-deficient features). Measured on rank-5-plus-noise
#: features (B, J up to 2000, 1000): above it float32 DI erred by up to 6e-2, below it
#: by at most 2e-4; DI-trained Fourier / Nystrom features of digits stay below it
#: (estimates 3e-6 to 2.6e-3, errors under 4e-6), so they keep the float32 products.
GRAM_PRECISION_LIMIT = 3e-3


def _regularised(gram: Tensor, rho: Tensor) -> Tensor:
    """``gram + rho I`` in :data:`SOLVE_DTYPE` (a new matrix)."""
    # Cholesky reads the lower triangle only: no symmetrisation pass is needed.
    s = gram.to(SOLVE_DTYPE, copy=True)
    s.diagonal().add_(rho)
    return s


def _factor_if_fine(s: Tensor, dtype: torch.dtype, owner: str) -> Tensor | None:
    """The Cholesky factor of ``s`` (regularised from a Gram formed in ``dtype``), or
    ``None`` when ``s`` is too ill-conditioned for that dtype's round-off: a cheap
    estimate from the one factorisation the solve needs anyway."""
    if dtype == SOLVE_DTYPE or torch.compiler.is_compiling():
        return robust_cholesky(s, owner=owner)
    if active_checks() is not None:  # no host read to decide on: the float64 path
        return None
    factor, info = cholesky_ex(s)
    pivots = factor.diagonal().square()
    estimate = torch.finfo(dtype).eps * s.diagonal().amax() / pivots.amin()
    if bool((info != 0) | ~(estimate <= GRAM_PRECISION_LIMIT)):
        return None
    return factor


#: A float32 scatter is factorised, and solved, in float32 when the
#: estimate of :data:`GRAM_PRECISION_LIMIT` is at most this, which saves the float64
#: copy and half the factorisation's time (one float32 DI step of Fourier features at
#: (B, D, J) = (1000, 54, 500) 16 % faster, at (4000, 784, 2000) 8 %). The float32
#: factorisation's round-off is of the order of the float32 Gram's own: measured on
#: float32 Fourier features of CovType rows (B 1000 / 2000, J 300 / 500 / 1000, gamma
#: 0.003 to 3, 105 cases) it moved DI by at most 3.8e-6 relative where the estimate was
#: at most 3e-4, by up to 3.8e-5 above; MNIST features and the CovType recipe's training
#: stay below 1e-4. Above the limit the float64 factorisation is used; 0 turns this off.
FLOAT32_FACTOR_LIMIT = 3e-4


def _factor(scatter: Tensor, rho: Tensor, dtype: torch.dtype, owner: str) -> Tensor | None:
    """The Cholesky factor of ``S = scatter + rho I``, a scatter formed in ``dtype``.

    In float32 (``scatter``'s dtype) when the factor's round-off estimate is within
    :data:`FLOAT32_FACTOR_LIMIT`; otherwise as :func:`_factor_if_fine` decides on the
    float64 ``S`` (a float64 factor, or ``None`` when the Gram itself must be formed in
    float64).

    Args:
        scatter (Tensor[J, J]): ``Phi_c^T Phi_c`` (its lower triangle is read).
        rho (Tensor[]): the ridge, in :data:`SOLVE_DTYPE`.
        dtype: the dtype the scatter was formed in.
        owner: the caller's name for messages.

    Returns:
        Tensor[J, J] | None: the lower factor, in float32 or float64.
    """
    if (
        FLOAT32_FACTOR_LIMIT > 0
        and scatter.dtype == torch.float32
        and not torch.compiler.is_compiling()
        and active_checks() is None  # the decision reads the host
    ):
        s = scatter.clone()
        s.diagonal().add_(rho.to(s.dtype))
        largest = s.diagonal().amax()  # before the factor overwrites s
        factor, info = cholesky_ex(s)
        estimate = torch.finfo(s.dtype).eps * largest / factor.diagonal().square().amin()
        if bool((info == 0) & (estimate <= FLOAT32_FACTOR_LIMIT)):
            return factor
    return _factor_if_fine(_regularised(scatter, rho), dtype, owner)


def _solve_primal(factor: Tensor, cross: Tensor) -> tuple[Tensor, Tensor]:
    """``DI = ||L^-1 M||^2`` and ``A = S^-1 M`` for ``S = L L^T`` (in ``L``'s dtype).

    Args:
        factor (Tensor[J, J]): ``L`` (its lower triangle is read).
        cross (Tensor[J, L]): ``M``.

    Returns:
        tuple[Tensor[], Tensor[J, L]]: DI and ``A``.
    """
    w = torch.linalg.solve_triangular(factor, cross.to(factor.dtype), upper=False)
    a = torch.linalg.solve_triangular(factor.mT, w, upper=True)
    return (w * w).sum(), a


def _check_column_sums(owner: str, features: Tensor, column_sums: Tensor) -> None:
    """The value check of ``features`` from its column sums: finite sums mean finite
    entries none of whose sums overflowed (a NaN or an infinity reaches its column's
    sum), at the cost of one host read instead of a pass over ``features``; otherwise
    the full check names the fault.

    Args:
        owner: the caller's name for messages.
        features (Tensor[B, J]): the features DI reads.
        column_sums (Tensor[J]): their column sums, in their dtype.

    Raises:
        ValueError: ``features`` holds NaN / Inf, or entries whose sums overflow.
    """
    if bool(torch.isfinite(column_sums).all()):
        return
    check_matrix(owner, "features", features, max_abs=sum_limit(features), why=SUM_OVERFLOW)
    raise ValueError(  # not reached: entries within sum_limit cannot overflow a sum
        f"{owner}: argument 'features' must have column sums finite in {features.dtype} "
        f"({SUM_OVERFLOW})"
    )


class _Sync:
    """Sum-reduction of DI's statistics across the processes of a ``torch.distributed`` group."""

    def __init__(self, group: dist.ProcessGroup | None) -> None:
        self.group = group
        self.world_size = dist.get_world_size(group)

    def all_reduce(self, tensor: Tensor) -> Tensor:
        dist.all_reduce(tensor, op=dist.ReduceOp.SUM, group=self.group)
        return tensor

    @staticmethod
    def create(enabled: bool, group: dist.ProcessGroup | None) -> _Sync | None:
        """A reducer when ``enabled`` and a process group of size > 1 exists, else ``None``."""
        if not enabled or not dist.is_available() or not dist.is_initialized():
            return None
        return _Sync(group) if dist.get_world_size(group) > 1 else None


class _DIFunction(torch.autograd.Function):
    """DI with the closed-form backward ``dDI/dPhi = 2 (Y_c - Phi_c A) A^T``.

    With a ``sync`` reducer the batch is the union of every process's rows: the sums
    ``n, sum phi, sum y, sum y^2`` are all-reduced first (so every process centres with
    the global means and scales label columns by the global class counts), then the
    centred ``Phi_c^T Phi_c`` and ``Phi_c^T Y_c``. Every process then holds the global
    ``A``, and its rows of the gradient are ``2 (Y_c - Phi_c A) A^T`` on its own rows:
    exactly the matching rows of the single-process gradient.
    """

    @staticmethod
    def forward(
        ctx,
        features: Tensor,
        targets: Tensor,
        rho: float,
        scale_columns: bool,
        dual: bool,
        owner: str,
        sync: _Sync | None = None,
        check_values: bool = False,
    ) -> Tensor:
        with autocast_off(features):
            features = upcast(features)
            targets = targets.to(features.dtype)
            width, outputs = features.shape[1], targets.shape[1]
            count = torch.full(
                (1,), float(features.shape[0]), dtype=features.dtype, device=features.device
            )
            sums = torch.cat([count, features.sum(0), targets.sum(0), (targets * targets).sum(0)])
            if check_values:  # the features' value check, from sums formed anyway
                _check_column_sums(owner, features, sums[1 : 1 + width])
            if sync is not None:
                sync.all_reduce(sums)
            n = sums[0]
            mean = sums[1 : 1 + width] / n
            target_mean = sums[1 + width : 1 + width + outputs] / n
            if scale_columns:
                scale = _unit_column_scale(sums[1 + width + outputs :])
                targets, target_mean = targets * scale, target_mean * scale
            phi_c = features - mean
            y_c = targets - target_mean
            rho64 = torch.tensor(rho, dtype=SOLVE_DTYPE, device=features.device)
            if dual:
                gram = gram_matrix(phi_c, transpose=True)  # the Cholesky reads the lower part
                factor = _factor_if_fine(_regularised(gram, rho64), phi_c.dtype, owner)
                if factor is None:  # too coarse in float32: redo the B x B product in float64
                    wide = phi_c.to(SOLVE_DTYPE)
                    gram = gram_matrix(wide, transpose=True)
                    factor = robust_cholesky(_regularised(gram, rho64), owner=owner)
                y64 = y_c.to(SOLVE_DTYPE)
                q = torch.cholesky_solve(y64, factor)
                di = (y64 * y64).sum() - rho * (y64 * q).sum()
                a = (phi_c.mT.to(SOLVE_DTYPE) @ q).to(features.dtype)
                residual = (rho * q).to(features.dtype)
            else:
                # The scatter's lower triangle only (all the Cholesky factor reads); the
                # cross term as (Y_c^T Phi_c)^T: the skinny product runs faster this way.
                scatter, cross = gram_matrix(phi_c), (y_c.mT @ phi_c).mT
                if sync is not None:
                    packed = sync.all_reduce(torch.cat([scatter, cross], dim=1))
                    scatter, cross = packed[:, :width], packed[:, width:]
                # The global S is the same on every process, so all decide alike.
                factor = _factor(scatter, rho64, phi_c.dtype, owner)
                if factor is None:  # too coarse in float32: redo the products in float64
                    wide, y_wide = phi_c.to(SOLVE_DTYPE), y_c.to(SOLVE_DTYPE)
                    scatter, cross = gram_matrix(wide), wide.mT @ y_wide
                    if sync is not None:
                        packed = sync.all_reduce(torch.cat([scatter, cross], dim=1))
                        scatter, cross = packed[:, :width], packed[:, width:]
                    factor = robust_cholesky(_regularised(scatter, rho64), owner=owner)
                di, a64 = _solve_primal(factor, cross)
                a = a64.to(features.dtype)
                residual = y_c - phi_c @ a
            ctx.save_for_backward(residual, a, y_c)
            return di.to(features.dtype)

    @staticmethod
    def backward(ctx, grad: Tensor):
        refuse_double_backward("discriminant_information")
        residual, a, y_c = ctx.saved_tensors
        grad_features, grad_targets = _feature_gradients(ctx, grad, residual, a, y_c)
        return grad_features, grad_targets, None, None, None, None, None, None


def _feature_gradients(
    ctx, grad: Tensor, residual: Tensor, a: Tensor, y_c: Tensor
) -> tuple[Tensor | None, Tensor | None]:
    """DI's gradients ``2 (Y_c - Phi_c A) A^T`` to the features and ``2 Phi_c A`` to the
    targets (inputs 0 and 1 of ``ctx``'s function), in ``a``'s dtype."""
    grad_features = grad_targets = None
    if ctx.needs_input_grad[0]:
        grad_features = (residual * (2.0 * grad.to(a.dtype))) @ a.mT
    if ctx.needs_input_grad[1]:
        grad_targets = (2.0 * grad.to(a.dtype)) * (y_c - residual)
    return grad_features, grad_targets


def _global_num_classes(targets: Tensor, num_classes: int | None, sync: _Sync | None) -> int | None:
    """``num_classes`` agreed across processes for integer labels (max label + 1)."""
    if sync is None or num_classes is not None or targets.is_floating_point():
        return num_classes
    top = targets.max().reshape(1).to(torch.float64)
    dist.all_reduce(top, op=dist.ReduceOp.MAX, group=sync.group)
    return int(top.item()) + 1


def _check_rho(owner: str, rho: float) -> float:
    return check_positive(owner, "rho", rho)


def discriminant_information(
    features: Tensor,
    targets: Tensor,
    *,
    rho: float = DEFAULT_RHO,
    num_classes: int | None = None,
    form: str = "auto",
    sync_dist: bool = False,
    process_group: dist.ProcessGroup | None = None,
) -> Tensor:
    """Discriminant Information of a batch of features about its targets.

    ``DI = tr((Phi_c^T Phi_c + rho I)^-1 Phi_c^T Y Y^T Phi_c)``, with ``0 <= DI <=
    ||Y_c||_F^2`` (``= L - 1`` for unit-norm one-hot columns with all ``L`` classes
    present). Differentiable with a closed-form backward.

    Args:
        features (Tensor[B, J]): features ``Phi``.
        targets (Tensor[B] | Tensor[B, L]): integer labels (one-hot encoded, each
            present class column scaled to unit norm) or a float target matrix used
            as is (regression, multi-label).
        rho: ridge parameter ``> 0``.
        num_classes: number of classes ``L`` for integer labels (default
            ``max(label) + 1``; absent classes contribute nothing).
        form: ``"primal"`` (``J x J`` solve), ``"dual"`` (``B x B`` solve) or
            ``"auto"`` (dual when ``B < J``). Both give the same value; note that with
            ``B <= J`` the centred features span the batch and DI tends to its maximum
            as ``rho -> 0``, which is why the paper keeps batches larger than ``J``.
        sync_dist: under ``torch.distributed`` (world size > 1), compute the exact DI of
            the union of every process's batch by all-reducing the sufficient
            statistics; the gradient with respect to the local features equals the
            matching rows of the single-process gradient. Uses the primal form. A no-op
            without an initialised process group. Under DDP, which averages gradients
            over processes, multiply the loss by the world size (``KernelClassifier``
            does) to get the single-process update. Every process must call it (a
            validation error raised on one process alone leaves the others waiting).
        process_group: the group to reduce over (default: the world).

    Returns:
        Tensor[]: DI, in the features' dtype.
    """
    owner = "discriminant_information"
    # The entries are checked from the column sums DI forms anyway (one pass over the
    # features fewer), except where no host read may decide (deferred checks, compiling).
    scan = active_checks() is not None or torch.compiler.is_compiling()
    check_matrix(
        owner, "features", features, max_abs=sum_limit(features), why=SUM_OVERFLOW, values=scan
    )
    rho = _check_rho(owner, rho)
    check_choice(owner, "form", form, FORMS)
    batch, width = features.shape
    if batch < 2:
        raise ValueError(f"{owner}: argument 'features' must have at least 2 rows, got {batch}")
    sync = _Sync.create(sync_dist, process_group)
    if sync is not None and form == "dual":
        raise ValueError(
            f"{owner}: argument 'form' must be 'primal' or 'auto' with sync_dist=True "
            "(the dual form needs every row on one process), got 'dual'"
        )
    num_classes = _global_num_classes(targets, num_classes, sync)
    y, scale_columns = encode_targets(targets, batch, num_classes=num_classes, owner=owner)
    dual = sync is None and (form == "dual" or (form == "auto" and batch < width))
    return _DIFunction.apply(features, y, rho, scale_columns, dual, owner, sync, not scan)


def _landmark_kernel(z: Tensor, spec: Kernel, gamma: float) -> Tensor:
    """``k(Z, Z)`` for NysDI, whose gradient to it (``-rho A A^T``) is symmetric: the
    Gaussian kernel's backward then skips its transposed sum (:func:`gaussian_gram`)."""
    if spec.matrix is gaussian_kernel:
        return gaussian_gram(z, gamma)
    return spec.matrix(z, z, gamma)


def _nysdi_solve(
    features: Tensor,
    targets: Tensor,
    kernel: Tensor,
    rho: float,
    jitter: float,
    scale_columns: bool,
    owner: str,
    sync: _Sync | None,
    joint: Tensor | None = None,
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """NysDI's forward from ``G`` (``features``) and ``K`` (``kernel``), every statistic
    in :data:`SOLVE_DTYPE`: features and targets side by side in one wide buffer, so
    that one pass widens them, one centres them and one symmetric product gives the
    scatter and the cross term together; ``S = G_c^T G_c + rho (K + jitter * mean(diag
    K) I)`` formed once, row-major, where its factor overwrites it. With ``sync`` the
    sums, then the scatter and the cross term, are all-reduced as in :class:`_DIFunction`.

    Args:
        features (Tensor[B, n]): ``G``, any floating dtype.
        targets (Tensor[B, L]): encoded targets.
        kernel (Tensor[n, n]): ``K``.
        joint (Tensor[B, n + L] | None): the wide buffer, when the caller already wrote
            ``G`` into its first ``n`` columns (``features`` is then that view, and is
            centred in place).

    Returns:
        tuple[Tensor[], Tensor[B, L], Tensor[n, L], Tensor[B, L]]: NysDI, the residual
        ``Y_c - G_c A``, ``A = S^-1 G_c^T Y_c`` and ``Y_c``, in :data:`SOLVE_DTYPE`.
    """
    wide = SOLVE_DTYPE
    y = targets.to(wide)
    batch, width = features.shape
    outputs = y.shape[1]
    if joint is None:
        joint = torch.empty(batch, width + outputs, dtype=wide, device=features.device)
        joint[:, :width].copy_(features)
    phi_c, y_c = joint[:, :width], joint[:, width:]
    y_c.copy_(y)
    count = torch.full((1,), float(batch), dtype=wide, device=features.device)
    sums = torch.cat([count, joint.sum(0), (y * y).sum(0)])
    if sync is not None:
        sync.all_reduce(sums)
    mean = sums[1 : 1 + width + outputs] / sums[0]
    if scale_columns:
        scale = _unit_column_scale(sums[1 + width + outputs :])
        y_c.mul_(scale)
        mean[width:] *= scale
    # Centred in float64: the gradient 2 (Y_c - G_c A) A^T is exact only for exactly
    # centred columns, and A is large where S is ill-conditioned (a mean from float32
    # sums moved the MNIST landmark gradient by 5.6e-3 relative).
    joint.sub_(mean)
    # [S, .; M^T, .]: the joint Gram's lower triangle holds S's and the cross term.
    gram = gram_matrix(joint)
    scatter, cross = gram[:width, :width], gram[width:, :width].mT
    if sync is not None:
        packed = sync.all_reduce(torch.cat([scatter, cross], dim=1))
        scatter, cross = packed[:, :width], packed[:, width:]
    shift = kernel.diagonal().to(wide).mean() * (rho * jitter)

    def regularised() -> Tensor:  # S, row-major: the factor overwrites it
        # K widened first: a mixed-dtype sum runs slower than the two passes.
        s = kernel.to(wide, memory_format=torch.contiguous_format, copy=True)
        torch.add(scatter, s, alpha=rho, out=s)
        s.diagonal().add_(shift)
        return s

    factor = robust_cholesky_in_place(regularised, owner=owner)
    di, a = _solve_primal(factor, cross)
    return di, y_c - phi_c @ a, a, y_c


def _landmark_gradient(ctx, grad: Tensor, a: Tensor) -> Tensor:
    """NysDI's gradient ``-rho A A^T`` to ``K`` (one ``[n, n]`` product in ``a``'s
    dtype), divided by the world size under ``sync``: every process computes it in full
    and data-parallel training sums the processes' parts."""
    factor = grad.to(a.dtype) * (-ctx.rho / ctx.world_size)
    return (a * factor) @ a.mT


class _NysDIFunction(torch.autograd.Function):
    """NysDI (eq. 10) from ``G = k(X, Z)`` and the landmark kernel ``K = k(Z, Z)``
    (:func:`_nysdi_solve`): DI's closed-form gradient to ``G`` in ``G``'s dtype, and
    ``-rho A A^T`` to ``K`` in ``K``'s dtype (the jitter is a constant shift, as in
    :func:`~kernel_layers.numerics.linalg.landmark_gram`).
    """

    @staticmethod
    def forward(
        ctx,
        features: Tensor,
        targets: Tensor,
        kernel: Tensor,
        rho: float,
        jitter: float,
        scale_columns: bool,
        owner: str,
        sync: _Sync | None = None,
    ) -> Tensor:
        with autocast_off(features):
            features = upcast(features)
            di, residual, a64, y_c = _nysdi_solve(
                features, targets, kernel, rho, jitter, scale_columns, owner, sync
            )
            dtype = features.dtype
            ctx.save_for_backward(residual.to(dtype), a64.to(dtype), y_c.to(dtype), a64)
            ctx.rho, ctx.kernel_dtype = rho, kernel.dtype
            ctx.world_size = 1 if sync is None else sync.world_size
            return di.to(features.dtype)

    @staticmethod
    def backward(ctx, grad: Tensor):
        refuse_double_backward("nystrom_discriminant_information")
        residual, a, y_c, a64 = ctx.saved_tensors
        grad_features, grad_targets = _feature_gradients(ctx, grad, residual, a, y_c)
        grad_kernel = None
        if ctx.needs_input_grad[2]:
            # Straight in K's dtype (no float64 pass).
            grad_kernel = _landmark_gradient(ctx, grad, a64.to(ctx.kernel_dtype))
        return grad_features, grad_targets, grad_kernel, None, None, None, None, None


class _GaussianNysDIFunction(torch.autograd.Function):
    """NysDI with the Gaussian kernel, from the inputs ``X`` and landmarks ``Z`` of a
    dtype narrower than :data:`SOLVE_DTYPE`: ``G`` and ``K_Z`` are evaluated in
    :data:`SOLVE_DTYPE` (NysDI's value needs them there, see
    :func:`~kernel_layers.numerics.linalg.kernel_dtype`) and the forward is
    :class:`_NysDIFunction`'s, bit for bit; the backward runs in the inputs' dtype
    (``G``, ``K_Z``, the residual and ``A`` rounded to it once), which the value does
    not read: at ``(1000, 54, 500)`` the step took 13-15 % less time (one thread, an
    AVX-512 EPYC), and the float32 landmark gradient moved from 2.6e-8 to 2.9e-5 of
    float64's on CovType rows, from 1.6e-7 to 6.9e-5 on uniform ones (max-abs relative;
    benchmarks/README.md).
    """

    @staticmethod
    def forward(
        ctx,
        x: Tensor,
        landmarks: Tensor,
        targets: Tensor,
        gamma: float,
        rho: float,
        jitter: float,
        scale_columns: bool,
        owner: str,
        sync: _Sync | None = None,
    ) -> Tensor:
        wide, dtype = SOLVE_DTYPE, x.dtype
        x_w, z_w = x.to(wide), landmarks.to(wide)
        # G straight into the solve's wide buffer (no copy into it), read in x's dtype
        # for the backward before the solve centres it there. Compilers get a G of its
        # own (a product into a view of a wider buffer broke AOTAutograd's trace).
        joint = None
        if not torch.compiler.is_compiling():
            joint = x_w.new_empty(x.shape[0], landmarks.shape[0] + targets.shape[1])
        g = gaussian_matrix(
            x_w, z_w, gamma, out=None if joint is None else joint[:, : landmarks.shape[0]]
        )
        g_narrow = g.to(dtype)
        k = gaussian_matrix(z_w, z_w, gamma, symmetric=True)
        di, residual, a64, _ = _nysdi_solve(
            g, targets, k, rho, jitter, scale_columns, owner, sync, joint=joint
        )
        ctx.save_for_backward(
            x, landmarks, g_narrow, k.to(dtype), residual.to(dtype), a64.to(dtype)
        )
        ctx.gamma, ctx.rho = gamma, rho
        ctx.world_size = 1 if sync is None else sync.world_size
        return di.to(dtype)

    @staticmethod
    def backward(ctx, grad: Tensor):
        refuse_double_backward("nystrom_discriminant_information")
        x, z, g, k, residual, a = ctx.saved_tensors
        need_x, need_z = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
        grad_g = (residual * (2.0 * grad.to(a.dtype))) @ a.mT
        grad_x, grad_z = gaussian_grads(x, z, g, grad_g, ctx.gamma, need_x=need_x, need_z=need_z)
        if need_z:
            grad_k = _landmark_gradient(ctx, grad, a)
            via_k, _ = gaussian_grads(
                z, z, k, grad_k, ctx.gamma, symmetric=True, symmetric_grad=True
            )
            assert grad_z is not None and via_k is not None
            grad_z = grad_z.add_(via_k)
        return grad_x, grad_z, None, None, None, None, None, None, None


def _check_bandwidth(owner: str, bandwidth: object, width: int) -> None:
    """Raise unless ``bandwidth`` is a finite, positive ``Tensor[width]`` (the sign is
    recorded on the device instead under deferred checks: no host read in a step)."""
    check_features(owner, "bandwidth", bandwidth, width)
    assert isinstance(bandwidth, Tensor)  # check_features raised otherwise
    if bandwidth.ndim != 1:
        raise ValueError(
            f"{owner}: argument 'bandwidth' must have shape [{width}], got {list(bandwidth.shape)}"
        )
    message = f"{owner}: argument 'bandwidth' must be positive"
    checks = active_checks()
    if checks is not None:
        checks.record(ValueError, message + ", and a batch's was not", (bandwidth <= 0).any())
        return
    low = float(bandwidth.detach().min())
    if not low > 0:
        raise ValueError(f"{message}, got minimum {low:.3g}")


def nystrom_discriminant_information(
    x: Tensor,
    targets: Tensor,
    landmarks: Tensor,
    *,
    kernel: str | Kernel = "gaussian",
    gamma: float,
    rho: float = DEFAULT_RHO,
    jitter: float | None = None,
    num_classes: int | None = None,
    sync_dist: bool = False,
    process_group: dist.ProcessGroup | None = None,
    bandwidth: Tensor | None = None,
) -> Tensor:
    """NysDI, eq. (10) of the DI paper, straight from inputs and landmarks.

    With ``G = k(X, Z)`` and ``K_Z = k(Z, Z) + jitter * mean(diag) I``::

        NysDI = tr((G^T C G + rho K_Z)^+ G^T C Y Y^T C G)

    computed by a Cholesky factorisation of the ``n x n`` matrix ``G^T C G + rho K_Z``
    (no ``B x n`` solve). That matrix inherits ``K_Z``'s conditioning, so it is formed
    and factorised in float64 whatever the input dtype. It equals DI of the Nystrom
    features ``G R^-T`` (``K_Z = R R^T``), i.e. of :class:`~kernel_layers.NystromLayer`
    with the same landmarks and jitter. Gradients reach ``x`` and ``landmarks`` through ``G`` and
    ``K_Z``.

    Args:
        x (Tensor[B, D]): inputs.
        targets (Tensor[B] | Tensor[B, L]): labels or target matrix (as in
            :func:`discriminant_information`).
        landmarks (Tensor[n, D]): landmarks ``Z``.
        kernel: kernel name or :class:`~kernel_layers.kernels.Kernel`.
        gamma: kernel parameter ``> 0``.
        rho: ridge parameter ``> 0``.
        jitter: relative diagonal jitter of ``K_Z`` (default: the Nystrom layer's
            default for the dtype).
        num_classes: number of classes for integer labels.
        sync_dist: exact NysDI of the union of every process's batch (see
            :func:`discriminant_information`); the landmarks must be the same on every
            process.
        process_group: the group to reduce over (default: the world).
        bandwidth (Tensor[D] | None): per-dimension scales ``sigma > 0`` (automatic
            relevance determination): the kernel is evaluated on ``x * sigma`` and
            ``landmarks * sigma``, after the inputs are widened to the kernel matrices'
            dtype, so that narrow inputs keep their float64 precision; gradients reach
            ``sigma``. ``None``: no scaling.

    Returns:
        Tensor[]: NysDI, in ``x``'s dtype.
    """
    owner = "nystrom_discriminant_information"
    check_matrix(
        owner, "landmarks", landmarks, max_abs=data_limit(landmarks), why=DISTANCE_OVERFLOW
    )
    check_matrix(
        owner, "x", x, width=landmarks.shape[1], max_abs=data_limit(x), why=DISTANCE_OVERFLOW
    )
    if bandwidth is not None:
        _check_bandwidth(owner, bandwidth, landmarks.shape[1])
    rho = _check_rho(owner, rho)
    gamma = check_positive(owner, "gamma", gamma)
    spec = get_kernel(kernel, owner=owner)
    jitter = (
        default_jitter(landmarks.dtype)
        if jitter is None
        else check_positive(owner, "jitter", jitter)
    )
    batch = x.shape[0]
    if batch < 2:
        raise ValueError(f"{owner}: argument 'x' must have at least 2 rows, got {batch}")
    sync = _Sync.create(sync_dist, process_group)
    num_classes = _global_num_classes(targets, num_classes, sync)
    y, scale_columns = encode_targets(targets, batch, num_classes=num_classes, owner=owner)
    x = check_dtype(owner, "x", x, landmarks.dtype)
    with autocast_off(x):  # kernel distances never run in low precision
        x = upcast(x)
        # Narrow inputs: the kernel matrices in float64 as well (cheap next to the Gram).
        dtype = kernel_dtype(x.dtype, x.shape[1], landmarks.shape[0])
        if (
            spec.matrix is gaussian_kernel
            and bandwidth is None
            and dtype != x.dtype
            and not y.requires_grad
        ):  # and their gradient in x's dtype
            z = upcast(landmarks)
            return _GaussianNysDIFunction.apply(
                x, z, y, float(gamma), rho, jitter, scale_columns, owner, sync
            )
        z, wide = upcast(landmarks).to(dtype), x.to(dtype)
        if bandwidth is not None:  # scaled in the kernel's dtype: no float32 rounding
            sigma = upcast(bandwidth).to(dtype)
            z, wide = z * sigma, wide * sigma
        g = spec.matrix(wide, z, gamma)
        k_z = _landmark_kernel(z, spec, gamma)
    # G^T C G + rho K_Z inherits K_Z's conditioning: every statistic in SOLVE_DTYPE, the
    # B x J gradient in G's dtype.
    di = _NysDIFunction.apply(g, y, k_z, rho, jitter, scale_columns, owner, sync)
    return di.to(x.dtype)


def least_squares_loss(
    features: Tensor,
    targets: Tensor,
    weight: Tensor,
    bias: Tensor | None = None,
    *,
    rho: float = DEFAULT_RHO,
    num_classes: int | None = None,
) -> Tensor:
    """Ridge loss of the paper's LS baseline: ``||Y - Phi W - b||_F^2 + rho ||W||_F^2``.

    Targets are encoded as in :func:`discriminant_information` (unit-norm one-hot
    columns for labels), so at the optimal ``W, b`` this equals ``||Y_c||^2 - DI``.

    Args:
        features (Tensor[B, J]): features ``Phi``.
        targets (Tensor[B] | Tensor[B, L]): labels or target matrix.
        weight (Tensor[J, L]): read-out weights ``W``.
        bias (Tensor[L] | None): read-out bias ``b``.
        rho: ridge parameter ``> 0``.
        num_classes: number of classes for integer labels.

    Returns:
        Tensor[]: the loss.
    """
    owner = "least_squares_loss"
    check_matrix(owner, "features", features)
    rho = _check_rho(owner, rho)
    y, scale_columns = encode_targets(
        targets, features.shape[0], num_classes=num_classes, owner=owner
    )
    y = y.to(features.dtype)
    if scale_columns:
        y = y * _unit_column_scale(y.sum(0))
    if weight.shape != (features.shape[1], y.shape[1]):
        raise ValueError(
            f"{owner}: argument 'weight' must have shape [{features.shape[1]}, {y.shape[1]}], "
            f"got {list(weight.shape)}"
        )
    residual = y - features @ weight
    if bias is not None:
        residual = residual - bias
    return (residual * residual).sum() + rho * (weight * weight).sum()


class DILoss(nn.Module):
    """``-DI`` as a loss to minimise (see :func:`discriminant_information`).

    Args:
        rho: ridge parameter ``> 0``.
        num_classes: number of classes for integer labels (recommended, so that every
            batch has the same ``L``).
        form: ``"auto"``, ``"primal"`` or ``"dual"``.

    Shape:
        features (Tensor[B, J]), targets (Tensor[B] | Tensor[B, L]) -> Tensor[].
    """

    def __init__(
        self, *, rho: float = DEFAULT_RHO, num_classes: int | None = None, form: str = "auto"
    ) -> None:
        super().__init__()
        self.rho = _check_rho("DILoss", rho)
        self.num_classes = (
            None if num_classes is None else check_int("DILoss", "num_classes", num_classes)
        )
        check_choice("DILoss", "form", form, FORMS)
        self.form = form

    def forward(self, features: Tensor, targets: Tensor) -> Tensor:
        """Return ``-DI(features, targets)``."""
        return -discriminant_information(
            features, targets, rho=self.rho, num_classes=self.num_classes, form=self.form
        )

    def extra_repr(self) -> str:
        return f"rho={self.rho}, num_classes={self.num_classes}, form={self.form!r}"
