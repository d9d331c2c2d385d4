"""How well ``DIClassifier().predict_proba`` is calibrated, against ``SVC(probability=True)``.

scikit-learn's bundled iris, wine and breast-cancer data (150 to 569 rows), five
stratified folds (``StratifiedKFold(5, shuffle=True, random_state=0)``), each estimator
after a ``StandardScaler`` fitted on the training folds, with its defaults
(``random_state=0``). Per data set: the mean and the worst test log-loss over the folds,
the least probability given to a test row's true class, and the mean test accuracy.

These sets are small enough that the trained map's leave-one-out scores often classify
every training row right; the read-out's temperature is fitted against Platt's smoothed
targets so that it stays finite there (``kernel_layers/sklearn/readout.py``).

Each data set is a record of ``benchmarks/results/calibration.json`` (a record of the
same name is replaced); render it with ``python benchmarks/report.py --write``.

Usage::

    python benchmarks/calibration.py
"""

from __future__ import annotations

import argparse
import json
import statistics
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import records
from sklearn.datasets import load_breast_cancer, load_iris, load_wine
from sklearn.metrics import log_loss
from sklearn.model_selection import StratifiedKFold
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler
from sklearn.svm import SVC

from kernel_layers.sklearn import DIClassifier

RECORDS = records.ROOT / "benchmarks" / "results" / "calibration.json"
DATASETS = {"iris": load_iris, "wine": load_wine, "breast_cancer": load_breast_cancer}
ESTIMATORS = {
    "di": lambda: DIClassifier(random_state=0),
    "svc": lambda: SVC(probability=True, random_state=0),
}
DESCRIPTION = (
    "Calibration of predict_proba (benchmarks/calibration.py): DIClassifier() against "
    "SVC(probability=True), StandardScaler first, 5 stratified folds (random_state=0); "
    "test log-loss (mean and worst fold), least probability of a true class, accuracy."
)
COLUMNS = [
    ["data set", "{name} ({rows} rows)"],
    ["`DIClassifier()` log-loss", "{di_log_loss:.3f}"],
    ["worst fold", "{di_worst_log_loss:.3f}"],
    ["least p(true class)", "{di_least_p:.1e}"],
    ["accuracy", "{di_acc:.2f} %"],
    ["`SVC(probability=True)` log-loss", "{svc_log_loss:.3f}"],
    ["worst fold", "{svc_worst_log_loss:.3f}"],
    ["least p(true class)", "{svc_least_p:.1e}"],
    ["accuracy", "{svc_acc:.2f} %"],
]


def evaluate(x: np.ndarray, y: np.ndarray) -> dict[str, Any]:
    """The figures of both estimators over the five folds of ``x [N, D]``, ``y [N]``."""
    folds = StratifiedKFold(5, shuffle=True, random_state=0).split(x, y)
    losses: dict[str, list[float]] = {name: [] for name in ESTIMATORS}
    least: dict[str, list[float]] = {name: [] for name in ESTIMATORS}
    correct: dict[str, list[float]] = {name: [] for name in ESTIMATORS}
    for train, test in folds:
        for name, make in ESTIMATORS.items():
            model = make_pipeline(StandardScaler(), make()).fit(x[train], y[train])
            proba = model.predict_proba(x[test])
            losses[name].append(float(log_loss(y[test], proba, labels=model.classes_)))
            least[name].append(float(proba[np.arange(len(test)), y[test]].min()))
            correct[name].append(100 * float(np.mean(model.predict(x[test]) == y[test])))
    figures: dict[str, Any] = {"rows": len(y), "folds": 5}
    for name in ESTIMATORS:
        figures[f"{name}_log_loss"] = statistics.mean(losses[name])
        figures[f"{name}_worst_log_loss"] = max(losses[name])
        figures[f"{name}_least_p"] = min(least[name])
        figures[f"{name}_acc"] = statistics.mean(correct[name])
    return figures


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", nargs="+", choices=list(DATASETS), default=list(DATASETS))
    parser.add_argument("--output", type=Path, default=RECORDS)
    args = parser.parse_args(argv)
    for dataset in args.datasets:
        x, y = DATASETS[dataset](return_X_y=True)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # DIClassifier's notes on J against the rows
            figures = evaluate(x, y)
        record = records.record(dataset, figures, "calibration.py", argv)
        records.store(
            args.output,
            record,
            DESCRIPTION,
            lambda stored: {
                "calibration": {"rows": [r["name"] for r in stored], "columns": COLUMNS}
            },
        )
        print(json.dumps(record, indent=1), flush=True)


if __name__ == "__main__":
    main()
