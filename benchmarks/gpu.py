"""Everything a GPU is needed for, in one call: the CUDA tests, then the GPU figures.

``benchmarks/gpu.sh`` installs the project on a machine without network and runs this
script; each step runs in its own process under its share of ``--budget`` seconds, and
the record file is rewritten after every step, so a run cut short keeps what finished.

Steps (records in ``<out>/gpu.json``, the format of ``benchmarks/report.py``):

1. ``tests``: ``pytest -m gpu`` (every CUDA case of the ``device`` fixture and the other
   CUDA tests): collected, passed, failed, skipped.
2. ``di_step``: one DI step (forward + backward, float32) of both layers at
   ``(B, d, J)`` = (1000, 54, 500), (2000, 784, 1000), (4000, 784, 2000), timed with CUDA
   events against the same GPU's matrix-product floor (``benchmarks/di_step.py``), with
   the step's peak GPU memory.
3. ``recipe``: ``mnist_nystrom_di`` to its stopping rule, test accuracy after every epoch
   off the clock (``benchmarks/time_to_accuracy.py --recipe``): epochs, final accuracy,
   training time to 98 % test accuracy, peak memory.
4. ``epoch``: the same recipe's epoch against its DI steps alone
   (``benchmarks/epoch_overhead.py``).
5. ``cnn``: one epoch of ``mnist_cnn_nystrom_di`` against its steps alone.

``--quick`` rehearses every step on any device in about a minute: the tests are only
collected, the DI step runs at one small size, and the recipes run two epochs at J = 16
on whatever MNIST files ``--data`` holds (a test writes small ones).

Usage::

    python benchmarks/gpu.py --device cuda --data data --commit abc1234
    python benchmarks/gpu.py --device cpu --quick --data /tmp/mnist-like --out /tmp/r
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import records
import torch

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "benchmarks"
SIZES = ["1000,54,500", "2000,784,1000", "4000,784,2000"]
#: Overrides that make a recipe a two-epoch rehearsal on a few hundred rows.
QUICK_RECIPE = [
    "--trainer.max_epochs",
    "2",
    "--model.kernel_layer.init_args.out_features",
    "16",
    "--data.init_args.batch_size",
    "64",
]
SUMMARY = re.compile(r"(\d+)(?:/\d+)? (passed|failed|skipped|error|test)s? ?(?:collected)?")
#: Each step's share of the budget (the rest is the start-up of each process).
SHARES = {"tests": 0.3, "di_step": 0.15, "recipe": 0.25, "epoch": 0.12, "cnn": 0.12}


def run(cmd: list[str], timeout: float) -> tuple[int, str, float]:
    """Run ``cmd`` from the repository root; its status (124: out of time), its output
    (stdout and stderr), and its seconds."""
    start = time.perf_counter()
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    try:
        done = subprocess.run(
            cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout, env=env
        )
        status, output = done.returncode, done.stdout + done.stderr
    except subprocess.TimeoutExpired as err:
        status = 124
        output = "".join(
            part.decode() if isinstance(part, bytes) else (part or "")
            for part in (err.stdout, err.stderr)
        )
    seconds = time.perf_counter() - start
    print(f"$ {' '.join(cmd)}\n{output[-3000:]}\n(status {status}, {seconds:.1f} s)", flush=True)
    return status, output, seconds


#: A test pytest's short summary reports as failed (``FAILED tests/x.py::name[param]``).
FAILED_TEST = re.compile(r"^(?:FAILED|ERROR) (\S+)", re.M)


def pytest_counts(output: str) -> dict[str, int]:
    """The counts of pytest's summary line (``3 passed, 1 failed ...``, or with
    ``--collect-only`` ``12/300 tests collected (288 deselected)``)."""
    counts = {"collected": 0, "passed": 0, "failed": 0, "skipped": 0, "errors": 0}
    for number, word in SUMMARY.findall(output):
        counts[{"error": "errors", "test": "collected"}.get(word, word)] = int(number)
    if not counts["collected"]:
        counts["collected"] = counts["passed"] + counts["failed"] + counts["skipped"]
    return counts


DESCRIPTION = (
    "The GPU figures of benchmarks/gpu.py: the CUDA tests, the DI step against the GPU's "
    "matrix-product floor, the MNIST recipes' time to accuracy, epoch overhead and peak "
    "GPU memory."
)


#: The tables of the record file (``benchmarks/report.py``), over the records present.
TABLE_COLUMNS: dict[str, list[list[str]]] = {
    "gpu_tests": [
        ["machine", "{machine_class}"],
        ["collected", "{collected}"],
        ["passed", "{passed}"],
        ["failed", "{failed}"],
        ["seconds", "{seconds:.0f}"],
    ],
    "gpu_di_step": [
        ["layer", "{layer}"],
        ["B, d, J", "{B}, {d}, {J}"],
        ["DI step ms", "{ours_ms:.2f}"],
        ["product floor ms", "{floor_ms:.2f}"],
        ["ratio", "{ratio:.1f}"],
        ["peak MiB", "{peak_mib:.0f}"],
    ],
    "gpu_recipe": [
        ["recipe", "{name}"],
        ["epochs", "{epochs}"],
        ["test accuracy", "{test_acc:.2f} %"],
        ["training s", "{train_s:.1f}"],
        ["to 98 %", "{to_target_s:.1f} s (epoch {to_target_epoch})"],
    ],
    "gpu_epoch": [
        ["run", "{name}"],
        ["steps s", "{steps_s:.3f}"],
        ["epoch s", "{epoch_s:.3f}"],
        ["epoch / steps", "{ratio:.2f}"],
        ["peak MiB", "{peak_mib:.0f}"],
    ],
}


def tables(stored: list[dict[str, Any]]) -> dict[str, Any]:
    """The rows tables of the records that measured something (a failed step records
    only its ``status`` and ``seconds``)."""
    names = [r["name"] for r in stored if set(r["figures"]) - {"status", "seconds"}]
    rows = {
        "gpu_tests": [n for n in names if n == "tests"],
        "gpu_di_step": [n for n in names if n.startswith("di_step ")],
        "gpu_recipe": [n for n in names if n == "mnist_nystrom_di"],
        "gpu_epoch": [n for n in names if n in ("epoch", "cnn")],
    }
    return {
        table: {"rows": rows[table], "columns": columns} for table, columns in TABLE_COLUMNS.items()
    }


class Steps:
    """The steps of one run and the record file they fill."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.device = torch.device(args.device)
        self.out = Path(args.out)
        self.out.mkdir(parents=True, exist_ok=True)
        self.scratch = Path(tempfile.mkdtemp(prefix="gpu_"))
        self.stored: list[dict[str, Any]] = []
        self.accelerator = "gpu" if self.device.type == "cuda" else "cpu"

    def budget(self, step: str) -> float:
        return max(30.0, SHARES[step] * self.args.budget)

    def add(self, name: str, figures: dict[str, Any], command: list[str]) -> None:
        """Add a record and rewrite the record file."""
        record = {
            "name": name,
            "figures": figures,
            "command": self.shown(command),
            "commit": self.args.commit,
            "machine": records.machine(self.device),
            "date": time.strftime("%Y-%m-%d"),
        }
        self.stored = records.store(self.out / "gpu.json", record, DESCRIPTION, tables)

    def shown(self, command: list[str]) -> str:
        """``command`` as a record shows it: ``python``, paths from the repository root,
        ``DATA`` and ``TMP`` for this run's folders."""
        words = ["python" if c == sys.executable else c for c in command]
        text = " ".join(words).replace(f"{ROOT}{os.sep}", "")
        return text.replace(str(self.scratch), "TMP").replace(self.args.data, "DATA")

    def recipe_args(self, *extra: str) -> list[str]:
        root = str(Path(self.args.data) / "mnist")
        args = ["--data.init_args.root", root, "--trainer.accelerator", self.accelerator]
        return [*args, *(QUICK_RECIPE if self.args.quick else []), *extra]

    # ------------------------------------------------------------------ steps
    def tests(self) -> None:
        cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "gpu"]
        cmd += ["--collect-only"] if self.args.quick else []
        status, output, seconds = run([*cmd, "tests"], self.budget("tests"))
        figures: dict[str, Any] = {**pytest_counts(output), "seconds": round(seconds, 1)}
        figures["failed_tests"] = sorted(set(FAILED_TEST.findall(output)))
        figures["status"] = status
        self.add("tests", figures, cmd)

    def di_step(self) -> None:
        rows_path = self.scratch / "di_step.json"
        cmd = [sys.executable, str(BENCH / "di_step.py"), "--device", self.args.device]
        cmd += ["--dtype", "float32", "--no-naive", "--no-throughput", "--no-agreement"]
        cmd += ["--no-memory-scaling", "--json", str(rows_path)]
        if self.args.quick:
            cmd += ["--sizes", "300,20,50", "--repeats", "2", "--no-memory"]
        else:
            cmd += ["--sizes", *SIZES, "--repeats", "20"]
        status, _, _ = run(cmd, self.budget("di_step"))
        if status != 0 or not rows_path.exists():
            self.add("di_step", {"status": status}, cmd)
            return
        rows = json.loads(rows_path.read_text())
        for row in rows["steps"] if isinstance(rows, dict) else rows:
            figures = {
                key: None if row[key] != row[key] else row[key]  # NaN: not measured
                for key in ("layer", "B", "d", "J", "ours_ms", "floor_ms", "ratio", "peak_mib")
            }
            self.add(f"di_step {row['layer']} {row['B']},{row['d']},{row['J']}", figures, cmd)

    def recipe(self) -> None:
        curves = self.scratch / "recipe.jsonl"
        cmd = [sys.executable, str(BENCH / "time_to_accuracy.py"), "--recipe"]
        cmd += ["mnist_nystrom_di", "--no-incumbent", "--curves", str(curves), "--"]
        cmd += self.recipe_args()
        status, _, seconds = run(cmd, self.budget("recipe"))
        if status != 0 or not curves.exists():
            self.add("recipe", {"status": status, "seconds": round(seconds, 1)}, cmd)
            return
        result = json.loads(curves.read_text().splitlines()[-1])
        curve = result["curve"]
        reached = next((p for p in curve if p["test_acc"] >= self.args.target), None)
        figures = {
            "epochs": curve[-1]["epoch"],
            "test_acc": round(100 * curve[-1]["test_acc"], 2),
            "train_s": curve[-1]["wall_s"],
            "target_acc": round(100 * self.args.target, 2),
            "to_target_s": None if reached is None else reached["wall_s"],
            "to_target_epoch": None if reached is None else reached["epoch"],
            "peak_mib": result.get("peak_mib"),
        }
        self.add("mnist_nystrom_di", figures, cmd)

    def _epoch(self, name: str, recipe: str, *extra: str) -> None:
        rows_path = self.scratch / f"{name}.jsonl"
        cmd = [sys.executable, str(BENCH / "epoch_overhead.py"), recipe]
        cmd += ["--device", self.args.device, "--json", str(rows_path), *extra, "--"]
        cmd += self.recipe_args("--trainer.check_val_every_n_epoch", "1")
        status, _, _ = run(cmd, self.budget(name))
        if status != 0 or not rows_path.exists():
            self.add(name, {"status": status}, cmd)
            return
        row = json.loads(rows_path.read_text().splitlines()[-1])
        keys = ("steps_s", "epoch_s", "ratio", "batches_per_epoch", "check_every", "peak_mib")
        self.add(name, {key: row[key] for key in keys}, cmd)

    def epoch(self) -> None:
        self._epoch("epoch", "mnist_nystrom_di", "--epochs", "2" if self.args.quick else "5")

    def cnn(self) -> None:
        self._epoch("cnn", "mnist_cnn_nystrom_di", "--epochs", "1")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    parser.add_argument("--quick", action="store_true", help="a rehearsal of every step")
    parser.add_argument("--data", default="data", help="the folder holding mnist/")
    parser.add_argument("--out", default=str(BENCH / "results"), help="where gpu.json goes")
    parser.add_argument("--budget", type=float, default=450.0, help="seconds for all steps")
    parser.add_argument("--target", type=float, default=0.98, help="test accuracy to time")
    parser.add_argument("--commit", default=None, help="the commit measured (else git's)")
    parser.add_argument(
        "--steps", nargs="+", default=list(SHARES), choices=list(SHARES), help="steps to run"
    )
    args = parser.parse_args(argv)
    args.data = str(Path(args.data).resolve())  # the steps' scripts may run elsewhere
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("argument --device: 'cuda' asked for, but torch sees no CUDA device")
    if args.commit is None:
        found = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
        )
        args.commit = found.stdout.strip() or "unknown"
    steps = Steps(args)
    actions: dict[str, Callable[[], None]] = {
        "tests": steps.tests,
        "di_step": steps.di_step,
        "recipe": steps.recipe,
        "epoch": steps.epoch,
        "cnn": steps.cnn,
    }
    for name in args.steps:
        actions[name]()
    print(f"records: {steps.out / 'gpu.json'}")
    failed = [r["name"] for r in steps.stored if r["figures"].get("status", 0) != 0]
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
