"""scikit-learn estimators: DI-trained kernel features without a training loop.

* :class:`DIFeatures` — a transformer: ``fit(X, y)`` learns a Nyström or random Fourier
  map by maximising the Discriminant Information of mini-batches; ``transform(X)``
  returns the ``n_components`` features.
* :class:`DIClassifier` — that map followed by a linear read-out (multinomial logistic
  regression): ``predict``, ``predict_proba``, ``decision_function``, ``score``.

Both take and return NumPy arrays (float64 throughout, as scikit-learn's own kernel
approximations), print nothing, and work inside ``Pipeline`` and ``GridSearchCV``.
Training is a plain PyTorch loop (Adam on ``-DI``), seeded by ``random_state``.

Example:
    >>> from sklearn.datasets import load_digits
    >>> X, y = load_digits(return_X_y=True)
    >>> clf = DIClassifier(n_components=100, gamma=0.02 / 256, random_state=0).fit(X, y)
    >>> clf.score(X, y) > 0.9
    True
"""

from __future__ import annotations

import warnings
from numbers import Integral
from typing import Any

import numpy as np
import torch
from sklearn.base import BaseEstimator, ClassifierMixin, TransformerMixin
from sklearn.linear_model import LogisticRegression
from sklearn.preprocessing import LabelEncoder
from sklearn.utils import check_random_state
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_is_fitted, validate_data

from kernel_layers._validation import check_choice, check_int, check_positive, check_torch_device
from kernel_layers.layers.fourier import FourierLayer
from kernel_layers.layers.nystrom import NystromLayer
from kernel_layers.objectives import DEFAULT_RHO
from kernel_layers.selection.gamma import gamma_heuristic

__all__ = ["MAPS", "DIClassifier", "DIFeatures"]

#: Kernel maps :class:`DIFeatures` can learn.
MAPS = ("nystrom", "fourier")
#: The paper's batch size for ``J <= 500``; ``2 J`` above (capped at the data size).
DEFAULT_BATCH = 1000


def _random_state(owner: str, random_state: object) -> np.random.RandomState:
    """``random_state`` as scikit-learn reads it (:func:`sklearn.utils.check_random_state`:
    ``None``, an int or a ``RandomState``), or a clear error.

    Raises:
        TypeError: ``random_state`` is none of those types.
        ValueError: an integer outside ``[0, 2**32 - 1]``.
    """
    expected = "None, an integer in [0, 2**32 - 1] or a numpy RandomState"
    if not (
        random_state is None
        or isinstance(random_state, np.random.RandomState)
        or (isinstance(random_state, Integral) and not isinstance(random_state, bool))
    ):
        raise TypeError(
            f"{owner}: argument 'random_state' must be {expected}, got {random_state!r}"
        )
    try:
        rng = check_random_state(random_state)
    except ValueError as err:
        raise ValueError(
            f"{owner}: argument 'random_state' must be {expected}, got {random_state!r}"
        ) from err
    return rng


def _check_params(estimator: DIFeatures | DIClassifier) -> torch.device:
    """The checks of the estimators' parameters at ``fit`` (``__init__`` only stores
    them, as scikit-learn wants); the device to train on.

    Raises:
        TypeError: a parameter of the wrong type.
        ValueError: a parameter out of range, or ``batch_size <= n_components``.
    """
    owner = type(estimator).__name__
    j = check_int(owner, "n_components", estimator.n_components)
    check_choice(owner, "map", estimator.map, MAPS)
    check_int(owner, "max_epochs", estimator.max_epochs, minimum=0)
    if estimator.batch_size is not None:
        batch = check_int(owner, "batch_size", estimator.batch_size, minimum=2)
        if batch <= j:
            raise ValueError(
                f"{owner}: argument 'batch_size' must be larger than n_components={j} "
                f"(DI saturates when batch_size <= n_components), got {batch}; the paper "
                f"uses max(1000, 2 n_components) = {max(DEFAULT_BATCH, 2 * j)}"
            )
    check_positive(owner, "lr", estimator.lr)
    check_positive(owner, "rho", estimator.rho)
    _random_state(owner, estimator.random_state)
    if estimator.gamma is not None:
        check_positive(owner, "gamma", estimator.gamma)
    return check_torch_device(owner, "device", estimator.device)


def _train_sizes(owner: str, requested: int | None, rows: int, width: int) -> tuple[int, int]:
    """``(J, batch)`` that DI trains with on ``rows`` rows: the batch is ``batch_size``
    (default ``max(1000, 2 J)``) capped at the rows; where that cap leaves a batch not
    larger than ``J`` (or, by default, below ``2 J``), ``J`` is lowered to half the batch,
    with a warning naming both values."""
    wanted = requested if requested is not None else max(DEFAULT_BATCH, 2 * width)
    batch = max(2, min(wanted, rows))
    enough = batch > width if requested is not None else batch >= 2 * width
    if enough:
        return width, batch
    chosen = max(1, batch // 2)
    warnings.warn(
        f"{owner}: n_components={width} with a batch of {batch} rows: DI saturates when "
        f"the batch is not well above n_components ({rows} training rows); "
        f"n_components_={chosen} and batch_size_={batch} are used",
        UserWarning,
        stacklevel=3,
    )
    return chosen, batch


class DIFeatures(TransformerMixin, BaseEstimator):
    """Kernel features learned with the Discriminant Information criterion.

    Args:
        n_components: number of features ``J`` (Nyström: landmarks, at most the number
            of training rows, as scikit-learn's ``Nystroem``). DI needs batches well
            above ``J``: where the training rows cap the batch below ``2 J`` (below
            ``J + 1`` with an explicit ``batch_size``), ``fit`` lowers ``J`` to half the
            batch and warns with both values (``n_components_``, ``batch_size_``).
        map: ``"nystrom"`` (learnable landmarks) or ``"fourier"`` (learnable random
            Fourier frequencies and phases).
        kernel: a kernel name of :func:`kernel_layers.available_kernels`.
        gamma: kernel parameter; ``None`` uses ``1 / (n_features * X.var())``.
        max_epochs: passes of Adam over the training data (``0``: the untrained map).
        batch_size: rows per DI step, larger than ``n_components``; ``None``:
            ``max(1000, 2 J)``; capped at the training rows.
        lr: Adam's learning rate.
        rho: DI's ridge parameter.
        random_state: seed of the initial map and of the batch order: ``None``, an
            integer in ``[0, 2**32 - 1]`` or a ``numpy.random.RandomState`` (scikit-learn's
            convention; a ``RandomState`` is drawn from at each ``fit``).
        device: torch device to train on (``"cpu"``, ``"cuda"``, ``"cuda:1"``, ...).

    Parameters are checked at ``fit``, naming the bad one (``__init__`` only stores them).

    Attributes:
        layer_ (NystromLayer | FourierLayer): the trained map.
        n_features_in_ (int): number of input features.
        classes_ (ndarray): the labels seen in ``fit``.
        n_components_ (int): the ``J`` used (see ``n_components``).
        batch_size_ (int): the rows per DI step used (``0``: no training).
        di_history_ (list[float]): mean DI of each epoch.
    """

    def __init__(
        self,
        n_components: int = 100,
        *,
        map: str = "nystrom",
        kernel: str = "gaussian",
        gamma: float | None = None,
        max_epochs: int = 20,
        batch_size: int | None = None,
        lr: float = 1e-2,
        rho: float = DEFAULT_RHO,
        random_state: int | None = None,
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
        self.random_state = random_state
        self.device = device

    def fit(self, X: Any, y: Any) -> DIFeatures:
        """Learn the map on ``X [n_samples, n_features]`` with labels ``y [n_samples]``.

        Raises:
            TypeError, ValueError: a parameter of the wrong type or out of range (named),
                ``batch_size <= n_components``, or a ``device`` this machine lacks.
        """
        device = _check_params(self)
        owner = type(self).__name__
        X, y = validate_data(self, X, y, dtype=np.float64)
        check_classification_targets(y)
        encoder = LabelEncoder().fit(y)
        self.classes_ = encoder.classes_
        codes = torch.as_tensor(encoder.transform(y), dtype=torch.long)
        seed = int(_random_state(owner, self.random_state).randint(2**31 - 1))
        generator = torch.Generator().manual_seed(seed)
        x = torch.tensor(X, dtype=torch.float64)  # a copy: X may be read-only
        gamma = self.gamma if self.gamma is not None else _safe_gamma(X)
        trains = self.max_epochs > 0 and len(self.classes_) > 1
        if trains:
            width, batch = _train_sizes(owner, self.batch_size, len(x), self.n_components)
        else:  # the untrained map: as many landmarks as rows at most (as Nystroem)
            width, batch = self.n_components, 0
        if self.map == "nystrom":
            width = min(width, len(x))
            layer: torch.nn.Module = NystromLayer.from_data(
                x, width, kernel=self.kernel, gamma=gamma, seed=seed, dtype=torch.float64
            )
        else:
            layer = FourierLayer(
                x.shape[1], width, kernel=self.kernel, gamma=gamma, seed=seed, dtype=torch.float64
            )
        layer = layer.to(device)
        self.di_history_: list[float] = []
        if trains:
            self._train(layer, x.to(device), codes.to(device), generator, batch)
        self.layer_ = layer.eval()
        self.n_components_ = width
        self.batch_size_ = batch
        return self

    def _train(
        self,
        layer: torch.nn.Module,
        x: torch.Tensor,
        y: torch.Tensor,
        gen: torch.Generator,
        batch: int,
    ) -> None:
        optimizer = torch.optim.Adam(layer.parameters(), lr=self.lr)
        classes = len(self.classes_)
        train = getattr(layer, "discriminant_information", None)
        for _ in range(self.max_epochs):
            order = torch.randperm(len(x), generator=gen).to(x.device)
            total, rows = 0.0, 0
            for start in range(0, len(x) - batch + 1, batch):
                index = order[start : start + batch]
                assert callable(train)
                di = train(x[index], y[index], rho=self.rho, num_classes=classes)
                optimizer.zero_grad()
                (-di).backward()
                optimizer.step()
                total += float(di.detach()) * len(index)
                rows += len(index)
            self.di_history_.append(total / max(rows, 1))

    def transform(self, X: Any) -> np.ndarray:
        """The learned features ``[n_samples, n_components_]`` (float64)."""
        check_is_fitted(self, "layer_")
        X = validate_data(self, X, dtype=np.float64, reset=False)
        device = next(self.layer_.parameters()).device
        with torch.no_grad():
            features = self.layer_(torch.tensor(X, dtype=torch.float64, device=device))
        return features.cpu().numpy()

    def __sklearn_tags__(self) -> Any:
        tags = super().__sklearn_tags__()
        tags.target_tags.required = True  # supervised: fit needs y
        return tags


def _safe_gamma(X: np.ndarray) -> float:
    """The variance heuristic, or 1 for constant data (which it refuses)."""
    try:
        return gamma_heuristic(X)
    except ValueError:
        return 1.0


class DIClassifier(ClassifierMixin, BaseEstimator):
    """A DI-trained kernel map followed by multinomial logistic regression.

    Args: those of :class:`DIFeatures`, plus ``C``, the inverse regularisation of the
    logistic read-out (scikit-learn's).

    Attributes:
        features_ (DIFeatures): the fitted map.
        readout_ (LogisticRegression): the fitted read-out.
        classes_ (ndarray): the labels seen in ``fit``.
    """

    def __init__(
        self,
        n_components: int = 100,
        *,
        map: str = "nystrom",
        kernel: str = "gaussian",
        gamma: float | None = None,
        max_epochs: int = 20,
        batch_size: int | None = None,
        lr: float = 1e-2,
        rho: float = DEFAULT_RHO,
        C: float = 1.0,
        random_state: int | None = None,
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
        self.C = C
        self.random_state = random_state
        self.device = device

    def fit(self, X: Any, y: Any) -> DIClassifier:
        """Learn the map, then the read-out on its features.

        Raises:
            TypeError, ValueError: as :meth:`DIFeatures.fit`, naming this estimator.
        """
        _check_params(self)
        check_positive(type(self).__name__, "C", self.C)
        X, y = validate_data(self, X, y, dtype=np.float64)
        check_classification_targets(y)
        params = {k: v for k, v in self.get_params().items() if k != "C"}
        self.features_ = DIFeatures(**params).fit(X, y)
        self.classes_ = self.features_.classes_
        features = self.features_.transform(X)
        self.readout_ = LogisticRegression(C=self.C, max_iter=1000).fit(features, y)
        return self

    def decision_function(self, X: Any) -> np.ndarray:
        check_is_fitted(self, "readout_")
        X = validate_data(self, X, dtype=np.float64, reset=False)
        return self.readout_.decision_function(self.features_.transform(X))

    def predict_proba(self, X: Any) -> np.ndarray:
        check_is_fitted(self, "readout_")
        X = validate_data(self, X, dtype=np.float64, reset=False)
        return self.readout_.predict_proba(self.features_.transform(X))

    def predict(self, X: Any) -> np.ndarray:
        check_is_fitted(self, "readout_")
        X = validate_data(self, X, dtype=np.float64, reset=False)
        return self.readout_.predict(self.features_.transform(X))
