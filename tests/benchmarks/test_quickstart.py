"""benchmarks/quickstart.py: the quick start's figures, and README.md quoting its record."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

quickstart = pytest.importorskip("quickstart")

ROOT = Path(__file__).resolve().parents[2]

SUMMARY = """kernel-layers fit: done
  untrained map: test/acc 0.9089
  test/acc 0.9756  (trained; +6.67 points)
  epochs: 60 (max_epochs=60 reached)
  model: epoch 52, the best on val/acc (0.9926; keep_best); the checkpoint below holds ...
"""


def test_the_summarys_figures_are_read_in_percent() -> None:
    assert quickstart.summary_figures(SUMMARY) == {
        "untrained_acc": 90.89,
        "test_acc": 97.56,
        "epochs": 60,
        "best_epoch": 52,
        "best_val_acc": 99.26,
    }
    with pytest.raises(ValueError, match=r"the fit's summary prints no best_epoch"):
        quickstart.summary_figures(SUMMARY.replace("model: epoch 52", "model: the last"))


def test_the_test_commands_accuracy_is_read_from_its_table() -> None:
    table = "│         test/acc          │    0.9755555391311646     │\n"
    assert quickstart.test_accuracy(table) == 97.56
    with pytest.raises(ValueError, match=r"printed no test/acc"):
        quickstart.test_accuracy("nothing")


def test_the_readme_quotes_the_quickstart_record() -> None:
    stored = json.loads((ROOT / "benchmarks" / "results" / "recipes.json").read_text())
    (figures,) = [r["figures"] for r in stored["records"] if r["name"] == "quickstart"]
    readme = (ROOT / "README.md").read_text()
    block = re.search(r"```text\nkernel-layers fit: done\n(.*?)```", readme, flags=re.DOTALL)
    assert block is not None
    assert quickstart.summary_figures(block.group(0)) == {
        key: figures[key] for key in quickstart.SUMMARY
    }
    last = re.search(r"tests the saved last epoch \((\d\.\d+)", readme)
    assert last is not None and round(100 * float(last.group(1)), 2) == figures["last_test_acc"]
