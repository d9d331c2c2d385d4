"""What the 2-process DDP scripts of ``tests/test_distributed.py`` share."""

from __future__ import annotations

import lightning as L


def own_rows_trainer() -> L.Trainer:
    """A quiet one-epoch CPU trainer of 2 DDP processes, each training on the rows its
    plain ``DataLoader`` serves (no distributed sampler)."""
    return L.Trainer(
        strategy="ddp",
        accelerator="cpu",
        devices=2,
        max_epochs=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        use_distributed_sampler=False,
    )
