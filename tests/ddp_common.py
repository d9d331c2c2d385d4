"""What the DDP scripts of ``tests/test_distributed.py`` share."""

from __future__ import annotations

from typing import Any

import lightning as L


def quiet_ddp_trainer(**overrides: Any) -> L.Trainer:
    """A quiet one-epoch CPU trainer of 2 DDP processes; keyword arguments override."""
    options: dict[str, Any] = {
        "strategy": "ddp",
        "accelerator": "cpu",
        "devices": 2,
        "max_epochs": 1,
        "logger": False,
        "enable_checkpointing": False,
        "enable_progress_bar": False,
        "enable_model_summary": False,
    }
    return L.Trainer(**{**options, **overrides})


def own_rows_trainer() -> L.Trainer:
    """:func:`quiet_ddp_trainer` whose 2 processes each train on the rows their plain
    ``DataLoader`` serves (no distributed sampler)."""
    return quiet_ddp_trainer(use_distributed_sampler=False)
