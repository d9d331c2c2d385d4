"""Multiple kernel learning on a real data set split into channels, plus noise channels.

scikit-learn's digits (8x8, scaled to [0, 1]) split into its four 4x4 quadrants, plus
``--noise`` channels of 16 uniform noise pixels each. One separable ARD
``FourierLayer`` (a random Fourier map and a learned bandwidth per channel) is trained
jointly with a group-lasso read-out (``KernelClassifier(objective="ce", group_lasso=lam)``)
for each ``--lams``; reported: test accuracy, the channels kept (block norm > 0) and the
norms, against one Gaussian kernel on all features (``group_lasso=0``, not separable).

    python benchmarks/mkl_channels.py --lams 0 1e-3 3e-3 1e-2 --epochs 80
"""

from __future__ import annotations

import argparse
import logging
import time
import warnings

import lightning as L
import numpy as np
import torch
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

from kernel_layers import FourierLayer, KernelClassifier
from kernel_layers.data import TensorDataModule

CHANNELS = ("top-left", "top-right", "bottom-left", "bottom-right")


def channel_data(noise: int, seed: int) -> tuple[np.ndarray, np.ndarray, list[str]]:
    x, y = load_digits(return_X_y=True)
    images = x.reshape(-1, 8, 8) / 16.0
    quadrants = [
        images[:, r : r + 4, c : c + 4].reshape(len(x), 16) for r in (0, 4) for c in (0, 4)
    ]
    rng = np.random.default_rng(seed)
    noises = [rng.random((len(x), 16)) for _ in range(noise)]
    names = list(CHANNELS) + [f"noise-{k}" for k in range(noise)]
    return np.concatenate(quadrants + noises, axis=1), y, names


def run(x, y, names, lam: float, separable: bool, epochs: int, seed: int) -> dict:
    x_train, x_test, y_train, y_test = train_test_split(
        x, y, test_size=0.25, stratify=y, random_state=seed
    )
    dm = TensorDataModule(
        x_train, y_train, x_test, y_test, batch_size=200, val_fraction=0.0, scaling="global"
    )
    L.seed_everything(seed)
    blocks = [16] * len(names)
    layer = (
        FourierLayer(
            x.shape[1],
            40 * len(names),
            gamma=0.1,
            ard=True,
            blocks=blocks,
            separable=True,
            seed=seed,
        )
        if separable
        else FourierLayer(x.shape[1], 40 * len(names), gamma=0.02, seed=seed)
    )
    model = KernelClassifier(layer, num_classes=10, objective="ce", lr=0.02, group_lasso=lam)
    trainer = L.Trainer(
        max_epochs=epochs,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    start = time.perf_counter()
    trainer.fit(model, dm)
    seconds = time.perf_counter() - start
    acc = trainer.test(model, dm, verbose=False)[0]["test/acc"]
    norms = model.block_norms() if separable else None
    kept = (
        [n for n, v in zip(names, norms.tolist(), strict=True) if v > 0]
        if norms is not None
        else names
    )
    return {
        "acc": acc,
        "kept": kept,
        "norms": None if norms is None else norms.tolist(),
        "s": seconds,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lams", type=float, nargs="+", default=[0.0, 1e-3, 3e-3, 1e-2])
    parser.add_argument("--noise", type=int, default=2)
    parser.add_argument("--epochs", type=int, default=80)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    logging.getLogger("lightning").setLevel(logging.ERROR)
    warnings.filterwarnings("ignore")
    x, y, names = channel_data(args.noise, args.seed)
    print("| model | lambda | test accuracy | channels kept | block norms | fit s |")
    print("|---|---|---|---|---|---|")
    one = run(x, y, names, 0.0, separable=False, epochs=args.epochs, seed=args.seed)
    acc, seconds = 100 * one["acc"], one["s"]
    label = f"one Gaussian kernel, {x.shape[1]} features"
    print(f"| {label} | - | {acc:.2f} % | all | - | {seconds:.1f} |")
    for lam in args.lams:
        r = run(x, y, names, lam, separable=True, epochs=args.epochs, seed=args.seed)
        norms = ", ".join(f"{v:.2f}" for v in r["norms"])
        kept = ", ".join(r["kept"]) or "none"
        acc, seconds = 100 * r["acc"], r["s"]
        print(f"| per-channel MKL | {lam:g} | {acc:.2f} % | {kept} | {norms} | {seconds:.1f} |")


if __name__ == "__main__":
    torch.set_num_threads(2)
    main()
