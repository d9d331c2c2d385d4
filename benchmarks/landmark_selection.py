"""Landmark selection on scikit-learn's digits: wall time and accuracy at equal J.

For each J and seed, selects J landmarks from the training set by

* ``random``: a uniformly random subset (``random_landmarks``);
* ``kmeans++``: k-means++ ``D^2`` sampling of rows (``kmeans_plus_plus``);
* ``kmeans``: k-means centres, Lloyd from k-means++ seeds (``kmeans``);
* ``greedy``: the innovation rule over the shuffled training set (``greedy_landmarks``)
  with ``eta`` set, per seed and before timing, to the largest value that accepts at
  least J rows (bisection in ``log eta``), and ``max_landmarks=J``;

times the selection alone, then fits a ridge classifier (scikit-learn's
``RidgeClassifierCV``, alpha by leave-one-out on the training set) on the features of
an untrained :class:`~kernel_layers.NystromLayer` with those landmarks and reports the
test accuracy. Pixels scaled by 1/16, a fixed stratified 75/25 split, Gaussian kernel
with ``gamma = 0.02``, float64 features.

Usage: ``python benchmarks/landmark_selection.py [--seeds 5] [--threads 1] [--device cpu]``
"""

from __future__ import annotations

import argparse
import datetime
import math
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable

import numpy as np
import torch
from sklearn.datasets import load_digits
from sklearn.linear_model import RidgeClassifierCV
from sklearn.model_selection import train_test_split

from kernel_layers.layers.nystrom import NystromLayer
from kernel_layers.selection.landmarks import (
    greedy_landmarks,
    kmeans,
    kmeans_plus_plus,
    random_landmarks,
)

GAMMA = 0.02
SIZES = (50, 200)
METHODS = ("random", "kmeans++", "kmeans", "greedy")
ALPHAS = np.logspace(-6, 1, 8)
#: Bracket and number of steps of the bisection on ``log eta``.
ETA_RANGE = (1e-9, 1.0)
ETA_STEPS = 30


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _calibrate_eta(x: torch.Tensor, j: int) -> float:
    """The largest ``eta`` (to bisection precision) whose greedy pass accepts >= j rows."""
    low, high = math.log(ETA_RANGE[0]), math.log(ETA_RANGE[1])
    for _ in range(ETA_STEPS):
        mid = 0.5 * (low + high)
        count = greedy_landmarks(x, gamma=GAMMA, eta=math.exp(mid), max_landmarks=j).shape[0]
        if count >= j:
            low = mid
        else:
            high = mid
    return math.exp(low)


def select(method: str, x: torch.Tensor, j: int, seed: int, eta: float | None) -> torch.Tensor:
    """Landmarks ``Tensor[j, D]`` by ``method`` (the timed part)."""
    if method == "random":
        return x[random_landmarks(x, j, seed=seed)]
    if method == "kmeans++":
        return x[kmeans_plus_plus(x, j, seed=seed)]
    if method == "kmeans":
        return kmeans(x, j, seed=seed)[0]
    return greedy_landmarks(x, gamma=GAMMA, eta=eta, max_landmarks=j)  # type: ignore[arg-type,return-value]


def accuracy(z: torch.Tensor, data: tuple[torch.Tensor, ...]) -> float:
    x_train, y_train, x_test, y_test = data
    layer = NystromLayer(z.shape[1], z.shape[0], gamma=GAMMA, landmarks=z, trainable=False)
    with torch.no_grad():
        f_train, f_test = layer(x_train).cpu().numpy(), layer(x_test).cpu().numpy()
    clf = RidgeClassifierCV(alphas=ALPHAS).fit(f_train, y_train.numpy())
    return float(clf.score(f_test, y_test.numpy()))


def _timed(fn: Callable[[], torch.Tensor], device: torch.device) -> tuple[torch.Tensor, float]:
    _sync(device)
    start = time.perf_counter()
    out = fn()
    _sync(device)
    return out, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)

    x_np, y_np = load_digits(return_X_y=True)
    x_tr, x_te, y_tr, y_te = train_test_split(
        x_np / 16.0, y_np, test_size=0.25, random_state=0, stratify=y_np
    )
    x_train = torch.tensor(x_tr, dtype=torch.float64, device=device)
    x_test = torch.tensor(x_te, dtype=torch.float64, device=device)
    data = (x_train, torch.tensor(y_tr), x_test, torch.tensor(y_te))

    # warm-up (first-call overheads are not the method's cost)
    for method in METHODS:
        select(method, x_train, 10, 0, 0.1)

    rows = []
    for j in SIZES:
        for method in METHODS:
            times, accs, etas = [], [], []
            for seed in range(args.seeds):
                eta = None
                x_sel = x_train
                if method == "greedy":  # the stream order is the seed's shuffle
                    perm = torch.randperm(
                        len(x_train), generator=torch.Generator().manual_seed(seed)
                    )
                    x_sel = x_train[perm.to(device)]
                    eta = _calibrate_eta(x_sel, j)
                    etas.append(eta)
                z, seconds = _timed(
                    lambda m=method, xs=x_sel, k=j, s=seed, e=eta: select(m, xs, k, s, e), device
                )
                assert z.shape[0] == j, (method, z.shape)
                times.append(seconds)
                accs.append(accuracy(z, data))
            note = f"eta ~ {statistics.median(etas):.1e}" if etas else ""
            rows.append((j, method, statistics.median(times), accs, note))

    print(
        f"Command: `python {' '.join(sys.argv)}`  \n"
        f"Machine: {platform.node()}, {platform.machine()}, {os.cpu_count()} CPU cores visible, "
        f"torch {torch.__version__} with {torch.get_num_threads()} thread(s), device {device}  \n"
        f"Date: {datetime.datetime.now().isoformat(timespec='seconds')}  \n"
        f"Digits: {len(x_tr)} train / {len(x_te)} test, gamma={GAMMA}, {args.seeds} seeds, "
        "RidgeClassifierCV on untrained Nystrom features (float64)\n"
    )
    print("| J | selection | median time (ms) | test accuracy (mean ± std) | note |")
    print("|---|---|---|---|---|")
    for j, method, seconds, accs, note in rows:
        std = statistics.stdev(accs) if len(accs) > 1 else 0.0
        print(
            f"| {j} | {method} | {1e3 * seconds:.1f} | "
            f"{100 * statistics.mean(accs):.2f} ± {100 * std:.2f} % | {note} |"
        )


if __name__ == "__main__":
    main()
