"""What the DDP scripts of ``tests/test_distributed.py`` share."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import lightning as L

from kernel_layers.cli.app import close_process_group


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


def run_script(main: Callable[[], None]) -> None:
    """Run a script's ``main``, then destroy its process group as the console script
    does (a gloo group left to the interpreter's exit can abort the process)."""
    try:
        main()
    finally:
        close_process_group()
