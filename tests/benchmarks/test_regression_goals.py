"""benchmarks/regression_goals.py: the regression benchmark's goal computed from a small
set of fake records, and its table as report.py renders it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

regression_goals = pytest.importorskip("regression_goals")
report = pytest.importorskip("report")


def _record(name: str, r2: float, **extra: float) -> dict[str, Any]:
    return {"name": name, "figures": {"r2": r2, **extra}}


def _records() -> list[dict[str, Any]]:
    # a: last epoch 0.9 above 0.8 and 0.85; best on held-out 0.84 below Nystroem's 0.85
    # b: last epoch 0.5 equal to the untrained 0.5: not above; no best on held-out
    # c: no Nystroem record: no row
    # means: a's last epoch 0.81 above 0.80 and 0.79 over 3 seeds
    return [
        _record("a/untrained", 0.80),
        _record("a/nystroem_ridge", 0.85),
        _record("a/di_last", 0.90),
        _record("a/di", 0.84),
        _record("b/untrained", 0.50),
        _record("b/nystroem_ridge", 0.40),
        _record("b/di_last", 0.50),
        _record("c/untrained", 0.3),
        _record("c/di_last", 0.9),
        _record("a/untrained@mean of seeds", 0.80, seeds=3),
        _record("a/nystroem_ridge@mean of seeds", 0.79, seeds=3),
        _record("a/di_last@mean of seeds", 0.81, seeds=3),
        _record("a/di_last@seed1", 0.1),
    ]


def test_the_goal_rows_mark_what_is_above_both_baselines() -> None:
    rows = regression_goals.goal_rows(_records())
    assert [(r["dataset"], r["runs"]) for r in rows] == [
        ("a", "seed 0"),
        ("b", "seed 0"),
        ("a", "mean of 3 seeds"),
    ]
    assert rows[0]["above"] == {"di_last": True, "di": False}
    assert rows[1]["above"] == {"di_last": False}  # a tie is not above
    assert rows[2]["above"] == {"di_last": True}
    assert rows[2]["r2"] == {"untrained": 0.80, "nystroem_ridge": 0.79, "di_last": 0.81}


def test_the_goal_table_as_report_renders_it(tmp_path: Path) -> None:
    data = {
        "description": "fake",
        "records": _records(),
        "tables": {"regression_goals": {"kind": "regression_goals"}},
    }
    (tmp_path / "regression.json").write_text(json.dumps(data))
    table = report.render("regression_goals", tmp_path).splitlines()
    assert table[0] == (
        "| data set | runs | untrained map | `Nystroem` + `RidgeCV` | DI, last epoch "
        "| DI, best on held-out rows |"
    )
    assert (
        table[2]
        == "| a | seed 0 | 0.8000 | 0.8500 | 0.9000 (above both) | 0.8400 (not above both) |"
    )
    assert table[3] == "| b | seed 0 | 0.5000 | 0.4000 | 0.5000 (not above both) | - |"
    assert table[4] == "| a | mean of 3 seeds | 0.8000 | 0.7900 | 0.8100 (above both) | - |"
    assert len(table) == 5
