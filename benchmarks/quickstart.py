"""The quick start as a new user runs it: ``kernel-layers fit --config quickstart`` in an
empty folder, then ``kernel-layers test --config quickstart --ckpt_path last``.

The record ``quickstart`` of ``results/recipes.json`` holds what the fit's summary
prints (the untrained map's and the trained model's test accuracy, the epochs run, the
epoch ``keep_best`` handed back and its validation accuracy), the last epoch's test
accuracy and the fit's wall seconds; README.md's quick-start output quotes them
(``tests/benchmarks/test_quickstart.py`` keeps the two equal).

Usage::

    python benchmarks/quickstart.py
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import records

RECORDS = Path(__file__).resolve().parent / "results" / "recipes.json"
FIT = ["fit", "--config", "quickstart"]
TEST = ["test", "--config", "quickstart", "--ckpt_path", "last"]
#: What the fit's summary prints, by figure.
SUMMARY = {
    "untrained_acc": r"untrained map: test/acc (\d\.\d+)",
    "test_acc": r"^\s*test/acc (\d\.\d+)\s+\(trained",
    "epochs": r"epochs: (\d+)",
    "best_epoch": r"model: epoch (\d+), the best on val/acc",
    "best_val_acc": r"the best on val/acc \((\d\.\d+); keep_best\)",
}


def summary_figures(text: str) -> dict[str, float]:
    """The figures of a fit's summary ``text`` (accuracies in %), by :data:`SUMMARY`.

    Raises:
        ValueError: a figure the summary does not print.
    """
    figures: dict[str, float] = {}
    for name, pattern in SUMMARY.items():
        found = re.search(pattern, text, flags=re.MULTILINE)
        if found is None:
            raise ValueError(f"quickstart: the fit's summary prints no {name} ({pattern!r})")
        value = float(found.group(1))
        figures[name] = int(value) if name.endswith("epoch") or name == "epochs" else value
    for name in ("untrained_acc", "test_acc", "best_val_acc"):
        figures[name] = round(100 * figures[name], 2)
    return figures


def test_accuracy(text: str) -> float:
    """The test accuracy (%) in ``kernel-layers test``'s output ``text``."""
    found = re.search(r"test/acc\s*[│|]?\s*(\d\.\d+)", text)
    if found is None:
        raise ValueError("quickstart: kernel-layers test printed no test/acc")
    return round(100 * float(found.group(1)), 2)


def _run(argv: list[str], folder: Path) -> str:
    done = subprocess.run(
        [sys.executable, "-c", "from kernel_layers.cli.entry import main; main()", *argv],
        cwd=folder,
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout + done.stderr


def main() -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch)
        start = time.perf_counter()
        fitted = _run(FIT, folder)
        seconds = time.perf_counter() - start
        tested = _run(TEST, folder)
    figures = {"map": "Nyström", "objective": "DI", "J": 20, **summary_figures(fitted)}
    figures["last_test_acc"] = test_accuracy(tested)
    figures["run_s"] = round(seconds, 1)
    new = records.record("quickstart", figures, "quickstart.py", [])
    stored = json.loads(RECORDS.read_text())
    records.store(RECORDS, new, stored["description"], stored["tables"])
    print(json.dumps(new, indent=1))
    return new


if __name__ == "__main__":
    main()
