"""What the input dtype costs the incumbent (scikit-learn ``Nystroem`` + ``LinearSVC``).

``reproduce.py`` hands the incumbent float64 inputs (so that ``LinearSVC`` takes float64
features without copying them). This times the incumbent's fit exactly as
``section5_grid.run_incumbent`` does (``Nystroem(gamma, n_components=J,
random_state=seed)``, then ``LinearSVC(C=1, random_state=seed)`` on every training row)
for each ``--dtypes`` entry in turn, and reports the map's and the SVM's seconds apart,
liblinear's iteration count and the accuracies. Run one dtype per process (one per core,
side by side) to compare them on the same machine at the same time::

    OMP_NUM_THREADS=1 taskset -c 0 python benchmarks/incumbent_dtype.py --dataset covtype \\
        --root DIR/covtype --dims 300 --dtypes float32 --json f32.json
"""

from __future__ import annotations

import argparse
import json
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np
from section5_grid import make_datamodule

__all__ = ["fit_incumbent", "main"]


def fit_incumbent(
    x_train: np.ndarray,
    y_train: np.ndarray,
    x_test: np.ndarray,
    y_test: np.ndarray,
    j: int,
    gamma: float,
    seed: int,
) -> dict[str, Any]:
    """Fit ``Nystroem`` + ``LinearSVC`` on ``x_train`` (n, d) in its own dtype.

    Returns the map's and the SVM's fit seconds, the features' dtype, liblinear's
    iteration count (the most over the one-vs-rest classes) and train / test accuracy.
    """
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.kernel_approximation import Nystroem
    from sklearn.svm import LinearSVC

    start = time.perf_counter()
    nystroem = Nystroem(gamma=gamma, n_components=j, random_state=seed)
    f_train = nystroem.fit_transform(x_train)
    map_seconds = time.perf_counter() - start
    start = time.perf_counter()
    svm = LinearSVC(C=1.0, random_state=seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        svm.fit(f_train, y_train)
    svm_seconds = time.perf_counter() - start
    f_test = nystroem.transform(x_test)
    return {
        "features_dtype": str(f_train.dtype),
        "map_seconds": map_seconds,
        "svm_seconds": svm_seconds,
        "seconds": map_seconds + svm_seconds,
        "n_iter": int(np.max(svm.n_iter_)),
        "svm_train_acc": float((svm.predict(f_train) == y_train).mean()),
        "svm_test_acc": float((svm.predict(f_test) == y_test).mean()),
    }


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    """Time the incumbent for each ``--dims`` x ``--dtypes``; print and return the rows."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--dataset", default="digits", help="a reproduce.py data set")
    p.add_argument("--root", default=None, help="data folder (reproduce.py --root)")
    p.add_argument("--dims", type=int, nargs="+", default=[100], help="J values")
    p.add_argument("--gamma", type=float, default=0.974, help="RBF gamma")
    p.add_argument("--seed", type=int, default=0, help="Nystroem / LinearSVC seed")
    p.add_argument(
        "--dtypes", nargs="+", default=["float32", "float64"], choices=["float32", "float64"]
    )
    p.add_argument("--max-rows", type=int, default=None, help="first N training rows only")
    p.add_argument("--json", type=Path, default=None, help="append the rows here (JSON lines)")
    args = p.parse_args(argv)
    rows = []
    for j in args.dims:
        dm = make_datamodule(args.dataset, j, root=args.root)
        dm.setup("fit")
        x_train, y_train = (t.numpy() for t in dm.train_dataset.tensors)
        x_test, y_test = (t.numpy() for t in dm.test_dataset.tensors)
        x_train = x_train.reshape(len(x_train), -1)[: args.max_rows]
        y_train = y_train[: args.max_rows]
        x_test = x_test.reshape(len(x_test), -1)
        for dtype in args.dtypes:
            row = {"dataset": args.dataset, "J": j, "rows": len(x_train), "dtype": dtype}
            row |= fit_incumbent(
                x_train.astype(dtype), y_train, x_test.astype(dtype), y_test,
                j, args.gamma, args.seed,
            )  # fmt: skip
            rows.append(row)
            print(json.dumps(row), flush=True)
            if args.json:
                with open(args.json, "a") as fh:
                    fh.write(json.dumps(row) + "\n")
    return rows


if __name__ == "__main__":
    main()
