"""Fit a KernelClassifier for one epoch under 2-process DDP, each process on its own
rows through a plain ``DataLoader`` (180 and 140 rows, batches of 45: the last global
batch is 45 + 5 = 50 rows, more than J = 20), and write each process's trained steps to
``OUT.<rank>``.

Usage: ``python tests/ddp_short_batch_script.py OUT``; for ``tests/test_distributed.py``.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import torch
from ddp_common import own_rows_trainer, run_script
from sklearn.datasets import make_classification
from torch.utils.data import DataLoader, TensorDataset

from kernel_layers import FourierLayer, KernelClassifier


def main() -> None:
    out = Path(sys.argv[1])
    x, y = make_classification(
        n_samples=320, n_features=6, n_informative=4, n_classes=3, random_state=0
    )
    rank = int(os.environ.get("LOCAL_RANK", 0))
    rows = slice(0, 180) if rank == 0 else slice(180, 320)
    data = TensorDataset(torch.tensor(x[rows]).float(), torch.tensor(y[rows]))
    trainer = own_rows_trainer()
    model = KernelClassifier(FourierLayer(6, 20, seed=0), num_classes=3)
    trainer.fit(model, train_dataloaders=DataLoader(data, batch_size=45))
    Path(f"{out}.{trainer.global_rank}").write_text(str(trainer.global_step))


if __name__ == "__main__":
    run_script(main)
