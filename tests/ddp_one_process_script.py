"""Fit a KernelClassifier for two epochs under ``strategy="ddp"`` with one CPU device, on
a ``TensorDataModule``, and write the trained steps to ``OUT.0``.

Usage: ``python tests/ddp_one_process_script.py OUT``; for ``tests/test_distributed.py``.
"""

from __future__ import annotations

import sys
from pathlib import Path

from ddp_common import quiet_ddp_trainer, run_script
from sklearn.datasets import make_classification

from kernel_layers import FourierLayer, KernelClassifier
from kernel_layers.data import TensorDataModule


def main() -> None:
    out = Path(sys.argv[1])
    x, y = make_classification(
        n_samples=400, n_features=6, n_informative=4, n_classes=3, random_state=0
    )
    dm = TensorDataModule(x[:300], y[:300], x[300:], y[300:], batch_size=45)
    trainer = quiet_ddp_trainer(devices=1, max_epochs=2)
    trainer.fit(KernelClassifier(FourierLayer(6, 20, seed=0), num_classes=3), dm)
    Path(f"{out}.{trainer.global_rank}").write_text(str(trainer.global_step))


if __name__ == "__main__":
    run_script(main)
