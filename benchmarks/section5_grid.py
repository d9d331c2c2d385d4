"""The Section 5 grid of ``reproduce.py``: its methods and data sets, and one run of a
method at a width ``J`` (build the map, train it by the method's objective under the
paper's stopping rule, read it out with :mod:`section5_readouts`)."""

from __future__ import annotations

import argparse
import math
import time
import warnings
from collections.abc import Iterable, Sequence
from typing import Any

import torch
from lightning.pytorch import Callback, Trainer, seed_everything
from section5_readouts import (
    EVAL_BATCH,
    accuracy,
    choose_svm_c,
    evaluate,
    features_of,
    stratified_subset,
)
from torch import Tensor

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
            readout_acc = accuracy(scores, y_test)
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
    idx = stratified_subset(ytr, args.svm_max_samples or len(ytr), repeat)
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
