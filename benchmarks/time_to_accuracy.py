"""Time to accuracy: the DI stopping rule vs the reference code's fixed schedule.

Trains DI-Nystrom (``reproduce.py``'s ``di-nystrom``: random-row landmarks, NysDI, Adam)
twice per seed on the same data, from the same initial landmarks:

* ``adaptive``: :class:`kernel_layers.callbacks.PlateauDecay` (lr x0.1 when ``train/di_epoch``
  saturates, patience ``--decay-patience``) + :class:`kernel_layers.callbacks.DISaturationStopping`
  (stop when DI fails to improve after a decay), at most ``--epochs`` epochs;
* ``fixed``: the DI paper's reference implementation: ``--epochs`` epochs (500), lr x0.1
  every ``--step`` epochs (100), no early stop.

Reports epochs, wall time of ``fit`` and the ridge read-out's test accuracy of each, and
writes ``<out>/time_to_accuracy_<dataset>.csv``.

``--recipe`` runs the curve mode instead (``recipe_curve.py``): a shipped recipe's test
accuracy against wall time, beside scikit-learn's ``Nystroem``.

Usage::

    python benchmarks/time_to_accuracy.py --dataset digits --dims 100 --repeats 3
    python benchmarks/time_to_accuracy.py --dataset fashion-mnist \\
        --root /tmp/fmnist/x/usr/share/datasets/fashion-mnist --dims 100 --repeats 1 \\
        --first-repeat 1 --threads 1 --out /tmp/tta1      # one seed per process
    python benchmarks/time_to_accuracy.py --dataset fashion-mnist \\
        --merge /tmp/tta0/time_to_accuracy_fashion-mnist.csv \\
                /tmp/tta1/time_to_accuracy_fashion-mnist.csv
"""

from __future__ import annotations

import argparse
import csv
import statistics
import sys
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch
from lightning.pytorch import Callback, seed_everything
from recipe_curve import curve_main  # sibling scripts (the script directory)
from reproduce import quiet_lightning
from section5_grid import DATASETS, RHO, make_datamodule, make_layer, train
from section5_readouts import evaluate, features_of
from section5_results import format_mean_std, read_csv
from typing_extensions import override

from kernel_layers import KernelClassifier
from kernel_layers.cli.allocator import keep_freed_host_memory
from kernel_layers.selection.gamma import gamma_heuristic
from kernel_layers.training.heads import DEFAULT_HEAD_RHO


class StepDecay(Callback):
    """``StepLR``: multiply every param group's lr by ``factor`` every ``step`` epochs.

    Args:
        step: epochs between decays (``>= 1``).
        factor: multiplier in ``(0, 1)``.
    """

    def __init__(self, step: int, factor: float = 0.1) -> None:
        super().__init__()
        self.step, self.factor = step, factor

    @override
    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if (trainer.current_epoch + 1) % self.step == 0:
            for opt in trainer.optimizers:
                for group in opt.param_groups:
                    group["lr"] *= self.factor


def run(args: argparse.Namespace) -> list[dict[str, Any]]:
    """Both schedules for every ``J`` and seed; returns the CSV rows."""
    rows = []
    for j in args.dims:
        dm = make_datamodule(args.dataset, j, root=args.root)
        dm.setup("fit")
        x_train, y_train = dm.train_dataset.tensors
        x_test, y_test = dm.test_dataset.tensors
        gamma = args.gamma if args.gamma is not None else gamma_heuristic(x_train)
        for repeat in range(args.first_repeat, args.first_repeat + args.repeats):
            for schedule in ("adaptive", "fixed"):
                seed_everything(repeat, workers=True, verbose=False)
                layer = make_layer("di-nystrom", x_train, j, gamma, seed=repeat)
                model = KernelClassifier(
                    layer,
                    num_classes=dm.num_classes,
                    objective="di",
                    rho=RHO,
                    lr=args.lr,
                    head_rho=DEFAULT_HEAD_RHO,
                )
                adaptive = schedule == "adaptive"
                epochs, decays, reason, seconds = train(
                    model,
                    dm,
                    max_epochs=args.epochs,
                    decay_patience=args.decay_patience,
                    extra_callbacks=() if adaptive else (StepDecay(args.step),),
                    adaptive=adaptive,
                )
                if not adaptive:
                    decays = epochs // args.step
                res = evaluate(
                    features_of(model.kernel_layer, x_train),
                    y_train,
                    features_of(model.kernel_layer, x_test),
                    y_test,
                    dm.num_classes,
                    svm=False,
                )
                row = {
                    "dataset": args.dataset,
                    "J": j,
                    "repeat": repeat,
                    "schedule": schedule,
                    "epochs": epochs,
                    "decays": decays,
                    "stop_reason": reason,
                    "seconds": seconds,
                    "train_acc": res.train_acc,
                    "test_acc": res.test_acc,
                    "test_mse": res.test_mse,
                }
                rows.append(row)
                print(
                    f"{args.dataset} J={j} r={repeat} {schedule:8s} epochs {epochs:4d} "
                    f"decays {decays} {seconds:7.1f}s test {100 * res.test_acc:.2f}%",
                    flush=True,
                )
    return rows


def _typed(row: dict[str, str]) -> dict[str, Any]:
    """A CSV row with its numbers parsed back (``J`` as int, timings and scores as float)."""
    out: dict[str, Any] = dict(row)
    for key in ("J", "repeat", "epochs", "decays"):
        out[key] = int(row[key])
    for key in ("seconds", "train_acc", "test_acc", "test_mse"):
        out[key] = float(row[key])
    return out


def summary_table(rows: list[dict[str, Any]]) -> str:
    """Markdown table: mean ± std over seeds per ``(J, schedule)`` (the mean for one seed)."""

    def ms(values: list[float], scale: float = 1.0, fmt: str = ".1f") -> str:
        std = statistics.stdev(values) if len(values) > 1 else 0.0
        return format_mean_std(statistics.fmean(values), std, len(values), scale, fmt)

    lines = [
        "| J | schedule | epochs | fit seconds | test acc (%) |",
        "|---|---|---|---|---|",
    ]
    for j in sorted({r["J"] for r in rows}):
        for schedule in ("adaptive", "fixed"):
            sel = [r for r in rows if r["J"] == j and r["schedule"] == schedule]
            lines.append(
                f"| {j} | {schedule} | {ms([r['epochs'] for r in sel])} | "
                f"{ms([r['seconds'] for r in sel])} | "
                f"{ms([r['test_acc'] for r in sel], 100, '.2f')} |"
            )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    """Parse arguments, run, write the CSV and print the table."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--dataset", choices=DATASETS, default="digits")
    p.add_argument("--root", default=None)
    p.add_argument("--dims", type=int, nargs="+", default=[100])
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--first-repeat", type=int, default=0, help="seed of the first repeat")
    p.add_argument("--gamma", type=float, default=None)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--epochs", type=int, default=500, help="fixed schedule length (and cap)")
    p.add_argument("--step", type=int, default=100, help="fixed schedule: lr x0.1 every step")
    p.add_argument("--decay-patience", type=int, default=5)
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--out", default=str(Path(__file__).parent / "results"))
    p.add_argument(
        "--merge",
        nargs="+",
        default=None,
        metavar="CSV",
        help="concatenate CSVs of parallel runs into the output CSV and print the table",
    )
    p.add_argument(
        "--recipe",
        default=None,
        help="curve mode: run this recipe (extra CLI arguments after --) and record test "
        "accuracy against wall time, with scikit-learn's Nystroem + LinearSVC / ridge",
    )
    p.add_argument("--every", type=int, default=1, help="curve mode: epochs between points")
    p.add_argument("--no-incumbent", action="store_true", help="curve mode: skip scikit-learn")
    p.add_argument(
        "--curves",
        nargs="+",
        default=None,
        metavar="JSONL",
        help="curve mode: append the run to the first file; table and plot of all runs",
    )
    argv = list(sys.argv[1:] if argv is None else argv)
    cut = argv.index("--") if "--" in argv else len(argv)
    p.add_argument(
        "--host-memory",
        choices=["keep", "default"],
        default="keep",
        help="keep: freed host memory is reused (keep_freed_host_memory, as kernel-layers "
        "does); default: glibc's defaults",
    )
    args = p.parse_args(argv[:cut])
    if args.host_memory == "keep":
        keep_freed_host_memory()
    extra = argv[cut + 1 :]
    if args.recipe or args.curves:
        if args.threads:
            torch.set_num_threads(args.threads)
        return curve_main(args, extra)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.merge:
        rows = [_typed(row) for path in args.merge for row in read_csv(Path(path))]
    else:
        quiet_lightning()
        if args.threads:
            torch.set_num_threads(args.threads)
        rows = run(args)
    with open(out / f"time_to_accuracy_{args.dataset}.csv", "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    print(summary_table(rows))
    return rows


if __name__ == "__main__":
    main()
