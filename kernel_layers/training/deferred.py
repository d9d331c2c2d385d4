"""Deferred checks in training: record during the epoch, read once at its end.

``KernelClassifier`` adds :class:`EpochChecks` unless ``check_every="step"``. When the
checks are deferred (:func:`defers_checks`: ``check_every="epoch"``, or the default
``"auto"`` on any device but the CPU) it gives each training epoch a fresh
:class:`~kernel_layers.numerics.deferred.DeferredChecks` (the steps record into it
without reading device values) and reads it once when the epoch ends: a failure then
raises (bad inputs, a failed factorisation) or stops the fit (divergence), with the
parameters from the epoch's start. The recording part lives in
:mod:`kernel_layers.numerics.deferred` (torch only).
"""

from __future__ import annotations

from typing import Any

import torch
from lightning.pytorch import Callback, LightningModule, Trainer

from kernel_layers.numerics.deferred import DeferredChecks
from kernel_layers.training.divergence import DivergenceGuard

__all__ = ["CHECK_EVERY", "EpochChecks", "defers_checks"]

#: ``KernelClassifier(check_every=...)``: per step on the CPU and once per epoch elsewhere
#: (``"auto"``), or always one of the two.
CHECK_EVERY = ("auto", "step", "epoch")


def defers_checks(check_every: str, device: torch.device) -> bool:
    """Whether the training checks are recorded on ``device`` and read once per epoch:
    ``"epoch"``, or ``"auto"`` on any device but the CPU (where a read costs no
    synchronisation, and a failure is reported at its step)."""
    return check_every == "epoch" or (check_every == "auto" and device.type != "cpu")


def _guard(module: LightningModule) -> DivergenceGuard:
    guard = getattr(module, "guard", None)
    if not isinstance(guard, DivergenceGuard):
        raise TypeError(
            f"EpochChecks: the model must have a DivergenceGuard 'guard' (KernelClassifier "
            f"has one), got {type(module).__name__}"
        )
    return guard


def _reason(check_every: str) -> str:
    if check_every == "epoch":
        return "check_every='epoch'"
    return "check_every='auto' off the CPU; check_every='step' reads each check at its step"


class EpochChecks(Callback):
    """Read a training epoch's deferred checks once, at its end (one host read).

    Args:
        check_every: the model's choice (:data:`CHECK_EVERY`); with ``"auto"`` the
            device the model trains on decides (:func:`defers_checks`).
    """

    def __init__(self, check_every: str = "epoch") -> None:
        self.check_every = check_every

    def on_train_epoch_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        guard = _guard(pl_module)
        if guard.stop_reason is None and defers_checks(self.check_every, pl_module.device):
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
            f"were read at the epoch's end ({_reason(self.check_every)}) and the parameters "
            "from its start are restored)"
        )
