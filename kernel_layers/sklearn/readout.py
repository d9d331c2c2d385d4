"""The ridge read-out of :class:`~kernel_layers.sklearn.DIClassifier`: its penalty chosen
by closed-form leave-one-out, its scores turned into probabilities by a temperature fitted
on the leave-one-out scores (against Platt's smoothed targets).

For features ``Phi [N, J]`` centred by their training means and ``{-1, +1}`` targets
``Y [N, L]`` (scikit-learn's ``RidgeClassifier`` coding), one eigendecomposition
``Phi^T Phi = V diag(s) V^T`` gives, for every penalty ``alpha``, the hat matrix's diagonal
``h_i = 1/N + sum_k (Phi V)_ik^2 / (s_k + alpha)`` and the fitted scores; the leave-one-out
residual of row ``i`` is ``e_i / (1 - h_i)`` (the intercept is refitted on the other rows
too). The penalty kept is the one whose leave-one-out scores classify the most training
rows correctly, ties broken by the smaller leave-one-out squared error.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from scipy.optimize import minimize_scalar
from scipy.special import log_softmax

from kernel_layers.objectives.statistics import di_statistics
from kernel_layers.training.heads import one_hot_targets, ridge_solve

__all__ = [
    "ALPHAS",
    "LooRidge",
    "fit_loo_ridge",
    "fit_loo_ridge_targets",
    "fit_ridge",
    "held_out_alpha",
    "loo_ridge_scores",
    "scale_of",
]

#: The penalties searched, relative to the mean eigenvalue of the centred ``Phi^T Phi``.
ALPHAS = np.logspace(-6, 2, 33)


@dataclass
class LooRidge:
    """A fitted ridge read-out.

    Attributes:
        coef (ndarray[J, L]): weights on the features.
        intercept (ndarray[L]): offsets.
        alpha (float): the penalty chosen (on ``Phi^T Phi``, unscaled).
        temperature (float): scores are divided by it before the softmax of ``proba``.
        loo_accuracy (float): leave-one-out accuracy of the chosen penalty.
    """

    coef: np.ndarray
    intercept: np.ndarray
    alpha: float
    temperature: float
    loo_accuracy: float

    def scores(self, features: np.ndarray) -> np.ndarray:
        """``features [n, J]`` -> scores ``[n, L]``."""
        return np.asarray(features @ self.coef + self.intercept)

    def proba(self, features: np.ndarray) -> np.ndarray:
        """Softmax of the tempered scores ``[n, L]`` (rows sum to 1)."""
        return np.exp(log_softmax(self.scores(features) / self.temperature, axis=1))


def smoothed_targets(codes: torch.Tensor, classes: int) -> torch.Tensor:
    """Platt's smoothed targets ``[N, L]`` of labels ``codes [N]``: a row of a class of
    ``n`` rows is that class with probability ``(n + 1) / (n + 2)``, the rest shared
    equally by the other classes.

    The log-loss against one-hot targets of scores that classify every row right keeps
    falling as the temperature goes to 0; against these it has a finite minimum, so the
    probabilities stay as confident as ``n`` rows can show, not infinitely.
    """
    counts = torch.bincount(codes, minlength=classes).to(torch.float64)
    spared = 1.0 / (counts[codes] + 2.0)  # [N]
    targets = (spared / (classes - 1))[:, None].expand(-1, classes).clone()
    targets[torch.arange(len(codes)), codes] = 1.0 - spared
    return targets


def _temperature(scores: torch.Tensor, codes: torch.Tensor) -> float:
    """The ``T`` minimising the mean log-loss of ``softmax(scores / T)`` against
    :func:`smoothed_targets`, ``T`` searched in ``[1e-2, 1e2]`` on a log scale."""
    targets = smoothed_targets(codes, scores.shape[1])

    def loss(log_t: float) -> float:
        tempered = scores / float(np.exp(log_t))
        return float(torch.nn.functional.cross_entropy(tempered, targets))

    found = minimize_scalar(loss, bounds=(np.log(1e-2), np.log(1e2)), method="bounded")
    return float(np.exp(found.x))


class _Decomposition:
    """One eigendecomposition of the centred ``Phi^T Phi``, and what every penalty reuses.

    Attributes:
        mean (Tensor[J]), target_mean (Tensor[L]): training means of features and targets.
        s (Tensor[J]), v (Tensor[J, J]): eigenvalues and eigenvectors of ``Phi_c^T Phi_c``.
        u (Tensor[N, J]): ``Phi_c V``.
        projected (Tensor[J, L]): ``U^T (Y - mean(Y))``.
        targets (Tensor[N, L]): the ``{-1, +1}`` targets (or, with ``classes=None``, the
            float target matrix given as ``labels``).
    """

    def __init__(self, features: np.ndarray, labels: torch.Tensor, classes: int | None) -> None:
        phi = torch.as_tensor(features, dtype=torch.float64)
        self.mean = phi.mean(0)
        centred = phi - self.mean
        if classes is None:  # a float target matrix [N, L] (regression)
            self.targets = labels.to(torch.float64)
        else:
            self.targets = signed_targets(labels, classes)
        self.target_mean = self.targets.mean(0)
        s, v = torch.linalg.eigh(centred.T @ centred)
        self.s, self.v = s.clamp_min(0.0), v
        self.u = centred @ self.v
        self.projected = self.u.T @ (self.targets - self.target_mean)

    def loo_scores(self, alpha: float) -> torch.Tensor:
        """Leave-one-out scores ``[N, L]`` for the penalty ``alpha``: row ``i``'s scores
        from the ridge (with intercept) fitted on the other rows. One penalty at a time,
        so that a search over penalties holds ``[N, L]``, not ``[A, N, L]``."""
        n = len(self.u)
        shrink = 1.0 / (self.s + alpha)  # [J]
        hat = 1.0 / n + self.u.square() @ shrink  # [N]
        fitted = self.target_mean + self.u @ (shrink[:, None] * self.projected)
        residual = (self.targets - fitted) / (1.0 - hat).clamp_min(1e-12)[:, None]
        return self.targets - residual

    def weights(self, alpha: float) -> tuple[torch.Tensor, torch.Tensor]:
        """``(coef [J, L], intercept [L])`` of the ridge fitted on all rows."""
        coef = self.v @ (self.projected / (self.s + alpha)[:, None])
        return coef, self.target_mean - self.mean @ coef


def signed_targets(labels: torch.Tensor, classes: int) -> torch.Tensor:
    """The ``{-1, +1}`` targets ``Tensor[N, L]`` (float64) the read-out fits for the
    integer labels ``labels (Tensor[N])`` in ``[0, classes)``."""
    return one_hot_targets(labels, classes, torch.float64) * 2 - 1


def scale_of(features: np.ndarray) -> float:
    """The unit of the penalties: the mean eigenvalue of the centred ``Phi^T Phi``
    (its trace over ``J``) of ``features [N, J]``."""
    centred = features - features.mean(0)
    return max(float((centred * centred).sum()) / features.shape[1], np.finfo(np.float64).tiny)


def fit_ridge(
    features: np.ndarray, codes: np.ndarray, classes: int, relative_alpha: float
) -> LooRidge:
    """The ridge read-out with a given penalty ``relative_alpha * scale_of(features)``,
    by one Cholesky solve (no leave-one-out search, ``temperature = 1``,
    ``loo_accuracy = nan``).

    Args:
        features (ndarray[N, J]): training features (float64).
        codes (ndarray[N]): integer labels in ``[0, classes)``.
        classes: number of classes ``L``.
        relative_alpha: the penalty in units of :func:`scale_of`, ``> 0``.
    """
    phi = torch.as_tensor(features, dtype=torch.float64)
    targets = signed_targets(torch.as_tensor(codes), classes)
    alpha = relative_alpha * scale_of(features)
    coef, intercept = ridge_solve(di_statistics(phi, targets), alpha)
    return LooRidge(coef.numpy(), intercept.numpy(), alpha, 1.0, float("nan"))


def loo_ridge_scores(
    features: np.ndarray, codes: np.ndarray, classes: int, alphas: np.ndarray
) -> np.ndarray:
    """Closed-form leave-one-out scores of the ridge read-out.

    Args:
        features (ndarray[N, J]): training features.
        codes (ndarray[N]): integer labels in ``[0, classes)``.
        classes: number of classes ``L``.
        alphas (ndarray[A]): penalties (on the unscaled ``Phi^T Phi``, as scikit-learn's
            ``Ridge(alpha)``).

    Returns:
        ndarray[A, N, L]: row ``i``'s scores from the ridge fitted without row ``i``.
    """
    labels = torch.as_tensor(codes, dtype=torch.long)
    found = _Decomposition(features, labels, classes)
    return torch.stack([found.loo_scores(float(alpha)) for alpha in alphas]).numpy()


def fit_loo_ridge(
    features: np.ndarray,
    codes: np.ndarray,
    classes: int,
    *,
    calibrate: bool = True,
    alpha: float | None = None,
) -> LooRidge:
    """Fit the ridge read-out with its penalty chosen by closed-form leave-one-out.

    Args:
        features (ndarray[N, J]): training features (float64).
        codes (ndarray[N]): integer labels in ``[0, classes)``.
        classes: number of classes ``L >= 2`` (two classes are fitted as two columns).
        calibrate: fit the temperature of ``proba`` (``False``: ``temperature = 1``).
        alpha: the penalty on the unscaled ``Phi^T Phi``; ``None``: chosen.

    Returns:
        LooRidge: the read-out fitted on all rows with the chosen penalty.
    """
    labels = torch.as_tensor(codes, dtype=torch.long)
    found = _Decomposition(features, labels, classes)
    scale = scale_of(features)
    candidates = (ALPHAS * scale).tolist() if alpha is None else [alpha]
    # the most accurate penalty; among those, the smallest leave-one-out squared error
    # (the first of equals); its scores [N, L] are kept for the temperature
    best: tuple[float, float, float, torch.Tensor] | None = None
    for candidate in candidates:
        loo = found.loo_scores(float(candidate))  # [N, L]
        accuracy = float((loo.argmax(1) == labels).to(torch.float64).mean())
        error = float(((found.targets - loo) ** 2).mean())
        if best is None or (accuracy, -error) > (best[0], -best[1]):
            best = (accuracy, error, float(candidate), loo)
    assert best is not None  # at least one candidate
    accuracy, _, chosen, loo = best
    coef, intercept = found.weights(chosen)
    temperature = _temperature(loo, labels) if calibrate else 1.0
    return LooRidge(coef.numpy(), intercept.numpy(), chosen, temperature, accuracy)


def fit_loo_ridge_targets(
    features: np.ndarray, targets: np.ndarray, alpha: float | None = None
) -> LooRidge:
    """The ridge read-out of a float target matrix (regression), its penalty chosen by
    the least closed-form leave-one-out squared error over ``ALPHAS``, or given.

    Args:
        features (ndarray[N, J]): training features (float64).
        targets (ndarray[N, L]): targets.
        alpha: the penalty on the unscaled ``Phi^T Phi``; ``None``: chosen.

    Returns:
        LooRidge: the read-out fitted on all rows (``temperature = 1``; ``loo_accuracy``
        holds the leave-one-out ``R^2`` averaged over the targets, ``nan`` when
        ``alpha`` is given).
    """
    found = _Decomposition(features, torch.as_tensor(targets, dtype=torch.float64), None)
    r2 = float("nan")
    if alpha is None:
        alphas = torch.as_tensor(ALPHAS * scale_of(features), dtype=torch.float64)
        error = torch.stack(  # [A, L]
            [((found.targets - found.loo_scores(a)) ** 2).sum(0) for a in alphas.tolist()]
        )
        best = int(torch.argmin(error.sum(1)))
        alpha = float(alphas[best])
        total = ((found.targets - found.target_mean) ** 2).sum(0)
        r2 = float((1 - error[best] / total.clamp_min(torch.finfo(total.dtype).tiny)).mean())
    coef, intercept = found.weights(alpha)
    return LooRidge(coef.numpy(), intercept.numpy(), alpha, 1.0, r2)


def held_out_alpha(
    fit: np.ndarray,
    fit_targets: np.ndarray,
    held: np.ndarray,
    held_targets: np.ndarray,
    baseline: float | None = None,
) -> float:
    """The penalty, in units of :func:`scale_of` of ``fit``, among :data:`ALPHAS` whose
    ridge read-out fitted on the rows ``fit [N, J]`` (targets ``fit_targets [N, L]``) has
    the least squared error on held-out rows ``held [M, J]`` (targets ``held_targets
    [M, L]``); ties go to the larger penalty. Given a ``baseline`` penalty (same units),
    that choice is kept only where its per-row gains over the baseline's errors average
    more than their standard error; else the baseline is returned.

    Leave-one-out on the rows a map was trained on favours too small a penalty: the
    features have moved to fit those very rows, so each row's leave-one-out residual is
    small whatever the penalty, and the penalty chosen by it can read out the rows' noise.
    Rows the map never saw judge the penalty without that bias; but a search over the
    grid on a few held-out rows picks noise too (a tiny penalty on pure-noise targets),
    which the comparison with the baseline, the penalty the map was selected with,
    guards against.
    """
    found = _Decomposition(fit, torch.as_tensor(fit_targets, dtype=torch.float64), None)
    scale = scale_of(fit)
    rows = torch.as_tensor(held, dtype=torch.float64)
    truth = torch.as_tensor(held_targets, dtype=torch.float64)

    def row_errors(relative: float) -> torch.Tensor:
        coef, intercept = found.weights(relative * scale)
        return ((rows @ coef + intercept - truth) ** 2).sum(1)  # [M]

    errors = [row_errors(float(relative)) for relative in ALPHAS]  # [A] of [M]
    index = min(range(len(ALPHAS)), key=lambda i: (float(errors[i].sum()), -i))
    best = float(ALPHAS[index])
    if baseline is None or len(rows) < 2:
        return best if baseline is None else baseline
    gains = row_errors(baseline) - errors[index]
    standard_error = float(gains.std()) / len(gains) ** 0.5
    return best if float(gains.mean()) > standard_error else baseline
