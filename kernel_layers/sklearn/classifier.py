"""The scikit-learn classifier :class:`DIClassifier`: :class:`DIFeatures` followed by a
linear read-out."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.linear_model import LogisticRegression
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_is_fitted, validate_data

from kernel_layers._validation import check_choice, check_positive
from kernel_layers.sklearn.features import DIFeatures, check_params
from kernel_layers.sklearn.inputs import map_rows, training_features
from kernel_layers.sklearn.readout import LooRidge, fit_loo_ridge, signed_targets
from kernel_layers.sklearn.training import DEFAULT_LR, DEFAULT_MAX_EPOCHS

__all__ = ["READOUTS", "DIClassifier"]

#: Read-outs of :class:`DIClassifier`.
READOUTS = ("ridge", "logistic")


class DIClassifier(ClassifierMixin, BaseEstimator):
    """A DI-trained kernel map followed by a linear read-out.

    Args: those of :class:`DIFeatures` (the map is trained on all rows but a held-out
    ``validation_fraction``, and kept at its best epoch on them), plus

    * ``readout``: ``"ridge"`` (one-vs-all ridge on ``{-1, +1}`` targets, see
      :mod:`kernel_layers.sklearn.readout`; its penalty chosen by closed-form
      leave-one-out for the untrained map, and for a trained map by the squared error on
      the held-out rows of a read-out fitted on the others, where that choice beats the
      penalty the epochs were scored with by its standard error, as
      :class:`~kernel_layers.sklearn.DIRegressor` chooses it: leave-one-out on rows the
      map has moved to fit favours too small a penalty) or ``"logistic"``
      (scikit-learn's multinomial ``LogisticRegression``);
    * ``C``: the inverse regularisation of the logistic read-out (unused by ``"ridge"``).

    Attributes:
        features_ (DIFeatures): the fitted map.
        readout_ (LooRidge | LogisticRegression): the read-out, fitted on the map's
            features of all rows (held-out ones included).
        classes_ (ndarray): the labels seen in ``fit`` (any labels scikit-learn accepts:
            integers, strings, ...).
        n_features_in_ (int): number of input features.
        feature_names_in_ (ndarray): column names of ``X`` when it has string names.
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
        readout: str = "ridge",
        C: float = 1.0,
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
        self.readout = readout
        self.C = C
        self.random_state = random_state
        self.device = device

    def fit(self, X: Any, y: Any) -> DIClassifier:
        """Learn the map on ``X [n_samples, n_features]``, ``y [n_samples]``, then the
        read-out on its features.

        Raises:
            TypeError, ValueError: as :meth:`DIFeatures.fit`, naming this estimator; a
                ``y`` with a single class.
        """
        owner = type(self).__name__
        check_params(self)
        check_choice(owner, "readout", self.readout, READOUTS)
        check_positive(owner, "C", self.C)
        X, y = validate_data(self, X, y, dtype=np.float64)
        check_classification_targets(y)
        if len(np.unique(y)) < 2:
            raise ValueError(
                f"{owner}: y must hold at least 2 classes, got 1 class (the label {y[0]!r})"
            )
        params = {k: v for k, v in self.get_params().items() if k not in ("C", "readout")}
        self.features_ = DIFeatures(**params)
        learned = self.features_._fit(X, y, owner, y_checked=True)
        self.classes_ = self.features_.classes_
        features = training_features(owner, self.features_.layer_, X)
        codes = np.searchsorted(self.classes_, y)
        if self.readout == "ridge":
            classes = len(self.classes_)
            signed = signed_targets(torch.as_tensor(codes), classes).numpy()
            alpha = learned.readout_alpha(features, signed, self.features_.best_epoch_)
            self.readout_: LooRidge | LogisticRegression = fit_loo_ridge(
                features, codes, classes, alpha=alpha
            )
        else:
            self.readout_ = LogisticRegression(C=self.C, max_iter=1000).fit(features, codes)
        return self

    def _features(self, X: Any) -> np.ndarray:
        check_is_fitted(self, "readout_")
        X = validate_data(self, X, dtype=np.float64, reset=False)
        return map_rows(type(self).__name__, self.features_.layer_, X)

    def _scores(self, X: Any) -> np.ndarray:
        features = self._features(X)
        if isinstance(self.readout_, LooRidge):
            return self.readout_.scores(features)
        scores = self.readout_.decision_function(features)
        return np.stack([-scores, scores], axis=1) / 2 if scores.ndim == 1 else scores

    def decision_function(self, X: Any) -> np.ndarray:
        """Scores ``[n_samples, n_classes]``; for two classes ``[n_samples]``, positive
        for ``classes_[1]`` (scikit-learn's convention)."""
        scores = self._scores(X)
        return scores[:, 1] - scores[:, 0] if len(self.classes_) == 2 else scores

    def predict_proba(self, X: Any) -> np.ndarray:
        """Class probabilities ``[n_samples, n_classes]`` (rows sum to 1): for the ridge
        read-out the softmax of its scores divided by the temperature that minimises the
        leave-one-out log-loss on the training rows."""
        features = self._features(X)
        if isinstance(self.readout_, LooRidge):
            return self.readout_.proba(features)
        return np.asarray(self.readout_.predict_proba(features))

    def predict(self, X: Any) -> np.ndarray:
        """Labels ``[n_samples]`` (from ``classes_``)."""
        scores = self._scores(X)
        return np.asarray(self.classes_[scores.argmax(axis=1)])
