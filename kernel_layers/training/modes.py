"""Running a model's own passes over data (read-out fits, baselines, landmark draws): in
eval mode whatever mode it trains in, on batches prepared as Lightning's loops prepare
them."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch
from torch import Tensor, nn
from torch.utils.data import (
    DataLoader,
    DistributedSampler,
    IterableDataset,
    RandomSampler,
    SequentialSampler,
)

__all__ = ["eval_mode", "model_inputs", "side_loader"]


@contextlib.contextmanager
def eval_mode(module: nn.Module) -> Iterator[None]:
    """Every submodule in eval mode within the block (no batch-norm updates, no
    dropout); each one's mode restored after it."""
    modes = {m: m.training for m in module.modules()}
    module.eval()
    try:
        yield
    finally:
        for m, training in modes.items():
            m.training = training


def model_inputs(model: nn.Module, *tensors: Tensor) -> tuple[Tensor, ...]:
    """``tensors`` (a batch's inputs and targets) on ``model``'s device, converted by the
    precision plugin of the trainer the model is attached to, as Lightning's loops
    convert a batch (``Trainer(precision="64-true")``: floating tensors to float64;
    integer labels untouched). A model attached to no trainer takes them as they are."""
    device = getattr(model, "device", None)
    moved = tuple(t.to(device) for t in tensors)
    trainer: Any = getattr(model, "_trainer", None)
    if trainer is None:
        return moved
    return tuple(trainer.precision_plugin.convert_input(moved))


def side_loader(loader: Any, *, ordered: bool) -> Any:
    """A loader over ``loader``'s rows for the model's own passes, leaving ``loader``
    alone: a fit's running iterator (persistent workers lose batches when it is
    restarted) and its shuffling's random stream (an ordered twin draws nothing from
    the global one either).

    A plain ``DataLoader`` of a map-style dataset is twinned in this process (no
    workers, every row: no ``drop_last``), with its batch size, collate function and
    sampler; a ``RandomSampler`` becomes a ``SequentialSampler`` when ``ordered``, else
    a new ``RandomSampler`` (rows still drawn at random). When ``ordered``, a
    ``DistributedSampler``'s shard becomes every row too, on every process (as a
    data module's ``train_eval_dataloader`` serves them): the read-out fitted on it is
    the same on each. Anything else (a library data module's resumable loader, an
    iterable dataset, a batch sampler) is returned as it is.
    """
    if type(loader) is not DataLoader or loader.batch_size is None:
        return loader
    dataset: Any = loader.dataset  # map-style: it has a length
    if isinstance(dataset, IterableDataset):
        return loader
    sampler: Any = loader.sampler
    if isinstance(sampler, RandomSampler | DistributedSampler) and ordered:
        sampler = SequentialSampler(dataset)
    elif isinstance(sampler, RandomSampler):
        sampler = RandomSampler(dataset)
    return DataLoader(
        dataset,
        batch_size=loader.batch_size,
        sampler=sampler,
        collate_fn=loader.collate_fn,
        generator=torch.Generator(),  # an iterator's base seed: not from the global stream
    )
