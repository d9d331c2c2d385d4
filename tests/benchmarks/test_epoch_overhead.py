"""benchmarks/epoch_overhead.py on the quick-start recipe: it builds the recipe as the
CLI does, times both kinds of epoch and reports consistent parts."""

from __future__ import annotations

import json
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "epoch_overhead.py"


def test_epoch_overhead_reports_the_recipe_epoch_and_its_parts(tmp_path: Path) -> None:
    out = tmp_path / "rows.jsonl"
    args = [sys.executable, str(SCRIPT), "quickstart", "--epochs", "2", "--json", str(out)]
    args += ["--check-every", "epoch"]  # the model really gets it (recorded in the row)
    extra = ["--", "--trainer.check_val_every_n_epoch", "2"]
    subprocess.run(args + extra, check=True, capture_output=True, cwd=tmp_path, timeout=600)
    row = json.loads(out.read_text().splitlines()[-1])
    assert row["recipe"] == "quickstart" and row["extra"] == extra[1:]
    assert row["check_every"] == "epoch"
    assert row["steps_timing"] == "interleaved"  # the default
    assert row["timed_epochs"] == 2
    assert row["batches_per_epoch"] == 3  # 1257 digits training rows, batches of 400
    assert 0 < row["steps_s"] and 0 < row["train_batches_s"] < row["epoch_s"]
    assert row["validation_s"] > 0  # one validation in the 2 timed epochs
    parts = row["train_batches_s"] + row["validation_s"] + row["rest_s"]
    assert abs(parts - row["epoch_s"]) < 1e-3
    # the row's times are rounded to 1e-4 s and its ratio to 1e-3: a ratio recomputed
    # from them differs by that rounding, which grows as the steps get faster
    slack = row["ratio"] * 5e-5 * (1 / row["steps_s"] + 1 / row["epoch_s"]) + 5e-4
    assert abs(row["ratio"] - row["epoch_s"] / row["steps_s"]) <= slack


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


def test_interleaved_steps_epochs_are_taken_out_of_the_epochs_they_interrupt(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    epoch_overhead = pytest.importorskip("epoch_overhead")
    import torch

    now = [0.0]
    monkeypatch.setattr(epoch_overhead.time, "perf_counter", lambda: now[0])

    def steps_alone() -> float:  # a steps-alone epoch of 2 s
        now[0] += 2.0
        return 2.0

    clock = epoch_overhead.EpochClock(torch.device("cpu"), False, steps_alone)
    for length in (5.0, 3.0, 4.0):  # three Lightning epochs (the first is dropped)
        clock.on_train_epoch_start(None, None)
        now[0] += length
    clock.on_train_end(None, None)
    assert clock.steps == [2.0, 2.0, 2.0]
    assert clock.epochs() == [3.0, 4.0]  # not 5.0 / 6.0: the steps epochs are not counted


def test_steps_around_the_fit_still_runs(tmp_path: Path) -> None:
    out = tmp_path / "rows.jsonl"
    args = [sys.executable, str(SCRIPT), "quickstart", "--epochs", "2", "--json", str(out)]
    args += ["--steps", "around", "--", "--trainer.check_val_every_n_epoch", "2"]
    subprocess.run(args, check=True, capture_output=True, cwd=tmp_path, timeout=600)
    row = json.loads(out.read_text().splitlines()[-1])
    assert row["steps_timing"] == "around" and row["steps_s"] > 0 and row["epoch_s"] > 0


def test_epochs_must_cover_whole_validation_periods(tmp_path: Path) -> None:
    args = [sys.executable, str(SCRIPT), "quickstart", "--epochs", "3"]
    args += ["--", "--trainer.check_val_every_n_epoch", "2"]
    done = subprocess.run(args, capture_output=True, text=True, cwd=tmp_path, timeout=600)
    assert done.returncode == 2
    assert (
        "argument --epochs must be a positive multiple of the recipe's "
        "check_val_every_n_epoch (2), got 3"
    ) in done.stderr
