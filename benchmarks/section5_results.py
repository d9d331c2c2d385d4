"""The results of ``reproduce.py``'s grid: its CSV (written atomically, read back for
``--append`` / ``--merge`` / ``--plot-only``), the figures (the paper's Figures 1 and 2)
and the markdown tables of ``benchmarks/README.md``."""

from __future__ import annotations

import csv
import math
import statistics
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from section5_grid import METHODS

FIELDS = [
    "dataset",
    "method",
    "map",
    "objective",
    "J",
    "repeat",
    "gamma",
    "batch_size",
    "lr",
    "train_acc",
    "test_acc",
    "svm_train_acc",
    "svm_test_acc",
    "readout_test_acc",
    "train_mse",
    "test_mse",
    "epochs",
    "decays",
    "stop_reason",
    "seconds",
    "eval_seconds",
    "svm_c",
]


def _summary(
    rows: Sequence[dict[str, Any]], key: str
) -> dict[tuple[str, int], tuple[float, float]]:
    """``(method, J) -> (mean, std)`` of ``key`` over repeats (std 0 for one repeat)."""
    groups: dict[tuple[str, int], list[float]] = defaultdict(list)
    for row in rows:
        value = float(row[key])
        if not math.isnan(value):
            groups[(row["method"], int(row["J"]))].append(value)
    return {
        k: (statistics.fmean(v), statistics.stdev(v) if len(v) > 1 else 0.0)
        for k, v in groups.items()
    }


_STYLE = {
    "standard-nystrom": ("tab:gray", "o", "--"),
    "kmeans-nystrom": ("tab:brown", "s", "--"),
    "standard-fourier": ("tab:olive", "^", ":"),
    "di-nystrom": ("tab:red", "o", "-"),
    "di-fourier": ("tab:red", "^", ":"),
    "ls-nystrom": ("tab:blue", "o", "-"),
    "ls-fourier": ("tab:blue", "^", ":"),
    "ce-nystrom": ("tab:green", "o", "-"),
    "ce-fourier": ("tab:green", "^", ":"),
    "sklearn-nystroem": ("black", "x", "-."),
}


def plot(rows: Sequence[dict[str, Any]], out: Path, dataset: str) -> list[Path]:
    """Write ``<dataset>_accuracy.png`` (Figure 2) and ``<dataset>_mse.png`` (Figure 1)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    methods = [m for m in METHODS if any(r["method"] == m for r in rows)]
    paths = []
    fig, axes = plt.subplots(1, 2, figsize=(12.5, 4.2), sharey=False)
    for ax, key, title in (
        (axes[0], "test_acc", "ridge read-out"),
        (axes[1], "svm_test_acc", "LinearSVC read-out"),
    ):
        summary = _summary(rows, key)
        for method in methods:
            pts = sorted((j, *summary[(m, j)]) for (m, j) in summary if m == method)
            if not pts:
                continue
            js, mean, std = zip(*pts, strict=True)
            colour, marker, ls = _STYLE[method]
            ax.errorbar(
                js,
                [100 * v for v in mean],
                yerr=[100 * v for v in std],
                label=method,
                color=colour,
                marker=marker,
                linestyle=ls,
                capsize=3,
            )
        ax.set_xscale("log")
        ax.set_xlabel("J (feature dimension)")
        ax.set_ylabel("test accuracy (%)")
        ax.set_title(f"{dataset}: {title}")
        ax.grid(alpha=0.3)
    # One legend beside both panels, so that no point hides behind it.
    fig.legend(*axes[0].get_legend_handles_labels(), loc="center right", fontsize=8)
    fig.tight_layout(rect=(0.0, 0.0, 0.86, 1.0))
    paths.append(out / f"{dataset}_accuracy.png")
    fig.savefig(paths[-1], dpi=110)
    plt.close(fig)

    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2), sharey=True)
    train, test = _summary(rows, "train_mse"), _summary(rows, "test_mse")
    for ax, kind in zip(axes, ("nystrom", "fourier"), strict=True):
        for method in (f"di-{kind}", f"ls-{kind}"):
            colour = "tab:red" if method.startswith("di") else "tab:blue"
            for summary, ls, split in ((train, "-", "train"), (test, "--", "test")):
                pts = sorted((j, *summary[(m, j)]) for (m, j) in summary if m == method)
                if not pts:
                    continue
                js, mean, std = zip(*pts, strict=True)
                ax.errorbar(
                    js,
                    mean,
                    yerr=std,
                    color=colour,
                    linestyle=ls,
                    marker="o",
                    capsize=3,
                    label=f"{method.split('-')[0].upper()} {split}",
                )
        ax.set_xscale("log")
        ax.set_xlabel("J (feature dimension)")
        ax.set_ylabel("ridge MSE (one-hot targets)")
        ax.set_title(f"{dataset}: {kind} maps, DI vs LS")
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=8)
    fig.tight_layout()
    paths.append(out / f"{dataset}_mse.png")
    fig.savefig(paths[-1], dpi=110)
    plt.close(fig)
    return paths


def read_csv(path: Path) -> list[dict[str, Any]]:
    """Rows of a CSV written by :func:`main` (numbers as strings are converted on use)."""
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


def write_csv(path: Path, rows: Sequence[dict[str, Any]]) -> None:
    """Write ``rows`` (dicts with the :data:`FIELDS` keys; a missing one left empty) to
    ``path`` with a header, atomically: a run stopped mid-write leaves the old file."""
    partial = path.with_name(path.name + ".partial")
    with open(partial, "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=FIELDS)
        writer.writeheader()
        writer.writerows(rows)
    partial.replace(path)


def row_key(row: dict[str, Any]) -> tuple[str, int, int]:
    """``(method, J, repeat)``: what a CSV row stands for."""
    return row["method"], int(row["J"]), int(row["repeat"])


def _repeats(rows: Sequence[dict[str, Any]], key: str | None = None) -> dict[tuple[str, int], int]:
    """``(method, J) -> number of rows`` (repeats); with ``key``, of the rows where that
    figure was measured (not NaN)."""
    count: dict[tuple[str, int], int] = defaultdict(int)
    for row in rows:
        if key is None or not math.isnan(float(row[key])):
            count[(row["method"], int(row["J"]))] += 1
    return count


def format_mean_std(
    mean: float, std: float, repeats: int, scale: float = 100.0, fmt: str = ".2f"
) -> str:
    """``mean ± std`` times ``scale`` (percent by default); the mean alone for one repeat,
    ``-`` for a skipped (NaN) value."""
    if math.isnan(mean):
        return "-"
    spread = f" ± {scale * std:{fmt}}" if repeats > 1 else ""
    return f"{scale * mean:{fmt}}{spread}"


def markdown_table(rows: Sequence[dict[str, Any]], key: str = "test_acc") -> str:
    """``method x J`` table of ``key`` in percent, ``mean ± std`` over repeats.

    No ``± std`` where one repeat measured ``key``; an empty cell where a method was not
    run at a ``J``.
    """
    summary = _summary(rows, key)
    count = _repeats(rows, key)
    js = sorted({j for _, j in summary})
    methods = [m for m in METHODS if any(m == k[0] for k in summary)]
    lines = ["| method | " + " | ".join(f"J={j}" for j in js) + " |", "|---" * (len(js) + 1) + "|"]
    for m in methods:
        cells = []
        for j in js:
            if (m, j) in summary:
                cells.append(format_mean_std(*summary[(m, j)], count[(m, j)]))
            else:
                cells.append("")
        lines.append(f"| {m} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def results_table(rows: Sequence[dict[str, Any]]) -> str:
    """One line per ``(method, J)``: accuracies ``mean ± std`` (%), MSEs, epochs, seconds.

    The long table of ``benchmarks/README.md``; means over repeats (no ``± std`` where one
    repeat measured the figure), ``-`` where a read-out was skipped.
    """
    acc = {k: _summary(rows, k) for k in ("test_acc", "svm_test_acc")}
    measured = {k: _repeats(rows, k) for k in acc}
    mean = {k: _summary(rows, k) for k in ("train_mse", "test_mse", "epochs", "seconds")}
    count = _repeats(rows)
    keys = sorted(count, key=lambda k: (k[1], list(METHODS).index(k[0])))
    lines = [
        "| method | J | repeats | ridge acc | SVM acc | train MSE | test MSE | epochs | train s |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for key in keys:
        cells = []
        for name in ("test_acc", "svm_test_acc"):
            cells.append(
                format_mean_std(*acc[name].get(key, (math.nan, math.nan)), measured[name][key])
            )
        cells += [f"{mean['train_mse'][key][0]:.4f}", f"{mean['test_mse'][key][0]:.4f}"]
        cells += [f"{mean['epochs'][key][0]:.0f}", f"{mean['seconds'][key][0]:.0f}"]
        lines.append(f"| {key[0]} | {key[1]} | {count[key]} | " + " | ".join(cells) + " |")
    return "\n".join(lines)
