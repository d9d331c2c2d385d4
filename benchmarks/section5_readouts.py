"""The read-outs of ``reproduce.py``, identical for every method of the grid: the
closed-form ridge head (accuracy and the ridge MSE of the one-hot targets) and a
``LinearSVC`` on standardised features, on the final features of the whole training set."""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor, nn

from kernel_layers.training.heads import DEFAULT_HEAD_RHO, RidgeHead

#: Rows per batch when extracting features for the read-outs.
EVAL_BATCH = 4096


@torch.no_grad()
def features_of(layer: nn.Module, x: Tensor) -> Tensor:
    """``layer(x)`` in batches of :data:`EVAL_BATCH` rows, float32, ``[N, J]``."""
    was = layer.training
    layer.eval()
    try:
        return torch.cat([layer(chunk).float() for chunk in x.split(EVAL_BATCH)])
    finally:
        layer.train(was)


def accuracy(scores: Tensor, y: Tensor) -> float:
    """The fraction of rows whose highest score (``scores [N, L]``) is their label ``y [N]``."""
    return float((scores.argmax(1) == y).double().mean())


def stratified_subset(y: np.ndarray, n: int, seed: int) -> np.ndarray:
    """Indices of ``n`` rows drawn per class in proportion (all rows if ``n >= len(y)``)."""
    if n >= len(y):
        return np.arange(len(y))
    from sklearn.model_selection import train_test_split

    idx, _ = train_test_split(np.arange(len(y)), train_size=n, stratify=y, random_state=seed)
    return np.sort(idx)


@dataclass
class Readouts:
    """Read-out scores of one feature map (accuracies in ``[0, 1]``)."""

    train_acc: float
    test_acc: float
    train_mse: float
    test_mse: float
    svm_train_acc: float
    svm_test_acc: float
    svm_c: float = math.nan


def choose_svm_c(
    x: np.ndarray, y: np.ndarray, cs: Sequence[float], seed: int, *, scale: bool = True
) -> float:
    """``C`` of a ``LinearSVC`` (on standardised features with ``scale``): the one value
    of ``cs``, or the best of several by stratified 3-fold cross-validated accuracy."""
    if len(cs) == 1:
        return float(cs[0])
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.model_selection import GridSearchCV, StratifiedKFold
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler
    from sklearn.svm import LinearSVC

    svm = LinearSVC(random_state=seed)
    model = make_pipeline(StandardScaler(), svm) if scale else make_pipeline(svm)
    search = GridSearchCV(
        model,
        {"linearsvc__C": [float(c) for c in cs]},
        cv=StratifiedKFold(3, shuffle=True, random_state=seed),
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        search.fit(x, y)
    return float(search.best_params_["linearsvc__C"])


def evaluate(
    f_train: Tensor,
    y_train: Tensor,
    f_test: Tensor,
    y_test: Tensor,
    num_classes: int,
    *,
    head_rho: float = DEFAULT_HEAD_RHO,
    svm: bool = True,
    svm_max_samples: int | None = None,
    svm_c: float | Sequence[float] = 1.0,
    seed: int = 0,
) -> Readouts:
    """Ridge head (accuracy + one-hot MSE) and LinearSVC on fixed features.

    Args:
        f_train (Tensor[N, J]), f_test (Tensor[M, J]): features.
        y_train (Tensor[N]), y_test (Tensor[M]): integer labels.
        num_classes: ``L``.
        head_rho: ridge penalty of the closed-form head.
        svm: also fit the linear SVM (else its accuracies are NaN).
        svm_max_samples: fit the SVM on at most this many stratified training rows.
        svm_c: the SVM's ``C``, or candidates chosen among by 3-fold cross-validation
            on the SVM's training rows (:func:`choose_svm_c`).
        seed: seed of the SVM subsample and solver.
    """
    head = RidgeHead(f_train.shape[1], num_classes, rho=head_rho)
    for fb, yb in zip(f_train.split(EVAL_BATCH), y_train.split(EVAL_BATCH), strict=True):
        head.update(fb, yb)
    head.fit()
    out: dict[str, float] = {}
    for split, f, y in (("train", f_train, y_train), ("test", f_test, y_test)):
        scores = head(f)
        onehot = nn.functional.one_hot(y, num_classes).to(scores.dtype)
        out[f"{split}_acc"] = accuracy(scores, y)
        out[f"{split}_mse"] = float((scores - onehot).square().sum(1).mean())
    out["svm_train_acc"] = out["svm_test_acc"] = math.nan
    if svm:
        from sklearn.exceptions import ConvergenceWarning
        from sklearn.pipeline import make_pipeline
        from sklearn.preprocessing import StandardScaler
        from sklearn.svm import LinearSVC

        xtr, ytr = f_train.numpy(), y_train.numpy()
        idx = stratified_subset(ytr, svm_max_samples or len(ytr), seed)
        cs = [svm_c] if isinstance(svm_c, int | float) else list(svm_c)
        out["svm_c"] = choose_svm_c(xtr[idx], ytr[idx], cs, seed)
        clf = make_pipeline(StandardScaler(), LinearSVC(C=out["svm_c"], random_state=seed))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            clf.fit(xtr[idx], ytr[idx])
        out["svm_train_acc"] = float((clf.predict(xtr) == ytr).mean())
        out["svm_test_acc"] = float((clf.predict(f_test.numpy()) == y_test.numpy()).mean())
    return Readouts(**out)
