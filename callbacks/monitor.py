"""The base of the callbacks that watch one epoch metric: arguments, state and messages.

:class:`MonitorCallback` holds what :class:`~kernel_layers.callbacks.PlateauDecay` and
:class:`~kernel_layers.callbacks.DISaturationStopping` share: the checked ``monitor`` /
``mode`` / ``threshold`` / ``threshold_mode`` / ``strict`` arguments, the best value and
the count of non-improving epochs, the checkpoint state (``state_key``, ``state_dict``,
``load_state_dict``), reading the monitored value at the end of a training epoch, and
messages sent to the ``kernel_layers.callbacks`` logger from rank zero.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from typing import Any

import lightning.pytorch as pl
import torch
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.trainer.states import TrainerFn
from lightning.pytorch.utilities.rank_zero import rank_zero_only, rank_zero_warn
from typing_extensions import override

from kernel_layers._validation import check_bool, check_choice, check_nonnegative

__all__ = [
    "EPOCH_END",
    "LOGGER_NAME",
    "MODES",
    "THRESHOLD_MODES",
    "MonitorCallback",
    "check_monitor",
    "current_lrs",
    "is_improvement",
    "log_on_rank_zero",
    "missing_monitor_message",
    "monitor_mode",
    "read_monitor",
    "should_skip",
]

MODES: tuple[str, ...] = ("min", "max")
"""Allowed values of ``mode``: whether a lower or a higher monitored value is better."""

THRESHOLD_MODES: tuple[str, ...] = ("rel", "abs")
"""Allowed values of ``threshold_mode``: relative or absolute improvement margin."""

#: The metrics the library logs whose higher values are better, and those whose lower
#: values are, by the last part of their key without ``_epoch`` / ``_step``
#: (``train/di_epoch``: ``di``): what ``mode=None`` reads.
HIGHER_IS_BETTER: tuple[str, ...] = ("di", "acc", "r2")
LOWER_IS_BETTER: tuple[str, ...] = ("loss", "mse", "rmse", "kernel_error", "kernel_error_spectral")

#: Where a callback reads its monitored value by default (for messages).
EPOCH_END = "the end of the training epoch"

#: The logger the callbacks' messages go to (level ``INFO``).
LOGGER_NAME = "kernel_layers.callbacks"
log = logging.getLogger(LOGGER_NAME)


def check_monitor(owner: str, value: Any, argument: str = "monitor") -> str:
    """Checks that ``monitor`` (or the metric key ``argument``) is a non-empty string.

    Raises:
        TypeError: ``value`` is not a ``str``.
        ValueError: ``value`` is empty.
    """
    message = f"{owner}: argument {argument!r} must be a non-empty str, got {value!r}"
    if not isinstance(value, str):
        raise TypeError(message)
    if not value:
        raise ValueError(message)
    return value


def is_improvement(
    current: float, best: float, *, mode: str, threshold: float, threshold_mode: str
) -> bool:
    """Whether ``current`` improves on ``best`` by more than the threshold margin.

    The margin is ``threshold * |best|`` in ``"rel"`` mode and ``threshold`` in ``"abs"`` mode;
    ``"max"`` needs ``current > best + margin``, ``"min"`` needs ``current < best - margin``.
    Using ``|best|`` keeps the relative test meaningful for negative values (PyTorch's
    ``ReduceLROnPlateau`` multiplies by ``1 +- threshold`` instead, which flips for ``best < 0``).
    A NaN ``current`` never improves; any non-NaN value improves on an infinite initial ``best``
    of the wrong sign (``-inf`` in ``"max"`` mode, ``+inf`` in ``"min"`` mode).

    Args:
        current: the new value.
        best: the best value so far (``-inf`` / ``+inf`` before the first observation).
        mode: ``"max"`` or ``"min"``.
        threshold: the improvement margin, ``>= 0``.
        threshold_mode: ``"rel"`` or ``"abs"``.

    Returns:
        ``True`` when ``current`` counts as an improvement.
    """
    if math.isnan(current):
        return False
    if math.isinf(best):
        return current > best if mode == "max" else current < best
    margin = threshold * abs(best) if threshold_mode == "rel" else threshold
    if mode == "max":
        return current > best + margin
    return current < best - margin


def current_lrs(trainer: pl.Trainer) -> list[list[float]]:
    """The learning rate of every param group of every optimizer of ``trainer``.

    Returns:
        ``lrs[i][j]`` is the lr of param group ``j`` of ``trainer.optimizers[i]`` (``float``,
        also when the optimizer stores it as a ``Tensor``).
    """
    return [[float(group["lr"]) for group in opt.param_groups] for opt in trainer.optimizers]


def should_skip(trainer: pl.Trainer) -> bool:
    """Whether a callback must not act: not fitting, sanity checking or ``fast_dev_run``."""
    return (
        trainer.state.fn != TrainerFn.FITTING
        or trainer.sanity_checking
        or bool(getattr(trainer, "fast_dev_run", False))
    )


def missing_monitor_message(
    owner: str, monitor: str, logs: Mapping[str, Any], when: str = EPOCH_END
) -> str:
    """The error raised (strict) or warned (non-strict) when ``monitor`` was not logged
    by ``when``."""
    available = ", ".join(f"'{k}'" for k in logs) or "(none)"
    why = (
        " A KernelClassifier logs 'val/di' only with objective='di', and only for validation"
        " batches of more rows than its feature width (the DI of fewer rows sits at its"
        " ceiling): train by DI, use larger validation batches or a narrower map, or watch"
        " another metric."
        if monitor == "val/di"
        else " A value logged with `self.log(name, ..., on_step=True, on_epoch=True)` is"
        " exposed as '<name>_epoch'; pass `monitor=` one of the available keys (or"
        " `strict=False` to skip such epochs)."
    )
    return (
        f"{owner}: monitored metric '{monitor}' is not in trainer.callback_metrics at {when}."
        f" Available keys: {available}.{why}"
    )


def read_monitor(owner: str, logs: Mapping[str, Any], monitor: str) -> float:
    """Reads the monitored value as a Python ``float``.

    Raises:
        RuntimeError: if the logged value is a tensor with more than one element.
    """
    value = logs[monitor]
    if isinstance(value, torch.Tensor):
        if value.numel() != 1:
            raise RuntimeError(
                f"{owner}: monitored metric '{monitor}' must be a scalar, got a tensor of shape"
                f" {tuple(value.shape)}"
            )
        return float(value.detach().reshape(()).item())
    return float(value)


@rank_zero_only
def log_on_rank_zero(message: str) -> None:
    """Send ``message`` to the ``kernel_layers.callbacks`` logger (``INFO``), from rank zero."""
    log.info(message)


def monitor_mode(owner: str, monitor: str, mode: str | None) -> str:
    """``mode`` checked, or for ``None`` the direction of the library's metric ``monitor``:
    ``"max"`` for DI, accuracy and ``R^2``, ``"min"`` for a loss, a squared error or a
    kernel error (:data:`HIGHER_IS_BETTER`, :data:`LOWER_IS_BETTER`).

    Raises:
        ValueError: ``mode`` is not ``"max"``, ``"min"`` or ``None``, or it is ``None``
            for a metric whose direction is not known.
    """
    if mode is not None:
        return check_choice(owner, "mode", mode, MODES)
    name = monitor.rsplit("/", 1)[-1].removesuffix("_epoch").removesuffix("_step")
    if name in HIGHER_IS_BETTER:
        return "max"
    if name in LOWER_IS_BETTER:
        return "min"
    raise ValueError(
        f"{owner}: argument 'mode' must be 'max' (higher is better) or 'min' for monitor "
        f"{monitor!r}: the direction is read only from a name whose last part (after the "
        f"last '/', without '_epoch' or '_step') is one of the library's metrics "
        f"{', '.join(HIGHER_IS_BETTER + LOWER_IS_BETTER)}, here {name!r}; got None"
    )


class MonitorCallback(Callback):
    """A callback that watches one epoch-level metric of ``trainer.callback_metrics``.

    Subclasses add the counters they checkpoint in :meth:`_extra_state` and restore them
    in :meth:`_load_extra`; ``best_score`` and ``wait_count`` are kept here.

    Args:
        monitor: key of ``trainer.callback_metrics`` to watch (an epoch-level value).
        mode: ``"max"`` if higher is better (DI), ``"min"`` if lower is better (a loss);
            ``None``: the direction of the library's metric ``monitor``
            (:func:`monitor_mode`).
        threshold: improvement margin, ``>= 0``.
        threshold_mode: ``"rel"`` (margin ``threshold * |best|``) or ``"abs"`` (``threshold``).
        strict: raise if ``monitor`` is missing from ``trainer.callback_metrics``; if ``False``,
            warn and skip the epoch.

    Attributes:
        best_score (float): best monitored value so far (``-inf`` / ``+inf`` before the first).
        wait_count (int): non-improving epochs counted so far.
    """

    def __init__(
        self,
        *,
        monitor: str,
        mode: str | None,
        threshold: float,
        threshold_mode: str,
        strict: bool,
    ) -> None:
        super().__init__()
        owner = self._owner
        self.monitor = check_monitor(owner, monitor)
        self.mode = monitor_mode(owner, self.monitor, mode)
        self.threshold = check_nonnegative(owner, "threshold", threshold)
        self.threshold_mode = check_choice(owner, "threshold_mode", threshold_mode, THRESHOLD_MODES)
        self.strict = check_bool(owner, "strict", strict)
        self.best_score: float = -math.inf if self.mode == "max" else math.inf
        self.wait_count: int = 0
        # whether validation logs the monitor, and the epoch it last ran in (-1: none)
        self._before_validation: Any = None
        self._from_validation = False
        self._validated_epoch = -1
        # the monitored value after the last validation, when logged in its epoch, and
        # that epoch: what the epoch's end reads when a fit resumes from a checkpoint
        # written at that validation (Lightning replays the epoch's end with no metric
        # logged); the value at the epoch's start tells an earlier epoch's apart
        self._validation_value: float | None = None
        self._validation_value_epoch = -1
        self._epoch_start_value: Any = None
        # the epoch whose start ran in this process (Lightning runs no start for an
        # epoch a fit resumes in)
        self._started_epoch = -1

    @property
    def _owner(self) -> str:
        return type(self).__name__

    @property
    @override
    def state_key(self) -> str:
        return self._generate_state_key(monitor=self.monitor, mode=self.mode)

    def _extra_state(self) -> dict[str, Any]:
        """The subclass's counters, keyed as in its checkpoints."""
        return {}

    def _load_extra(self, state: Mapping[str, Any]) -> None:
        """Restore the subclass's counters from ``state`` (every key present)."""

    @override
    def state_dict(self) -> dict[str, Any]:
        return {
            "best_score": self.best_score,
            "wait_count": self.wait_count,
            "validation_value": self._validation_value,
            "validation_value_epoch": self._validation_value_epoch,
            **self._extra_state(),
        }

    @override
    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore the state; keys missing from an older checkpoint keep their defaults
        (the values of a fresh callback), as Lightning's own callbacks do."""
        state = {**self.state_dict(), **state_dict}
        self.best_score = float(state["best_score"])
        self.wait_count = int(state["wait_count"])
        value = state["validation_value"]
        self._validation_value = None if value is None else float(value)
        self._validation_value_epoch = int(state["validation_value_epoch"])
        self._load_extra(state)

    def _improves(self, current: float) -> bool:
        return is_improvement(
            current,
            self.best_score,
            mode=self.mode,
            threshold=self.threshold,
            threshold_mode=self.threshold_mode,
        )

    @override
    def on_train_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if not should_skip(trainer):
            self._epoch_start_value = trainer.callback_metrics.get(self.monitor)
            self._started_epoch = trainer.current_epoch

    @override
    def on_validation_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if not should_skip(trainer):
            self._before_validation = trainer.callback_metrics.get(self.monitor)

    @override
    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if should_skip(trainer):
            return
        # a value logged since (by validation, or by this epoch's training) is a new tensor
        after = trainer.callback_metrics.get(self.monitor)
        self._from_validation = after is not None and after is not self._before_validation
        self._validated_epoch = trainer.current_epoch
        if after is not None and after is not self._epoch_start_value:
            self._validation_value = read_monitor(
                self._owner, trainer.callback_metrics, self.monitor
            )
            self._validation_value_epoch = trainer.current_epoch

    def _epoch_value(self, trainer: pl.Trainer) -> float | None:
        """The monitored value at the end of a training epoch, or ``None`` when this epoch
        is skipped (not fitting, sanity checking, ``fast_dev_run``, the metric missing
        with ``strict=False``, or, with ``check_val_every_n_epoch > 1``, a metric that
        validation logs in an epoch that ran none: its value is an earlier epoch's).
        Where a fit resumes at the end of an epoch (from a checkpoint written at its
        validation, with nothing logged since), the value read at that validation if it
        was logged in the epoch (``train/di_epoch``, a validation metric); else (a metric
        Lightning aggregates at the epoch's end, such as ``train/loss_epoch`` of LS / CE)
        the epoch is skipped.

        Raises:
            RuntimeError: ``strict`` and the metric was not logged.
        """
        if should_skip(trainer):
            return None
        if (
            self.monitor not in trainer.callback_metrics
            and self._started_epoch != trainer.current_epoch
        ):  # the epoch's end replayed after a resume from its validation's checkpoint:
            # the value that validation saw, if logged in this epoch, else none known
            if self._validation_value_epoch == trainer.current_epoch:
                return self._validation_value
            return None
        if self._skipped_validation(trainer) and (
            self._from_validation or self.monitor not in trainer.callback_metrics
        ):
            return None  # a validation metric is stale, or not logged yet
        return self._logged_value(trainer, self.monitor)

    def _skipped_validation(self, trainer: pl.Trainer) -> bool:
        """Whether this epoch ran no validation in a fit that does not validate every
        epoch (with a loader and batches to validate): every ``check_val_every_n_epoch >
        1`` epochs, or every ``val_check_interval`` steps across epochs
        (``check_val_every_n_epoch=None``)."""
        every = trainer.check_val_every_n_epoch
        validates = bool(getattr(trainer, "enable_validation", True))
        return (
            validates
            and (every is None or every > 1)
            and self._validated_epoch != trainer.current_epoch
        )

    def _logged_value(self, trainer: pl.Trainer, key: str, when: str = EPOCH_END) -> float | None:
        """The value logged under ``key`` by ``when`` (for the message), or ``None`` when
        it is missing and not ``strict`` (with a warning); a NaN is warned of too.

        Raises:
            RuntimeError: ``strict`` and ``key`` was not logged.
        """
        logs = trainer.callback_metrics
        if key not in logs:
            message = missing_monitor_message(self._owner, key, logs, when)
            if self.strict:
                raise RuntimeError(message)
            rank_zero_warn(message, category=RuntimeWarning)
            return None
        value = read_monitor(self._owner, logs, key)
        if math.isnan(value):
            rank_zero_warn(
                f"{self._owner}: monitored metric '{key}' is NaN at {when}; it counts as no "
                "improvement",
                category=RuntimeWarning,
            )
        return value

    @staticmethod
    def _info(message: str) -> None:
        """Send ``message`` to the ``kernel_layers.callbacks`` logger (rank zero only)."""
        log_on_rank_zero(message)
