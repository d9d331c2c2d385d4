"""The curve mode of ``time_to_accuracy.py`` (``--recipe``): a shipped recipe run as
``kernel-layers fit`` builds it, its test accuracy every ``--every`` epochs against the
fit's wall time (the evaluation off the clock), scikit-learn's ``Nystroem`` + ``LinearSVC``
/ ridge on the same data beside it; ``--curves`` appends the run to a JSON-lines file and
draws a table and a plot of every run there."""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch
from lightning.pytorch import Callback
from reproduce import quiet_lightning  # sibling scripts (the script directory)
from typing_extensions import override

from kernel_layers import KernelClassifier


class TestCurve(Callback):
    """Test accuracy of the ridge read-out every ``every`` epochs against the fit's wall
    time, the evaluation itself (a read-out refit and a test pass) off the clock.

    The first point (epoch 0) is the untrained map with the same read-out.
    """

    def __init__(self, x_test: torch.Tensor, y_test: torch.Tensor, every: int) -> None:
        self.x_test, self.y_test, self.every = x_test, y_test, every
        self.rows: list[dict[str, Any]] = []
        self._start = self._paused = 0.0

    def _point(self, model: KernelClassifier, epoch: int) -> None:
        pause = time.perf_counter()
        wall = pause - self._start - self._paused
        training = model.training
        model.refit_head()
        model.eval()
        with torch.no_grad():
            scores = torch.cat(
                [model.scores(model(x.to(model.device))) for x in self.x_test.split(4096)]
            )
        model.train(training)
        acc = float((scores.argmax(1).cpu() == self.y_test).double().mean())
        lr = model.trainer.optimizers[0].param_groups[0]["lr"] if model.trainer.optimizers else 0
        self.rows.append({"epoch": epoch, "wall_s": round(wall, 3), "test_acc": acc, "lr": lr})
        print(f"epoch {epoch:4d} {wall:8.1f}s test {100 * acc:.2f}% lr {lr:.0e}", flush=True)
        self._paused += time.perf_counter() - pause

    @override
    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._start, self._paused = time.perf_counter(), 0.0

    @override
    def on_train_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if trainer.current_epoch == 0 and not self.rows:  # after the module's landmark draw
            assert isinstance(pl_module, KernelClassifier)
            self._point(pl_module, 0)

    @override
    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        epoch = trainer.current_epoch + 1
        if epoch % self.every == 0 or trainer.should_stop:
            assert isinstance(pl_module, KernelClassifier)
            self._point(pl_module, epoch)


def incumbent(
    x_train: torch.Tensor,
    y_train: torch.Tensor,
    x_test: torch.Tensor,
    y_test: torch.Tensor,
    width: int,
    gamma: float,
    seed: int,
) -> list[dict[str, Any]]:
    """scikit-learn ``Nystroem`` + ``LinearSVC`` and + ridge (``RidgeClassifier``) at
    ``J = width``: fit seconds (map included) and test accuracy."""
    from sklearn.kernel_approximation import Nystroem
    from sklearn.linear_model import RidgeClassifier
    from sklearn.pipeline import make_pipeline
    from sklearn.svm import LinearSVC

    rows = []
    heads = {"LinearSVC": lambda: LinearSVC(), "ridge": lambda: RidgeClassifier(alpha=1e-3)}
    for name, head in heads.items():
        pipe = make_pipeline(Nystroem(gamma=gamma, n_components=width, random_state=seed), head())
        start = time.perf_counter()
        pipe.fit(x_train.numpy(), y_train.numpy())
        seconds = time.perf_counter() - start
        acc = float((pipe.predict(x_test.numpy()) == y_test.numpy()).mean())
        rows.append({"method": f"Nystroem + {name}", "seconds": round(seconds, 2), "test_acc": acc})
        print(f"incumbent Nystroem + {name}: {seconds:.1f}s test {100 * acc:.2f}%", flush=True)
    return rows


def recipe_curve(args: argparse.Namespace, extra: list[str]) -> dict[str, Any]:
    """Run a recipe (as ``kernel-layers fit`` builds it) with :class:`TestCurve`; add the
    incumbents on the same data. Returns ``{"curve", "incumbents", "recipe", ...}``."""
    import os
    import tempfile

    from epoch_overhead import build

    workdir = tempfile.mkdtemp(prefix="time_to_accuracy_")
    cwd = os.getcwd()
    os.chdir(workdir)
    try:
        cli = build(args.recipe, [*extra, "--trainer.enable_progress_bar", "false"])
    finally:
        os.chdir(cwd)
    model, dm, trainer = cli.model, cli.datamodule, cli.trainer
    dm.setup("fit")
    x_train, y_train = dm.train_dataset.tensors
    x_test, y_test = dm.test_dataset.tensors
    layer = model.kernel_layer
    width, gamma = int(layer.out_features), float(layer.gamma)
    curve = TestCurve(x_test.reshape(len(x_test), -1), y_test, args.every)
    trainer.callbacks.append(curve)
    os.chdir(workdir)
    try:
        trainer.fit(model, datamodule=dm)
    finally:
        os.chdir(cwd)
    incumbents = (
        []
        if args.no_incumbent
        else incumbent(
            x_train.reshape(len(x_train), -1),
            y_train,
            x_test.reshape(len(x_test), -1),
            y_test,
            width,
            gamma,
            seed=0,
        )
    )
    return {
        "recipe": args.recipe,
        "extra": extra,
        "J": width,
        "threads": torch.get_num_threads(),
        "date": time.strftime("%Y-%m-%d"),
        "curve": curve.rows,
        "incumbents": incumbents,
        # The largest GPU allocation of the fit; CPU: none.
        "peak_mib": (
            round(torch.cuda.max_memory_allocated() / 2**20, 1)
            if torch.cuda.is_available() and model.device.type == "cuda"
            else None
        ),
    }


#: CLI arguments not shown in labels: data locations, and J (its own column).
_HIDDEN = ("root", "data_home", "out_features")


def settings(extra: list[str]) -> str:
    """The run's extra CLI arguments without data locations and J (``-`` if none)."""
    kept, skip = [], False
    for i, arg in enumerate(extra):
        if skip:
            skip = False
            continue
        if arg.startswith("--") and any(h in arg for h in _HIDDEN):
            skip = "=" not in arg and i + 1 < len(extra)
            continue
        kept.append(arg)
    return " ".join(kept) or "-"


def first_pass(curve: list[dict[str, Any]], level: float) -> dict[str, Any] | None:
    """The first point of ``curve`` whose test accuracy exceeds ``level``."""
    return next((row for row in curve if row["test_acc"] > level), None)


def curve_table(runs: list[dict[str, Any]]) -> str:
    """Markdown: per run, the final accuracy and the wall time to pass the untrained map
    and each incumbent."""
    lines = [
        "| recipe | settings | J | final test acc | epochs | wall s | passes untrained "
        "| incumbents (acc, fit s) | passes incumbent (s) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for run in runs:
        curve = run["curve"]
        untrained = curve[0]["test_acc"]
        passed = first_pass(curve[1:], untrained)
        inc = " / ".join(
            f"{i['method']}: {100 * i['test_acc']:.2f} %, {i['seconds']:.0f}"
            for i in run["incumbents"]
        )
        beats = " / ".join(
            f"{p['wall_s']:.0f}" if (p := first_pass(curve[1:], i["test_acc"])) else "never"
            for i in run["incumbents"]
        )
        lines.append(
            f"| {run['recipe']} | {settings(run['extra'])} | {run['J']} | "
            f"{100 * curve[-1]['test_acc']:.2f} % | {curve[-1]['epoch']} | "
            f"{curve[-1]['wall_s']:.0f} | "
            + (f"{passed['wall_s']:.0f} s ({100 * untrained:.2f} %)" if passed else "never")
            + f" | {inc or '-'} | {beats or '-'} |"
        )
    return "\n".join(lines)


def plot_curves(runs: list[dict[str, Any]], path: Path) -> None:
    """Test accuracy against wall time, one line per run, incumbents as points."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for run in runs:
        shown = settings(run["extra"])
        label = f"{run['recipe']}, J = {run['J']}" + ("" if shown == "-" else f", {shown}")
        ax.plot(
            [r["wall_s"] for r in run["curve"]],
            [100 * r["test_acc"] for r in run["curve"]],
            marker=".",
            label=label,
        )
    seen = set()
    for run in runs:
        for inc in run["incumbents"]:
            key = (inc["method"], run["J"])
            if key in seen:
                continue
            seen.add(key)
            ax.scatter([inc["seconds"]], [100 * inc["test_acc"]], marker="x", s=60)
            ax.annotate(
                f"{inc['method']} (J={run['J']})",
                (inc["seconds"], 100 * inc["test_acc"]),
                xytext=(6, -10 if len(seen) % 2 else 4),
                textcoords="offset points",
                fontsize=7,
            )
    # Every curve point and incumbent in view (the untrained start included).
    shown_acc = [100 * r["test_acc"] for run in runs for r in run["curve"]]
    shown_acc += [100 * inc["test_acc"] for run in runs for inc in run["incumbents"]]
    ax.set_ylim(min(shown_acc) - 0.5, max(shown_acc) + 0.5)
    ax.set_xlabel("wall time of the fit (s, evaluation excluded)")
    ax.set_ylabel("test accuracy (%)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def curve_main(args: argparse.Namespace, extra: list[str]) -> list[dict[str, Any]]:
    """Curve mode: run (if ``--recipe``), append to ``--curves[0]``, table + plot."""
    files = [Path(f) for f in args.curves or []]
    runs = []
    if args.recipe:
        quiet_lightning()
        run = recipe_curve(args, extra)
        if files:
            with open(files[0], "a") as fh:
                fh.write(json.dumps(run) + "\n")
        runs.append(run)
    if files:
        runs = [
            json.loads(line) for f in files if f.exists() for line in f.read_text().splitlines()
        ]
    print(curve_table(runs))
    if files:
        plot_curves(runs, files[0].with_suffix(".png"))
        print(f"plot: {files[0].with_suffix('.png')}")
    return runs
