"""The scikit-learn transformer :class:`DIFeatures` and what both estimators share: the
parameter checks, the sizes ``(J, batch)`` taken from the number of rows, and the
training loop (Adam on ``-DI``, stopped by the DI paper's rule).

The rule is the one of the Lightning recipes, run by the same callbacks:
:class:`~kernel_layers.callbacks.PlateauDecay` multiplies the learning rate by 0.1 when the
epoch's mean DI stops improving for ``PATIENCE`` epochs, and
:class:`~kernel_layers.callbacks.DISaturationStopping` stops training when DI fails to
improve after a decay; ``max_epochs`` caps the epochs.
"""

from __future__ import annotations

import warnings
from numbers import Integral
from typing import Any

import numpy as np
import torch
from lightning.pytorch.trainer.states import TrainerFn
from sklearn.base import BaseEstimator, ClassNamePrefixFeaturesOutMixin, TransformerMixin
from sklearn.preprocessing import LabelEncoder
from sklearn.utils import check_random_state
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_is_fitted, validate_data

from kernel_layers._validation import check_choice, check_int, check_positive, check_torch_device
from kernel_layers.callbacks import DISaturationStopping, PlateauDecay
from kernel_layers.layers.fourier import FourierLayer
from kernel_layers.layers.nystrom import NystromLayer
from kernel_layers.objectives import DEFAULT_RHO
from kernel_layers.selection.gamma import gamma_heuristic

__all__ = [
    "DEFAULT_COMPONENTS",
    "MAPS",
    "DIFeatures",
    "as_random_state",
    "check_params",
    "default_components",
]

#: Kernel maps :class:`DIFeatures` can learn.
MAPS = ("nystrom", "fourier")
#: The paper's batch size for ``J <= 500``; ``2 J`` above (capped at the data size).
DEFAULT_BATCH = 1000
#: ``n_components=None`` takes ``min(DEFAULT_COMPONENTS, rows // 3)`` (at least 1), so that
#: the default batch ``min(max(1000, 2 J), rows)`` stays at least ``2 J``.
DEFAULT_COMPONENTS = 400
#: Epochs without a better mean DI before the learning rate is multiplied by 0.1.
PATIENCE = 3


def as_random_state(owner: str, random_state: object) -> np.random.RandomState:
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


def check_params(estimator: Any) -> torch.device:
    """The checks of the estimators' parameters at ``fit`` (``__init__`` only stores
    them, as scikit-learn wants); the device to train on.

    Raises:
        TypeError: a parameter of the wrong type.
        ValueError: a parameter out of range, or ``batch_size <= n_components``.
    """
    owner = type(estimator).__name__
    j = DEFAULT_COMPONENTS
    if estimator.n_components is not None:
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
    as_random_state(owner, estimator.random_state)
    if estimator.gamma is not None:
        check_positive(owner, "gamma", estimator.gamma)
    return check_torch_device(owner, "device", estimator.device)


def default_components(rows: int) -> int:
    """``J`` for ``n_components=None`` on ``rows`` training rows:
    ``min(DEFAULT_COMPONENTS, rows // 3)``, at least 1."""
    return max(1, min(DEFAULT_COMPONENTS, rows // 3))


def _train_sizes(
    owner: str, requested: int | None, rows: int, width: int | None
) -> tuple[int, int]:
    """``(J, batch)`` that DI trains with on ``rows`` rows: ``J`` is ``width`` (``None``:
    ``min(DEFAULT_COMPONENTS, rows // 3)``); the batch is ``batch_size``
    (default ``max(1000, 2 J)``) capped at the rows; where that cap leaves a batch not
    larger than ``J`` (or, by default, below ``2 J``), ``J`` is lowered to half the batch,
    with a warning naming both values."""
    if width is None:
        width = default_components(rows)
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


class DIFeatures(ClassNamePrefixFeaturesOutMixin, TransformerMixin, BaseEstimator):
    """Kernel features learned with the Discriminant Information criterion.

    Args:
        n_components: number of features ``J`` (Nyström: landmarks, at most the number
            of training rows, as scikit-learn's ``Nystroem``); ``None``:
            ``min(400, rows // 3)``. DI needs batches well
            above ``J``: where the training rows cap the batch below ``2 J`` (below
            ``J + 1`` with an explicit ``batch_size``), ``fit`` lowers ``J`` to half the
            batch and warns with both values (``n_components_``, ``batch_size_``).
        map: ``"nystrom"`` (learnable landmarks) or ``"fourier"`` (learnable random
            Fourier frequencies and phases).
        kernel: a kernel name of :func:`kernel_layers.available_kernels`.
        gamma: kernel parameter; ``None`` uses ``1 / (n_features * X.var())``.
        max_epochs: at most this many passes of Adam over the training data (``0``: the
            untrained map); the DI paper's rule (see the module) usually stops earlier.
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
        lr_decay_epochs_ (list[int]): epochs after which the learning rate was divided
            by 10.
        feature_names_in_ (ndarray): column names of ``X`` when it has string names
            (a pandas DataFrame).

    ``get_feature_names_out()`` names the features ``difeatures0, difeatures1, ...``, so
    ``set_output(transform="pandas")`` works.
    """

    def __init__(
        self,
        n_components: int | None = None,
        *,
        map: str = "nystrom",
        kernel: str = "gaussian",
        gamma: float | None = None,
        max_epochs: int = 10,
        batch_size: int | None = None,
        lr: float = 3e-3,
        rho: float = DEFAULT_RHO,
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
        self.random_state = random_state
        self.device = device

    def fit(self, X: Any, y: Any) -> DIFeatures:
        """Learn the map on ``X [n_samples, n_features]`` with labels ``y [n_samples]``.

        Raises:
            TypeError, ValueError: a parameter of the wrong type or out of range (named),
                ``batch_size <= n_components``, or a ``device`` this machine lacks.
        """
        device = check_params(self)
        owner = type(self).__name__
        X, y = validate_data(self, X, y, dtype=np.float64)
        check_classification_targets(y)
        encoder = LabelEncoder().fit(y)
        self.classes_ = encoder.classes_
        codes = torch.as_tensor(encoder.transform(y), dtype=torch.long)
        seed = int(as_random_state(owner, self.random_state).randint(2**31 - 1))
        generator = torch.Generator().manual_seed(seed)
        x = torch.tensor(X, dtype=torch.float64)  # a copy: X may be read-only
        gamma = self.gamma if self.gamma is not None else _safe_gamma(X)
        trains = self.max_epochs > 0 and len(self.classes_) > 1
        if trains:
            width, batch = _train_sizes(owner, self.batch_size, len(x), self.n_components)
        else:  # the untrained map: as many landmarks as rows at most (as Nystroem)
            width, batch = self.n_components or default_components(len(x)), 0
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
        self.lr_decay_epochs_: list[int] = []
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
        assert callable(train)
        loop = _EpochLoop(optimizer)
        decay = PlateauDecay(patience=PATIENCE, verbose=False)
        stop = DISaturationStopping()
        for epoch in range(self.max_epochs):
            loop.current_epoch = epoch
            stop.on_train_epoch_start(loop, None)  # a stand-in for the Trainer
            order = torch.randperm(len(x), generator=gen).to(x.device)
            total, rows = 0.0, 0
            for start in range(0, len(x) - batch + 1, batch):
                index = order[start : start + batch]
                di = train(x[index], y[index], rho=self.rho, num_classes=classes)
                optimizer.zero_grad()
                (-di).backward()
                optimizer.step()
                total += float(di.detach()) * len(index)
                rows += len(index)
            self.di_history_.append(total / max(rows, 1))
            loop.callback_metrics = {"train/di_epoch": self.di_history_[-1]}
            decay.on_train_epoch_end(loop, None)  # a stand-in for the Trainer
            stop.on_train_epoch_end(loop, None)  # a stand-in for the Trainer
            if loop.should_stop:
                break
        self.lr_decay_epochs_ = list(decay.decay_epochs)

    def transform(self, X: Any) -> np.ndarray:
        """The learned features ``[n_samples, n_components_]`` (float64)."""
        check_is_fitted(self, "layer_")
        X = validate_data(self, X, dtype=np.float64, reset=False)
        device = next(self.layer_.parameters()).device
        with torch.no_grad():
            features = self.layer_(torch.tensor(X, dtype=torch.float64, device=device))
        return features.cpu().numpy()

    @property
    def _n_features_out(self) -> int:
        """Number of output features (read by ``get_feature_names_out``)."""
        return int(self.n_components_)

    def __sklearn_tags__(self) -> Any:
        tags = super().__sklearn_tags__()
        tags.target_tags.required = True  # supervised: fit needs y
        return tags


class _EpochLoop:
    """What :class:`PlateauDecay` and :class:`DISaturationStopping` read of a Lightning
    ``Trainer``, for the estimators' plain loop (one process, always fitting)."""

    def __init__(self, optimizer: torch.optim.Optimizer) -> None:
        self.optimizers = [optimizer]
        self.lr_scheduler_configs: list[Any] = []
        self.state = _FITTING
        self.sanity_checking = False
        self.fast_dev_run = False
        self.callback_metrics: dict[str, float] = {}
        self.current_epoch = 0
        self.should_stop = False
        self.strategy = self

    @staticmethod
    def reduce_boolean_decision(decision: bool, all: bool = True) -> bool:
        """One process: its own decision."""
        return decision


class _Fitting:
    fn = TrainerFn.FITTING


_FITTING = _Fitting()


def _safe_gamma(X: np.ndarray) -> float:
    """The variance heuristic, or 1 for constant data (which it refuses)."""
    try:
        return gamma_heuristic(X)
    except ValueError:
        return 1.0
