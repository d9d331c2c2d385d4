"""The small-data suite: DI-trained kernel maps against SVC on public classification
data sets (``suite_data.py``), from 208 to 581,012 rows.

For each data set: a stratified 70/30 split (``random_state=0``), features min-max scaled
on the training rows, ``J = default_components(training rows)`` (``DIClassifier``'s
default, ``min(400, rows // 3)``) and ``gamma = gamma_heuristic(training rows)``
(``SVC(gamma="scale")``'s value); the methods:

* ``untrained``: ``DIClassifier(J, max_epochs=0)``, the map before training;
* ``di_trained``: ``KernelClassifier`` with a ``NystromLayer(J, gamma)``, DI objective,
  its defaults: ``rho`` ``0.1`` below 8 batches per epoch, the paper's ``1e-4`` from 8
  on, the ridge read-out's penalty equal to it (``head_rho``), and ``keep_best="auto"``
  (below 8 batches per epoch the model of the best epoch on the validation split, the
  untrained map a candidate; from 8 on the last epoch),
  Adam ``lr = 1e-2``, batch ``max(1000, 2 J)`` capped at the rows,
  ``PlateauDecay(patience=3)`` + ``DISaturationStopping`` on ``train/di_epoch`` (the
  quick start's recipe), at most ``MAX_EPOCHS`` epochs, through a Lightning ``Trainer``
  (the data module's default 10 % validation split is held out of training); its record
  also holds ``untrained_acc``, ``UntrainedBaseline``'s test accuracy of the same map
  before training;
* ``di_trained_last``: the same with ``keep_best=None``: the last epoch on every data set;
* ``di_trained_paper_rho``: ``di_trained_last`` with the paper's ``rho = 1e-4`` on every
  data set;
* ``di_trained_keep_best``: ``di_trained`` with ``keep_best="val/acc"``: the model of the
  best epoch on the validation split on every data set, the untrained map a candidate,
  ties of accuracy decided by the read-out's validation squared error ``val/mse``;
* ``diclassifier``: ``DIClassifier()`` with its defaults (``random_state=0``);
* ``svc``: ``SVC()`` with its defaults;
* ``svc_cv``: ``SVC`` with ``C`` in ``{1, 10, 100}`` and ``gamma`` in ``{0.1, 1, 10} x``
  the ``"scale"`` value by ``GridSearchCV`` (3-fold) on the training rows;
* ``nystroem_linearsvc``: scikit-learn's ``Nystroem(J, gamma)`` + ``LinearSVC()``.

Figures per (data set, method): ``acc`` (test accuracy, %), ``fit_s`` (wall-clock fit
seconds), ``train_rows``, ``test_rows``. CovType runs on stratified subsamples of its
split (``ROWS``: 100,000 training and 50,000 test rows); where an exact SVC would not fit
in time even then (``SUBSAMPLE``: CovType's ``svc`` on 30,000 rows, ``svc_cv`` on 10,000,
and ``di_trained``, whose Lightning run of at most 100 epochs on one thread
would not either, on 20,000), it is trained on a stratified subsample of the training rows
and tested on all test rows. Every method runs with one thread (``OMP_NUM_THREADS=1``,
``torch.set_num_threads(1)``), so that times compare.

``--seeds 1 2`` runs the Lightning methods again with other seeds (their landmarks,
batches and validation rows; the split stays the same): records
``<data set>/<method>@seed<k>``, the table of ``di_trained`` over seeds and the goal on
its mean (``suite_goals.py``).

Each result is appended to ``benchmarks/results/suite.json`` as it finishes; a (data set,
method) already there is skipped unless ``--force``. Render with
``python benchmarks/report.py --write``.

Usage::

    python benchmarks/suite.py --datasets sonar ionosphere       # resumable
    python benchmarks/suite.py --methods diclassifier --force    # re-run one method
    python benchmarks/suite.py --methods di_trained --seeds 1 2  # other seeds
"""

from __future__ import annotations

import os

os.environ["OMP_NUM_THREADS"] = "1"  # before numpy / torch load their thread pools

import argparse
import logging
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import records
import suite_data
import torch
from sklearn.model_selection import GridSearchCV, train_test_split
from sklearn.preprocessing import LabelEncoder, MinMaxScaler
from suite_goals import SEED_TAG, seed_method

ROOT = Path(__file__).resolve().parents[1]
RECORDS = ROOT / "benchmarks" / "results" / "suite.json"
METHODS = (
    "untrained",
    "di_trained",
    "di_trained_last",
    "di_trained_paper_rho",
    "di_trained_keep_best",
    "diclassifier",
    "svc",
    "svc_cv",
    "nystroem_linearsvc",
)
#: The Lightning runs: method -> the options of its ``KernelClassifier``.
LIGHTNING: dict[str, dict[str, Any]] = {
    "di_trained": {},
    "di_trained_last": {"keep_best": None},
    "di_trained_paper_rho": {"rho": 1e-4, "keep_best": None},
    "di_trained_keep_best": {"keep_best": "val/acc"},
}
HEADERS = {
    "untrained": "untrained map",
    "di_trained": "DI-trained",
    "di_trained_last": "DI-trained, last epoch",
    "di_trained_paper_rho": "DI-trained, rho 1e-4",
    "di_trained_keep_best": "DI-trained, best on validation",
    "diclassifier": "`DIClassifier()`",
    "svc": "`SVC()`",
    "svc_cv": "CV-tuned SVC",
    "nystroem_linearsvc": "`Nystroem` + `LinearSVC`",
}
#: The seeds of the table of DI-trained runs over seeds (``--seeds``; 0 is the main run).
SEEDS = (0, 1, 2)
#: Epoch cap of the Lightning run (the stopping rule usually ends it earlier).
MAX_EPOCHS = 100
#: data set -> (training rows, test rows) of stratified subsamples of its split, for
#: every method: CovType's 406,708 training rows would not fit in the time of a run.
ROWS: dict[str, tuple[int, int]] = {"covtype": (100_000, 50_000)}
#: (data set, method) -> training rows of a further stratified subsample, where an exact
#: kernel SVC on all of them would not fit in the time of a run.
SUBSAMPLE: dict[tuple[str, str], int] = {
    ("covtype", "svc"): 30_000,
    ("covtype", "svc_cv"): 10_000,
    ("covtype", "di_trained"): 20_000,
    ("covtype", "di_trained_last"): 20_000,
    ("covtype", "di_trained_paper_rho"): 20_000,
    ("covtype", "di_trained_keep_best"): 20_000,
}
DESCRIPTION = (
    "Small-data suite (benchmarks/suite.py): per data set, a stratified 70/30 split "
    "(random_state=0), min-max scaling on the training rows, J = min(400, training rows // "
    "3), gamma = 1 / (D Var X); test accuracy (%) and fit seconds of each method, one "
    "thread each. Records are named <data set>/<method>."
)

Split = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]


def split(x: np.ndarray, y: np.ndarray, rows: tuple[int, int] | None = None) -> Split:
    """Stratified 70/30 split (``random_state=0``), min-max scaled on the training rows;
    labels encoded as ``0..L-1``; ``rows``: stratified subsamples of ``(training, test)``
    rows of that split."""
    codes = LabelEncoder().fit_transform(y)
    x_train, x_test, y_train, y_test = train_test_split(
        x, codes, test_size=0.3, random_state=0, stratify=codes
    )
    if rows is not None:
        x_train, y_train = subsample(x_train, y_train, rows[0])
        x_test, y_test = subsample(x_test, y_test, rows[1])
    scale = MinMaxScaler().fit(x_train)
    return scale.transform(x_train), scale.transform(x_test), y_train, y_test


def subsample(x: np.ndarray, y: np.ndarray, rows: int) -> tuple[np.ndarray, np.ndarray]:
    """A stratified subsample of ``rows`` rows (``random_state=0``); all when fewer."""
    if rows >= len(y):
        return x, y
    x_sub, _, y_sub, _ = train_test_split(x, y, train_size=rows, random_state=0, stratify=y)
    return x_sub, y_sub


def _lightning(
    data: Split, width: int, gamma: float, options: dict[str, Any], seed: int = 0
) -> tuple[float, dict[str, Any]]:
    """Fit the DI-trained ``KernelClassifier`` (landmarks, batches and validation rows
    drawn from ``seed``); ``(test accuracy, extra figures)``."""
    import lightning.pytorch as pl

    from kernel_layers import KernelClassifier, NystromLayer
    from kernel_layers.callbacks import DISaturationStopping, PlateauDecay, UntrainedBaseline
    from kernel_layers.data import TensorDataModule

    x_train, x_test, y_train, y_test = data
    classes = int(y_train.max()) + 1
    val_fraction = 0.1
    rows = len(y_train) - round(val_fraction * len(y_train))
    batch = min(max(1000, 2 * width), rows)
    pl.seed_everything(seed, verbose=False)
    module = TensorDataModule(
        x_train, y_train, x_test, y_test, num_classes=classes, batch_size=batch, seed=seed
    )
    layer = NystromLayer(in_features=x_train.shape[1], out_features=width, gamma=gamma)
    model = KernelClassifier(layer, num_classes=classes, objective="di", lr=1e-2, **options)
    baseline = UntrainedBaseline()
    trainer = pl.Trainer(
        accelerator="cpu",
        devices=1,
        max_epochs=MAX_EPOCHS,
        deterministic=True,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[
            PlateauDecay(monitor="train/di_epoch", mode="max", factor=0.1, patience=3),
            DISaturationStopping(monitor="train/di_epoch", mode="max"),
            baseline,
        ],
    )
    start = time.perf_counter()
    trainer.fit(model, module)
    fit_s = time.perf_counter() - start
    (result,) = trainer.test(model, module, verbose=False)
    assert baseline.accuracy is not None
    extra = {
        "fit_s": fit_s,
        "untrained_acc": 100 * baseline.accuracy,
        "epochs": trainer.current_epoch,
        "batch": batch,
        "rho": model.rho,
    }
    return 100 * float(result["test/acc"]), extra


def _estimator(method: str, width: int, gamma: float) -> Any:
    from sklearn.kernel_approximation import Nystroem
    from sklearn.pipeline import make_pipeline
    from sklearn.svm import SVC, LinearSVC

    from kernel_layers.sklearn import DIClassifier

    if method == "untrained":
        return DIClassifier(width, max_epochs=0, random_state=0)
    if method == "diclassifier":
        return DIClassifier(random_state=0)
    if method == "svc":
        return SVC()
    if method == "svc_cv":
        grid = {"C": [1.0, 10.0, 100.0], "gamma": [gamma * f for f in (0.1, 1.0, 10.0)]}
        return GridSearchCV(SVC(), grid, cv=3, n_jobs=1)
    if method == "nystroem_linearsvc":
        return make_pipeline(Nystroem(gamma=gamma, n_components=width, random_state=0), LinearSVC())
    raise ValueError(f"suite: unknown method {method!r}, expected one of {METHODS}")


def run_method(dataset: str, method: str, data: Split, seed: int = 0) -> dict[str, Any]:
    """The figures of one (data set, method); ``seed`` draws a Lightning run's landmarks,
    batches and validation rows (the split stays the same)."""
    from kernel_layers.selection.gamma import gamma_heuristic
    from kernel_layers.sklearn.features import default_components

    x_train, x_test, y_train, y_test = data
    width = default_components(len(y_train))
    gamma = gamma_heuristic(x_train)
    figures: dict[str, Any] = {"J": width, "gamma": gamma}
    rows = SUBSAMPLE.get((dataset, method), len(y_train))
    x_fit, y_fit = subsample(x_train, y_train, rows)
    if method in LIGHTNING:
        data = (x_fit, x_test, y_fit, y_test)
        acc, extra = _lightning(data, width, gamma, LIGHTNING[method], seed)
        figures.update(extra, acc=acc, train_rows=len(y_fit))
        return figures
    estimator = _estimator(method, width, gamma)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # LinearSVC's convergence, DIClassifier's J notes
        start = time.perf_counter()
        estimator.fit(x_fit, y_fit)
        figures["fit_s"] = time.perf_counter() - start
        figures["acc"] = 100 * float(np.mean(estimator.predict(x_test) == y_test))
    figures["train_rows"] = len(y_fit)
    if method == "svc_cv":
        figures["best"] = {k: float(v) for k, v in estimator.best_params_.items()}
    if method in ("untrained", "diclassifier"):
        fitted = getattr(estimator, "features_", estimator)
        figures["J"] = int(fitted.n_components_)
        figures["epochs"] = len(getattr(fitted, "di_history_", []))
    return figures


def tables(order: list[str], seeded: list[str] | None = None) -> dict[str, Any]:
    """The "tables" spec of the record file: accuracy, times, goals, and the DI-trained
    runs of every seed on the data sets ``seeded``."""
    columns = [[HEADERS[m], m] for m in METHODS]
    baseline = ["untrained, Lightning run", "di_trained", "{untrained_acc:.2f}"]
    seed_columns = [
        [f"seed {k}: {label}", seed_method("di_trained", k), template]
        for k in SEEDS
        for label, template in (("untrained", "{untrained_acc:.2f}"), ("DI", "{acc:.2f}"))
    ]
    return {
        "suite_seeds": {
            "kind": "matrix",
            "row_header": "data set",
            "rows": seeded or [],
            "columns": seed_columns,
            "cell": "{acc:.2f}",
        },
        "suite_accuracy": {
            "kind": "matrix",
            "row_header": "data set",
            "rows": order,
            "columns": [columns[0], baseline, *columns[1:]],
            "cell": "{acc:.2f}",
        },
        "suite_time": {
            "kind": "matrix",
            "row_header": "data set",
            "rows": order,
            "columns": columns,
            "cell": "{fit_s:.2f}",
        },
        "suite_goals": {"kind": "suite_goals"},
    }


def _tables(stored: list[dict[str, Any]]) -> dict[str, Any]:
    present = {r["name"].split("/")[0] for r in stored}
    seeded = {
        dataset
        for dataset, _, method in (r["name"].partition("/") for r in stored)
        if SEED_TAG in method and method.partition(SEED_TAG)[0] == "di_trained"
    }
    return tables(
        [name for name in suite_data.LOADERS if name in present],
        [name for name in suite_data.LOADERS if name in seeded],
    )


def store(record: dict[str, Any], path: Path = RECORDS) -> None:
    """Add ``record`` to the record file (replacing one of the same name)."""
    records.store(path, record, DESCRIPTION, _tables)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", nargs="+", choices=list(suite_data.LOADERS))
    parser.add_argument("--methods", nargs="+", choices=METHODS, default=list(METHODS))
    parser.add_argument("--force", action="store_true", help="re-run stored results")
    parser.add_argument(
        "--seeds",
        nargs="+",
        type=int,
        default=[0],
        help="seeds of the Lightning runs; other than 0 they are records <data set>/"
        "<method>@seed<k> (the other methods run for seed 0 only)",
    )
    parser.add_argument("--output", type=Path, default=RECORDS)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    logging.getLogger("lightning.pytorch").setLevel(logging.ERROR)
    for dataset in args.datasets or list(suite_data.LOADERS):
        done = {r["name"] for r in records.load_records(args.output)}
        runs = [
            (method, seed, f"{dataset}/{seed_method(method, seed)}")
            for seed in args.seeds
            for method in args.methods
            if seed == 0 or method in LIGHTNING
        ]
        todo = [run for run in runs if args.force or run[2] not in done]
        if not todo:
            continue
        load: Callable[..., tuple[np.ndarray, np.ndarray]] = suite_data.LOADERS[dataset]
        data = split(*load(), ROWS.get(dataset))
        for method, seed, name in todo:
            figures = run_method(dataset, method, data, seed)
            figures["test_rows"] = len(data[3])
            store(records.record(name, figures, "suite.py", argv), args.output)
            print(f"{name}: {figures['acc']:.2f} % in {figures['fit_s']:.2f} s", flush=True)


if __name__ == "__main__":
    main()
