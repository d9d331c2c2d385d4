"""benchmarks/incumbent_dtype.py: the incumbent's fit timed per input dtype, offline on digits."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from sklearn.datasets import load_digits
from sklearn.kernel_approximation import Nystroem
from sklearn.pipeline import make_pipeline
from sklearn.svm import LinearSVC

incumbent_dtype = pytest.importorskip("incumbent_dtype")


def test_fit_incumbent_keeps_the_input_dtype_and_matches_a_pipeline() -> None:
    x, y = load_digits(return_X_y=True)
    x = x / 16.0
    ref = make_pipeline(Nystroem(gamma=0.02, n_components=64, random_state=3),
                        LinearSVC(C=1.0, random_state=3))  # fmt: skip
    ref.fit(x[:1200], y[:1200])
    ref_acc = float((ref.predict(x[1200:]) == y[1200:]).mean())
    for dtype in ("float32", "float64"):
        xd = x.astype(dtype)
        row = incumbent_dtype.fit_incumbent(xd[:1200], y[:1200], xd[1200:], y[1200:], 64, 0.02, 3)
        assert row["features_dtype"] == dtype
        assert row["seconds"] == pytest.approx(row["map_seconds"] + row["svm_seconds"])
        assert row["n_iter"] >= 1
        if dtype == "float64":  # the same fit as the pipeline, to the last digit
            assert row["svm_test_acc"] == ref_acc
        else:
            assert abs(row["svm_test_acc"] - ref_acc) < 0.02


def test_main_writes_one_json_row_per_dim_and_dtype(tmp_path: Path) -> None:
    out = tmp_path / "rows.json"
    rows = incumbent_dtype.main(
        ["--dataset", "digits", "--dims", "50", "--gamma", "0.0134", "--max-rows", "600",
         "--json", str(out)]
    )  # fmt: skip
    written = [json.loads(line) for line in out.read_text().splitlines()]
    assert written == rows and [r["dtype"] for r in rows] == ["float32", "float64"]
    assert all(r["rows"] == 600 and r["J"] == 50 for r in rows)
    assert np.all([0.5 < r["svm_test_acc"] <= 1.0 for r in rows])
