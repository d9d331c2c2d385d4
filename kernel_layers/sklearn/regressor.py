"""The scikit-learn regressor :class:`DIRegressor`: a kernel map trained by DI against
the (standardised) targets, followed by a ridge read-out."""

from __future__ import annotations

from typing import Any

import numpy as np
from sklearn.base import BaseEstimator, RegressorMixin
from sklearn.utils.validation import check_is_fitted, validate_data

from kernel_layers.layers.base import KernelFeatureMap
from kernel_layers.sklearn.features import HeldOutScore, check_params, learn_map
from kernel_layers.sklearn.inputs import map_rows, training_features
from kernel_layers.sklearn.readout import (
    LooRidge,
    fit_loo_ridge_targets,
    scale_of,
)
from kernel_layers.sklearn.training import DEFAULT_LR, DEFAULT_MAX_EPOCHS

__all__ = ["DIRegressor", "HeldOutR2"]


def _r2(truth: np.ndarray, prediction: np.ndarray) -> float:
    """``R^2`` of ``prediction`` against ``truth [M, L]``, averaged over the targets (a
    constant target scores 1 when predicted exactly, else 0, as scikit-learn's)."""
    total = ((truth - truth.mean(0)) ** 2).sum(0)
    error = ((truth - prediction) ** 2).sum(0)
    exact = error <= np.finfo(np.float64).eps * max(1.0, float(np.abs(truth).max()))
    safe = np.where(total > 0, total, 1.0)
    return float(np.where(total > 0, 1 - error / safe, np.where(exact, 1.0, 0.0)).mean())


def _loo_penalty(features: np.ndarray, targets: np.ndarray) -> float:
    """The penalty closed-form leave-one-out chooses for the ridge read-out of
    ``features [N, J]`` and ``targets [N, L]``."""
    return fit_loo_ridge_targets(features, targets).alpha


class HeldOutR2(HeldOutScore):
    """:class:`~kernel_layers.sklearn.features.HeldOutScore` of a regressing map
    (targets ``y_fit [N, L]``, ``y_held [M, L]``): the read-out's ``R^2`` on the held-out
    rows."""

    def loo_alpha(self, features: np.ndarray) -> float:
        return _loo_penalty(features, self.y_fit)

    def __call__(self, layer: KernelFeatureMap) -> tuple[float]:
        features = layer(self.x_fit).cpu().numpy()
        alpha = self.penalty(features) * scale_of(features)
        readout = fit_loo_ridge_targets(features, self.y_fit, alpha)
        return (_r2(self.y_held, readout.scores(layer(self.x_held).cpu().numpy())),)


class DIRegressor(RegressorMixin, BaseEstimator):
    """A DI-trained kernel map followed by a ridge read-out, for regression.

    The targets are standardised on the training rows (each column to mean 0 and
    standard deviation 1; a constant column only centred), so that DI weighs every
    target alike, whatever its units; the map is trained by Adam on ``-DI`` of the
    standardised target matrix (the DI paper's general form) with
    :func:`~kernel_layers.sklearn.training.train_map`, the map kept at its best held-out
    ``R^2`` (the untrained map included). The read-out is a ridge regression on the
    features of every training row. Its penalty is chosen by closed-form leave-one-out
    (:func:`~kernel_layers.sklearn.readout.fit_loo_ridge_targets`) for the untrained
    map; for a trained map, by the least squared error on the held-out rows of a
    read-out fitted on the others
    (:func:`~kernel_layers.sklearn.readout.held_out_alpha`), where it beats the penalty
    the epochs were scored with by more than the standard error of its per-row gains,
    else that penalty: leave-one-out on the rows the map was trained on favours too small
    a penalty, which reads out their noise, and so does a search on a few held-out rows.

    Args: those of :class:`~kernel_layers.sklearn.DIFeatures`; ``validation_fraction``
    holds rows out to score the map by the ``R^2`` of the ridge read-out fitted on the
    other rows; ``rho=None`` trains with the read-out's penalty, the one leave-one-out
    chooses for the untrained map's features of the rows trained on, shared out over
    the batches of an epoch (as ``KernelRegressor(rho=None)``): DI is then the in-batch
    fit of that ridge regression.

    Attributes:
        layer_ (NystromLayer | FourierLayer): the trained map.
        readout_ (LooRidge): the read-out on standardised targets.
        n_features_in_ (int): number of input features.
        feature_names_in_ (ndarray): column names of ``X`` when it has string names.
        n_components_ (int): the ``J`` used.
        batch_size_ (int): rows per DI step (``0``: no training).
        rho_ (float | None): DI's ridge parameter used (``None``: no training).
        di_history_ (list[float]): mean training DI of each epoch.
        validation_scores_ (list[float]): held-out ``R^2`` before training and after each
            epoch (empty without held-out rows).
        best_epoch_ (int): the epoch whose map was kept (``0``: the untrained map).
        lr_decay_epochs_ (list[int]): epochs after which the learning rate was divided
            by 10.
    """

    def __init__(
        self,
        n_components: int | None = None,
        *,
        map: str = "nystrom",
        kernel: str = "gaussian",
        gamma: float | None = None,
        max_epochs: int = DEFAULT_MAX_EPOCHS,
        batch_size: int | None = None,
        lr: float = DEFAULT_LR,
        rho: float | None = None,
        validation_fraction: float | None = 0.1,
        n_iter_no_change: int = 5,
        random_state: int | np.random.RandomState | None = None,
        device: str = "cpu",
    ) -> None:
        self.n_components = n_components
        self.map = map
        self.kernel = kernel
        self.gamma = gamma
        self.max_epochs = max_epochs
        self.batch_size = batch_size
        self.lr = lr
        self.rho = rho
        self.validation_fraction = validation_fraction
        self.n_iter_no_change = n_iter_no_change
        self.random_state = random_state
        self.device = device

    def fit(self, X: Any, y: Any) -> DIRegressor:
        """Learn the map on ``X [n_samples, n_features]`` and real targets ``y
        [n_samples]`` or ``[n_samples, n_targets]``, then the read-out on its features.

        Raises:
            TypeError, ValueError: a parameter of the wrong type or out of range (named),
                ``batch_size <= n_components``, a ``device`` this machine lacks, or
                targets that are not finite numbers (scikit-learn's message).
        """
        device = check_params(self)
        X, y = validate_data(self, X, y, dtype=np.float64, multi_output=True, y_numeric=True)
        targets = np.asarray(y, dtype=np.float64).reshape(len(y), -1)
        self._one_target = np.ndim(y) == 1
        # moments of targets / max |target| (within [-1, 1]): the squares of targets
        # near the float64 limit would overflow to an infinite scale and NaN predictions
        peak = np.abs(targets).max(0)
        peak = np.where(peak > 0, peak, 1.0)
        unit = targets / peak
        centre, spread = unit.mean(0), unit.std(0)
        self.target_mean_ = centre * peak
        self.target_scale_ = np.where(spread > 0, spread * peak, 1.0)  # constant: 1
        z = (unit - centre) / np.where(spread > 0, spread, 1.0)
        trains = self.max_epochs > 0 and len(X) > 2
        learned = learn_map(self, X, z, device, trains, None, HeldOutR2, _loo_penalty)
        features = training_features(type(self).__name__, self.layer_, X)
        alpha = learned.readout_alpha(features, z, self.best_epoch_)
        self.readout_: LooRidge = fit_loo_ridge_targets(features, z, alpha)
        return self

    def predict(self, X: Any) -> np.ndarray:
        """Predictions ``[n_samples]`` (``[n_samples, n_targets]`` for a 2-D ``y``)."""
        check_is_fitted(self, "readout_")
        X = validate_data(self, X, dtype=np.float64, reset=False)
        features = map_rows(type(self).__name__, self.layer_, X)
        prediction = self.readout_.scores(features) * self.target_scale_ + self.target_mean_
        return prediction[:, 0] if self._one_target else prediction

    def __sklearn_tags__(self) -> Any:
        tags = super().__sklearn_tags__()
        tags.target_tags.multi_output = True
        tags.target_tags.single_output = True
        return tags
