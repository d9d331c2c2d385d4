"""Closed-form ridge read-out fitted from streamed sufficient statistics."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from kernel_layers._validation import check_int, check_labels, check_matrix, check_positive
from kernel_layers.numerics.linalg import robust_cholesky
from kernel_layers.numerics.precision import SOLVE_DTYPE, autocast_off
from kernel_layers.objectives.statistics import DIStatistics, di_statistics, merge_statistics

__all__ = [
    "DEFAULT_HEAD_RHO",
    "GCV_GRID",
    "GCVRidgeHead",
    "RidgeHead",
    "gcv_penalty",
    "one_hot_targets",
    "ridge_solve",
]

#: Ridge penalty of the read-out (on un-normalised sums over the training set).
DEFAULT_HEAD_RHO = 1e-3
#: Penalties :func:`gcv_penalty` tries, relative to the mean eigenvalue of the scatter.
GCV_GRID = tuple(10.0**k for k in range(-8, 3))


def one_hot_targets(labels: Tensor, num_outputs: int, dtype: torch.dtype) -> Tensor:
    """The targets a ridge read-out fits for class labels: ``labels (Tensor[B])`` in
    ``[0, L)`` as ``{0, 1}`` rows ``Tensor[B, L]`` of ``dtype``, ``L = num_outputs``."""
    return nn.functional.one_hot(labels.long(), num_outputs).to(dtype)


def ridge_solve(stats: DIStatistics, rho: float) -> tuple[Tensor, Tensor]:
    """Ridge regression with intercept from sufficient statistics.

    Minimises ``||Y - Phi W - 1 b^T||^2 + rho ||W||^2`` over all rows the statistics saw:
    ``W = (Phi_c^T Phi_c + rho I)^-1 Phi_c^T Y_c`` and ``b = mean(Y) - mean(Phi) W``.

    Args:
        stats: statistics of the training features and targets.
        rho: ridge penalty ``> 0``.

    Returns:
        tuple[Tensor[J, L], Tensor[L]]: ``W`` and ``b`` in float64.
    """
    s = stats.scatter.to(SOLVE_DTYPE, copy=True)
    s.diagonal().add_(rho)
    factor = robust_cholesky(s, owner="ridge_solve")
    weight = torch.cholesky_solve(stats.cross.to(SOLVE_DTYPE), factor)
    bias = stats.target_mean.to(SOLVE_DTYPE) - stats.mean.to(SOLVE_DTYPE) @ weight
    return weight, bias


#: The residual ``RSS = ||Y_c||^2 - ...`` of :func:`gcv_penalty`, computed from the
#: statistics, is resolved above this many times ``(J + 1) ||Y_c||^2`` (float64 round-off).
RSS_RESOLUTION = 16 * torch.finfo(torch.float64).eps


def gcv_penalty(stats: DIStatistics, grid: tuple[float, ...] = GCV_GRID) -> float:
    """The ridge penalty of ``grid`` (times the scatter's mean eigenvalue) with the least
    generalised cross-validation error, from the statistics alone.

    With ``S = Phi_c^T Phi_c = U diag(l) U^T`` and ``B = U^T Phi_c^T Y_c``, the
    residual of the ridge fit is ``RSS = ||Y_c||^2 - sum_j ||B_j||^2 (l_j + 2 rho) /
    (l_j + rho)^2`` and its degrees of freedom ``df = 1 + sum_j l_j / (l_j + rho)`` (the
    intercept included); GCV is ``n RSS / (n - df)^2`` (Golub, Heath and Wahba, 1979),
    summed over the targets. A penalty whose residual is below its round-off
    (:data:`RSS_RESOLUTION`: the fit interpolates, as with ``J >= n - 1``) has no
    meaningful GCV and is not chosen; if none is resolved, the largest is.

    Args:
        stats: statistics of the training features and targets.
        grid: penalties relative to ``trace(S) / J``.

    Returns:
        float: the chosen penalty ``rho > 0``.
    """
    scatter = stats.scatter.to(SOLVE_DTYPE)
    eigenvalues, vectors = torch.linalg.eigh(scatter.tril() + scatter.tril(-1).mT)
    eigenvalues = eigenvalues.clamp_min(0)
    projected = (vectors.mT @ stats.cross.to(SOLVE_DTYPE)).square().sum(1)  # [J]
    total = stats.target_scatter.to(SOLVE_DTYPE).sum()
    n = stats.rows.to(SOLVE_DTYPE)
    scale = eigenvalues.mean().clamp_min(torch.finfo(SOLVE_DTYPE).tiny)
    rhos = scale * torch.tensor(grid, dtype=SOLVE_DTYPE, device=scale.device)[:, None]
    shrink = (eigenvalues + 2 * rhos) / (eigenvalues + rhos).square()  # [G, J]
    rss = total - (shrink * projected).sum(1)
    # n - df without cancellation: each eigenvalue's share rho / (l + rho) of its degree
    left = (n - 1 - len(eigenvalues)) + (rhos / (eigenvalues + rhos)).sum(1)
    # Below its round-off (the fit all but interpolates, J >= n - 1) the residual is
    # noise, and so is GCV: such penalties are not chosen.
    resolved = (left > 0) & (rss > RSS_RESOLUTION * (len(eigenvalues) + 1) * total)
    if not bool(resolved.any()):
        return float(rhos[-1, 0])  # nothing resolved: the largest penalty
    gcv = torch.where(
        resolved, n * rss / left.clamp_min(torch.finfo(SOLVE_DTYPE).tiny).square(), torch.inf
    )
    return float(rhos[int(gcv.argmin()), 0])


class RidgeHead(nn.Module):
    """Linear read-out ``scores = phi W + b`` fitted exactly, in one pass, by ridge regression.

    Call :meth:`reset`, then :meth:`update` on every batch of training features (one-hot
    targets for classification), then :meth:`fit`. Only ``J x J`` statistics are kept,
    merged batch by batch without cancellation, never an ``N x J`` matrix. ``weight``
    and ``bias`` are buffers, so they are saved in checkpoints.

    Args:
        in_features: feature width ``J``.
        num_outputs: number of outputs ``L`` (classes).
        rho: ridge penalty ``> 0``.

    Attributes:
        weight (Tensor[J, L]): read-out weights.
        bias (Tensor[L]): intercept.
        fitted (Tensor[]): whether :meth:`fit` has run (a bool buffer).

    Shape:
        features (Tensor[B, J]) -> Tensor[B, L] scores.
    """

    weight: Tensor
    bias: Tensor
    fitted: Tensor

    def __init__(self, in_features: int, num_outputs: int, *, rho: float = DEFAULT_HEAD_RHO):
        super().__init__()
        owner = type(self).__name__
        self.in_features = check_int(owner, "in_features", in_features)
        self.num_outputs = check_int(owner, "num_outputs", num_outputs)
        self.rho = check_positive(owner, "rho", rho)
        self.register_buffer("weight", torch.zeros(self.in_features, self.num_outputs))
        self.register_buffer("bias", torch.zeros(self.num_outputs))
        self.register_buffer("fitted", torch.tensor(False))
        self._stats: DIStatistics | None = None

    def reset(self) -> None:
        """Forget the accumulated statistics."""
        self._stats = None

    @torch.no_grad()
    def update(self, features: Tensor, targets: Tensor) -> None:
        """Accumulate a batch.

        Args:
            features (Tensor[B, J]): features.
            targets (Tensor[B]): integer labels in ``[0, L)``, or a float matrix ``[B, L]``.

        Raises:
            TypeError: labels that are not integers (a float ``[B]``).
            ValueError: a label outside ``[0, L)``, or features of the wrong shape or
                non-finite.
        """
        owner = type(self).__name__
        check_matrix(owner, "features", features, width=self.in_features)
        if not isinstance(targets, Tensor) or targets.shape[:1] != features.shape[:1]:
            raise ValueError(
                f"{owner}: argument 'targets' must have one row per feature row "
                f"({features.shape[0]}), got {getattr(targets, 'shape', type(targets).__name__)}"
            )
        if targets.is_floating_point() and targets.ndim == 2:
            y = check_matrix(type(self).__name__, "targets", targets, width=self.num_outputs)
        else:
            labels = check_labels(type(self).__name__, "targets", targets, self.num_outputs)
            y = one_hot_targets(labels, self.num_outputs, SOLVE_DTYPE)
        # ridge_solve's Cholesky reads the scatter's lower triangle only
        batch = di_statistics(features.to(SOLVE_DTYPE), y.to(SOLVE_DTYPE))
        self._stats = batch if self._stats is None else merge_statistics(self._stats, batch)

    @property
    def statistics(self) -> DIStatistics | None:
        """The statistics accumulated since the last :meth:`reset` (``None`` if none);
        their ``scatter`` is valid in its lower triangle only."""
        return self._stats

    def set_statistics(self, stats: DIStatistics | None) -> None:
        """Replace the accumulated statistics (e.g. by their merge over processes)."""
        self._stats = stats

    def get_extra_state(self) -> dict[str, Tensor]:
        """The running statistics, saved in ``state_dict`` so a resumed run continues exactly."""
        return {} if self._stats is None else dict(self._stats._asdict())

    def set_extra_state(self, state: dict[str, Tensor]) -> None:
        """Restore the running statistics saved by :meth:`get_extra_state`."""
        self._stats = DIStatistics(**state) if state else None

    @torch.no_grad()
    def fit(self) -> None:
        """Solve the ridge problem on the accumulated statistics.

        Raises:
            RuntimeError: no batch was accumulated.
        """
        if self._stats is None:
            raise RuntimeError(f"{type(self).__name__}: fit() called before any update()")
        weight, bias = ridge_solve(self._stats, self.rho)
        self.weight.copy_(weight)
        self.bias.copy_(bias)
        self.fitted.fill_(True)

    def forward(self, features: Tensor) -> Tensor:
        """Scores ``features @ W + b``: ``Tensor[B, J] -> Tensor[B, L]``.

        Raises:
            ValueError: ``features`` is not ``[B, J]``.
        """
        if features.ndim != 2 or features.shape[1] != self.in_features:
            raise ValueError(
                f"{type(self).__name__}: argument 'features' must have shape "
                f"[B, {self.in_features}], got {list(features.shape)}"
            )
        with autocast_off(features):  # the read-out never runs in low precision
            return torch.addmm(
                self.bias.to(features.dtype), features, self.weight.to(features.dtype)
            )

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, num_outputs={self.num_outputs}, rho={self.rho}"


class GCVRidgeHead(RidgeHead):
    """A :class:`RidgeHead` whose penalty is chosen at each :meth:`fit` by generalised
    cross-validation on the accumulated statistics (:func:`gcv_penalty`), for noisy
    targets where a fixed small penalty overfits.

    Args:
        in_features: feature width ``J``.
        num_outputs: number of outputs ``L``.

    Attributes:
        penalty (Tensor[]): the penalty of the last fit (a float64 buffer; ``0``
            before any).
    """

    penalty: Tensor

    def __init__(self, in_features: int, num_outputs: int) -> None:
        super().__init__(in_features, num_outputs, rho=1.0)
        self.register_buffer("penalty", torch.tensor(0.0, dtype=SOLVE_DTYPE))

    @torch.no_grad()
    def fit(self) -> None:
        """Choose the penalty by GCV, then solve the ridge problem with it.

        Raises:
            RuntimeError: no batch was accumulated.
        """
        if self._stats is None:
            raise RuntimeError(f"{type(self).__name__}: fit() called before any update()")
        self.rho = gcv_penalty(self._stats)
        self.penalty.fill_(self.rho)
        super().fit()

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, num_outputs={self.num_outputs}, rho='gcv'"
