"""Smoke test of the paper-reproduction script (benchmarks/reproduce.py), offline on digits."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

reproduce = pytest.importorskip("reproduce")


def test_quick_digits(tmp_path: Path) -> None:
    methods = ["standard-nystrom", "kmeans-nystrom", "di-nystrom", "ls-fourier", "ce-fourier"]
    rows = reproduce.main(
        [
            *("--dataset", "digits", "--quick", "--dims", "16", "--out", str(tmp_path)),
            *("--max-epochs", "2", "--methods", *methods),
        ]
    )
    assert [r["method"] for r in rows] == methods
    for row in rows:
        assert 0.5 < row["test_acc"] <= 1.0, row
        assert 0.0 <= row["svm_test_acc"] <= 1.0
        assert row["train_mse"] > 0 and row["test_mse"] > 0
        assert row["epochs"] == (0 if row["objective"] == "none" else 2)
    assert math.isnan(rows[0]["readout_test_acc"]) and not math.isnan(rows[-1]["readout_test_acc"])
    written = reproduce.read_csv(tmp_path / "digits.csv")
    assert len(written) == len(methods) and set(written[0]) == set(reproduce.FIELDS)
    assert (tmp_path / "digits_accuracy.png").stat().st_size > 0
    assert (tmp_path / "digits_mse.png").stat().st_size > 0


def test_expand_methods() -> None:
    assert reproduce.expand_methods(["ls", "di-fourier"]) == [
        "di-fourier",
        "ls-nystrom",
        "ls-fourier",
    ]
    with pytest.raises(ValueError, match="unknown method 'svm'"):
        reproduce.expand_methods(["svm"])
