"""Keep the model of the best epoch on held-out data, and hand it back when fit ends."""

from __future__ import annotations

import copy
import math
from collections.abc import Mapping
from typing import Any

import lightning.pytorch as pl
import torch
from lightning.pytorch.utilities.rank_zero import rank_zero_warn
from lightning_utilities.core.apply_func import apply_to_collection
from typing_extensions import override

from kernel_layers._validation import check_bool
from kernel_layers.callbacks.monitor import (
    EPOCH_END,
    MonitorCallback,
    check_monitor,
    should_skip,
)
from kernel_layers.callbacks.untrained_baseline import SQUARED_ERROR_KEY, untrained_scores

__all__ = ["KeepBest", "scores_untrained"]

_OWNER = "KeepBest"
#: The monitors the untrained map can be scored on: ``KernelClassifier``'s validation
#: accuracy and ``KernelRegressor``'s validation ``R^2``.
UNTRAINED_MONITORS = ("val/acc", "val/r2")
#: When :class:`KeepBest` reads its metrics (for messages).
VALIDATION_END = "the end of a validation"


def scores_untrained(datamodule: Any) -> bool:
    """Whether ``datamodule`` serves what scoring the untrained map reads: every training
    row once (``train_eval_dataloader``) and the validation rows (``val_dataloader``), as
    a :mod:`kernel_layers.data` module does."""
    return all(hasattr(datamodule, name) for name in ("train_eval_dataloader", "val_dataloader"))


def validation_batches(trainer: pl.Trainer, batches: int) -> int:
    """How many of a validation loader's ``batches`` a validation runs under the
    Trainer's ``limit_val_batches`` (a count per process, or a fraction of ``batches``),
    as Lightning counts them, every process's together: the untrained map is scored on
    as many rows as the epochs are (under several processes the epochs' rows are the
    processes' interleaved shards, so they differ a little)."""
    limit = trainer.limit_val_batches
    if isinstance(limit, int):
        return min(batches, limit * trainer.world_size)
    return batches if limit >= 1.0 else int(batches * limit)


class KeepBest(MonitorCallback):
    """Copy the module's weights where the monitored value is the best so far (after each
    validation, or each training epoch for a training metric), and load the best copy
    back into the module when ``fit`` ends.

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
    validation than where it started. A model whose read-out is trained by gradient
    (objective ``"ce"``, or a group lasso) has no untrained read-out to hand back: its
    untrained map is no candidate.

    With ``tie_break``, a second metric (lower is better) decides between epochs whose
    monitored values tie: an epoch that does not improve on the best by the threshold
    margin, yet is not worse than it, is kept if its ``tie_break`` value is lower.
    Validation accuracy moves in steps of one row, so ties are frequent on a few hundred
    rows; ``KernelClassifier(keep_best="val/acc")`` breaks them by its ridge read-out's
    squared error ``val/mse``, the untrained map's included (its squared error is known
    for ``val/mse`` only), as the scikit-learn estimators do. Under several processes
    the untrained map is scored on every validation row, the epochs on the distributed
    sampler's shards (which may repeat a few rows), so a tie between them can be missed.

    A metric that validation logs is read at the end of each validation of the fit, and
    the weights copied are the ones that validation scored (with ``val_check_interval``,
    steps may follow it in the epoch), before a checkpoint written at that validation;
    a metric logged in training (``train/di_epoch``) is read at the end of each training
    epoch. The copy lives
    on the CPU and is part of the callback's checkpoint state, so a resumed fit still
    returns the best epoch of the whole run. This is Lightning's
    ``ModelCheckpoint(monitor=...)`` followed by loading its best file, in memory.

    Args:
        monitor: key of ``trainer.callback_metrics`` to watch (an epoch-level value).
        mode: ``"max"`` if higher is better (accuracy, DI), ``"min"`` if lower is (a loss).
            ``None`` (default): read from ``monitor``, ``"max"`` for the library's DI,
            accuracy and ``R^2``, ``"min"`` for its losses and squared errors; any
            other metric needs ``mode``.
        threshold: improvement margin, ``>= 0``.
        threshold_mode: ``"rel"`` or ``"abs"``.
        strict: raise if ``monitor`` is missing where it is read; if ``False``, warn and
            skip that validation or epoch.
        verbose: say which epoch's weights were restored.
        include_untrained: with ``monitor="val/acc"`` or ``"val/r2"``, score the untrained
            map as a candidate (see above; needs a :class:`~kernel_layers.KernelClassifier`
            or :class:`~kernel_layers.KernelRegressor` and a :mod:`kernel_layers.data`
            module with a validation split).
        tie_break: key of ``trainer.callback_metrics`` (lower is better) that decides
            between epochs of equal ``monitor`` values; ``None``: the earlier is kept.

    Attributes:
        best_score (float): best monitored value so far.
        best_epoch (int | None): the epoch of the copy (``-1``: the untrained map;
            ``None``: none yet).
        best_state (dict[str, Any] | None): the copied ``state_dict`` (tensors on the CPU).
        best_tie (float | None): the ``tie_break`` value of the copy (``None``: none read).

    Raises:
        RuntimeError: where it is read, if ``strict`` and ``monitor`` (or ``tie_break``)
            was not logged.
    """

    def __init__(
        self,
        monitor: str = "val/acc",
        mode: str | None = None,
        threshold: float = 0.0,
        threshold_mode: str = "abs",
        strict: bool = True,
        verbose: bool = True,
        include_untrained: bool = True,
        tie_break: str | None = None,
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
        if tie_break is not None:
            check_monitor(_OWNER, tie_break, "tie_break")
        self.tie_break = tie_break
        self.best_epoch: int | None = None
        self.best_state: dict[str, Any] | None = None
        self.best_tie: float | None = None
        #: The epoch whose weights the last ``fit`` handed back (``-1``: the untrained
        #: map; ``None``: none, the last weights stayed).
        self.restored_epoch: int | None = None
        # the epoch whose monitored value its validation logged and this callback read
        self._validated_copy_epoch = -1

    @override
    def _extra_state(self) -> dict[str, Any]:
        return {
            "best_epoch": self.best_epoch,
            "best_state": self.best_state,
            "best_tie": self.best_tie,
            "validated_epoch": self._validated_copy_epoch,
        }

    @override
    def _load_extra(self, state: Mapping[str, Any]) -> None:
        epoch, tie = state["best_epoch"], state["best_tie"]
        self.best_epoch = None if epoch is None else int(epoch)
        self.best_state = state["best_state"]
        self.best_tie = None if tie is None else float(tie)
        self._validated_copy_epoch = int(state["validated_epoch"])

    @override
    def on_train_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        super().on_train_epoch_start(trainer, pl_module)
        if (
            not self.include_untrained
            or self.monitor not in UNTRAINED_MONITORS
            or getattr(pl_module, "readout", None) is not None  # trained by gradient
            or self.best_epoch is not None
            or trainer.current_epoch != 0
            or should_skip(trainer)
        ):
            return
        datamodule = getattr(trainer, "datamodule", None)
        head = getattr(pl_module, "head", None)
        if head is None or datamodule is None or not scores_untrained(datamodule):
            raise TypeError(
                f"{_OWNER}: include_untrained needs a KernelClassifier (or KernelRegressor) "
                "and a kernel_layers data module with a validation split, got "
                f"{type(pl_module).__name__} and {type(datamodule).__name__} (or pass "
                "include_untrained=False)"
            )
        batches = validation_batches(trainer, len(datamodule.val_dataloader()))
        score, squared_error = untrained_scores(pl_module, head, datamodule, "val", batches)
        tie = squared_error if self.tie_break == SQUARED_ERROR_KEY else None
        if math.isfinite(score):  # a candidate no epoch could ever beat is none
            self._keep(pl_module, score, -1, tie)

    @override
    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        super().on_validation_end(trainer, pl_module)
        if should_skip(trainer) or not self._from_validation:
            return  # a metric validation does not log is read at the epoch's end
        # Read right after the validation, on the weights it scored (steps may follow it
        # in the epoch), and before a checkpoint written at this validation.
        current = self._logged_value(trainer, self.monitor, VALIDATION_END)
        tie = self._tie_value(trainer, VALIDATION_END)
        self._validated_copy_epoch = trainer.current_epoch
        if current is not None and (self._improves(current) or self._wins_tie(current, tie)):
            self._keep(pl_module, current, trainer.current_epoch, tie)

    @override
    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self._validated_copy_epoch == trainer.current_epoch:
            return  # read at this epoch's validation
        current = self._epoch_value(trainer)
        if current is None:
            return
        tie = self._tie_value(trainer)
        if self._improves(current) or self._wins_tie(current, tie):
            self._keep(pl_module, current, trainer.current_epoch, tie)

    def _tie_value(self, trainer: pl.Trainer, when: str = EPOCH_END) -> float | None:
        """The ``tie_break`` value logged by ``when`` (``None`` without one).

        Raises:
            RuntimeError: ``strict`` and ``tie_break`` was not logged.
        """
        return None if self.tie_break is None else self._logged_value(trainer, self.tie_break, when)

    def _wins_tie(self, current: float, tie: float | None) -> bool:
        """Whether an epoch that ties with the best on ``monitor`` (no improvement by
        the threshold margin, and not worse) is better on ``tie_break``."""
        not_worse = current >= self.best_score if self.mode == "max" else current <= self.best_score
        return not_worse and tie is not None and self.best_tie is not None and tie < self.best_tie

    def _keep(
        self, pl_module: pl.LightningModule, score: float, epoch: int, tie: float | None
    ) -> None:
        self.best_score = score
        self.best_tie = tie
        self.best_epoch = epoch
        # tensors copied to the CPU first, then the rest (extra states) copied there
        self.best_state = copy.deepcopy(
            apply_to_collection(pl_module.state_dict(), torch.Tensor, _to_cpu)
        )

    @property
    def validated_an_epoch(self) -> bool:
        """Whether a validation of this fit scored a trained epoch."""
        return self._validated_copy_epoch >= 0

    @override
    def on_fit_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.restored_epoch = None
        # Only the untrained map scored (no validation after an epoch): keep the last.
        untrained_only = self.best_epoch == -1 and not self.validated_an_epoch
        if self.best_state is None or untrained_only:
            if not should_skip(trainer) and trainer.current_epoch > 0:
                rank_zero_warn(
                    f"{_OWNER}: no validation scored '{self.monitor}' after a training "
                    "epoch, so the last weights are kept (the data has no validation rows, "
                    "limit_val_batches=0, or validation runs less often than the fit's "
                    "epochs)",
                    category=RuntimeWarning,
                )
            return
        pl_module.load_state_dict(copy.deepcopy(self.best_state))
        self.restored_epoch = self.best_epoch
        if self.verbose:
            which = "the untrained map" if self.best_epoch == -1 else f"epoch {self.best_epoch}"
            self._info(
                f"{_OWNER}: restored the weights of {which}, the best on "
                f"'{self.monitor}' ({self.best_score:.6g})"
            )


def _to_cpu(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.detach().to("cpu", copy=True)
