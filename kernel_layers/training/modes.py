"""Running a model's own passes over data (read-out fits, baselines, landmark draws): in
eval mode whatever mode it trains in, on batches prepared as Lightning's loops prepare
them."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from torch import Tensor, nn

__all__ = ["eval_mode", "model_inputs"]


@contextlib.contextmanager
def eval_mode(module: nn.Module) -> Iterator[None]:
    """Every submodule in eval mode within the block (no batch-norm updates, no
    dropout); each one's mode restored after it."""
    modes = {m: m.training for m in module.modules()}
    module.eval()
    try:
        yield
    finally:
        for m, training in modes.items():
            m.training = training


def model_inputs(model: nn.Module, *tensors: Tensor) -> tuple[Tensor, ...]:
    """``tensors`` (a batch's inputs and targets) on ``model``'s device, converted by the
    precision plugin of the trainer the model is attached to, as Lightning's loops
    convert a batch (``Trainer(precision="64-true")``: floating tensors to float64;
    integer labels untouched). A model attached to no trainer takes them as they are."""
    device = getattr(model, "device", None)
    moved = tuple(t.to(device) for t in tensors)
    trainer: Any = getattr(model, "_trainer", None)
    if trainer is None:
        return moved
    return tuple(trainer.precision_plugin.convert_input(moved))
