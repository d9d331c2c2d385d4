"""Fit a KernelClassifier for a few steps: 2-process DDP (batch b) or 1 process (batch 2b).

Usage: ``python tests/ddp_fit_script.py {ddp|single} {fourier|nystrom} OUT.pt [OBJECTIVE]``;
saves the trained kernel layer's state dict (rank 0) and the logged ``train/loss_epoch``
(objectives ``"ls"`` and ``"ce"``) for ``tests/test_distributed.py``.
"""

from __future__ import annotations

import os
import sys

import lightning as L
import torch
from ddp_common import run_script
from sklearn.datasets import make_classification
from torch.utils.data import DataLoader, TensorDataset

from kernel_layers import FourierLayer, KernelClassifier, NystromLayer

BATCH = 64


def main() -> None:
    mode, layer_name, out = sys.argv[1:4]
    objective = sys.argv[4] if len(sys.argv) > 4 else "di"
    L.seed_everything(0)
    x, y = make_classification(
        n_samples=512, n_features=6, n_informative=4, n_classes=3, random_state=0
    )
    x = (x - x.min(0)) / (x.max(0) - x.min(0))  # one global scaling for every process
    world = 2 if mode == "ddp" else 1
    # Process r trains on rows r, r + 2, ... in order, so each DDP step sees exactly the
    # rows of the single process's step (Lightning's own sampler would shuffle).
    rank = int(os.environ.get("LOCAL_RANK", 0))
    data = TensorDataset(
        torch.tensor(x[rank::world], dtype=torch.float64), torch.tensor(y[rank::world])
    )
    loader = DataLoader(data, batch_size=BATCH * 2 // world, shuffle=False, drop_last=True)
    if layer_name == "fourier":
        layer = FourierLayer(6, 24, gamma=0.5, seed=0, dtype=torch.float64)
    else:
        layer = NystromLayer(6, 24, gamma=0.5, seed=0, dtype=torch.float64)
    model = KernelClassifier(
        layer, num_classes=3, lr=1e-2, init_landmarks=False, objective=objective
    )
    trainer = L.Trainer(
        strategy="ddp" if world == 2 else "auto",
        accelerator="cpu",
        devices=world,
        max_steps=4 if objective == "di" else 8,  # two epochs of four steps
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        deterministic=True,
        use_distributed_sampler=False,
    )
    trainer.fit(model, train_dataloaders=loader)
    state = {k: v.detach().cpu() for k, v in model.kernel_layer.state_dict().items()}
    if objective != "di":
        state["train/loss_epoch"] = trainer.callback_metrics["train/loss_epoch"].cpu()
    if trainer.global_rank == 0:
        torch.save(state, out)


if __name__ == "__main__":
    run_script(main)
