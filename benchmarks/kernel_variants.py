"""Landmark selection and ARD on scikit-learn's digits: untrained vs DI-trained accuracy.

For each ``J`` and seed: Nystrom layers whose landmarks come from ``random``, ``kmeans``,
``kmeans++`` and ``greedy`` selection (timed), evaluated untrained (ridge read-out) and
after DI training; and Fourier layers without / with ARD bandwidths, DI-trained. Training
follows the quick-start recipe: Adam lr 1e-2, batch 2J, PlateauDecay(patience=3) +
DISaturationStopping, at most 60 epochs.

Usage: ``python benchmarks/kernel_variants.py [--dims 50 200] [--seeds 2]``
"""

from __future__ import annotations

import argparse
import logging
import platform
import statistics
import time
import warnings

import lightning as L
import torch

from kernel_layers import FourierLayer, KernelClassifier, NystromLayer
from kernel_layers.callbacks import DISaturationStopping, PlateauDecay
from kernel_layers.data import DigitsDataModule
from kernel_layers.training.heads import DEFAULT_HEAD_RHO

GAMMA = 0.02
LR = 1e-2
MAX_EPOCHS = 60


def _trainer(epochs: int) -> L.Trainer:
    return L.Trainer(
        max_epochs=epochs,
        accelerator="cpu",
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        deterministic=True,
        callbacks=[PlateauDecay(patience=3, verbose=False), DISaturationStopping()],
    )


def _accuracy(model: KernelClassifier, dm: DigitsDataModule) -> float:
    return _trainer(1).test(model, dm, verbose=False)[0]["test/acc"]


def _run(layer: torch.nn.Module, dm: DigitsDataModule, train: bool) -> tuple[float, int]:
    model = KernelClassifier(
        layer, num_classes=10, lr=LR, head_rho=DEFAULT_HEAD_RHO, keep_best=None
    )  # the last epoch, at every J
    epochs = 0
    if train:
        trainer = _trainer(MAX_EPOCHS)
        trainer.fit(model, dm)
        epochs = trainer.current_epoch
    return _accuracy(model, dm), epochs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--dims", type=int, nargs="+", default=[50, 200])
    parser.add_argument("--seeds", type=int, default=2)
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    logging.getLogger("lightning").setLevel(logging.ERROR)
    logging.getLogger("lightning.pytorch").setLevel(logging.ERROR)
    print(
        f"# {platform.machine()}, torch {torch.__version__}, {torch.get_num_threads()} threads, "
        f"{time.strftime('%Y-%m-%d')}; digits, gamma={GAMMA}, {args.seeds} seeds"
    )
    print("| J | map | selection | select ms | untrained acc % | DI-trained acc % | epochs |")
    print("|---|---|---|---|---|---|---|")
    for j in args.dims:
        rows: dict[tuple[str, str], list[tuple[float, float, float, int]]] = {}
        for seed in range(args.seeds):
            dm = DigitsDataModule(num_features=j, batch_size=2 * j)
            x = dm.train_features()
            for init in ("random", "kmeans", "kmeans++", "greedy"):
                extra = {"eta": 1e-6} if init == "greedy" else {}
                start = time.perf_counter()
                base = NystromLayer.from_data(x, j, init=init, seed=seed, gamma=GAMMA, **extra)
                ms = 1e3 * (time.perf_counter() - start)
                L.seed_everything(seed)
                frozen = NystromLayer(
                    64, base.out_features, landmarks=base.landmarks, gamma=GAMMA, trainable=False
                )
                untrained, _ = _run(frozen, dm, train=False)
                L.seed_everything(seed)
                trained, epochs = _run(base, dm, train=True)
                rows.setdefault(("nystrom", init), []).append((ms, untrained, trained, epochs))
            for ard in (False, True):
                L.seed_everything(seed)
                untrained, _ = _run(
                    FourierLayer(64, j, gamma=GAMMA, seed=seed, trainable=False), dm, train=False
                )
                L.seed_everything(seed)
                layer = FourierLayer(64, j, gamma=GAMMA, seed=seed, ard=ard)
                trained, epochs = _run(layer, dm, train=True)
                name = "ARD" if ard else "plain"
                rows.setdefault(("fourier", name), []).append((0.0, untrained, trained, epochs))
        for (kind, name), values in rows.items():
            ms = statistics.median(v[0] for v in values)
            un = [100 * v[1] for v in values]
            tr = [100 * v[2] for v in values]
            ep = statistics.mean(v[3] for v in values)

            def fmt(a: list[float]) -> str:
                return f"{statistics.mean(a):.2f} ± {statistics.pstdev(a):.2f}"

            select = f"{ms:.1f}" if kind == "nystrom" else "-"
            print(
                f"| {j} | {kind} | {name} | {select} | {fmt(un)} | {fmt(tr)} | {ep:.0f} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
