"""Fashion-MNIST: a small CNN with a Nystrom + DI head vs the same CNN with a linear head.

Trains, on the same data, seed, batch size, learning rate and epoch budget,

* ``linear``: :class:`~kernel_layers.training.backbones.SmallCNN` + ``nn.Linear(128, 10)`` trained
  with cross-entropy (the usual network);
* ``nystrom_di``: the same CNN + :class:`~kernel_layers.NystromLayer` (J landmarks,
  Gaussian kernel) trained end to end with DI through
  :class:`~kernel_layers.KernelClassifier` (landmarks initialised from backbone
  features of the first training batch, closed-form ridge read-out),

and prints each one's test accuracy and wall time (training + read-out fit + test), with
the command, machine and date.

Usage::

    python benchmarks/cnn_fashion.py --root DIR [--epochs 3] [--landmarks 500] [--threads 2]

``DIR`` holds Fashion-MNIST's four IDX files (offline on Debian:
``apt-get download dataset-fashion-mnist && dpkg-deb -x dataset-fashion-mnist_*.deb X``,
then ``--root X/usr/share/datasets/fashion-mnist``).
"""

from __future__ import annotations

import argparse
import datetime
import platform
import sys
import time

import lightning as L
import torch
from torch import Tensor, nn
from torchmetrics.classification import MulticlassAccuracy

from kernel_layers import KernelClassifier, NystromLayer
from kernel_layers.data import FashionMNISTDataModule
from kernel_layers.training.backbones import SmallCNN
from kernel_layers.training.heads import DEFAULT_HEAD_RHO


class LinearHeadCNN(L.LightningModule):
    """``SmallCNN`` + a linear softmax head trained with cross-entropy (the baseline)."""

    def __init__(self, lr: float, features: int = 128, num_classes: int = 10) -> None:
        super().__init__()
        self.backbone = SmallCNN(1, features)
        self.head = nn.Linear(features, num_classes)
        self.lr = lr
        self.test_acc = MulticlassAccuracy(num_classes, average="micro")

    def forward(self, x: Tensor) -> Tensor:
        return self.head(self.backbone(x))

    def training_step(self, batch: list[Tensor], batch_idx: int) -> Tensor:
        x, y = batch
        loss = nn.functional.cross_entropy(self(x), y.long())
        self.log("train/loss", loss, on_step=False, on_epoch=True)
        return loss

    def test_step(self, batch: list[Tensor], batch_idx: int) -> None:
        x, y = batch
        self.test_acc.update(self(x), y)
        self.log("test/acc", self.test_acc, on_epoch=True)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.Adam(self.parameters(), lr=self.lr)


def _trainer(epochs: int) -> L.Trainer:
    return L.Trainer(
        accelerator="cpu",
        max_epochs=epochs,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        deterministic=True,
        num_sanity_val_steps=0,
    )


def run(name: str, model: L.LightningModule, args: argparse.Namespace) -> tuple[float, float]:
    """Fit for ``args.epochs`` epochs, test; return ``(test accuracy, wall seconds)``."""
    dm = FashionMNISTDataModule(
        args.root,
        flatten=False,
        download=False,
        batch_size=args.batch_size,
        val_fraction=0.0,
    )
    start = time.perf_counter()
    trainer = _trainer(args.epochs)
    trainer.fit(model, dm)
    acc = trainer.test(model, dm, verbose=False)[0]["test/acc"]
    seconds = time.perf_counter() - start
    print(f"{name:12s} test_acc={acc:.4f} wall_s={seconds:.1f}", flush=True)
    return acc, seconds


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", required=True, help="folder of the four IDX files")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--landmarks", type=int, default=500, help="J of the Nystrom layer")
    parser.add_argument("--gamma", type=float, default=0.05)
    parser.add_argument("--batch-size", type=int, default=1000)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--models", nargs="+", default=["linear", "nystrom_di"])
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    print(f"command: python {' '.join(sys.argv)}")
    print(
        f"machine: {platform.machine()} {platform.processor() or ''} {torch.get_num_threads()} "
        f"threads, torch {torch.__version__}, lightning {L.__version__}"
    )
    print(f"date: {datetime.datetime.now().isoformat(timespec='seconds')}")
    print(
        f"epochs={args.epochs} batch={args.batch_size} lr={args.lr} J={args.landmarks} "
        f"gamma={args.gamma}"
    )
    for name in args.models:
        L.seed_everything(0, verbose=False)
        if name == "linear":
            model: L.LightningModule = LinearHeadCNN(args.lr)
        elif name == "nystrom_di":
            model = KernelClassifier(
                NystromLayer(128, args.landmarks, gamma=args.gamma),
                num_classes=10,
                backbone=SmallCNN(1, 128),
                objective="di",
                lr=args.lr,
                head_rho=DEFAULT_HEAD_RHO,
            )
        else:
            parser.error(f"unknown model {name!r}")
        run(name, model, args)


if __name__ == "__main__":
    main()
