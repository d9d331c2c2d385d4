"""Multiply the learning rate by a constant factor when an epoch metric stops improving."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import lightning.pytorch as pl
import torch
from lightning.pytorch.utilities.rank_zero import rank_zero_warn
from torch.optim.lr_scheduler import (
    CosineAnnealingWarmRestarts,
    CyclicLR,
    LambdaLR,
    OneCycleLR,
    ReduceLROnPlateau,
)
from typing_extensions import override

from kernel_layers._validation import check_bool, check_fraction, check_int, check_nonnegative
from kernel_layers.callbacks.monitor import MonitorCallback, current_lrs

__all__ = ["PlateauDecay"]

_OWNER = "PlateauDecay"

_ABSOLUTE_SCHEDULERS: tuple[type, ...] = (
    LambdaLR,
    OneCycleLR,
    CyclicLR,
    CosineAnnealingWarmRestarts,
)
"""Schedulers that recompute lr from ``base_lrs`` and so overwrite a decay on their next step."""


class PlateauDecay(MonitorCallback):
    r"""Multiply every param group's learning rate by ``factor`` when an epoch metric plateaus.

    The learning-rate rule of the DI paper: Adam at lr ``1e-3``, multiplied by ``0.1`` whenever
    the epoch mean of the Discriminant Information (logged by ``KernelClassifier`` as
    ``train/di`` with ``on_epoch=True``, hence the key ``train/di_epoch``) saturates. It is
    Lightning's ``EarlyStopping`` bookkeeping with PyTorch's ``ReduceLROnPlateau`` action, run
    as a callback so that it needs no scheduler configuration and works with any optimizer.

    At the end of every training epoch (``on_train_epoch_end``; skipped while sanity checking,
    with ``fast_dev_run`` and outside ``fit``), with ``x`` the monitored value:

    1. ``x`` *improves* when it beats ``best_score`` by more than the margin
       (``threshold * |best_score|`` in ``"rel"`` mode, ``threshold`` in ``"abs"`` mode; a NaN
       never improves). On improvement ``best_score = x`` and ``wait_count = 0``, otherwise
       ``wait_count += 1``.
    2. While ``cooldown_counter > 0`` (the ``cooldown`` epochs right after a decay) the counter is
       decremented and ``wait_count`` is reset to 0: those epochs do not count towards patience.
    3. If ``wait_count >= patience`` (``patience`` consecutive epochs without improvement; with
       ``patience=1`` the first non-improving epoch decays) the decay fires: every param group of
       every optimizer in ``trainer.optimizers`` gets ``lr = max(lr * factor, min_lr)``
       (skipped where that lowers lr by ``eps`` or less), then ``wait_count = 0`` and
       ``cooldown_counter = cooldown``. If at least one group changed, ``trainer.current_epoch``
       is appended to ``decay_epochs``; once every group sits at ``min_lr`` nothing changes and
       nothing is recorded.

    A decay applied at the end of epoch ``e`` takes effect from epoch ``e + 1``. Note the
    patience convention is Lightning's / Keras' (``>= patience``), one less than PyTorch's
    ``ReduceLROnPlateau`` (``> patience``).

    **Schedulers.** The callback never touches ``trainer.lr_scheduler_configs``: it multiplies the
    optimizers' ``param_group["lr"]`` in place. Chainable schedulers that scale the current lr
    (``StepLR``, ``MultiStepLR``, ``ExponentialLR``, ``MultiplicativeLR``, ...) therefore compose
    with it multiplicatively. Schedulers that recompute lr from ``base_lrs`` (``LambdaLR``,
    ``OneCycleLR``, ``CyclicLR``, ``CosineAnnealingWarmRestarts``) overwrite the decay on their
    next step, and a ``ReduceLROnPlateau`` would add a second plateau rule; a warning is issued
    at ``on_fit_start`` for those.

    **Distributed.** The decay decision is reduced with
    ``trainer.strategy.reduce_boolean_decision(..., all=False)``: if any rank decides to decay,
    every rank decays and resets its counters, so learning rates stay identical across ranks.
    Log the monitored metric with ``sync_dist=True`` (or compute it globally, as the DI is) to
    keep the counters identical too.

    **Resuming.** ``state_dict`` holds every counter (``best_score``, ``wait_count``,
    ``cooldown_counter``, ``decay_epochs``); the learning rates themselves live in the
    optimizer state. Resuming with ``Trainer.fit(ckpt_path=...)`` therefore continues exactly.

    Args:
        monitor: key of ``trainer.callback_metrics`` to watch (an epoch-level value).
        mode: ``"max"`` if higher is better (DI), ``"min"`` if lower is better (a loss).
            ``None`` (default): read from ``monitor``, ``"max"`` for the library's DI,
            accuracy and ``R^2``, ``"min"`` for its losses and squared errors; any
            other metric needs ``mode``.
        factor: multiplier applied to the lr at each decay, in ``(0, 1)``.
        patience: number of consecutive non-improving epochs that triggers a decay, ``>= 1``.
        threshold: improvement margin, ``>= 0``.
        threshold_mode: ``"rel"`` (margin ``threshold * |best|``) or ``"abs"`` (``threshold``).
        cooldown: epochs after a decay during which non-improving epochs are not counted, ``>= 0``.
        min_lr: floor for every param group's lr, ``>= 0``; a decay never goes below it.
        eps: lr changes of ``eps`` or less are skipped, ``>= 0`` (as in ``ReduceLROnPlateau``).
        strict: raise if ``monitor`` is missing from ``trainer.callback_metrics``; if ``False``,
            warn and skip the epoch (its counters are left untouched).
        verbose: log each decay (logger ``kernel_layers.callbacks``, level ``INFO``).

    Attributes:
        best_score (float): best monitored value so far (``-inf`` / ``+inf`` before the first).
        wait_count (int): consecutive non-improving epochs counted towards ``patience``.
        cooldown_counter (int): remaining cooldown epochs.
        decay_epochs (list[int]): 0-based epochs at whose end the lr was decayed.
        num_decays (int): ``len(decay_epochs)``.

    Raises:
        ValueError: if an argument is out of range (the message names the argument).
        RuntimeError: at the end of an epoch, if ``strict`` and ``monitor`` was not logged.

    Example::

        >>> from lightning.pytorch import Trainer
        >>> from kernel_layers.callbacks import DISaturationStopping, PlateauDecay
        >>> trainer = Trainer(callbacks=[PlateauDecay(patience=5), DISaturationStopping()])
    """

    def __init__(
        self,
        monitor: str = "train/di_epoch",
        mode: str | None = None,
        factor: float = 0.1,
        patience: int = 5,
        threshold: float = 1e-4,
        threshold_mode: str = "rel",
        cooldown: int = 0,
        min_lr: float = 0.0,
        eps: float = 1e-8,
        strict: bool = True,
        verbose: bool = True,
    ) -> None:
        super().__init__(
            monitor=monitor,
            mode=mode,
            threshold=threshold,
            threshold_mode=threshold_mode,
            strict=strict,
        )
        self.factor = check_fraction(_OWNER, "factor", factor)
        self.patience = check_int(_OWNER, "patience", patience, minimum=1)
        self.cooldown = check_int(_OWNER, "cooldown", cooldown, minimum=0)
        self.min_lr = check_nonnegative(_OWNER, "min_lr", min_lr)
        self.eps = check_nonnegative(_OWNER, "eps", eps)
        self.verbose = check_bool(_OWNER, "verbose", verbose)
        self.cooldown_counter: int = 0
        self.decay_epochs: list[int] = []

    @property
    def num_decays(self) -> int:
        """Number of decays applied so far."""
        return len(self.decay_epochs)

    @override
    def _extra_state(self) -> dict[str, Any]:
        return {"cooldown_counter": self.cooldown_counter, "decay_epochs": list(self.decay_epochs)}

    @override
    def _load_extra(self, state: Mapping[str, Any]) -> None:
        self.cooldown_counter = int(state["cooldown_counter"])
        self.decay_epochs = [int(e) for e in state["decay_epochs"]]

    @override
    def on_fit_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        for config in trainer.lr_scheduler_configs:
            scheduler = config.scheduler
            if isinstance(scheduler, _ABSOLUTE_SCHEDULERS):
                rank_zero_warn(
                    f"{_OWNER}: the scheduler {type(scheduler).__name__} recomputes the lr from"
                    " its base_lrs at every step and will overwrite the decays of this callback."
                )
            elif isinstance(scheduler, ReduceLROnPlateau):
                rank_zero_warn(
                    f"{_OWNER}: a ReduceLROnPlateau scheduler is also configured; both plateau"
                    " rules will multiply the same learning rates."
                )

    @override
    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        current = self._epoch_value(trainer)
        if current is None:
            return
        if self._improves(current):
            self.best_score = current
            self.wait_count = 0
        else:
            self.wait_count += 1
        if self.cooldown_counter > 0:
            self.cooldown_counter -= 1
            self.wait_count = 0

        decide = self.wait_count >= self.patience
        # every rank decays (and resets its counters) if any rank decides to
        decide = trainer.strategy.reduce_boolean_decision(decide, all=False)
        if not decide:
            return
        self.wait_count = 0
        self.cooldown_counter = self.cooldown
        if self._decay(trainer):
            self.decay_epochs.append(trainer.current_epoch)
            if self.verbose:
                lrs = ", ".join(f"{lr:.3g}" for lr in (x for g in current_lrs(trainer) for x in g))
                self._info(
                    f"{_OWNER}: '{self.monitor}' did not improve for {self.patience} epoch(s)"
                    f" (best {self.best_score:.6g}); lr multiplied by {self.factor:g} at the end of"
                    f" epoch {trainer.current_epoch}, now [{lrs}]."
                )

    def _decay(self, trainer: pl.Trainer) -> bool:
        """Applies ``lr = max(lr * factor, min_lr)`` to every param group.

        Returns:
            Whether at least one param group's lr changed.
        """
        changed = False
        for optimizer in trainer.optimizers:
            for group in optimizer.param_groups:
                old = float(group["lr"])
                new = max(old * self.factor, self.min_lr)
                if old - new > self.eps:
                    if isinstance(group["lr"], torch.Tensor):
                        group["lr"].fill_(new)
                    else:
                        group["lr"] = new
                    changed = True
        return changed
