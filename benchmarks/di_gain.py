"""How much DI training adds over the untrained Nystrom map, per gamma, on a subsample.

A quick probe for choosing a recipe's gamma: for each ``--gammas`` value, a
``NystromLayer`` with ``J`` random training rows as landmarks is read out by the
closed-form ridge head (test accuracy ``untrained``), then its landmarks are trained by
NysDI (Adam, ``--lr``, batches of ``--batch`` rows, plain loop, no schedule) for
``--epochs`` epochs over ``--rows`` random training rows, and read out again every
``--every`` epochs. The ridge head is fitted on the same training rows. With ``--ard``
the layer also learns one bandwidth per input column (``NystromLayer(ard=True)``, each
starting at 1, so ``untrained`` is the same map).

Usage::

    python benchmarks/di_gain.py --dataset covtype --root DIR/covtype \\
        --gammas 0.974 4 16 64 --rows 100000 --epochs 8 --threads 1
    python benchmarks/di_gain.py --dataset covtype --root DIR/covtype \
        --gammas 0.974 --rows 100000 --epochs 8 --threads 1 --ard   # learned bandwidths
    python benchmarks/di_gain.py --dataset digits --gammas 0.01 0.05 --rows 1000 \\
        --dims 64 --batch 200 --epochs 4      # smoke test

Prints one JSON line per gamma (and appends it to ``--json``).
"""

from __future__ import annotations

import argparse
import json
import time

import torch
from section5_grid import DATASETS, make_datamodule
from section5_readouts import evaluate, features_of
from torch import Tensor

from kernel_layers import NystromLayer

RHO = 1e-4


def ridge_accuracy(
    layer: NystromLayer, x: Tensor, y: Tensor, x_test: Tensor, y_test: Tensor, num_classes: int
) -> float:
    """Test accuracy of the ridge head fitted on ``layer``'s features of ``x (Tensor[N, D])``."""
    res = evaluate(
        features_of(layer, x), y, features_of(layer, x_test), y_test, num_classes, svm=False
    )
    return res.test_acc


def main(argv: list[str] | None = None) -> list[dict[str, object]]:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dataset", choices=DATASETS, default="digits")
    p.add_argument("--root", default=None)
    p.add_argument("--gammas", type=float, nargs="+", required=True)
    p.add_argument("--dims", type=int, default=500, help="J")
    p.add_argument("--rows", type=int, default=100000, help="training rows used")
    p.add_argument("--test-rows", type=int, default=40000)
    p.add_argument("--batch", type=int, default=1000)
    p.add_argument("--epochs", type=int, default=8)
    p.add_argument("--every", type=int, default=4, help="read out every N epochs")
    p.add_argument("--lr", type=float, default=1e-2)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--json", default=None)
    p.add_argument("--ard", action="store_true", help="learn one bandwidth per input column")
    args = p.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    dm = make_datamodule(args.dataset, args.dims, root=args.root)
    dm.setup("fit")
    gen = torch.Generator().manual_seed(args.seed)
    x, y = dm.train_dataset.tensors
    keep = torch.randperm(len(x), generator=gen)[: args.rows]
    x, y = x[keep].flatten(1), y[keep]
    x_test, y_test = dm.test_dataset.tensors
    x_test, y_test = x_test[: args.test_rows].flatten(1), y_test[: args.test_rows]
    rows = []
    for gamma in args.gammas:
        layer = NystromLayer(x.shape[1], args.dims, gamma=gamma, seed=args.seed, ard=args.ard)
        with torch.no_grad():
            layer.landmarks.copy_(x[torch.randperm(len(x), generator=gen)[: args.dims]])
        untrained = ridge_accuracy(layer, x, y, x_test, y_test, dm.num_classes)
        optimizer = torch.optim.Adam(layer.parameters(), lr=args.lr)
        start, curve = time.perf_counter(), []
        for epoch in range(1, args.epochs + 1):
            order = torch.randperm(len(x), generator=gen)
            for i in range(0, len(x) - args.batch + 1, args.batch):
                idx = order[i : i + args.batch]
                di = layer.discriminant_information(
                    x[idx], y[idx], rho=RHO, num_classes=dm.num_classes
                )
                optimizer.zero_grad()
                (-di).backward()
                optimizer.step()
            if epoch % args.every == 0 or epoch == args.epochs:
                acc = ridge_accuracy(layer, x, y, x_test, y_test, dm.num_classes)
                curve.append([epoch, round(acc, 4)])
        row = {
            "dataset": args.dataset,
            "gamma": gamma,
            "ard": args.ard,
            "J": args.dims,
            "rows": len(x),
            "lr": args.lr,
            "untrained": round(untrained, 4),
            "trained": curve,
            "gain": round(curve[-1][1] - untrained, 4),
            "train_s": round(time.perf_counter() - start, 1),
            "date": time.strftime("%Y-%m-%d"),
        }
        print(json.dumps(row), flush=True)
        if args.json:
            with open(args.json, "a") as out:
                out.write(json.dumps(row) + "\n")
        rows.append(row)
    return rows


if __name__ == "__main__":
    main()
