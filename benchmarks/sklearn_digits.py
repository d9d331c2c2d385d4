"""DIClassifier() against SVC(), both with their defaults, on scikit-learn's digits.

The split of the estimators' goal: ``train_test_split(test_size=0.3, random_state=0)``,
``MinMaxScaler`` fitted on the training rows. Each estimator is fitted ``--repeats``
times (``DIClassifier`` with ``random_state`` 0, 1, ...); the record holds the median and
the range of the test accuracy and of the fit time (wall clock, ``time.perf_counter``),
and the load average of the machine when the run began (the machine may be shared).

The record goes to ``benchmarks/results/sklearn_digits.json`` under a name carrying the
torch thread count (a record of the same name is replaced); render it with
``python benchmarks/report.py --write``.

Usage::

    python benchmarks/sklearn_digits.py                      # torch's default threads
    OMP_NUM_THREADS=1 python benchmarks/sklearn_digits.py    # one thread
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path
from typing import Any

import records
import torch
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from sklearn.preprocessing import MinMaxScaler
from sklearn.svm import SVC

from kernel_layers.sklearn import DIClassifier

RECORDS = records.ROOT / "benchmarks" / "results" / "sklearn_digits.json"
DESCRIPTION = (
    "DIClassifier() and SVC() with their defaults on scikit-learn's digits (70/30 split, "
    "random_state=0, MinMaxScaler): median test accuracy and fit time of the repeats "
    "(DIClassifier random_state 0, 1, ...), their range in brackets."
)
COLUMNS = [
    ["torch threads", "{threads}"],
    ["`DIClassifier()` accuracy", "{di_acc:.2f} % ({di_acc_range})"],
    ["`DIClassifier()` fit", "{di_fit_s:.2f} s ({di_fit_range})"],
    ["`SVC()` accuracy", "{svc_acc:.2f} %"],
    ["`SVC()` fit", "{svc_fit_s:.3f} s"],
    ["load average", "{load:.1f}"],
    ["machine", "{machine_class}"],
]


def _split() -> tuple[Any, ...]:
    x, y = load_digits(return_X_y=True)
    x_train, x_test, y_train, y_test = train_test_split(x, y, test_size=0.3, random_state=0)
    scale = MinMaxScaler().fit(x_train)
    return scale.transform(x_train), scale.transform(x_test), y_train, y_test


def _time(make: Any, data: tuple[Any, ...], repeats: int) -> tuple[list[float], list[float]]:
    """``(test accuracies in %, fit seconds)`` of ``make(i).fit`` for ``i < repeats``."""
    x_train, x_test, y_train, y_test = data
    accuracies, seconds = [], []
    for i in range(repeats):
        estimator = make(i)
        start = time.perf_counter()
        estimator.fit(x_train, y_train)
        seconds.append(time.perf_counter() - start)
        accuracies.append(100 * estimator.score(x_test, y_test))
    return accuracies, seconds


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Time both estimators, write the record; returns it."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--output", type=Path, default=RECORDS)
    args = parser.parse_args(argv)
    load = os.getloadavg()[0]
    data = _split()
    di_acc, di_s = _time(lambda i: DIClassifier(random_state=i), data, args.repeats)
    svc_acc, svc_s = _time(lambda i: SVC(), data, args.repeats)
    threads = torch.get_num_threads()
    figures = {
        "threads": threads,
        "repeats": args.repeats,
        "di_acc": statistics.median(di_acc),
        "di_acc_range": f"{min(di_acc):.2f} - {max(di_acc):.2f} %",
        "di_fit_s": statistics.median(di_s),
        "di_fit_range": f"{min(di_s):.2f} - {max(di_s):.2f} s",
        "svc_acc": statistics.median(svc_acc),
        "svc_fit_s": statistics.median(svc_s),
        "load": load,
    }
    record = records.record(f"digits_threads{threads}", figures, "sklearn_digits.py", argv)
    records.store(
        args.output,
        record,
        DESCRIPTION,
        lambda stored: {
            "sklearn_digits": {"rows": sorted(r["name"] for r in stored), "columns": COLUMNS}
        },
    )
    print(json.dumps(record, indent=1))
    return record


if __name__ == "__main__":
    main()
