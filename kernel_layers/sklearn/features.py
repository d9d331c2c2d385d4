"""The scikit-learn transformer :class:`DIFeatures` and what both estimators share: the
parameter checks and the held-out score of a map (the ridge read-out's accuracy on the
held-out rows). The training loop is :func:`kernel_layers.sklearn.training.train_map`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from numbers import Integral
from typing import Any, NamedTuple

import numpy as np
import torch
from sklearn.base import BaseEstimator, ClassNamePrefixFeaturesOutMixin, TransformerMixin
from sklearn.preprocessing import LabelEncoder
from sklearn.utils import check_random_state
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_is_fitted, validate_data

from kernel_layers._validation import (
    check_choice,
    check_fraction,
    check_int,
    check_positive,
    check_torch_device,
)
from kernel_layers.kernels.registry import get_kernel
from kernel_layers.layers.base import KernelFeatureMap
from kernel_layers.layers.fourier import FourierLayer
from kernel_layers.layers.nystrom import NystromLayer
from kernel_layers.selection.rho import rho_for_epoch, rho_from_penalty
from kernel_layers.sklearn.inputs import check_rows, default_gamma, map_rows
from kernel_layers.sklearn.readout import (
    fit_loo_ridge,
    fit_ridge,
    held_out_alpha,
    scale_of,
    signed_targets,
)
from kernel_layers.sklearn.training import (
    DEFAULT_BATCH,
    DEFAULT_LR,
    DEFAULT_MAX_EPOCHS,
    TrainResult,
    data_extent,
    default_components,
    split_rows,
    train_map,
    train_sizes,
)

__all__ = [
    "MAPS",
    "SCORE_ROWS",
    "DIFeatures",
    "LearnedMap",
    "as_random_state",
    "build_map",
    "check_params",
    "learn_map",
]

#: Kernel maps :class:`DIFeatures` can learn.
MAPS = ("nystrom", "fourier")
#: The held-out score fits its read-out on at most this many training rows (a fixed
#: random subset), so that scoring an epoch costs at most a fraction of training it.
SCORE_ROWS = 20000


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
        ValueError: a parameter out of range, or ``batch_size <= n_components`` (when
            ``n_components`` is given).
    """
    owner = type(estimator).__name__
    j = None
    if estimator.n_components is not None:
        j = check_int(owner, "n_components", estimator.n_components)
    check_choice(owner, "map", estimator.map, MAPS)
    get_kernel(estimator.kernel, owner=owner, spectral=estimator.map == "fourier")
    check_int(owner, "max_epochs", estimator.max_epochs, minimum=0)
    if estimator.batch_size is not None:
        batch = check_int(owner, "batch_size", estimator.batch_size, minimum=2)
        # the default J follows the rows (train_sizes fits it to the batch)
        if j is not None and batch <= j:
            raise ValueError(
                f"{owner}: argument 'batch_size' must be larger than n_components={j} "
                f"(DI saturates when batch_size <= n_components), got {batch}; the paper "
                f"uses max(1000, 2 n_components) = {max(DEFAULT_BATCH, 2 * j)}"
            )
    check_positive(owner, "lr", estimator.lr)
    if estimator.rho is not None:
        check_positive(owner, "rho", estimator.rho)
    if estimator.validation_fraction is not None:
        check_fraction(owner, "validation_fraction", estimator.validation_fraction)
    check_int(owner, "n_iter_no_change", estimator.n_iter_no_change, minimum=1)
    as_random_state(owner, estimator.random_state)
    if estimator.gamma is not None:
        check_positive(owner, "gamma", estimator.gamma)
    return check_torch_device(owner, "device", estimator.device)


def build_map(
    kind: str, kernel: str, gamma: float, x: torch.Tensor, width: int, seed: int
) -> KernelFeatureMap:
    """The initial map of ``width`` features for the rows ``x [N, D]`` (float64):
    ``"nystrom"`` with landmarks drawn from ``x`` (at most ``N``), or ``"fourier"``."""
    if kind == "nystrom":
        return NystromLayer.from_data(
            x, min(width, len(x)), kernel=kernel, gamma=gamma, seed=seed, dtype=torch.float64
        )
    return FourierLayer(x.shape[1], width, kernel=kernel, gamma=gamma, seed=seed, dtype=x.dtype)


class HeldOutScore(ABC):
    """The held-out score of a map, called with it: a ridge read-out fitted on the map's
    features of ``x_fit [N, D]`` (targets ``y_fit``), scored on ``x_held [M, D]``
    (targets ``y_held``). The read-out's penalty is chosen once, by closed-form
    leave-one-out on the first map scored (the untrained one, :meth:`loo_alpha`), as the
    estimators choose it for an untrained map; later maps keep it, relative to their
    features' scale (:attr:`relative_alpha`, :meth:`penalty`)."""

    def __init__(
        self, x_fit: torch.Tensor, y_fit: np.ndarray, x_held: torch.Tensor, y_held: np.ndarray
    ) -> None:
        self.x_fit, self.y_fit, self.x_held, self.y_held = x_fit, y_fit, x_held, y_held
        #: The penalty every map was scored with, in units of its features' scale.
        self.relative_alpha: float | None = None

    @abstractmethod
    def loo_alpha(self, features: np.ndarray) -> float:
        """The penalty closed-form leave-one-out chooses for ``features [N, J]`` of the
        rows ``x_fit`` (on the unscaled ``Phi^T Phi``)."""

    @abstractmethod
    def __call__(self, layer: KernelFeatureMap) -> tuple[float, ...]:
        """``layer``'s held-out score, higher is better (compared as a tuple)."""

    def penalty(self, features: np.ndarray) -> float:
        """The read-out's penalty for ``features [N, J]`` of the rows ``x_fit``, in units
        of their :func:`~kernel_layers.sklearn.readout.scale_of` (chosen at the first
        call)."""
        if self.relative_alpha is None:
            self.relative_alpha = self.loo_alpha(features) / scale_of(features)
        return self.relative_alpha


class HeldOutAccuracy(HeldOutScore):
    """:class:`HeldOutScore` of a classifying map (labels ``y_fit [N]``, ``y_held [M]``):
    ``(accuracy, -squared error)`` of the read-out's scores against ``{-1, +1}`` targets;
    the error breaks ties of accuracy, which moves in steps of ``1 / M`` (one Cholesky
    solve per score)."""

    def __init__(
        self, x_fit: torch.Tensor, y_fit: np.ndarray, x_held: torch.Tensor, y_held: np.ndarray
    ) -> None:
        super().__init__(x_fit, y_fit, x_held, y_held)
        self.classes = int(max(y_fit.max(), y_held.max())) + 1
        held = torch.as_tensor(y_held, dtype=torch.long)
        self.targets = signed_targets(held, self.classes).numpy()  # [M, L]

    def loo_alpha(self, features: np.ndarray) -> float:
        return fit_loo_ridge(features, self.y_fit, self.classes, calibrate=False).alpha

    def __call__(self, layer: KernelFeatureMap) -> tuple[float, float]:
        features = layer(self.x_fit).cpu().numpy()
        readout = fit_ridge(features, self.y_fit, self.classes, self.penalty(features))
        scores = readout.scores(layer(self.x_held).cpu().numpy())
        accuracy = float((scores.argmax(1) == self.y_held).mean())
        return accuracy, -float(((scores - self.targets) ** 2).mean())


class LearnedMap(NamedTuple):
    """What :func:`learn_map` hands back besides the estimator's fitted attributes."""

    #: The training rows as a float64 tensor on the estimator's device ``[N, D]``.
    x: torch.Tensor
    #: Indices of the rows the map was trained on, and of the held-out rows (empty
    #: without training or held-out rows).
    fit: np.ndarray
    held: np.ndarray
    #: The held-out score ``score_of`` built, which scored the epochs (``None``: no
    #: training or no held-out rows).
    score: HeldOutScore | None = None

    def readout_alpha(
        self, features: np.ndarray, targets: np.ndarray, best_epoch: int
    ) -> float | None:
        """The read-out's penalty (on the unscaled ``Phi^T Phi``) for the map's features
        of every row ``features [N, J]`` and their target matrix ``targets [N, L]``:
        ``None`` (leave-one-out on every row chooses it) for the untrained map
        (``best_epoch`` 0) or without held-out rows; for a trained map, the choice of
        the rows it never saw (:func:`~kernel_layers.sklearn.readout.held_out_alpha`),
        where it beats the penalty the epochs were scored with."""
        if best_epoch <= 0 or not len(self.held) or self.score is None:
            return None
        fit, held = self.fit, self.held
        relative = held_out_alpha(
            features[fit],
            targets[fit],
            features[held],
            targets[held],
            baseline=self.score.relative_alpha,
        )
        return relative * scale_of(features)


def _default_rho(
    layer: KernelFeatureMap,
    x: torch.Tensor,
    targets: np.ndarray,
    batches: int,
    untrained_penalty: Callable[[np.ndarray, np.ndarray], float] | None,
) -> float:
    """DI's ridge parameter when none is given: from the ``batches`` of an epoch, as
    ``KernelClassifier(rho=None)``; or ``untrained_penalty`` of the untrained map's
    features of ``x [N, D]`` over them, as ``KernelRegressor(rho=None)``."""
    if untrained_penalty is None:
        return rho_for_epoch(batches)
    with torch.no_grad():
        features = layer(x).cpu().numpy()
    return rho_from_penalty(untrained_penalty(features, targets), batches)


def learn_map(
    estimator: Any,
    X: np.ndarray,
    targets: np.ndarray,
    device: torch.device,
    trains: bool,
    num_classes: int | None,
    score_of: Callable[..., HeldOutScore],
    untrained_penalty: Callable[[np.ndarray, np.ndarray], float] | None = None,
    owner: str | None = None,
) -> LearnedMap:
    """What both estimators' ``fit`` share: build the map on ``X [N, D]`` and (if
    ``trains``) train it by :func:`~kernel_layers.sklearn.training.train_map` against
    ``targets`` (labels ``[N]`` with ``num_classes``, or a float matrix ``[N, L]`` with
    ``None``), holding out ``estimator.validation_fraction`` of the rows (stratified by
    labels) scored by ``score_of(x_fit, targets_fit, x_held, targets_held)``. With
    ``estimator.rho`` ``None``, DI's ridge parameter is
    :func:`~kernel_layers.selection.rho.rho_for_epoch`'s, or, given
    ``untrained_penalty(features [N, J], targets [N, ...])``, the read-out penalty it
    returns for the untrained map's features of the rows trained on, shared out over the
    batches of an epoch by :func:`~kernel_layers.selection.rho.rho_from_penalty` (as
    ``KernelRegressor(rho=None)`` chooses it). Sets the
    fitted attributes (``layer_``, ``n_components_``, ``batch_size_``, ``rho_``, ``di_history_``,
    ``validation_scores_``, ``best_epoch_``, ``lr_decay_epochs_``) and returns ``X`` as a
    float64 tensor on ``device`` with the indices of the rows trained on and held out
    (:class:`LearnedMap`). Messages name ``owner`` (default: the estimator's class; an
    estimator that fits a :class:`DIFeatures` inside passes its own name)."""
    owner = owner or type(estimator).__name__
    seed = int(as_random_state(owner, estimator.random_state).randint(2**31 - 1))
    x = torch.tensor(X, dtype=torch.float64, device=device)  # a copy: X may be read-only
    check_rows(owner, estimator.kernel, x)
    gamma = estimator.gamma if estimator.gamma is not None else default_gamma(X, estimator.kernel)
    fraction = estimator.validation_fraction if trains else None
    labels = targets if num_classes is not None else None
    fit, held = split_rows(len(x), fraction, seed, labels)
    width = estimator.n_components or default_components(len(x))
    batch = 0  # the untrained map: as many landmarks as rows at most (as Nystroem)
    if trains:  # a batch from the rows trained on, and J below it
        given = estimator.n_components is not None  # a J the user chose: say it is lowered
        width, batch = train_sizes(owner, estimator.batch_size, len(fit), width, warn=given)
    layer = build_map(estimator.map, estimator.kernel, gamma, x[fit], width, seed).to(device)
    result = TrainResult()
    rho = estimator.rho
    score = None
    if trains:
        if rho is None:
            rho = _default_rho(layer, x[fit], targets[fit], len(fit) // batch, untrained_penalty)
        if len(held):
            scored = fit
            if len(fit) > SCORE_ROWS:
                scored = np.sort(np.random.RandomState(seed).choice(fit, SCORE_ROWS, False))
            score = score_of(x[scored], targets[scored], x[held], targets[held])
        result = train_map(
            layer,
            x[fit],
            torch.as_tensor(targets[fit], device=device),
            num_classes=num_classes,
            batch=batch,
            max_epochs=estimator.max_epochs,
            lr=estimator.lr,
            rho=rho,
            generator=torch.Generator().manual_seed(seed),
            score=score,
            n_iter_no_change=estimator.n_iter_no_change,
            unit=data_extent(X),
        )
    estimator.layer_ = layer.eval()
    estimator.n_components_ = layer.out_features
    estimator.batch_size_ = batch
    estimator.rho_ = rho if trains else None
    estimator.di_history_ = result.di_history
    estimator.validation_scores_ = [s[0] for s in result.score_history]
    estimator.best_epoch_ = result.best_epoch
    estimator.lr_decay_epochs_ = result.lr_decay_epochs
    return LearnedMap(x, fit, held, score)


class DIFeatures(ClassNamePrefixFeaturesOutMixin, TransformerMixin, BaseEstimator):
    """Kernel features learned with the Discriminant Information criterion.

    Args:
        n_components: number of features ``J`` (Nyström: landmarks, at most the number
            of training rows, as scikit-learn's ``Nystroem``); ``None``:
            ``min(400, rows // 3)``. DI needs batches well
            above ``J``: where the training rows cap the batch below ``2 J`` (below
            ``J + 1`` with an explicit ``batch_size``), ``fit`` lowers ``J`` to half the
            batch (``n_components_``, ``batch_size_``), and warns with both values
            when ``n_components`` was set.
        map: ``"nystrom"`` (learnable landmarks) or ``"fourier"`` (learnable random
            Fourier frequencies and phases).
        kernel: a kernel name of :func:`kernel_layers.available_kernels`.
        gamma: kernel parameter; ``None`` uses ``1 / (n_features * X.var())``, or
            ``1 / (n_features * X.std())`` for the kernels whose ``gamma`` multiplies
            distances (``"laplacian"``, ``"chi2"``; the skewed kernels take the
            statistic of ``log(X + c)``): ``X`` in any unit gives the same kernel.
        max_epochs: at most this many passes of Adam over the training data (``0``: the
            untrained map); the DI paper's rule (see the module) usually stops earlier.
        batch_size: rows per DI step, larger than ``n_components``; ``None``:
            ``max(1000, 2 J)``; capped at the training rows.
        lr: Adam's learning rate for rows of extent 1 (min-max scaled): the steps of
            landmarks (frequencies) are multiplied (divided) by the range of ``X``'s
            values (:func:`~kernel_layers.sklearn.training.adam_groups`), so that ``X``
            in any unit trains the same map in that unit.
        rho: DI's ridge parameter; ``None``: chosen from the batches of an epoch by
            :func:`~kernel_layers.selection.rho.rho_for_epoch` (``0.1`` below 8, the DI
            paper's ``1e-4`` from 8 on), as ``KernelClassifier(rho=None)`` chooses it.
        validation_fraction: share of the rows held out (stratified) to score the map
            after each epoch: the accuracy of :class:`~kernel_layers.sklearn.DIClassifier`'s
            ridge read-out fitted on the other rows (on at most ``SCORE_ROWS`` of them).
            The map kept is the one of the best score, the untrained map included, and
            training stops after ``n_iter_no_change`` epochs without a better one. The
            map is trained on the other rows. ``None``: no rows held out, the last
            epoch's map is kept.
        n_iter_no_change: see ``validation_fraction``.
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
        rho_ (float | None): DI's ridge parameter used (``None``: no training).
        di_history_ (list[float]): mean training DI of each epoch.
        validation_scores_ (list[float]): held-out accuracy before training and after
            each epoch (empty without held-out rows).
        best_epoch_ (int): the epoch whose map was kept (``0``: the untrained map).
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

    def fit(self, X: Any, y: Any) -> DIFeatures:
        """Learn the map on ``X [n_samples, n_features]`` with labels ``y [n_samples]``.

        Raises:
            TypeError, ValueError: a parameter of the wrong type or out of range (named),
                ``batch_size <= n_components``, or a ``device`` this machine lacks.
        """
        self._fit(X, y, type(self).__name__)
        return self

    def _fit(self, X: Any, y: Any, owner: str, *, y_checked: bool = False) -> LearnedMap:
        """:meth:`fit`, its messages naming ``owner`` (``DIClassifier`` fits one inside,
        ``y_checked``: its labels already passed ``check_classification_targets``, whose
        warnings are not given twice); what :func:`learn_map` hands back."""
        device = check_params(self)
        X, y = validate_data(self, X, y, dtype=np.float64)
        if not y_checked:
            check_classification_targets(y)
        encoder = LabelEncoder().fit(y)
        self.classes_ = encoder.classes_
        codes = encoder.transform(y)
        trains = self.max_epochs > 0 and len(self.classes_) > 1
        return learn_map(
            self, X, codes, device, trains, len(self.classes_), HeldOutAccuracy, owner=owner
        )

    def transform(self, X: Any) -> np.ndarray:
        """The learned features ``[n_samples, n_components_]`` (float64)."""
        check_is_fitted(self, "layer_")
        X = validate_data(self, X, dtype=np.float64, reset=False)
        return map_rows(type(self).__name__, self.layer_, X)

    @property
    def _n_features_out(self) -> int:
        """Number of output features (read by ``get_feature_names_out``)."""
        return int(self.n_components_)

    def __sklearn_tags__(self) -> Any:
        tags = super().__sklearn_tags__()
        tags.target_tags.required = True  # supervised: fit needs y
        return tags
