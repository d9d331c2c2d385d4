"""benchmarks/epoch_overhead.py on the quick-start recipe: it builds the recipe as the
CLI does, times both kinds of epoch and reports consistent parts."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "epoch_overhead.py"


def test_epoch_overhead_reports_the_recipe_epoch_and_its_parts(tmp_path: Path) -> None:
    out = tmp_path / "rows.jsonl"
    args = [sys.executable, str(SCRIPT), "quickstart", "--epochs", "2", "--json", str(out)]
    args += ["--check-every", "epoch"]  # the model really gets it (recorded in the row)
    extra = ["--", "--trainer.check_val_every_n_epoch", "2"]
    subprocess.run(args + extra, check=True, capture_output=True, cwd=tmp_path, timeout=600)
    row = json.loads(out.read_text().splitlines()[-1])
    assert row["recipe"] == "quickstart" and row["extra"] == extra[1:]
    assert row["check_every"] == "epoch"
    assert row["batches_per_epoch"] == 3  # 1257 digits training rows, batches of 400
    assert 0 < row["steps_s"] and 0 < row["train_batches_s"] < row["epoch_s"]
    assert row["validation_s"] > 0  # one validation in the 2 timed epochs
    parts = row["train_batches_s"] + row["validation_s"] + row["rest_s"]
    assert abs(parts - row["epoch_s"]) < 1e-3
    assert abs(row["ratio"] - row["epoch_s"] / row["steps_s"]) < 0.01 * row["ratio"]
