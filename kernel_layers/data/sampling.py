"""A training ``DataLoader`` whose data order survives a kill and resume, batch for batch."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset, DistributedSampler, Sampler

__all__ = ["EpochSeededSampler", "ResumableDistributedSampler", "ResumableLoader"]


class EpochSeededSampler(Sampler[int]):
    """Rows in an order drawn from ``seed + epoch`` (or in order), optionally skipping a prefix.

    Unlike ``RandomSampler``, the order does not depend on the global random state, so a
    resumed run sees the same order; Lightning calls :meth:`set_epoch` every epoch.

    Args:
        size: number of rows.
        seed: base seed of the permutations.
        shuffle: draw a permutation per epoch (else the rows in order).
    """

    def __init__(self, size: int, seed: int, *, shuffle: bool = True) -> None:
        self.size, self.seed, self.shuffle = size, seed, shuffle
        self.epoch = 0
        self.start = 0

    def set_epoch(self, epoch: int) -> None:
        """Select the epoch whose permutation :meth:`__iter__` yields."""
        self.epoch = epoch

    def __len__(self) -> int:
        return self.size

    def __iter__(self) -> Iterator[int]:
        if self.shuffle:
            order = torch.randperm(
                self.size, generator=torch.Generator().manual_seed(self.seed + self.epoch)
            )
        else:
            order = torch.arange(self.size)
        start, self.start = self.start, 0
        return iter(order[start:].tolist())


class ResumableDistributedSampler(DistributedSampler[int]):
    """This process's share of ``DistributedSampler``'s order (drawn from ``seed + epoch``
    whatever the global random state), optionally skipping a prefix: the distributed
    counterpart of :class:`EpochSeededSampler`. Lightning keeps a loader's own
    ``DistributedSampler`` and calls :meth:`set_epoch` every epoch.

    Args:
        dataset: a map-style dataset.
        num_replicas: the number of processes.
        rank: this process's rank.
        shuffle: draw a permutation per epoch (else the rows in order).
        seed: base seed of the permutations (the same on every process).
    """

    def __init__(
        self, dataset: Dataset, *, num_replicas: int, rank: int, shuffle: bool, seed: int
    ) -> None:
        super().__init__(dataset, num_replicas=num_replicas, rank=rank, shuffle=shuffle, seed=seed)
        self.start = 0

    def __iter__(self) -> Iterator[int]:
        order = list(super().__iter__())
        start, self.start = self.start, 0
        return iter(order[start:])


class ResumableLoader(DataLoader):
    """A ``DataLoader`` with ``state_dict`` / ``load_state_dict`` (Lightning saves them).

    Lightning resumes a stateful loader mid-epoch: the batches already consumed in the
    interrupted epoch are skipped, and the epoch's order is the same, so a fit killed at
    any step and resumed from ``ckpt_path="last"`` trains on exactly the same batches.

    Args:
        dataset: a map-style dataset.
        batch_size: rows per batch.
        seed: base seed of the per-epoch permutations.
        shuffle: shuffle every epoch.
        sampler: a :class:`ResumableDistributedSampler` for one process of several;
            ``None``: an :class:`EpochSeededSampler` of ``seed`` and ``shuffle``.
        **kwargs: other ``DataLoader`` arguments (``drop_last``, ``num_workers``, ...).
    """

    def __init__(
        self,
        dataset: Dataset,
        *,
        batch_size: int,
        seed: int,
        shuffle: bool = True,
        sampler: ResumableDistributedSampler | None = None,
        **kwargs: Any,
    ) -> None:
        if sampler is None:
            # Dataset declares no __len__ in its stub; map-style datasets have one.
            size = len(dataset)  # type: ignore[arg-type]
            sampler = EpochSeededSampler(size, seed, shuffle=shuffle)  # type: ignore[assignment]
        super().__init__(dataset, batch_size=batch_size, sampler=sampler, **kwargs)
        self._yielded = 0
        self._skip = 0
        #: The epoch ``_skip`` belongs to (set by :meth:`load_state_dict`), else ``None``.
        self._skip_epoch: int | None = None

    # DataLoader.__iter__ is typed to return its private iterator class; a generator
    # that resumes mid-epoch serves the same protocol.
    def __iter__(self) -> Iterator[Any]:  # type: ignore[override]
        return self._batches()

    def _batches(self) -> Iterator[Any]:
        # A generator: this runs at the first next(), after Lightning's set_epoch. A
        # checkpoint taken at the end of an epoch cut short (limit_train_batches) restores
        # that epoch's count, but Lightning resumes with the next epoch: skip nothing then.
        skip, self._skip = self._skip, 0
        skip_epoch, self._skip_epoch = self._skip_epoch, None
        assert isinstance(self.sampler, _RESUMABLE) and self.batch_size is not None
        if skip_epoch is not None and self.sampler.epoch != skip_epoch:
            skip = 0
        self.sampler.start = skip * self.batch_size
        self._yielded = skip
        for batch in super().__iter__():
            self._yielded += 1
            yield batch

    def state_dict(self) -> dict[str, int]:
        """The epoch and the number of batches yielded in it."""
        assert isinstance(self.sampler, _RESUMABLE)
        return {"epoch": self.sampler.epoch, "batches": self._yielded}

    def load_state_dict(self, state: dict[str, int]) -> None:
        """Resume the epoch ``state`` describes, after its consumed batches (when the
        epoch iterated next is that epoch; from its start for any other)."""
        assert isinstance(self.sampler, _RESUMABLE)
        epoch = int(state["epoch"])
        self.sampler.set_epoch(epoch)
        self._skip_epoch = epoch
        self._skip = int(state["batches"]) % max(len(self), 1)


#: The samplers a :class:`ResumableLoader` can resume mid-epoch.
_RESUMABLE = (EpochSeededSampler, ResumableDistributedSampler)
