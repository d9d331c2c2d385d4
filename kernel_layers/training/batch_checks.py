"""What is wrong with a batch itself: its labels, too few rows for DI, errors named by it.

Divergence (:class:`~kernel_layers.training.divergence.DivergenceGuard`) is a non-finite
or exploding objective and nothing else. A batch that cannot be used is something else,
reported as such:

* labels that are not integers or lie outside ``[0, num_classes)``: an error, checked
  before a one-hot encoding or the cross-entropy indexes with them
  (:func:`~kernel_layers._validation.check_labels`);
* an error raised while computing a batch's loss (a NaN input, a bad label): raised
  again with the batch's index and epoch (:func:`named_batch_errors`);
* a batch of no more than ``J`` rows under DI, whose centred features span the batch so
  that DI saturates: the epoch's short last batch (``drop_last=False``) is skipped, with
  one warning per fit, and DI stays that of full batches; any other such batch is an
  error (the batch size is too small), as is a short last batch under DDP (skipping a
  step there is not supported: use ``drop_last=True``).
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import torch
from lightning.pytorch.utilities import rank_zero_warn
from torch import Tensor

if TYPE_CHECKING:
    from kernel_layers.training.kernel_module import KernelModule


def batch_parts(owner: str, batch: Any, count: int) -> tuple[Any, ...]:
    """The first ``count`` entries of a batch ``(x, y, ...)`` (a ``TensorDataset``'s
    loader yields such tuples); for ``count=1`` a lone tensor is the inputs.

    Raises:
        TypeError: a batch of another kind (a dict, say), or with fewer entries.
    """
    if count == 1 and isinstance(batch, Tensor):
        return (batch,)
    if not isinstance(batch, list | tuple) or len(batch) < count:
        kind = type(batch).__name__ if not isinstance(batch, list | tuple) else len(batch)
        form = "(x, ...)" if count == 1 else "(x, y, ...)"
        raise TypeError(
            f"{owner}: a batch must be a tuple {form}, as a TensorDataset's loader yields, "
            f"got {kind!r} (map a dict batch to a tuple in the data loader's collate_fn)"
        )
    return tuple(batch[:count])


__all__ = ["di_batch_usable", "global_rows", "named_batch_errors"]

#: Exception types raised again as the same type with the batch named in the message;
#: their subclasses (``torch.OutOfMemoryError``, ``torch.linalg.LinAlgError``, ...) pass
#: through as they are.
_RENAMED = (ValueError, TypeError, IndexError, RuntimeError)


@contextlib.contextmanager
def named_batch_errors(what: str, batch_idx: int, epoch: int | None = None) -> Iterator[None]:
    """Within the block, an exception names the batch it was raised on.

    Args:
        what: the kind of batch (``"training"``, ``"test"``, ...).
        batch_idx: the batch's index in its epoch.
        epoch: the training epoch, or ``None`` (not named).

    Raises:
        Exception: what the block raised; one of the built-in ``ValueError``,
            ``TypeError``, ``IndexError`` or ``RuntimeError`` (not a subclass) as a new
            exception of the same type whose message ends with ``(in <what> batch <i>
            of epoch <e>)`` (without the epoch when ``epoch`` is ``None``).
    """
    try:
        yield
    except _RENAMED as err:
        if type(err) not in _RENAMED:
            raise
        where = f"in {what} batch {batch_idx}" + ("" if epoch is None else f" of epoch {epoch}")
        raise type(err)(f"{err} ({where})") from err


def _too_small(model: KernelModule, rows: int) -> str:
    j = model.num_features
    return (
        f"{type(model).__name__}: the DI objective needs batches larger than the feature "
        f"width J={j}, got a batch of {rows} rows (DI saturates when B <= J)"
    )


def global_rows(model: KernelModule, rows: int, batch_idx: int) -> int:
    """The rows of the global batch whose local part has ``rows`` rows: ``rows`` times
    the number of processes, whose shards hold equal batches but for the epoch's last,
    where the shards' own counts are summed (one reduction an epoch: shards a user gave
    each process differ there, and every process must judge that batch alike)."""
    trainer = model._trainer
    if trainer is None or trainer.world_size == 1:
        return rows
    batches = trainer.num_training_batches
    if not (math.isfinite(batches) and batch_idx + 1 >= batches):
        return rows * trainer.world_size
    count = torch.tensor(float(rows), device=model.device)
    return int(trainer.strategy.reduce(count, reduce_op="sum"))


def di_batch_usable(model: KernelModule, rows: int, batch_idx: int) -> bool:
    """Whether DI can use a (global) batch of ``rows`` rows: ``rows > J``.

    The epoch's short last batch (``batch_idx > 0``, the last of an epoch of known
    length) returns ``False``: it is skipped, warned once per fit and counted in
    ``model.short_batches_skipped``.

    Raises:
        ValueError: a batch of ``rows <= J`` that is not the epoch's short last batch,
            or one under DDP.
    """
    if rows > model.num_features:
        return True
    trainer = model._trainer
    batches = trainer.num_training_batches if trainer is not None else math.inf
    last = 0 < batch_idx and math.isfinite(batches) and batch_idx + 1 >= batches
    world = trainer.world_size if trainer is not None else 1
    j = model.num_features
    if not last:
        raise ValueError(
            f"{_too_small(model, rows)}; set the data module's batch_size to at least "
            f"{2 * j} (the paper uses max(1000, 2J)) with drop_last=True"
        )
    if world > 1:
        raise ValueError(
            f"{_too_small(model, rows)}: the epoch's short last batch, which cannot be "
            "skipped under DDP; set drop_last=True"
        )
    if model.short_batches_skipped == 0:
        rank_zero_warn(
            f"{_too_small(model, rows)}: the epoch's short batch (the last, {rows} rows) is "
            "skipped in every epoch, and the epoch's DI is that of the full batches; set "
            "drop_last=True to drop it (the default of the data modules)"
        )
    model.short_batches_skipped += 1
    return False
