"""Deferred checks in training: record during the epoch, read once at its end.

With ``KernelClassifier(check_every="epoch")`` the model adds :class:`EpochChecks`,
which gives each training epoch a fresh
:class:`~kernel_layers.numerics.deferred.DeferredChecks` (the steps record into it
without reading device values) and reads it once when the epoch ends: a failure then
raises (bad inputs, a failed factorisation) or stops the fit (divergence), with the
parameters from the epoch's start. The recording part lives in
:mod:`kernel_layers.numerics.deferred` (torch only).
"""

from __future__ import annotations

from typing import Any

from lightning.pytorch import Callback, LightningModule, Trainer

from kernel_layers.numerics.deferred import DeferredChecks
from kernel_layers.training.divergence import DivergenceGuard

__all__ = ["EpochChecks"]


def _guard(module: LightningModule) -> DivergenceGuard:
    guard = getattr(module, "guard", None)
    if not isinstance(guard, DivergenceGuard):
        raise TypeError(
            f"EpochChecks: the model must have a DivergenceGuard 'guard' (KernelClassifier "
            f"has one), got {type(module).__name__}"
        )
    return guard


class EpochChecks(Callback):
    """Read a training epoch's deferred checks once, at its end (one host read)."""

    def on_train_epoch_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        guard = _guard(pl_module)
        if guard.stop_reason is None:
            params: list[Any] = [
                p for opt in trainer.optimizers for g in opt.param_groups for p in g["params"]
            ]
            guard.snapshot(params)  # what a failure found at the epoch's end goes back to
            guard.deferred = DeferredChecks()

    def on_train_epoch_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        guard = _guard(pl_module)
        checks, guard.deferred = guard.deferred, None
        failure = None if checks is None else checks.first_failure()
        if failure is None:
            return
        if isinstance(failure, FloatingPointError):
            guard.stop(pl_module, f"{failure} in one of its steps", None)
            return
        guard.restore()
        raise type(failure)(
            f"{failure} (in a training batch of epoch {pl_module.current_epoch}; the checks "
            "were read at the epoch's end, check_every='epoch', and the parameters from its "
            "start are restored)"
        )
