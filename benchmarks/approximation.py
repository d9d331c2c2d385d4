"""Kernel approximation error against J, with the ridge read-out's test accuracy beside it.

For each data set, width J and method, builds the map (training it for the DI methods),
then measures

* the relative errors ``||K - Phi Phi^T||_F / ||K||_F`` and the spectral-norm one
  (:class:`~kernel_layers.KernelApproximationError`, the map's own kernel in float64) on
  the first ``--rows`` test rows;
* the test accuracy of the closed-form ridge read-out (``section5_readouts.evaluate``) on the
  map's features.

Methods (Gaussian kernel, one ``gamma`` per data set: the recipes' cross-validated values
for MNIST and CovType, ``gamma_heuristic`` of the training rows otherwise):

* ``standard-nystrom``: landmarks = random training rows; ``kmeans-nystrom``: k-means
  centres (on ``--subset`` random training rows); ``greedy-nystrom``: the innovation rule
  over ``--subset`` shuffled training rows (``kernel_layers.selection``; it may accept
  fewer than J, the record's ``J_used`` says);
* ``di-nystrom``: ``standard-nystrom``'s map (same seed, same landmarks at the start)
  trained with DI in ``KernelClassifier`` for ``--epochs`` epochs (Adam ``--lr``, the
  paper's batch rule);
* ``standard-fourier`` / ``di-fourier``: random Fourier features, untrained / the same
  draw DI-trained as above;
* ``fastfood``: untrained ``FastfoodLayer``.

Each finished ``(dataset, method, J)`` is appended to the record file at once (written
atomically), and one already present is skipped: the same command resumes a run cut
short. The file follows ``benchmarks/report.py`` (records and one table per data set);
the figure is written beside it.

Usage::

    python benchmarks/approximation.py --dataset mnist --root data/mnist \\
        --dims 100 300 --epochs 3
    python benchmarks/approximation.py --quick --out /tmp/approx   # digits, a smoke test
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

import records as record_fields
import torch
from lightning.pytorch import seed_everything
from section5_grid import RHO, make_datamodule, train
from section5_readouts import evaluate, features_of
from torch import Tensor

from kernel_layers import (
    FastfoodLayer,
    FourierLayer,
    KernelApproximationError,
    KernelClassifier,
    KernelFeatureMap,
    NystromLayer,
)
from kernel_layers.selection.heuristic import gamma_heuristic

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
METHODS = (
    "standard-nystrom",
    "kmeans-nystrom",
    "greedy-nystrom",
    "di-nystrom",
    "standard-fourier",
    "di-fourier",
    "fastfood",
)
#: The recipes' cross-validated Gaussian ``gamma`` (``kernel-layers select-gamma``).
GAMMAS = {"mnist": 0.0134, "covtype": 0.974}
DESCRIPTION = (
    "Kernel approximation error against J (benchmarks/approximation.py): the relative "
    "Frobenius and spectral errors of each map's kernel on the first test rows, and the "
    "ridge read-out's test accuracy on its features. Records are named "
    "<data set> J <J> <method>."
)
#: ``--quick``: digits, small J, one short epoch (a smoke test, not a result).
QUICK = {"dataset": "digits", "dims": [20, 40], "epochs": 1, "rows": 200, "subset": 500}


def build(method: str, x_train: Tensor, j: int, gamma: float, seed: int, subset: int):
    """The untrained map of ``method`` (a DI method's starting point)."""
    if method.endswith("fourier"):
        return FourierLayer(x_train.shape[1], j, gamma=gamma, seed=seed, trainable="di" in method)
    if method == "fastfood":
        return FastfoodLayer(x_train.shape[1], j, gamma=gamma, seed=seed, trainable=False)
    init = {"kmeans-nystrom": "kmeans", "greedy-nystrom": "greedy"}.get(method, "random")
    rows = x_train
    if init != "random" and subset < len(x_train):
        gen = torch.Generator().manual_seed(seed)
        rows = x_train[torch.randperm(len(x_train), generator=gen)[:subset]]
    return NystromLayer.from_data(
        rows, j, init=init, seed=seed, gamma=gamma, trainable=method == "di-nystrom"
    )


def kernel_errors(layer: KernelFeatureMap, x: Tensor) -> dict[str, float]:
    """The Frobenius and spectral relative errors on the rows ``x``."""
    metric = KernelApproximationError(layer, max_rows=len(x), norm="both")
    metric.update(x)
    errors = metric.compute()
    assert isinstance(errors, dict)
    return {
        "kernel_error": float(errors["fro"]),
        "kernel_error_spectral": float(errors["spectral"]),
    }


def run_one(method: str, data: dict[str, Any], j: int, args: argparse.Namespace) -> dict[str, Any]:
    """Build (and train) one map; its errors and ridge test accuracy."""
    seed_everything(args.seed, workers=True, verbose=False)
    x_train, y_train, x_test, y_test = data["tensors"]
    start = time.perf_counter()
    layer = build(method, x_train, j, data["gamma"], args.seed, args.subset)
    epochs = 0
    if method.startswith("di-"):
        model = KernelClassifier(layer, num_classes=data["dm"].num_classes, rho=RHO, lr=args.lr)
        fit = train(model, data["dm"], max_epochs=args.epochs, decay_patience=1, adaptive=False)
        epochs = fit[0]
        layer = model.kernel_layer
    seconds = time.perf_counter() - start
    layer.eval()
    errors = kernel_errors(layer, x_test[: args.rows])
    readout = evaluate(
        features_of(layer, x_train), y_train, features_of(layer, x_test), y_test,
        data["dm"].num_classes, svm=False,
    )  # fmt: skip
    return {
        "dataset": args.dataset,
        "method": method,
        "J": j,
        "J_used": layer.feature_width,
        "gamma": data["gamma"],
        **{k: round(v, 5) for k, v in errors.items()},
        "test_acc": round(100 * readout.test_acc, 2),
        "epochs": epochs,
        "seconds": round(seconds, 1),
        "rows": min(args.rows, len(x_test)),
    }


# ------------------------------------------------------------------ the record file
def tables(records: list[dict[str, Any]]) -> dict[str, Any]:
    """One rows table per data set: J, then the methods in :data:`METHODS` order."""
    out: dict[str, Any] = {}
    for dataset in sorted({r["figures"]["dataset"] for r in records}):
        mine = [r for r in records if r["figures"]["dataset"] == dataset]
        mine.sort(key=lambda r: (r["figures"]["J"], METHODS.index(r["figures"]["method"])))
        out[f"approximation_{dataset}"] = {
            "rows": [r["name"] for r in mine],
            "columns": [
                ["J", "{J}"],
                ["method", "{method}"],
                ["‖K − ΦΦᵀ‖_F / ‖K‖_F", "{kernel_error:.4f}"],
                ["‖K − ΦΦᵀ‖₂ / ‖K‖₂", "{kernel_error_spectral:.4f}"],
                ["ridge test acc", "{test_acc:.2f} %"],
                ["DI epochs", "{epochs}"],
                ["build + DI s", "{seconds}"],
            ],
        }
    return out


def plot(records: list[dict[str, Any]], path: Path) -> None:
    """Error (Frobenius, log scale) and ridge test accuracy against J, per data set."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    datasets = sorted({r["figures"]["dataset"] for r in records})
    fig, axes = plt.subplots(2, len(datasets), figsize=(5 * len(datasets), 7.5), squeeze=False)
    for col, dataset in enumerate(datasets):
        for method in METHODS:
            points = sorted(
                (r["figures"]["J"], r["figures"]["kernel_error"], r["figures"]["test_acc"])
                for r in records
                if r["figures"]["dataset"] == dataset and r["figures"]["method"] == method
            )
            if not points:
                continue
            dims, error, acc = zip(*points, strict=True)
            style = {
                "linestyle": "--" if method.startswith("di-") else "-",
                "color": f"C{METHODS.index(method)}",
                "marker": "o",
                "label": method,
            }
            axes[0][col].plot(dims, error, **style)
            axes[1][col].plot(dims, acc, **style)
        axes[0][col].set(title=dataset, xscale="log", yscale="log", ylabel="‖K − ΦΦᵀ‖_F / ‖K‖_F")
        axes[1][col].set(xscale="log", xlabel="J", ylabel="ridge test accuracy (%)")
    # One legend under the panels: inside them it hides the lines of the wider maps.
    handles, labels = max(
        (ax.get_legend_handles_labels() for ax in axes[0]), key=lambda found: len(found[1])
    )
    fig.legend(handles, labels, loc="lower center", ncol=4, fontsize=8)
    fig.tight_layout(rect=(0, 0.08, 1, 1))
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    """Run the grid (skipping what the record file holds); returns the new records."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default="mnist", choices=["digits", "mnist", "covtype"])
    parser.add_argument("--root", default=None, help="the data folder (MNIST IDX files, ...)")
    parser.add_argument("--dims", type=int, nargs="+", default=[100, 300, 1000, 2000])
    parser.add_argument("--methods", nargs="+", default=list(METHODS), choices=METHODS)
    parser.add_argument("--epochs", type=int, default=3, help="DI training epochs")
    parser.add_argument("--lr", type=float, default=1e-2, help="Adam learning rate of DI")
    parser.add_argument("--rows", type=int, default=1000, help="test rows of the errors")
    parser.add_argument("--subset", type=int, default=10000, help="rows of k-means / greedy")
    parser.add_argument("--gamma", type=float, default=None)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default=str(RESULTS), help="folder of the records, figure")
    parser.add_argument("--quick", action="store_true", help="digits, small J: a smoke test")
    args = parser.parse_args(argv)
    if args.quick:
        for key, value in QUICK.items():
            setattr(args, key, value)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / "approximation.json"
    records = record_fields.load_records(path)
    done = {r["name"] for r in records}
    new: list[dict[str, Any]] = []
    for j in args.dims:
        todo = [m for m in args.methods if f"{args.dataset} J {j} {m}" not in done]
        if not todo:
            continue
        dm = make_datamodule(args.dataset, j, root=args.root, seed=args.seed)
        dm.setup("fit")
        x_train, y_train = dm.train_dataset.tensors
        x_test, y_test = dm.test_dataset.tensors
        gamma = args.gamma or GAMMAS.get(args.dataset) or gamma_heuristic(x_train)
        data = {"dm": dm, "gamma": gamma, "tensors": (x_train, y_train, x_test, y_test)}
        for method in todo:
            figures = run_one(method, data, j, args)
            name = f"{args.dataset} J {j} {method}"
            record = record_fields.record(name, figures, "approximation.py", argv)
            records = record_fields.store(path, record, DESCRIPTION, tables)
            new.append(record)
            print(
                f"{args.dataset} J={j} {method:17s} error {figures['kernel_error']:.4f} "
                f"(spectral {figures['kernel_error_spectral']:.4f}) "
                f"acc {figures['test_acc']:.2f} % {figures['seconds']:.1f} s",
                flush=True,
            )
    if records:
        plot(records, out / "approximation.png")
    return new


if __name__ == "__main__":
    main()
