"""The epoch's DI: running sums kept as buffers, and when the step values are logged.

``train/di_epoch`` (the quantity :class:`~kernel_layers.callbacks.PlateauDecay` and
:class:`~kernel_layers.callbacks.DISaturationStopping` watch) is the mean of the epoch's
batch DIs weighted by their rows. Its running sums are buffers of the model
(``di_epoch_sum``, ``di_epoch_rows``, ``di_epoch_index``), so a fit killed mid-epoch and
resumed reports the same epoch mean (Lightning's own epoch aggregates restart from zero).
:class:`EpochDILogging` logs the epoch's values once; the step values are logged only
where the trainer writes them (each ``self.log`` costs host time: see
benchmarks/epoch_overhead.py).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, cast

import torch
from lightning.pytorch import Callback, LightningModule, Trainer
from torch import Tensor

from kernel_layers.training.batch_checks import batch_parts

if TYPE_CHECKING:
    from kernel_layers.training.kernel_module import KernelModule

__all__ = [
    "EpochDILogging",
    "add_batch",
    "check_validation_di_logged",
    "epoch_ends_here",
    "epoch_mean",
    "log_validation_di",
    "logs_this_step",
    "register_epoch_sums",
]


def register_epoch_sums(model: LightningModule) -> None:
    """Give ``model`` the epoch's running DI sums as buffers (in its checkpoints)."""
    model.register_buffer("di_epoch_sum", torch.tensor(0.0, dtype=torch.float64))
    model.register_buffer("di_epoch_rows", torch.tensor(0, dtype=torch.long))
    model.register_buffer("di_epoch_index", torch.tensor(-1, dtype=torch.long))
    model.di_epoch_seen = None  # type: ignore[assignment]  # the index as the host knows it


@torch.no_grad()
def add_batch(model: KernelModule, di: Tensor, rows: int) -> None:
    """Add a batch's DI (``Tensor[]``) over ``rows`` rows to the epoch's running sums."""
    if model.di_epoch_seen is None:  # one read per fit (the buffer may be resumed)
        model.di_epoch_seen = int(model.di_epoch_index)
    if model.di_epoch_seen != model.current_epoch:  # a new epoch: restart the sums
        model.di_epoch_seen = model.current_epoch
        model.di_epoch_index.fill_(model.current_epoch)
        model.di_epoch_sum.zero_()
        model.di_epoch_rows.zero_()
    model.di_epoch_sum += di.detach().to(model.di_epoch_sum) * rows
    model.di_epoch_rows += rows


@torch.no_grad()
def log_validation_di(model: KernelModule, batch: Any) -> int:
    """Log ``val/di``: the DI of a validation batch, as the map computes it for training,
    averaged over the epoch's batches weighted by their rows. A batch not larger than the
    feature width is left out (its DI sits at its ceiling whatever the map); under DDP
    the global batch is (every process's shard, of equal size under the distributed
    sampler), so that every process takes the same branch. Returns the batch's global
    rows when it was left out, else 0."""
    x, y = batch_parts(type(model).__name__, batch, 2)
    rows = len(x) * model._world_size
    if rows <= model.num_features:
        return rows
    di = model._di(model.embed(x), y)
    model.log("val/di", di, on_step=False, on_epoch=True, batch_size=len(x))
    return 0


def check_validation_di_logged(model: KernelModule, logged: bool, largest_left_out: int) -> None:
    """Raise at the end of a validation when ``keep_best="val/di"`` has nothing to judge:
    every validation batch was left out of ``val/di`` (``largest_left_out``: the most
    global rows one held).

    Raises:
        ValueError: naming ``keep_best``, the feature width and the batches' rows.
    """
    if logged or model.hparams.get("keep_best") != "val/di":
        return
    raise ValueError(
        f"{type(model).__name__}: argument 'keep_best' 'val/di' needs validation batches "
        f"of more rows than the feature width {model.num_features} (DI of fewer rows sits "
        f"at its ceiling whatever the map), got validation batches of at most "
        f"{largest_left_out} rows; use keep_best='val/acc', more validation rows or a "
        "larger validation batch"
    )


def epoch_mean(model: KernelModule) -> Tensor:
    """The epoch's mean DI so far (``Tensor[]``, float64; 0 before any batch)."""
    return model.di_epoch_sum / model.di_epoch_rows.clamp_min(1)


def epoch_ends_here(trainer: Trainer, batch_idx: int) -> bool:
    """Whether the training epoch ends after this batch (last batch, or a stop)."""
    return (
        trainer.should_stop
        or not math.isfinite(trainer.num_training_batches)  # length unknown: every batch
        or batch_idx + 1 >= trainer.num_training_batches
        or 0 <= trainer.max_steps <= trainer.global_step
    )


def logs_this_step(model: KernelModule, batch_idx: int) -> bool:
    """Whether the step's ``train/di`` is logged: on the steps whose values the trainer
    writes to its logger (every ``log_every_n_steps``) and on the epoch's last batch (the
    progress bar's final value)."""
    if model._trainer is None:
        return True
    trainer = model.trainer
    # Set by Lightning's logger connector (not a declared Trainer attribute).
    every = max(int(getattr(trainer, "log_every_n_steps", 1)), 1)
    return (model.global_step + 1) % every == 0 or epoch_ends_here(trainer, batch_idx)


class EpochDILogging(Callback):
    """Logs ``train/di_epoch`` and ``train/loss_epoch = -train/di_epoch`` on the epoch's
    last batch, once each: before every callback's epoch end, where ``PlateauDecay``,
    ``DISaturationStopping`` and a user's callbacks read them."""

    def on_train_batch_end(
        self, trainer: Trainer, pl_module: LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        model = cast("KernelModule", pl_module)
        if model.di_epoch_seen == model.current_epoch and epoch_ends_here(trainer, batch_idx):
            mean = epoch_mean(model).float()
            model.log("train/di_epoch", mean, on_step=True, on_epoch=False)
            # an epoch value, so that loggers write it on the epoch's row
            model.log("train/loss_epoch", -mean, on_step=False, on_epoch=True)
