"""``keep_best="auto"``: on small data, the model handed back is the best on validation.

With fewer than ``SMALL_DATA_BATCHES`` batches per epoch, every step maximises DI on
nearly the same rows, and the last epoch can end below the untrained map on held-out
rows. Keeping the best epoch on the validation rows, the untrained map a candidate, keeps
the model at or above the untrained map on validation. With many batches per epoch each
step sees other rows, and the last epoch is kept. The small-data suite measures both
(benchmarks/README.md, "Small-data suite").
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import lightning.pytorch as pl
from lightning.pytorch.callbacks import Callback
from typing_extensions import override

from kernel_layers.callbacks.keep_best import KeepBest, scores_untrained
from kernel_layers.selection.rho import is_small_data

if TYPE_CHECKING:
    from kernel_layers.training.kernel_module import KernelModule

__all__ = ["AUTO", "SmallDataKeepBest", "auto_keep_best", "keeps_best_here"]

#: The ``keep_best`` value that keeps the best epoch on small data only.
AUTO = "auto"


def keeps_best_here(trainer: pl.Trainer, pl_module: pl.LightningModule) -> bool:
    """Whether ``keep_best="auto"`` keeps the best epoch in this fit: an epoch of fewer
    than ``SMALL_DATA_BATCHES`` batches, a ridge read-out (the untrained map has one to
    score), and a :mod:`kernel_layers.data` module with validation rows that validation
    reads (``limit_val_batches`` not 0)."""
    datamodule = getattr(trainer, "datamodule", None)
    if not scores_untrained(datamodule) or datamodule is None:
        return False
    return (
        is_small_data(max(float(trainer.num_training_batches), 1.0))
        and getattr(pl_module, "readout", None) is None
        and trainer.limit_val_batches != 0
        and bool(len(datamodule.val_dataloader()))
    )


class SmallDataKeepBest(KeepBest):
    """:class:`~kernel_layers.callbacks.KeepBest` that acts only where
    :func:`keeps_best_here` holds when the fit starts (``keep_best="auto"``), and says
    nothing: elsewhere the last epoch is kept, without a warning."""

    def __init__(self, monitor: str, tie_break: str | None) -> None:
        super().__init__(monitor, tie_break=tie_break, verbose=False)
        #: Whether this fit keeps its best epoch (decided when it starts).
        self.active = False
        self._state_loaded = False

    @override
    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        super().load_state_dict(state_dict)
        self._state_loaded = True

    @override
    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        # A fit resumed from a checkpoint without this callback's state (keep_best=None,
        # or an older version) has not scored its earlier epochs: it keeps the last.
        resumed_blind = trainer.ckpt_path is not None and not self._state_loaded
        self.active = not resumed_blind and keeps_best_here(trainer, pl_module)

    @override
    def on_train_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self.active:
            super().on_train_epoch_start(trainer, pl_module)

    @override
    def on_validation_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self.active:
            super().on_validation_start(trainer, pl_module)

    @override
    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self.active:
            super().on_validation_end(trainer, pl_module)

    @override
    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self.active:
            super().on_train_epoch_end(trainer, pl_module)

    @override
    def on_fit_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self.active and self.validated_an_epoch:  # else the last epoch, silently
            super().on_fit_end(trainer, pl_module)


def auto_keep_best(pl_module: KernelModule) -> list[Callback]:
    """The callbacks of ``keep_best="auto"``: a :class:`SmallDataKeepBest` on the
    module's ``KEEP_BEST_MONITOR`` (ties broken by its ``tie_break``), or none when the
    Trainer holds a user's own :class:`~kernel_layers.callbacks.KeepBest` (Lightning
    would drop it for a module's callback of its class)."""
    # the module's callbacks of an earlier stage are gone: any KeepBest is a user's
    if any(isinstance(c, KeepBest) for c in getattr(pl_module._trainer, "callbacks", [])):
        return []
    monitor = pl_module.KEEP_BEST_MONITOR
    return [SmallDataKeepBest(monitor, pl_module.tie_break(monitor))]
