"""Running a model's passes over data in eval mode, whatever mode it trains in."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from torch import nn

__all__ = ["eval_mode"]


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
