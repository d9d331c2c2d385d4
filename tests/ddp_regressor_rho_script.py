"""Fit a KernelRegressor (``rho=None``) for one epoch under 2-process DDP, each process
on its own rows through a plain ``DataLoader``, and write the ``rho`` each process
trained with to ``OUT.<rank>``.

Usage: ``python tests/ddp_regressor_rho_script.py OUT``; for ``tests/test_distributed.py``.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import torch
from ddp_common import own_rows_trainer, run_script
from sklearn.datasets import make_regression
from torch.utils.data import DataLoader, TensorDataset

from kernel_layers import FourierLayer, KernelRegressor


def main() -> None:
    out = Path(sys.argv[1])
    x, y = make_regression(n_samples=360, n_features=6, noise=200.0, random_state=0)
    rank = int(os.environ.get("LOCAL_RANK", 0))
    rows = slice(rank * 180, (rank + 1) * 180)  # each process's own rows: its own penalty
    data = TensorDataset(torch.tensor(x[rows]).float(), torch.tensor(y[rows]).float())
    model = KernelRegressor(FourierLayer(6, 20, seed=0))
    trainer = own_rows_trainer()
    trainer.fit(model, train_dataloaders=DataLoader(data, batch_size=45))
    out.with_name(f"{out.name}.{trainer.global_rank}").write_text(repr(model.rho))


if __name__ == "__main__":
    run_script(main)
