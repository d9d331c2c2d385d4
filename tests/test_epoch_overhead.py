"""benchmarks/epoch_overhead.py on the quick-start recipe: it builds the recipe as the
CLI does, times both kinds of epoch and reports consistent parts."""

from __future__ import annotations

import json
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

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


def test_build_parses_its_arguments_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The script's own command line is not LightningCLI's: no "both args and command line"
    warning, the recipe's arguments win, and ``sys.argv`` is left as it was."""
    epoch_overhead = pytest.importorskip("epoch_overhead")
    monkeypatch.chdir(tmp_path)
    script_argv = ["epoch_overhead.py", "quickstart", "--epochs", "2"]
    monkeypatch.setattr(sys, "argv", list(script_argv))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        cli = epoch_overhead.build("quickstart", ["--trainer.max_epochs", "3"])
    assert cli.trainer.max_epochs == 3
    assert not [w for w in caught if "args parameter" in str(w.message)], caught
    assert sys.argv == script_argv
