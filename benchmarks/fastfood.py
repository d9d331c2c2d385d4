"""FastfoodLayer against FourierLayer at d = 784: time, memory, DI-trained accuracy.

For each J: parameter count, the median time of one forward + backward of the features
on a batch (``--batch`` rows, float32, interleaved repeats), the peak resident memory of
that step in a fresh process, and (for ``J <= --train-max``) the MNIST test accuracy of a
ridge read-out after ``--epochs`` epochs of DI training (batch ``max(1000, 2J)``, Adam
lr 1e-2, gamma = 0.01 on pixels scaled to [0, 1]) and of the untrained map.

    python benchmarks/fastfood.py --root DIR/mnist --dims 1024 4096 16384 --train-max 4096
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import subprocess
import sys
import time
import warnings

import torch

from kernel_layers import FastfoodLayer, FourierLayer
from kernel_layers.training.heads import DEFAULT_HEAD_RHO

LAYERS = {"fourier": FourierLayer, "fastfood": FastfoodLayer}


def step_time(kind: str, width: int, batch: int, repeats: int) -> float:
    layer = LAYERS[kind](784, width, gamma=0.01, seed=0)
    x = torch.rand(batch, 784)
    times = []
    for _ in range(repeats + 1):
        start = time.perf_counter()
        layer(x).square().sum().backward()
        times.append(time.perf_counter() - start)
    return statistics.median(times[1:])


def peak_memory(kind: str, width: int, batch: int) -> float:
    """Growth of the peak resident memory (``VmHWM``, MiB) from building the layer and one
    forward + backward, in a fresh process after a warm-up step at a tiny size.

    ``VmHWM`` belongs to the new process image (``ru_maxrss`` would inherit the parent's
    peak across fork and exec)."""
    code = (
        "import re, torch;"
        f"from kernel_layers import {LAYERS[kind].__name__} as C;"
        "hwm = lambda: int(re.search(r'VmHWM:\\s+(\\d+)', open('/proc/self/status').read())[1]);"
        "C(784, 8, seed=0)(torch.rand(4, 784)).square().sum().backward();"
        "before = hwm();"
        f"layer = C(784, {width}, gamma=0.01, seed=0); x = torch.rand({batch}, 784);"
        "layer(x).square().sum().backward();"
        "print((hwm() - before) / 1024)"
    )
    return float(subprocess.check_output([sys.executable, "-c", code]).split()[-1])


def accuracy(
    kind: str, width: int, root: str, epochs: int, trainable: bool, batch: int | None
) -> tuple[float, float]:
    import lightning as L

    from kernel_layers import KernelClassifier
    from kernel_layers.data import MNISTDataModule

    L.seed_everything(0)
    layer = LAYERS[kind](784, width, gamma=0.01, seed=0, trainable=trainable)
    model = KernelClassifier(layer, num_classes=10, lr=1e-2, head_rho=DEFAULT_HEAD_RHO)
    dm = MNISTDataModule(
        root, download=False, val_fraction=0.0, num_features=width, batch_size=batch
    )
    trainer = L.Trainer(
        max_epochs=epochs if trainable else 0,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    start = time.perf_counter()
    trainer.fit(model, dm)
    seconds = time.perf_counter() - start
    return trainer.test(model, dm, verbose=False)[0]["test/acc"], seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", required=True, help="folder with the MNIST IDX files")
    parser.add_argument("--dims", type=int, nargs="+", default=[1024, 4096, 16384])
    parser.add_argument("--batch", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--train-max", type=int, default=4096)
    parser.add_argument(
        "--train-batch",
        type=int,
        default=None,
        help="DI training batch (default: the paper's max(1000, 2J); it must exceed J)",
    )
    parser.add_argument("--only", choices=sorted(LAYERS), default=None, help="one layer only")
    parser.add_argument("--threads", type=int, default=None, help="torch.set_num_threads")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    logging.getLogger("lightning").setLevel(logging.ERROR)
    warnings.filterwarnings("ignore")
    rows = []
    for width in args.dims:
        for kind in [args.only] if args.only else LAYERS:
            row = {"layer": kind, "J": width}
            row["params"] = sum(p.numel() for p in LAYERS[kind](784, width, seed=0).parameters())
            row["step_ms"] = 1e3 * step_time(kind, width, args.batch, args.repeats)
            row["peak_mib"] = peak_memory(kind, width, args.batch)
            if width <= args.train_max:
                row["untrained_acc"], _ = accuracy(
                    kind, width, args.root, args.epochs, False, args.train_batch
                )
                row["di_acc"], row["train_s"] = accuracy(
                    kind, width, args.root, args.epochs, True, args.train_batch
                )
            rows.append(row)
            print(json.dumps(row), flush=True)
    head = f"fwd+bwd ms (B={args.batch}) | peak MiB | untrained | DI ({args.epochs} ep.)"
    print(f"\n| J | layer | parameters | {head} | train s |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        acc = (
            f"{100 * r['untrained_acc']:.2f} % | {100 * r['di_acc']:.2f} % | {r['train_s']:.0f}"
            if "di_acc" in r
            else "not run | not run | -"
        )
        cost = f"{r['params']} | {r['step_ms']:.1f} | {r['peak_mib']:.0f}"
        print(f"| {r['J']} | {r['layer']} | {cost} | {acc} |")


if __name__ == "__main__":
    main()
