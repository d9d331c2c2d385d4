"""Private helpers shared by the callbacks: the monitor check, the improvement test, lr access.

Other arguments are checked with :mod:`kernel_layers._validation`, the library's one
validation module (wrong types raise ``TypeError``, wrong values ``ValueError``).

Nothing here is public API; the callbacks re-validate and document every argument they accept.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import lightning.pytorch as pl
import torch
from lightning.pytorch.trainer.states import TrainerFn

__all__ = [
    "MODES",
    "THRESHOLD_MODES",
    "check_monitor",
    "current_lrs",
    "is_improvement",
    "missing_monitor_message",
    "read_monitor",
    "should_skip",
]

MODES: tuple[str, ...] = ("min", "max")
"""Allowed values of ``mode``: whether a lower or a higher monitored value is better."""

THRESHOLD_MODES: tuple[str, ...] = ("rel", "abs")
"""Allowed values of ``threshold_mode``: relative or absolute improvement margin."""


def check_monitor(owner: str, value: Any) -> str:
    """Checks that ``monitor`` is a non-empty string.

    Raises:
        TypeError: ``value`` is not a ``str``.
        ValueError: ``value`` is empty.
    """
    if not isinstance(value, str):
        raise TypeError(f"{owner}: argument 'monitor' must be a non-empty str, got {value!r}")
    if not value:
        raise ValueError(f"{owner}: argument 'monitor' must be a non-empty str, got {value!r}")
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
        or bool(trainer.fast_dev_run)
    )


def missing_monitor_message(owner: str, monitor: str, logs: Mapping[str, Any]) -> str:
    """The error raised (strict) or warned (non-strict) when ``monitor`` was not logged."""
    available = ", ".join(f"'{k}'" for k in logs) or "(none)"
    return (
        f"{owner}: monitored metric '{monitor}' is not in trainer.callback_metrics at the end of"
        f" the training epoch. Available keys: {available}. A value logged with"
        " `self.log(name, ..., on_step=True, on_epoch=True)` is exposed as '<name>_epoch';"
        " pass `monitor=` one of the available keys (or `strict=False` to skip such epochs)."
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
