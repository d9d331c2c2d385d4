"""The forward solves of DI and NysDI: statistics (:mod:`.statistics`), a Cholesky
factorisation in the dtype :mod:`~kernel_layers.numerics.precision` allows, and the
quantities the closed-form backward passes read.

``S = Phi_c^T Phi_c + R`` (``R = rho I`` for DI, ``rho K_Z`` for NysDI) is factorised as
``S = L L^T`` and ``DI = ||L^-1 M||_F^2`` with ``M = Phi_c^T Y_c``; no inverse is
formed. The backward needs ``A = S^-1 M`` and the residual ``Y_c - Phi_c A``. The dual
form ``DI = ||Y_c||^2 - rho tr(Y_c^T (Phi_c Phi_c^T + rho I)^-1 Y_c)`` gives the same
value at ``O(B^2 J)``.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch
from torch import Tensor

from kernel_layers._tensor_checks import check_finite
from kernel_layers._validation import check_matrix
from kernel_layers.numerics import precision
from kernel_layers.numerics.deferred import active_checks
from kernel_layers.numerics.linalg import (
    gram_matrix,
    robust_cholesky,
)
from kernel_layers.numerics.precision import (
    SOLVE_DTYPE,
    SQUARE_OVERFLOW,
    SUM_OVERFLOW,
    roundoff_estimate,
    square_sum_limit,
    sum_limit,
)
from kernel_layers.objectives.statistics import (
    Sync,
    centre,
    centred_products,
    compute_moments,
    moment_sums,
)

__all__ = [
    "DUAL_ROUNDOFF_LIMIT",
    "di_solve",
    "factor_scatter",
    "naming_square_overflow",
    "nysdi_solve",
    "solve_primal",
]

#: The dual form's round-off bound ``eps ||Phi_c||_F^2 / rho`` (relative; it grows so
#: where ``Phi_c`` has rank below ``B - 1``, and the primal form's does not) may be at
#: most this: with ``eps`` of float64, ``form="auto"`` takes the dual form only within
#: it; with ``eps`` of the features' dtype, the dual Gram is formed in that dtype only
#: within it (a float32 Gram accepted by its pivots alone erred by up to 0.25 on
#: features of rank 5). The bound is loose (float64 Gaussian features of rank 5 with
#: bounds of 5e-4 and 0.55 erred by 1e-5 and 4e-5, uniform full-rank ones with a bound of
#: 1e-7 by nothing); the primal form, exact to float64 either way, costs ``J^3``.
DUAL_ROUNDOFF_LIMIT = 1e-5


def _regularised(gram: Tensor, rho: Tensor) -> Tensor:
    """``gram + rho I`` in :data:`SOLVE_DTYPE` (a new matrix)."""
    # Cholesky reads the lower triangle only: no symmetrisation pass is needed.
    s = gram.to(SOLVE_DTYPE, copy=True)
    s.diagonal().add_(rho)
    return s


def _factor_if_fine(s: Tensor, dtype: torch.dtype, owner: str) -> Tensor | None:
    """The Cholesky factor of ``s`` (regularised from a Gram formed in ``dtype``), or
    ``None`` when ``s`` is too ill-conditioned for that dtype's round-off
    (:data:`~kernel_layers.numerics.precision.GRAM_PRECISION_LIMIT`)."""
    if dtype == SOLVE_DTYPE or torch.compiler.is_compiling():
        return robust_cholesky(s, owner=owner)
    if active_checks() is not None:  # no host read to decide on: the float64 path
        return None
    factor, info = torch.linalg.cholesky_ex(s)
    estimate = roundoff_estimate(dtype, s.diagonal().amax(), factor)
    if bool((info != 0) | ~(estimate <= precision.GRAM_PRECISION_LIMIT)):
        return None
    return factor


def factor_scatter(scatter: Tensor, rho: Tensor, dtype: torch.dtype, owner: str) -> Tensor | None:
    """The Cholesky factor of ``S = scatter + rho I``, a scatter formed in ``dtype``.

    In float32 (``scatter``'s dtype) when the factor's round-off estimate is within
    :data:`~kernel_layers.numerics.precision.FLOAT32_FACTOR_LIMIT`; otherwise in float64,
    or ``None`` when the Gram itself must be formed in float64.

    Args:
        scatter (Tensor[J, J]): ``Phi_c^T Phi_c`` (its lower triangle is read).
        rho (Tensor[]): the ridge, in :data:`SOLVE_DTYPE`.
        dtype: the dtype the scatter was formed in.
        owner: the caller's name for messages.

    Returns:
        Tensor[J, J] | None: the lower factor, in float32 or float64.
    """
    if (
        precision.FLOAT32_FACTOR_LIMIT > 0
        and scatter.dtype == torch.float32
        and not torch.compiler.is_compiling()
        and active_checks() is None  # the decision reads the host
    ):
        s = scatter.clone()
        s.diagonal().add_(rho.to(s.dtype))
        largest = s.diagonal().amax()
        factor, info = torch.linalg.cholesky_ex(s)
        estimate = roundoff_estimate(s.dtype, largest, factor)
        if bool((info == 0) & (estimate <= precision.FLOAT32_FACTOR_LIMIT)):
            return factor
    return _factor_if_fine(_regularised(scatter, rho), dtype, owner)


def solve_primal(factor: Tensor, cross: Tensor) -> tuple[Tensor, Tensor]:
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


def check_column_sums(owner: str, features: Tensor, column_sums: Tensor) -> None:
    """The value check of ``features`` from its column sums: finite sums mean finite
    entries none of whose sums overflowed (a NaN or an infinity reaches its column's
    sum), at the cost of one host read instead of a pass over ``features``; otherwise
    the full check names the fault.

    Args:
        owner: the caller's name for messages.
        features (Tensor[B, J]): the features DI reads.
        column_sums (Tensor[J]): their column sums (in their dtype or wider).

    Raises:
        ValueError: ``features`` holds NaN / Inf, or entries whose sums overflow.
    """
    if bool(torch.isfinite(column_sums.to(features.dtype)).all()):  # within its range
        return
    check_matrix(owner, "features", features, max_abs=sum_limit(features), why=SUM_OVERFLOW)
    raise ValueError(  # not reached: entries within sum_limit cannot overflow a sum
        f"{owner}: argument 'features' must have column sums finite in {features.dtype} "
        f"({SUM_OVERFLOW})"
    )


@contextmanager
def naming_square_overflow(owner: str, features: Tensor) -> Iterator[None]:
    """Where a factorisation fails, name ``features`` if their squares summed over the
    batch overflow :data:`SOLVE_DTYPE` (the scatter or Gram is then not finite); the
    check runs on that failure only."""
    try:
        yield
    except RuntimeError:
        limit = square_sum_limit(features.shape[0], SOLVE_DTYPE)
        check_finite(owner, "features", features, max_abs=limit, why=SQUARE_OVERFLOW)
        raise


def _dual_reads(phi_c: Tensor, y_c: Tensor, rho: float) -> tuple[float, float, float] | None:
    """What the dual form decides on, in one host read: its round-off bounds ``eps
    ||Phi_c||_F^2 / rho`` for ``eps`` of float64 and of ``phi_c``'s dtype, and
    ``||Y_c||^2``, the upper bound of any ridge fit's DI; ``None`` where no host read may
    decide."""
    if torch.compiler.is_compiling() or active_checks() is not None:
        return None
    squares, total = torch.stack(
        [phi_c.square().sum(dtype=SOLVE_DTYPE), y_c.square().sum(dtype=SOLVE_DTYPE)]
    ).tolist()
    squares /= rho
    eps64, eps = torch.finfo(SOLVE_DTYPE).eps, torch.finfo(phi_c.dtype).eps
    return eps64 * squares, eps * squares, total


def _solve_dual(
    phi_c: Tensor, y_c: Tensor, rho: float, owner: str, *, forced: bool
) -> tuple[Tensor, Tensor, Tensor] | None:
    """DI by the ``B x B`` system ``Phi_c Phi_c^T + rho I`` (one process's rows).

    Its round-off bounds (:func:`_dual_reads`) decide: unless ``forced``, ``None``
    where the float64 one exceeds :data:`DUAL_ROUNDOFF_LIMIT` (the primal form suits
    such features); the Gram is formed in the features' dtype only within the bound of
    that dtype (and for ``B <= J``), else in float64. ``None`` too for a result outside
    ``0 <= DI <= ||Y_c||^2``, the bounds of any ridge fit: the dual form's round-off
    swamped it (features of low rank at a small ``rho``), where the primal form is exact.

    Returns:
        tuple[Tensor[], Tensor[B, L], Tensor[J, L]] | None: DI (float64), the residual
        ``rho Q = Y_c - Phi_c A`` and ``A = Phi_c^T Q``, in ``phi_c``'s dtype.
    """
    reads = _dual_reads(phi_c, y_c, rho)
    if not forced and reads is not None and reads[0] > DUAL_ROUNDOFF_LIMIT:
        return None
    rho64 = torch.tensor(rho, dtype=SOLVE_DTYPE, device=phi_c.device)
    factor = None
    # With B > J the Gram has B - J zero eigenvalues, lifted to rho alone: the pivots do
    # not bound the round-off a float32 Gram leaves there, so it is formed in float64.
    narrow = reads is not None and reads[1] <= DUAL_ROUNDOFF_LIMIT
    if narrow and phi_c.dtype != SOLVE_DTYPE and phi_c.shape[0] <= phi_c.shape[1]:
        gram = gram_matrix(phi_c, transpose=True)  # the Cholesky reads the lower part
        factor = _factor_if_fine(_regularised(gram, rho64), phi_c.dtype, owner)
    if factor is None:  # the product in float64
        gram = gram_matrix(phi_c.to(SOLVE_DTYPE), transpose=True)
        factor = robust_cholesky(_regularised(gram, rho64), owner=owner)
    y64 = y_c.to(SOLVE_DTYPE)
    q = torch.cholesky_solve(y64, factor)
    # DI = tr(Y^T G Q) and the residual Y - G Q = rho Q, both through G Q: they hold for
    # the system factorised, a jitter that robust_cholesky had to add included (with
    # ||Y||^2 - rho tr(Y^T Q) such a jitter turned a DI of 0.18 into 2.99).
    fitted = gram.to(SOLVE_DTYPE) @ q
    di = (y64 * fitted).sum()
    if reads is not None and not 0.0 <= float(di) <= reads[2]:
        return None
    a = (phi_c.mT.to(SOLVE_DTYPE) @ q).to(phi_c.dtype)
    return di, (y64 - fitted).to(phi_c.dtype), a


def di_solve(
    features: Tensor,
    targets: Tensor,
    rho: float,
    scale_columns: bool,
    form: str,
    owner: str,
    sync: Sync | None = None,
    check_values: bool = False,
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """DI's forward: the statistics in the features' dtype, the factorisation in the
    dtype :func:`factor_scatter` allows (the products redone in float64 when the float32
    Gram is too coarse).

    Args:
        features (Tensor[B, J]): ``Phi`` (float32 or float64).
        targets (Tensor[B, L]): encoded targets.
        rho: the ridge ``> 0``.
        scale_columns: scale each target column to unit norm.
        form: ``"primal"`` (the ``J x J`` system), ``"dual"`` (the ``B x B`` system, one
            process only) or ``"auto"`` (dual for ``B < J`` within its round-off bound
            :data:`DUAL_ROUNDOFF_LIMIT`, else primal).
        owner: the caller's name for messages.
        sync: the reducer: DI of the union of every process's rows.
        check_values: check the features' entries from their column sums.

    Returns:
        tuple[Tensor[], Tensor[B, L], Tensor[J, L], Tensor[B, L]]: DI, the residual
        ``Y_c - Phi_c A``, ``A`` and ``Y_c`` (all but DI in the features' dtype).
    """
    targets = targets.to(features.dtype)
    width = features.shape[1]
    sums = moment_sums(features, targets)
    if check_values:  # the features' value check, from sums formed anyway
        check_column_sums(owner, features, sums[1 : 1 + width])
    moments = compute_moments(sums, width, scale_columns=scale_columns, sync=sync)
    phi_c, y_c = centre(features, targets, moments)
    dual = form == "dual" or (form == "auto" and features.shape[0] < width)
    solved = _solve_dual(phi_c, y_c, rho, owner, forced=form == "dual") if dual else None
    if solved is not None:
        di, residual, a = solved
        return di, residual, a, y_c
    rho64 = torch.tensor(rho, dtype=SOLVE_DTYPE, device=features.device)
    scatter, cross = centred_products(phi_c, y_c, sync)
    # The global S is the same on every process, so all decide alike.
    factor = factor_scatter(scatter, rho64, phi_c.dtype, owner)
    if factor is None:  # too coarse in float32: redo the products in float64
        scatter, cross = centred_products(phi_c.to(SOLVE_DTYPE), y_c.to(SOLVE_DTYPE), sync)
        factor = robust_cholesky(_regularised(scatter, rho64), owner=owner)
    di, a64 = solve_primal(factor, cross)
    a = a64.to(features.dtype)
    return di, y_c - phi_c @ a, a, y_c


def nysdi_solve(
    features: Tensor,
    targets: Tensor,
    kernel: Tensor,
    rho: float,
    jitter: float,
    scale_columns: bool,
    owner: str,
    sync: Sync | None,
    joint: Tensor | None = None,
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """NysDI's forward from ``G`` (``features``) and ``K`` (``kernel``), every statistic
    in :data:`SOLVE_DTYPE`: features and targets side by side in one wide buffer, so
    that one pass widens them, one centres them and one symmetric product gives the
    scatter and the cross term together; ``S = G_c^T G_c + rho (K + jitter * mean(diag
    K) I)`` formed once and factorised.

    Args:
        features (Tensor[B, n]): ``G``, any floating dtype.
        targets (Tensor[B, L]): encoded targets.
        kernel (Tensor[n, n]): ``K``.
        rho: the ridge ``> 0``.
        jitter: ``K``'s relative diagonal jitter.
        scale_columns: scale each target column to unit norm.
        owner: the caller's name for messages.
        sync: the reducer: NysDI of the union of every process's rows.
        joint (Tensor[B, n + L] | None): the wide buffer, when the caller already wrote
            ``G`` into its first ``n`` columns (``features`` is then that view, and is
            centred in place).

    Returns:
        tuple[Tensor[], Tensor[B, L], Tensor[n, L], Tensor[B, L]]: NysDI, the residual
        ``Y_c - G_c A``, ``A = S^-1 G_c^T Y_c`` and ``Y_c``, in :data:`SOLVE_DTYPE`.
    """
    wide = SOLVE_DTYPE
    batch, width = features.shape
    if joint is None:
        joint = torch.empty(batch, width + targets.shape[1], dtype=wide, device=features.device)
        joint[:, :width].copy_(features)
    joint[:, width:].copy_(targets)
    sums = moment_sums(joint[:, :width], joint[:, width:], joint=joint)
    moments = compute_moments(sums, width, scale_columns=scale_columns, sync=sync)
    # Centred in float64: the gradient 2 (Y_c - G_c A) A^T is exact only for exactly
    # centred columns, and A is large where S is ill-conditioned.
    phi_c, y_c = centre(joint[:, :width], joint[:, width:], moments, joint=joint)
    scatter, cross = centred_products(phi_c, y_c, sync, joint=joint)
    shift = kernel.diagonal().to(wide).mean() * (rho * jitter)

    # S = G_c^T G_c + rho K_Z + shift I; K widened first: two passes beat a mixed-dtype
    # sum (see benchmarks/di_step.py).
    s = kernel.to(wide, copy=True)
    torch.add(scatter, s, alpha=rho, out=s)
    s.diagonal().add_(shift)
    factor = robust_cholesky(s, owner=owner)
    di, a = solve_primal(factor, cross)
    return di, y_c - phi_c @ a, a, y_c
