"""Keep the model of the best epoch on held-out data, and hand it back when fit ends."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

import lightning.pytorch as pl
import torch
from lightning_utilities.core.apply_func import apply_to_collection
from typing_extensions import override

from kernel_layers._validation import check_bool
from kernel_layers.callbacks.monitor import MonitorCallback, should_skip
from kernel_layers.callbacks.untrained_baseline import untrained_score

__all__ = ["KeepBest"]

_OWNER = "KeepBest"
#: The monitors the untrained map can be scored on: ``KernelClassifier``'s validation
#: accuracy and ``KernelRegressor``'s validation ``R^2``.
UNTRAINED_MONITORS = ("val/acc", "val/r2")


class KeepBest(MonitorCallback):
    """Copy the module's weights at each epoch whose monitored value is the best so far,
    and load the best copy back into the module when ``fit`` ends.

    After ``trainer.fit`` the module in hand is then the one of the best epoch on the
    monitored metric (by default the validation accuracy ``val/acc`` that
    :class:`~kernel_layers.KernelClassifier` logs; ``val/di`` with
    ``KernelClassifier(keep_best="val/di")``), not the last one: training that fits the
    training rows at the cost of held-out ones does not leave the returned model worse.
    :class:`~kernel_layers.KernelClassifier` adds this callback itself with ``keep_best``.

    With ``monitor="val/acc"`` (a classifier) or ``"val/r2"`` (a
    :class:`~kernel_layers.KernelRegressor`) and ``include_untrained``, the untrained map
    is a candidate too: when the first epoch starts (after the model's ``on_train_start``
    has drawn its landmarks), a fresh ridge read-out is fitted on the map's features of
    the training rows and scored on the validation rows (as
    :class:`~kernel_layers.callbacks.UntrainedBaseline` does on the test rows); if no
    epoch beats it, the untrained map is handed back (``best_epoch == -1``), its read-out
    refitted when it is next used. Training then never leaves the model worse on
    validation than where it started.

    The value is read at the end of each training epoch, after that epoch's validation
    (validate every epoch: ``check_val_every_n_epoch=1``). The copy lives on the CPU and
    is part of the callback's checkpoint state, so a resumed fit still returns the best
    epoch of the whole run. This is Lightning's ``ModelCheckpoint(monitor=...)`` followed
    by loading its best file, in memory.

    Args:
        monitor: key of ``trainer.callback_metrics`` to watch (an epoch-level value).
        mode: ``"max"`` if higher is better (accuracy, DI), ``"min"`` if lower is (a loss).
        threshold: improvement margin, ``>= 0``.
        threshold_mode: ``"rel"`` or ``"abs"``.
        strict: raise if ``monitor`` is missing at the end of an epoch; if ``False``, warn
            and skip the epoch.
        verbose: say which epoch's weights were restored.
        include_untrained: with ``monitor="val/acc"`` or ``"val/r2"``, score the untrained
            map as a candidate (see above; needs a :class:`~kernel_layers.KernelClassifier`
            or :class:`~kernel_layers.KernelRegressor` and a :mod:`kernel_layers.data`
            module with a validation split).

    Attributes:
        best_score (float): best monitored value so far.
        best_epoch (int | None): the epoch of the copy (``-1``: the untrained map;
            ``None``: none yet).
        best_state (dict[str, Any] | None): the copied ``state_dict`` (tensors on the CPU).

    Raises:
        RuntimeError: at the end of an epoch, if ``strict`` and ``monitor`` was not logged.
    """

    def __init__(
        self,
        monitor: str = "val/acc",
        mode: str = "max",
        threshold: float = 0.0,
        threshold_mode: str = "abs",
        strict: bool = True,
        verbose: bool = True,
        include_untrained: bool = True,
    ) -> None:
        super().__init__(
            monitor=monitor,
            mode=mode,
            threshold=threshold,
            threshold_mode=threshold_mode,
            strict=strict,
        )
        self.verbose = check_bool(_OWNER, "verbose", verbose)
        self.include_untrained = check_bool(_OWNER, "include_untrained", include_untrained)
        self.best_epoch: int | None = None
        self.best_state: dict[str, Any] | None = None

    @override
    def _extra_state(self) -> dict[str, Any]:
        return {"best_epoch": self.best_epoch, "best_state": self.best_state}

    @override
    def _load_extra(self, state: Mapping[str, Any]) -> None:
        epoch = state["best_epoch"]
        self.best_epoch = None if epoch is None else int(epoch)
        self.best_state = state["best_state"]

    @override
    def on_train_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if (
            not self.include_untrained
            or self.monitor not in UNTRAINED_MONITORS
            or self.best_epoch is not None
            or trainer.current_epoch != 0
            or should_skip(trainer)
        ):
            return
        datamodule = getattr(trainer, "datamodule", None)
        head = getattr(pl_module, "head", None)
        if datamodule is None or head is None or not hasattr(datamodule, "val_dataloader"):
            raise TypeError(
                f"{_OWNER}: include_untrained needs a KernelClassifier (or KernelRegressor) "
                "and a kernel_layers data module with a validation split, got "
                f"{type(pl_module).__name__} and {type(datamodule).__name__} (or pass "
                "include_untrained=False)"
            )
        self._keep(pl_module, untrained_score(pl_module, head, datamodule, "val"), -1)

    @override
    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        current = self._epoch_value(trainer)
        if current is None or not self._improves(current):
            return
        self._keep(pl_module, current, trainer.current_epoch)

    def _keep(self, pl_module: pl.LightningModule, score: float, epoch: int) -> None:
        self.best_score = score
        self.best_epoch = epoch
        # tensors copied to the CPU first, then the rest (extra states) copied there
        self.best_state = copy.deepcopy(
            apply_to_collection(pl_module.state_dict(), torch.Tensor, _to_cpu)
        )

    @override
    def on_fit_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self.best_state is None:
            return
        pl_module.load_state_dict(copy.deepcopy(self.best_state))
        if self.verbose:
            which = "the untrained map" if self.best_epoch == -1 else f"epoch {self.best_epoch}"
            self._info(
                f"{_OWNER}: restored the weights of {which}, the best on "
                f"'{self.monitor}' ({self.best_score:.6g})"
            )


def _to_cpu(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.detach().to("cpu", copy=True)
