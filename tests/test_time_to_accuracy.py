"""Smoke test of benchmarks/time_to_accuracy.py (adaptive vs fixed schedule), offline."""

from __future__ import annotations

import statistics
from pathlib import Path

import pytest

tta = pytest.importorskip("time_to_accuracy")


def test_schedules_seeds_and_merge(tmp_path: Path) -> None:
    common = ["--dataset", "digits", "--dims", "16", "--epochs", "4", "--step", "2"]
    first = tta.main([*common, "--repeats", "1", "--out", str(tmp_path / "a")])
    second = tta.main(
        [*common, "--repeats", "1", "--first-repeat", "1", "--out", str(tmp_path / "b")]
    )
    assert [(r["repeat"], r["schedule"]) for r in first + second] == [
        (0, "adaptive"),
        (0, "fixed"),
        (1, "adaptive"),
        (1, "fixed"),
    ]
    for row in first + second:
        assert 0.5 < row["test_acc"] <= 1.0
        if row["schedule"] == "fixed":  # 4 epochs, lr x0.1 after epochs 2 and 4
            assert (row["epochs"], row["decays"], row["stop_reason"]) == (4, 2, "max_epochs")
        else:
            assert 1 <= row["epochs"] <= 4
    name = "time_to_accuracy_digits.csv"
    parts = [str(tmp_path / "a" / name), str(tmp_path / "b" / name)]
    merged = tta.main(["--merge", *parts, "--dataset", "digits", "--out", str(tmp_path / "both")])
    assert merged == first + second
    table = tta.summary_table(merged).splitlines()
    fixed = next(line for line in table if line.startswith("| 16 | fixed |"))
    accs = [100 * r["test_acc"] for r in merged if r["schedule"] == "fixed"]
    assert f"{statistics.fmean(accs):.2f} ± {statistics.stdev(accs):.2f}" in fixed
    assert (tmp_path / "both" / name).read_text().count("\n") == 5  # header + 4 rows
    # One seed: the mean alone, no "± 0.0" that would read as a measured spread.
    one = next(line for line in tta.summary_table(first).splitlines() if "| fixed |" in line)
    assert one == (
        f"| 16 | fixed | 4.0 | {first[1]['seconds']:.1f} | {100 * first[1]['test_acc']:.2f} |"
    )
