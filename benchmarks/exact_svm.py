"""The exact kernel machine beside the kernel layers: an RBF ``SVC`` on the recipes' splits.

The data are the recipes' (the data modules' splits and min-max scaling:
``MNISTDataModule`` and ``FashionMNISTDataModule`` 60,000 / 10,000, ``CovTypeDataModule``
464,810 / 116,202), the kernel is the recipes' Gaussian ``exp(-gamma ||x - z||^2)`` with their
``gamma`` (MNIST 0.0134, Fashion-MNIST 0.01, CovType 0.974), and ``C`` is chosen by 3-fold
cross-validation over ``--cs`` on ``--cv-rows`` stratified training rows. The SVC is then
fitted on ``--train-rows`` stratified training rows (all by default; CovType's 464,810 do not
fit in time on a CPU, so its record states the subsample) and scored on the whole test split.
Figures: test accuracy (%), fit and predict seconds, the ``C`` chosen, the rows used.

Each run writes one record (``<dataset>_<rows>``) to ``benchmarks/results/exact_svm.json``,
replacing one of the same name.

Usage::

    python benchmarks/exact_svm.py --dataset mnist --root data/mnist
    python benchmarks/exact_svm.py --dataset fashion --root data/fashion
    python benchmarks/exact_svm.py --dataset covtype --root data/covtype --train-rows 50000
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

import numpy as np
from records import ROOT, record, store
from sklearn.model_selection import GridSearchCV, train_test_split
from sklearn.svm import SVC

from kernel_layers.data import CovTypeDataModule, FashionMNISTDataModule, MNISTDataModule

RECORDS = ROOT / "benchmarks" / "results" / "exact_svm.json"
#: The recipes' cross-validated Gaussian kernel parameters.
GAMMAS = {"mnist": 0.0134, "fashion": 0.01, "covtype": 0.974}
#: The recipes' data modules.
MODULES: dict[str, Any] = {
    "mnist": MNISTDataModule,
    "fashion": FashionMNISTDataModule,
    "covtype": CovTypeDataModule,
}
DESCRIPTION = (
    "Exact RBF SVC (scikit-learn) on the recipes' splits and scaling with the recipes' "
    "gamma; C by 3-fold cross-validation on a stratified subsample of the training rows; "
    "fitted on the training rows stated and scored on the whole test split."
)
COLUMNS = [
    ["data set", "{dataset}"],
    ["training rows", "{train_rows}"],
    ["gamma", "{gamma}"],
    ["C (3-fold CV)", "{C:g}"],
    ["test accuracy", "{test_acc:.2f} %"],
    ["fit", "{fit_time}"],
    ["predict", "{predict_time}"],
    ["machine", "{machine_class}"],
]


def load(dataset: str, root: str) -> tuple[np.ndarray, ...]:
    """``(x_train, y_train, x_test, y_test)`` of the recipe's data module (float64)."""
    dm = MODULES[dataset](root, val_fraction=0.0)
    dm.setup("fit")
    dm.setup("test")
    x_train, y_train = (t.numpy() for t in dm.train_dataset.tensors[:2])
    x_test, y_test = (t.numpy() for t in dm.test_dataset.tensors[:2])
    return x_train.astype(np.float64), y_train, x_test.astype(np.float64), y_test


def subsample(x: np.ndarray, y: np.ndarray, rows: int | None, seed: int = 0) -> tuple:
    """``rows`` stratified rows of ``(x, y)`` (all of them for ``None`` or more)."""
    if rows is None or rows >= len(x):
        return x, y
    x_kept, _, y_kept, _ = train_test_split(x, y, train_size=rows, stratify=y, random_state=seed)
    return x_kept, y_kept


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", choices=sorted(GAMMAS), required=True)
    parser.add_argument("--root", required=True, help="the data module's folder")
    parser.add_argument("--train-rows", type=int, default=None)
    parser.add_argument("--cv-rows", type=int, default=10000)
    parser.add_argument("--cs", type=float, nargs="+", default=[1.0, 10.0, 100.0])
    parser.add_argument("--output", type=Path, default=RECORDS)
    args = parser.parse_args(argv)
    x_train, y_train, x_test, y_test = load(args.dataset, args.root)
    gamma = GAMMAS[args.dataset]
    x_cv, y_cv = subsample(x_train, y_train, args.cv_rows, seed=1)
    search = GridSearchCV(SVC(kernel="rbf", gamma=gamma), {"C": args.cs}, cv=3)
    c = float(search.fit(x_cv, y_cv).best_params_["C"])
    x_fit, y_fit = subsample(x_train, y_train, args.train_rows)
    svc = SVC(kernel="rbf", gamma=gamma, C=c)
    start = time.perf_counter()
    svc.fit(x_fit, y_fit)
    fit_s = time.perf_counter() - start
    start = time.perf_counter()
    accuracy = 100 * float((svc.predict(x_test) == y_test).mean())
    predict_s = time.perf_counter() - start
    figures = {
        "dataset": args.dataset,
        "train_rows": len(x_fit),
        "cv_rows": len(x_cv),
        "gamma": gamma,
        "C": c,
        "test_acc": accuracy,
        "fit_s": fit_s,
        "predict_s": predict_s,
        "support_vectors": int(svc.n_support_.sum()),
    }
    new = record(f"{args.dataset}_{len(x_fit)}", figures, "exact_svm.py", argv)
    store(
        args.output,
        new,
        DESCRIPTION,
        lambda records: {
            "exact_svm": {
                "rows": sorted(r["name"] for r in records),
                "columns": COLUMNS,
            }
        },
    )
    print(new)
    return new


if __name__ == "__main__":
    main()
