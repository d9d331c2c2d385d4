"""Reproduce Section 5 of the DI paper: seven kernel maps, read out linearly, over ``J``.

Methods (``--methods``; ``ls`` and ``ce`` expand to both maps, ``incumbent`` is
scikit-learn's ``Nystroem`` + ``LinearSVC``, timed like the rest):

========================  ==========  ========================================
name                      map         what is trained
========================  ==========  ========================================
``standard-nystrom``      nystrom     nothing (random training rows as landmarks)
``kmeans-nystrom``        nystrom     nothing (k-means centres as landmarks)
``standard-fourier``      fourier     nothing (random Fourier features)
``di-nystrom``            nystrom     landmarks, by NysDI (eq. 10)
``di-fourier``            fourier     frequencies and phases, by DI (RFDI)
``ls-nystrom/-fourier``   both        the map and a ridge read-out, jointly (LS)
``ce-nystrom/-fourier``   both        the map and a softmax read-out, jointly (CE)
``sklearn-nystroem``      nystrom     scikit-learn ``Nystroem`` + ``LinearSVC``
========================  ==========  ========================================

Resumable: ``--append`` skips the ``(method, J, repeat)`` rows already in the CSV, so a
grid cut short continues with the same command. ``--replace`` (with ``--append``) runs the
grid's rows again, each new row taking the place of its old one as it finishes (a run
cut short keeps the old rows it had not reached).

Protocol (the DI paper's; benchmarks/README.md): features min-max scaled on train;
Gaussian kernel with ``gamma = kernel_layers.selection.gamma.gamma_heuristic(train)``
unless ``--gamma``; ``rho = 1e-4``; Adam at ``--lr`` (1e-3), multiplied by 0.1 by
:class:`kernel_layers.callbacks.PlateauDecay` when the epoch objective saturates
(``train/di_epoch`` for DI, ``train/loss_epoch`` for LS / CE) and stopped by
:class:`kernel_layers.callbacks.DISaturationStopping` when it fails to improve after a
decay, or at ``--max-epochs``; batch ``max(1000, 2J)`` capped at the training-set size;
landmarks start as a random subset of the training rows.

Read-outs, identical for every method, on the final features of the whole training set:

* the closed-form ridge head (:class:`kernel_layers.training.heads.RidgeHead`, one-hot targets):
  train / test accuracy, and train / test ridge MSE
  ``||Y - Phi W - 1 b^T||_F^2 / N`` (kernel ridge regression of the one-hot targets on the
  learned features, the paper's Figure 1 view);
* a linear SVM (scikit-learn ``LinearSVC`` on standardised features, as in the paper),
  fitted on at most ``--svm-max-samples`` stratified training rows (all rows by default).

LS and CE also report the accuracy of their own jointly trained read-out
(``readout_test_acc``).

Outputs under ``--out``: ``<dataset>.csv`` (one row per method, map, J, repeat) and two
figures, ``<dataset>_accuracy.png`` (test accuracy vs J per method, the paper's Figure 2)
and ``<dataset>_mse.png`` (ridge train / test MSE vs J, DI vs LS, its Figure 1), with
error bars = standard deviation over repeats. The script ends by printing two markdown
tables: ridge accuracy ``method x J`` and the long per-``(method, J)`` table of
``benchmarks/README.md`` (``--plot-only`` / ``--merge`` reprint them from CSVs).

Usage::

    python benchmarks/reproduce.py --dataset digits --dims 100 300 1000 --repeats 3
    python benchmarks/reproduce.py --dataset fashion-mnist \\
        --root /tmp/fmnist/x/usr/share/datasets/fashion-mnist --dims 100 300 \\
        --repeats 3 --max-epochs 10 --svm-max-samples 5000
    # parallel runs write their own CSVs (--tag), merged afterwards:
    python benchmarks/reproduce.py --dataset fashion-mnist --tag fashion-mnist \\
        --merge /tmp/a.csv /tmp/b.csv
    python benchmarks/reproduce.py --dataset mnist --root data --gamma 0.01   # network
    python benchmarks/reproduce.py --dataset digits --quick                   # smoke test
"""

from __future__ import annotations

import argparse
import csv
import logging
import math
import statistics
import time
import warnings
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from lightning.pytorch import Callback, Trainer, seed_everything
from torch import Tensor, nn

from kernel_layers import FourierLayer, KernelClassifier, NystromLayer
from kernel_layers.callbacks import DISaturationStopping, PlateauDecay
from kernel_layers.data import (
    ArrayDataModule,
    CovTypeDataModule,
    DigitsDataModule,
    FashionMNISTDataModule,
    LetterDataModule,
    MNISTDataModule,
)
from kernel_layers.selection.gamma import gamma_heuristic
from kernel_layers.training.heads import DEFAULT_HEAD_RHO, RidgeHead

#: Method name -> (map, objective or None for an untrained map, landmark init).
METHODS: dict[str, tuple[str, str | None, str]] = {
    "standard-nystrom": ("nystrom", None, "random"),
    "kmeans-nystrom": ("nystrom", None, "kmeans"),
    "standard-fourier": ("fourier", None, "random"),
    "di-nystrom": ("nystrom", "di", "random"),
    "di-fourier": ("fourier", "di", "random"),
    "ls-nystrom": ("nystrom", "ls", "random"),
    "ls-fourier": ("fourier", "ls", "random"),
    "ce-nystrom": ("nystrom", "ce", "random"),
    "ce-fourier": ("fourier", "ce", "random"),
    "sklearn-nystroem": ("sklearn", None, "random"),
}
#: Shorthands accepted by ``--methods``.
ALIASES: dict[str, list[str]] = {
    "all": list(METHODS),  # the incumbent row included
    "untrained": ["standard-nystrom", "kmeans-nystrom", "standard-fourier"],
    "di": ["di-nystrom", "di-fourier"],
    "ls": ["ls-nystrom", "ls-fourier"],
    "ce": ["ce-nystrom", "ce-fourier"],
    "incumbent": ["sklearn-nystroem"],
}
DATASETS = ("digits", "fashion-mnist", "mnist", "covtype", "letter")
#: The paper's ridge parameter of DI and LS.
RHO = 1e-4
#: Rows per batch when extracting features for the read-outs.
EVAL_BATCH = 4096
#: ``--quick`` settings (a smoke test, not a result).
QUICK = {"dims": [20], "repeats": 1, "max_epochs": 3, "svm_max_samples": 300}

FIELDS = [
    "dataset",
    "method",
    "map",
    "objective",
    "J",
    "repeat",
    "gamma",
    "batch_size",
    "lr",
    "train_acc",
    "test_acc",
    "svm_train_acc",
    "svm_test_acc",
    "readout_test_acc",
    "train_mse",
    "test_mse",
    "epochs",
    "decays",
    "stop_reason",
    "seconds",
    "eval_seconds",
    "svm_c",
]


def expand_methods(names: Iterable[str]) -> list[str]:
    """Resolve ``--methods`` (method names and :data:`ALIASES`) in table order, no repeats."""
    wanted: set[str] = set()
    for name in names:
        if name in ALIASES:
            wanted.update(ALIASES[name])
        elif name in METHODS:
            wanted.add(name)
        else:
            raise ValueError(
                f"reproduce: unknown method {name!r}; expected one of "
                f"{list(METHODS) + list(ALIASES)}"
            )
    return [m for m in METHODS if m in wanted]


def make_datamodule(
    dataset: str, j: int, *, root: str | None, seed: int = 0, batch_size: int | None = None
) -> ArrayDataModule:
    """The data module of ``dataset`` with the paper's batch rule for width ``j``.

    No validation split (``val_fraction=0``): the protocol reads the test set once.
    """
    common: dict[str, Any] = {
        "num_features": j,
        "batch_size": batch_size,
        "val_fraction": 0.0,
        "seed": seed,
    }
    if dataset == "digits":
        return DigitsDataModule(**common)
    if dataset in ("fashion-mnist", "mnist"):
        cls = FashionMNISTDataModule if dataset == "fashion-mnist" else MNISTDataModule
        return cls(root or "data", **common)
    cls = CovTypeDataModule if dataset == "covtype" else LetterDataModule
    return cls(root, **common)


def make_layer(
    method: str,
    x_train: Tensor,
    j: int,
    gamma: float,
    seed: int,
    kmeans_max_rows: int | None = None,
) -> NystromLayer | FourierLayer:
    """The kernel layer of ``method`` (trainable unless the method is an untrained baseline).

    ``kmeans_max_rows`` runs k-means on a random subset of that many training rows
    (compute cap; ``None``: all rows).
    """
    kind, objective, init = METHODS[method]
    trainable = objective is not None
    if init == "kmeans" and kmeans_max_rows is not None and kmeans_max_rows < len(x_train):
        gen = torch.Generator().manual_seed(seed)
        x_train = x_train[torch.randperm(len(x_train), generator=gen)[:kmeans_max_rows]]
    if kind == "nystrom":
        return NystromLayer.from_data(
            x_train, j, init=init, seed=seed, gamma=gamma, trainable=trainable
        )
    return FourierLayer(x_train.shape[1], j, gamma=gamma, seed=seed, trainable=trainable)


def monitor_of(objective: str) -> tuple[str, str]:
    """The epoch metric (and its mode) the stopping rule watches for ``objective``."""
    return ("train/di_epoch", "max") if objective == "di" else ("train/loss_epoch", "min")


def train(
    model: KernelClassifier,
    dm: ArrayDataModule,
    *,
    max_epochs: int,
    decay_patience: int,
    extra_callbacks: Sequence[Callback] = (),
    adaptive: bool = True,
) -> tuple[int, int, str, float]:
    """Fit ``model`` with PlateauDecay + DISaturationStopping (if ``adaptive``).

    Returns:
        tuple[int, int, str, float]: epochs run, lr decays, stop reason, wall seconds.
    """
    callbacks: list[Callback] = list(extra_callbacks)
    decay = stop = None
    if adaptive:
        monitor, mode = monitor_of(model.hparams.objective)
        decay = PlateauDecay(monitor=monitor, mode=mode, patience=decay_patience, verbose=False)
        stop = DISaturationStopping(monitor=monitor, mode=mode)
        callbacks += [decay, stop]
    trainer = Trainer(
        accelerator="cpu",
        devices=1,
        max_epochs=max_epochs,
        callbacks=callbacks,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        limit_val_batches=0,
    )
    start = time.perf_counter()
    trainer.fit(model, datamodule=dm)
    seconds = time.perf_counter() - start
    if stop is not None and stop.stopping_reason_message:
        reason = stop.stopping_reason.name.lower()
    else:
        reason = "max_epochs" if trainer.current_epoch >= max_epochs else "other"
    decays = len(decay.decay_epochs) if decay is not None else 0
    return trainer.current_epoch, decays, reason, seconds


@torch.no_grad()
def features_of(layer: nn.Module, x: Tensor) -> Tensor:
    """``layer(x)`` in batches of :data:`EVAL_BATCH` rows, float32, ``[N, J]``."""
    was = layer.training
    layer.eval()
    try:
        return torch.cat([layer(chunk).float() for chunk in x.split(EVAL_BATCH)])
    finally:
        layer.train(was)


def _accuracy(scores: Tensor, y: Tensor) -> float:
    return float((scores.argmax(1) == y).double().mean())


def _stratified_subset(y: np.ndarray, n: int, seed: int) -> np.ndarray:
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
        out[f"{split}_acc"] = _accuracy(scores, y)
        out[f"{split}_mse"] = float((scores - onehot).square().sum(1).mean())
    out["svm_train_acc"] = out["svm_test_acc"] = math.nan
    if svm:
        from sklearn.exceptions import ConvergenceWarning
        from sklearn.pipeline import make_pipeline
        from sklearn.preprocessing import StandardScaler
        from sklearn.svm import LinearSVC

        xtr, ytr = f_train.numpy(), y_train.numpy()
        idx = _stratified_subset(ytr, svm_max_samples or len(ytr), seed)
        cs = [svm_c] if isinstance(svm_c, int | float) else list(svm_c)
        out["svm_c"] = choose_svm_c(xtr[idx], ytr[idx], cs, seed)
        clf = make_pipeline(StandardScaler(), LinearSVC(C=out["svm_c"], random_state=seed))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            clf.fit(xtr[idx], ytr[idx])
        out["svm_train_acc"] = float((clf.predict(xtr) == ytr).mean())
        out["svm_test_acc"] = float((clf.predict(f_test.numpy()) == y_test.numpy()).mean())
    return Readouts(**out)


def run_one(
    method: str,
    dm: ArrayDataModule,
    x_train: Tensor,
    y_train: Tensor,
    x_test: Tensor,
    y_test: Tensor,
    j: int,
    repeat: int,
    args: argparse.Namespace,
    gamma: float,
) -> dict[str, Any]:
    """Build, train (if the method trains) and evaluate one method at width ``j``."""
    seed_everything(repeat, workers=True, verbose=False)
    kind, objective, _ = METHODS[method]
    if kind == "sklearn":
        return run_incumbent(method, dm, x_train, y_train, x_test, y_test, j, repeat, args, gamma)
    start = time.perf_counter()
    layer = make_layer(method, x_train, j, gamma, seed=repeat, kmeans_max_rows=args.kmeans_max_rows)
    epochs, decays, reason = 0, 0, "untrained"
    readout_acc = math.nan
    if objective is not None:
        model = KernelClassifier(
            layer, num_classes=dm.num_classes, objective=objective, rho=RHO, lr=args.lr
        )
        epochs, decays, reason, _ = train(
            model, dm, max_epochs=args.max_epochs, decay_patience=args.decay_patience
        )
        layer = model.kernel_layer
        if objective in ("ls", "ce"):
            with torch.no_grad():
                model.eval()
                scores = torch.cat([model.scores(model(c)) for c in x_test.split(EVAL_BATCH)])
            readout_acc = _accuracy(scores, y_test)
    seconds = time.perf_counter() - start
    start = time.perf_counter()
    f_train, f_test = features_of(layer, x_train), features_of(layer, x_test)
    res = evaluate(
        f_train,
        y_train,
        f_test,
        y_test,
        dm.num_classes,
        svm=not args.no_svm,
        svm_max_samples=args.svm_max_samples,
        svm_c=args.svm_c,
        seed=repeat,
    )
    return {
        "dataset": args.dataset,
        "method": method,
        "map": kind,
        "objective": objective or "none",
        "J": j,
        "repeat": repeat,
        "gamma": gamma,
        "batch_size": dm.batch_size if objective else 0,
        "lr": args.lr if objective else 0.0,
        **vars(res),
        "readout_test_acc": readout_acc,
        "epochs": epochs,
        "decays": decays,
        "stop_reason": reason,
        "seconds": seconds,
        "eval_seconds": time.perf_counter() - start,
    }


def run_incumbent(
    method: str,
    dm: ArrayDataModule,
    x_train: Tensor,
    y_train: Tensor,
    x_test: Tensor,
    y_test: Tensor,
    j: int,
    repeat: int,
    args: argparse.Namespace,
    gamma: float,
) -> dict[str, Any]:
    """The choice a user makes today: scikit-learn ``Nystroem(gamma, n_components=J)`` +
    ``LinearSVC(C=--svm-c)`` on the same scaled data (several ``--svm-c``: ``C`` by 3-fold
    cross-validation on the SVM subsample). ``seconds`` is the pipeline's fit
    (landmarks, map, the choice of ``C``, SVM); ``svm_*`` its accuracies; the ridge
    columns read out its features with the same ridge head as every other method."""
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.kernel_approximation import Nystroem
    from sklearn.svm import LinearSVC

    # float64 inputs give float64 features, which ``LinearSVC`` takes without the float64
    # copy it makes of float32 ones (benchmarks/incumbent_dtype.py).
    xtr = x_train.reshape(len(x_train), -1).double().numpy()
    ytr = y_train.numpy()
    xte = x_test.reshape(len(x_test), -1).double().numpy()
    start = time.perf_counter()
    nystroem = Nystroem(gamma=gamma, n_components=j, random_state=repeat)
    f_train = nystroem.fit_transform(xtr)
    # C by cross-validation (with several --svm-c) on the SVM subsample, as a user would.
    idx = _stratified_subset(ytr, args.svm_max_samples or len(ytr), repeat)
    svm_c = choose_svm_c(f_train[idx], ytr[idx], args.svm_c, repeat, scale=False)
    svm = LinearSVC(C=svm_c, random_state=repeat)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        svm.fit(f_train, ytr)
    seconds = time.perf_counter() - start
    start = time.perf_counter()
    f_test = nystroem.transform(xte)
    res = evaluate(
        torch.from_numpy(f_train).float(),
        y_train,
        torch.from_numpy(f_test).float(),
        y_test,
        dm.num_classes,
        svm=False,
    )
    res.svm_train_acc = float((svm.predict(f_train) == ytr).mean())
    res.svm_test_acc = float((svm.predict(f_test) == y_test.numpy()).mean())
    res.svm_c = svm_c
    return {
        "dataset": args.dataset,
        "method": method,
        "map": "nystrom",
        "objective": "none",
        "J": j,
        "repeat": repeat,
        "gamma": gamma,
        "batch_size": 0,
        "lr": 0.0,
        **vars(res),
        "readout_test_acc": math.nan,
        "epochs": 0,
        "decays": 0,
        "stop_reason": "untrained",
        "seconds": seconds,
        "eval_seconds": time.perf_counter() - start,
    }


# ---------------------------------------------------------------------- figures
def _summary(
    rows: Sequence[dict[str, Any]], key: str
) -> dict[tuple[str, int], tuple[float, float]]:
    """``(method, J) -> (mean, std)`` of ``key`` over repeats (std 0 for one repeat)."""
    groups: dict[tuple[str, int], list[float]] = defaultdict(list)
    for row in rows:
        value = float(row[key])
        if not math.isnan(value):
            groups[(row["method"], int(row["J"]))].append(value)
    return {
        k: (statistics.fmean(v), statistics.stdev(v) if len(v) > 1 else 0.0)
        for k, v in groups.items()
    }


_STYLE = {
    "standard-nystrom": ("tab:gray", "o", "--"),
    "kmeans-nystrom": ("tab:brown", "s", "--"),
    "standard-fourier": ("tab:olive", "^", ":"),
    "di-nystrom": ("tab:red", "o", "-"),
    "di-fourier": ("tab:red", "^", ":"),
    "ls-nystrom": ("tab:blue", "o", "-"),
    "ls-fourier": ("tab:blue", "^", ":"),
    "ce-nystrom": ("tab:green", "o", "-"),
    "ce-fourier": ("tab:green", "^", ":"),
    "sklearn-nystroem": ("black", "x", "-."),
}


def plot(rows: Sequence[dict[str, Any]], out: Path, dataset: str) -> list[Path]:
    """Write ``<dataset>_accuracy.png`` (Figure 2) and ``<dataset>_mse.png`` (Figure 1)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    methods = [m for m in METHODS if any(r["method"] == m for r in rows)]
    paths = []
    fig, axes = plt.subplots(1, 2, figsize=(12.5, 4.2), sharey=False)
    for ax, key, title in (
        (axes[0], "test_acc", "ridge read-out"),
        (axes[1], "svm_test_acc", "LinearSVC read-out"),
    ):
        summary = _summary(rows, key)
        for method in methods:
            pts = sorted((j, *summary[(m, j)]) for (m, j) in summary if m == method)
            if not pts:
                continue
            js, mean, std = zip(*pts, strict=True)
            colour, marker, ls = _STYLE[method]
            ax.errorbar(
                js,
                [100 * v for v in mean],
                yerr=[100 * v for v in std],
                label=method,
                color=colour,
                marker=marker,
                linestyle=ls,
                capsize=3,
            )
        ax.set_xscale("log")
        ax.set_xlabel("J (feature dimension)")
        ax.set_ylabel("test accuracy (%)")
        ax.set_title(f"{dataset}: {title}")
        ax.grid(alpha=0.3)
    # One legend beside both panels, so that no point hides behind it.
    fig.legend(*axes[0].get_legend_handles_labels(), loc="center right", fontsize=8)
    fig.tight_layout(rect=(0.0, 0.0, 0.86, 1.0))
    paths.append(out / f"{dataset}_accuracy.png")
    fig.savefig(paths[-1], dpi=110)
    plt.close(fig)

    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2), sharey=True)
    train, test = _summary(rows, "train_mse"), _summary(rows, "test_mse")
    for ax, kind in zip(axes, ("nystrom", "fourier"), strict=True):
        for method in (f"di-{kind}", f"ls-{kind}"):
            colour = "tab:red" if method.startswith("di") else "tab:blue"
            for summary, ls, split in ((train, "-", "train"), (test, "--", "test")):
                pts = sorted((j, *summary[(m, j)]) for (m, j) in summary if m == method)
                if not pts:
                    continue
                js, mean, std = zip(*pts, strict=True)
                ax.errorbar(
                    js,
                    mean,
                    yerr=std,
                    color=colour,
                    linestyle=ls,
                    marker="o",
                    capsize=3,
                    label=f"{method.split('-')[0].upper()} {split}",
                )
        ax.set_xscale("log")
        ax.set_xlabel("J (feature dimension)")
        ax.set_ylabel("ridge MSE (one-hot targets)")
        ax.set_title(f"{dataset}: {kind} maps, DI vs LS")
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=8)
    fig.tight_layout()
    paths.append(out / f"{dataset}_mse.png")
    fig.savefig(paths[-1], dpi=110)
    plt.close(fig)
    return paths


def read_csv(path: Path) -> list[dict[str, Any]]:
    """Rows of a CSV written by :func:`main` (numbers as strings are converted on use)."""
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


def write_csv(path: Path, rows: Sequence[dict[str, Any]]) -> None:
    """Write ``rows`` (dicts with the :data:`FIELDS` keys; a missing one left empty) to
    ``path`` with a header, atomically: a run stopped mid-write leaves the old file."""
    partial = path.with_name(path.name + ".partial")
    with open(partial, "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=FIELDS)
        writer.writeheader()
        writer.writerows(rows)
    partial.replace(path)


def _row_key(row: dict[str, Any]) -> tuple[str, int, int]:
    """``(method, J, repeat)``: what a CSV row stands for."""
    return row["method"], int(row["J"]), int(row["repeat"])


def _repeats(rows: Sequence[dict[str, Any]], key: str | None = None) -> dict[tuple[str, int], int]:
    """``(method, J) -> number of rows`` (repeats); with ``key``, of the rows where that
    figure was measured (not NaN)."""
    count: dict[tuple[str, int], int] = defaultdict(int)
    for row in rows:
        if key is None or not math.isnan(float(row[key])):
            count[(row["method"], int(row["J"]))] += 1
    return count


def format_mean_std(
    mean: float, std: float, repeats: int, scale: float = 100.0, fmt: str = ".2f"
) -> str:
    """``mean ± std`` times ``scale`` (percent by default); the mean alone for one repeat,
    ``-`` for a skipped (NaN) value."""
    if math.isnan(mean):
        return "-"
    spread = f" ± {scale * std:{fmt}}" if repeats > 1 else ""
    return f"{scale * mean:{fmt}}{spread}"


def markdown_table(rows: Sequence[dict[str, Any]], key: str = "test_acc") -> str:
    """``method x J`` table of ``key`` in percent, ``mean ± std`` over repeats.

    No ``± std`` where one repeat measured ``key``; an empty cell where a method was not
    run at a ``J``.
    """
    summary = _summary(rows, key)
    count = _repeats(rows, key)
    js = sorted({j for _, j in summary})
    methods = [m for m in METHODS if any(m == k[0] for k in summary)]
    lines = ["| method | " + " | ".join(f"J={j}" for j in js) + " |", "|---" * (len(js) + 1) + "|"]
    for m in methods:
        cells = []
        for j in js:
            if (m, j) in summary:
                cells.append(format_mean_std(*summary[(m, j)], count[(m, j)]))
            else:
                cells.append("")
        lines.append(f"| {m} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def results_table(rows: Sequence[dict[str, Any]]) -> str:
    """One line per ``(method, J)``: accuracies ``mean ± std`` (%), MSEs, epochs, seconds.

    The long table of ``benchmarks/README.md``; means over repeats (no ``± std`` where one
    repeat measured the figure), ``-`` where a read-out was skipped.
    """
    acc = {k: _summary(rows, k) for k in ("test_acc", "svm_test_acc")}
    measured = {k: _repeats(rows, k) for k in acc}
    mean = {k: _summary(rows, k) for k in ("train_mse", "test_mse", "epochs", "seconds")}
    count = _repeats(rows)
    keys = sorted(count, key=lambda k: (k[1], list(METHODS).index(k[0])))
    lines = [
        "| method | J | repeats | ridge acc | SVM acc | train MSE | test MSE | epochs | train s |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for key in keys:
        cells = []
        for name in ("test_acc", "svm_test_acc"):
            cells.append(
                format_mean_std(*acc[name].get(key, (math.nan, math.nan)), measured[name][key])
            )
        cells += [f"{mean['train_mse'][key][0]:.4f}", f"{mean['test_mse'][key][0]:.4f}"]
        cells += [f"{mean['epochs'][key][0]:.0f}", f"{mean['seconds'][key][0]:.0f}"]
        lines.append(f"| {key[0]} | {key[1]} | {count[key]} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def quiet_lightning() -> None:
    """Silence Lightning's per-fit banners and tips (the script prints its own rows)."""
    for name in ("lightning", "lightning.pytorch", "lightning.fabric"):
        logging.getLogger(name).setLevel(logging.ERROR)
    warnings.filterwarnings("ignore", message=".*(treespec|num_workers|LeafSpec).*")


def build_parser() -> argparse.ArgumentParser:
    """The command-line interface."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--dataset", choices=DATASETS, default="digits")
    p.add_argument("--root", default=None, help="data directory (IDX files / sklearn home)")
    p.add_argument("--dims", type=int, nargs="+", default=[100, 300, 1000], help="values of J")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument(
        "--first-repeat", type=int, default=0, help="seed of the first repeat (to add repeats)"
    )
    p.add_argument("--methods", nargs="+", default=["all"], help="names or all/untrained/di/ls/ce")
    p.add_argument("--gamma", type=float, default=None, help="default: gamma_heuristic(train)")
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--max-epochs", type=int, default=500)
    p.add_argument("--decay-patience", type=int, default=5, help="PlateauDecay patience")
    p.add_argument("--svm-max-samples", type=int, default=None, help="LinearSVC fit subsample")
    p.add_argument(
        "--kmeans-max-rows", type=int, default=None, help="k-means on a random subset (cap)"
    )
    p.add_argument(
        "--svm-c",
        type=float,
        nargs="+",
        default=[1.0],
        help="LinearSVC C; several values: chosen by 3-fold CV on the SVM's training rows",
    )
    p.add_argument("--no-svm", action="store_true", help="skip the LinearSVC read-out")
    p.add_argument("--threads", type=int, default=None, help="torch.set_num_threads")
    p.add_argument("--out", default=str(Path(__file__).parent / "results"))
    p.add_argument("--tag", default=None, help="file stem (default: the dataset name)")
    p.add_argument("--append", action="store_true", help="append to an existing CSV")
    p.add_argument(
        "--replace",
        action="store_true",
        help="with --append: run the grid's rows again, replacing those in the CSV",
    )
    p.add_argument(
        "--merge",
        nargs="+",
        default=None,
        metavar="CSV",
        help="concatenate CSVs of parallel runs into <out>/<tag>.csv, then plot",
    )
    p.add_argument("--plot-only", action="store_true", help="re-plot the existing CSV")
    p.add_argument("--quick", action="store_true", help=f"smoke test: {QUICK}")
    return p


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    """Run the protocol; write the CSV and figures; return the rows."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.quick:  # quick settings become defaults; explicit options still win
        parser.set_defaults(**QUICK)
        args = parser.parse_args(argv)
    quiet_lightning()
    if args.threads:
        torch.set_num_threads(args.threads)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stem = args.tag or args.dataset
    csv_path = out / f"{stem}.csv"
    if args.merge:
        rows = [row for path in args.merge for row in read_csv(Path(path))]
        write_csv(csv_path, rows)
    elif args.plot_only:
        rows = read_csv(csv_path)
    if args.plot_only or args.merge:
        plot(rows, out, stem)
        print(markdown_table(rows), results_table(rows), sep="\n\n")
        return rows
    methods = expand_methods(args.methods)
    if args.replace and not args.append:
        parser.error("--replace needs --append (it replaces rows of an existing CSV)")
    # The CSV's rows as they stand, rewritten whole after each new row: with --append a
    # grid cut short continues with the same command (rows already there are not run
    # again); with --replace too they are, each new row taking its old one's place.
    table = read_csv(csv_path) if args.append and csv_path.exists() else []
    done = set() if args.replace else {_row_key(r) for r in table}
    write_csv(csv_path, table)  # the header, or an older layout in the current one
    rows: list[dict[str, Any]] = []
    for j in args.dims:
        dm = make_datamodule(args.dataset, j, root=args.root)
        dm.setup("fit")
        x_train, y_train = dm.train_dataset.tensors
        x_test, y_test = dm.test_dataset.tensors
        if j >= len(x_train):
            print(f"# skip J={j}: needs more than {len(x_train)} training rows")
            continue
        gamma = args.gamma if args.gamma is not None else gamma_heuristic(x_train)
        for repeat in range(args.first_repeat, args.first_repeat + args.repeats):
            for method in methods:
                if (method, j, repeat) in done:
                    continue
                row = run_one(method, dm, x_train, y_train, x_test, y_test, j, repeat, args, gamma)
                old = [i for i, r in enumerate(table) if _row_key(r) == _row_key(row)]
                if old:
                    table[old[0]] = row
                else:
                    table.append(row)
                write_csv(csv_path, table)
                rows.append(row)
                print(
                    f"{args.dataset} J={j} r={repeat} {method:17s} "
                    f"ridge {100 * row['test_acc']:6.2f}% "
                    f"svm {100 * row['svm_test_acc']:6.2f}% "
                    f"mse {row['train_mse']:.3f}/{row['test_mse']:.3f} "
                    f"ep {row['epochs']} ({row['stop_reason']}) {row['seconds']:.1f}s "
                    f"+{row['eval_seconds']:.1f}s",
                    flush=True,
                )
    plot(table, out, stem)
    print(markdown_table(table), results_table(table), sep="\n\n")
    return rows


if __name__ == "__main__":
    main()
