"""Train a tiny KernelClassifier with checkpoints; optionally SIGKILL itself mid-run.

Used by ``tests/test_resume.py``::

    python tests/resume_script.py OUT_DIR [--kill-at STEP] [--resume] [--devices N]

Nystrom + DI on generated data, PlateauDecay (patience 1) + DISaturationStopping,
``deterministic=True``, ``ModelCheckpoint(save_last=True, every_n_train_steps=1)`` into
``OUT_DIR/ckpt``. ``--kill-at STEP`` sends SIGKILL to the process after the backward
pass of global step ``STEP`` (before the optimiser step, so mid-epoch and mid-step);
``--resume`` continues from ``ckpt_path="last"`` with ``weights_only=True``. At the end
the final state (model, optimiser, callbacks, global step) is saved to
``OUT_DIR/final.pt``. ``--devices 2`` runs two CPU processes under DDP, each with half
of a batch (every process kills itself at the same step).

Exact mid-epoch resume needs the data order restored: Lightning resumes a map-style
``DataLoader`` mid-epoch only if it is stateful (``state_dict`` / ``load_state_dict``).
The library's data modules train through ``kernel_layers.data.sampling.ResumableLoader``: a
per-epoch seeded permutation (``set_epoch``, which Lightning calls every epoch) that skips
the batches already consumed; this script uses the library's ``TensorDataModule`` as is.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from pathlib import Path
from typing import Any

import lightning as L
import torch
from ddp_common import run_script
from lightning.pytorch.callbacks import Callback, ModelCheckpoint

from kernel_layers import KernelClassifier, NystromLayer
from kernel_layers.callbacks import DISaturationStopping, PlateauDecay
from kernel_layers.data import TensorDataModule

EPOCHS = 6
BATCH = 60
TRAIN = 300  # 5 batches per epoch


class KillAt(Callback):
    """SIGKILL this process after the backward pass of global step ``step``."""

    def __init__(self, step: int) -> None:
        self.step = step

    def on_before_optimizer_step(self, trainer: L.Trainer, *args: Any) -> None:
        if trainer.global_step == self.step:
            sys.stdout.flush()
            os.kill(os.getpid(), signal.SIGKILL)


def data(devices: int = 1) -> TensorDataModule:
    gen = torch.Generator().manual_seed(0)
    y = torch.arange(TRAIN + 100) % 3
    centres = torch.rand(3, 5, generator=gen)
    x = centres[y] + 0.35 * torch.randn(len(y), 5, generator=gen)
    return TensorDataModule(
        x[:TRAIN],
        y[:TRAIN],
        x[TRAIN:],
        y[TRAIN:],
        batch_size=BATCH // devices,  # per process: the global batch stays BATCH rows
        val_fraction=0.0,
        seed=3,
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("out", type=Path)
    parser.add_argument("--kill-at", type=int, default=None)
    parser.add_argument("--resume", action="store_true")
    parser.add_argument("--devices", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(1)
    L.seed_everything(0, verbose=False)
    model = KernelClassifier(NystromLayer(5, 12, gamma=2.0), num_classes=3, lr=0.05)
    plateau = PlateauDecay(patience=1, threshold=0.05, verbose=False)
    stopping = DISaturationStopping(patience=2)
    callbacks: list[Callback] = [
        plateau,
        stopping,
        ModelCheckpoint(dirpath=args.out / "ckpt", save_last=True, every_n_train_steps=1),
    ]
    if args.kill_at is not None:
        callbacks.append(KillAt(args.kill_at))
    trainer = L.Trainer(
        accelerator="cpu",
        devices=args.devices,
        strategy="ddp" if args.devices > 1 else "auto",
        max_epochs=EPOCHS,
        deterministic=True,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=callbacks,
    )
    trainer.fit(
        model,
        data(args.devices),
        ckpt_path="last" if args.resume else None,
        weights_only=True if args.resume else None,
    )
    if not trainer.is_global_zero:
        return
    torch.save(
        {
            "model": model.state_dict(),
            "optimizer": trainer.optimizers[0].state_dict(),
            "plateau": plateau.state_dict(),
            "stopping": stopping.state_dict(),
            "global_step": trainer.global_step,
            "epoch": trainer.current_epoch,
        },
        args.out / "final.pt",
    )


if __name__ == "__main__":
    run_script(main)
