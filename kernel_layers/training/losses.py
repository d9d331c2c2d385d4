"""The training losses of the kernel modules: DI (classifier and regressor), LS, CE.

* ``"di"``: ``-DI`` of the batch's features, as the map computes it (NysDI for
  ``NystromLayer``), over the global batch under DDP;
* ``"ls"``: the least-squares baseline against a closed-form ridge read-out refitted
  once per epoch on the previous epoch's features (merged over processes), or against a
  trained read-out with the group lasso;
* ``"ce"``: cross-entropy of a trained linear read-out.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from torch import Tensor, nn

from kernel_layers.objectives import DIStatistics, least_squares_loss, merge_statistics
from kernel_layers.training import di_epoch
from kernel_layers.training.batch_checks import batch_parts, di_batch_usable, global_rows
from kernel_layers.training.heads import one_hot_targets

if TYPE_CHECKING:
    from kernel_layers.training.kernel_module import KernelModule

__all__ = ["refit_ls_readout", "training_loss"]


def training_loss(model: KernelModule, batch: Any, batch_idx: int) -> Tensor | None:
    """The loss of ``batch`` (``(x Tensor[B, ...], y Tensor[B] | Tensor[B, L], ...)``,
    its targets checked by ``model.training_targets``) under the model's objective
    (``Tensor[]``); logs ``train/di`` or ``train/loss``. ``None``: the batch is
    skipped (the epoch's short last batch under DI,
    :func:`~kernel_layers.training.batch_checks.di_batch_usable`) or a diverged backbone
    stopped the fit.

    Raises:
        TypeError, ValueError: targets the model cannot train on (labels not integers
            in ``[0, num_classes)``), or the batch is too small for DI.
    """
    x, y = batch_parts(type(model).__name__, batch, 2)
    objective = model.objective
    y = model.training_targets(y)
    h = model.embed(x)
    world = model.trainer.world_size if model._trainer is not None else 1
    if model.backbone is not None and not model.guard.check_embedding(
        model, x, h, batch_idx, world
    ):
        return None
    if objective == "di":
        if not di_batch_usable(model, global_rows(model, h.shape[0], batch_idx), batch_idx):
            return None
        di = model._di(h, y)
        if di_epoch.logs_this_step(model, batch_idx):
            # The progress bar reads its values on the host (a synchronisation).
            bar = model.guard.deferred is None
            model.log(
                "train/di",
                di.detach(),
                on_step=True,
                on_epoch=False,
                prog_bar=bar,
                batch_size=len(y),
            )
        di_epoch.add_batch(model, di, len(y))
        # DDP averages gradients over processes, but each process holds only its rows'
        # share of dDI: scale so the average is the single-process gradient.
        return -di * world
    classes = model.hparams["num_classes"]
    features, y = model.kernel_layer(h), y.long()
    onehot = one_hot_targets(y, classes, features.dtype)
    if model.readout is not None and objective == "ls":  # group lasso: trained
        loss = 0.5 * (model.readout(features) - onehot).square().sum(1).mean()
    elif objective == "ls":
        model.head.update(features.detach(), y)
        weight, bias = model.head.weight.to(features.dtype), model.head.bias.to(features.dtype)
        # each process its share of the penalty: the mean over processes of the losses
        # per row is the global batch's (the penalty moves no feature's gradient)
        loss = least_squares_loss(features, onehot, weight, bias, rho=model.rho / world)
        loss = loss / len(y)
    else:
        assert model.readout is not None  # objective "ce" builds it
        loss = nn.functional.cross_entropy(model.readout(features), y)
    # under DDP the global batch's value on every process, as train/di (the monitor
    # callbacks read its epoch value)
    model.log(
        "train/loss", loss, on_step=True, on_epoch=True, batch_size=len(y), sync_dist=world > 1
    )
    return loss


def refit_ls_readout(model: KernelModule) -> None:
    """The LS baseline's closed-form step at an epoch's end: the ridge read-out fitted
    on the epoch's feature statistics (merged exactly over processes under DDP)."""
    head = model.head
    stats = head.statistics
    if stats is None:
        return
    world = model.trainer.world_size
    if world > 1:
        gathered = [model.all_gather(field) for field in stats]  # each [W, ...]
        merged = None
        for rank in range(world):
            part = DIStatistics(*(field[rank] for field in gathered))
            merged = part if merged is None else merge_statistics(merged, part)
        head.set_statistics(merged)
    head.fit()
    head.reset()
