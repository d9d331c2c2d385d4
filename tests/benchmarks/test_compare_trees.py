"""benchmarks/compare_trees.py: two trees timed side by side (here the same tree twice)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "compare_trees.py"


def test_the_same_tree_twice_gives_one_row_per_layer_and_size(tmp_path: Path) -> None:
    out = tmp_path / "rows.json"
    sizes = ["--sizes", "60,5,20", "80,6,30"]
    done = subprocess.run(
        [
            sys.executable,
            str(SCRIPT),
            str(ROOT),
            str(ROOT),
            "--rounds",
            "2",
            *sizes,
            "--json",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    rows = json.loads(out.read_text())
    assert [(r["layer"], r["size"]) for r in rows] == [
        ("fourier", [60, 5, 20]),
        ("fourier", [80, 6, 30]),
        ("nystrom", [60, 5, 20]),
        ("nystrom", [80, 6, 30]),
    ]
    assert all(r["a_ms"] > 0 and r["b_ms"] > 0 and r["b_over_a"] > 0 for r in rows)
    assert done.stdout.count("\n| ") == 4


def test_sizes_must_be_triples() -> None:
    done = subprocess.run(
        [sys.executable, str(SCRIPT), str(ROOT), str(ROOT), "--sizes", "60,5"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode != 0
    assert "--sizes takes B,d,J triples, got ['60,5']" in done.stderr


@pytest.mark.parametrize("flag", ["--help"])
def test_help_names_the_method(flag: str) -> None:
    done = subprocess.run(
        [sys.executable, str(SCRIPT), flag], capture_output=True, text=True, check=True
    )
    assert "side by side" in done.stdout
