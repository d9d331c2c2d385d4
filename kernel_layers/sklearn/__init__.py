"""scikit-learn estimators: DI-trained kernel features without a training loop.

* :class:`DIFeatures` — a transformer: ``fit(X, y)`` learns a Nyström or random Fourier
  map by maximising the Discriminant Information of mini-batches; ``transform(X)``
  returns the ``n_components`` features.
* :class:`DIClassifier` — that map followed by a ridge read-out whose penalty is chosen
  by closed-form leave-one-out: ``predict``, ``predict_proba``, ``decision_function``,
  ``score``.
* :class:`DIRegressor` — a map trained by DI against the standardised targets (one or
  several columns) and a ridge read-out whose penalty is chosen by leave-one-out for
  the untrained map and, once training has replaced it, by the least squared error on
  the held-out rows: ``predict``, ``score`` (``R^2``).

All three take and return NumPy arrays (float64 throughout, as scikit-learn's own kernel
approximations), print nothing, and work inside ``Pipeline`` and ``GridSearchCV``.
Their defaults follow scikit-learn's ``SVC``: ``gamma`` from the data
(``1 / (n_features * X.var())``), ``J`` from the number of rows, and training stopped
by the DI paper's rule. Training is a plain PyTorch loop (Adam on ``-DI``,
:mod:`kernel_layers.sklearn.training`), seeded by ``random_state``; it holds out
``validation_fraction`` of the rows and keeps the map of the best held-out score, the
untrained map included.

Example:
    >>> from sklearn.datasets import load_digits
    >>> X, y = load_digits(return_X_y=True)
    >>> clf = DIClassifier(n_components=100, random_state=0).fit(X / 16, y)
    >>> clf.score(X / 16, y) > 0.9
    True
"""

from kernel_layers.sklearn.classifier import READOUTS, DIClassifier
from kernel_layers.sklearn.features import MAPS, DIFeatures
from kernel_layers.sklearn.regressor import DIRegressor

__all__ = ["MAPS", "READOUTS", "DIClassifier", "DIFeatures", "DIRegressor"]
