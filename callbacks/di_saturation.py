"""Stop training when the objective fails to improve after a learning-rate decay."""

from __future__ import annotations

import math
from collections.abc import Mapping
from enum import Enum
from typing import Any

import lightning.pytorch as pl
from typing_extensions import override

from kernel_layers._validation import check_bool, check_int
from kernel_layers.callbacks.monitor import MonitorCallback, current_lrs, should_skip

__all__ = ["DISaturationReason", "DISaturationStopping"]

_OWNER = "DISaturationStopping"


class DISaturationReason(str, Enum):
    """Why :class:`DISaturationStopping` stopped training (``stopping_reason``)."""

    NOT_STOPPED = "not_stopped"
    """Training was not stopped by this callback."""
    SATURATED_AFTER_DECAY = "saturated_after_decay"
    """The metric failed to improve in the ``patience`` epochs after a learning-rate decay."""
    SATURATED = "saturated"
    """``min_decays=0``: the metric failed to improve for ``patience`` epochs (early stopping)."""
    NON_FINITE_METRIC = "non_finite_metric"
    """The monitored value was NaN or infinite."""
    OTHER_RANK = "other_rank"
    """Another process decided to stop (distributed training); this rank followed."""


def _lr_dropped(previous: list[list[float]] | None, current: list[list[float]]) -> bool:
    """Whether any param group's lr is lower in ``current`` than in ``previous``.

    Args:
        previous: ``lrs[i][j]`` of the previous evaluated epoch, or ``None`` for the first one.
        current: ``lrs[i][j]`` of this epoch.

    Returns:
        ``True`` if at least one lr decreased. A change in the number of optimizers or param
        groups compares the groups both sides have.
    """
    if previous is None:
        return False
    return any(
        new < old
        for prev_groups, cur_groups in zip(previous, current, strict=False)
        for old, new in zip(prev_groups, cur_groups, strict=False)
    )


class DISaturationStopping(MonitorCallback):
    r"""Stop training when the monitored objective fails to improve after a learning-rate decay.

    The stopping rule of the DI paper: the lr is multiplied by ``0.1`` when the epoch-mean DI
    saturates, and training stops when the objective fails to improve after a decay, i.e. when
    lowering the learning rate no longer buys any progress. Pair it with :class:`PlateauDecay`,
    with a fixed schedule (``StepLR``, ``MultiStepLR``, ...), or with any other source of lr
    decays: the callback does not decay anything itself, it *watches* the learning rates.

    **Detecting a decay.** At ``on_train_epoch_start`` the callback records the lr of every param
    group of every optimizer: the lr the epoch trains with. Epoch ``e`` is a *post-decay* epoch
    when any of those lrs is lower than the one recorded for the previous evaluated epoch. A
    :class:`PlateauDecay` decay at the end of epoch ``e - 1`` or a ``StepLR`` step after it both
    make ``e`` the first post-decay epoch, whatever the order of the callbacks. (With a per-step
    scheduler that lowers the lr within every epoch, every epoch counts as a decay.)

    **The rule**, at the end of every training epoch (``on_train_epoch_end``; skipped while sanity
    checking, with ``fast_dev_run`` and outside ``fit``), with ``x`` the monitored value:

    1. If ``check_finite`` and ``x`` is NaN or infinite: stop at once
       (``NON_FINITE_METRIC``).
    2. If the epoch is post-decay, ``decays_seen += 1``; once ``decays_seen >= min_decays`` a
       decay opens a *probation window* (a decay inside an open window keeps it open and does not
       restart the count).
    3. ``x`` *improves* when it beats ``best_score`` (the best value over all epochs) by more than
       the margin (``threshold * |best_score|`` in ``"rel"`` mode, ``threshold`` in ``"abs"``
       mode). An improvement updates ``best_score``, resets ``wait_count`` and closes the window:
       the decay paid off, wait for the next one. A non-improving epoch inside the window does
       ``wait_count += 1``.
    4. Stop when ``wait_count >= patience`` (``SATURATED_AFTER_DECAY``): with the default
       ``patience=1``, when the first epoch trained at the decayed lr does not improve.

    With ``min_decays=0`` the window is always open and never closes: the callback is plain early
    stopping on saturation (stop after ``patience`` consecutive non-improving epochs,
    ``SATURATED``). With ``min_decays=k > 1`` the first ``k - 1`` decays are free.

    On stopping, ``trainer.should_stop`` is set, ``stopped_epoch`` / ``stopping_reason`` /
    ``stopping_reason_message`` are filled and the message is logged from rank zero (logger
    ``kernel_layers.callbacks``, level ``INFO``).

    **Distributed.** The stop decision is reduced with
    ``trainer.strategy.reduce_boolean_decision(..., all=False)``: any rank stopping stops all
    (ranks that only follow report ``OTHER_RANK``).

    **Resuming.** ``state_dict`` holds every counter and the recorded learning rates, so
    ``Trainer.fit(ckpt_path=...)`` continues exactly, including a decay applied just before the
    checkpoint was written.

    Args:
        monitor: key of ``trainer.callback_metrics`` to watch (an epoch-level value).
        mode: ``"max"`` if higher is better (DI), ``"min"`` if lower is better (a loss).
            ``None`` (default): read from ``monitor``, ``"max"`` for the library's DI,
            accuracy and ``R^2``, ``"min"`` for its losses and squared errors; any
            other metric needs ``mode``.
        patience: non-improving post-decay epochs that stop training, ``>= 1``.
        threshold: improvement margin (``min_delta``), ``>= 0``.
        threshold_mode: ``"rel"`` (margin ``threshold * |best|``) or ``"abs"`` (``threshold``).
        min_decays: decays needed before the rule is armed, ``>= 0``; ``1`` is the paper's rule,
            ``0`` turns it into plain early stopping.
        check_finite: stop as soon as the monitored value is NaN or infinite.
        strict: raise if ``monitor`` is missing from ``trainer.callback_metrics``; if ``False``,
            warn and skip the epoch (its counters are left untouched).

    Attributes:
        best_score (float): best monitored value so far (``-inf`` / ``+inf`` before the first).
        wait_count (int): non-improving epochs counted in the open window.
        window_open (bool): whether a probation window is open (always ``True`` in effect when
            ``min_decays=0``).
        decays_seen (int): number of post-decay epochs seen, ``len(lr_drop_epochs)``.
        lr_drop_epochs (list[int]): 0-based epochs that started with a lower lr than the
            previous one.
        stopped_epoch (int): epoch at which the stop was decided, ``0`` if never.
        stopping_reason (DISaturationReason): why training stopped.
        stopping_reason_message (str | None): human-readable explanation.

    Raises:
        ValueError: if an argument is out of range (the message names the argument).
        RuntimeError: at the end of an epoch, if ``strict`` and ``monitor`` was not logged.
    """

    best_score: float  # declared by MonitorCallback (named here for type checkers)

    def __init__(
        self,
        monitor: str = "train/di_epoch",
        mode: str | None = None,
        patience: int = 1,
        threshold: float = 1e-4,
        threshold_mode: str = "rel",
        min_decays: int = 1,
        check_finite: bool = True,
        strict: bool = True,
    ) -> None:
        super().__init__(
            monitor=monitor,
            mode=mode,
            threshold=threshold,
            threshold_mode=threshold_mode,
            strict=strict,
        )
        self.patience = check_int(_OWNER, "patience", patience, minimum=1)
        self.min_decays = check_int(_OWNER, "min_decays", min_decays, minimum=0)
        self.check_finite = check_bool(_OWNER, "check_finite", check_finite)
        self.window_open: bool = False
        self.lr_drop_epochs: list[int] = []
        self.stopped_epoch: int = 0
        self.stopping_reason: DISaturationReason = DISaturationReason.NOT_STOPPED
        self.stopping_reason_message: str | None = None
        self._window_start: int | None = None
        self._last_lrs: list[list[float]] | None = None
        self._epoch_lrs: list[list[float]] | None = None

    @property
    def decays_seen(self) -> int:
        """Number of post-decay epochs seen so far."""
        return len(self.lr_drop_epochs)

    @override
    def _extra_state(self) -> dict[str, Any]:
        return {
            "window_open": self.window_open,
            "window_start": self._window_start,
            "lr_drop_epochs": list(self.lr_drop_epochs),
            "last_lrs": self._last_lrs,
            "epoch_lrs": self._epoch_lrs,
            "stopped_epoch": self.stopped_epoch,
            "stopping_reason": self.stopping_reason.value,
            "stopping_reason_message": self.stopping_reason_message,
        }

    @override
    def _load_extra(self, state: Mapping[str, Any]) -> None:
        self.window_open = bool(state["window_open"])
        self._window_start = state["window_start"]
        self.lr_drop_epochs = [int(e) for e in state["lr_drop_epochs"]]
        self._last_lrs = state["last_lrs"]
        self._epoch_lrs = state["epoch_lrs"]
        self.stopped_epoch = int(state["stopped_epoch"])
        self.stopping_reason = DISaturationReason(state["stopping_reason"])
        self.stopping_reason_message = state["stopping_reason_message"]

    @override
    def on_train_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        super().on_train_epoch_start(trainer, pl_module)
        if should_skip(trainer):
            return
        self._epoch_lrs = current_lrs(trainer)

    @override
    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        current = self._epoch_value(trainer)
        if current is None:
            return
        epoch = trainer.current_epoch
        epoch_lrs = self._epoch_lrs if self._epoch_lrs is not None else current_lrs(trainer)
        decayed = _lr_dropped(self._last_lrs, epoch_lrs)
        self._last_lrs = epoch_lrs
        self._epoch_lrs = None

        reason, message = self._evaluate(current, decayed, epoch)
        should_stop = trainer.strategy.reduce_boolean_decision(reason is not None, all=False)
        if not should_stop:
            return
        if reason is None:
            reason = DISaturationReason.OTHER_RANK
            message = (
                f"{_OWNER}: another process decided to stop at epoch {epoch}; stopping training."
            )
        trainer.should_stop = True
        self.stopped_epoch = epoch
        self.stopping_reason = reason
        self.stopping_reason_message = message
        if message is not None:
            self._info(message)

    def _evaluate(
        self, current: float, decayed: bool, epoch: int
    ) -> tuple[DISaturationReason | None, str | None]:
        """Updates the counters with this epoch's value and decides whether to stop.

        Args:
            current: the monitored value of this epoch.
            decayed: whether this epoch trained at a lower lr than the previous one.
            epoch: the 0-based epoch index.

        Returns:
            ``(reason, message)`` if this rank wants to stop, else ``(None, None)``.
        """
        if decayed:
            self.lr_drop_epochs.append(epoch)
            if self.min_decays > 0 and self.decays_seen >= self.min_decays and not self.window_open:
                self.window_open = True
                self._window_start = epoch
                self.wait_count = 0

        if self.check_finite and not math.isfinite(current):
            return DISaturationReason.NON_FINITE_METRIC, (
                f"{_OWNER}: monitored metric '{self.monitor}' = {current} is non-finite at epoch"
                f" {epoch} (best so far {self.best_score:.6g}); stopping training."
            )

        if self._improves(current):
            self.best_score = current
            self.wait_count = 0
            self.window_open = False
            self._window_start = None
            return None, None

        armed = self.min_decays == 0 or self.window_open
        if not armed:
            return None, None
        self.wait_count += 1
        if self.wait_count < self.patience:
            return None, None
        if self.min_decays == 0:
            return DISaturationReason.SATURATED, (
                f"{_OWNER}: '{self.monitor}' did not improve on its best value"
                f" {self.best_score:.6g} for {self.wait_count} epoch(s) (last {current:.6g});"
                f" stopping training at epoch {epoch}."
            )
        return DISaturationReason.SATURATED_AFTER_DECAY, (
            f"{_OWNER}: '{self.monitor}' did not improve on its best value {self.best_score:.6g}"
            f" in the {self.wait_count} epoch(s) since the learning-rate decay first in effect at"
            f" epoch {self._window_start} (decay {self.decays_seen}, last value {current:.6g});"
            f" stopping training at epoch {epoch}."
        )
