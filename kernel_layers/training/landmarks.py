"""Data-dependent set-up of a kernel map: its landmarks drawn from the training rows.

A :class:`~kernel_layers.layers.base.KernelFeatureMap` states how many training rows
it wants (:meth:`~kernel_layers.layers.base.KernelFeatureMap.data_rows_wanted`:
``NystromLayer`` wants ``out_features`` to draw its landmarks from, the paper's
protocol). :func:`init_map_from_data` gathers that many rows of the (shuffled) training
batches, through the backbone, hands them to the map once, and under DDP gives every
process rank 0's result.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import Tensor

from kernel_layers.training.batch_checks import batch_parts
from kernel_layers.training.modes import eval_mode, model_inputs, side_loader

if TYPE_CHECKING:
    from kernel_layers.training.kernel_module import KernelModule

__all__ = ["init_map_from_data", "rows_pending"]


def rows_pending(model: KernelModule) -> int:
    """How many training rows the kernel map still waits for (0: none, or done)."""
    if not model.hparams["init_landmarks"] or bool(model.landmarks_initialised):
        return 0
    return model.kernel_layer.data_rows_wanted()


def _broadcast_from_rank_zero(tensors: list[Tensor]) -> None:
    for t in tensors:
        if t.dtype == torch.bool:  # not every backend broadcasts bool
            carrier = t.detach().to(torch.uint8)
            torch.distributed.broadcast(carrier, src=0)
            t.data.copy_(carrier.bool())
        else:
            torch.distributed.broadcast(t.data, src=0)


@torch.no_grad()
def init_map_from_data(model: KernelModule) -> None:
    """Call the kernel map's ``init_from_data`` with the first
    :func:`rows_pending` embedded training rows, once (skipped when none are pending).

    The rows come from the running fit's training loader, else (test or predict of a
    model never fitted) from the data module's ``train_dataloader``; without either
    nothing happens.

    Raises:
        ValueError: the training data has fewer rows than the map wants.
    """
    needed = rows_pending(model)
    if needed <= 0:
        return
    trainer = model.trainer
    loader = trainer.train_dataloader
    if loader is not None:
        loader = side_loader(loader, ordered=False)
    else:  # test / predict without fit: ask the data module
        datamodule = getattr(trainer, "datamodule", None)
        if datamodule is None:
            return
        loader = datamodule.train_dataloader()
    rows: list[Tensor] = []
    with eval_mode(model):  # no batch-norm updates, no dropout on the rows
        for batch in loader:
            (x,) = model_inputs(model, *batch_parts(type(model).__name__, batch, 1))
            rows.append(model.embed(x))
            if sum(len(r) for r in rows) >= needed:
                break
    data = torch.cat(rows)
    if len(data) < needed:
        raise ValueError(
            f"{type(model).__name__}: init_landmarks needs {needed} training rows, "
            f"the training data has {len(data)}"
        )
    layer = model.kernel_layer
    layer.init_from_data(data[:needed])
    if model.trainer.world_size > 1:  # every process starts from rank 0's map
        _broadcast_from_rank_zero([*layer.parameters(), *layer.buffers()])
    model.landmarks_initialised.fill_(True)
