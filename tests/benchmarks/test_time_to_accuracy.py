"""Smoke test of benchmarks/time_to_accuracy.py (adaptive vs fixed schedule), offline."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest

tta = pytest.importorskip("time_to_accuracy")
recipe_curve = pytest.importorskip("recipe_curve")


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


def test_recipe_curve_with_incumbents(tmp_path: Path) -> None:
    """Curve mode runs a shipped recipe as the CLI builds it: a point at epoch 0 (the
    untrained map, same read-out) and every --every epochs, wall times increasing,
    scikit-learn's incumbents on the same data; the JSONL, table and plot are written."""
    curves = tmp_path / "curves.jsonl"
    args = ["--recipe", "quickstart", "--every", "2", "--curves", str(curves)]
    tta.main([*args, "--", "--trainer.max_epochs", "4"])
    (run,) = [json.loads(line) for line in curves.read_text().splitlines()]
    assert run["J"] == 20 and [p["epoch"] for p in run["curve"]] == [0, 2, 4]
    walls = [p["wall_s"] for p in run["curve"]]
    assert 0 <= walls[0] < walls[1] < walls[2]
    assert all(0.5 < p["test_acc"] <= 1 for p in run["curve"])
    assert [i["method"] for i in run["incumbents"]] == ["Nystroem + LinearSVC", "Nystroem + ridge"]
    assert curves.with_suffix(".png").stat().st_size > 0
    extra = ["--data.init_args.root", "/x", "--model.lr", "1e-2"]
    assert recipe_curve.settings(extra) == "--model.lr 1e-2"
    table = recipe_curve.curve_table([run])
    assert "| quickstart | --trainer.max_epochs 4 | 20 |" in table
