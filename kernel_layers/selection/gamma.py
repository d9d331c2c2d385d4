"""Choosing the Gaussian kernel's ``gamma`` by the DI paper's cross-validated grid search.

Gamma follows scikit-learn's convention, ``k(x, y) = exp(-gamma ||x - y||^2)``.
:func:`select_gamma` is the protocol of the DI paper (section 4 of the design): a
3-fold cross-validated grid search, scoring each ``gamma`` by the accuracy of a linear
SVM trained on *standard* (untrained, random-landmark) Nystrom features with 1000
landmarks. The default grid is :func:`~kernel_layers.selection.heuristic.default_gammas`,
the heuristic ``1 / (D * Var(X))`` (:func:`~kernel_layers.selection.heuristic.gamma_heuristic`,
re-exported here with the grid constants) times ``2^-6, 2^-4, ..., 2^6``.

The protocol min-max scales features to ``[0, 1]`` (fitted on the training set)
before any of this; these helpers take the data as given.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from numbers import Integral
from typing import Any

import numpy as np
import torch
from joblib import Parallel, delayed
from sklearn.base import clone
from sklearn.exceptions import ConvergenceWarning
from sklearn.linear_model import RidgeClassifier
from sklearn.model_selection import StratifiedKFold
from sklearn.svm import LinearSVC
from threadpoolctl import threadpool_limits
from torch import Tensor

from kernel_layers._validation import check_int, check_positive
from kernel_layers.layers.nystrom import NystromLayer
from kernel_layers.selection.heuristic import (
    GRID_BASE,
    GRID_EXPONENTS,
    _as_float64_matrix,
    _variance_default,
    default_gammas,
    gamma_heuristic,
)

__all__ = [
    "CLASSIFIERS",
    "DEFAULT_FOLDS",
    "DEFAULT_NUM_LANDMARKS",
    "GRID_BASE",
    "GRID_EXPONENTS",
    "GammaSearchResult",
    "default_gammas",
    "gamma_heuristic",
    "select_gamma",
]

#: Number of landmarks of the standard Nystrom features in the paper's search.
DEFAULT_NUM_LANDMARKS = 1000
#: Number of cross-validation folds in the paper's search.
DEFAULT_FOLDS = 3
#: Linear read-outs understood by :func:`select_gamma` (or pass an estimator).
CLASSIFIERS = ("linear_svc", "ridge")
#: Regularisation ``C`` of :class:`~sklearn.svm.LinearSVC` (scikit-learn's default).
LINEAR_SVC_C = 1.0
#: Iteration cap of :class:`~sklearn.svm.LinearSVC`: five times scikit-learn's default,
#: enough for the primal solver that ``dual="auto"`` picks when ``N > n``.
LINEAR_SVC_MAX_ITER = 5000
#: Regularisation ``alpha`` of :class:`~sklearn.linear_model.RidgeClassifier`.
RIDGE_ALPHA = 1.0
#: BLAS threads of NumPy/SciPy during the search (see :func:`select_gamma`).
READOUT_BLAS_THREADS = 1

_SEARCH = "select_gamma"


@dataclass(frozen=True)
class GammaSearchResult:
    """Outcome of :func:`select_gamma`.

    Attributes:
        best_gamma: the grid value with the highest mean cross-validated accuracy
            (the first one, in grid order, on ties).
        gammas: the grid, in the order searched.
        scores: mean held-out accuracy over the folds, one per ``gamma``.
        stds: standard deviation (``ddof=0``, as in scikit-learn's ``cv_results_``)
            of the held-out accuracy over the folds, one per ``gamma``.
    """

    best_gamma: float
    gammas: list[float]
    scores: list[float]
    stds: list[float]

    @property
    def best_index(self) -> int:
        """Position of :attr:`best_gamma` in :attr:`gammas`."""
        return int(np.argmax(self.scores))

    @property
    def best_score(self) -> float:
        """Mean cross-validated accuracy of :attr:`best_gamma`."""
        return self.scores[self.best_index]


def _check_gammas(owner: str, gammas: object) -> list[float]:
    """A non-empty sequence of finite numbers ``> 0`` as a list of floats, else raise."""
    if isinstance(gammas, Tensor):
        gammas = gammas.detach().cpu().reshape(-1).tolist()
    elif isinstance(gammas, np.ndarray):
        gammas = gammas.reshape(-1).tolist()
    if isinstance(gammas, str) or not isinstance(gammas, Sequence):
        raise TypeError(
            f"{owner}: argument 'gammas' must be a sequence of numbers > 0, "
            f"got {type(gammas).__name__}"
        )
    if len(gammas) == 0:
        raise ValueError(
            f"{owner}: argument 'gammas' must be a non-empty sequence of numbers > 0, got []"
        )
    return [check_positive(owner, f"gammas[{i}]", g) for i, g in enumerate(gammas)]


def _check_labels(owner: str, y: object, num_rows: int) -> tuple[np.ndarray, np.ndarray]:
    """Class labels ``y [N]`` as ``(classes, codes)`` with ``codes`` in ``0..C-1``, else raise."""
    labels = y.detach().cpu().numpy() if isinstance(y, Tensor) else np.asarray(y)
    if labels.ndim != 1 or labels.shape[0] != num_rows:
        raise ValueError(
            f"{owner}: argument 'y' must have shape [N] = [{num_rows}] (one label per row "
            f"of x), got {list(labels.shape)}"
        )
    integral = labels.dtype.kind != "f" or bool(
        np.all(np.isfinite(labels) & (labels == np.round(labels)))
    )
    if labels.dtype.kind == "c" or not integral:
        raise ValueError(
            f"{owner}: argument 'y' must hold class labels (integers or strings), "
            f"got non-integer values of dtype {labels.dtype}"
        )
    classes, codes = np.unique(labels, return_inverse=True)
    if classes.shape[0] < 2:
        raise ValueError(
            f"{owner}: argument 'y' must hold at least 2 classes, got {classes.shape[0]}"
        )
    return classes, codes.reshape(-1)


def _check_classifier(owner: str, classifier: object) -> object:
    """A class name of :data:`CLASSIFIERS` or an estimator with ``fit`` and ``score``."""
    if isinstance(classifier, str):
        if classifier not in CLASSIFIERS:
            raise ValueError(
                f"{owner}: argument 'classifier' must be one of {list(CLASSIFIERS)} or a "
                f"scikit-learn classifier, got {classifier!r}"
            )
        return classifier
    if not (hasattr(classifier, "fit") and hasattr(classifier, "score")):
        raise TypeError(
            f"{owner}: argument 'classifier' must be one of {list(CLASSIFIERS)} or a "
            f"scikit-learn classifier, got {type(classifier).__name__}"
        )
    return classifier


def _check_n_jobs(owner: str, n_jobs: object) -> int | None:
    """``None`` or a non-zero integer (joblib's convention), else raise."""
    if n_jobs is None:
        return None
    if isinstance(n_jobs, bool) or not isinstance(n_jobs, Integral):
        raise TypeError(
            f"{owner}: argument 'n_jobs' must be None or a non-zero integer, got {n_jobs!r}"
        )
    if n_jobs == 0:
        raise ValueError(
            f"{owner}: argument 'n_jobs' must be None or a non-zero integer, got {n_jobs!r}"
        )
    return int(n_jobs)


def _make_classifier(classifier: object, seed: int) -> Any:
    """A fresh, unfitted read-out."""
    if classifier == "linear_svc":
        return LinearSVC(
            C=LINEAR_SVC_C, dual="auto", max_iter=LINEAR_SVC_MAX_ITER, random_state=seed
        )
    if classifier == "ridge":
        return RidgeClassifier(alpha=RIDGE_ALPHA)
    return clone(classifier)


def _stratified_subsample(
    codes: np.ndarray, max_samples: int, min_per_class: int, rng: np.random.Generator
) -> np.ndarray:
    """Sorted row indices of a stratified random subsample of about ``max_samples`` rows.

    Each class gets its proportional share (largest-remainder rounding), but at least
    ``min(count, min_per_class)`` rows, so that no class drops below the number of
    folds; the total can therefore slightly exceed ``max_samples``.

    Args:
        codes (ndarray[N]): class codes in ``0..C-1``.
        max_samples: target subsample size ``< N``.
        min_per_class: least number of rows kept per class (when it has them).
        rng: the random generator.

    Returns:
        ndarray[M]: increasing row indices.
    """
    counts = np.bincount(codes)
    quota = counts * (max_samples / counts.sum())
    take = np.floor(quota).astype(np.int64)
    leftover = max_samples - int(take.sum())
    order = np.argsort(-(quota - take), kind="stable")
    take[order[:leftover]] += 1
    take = np.maximum(take, np.minimum(counts, min_per_class))
    picked = [
        rng.choice(np.flatnonzero(codes == c), size=int(k), replace=False)
        for c, k in enumerate(take)
    ]
    return np.sort(np.concatenate(picked))


def _fold_score(
    x: Tensor,
    y: np.ndarray,
    train: np.ndarray,
    test: np.ndarray,
    gamma: float,
    num_landmarks: int,
    classifier: object,
    seed: int,
) -> float:
    """Held-out accuracy of a linear read-out on standard Nystrom features of one fold.

    Args:
        x (Tensor[M, D]): float64 data (all folds).
        y (ndarray[M]): labels.
        train (ndarray[M_train]): rows of the training fold (landmarks come from them only).
        test (ndarray[M_test]): rows of the held-out fold.
        gamma: Gaussian kernel parameter.
        num_landmarks: requested landmarks, capped at ``M_train``.
        classifier: a name of :data:`CLASSIFIERS` or an estimator to clone.
        seed: seed of the landmark draw and of the read-out.

    Returns:
        float: accuracy on the held-out fold.
    """
    train_t = torch.as_tensor(train, device=x.device)
    test_t = torch.as_tensor(test, device=x.device)
    x_train = x[train_t]
    with torch.no_grad():
        layer = NystromLayer.from_data(
            x_train,
            min(num_landmarks, len(train)),
            gamma=gamma,
            trainable=False,
            seed=seed,
        )
        f_train = layer(x_train).cpu().numpy()
        f_test = layer(x[test_t]).cpu().numpy()
    model = _make_classifier(classifier, seed)
    model.fit(f_train, y[train])
    return float(model.score(f_test, y[test]))


def select_gamma(
    x: Tensor | np.ndarray,
    y: Tensor | np.ndarray | Sequence[object],
    *,
    gammas: Sequence[float] | np.ndarray | Tensor | None = None,
    num_landmarks: int = DEFAULT_NUM_LANDMARKS,
    folds: int = DEFAULT_FOLDS,
    classifier: str | object = "linear_svc",
    seed: int = 0,
    max_samples: int | None = None,
    n_jobs: int | None = None,
) -> GammaSearchResult:
    """Pick the Gaussian ``gamma`` by the DI paper's cross-validated grid search.

    For every ``gamma`` of the grid and every fold of
    ``StratifiedKFold(folds, shuffle=True, random_state=seed)``: standard Nystrom
    features (``NystromLayer.from_data(x_train, min(num_landmarks, N_train),
    gamma=gamma, trainable=False)``, i.e. landmarks drawn at random from the
    *training fold only*) are computed in float64 under ``torch.no_grad()`` on the
    device of ``x``, a linear classifier is fitted on the training fold and scored
    (accuracy) on the held-out fold. The best ``gamma`` has the highest mean accuracy.
    Within a fold, every ``gamma`` uses the same landmarks (seeded by ``seed + fold``),
    so the comparison between grid values is not blurred by the landmark draw.

    ``classifier="linear_svc"`` is the paper's linear SVM,
    ``LinearSVC(C=1, dual="auto", max_iter=5000)``; its ``ConvergenceWarning`` is
    silenced during the search (extreme grid values give badly scaled features on
    which liblinear may stop early; their score is then a lower bound, and they are
    far from the best anyway). ``"ridge"`` is ``RidgeClassifier(alpha=1)``, faster
    and deterministic. Any scikit-learn classifier instance is also accepted (cloned
    for every fit). During the search NumPy/SciPy's BLAS runs on one thread
    (``threadpoolctl``; torch's kernels keep all theirs): interleaving torch's OpenMP
    pool with a multi-threaded OpenBLAS makes them spin against each other, while
    liblinear is single-threaded anyway. Use
    ``n_jobs`` to run (gamma, fold) fits in parallel instead.

    Args:
        x (Tensor[N, D] | ndarray[N, D]): training features (the protocol scales them
            to ``[0, 1]``).
        y (Tensor[N] | ndarray[N]): class labels (integers or strings).
        gammas: the grid; ``None`` gives :func:`default_gammas`, the heuristic
            ``1 / (D Var(X))`` of the full ``x`` times ``2^-6, 2^-4, ..., 2^6``.
        num_landmarks: landmarks of the Nystrom features (the paper: 1000), capped at
            the size of the training fold.
        folds: number of cross-validation folds (``>= 2``; the paper: 3). Every class
            must have at least ``folds`` rows.
        classifier: ``"linear_svc"``, ``"ridge"`` or a scikit-learn classifier.
        seed: seed of the subsample, the folds, the landmarks and the SVM.
        max_samples: if set and smaller than ``N``, search on a stratified random
            subsample of about ``max_samples`` rows (every class keeps at least
            ``folds`` rows), to keep the search fast on big data; ``>= 2 * folds``.
        n_jobs: parallel (gamma, fold) fits, joblib's convention (``None``: one;
            ``-1``: all cores); threads, so that ``x`` is not copied.

    Returns:
        GammaSearchResult: the best ``gamma`` and the mean / std accuracy per ``gamma``.

    Raises:
        TypeError: ``x`` is not numeric, or an argument has the wrong type.
        ValueError: wrong shapes, NaN/Inf, constant ``x`` (default grid), fewer than
            two classes or a class with fewer than ``folds`` rows, or an argument out
            of range.
    """
    owner = _SEARCH
    data = _as_float64_matrix(owner, "x", x)
    classes, codes = _check_labels(owner, y, data.shape[0])
    grid = _variance_default(owner, data) if gammas is None else _check_gammas(owner, gammas)
    num_landmarks = check_int(owner, "num_landmarks", num_landmarks)
    folds = check_int(owner, "folds", folds, minimum=2)
    classifier = _check_classifier(owner, classifier)
    seed = check_int(owner, "seed", seed, minimum=0)
    if max_samples is not None:
        max_samples = check_int(owner, "max_samples", max_samples, minimum=2 * folds)
    n_jobs = _check_n_jobs(owner, n_jobs)

    counts = np.bincount(codes)
    rarest = int(np.argmin(counts))
    if counts[rarest] < folds:
        raise ValueError(
            f"{owner}: argument 'y' must have at least folds={folds} rows in every class, "
            f"got {counts[rarest]} for class {classes[rarest].item()!r}"
        )

    if max_samples is not None and max_samples < data.shape[0]:
        rows = _stratified_subsample(codes, max_samples, folds, np.random.default_rng(seed))
        data = data[torch.as_tensor(rows, device=data.device)]
        codes = codes[rows]

    splitter = StratifiedKFold(folds, shuffle=True, random_state=seed)
    splits = list(splitter.split(np.zeros((codes.shape[0], 1)), codes))
    tasks = [
        delayed(_fold_score)(data, codes, train, test, gamma, num_landmarks, classifier, seed + k)
        for gamma in grid
        for k, (train, test) in enumerate(splits)
    ]
    # One filter for the whole search, set in this thread: warnings filters are global,
    # so the worker threads see it (entering ``catch_warnings`` per thread is not safe).
    # NumPy/SciPy's BLAS is held to one thread (torch's own BLAS and OpenMP pool are
    # untouched): alternating torch's OpenMP pool with a multi-threaded OpenBLAS makes
    # each spin against the other.
    with warnings.catch_warnings(), threadpool_limits(limits=READOUT_BLAS_THREADS, user_api="blas"):
        warnings.simplefilter("ignore", category=ConvergenceWarning)
        flat = Parallel(n_jobs=n_jobs, prefer="threads")(tasks)

    table = np.asarray(flat, dtype=np.float64).reshape(len(grid), folds)
    scores = table.mean(axis=1)
    best = int(np.argmax(scores))
    return GammaSearchResult(
        best_gamma=grid[best],
        gammas=grid,
        scores=scores.tolist(),
        stds=table.std(axis=1).tolist(),
    )
