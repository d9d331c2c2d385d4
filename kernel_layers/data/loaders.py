"""The batch-size rule and the DataLoaders that serve in-memory splits."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor
from torch.utils.data import DataLoader, TensorDataset

from kernel_layers._validation import check_int
from kernel_layers.data.sampling import ResumableDistributedSampler, ResumableLoader

__all__ = [
    "BATCH_PER_FEATURE",
    "DEFAULT_BATCH_SIZE",
    "BatchedTensorDataset",
    "EvaluationLoader",
    "collate_batched",
    "default_batch_size",
    "make_loader",
]

DEFAULT_BATCH_SIZE = 1000
#: Batch size of the paper when ``J > 500`` is ``BATCH_PER_FEATURE * J``.
BATCH_PER_FEATURE = 2


def default_batch_size(num_features: int | None) -> int:
    """The paper's batch-size rule: ``max(1000, 2 J)``, or ``1000`` when ``J`` is unknown.

    Args:
        num_features: output width ``J`` of the kernel layer, or ``None``.

    Returns:
        int: the batch size.
    """
    if num_features is None:
        return DEFAULT_BATCH_SIZE
    num_features = check_int("default_batch_size", "num_features", num_features)
    return max(DEFAULT_BATCH_SIZE, BATCH_PER_FEATURE * num_features)


class BatchedTensorDataset(TensorDataset):
    """A :class:`TensorDataset` that serves a whole batch with one fancy-indexing call.

    ``DataLoader`` hands the list of indices of a batch to ``__getitems__``; gathering
    ``x[idx]`` at once is one to two orders of magnitude faster than stacking ``B``
    single rows, which matters when the DI step itself takes milliseconds.
    """

    def __getitems__(self, indices: Sequence[int]) -> tuple[Tensor, ...]:
        index = torch.as_tensor(indices, dtype=torch.long)
        return tuple(t[index] for t in self.tensors)


def collate_batched(batch: tuple[Tensor, ...]) -> list[Tensor]:
    """Collate for :class:`BatchedTensorDataset`: the batch is already stacked."""
    return list(batch)


class EvaluationLoader(DataLoader):
    """A data module's loader of validation, test or prediction rows (in order, nothing
    dropped): rows the module scaled, which a model's input checks can tell from rows a
    plain ``DataLoader`` serves as they are."""


def make_loader(
    dataset: TensorDataset,
    *,
    batch_size: int,
    train: bool,
    num_workers: int,
    pin_memory: bool,
    seed: int,
    shuffle: bool,
    drop_last: bool,
    world_size: int = 1,
    distributed: bool = False,
    rank: int = 0,
) -> DataLoader:
    """A loader of ``dataset`` (a :class:`BatchedTensorDataset`).

    Args:
        dataset: the split to serve.
        batch_size: rows per batch.
        train: training batches (shuffled and ``drop_last`` as asked) or evaluation
            batches (in order, nothing dropped).
        num_workers: ``DataLoader`` worker processes.
        pin_memory: pin batches in page-locked memory.
        seed: seed of the training order.
        shuffle: shuffle training batches.
        drop_last: drop the incomplete last training batch.
        world_size: processes of a distributed trainer (``1``: a single process).
        distributed: the trainer's strategy is a distributed one (``strategy="ddp"``
            with one device included), where Lightning puts a ``DistributedSampler`` in
            place of any sampler that is not one.
        rank: this process's global rank.

    Returns:
        DataLoader: for training a :class:`ResumableLoader` (a killed fit resumes with
        the same batches): in a single process over an
        :class:`~kernel_layers.data.sampling.EpochSeededSampler`, under several processes
        over this rank's
        :class:`~kernel_layers.data.sampling.ResumableDistributedSampler` with
        ``shuffle`` and ``seed`` as given (Lightning keeps a loader's own
        ``DistributedSampler``, where it would put a shuffling one in place of any other
        sampler); an :class:`EvaluationLoader` for evaluation.
    """
    options: dict[str, Any] = {
        "num_workers": num_workers,
        "pin_memory": pin_memory,
        "persistent_workers": num_workers > 0,
        "collate_fn": collate_batched,
    }
    if train and (world_size > 1 or distributed):
        # Lightning's own distributed sampler would always shuffle (shuffle=False lost).
        sampler = ResumableDistributedSampler(
            dataset, num_replicas=world_size, rank=rank, shuffle=shuffle, seed=seed
        )
        return ResumableLoader(
            dataset,
            batch_size=batch_size,
            seed=seed,
            sampler=sampler,
            drop_last=drop_last,
            **options,
        )
    if train:
        # Seeded per epoch and stateful: a fit killed mid-epoch resumes on exactly the
        # same batches.
        return ResumableLoader(
            dataset,
            batch_size=batch_size,
            seed=seed,
            shuffle=shuffle,
            drop_last=drop_last,
            **options,
        )
    return EvaluationLoader(
        dataset, batch_size=batch_size, shuffle=False, drop_last=False, **options
    )
