"""Blocks of input dimensions that share one learned (ARD) bandwidth, for both layers."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from numbers import Integral

import torch
from torch import Tensor

__all__ = ["block_index", "check_blocks"]


def check_blocks(owner: str, blocks: object, in_features: int) -> tuple[tuple[int, ...], ...]:
    """Normalise ``blocks`` (sizes or index groups) to index groups partitioning ``[0, D)``."""
    expected = (
        f"a list of block sizes summing to in_features={in_features} or a list of index "
        f"groups partitioning range({in_features})"
    )
    if isinstance(blocks, (str, bytes)) or not isinstance(blocks, Sequence) or not blocks:
        raise ValueError(f"{owner}: argument 'blocks' must be {expected}, got {blocks!r}")
    if all(isinstance(b, Integral) and not isinstance(b, bool) for b in blocks):
        sizes = [int(b) for b in blocks]
        if min(sizes) < 1 or sum(sizes) != in_features:
            raise ValueError(
                f"{owner}: argument 'blocks' must be {expected}, got sizes {sizes} "
                f"(sum {sum(sizes)})"
            )
        bounds = torch.tensor([0, *sizes]).cumsum(0).tolist()
        return tuple(tuple(range(a, b)) for a, b in itertools.pairwise(bounds))
    groups = []
    for group in blocks:
        if (
            isinstance(group, (str, bytes))
            or not isinstance(group, Sequence)
            or not group
            or not all(isinstance(i, Integral) and not isinstance(i, bool) for i in group)
        ):
            raise ValueError(
                f"{owner}: argument 'blocks' must be {expected}, got {blocks!r} "
                f"(entry {group!r} is neither a size nor a non-empty list of indices)"
            )
        groups.append(tuple(int(i) for i in group))
    flat = sorted(i for g in groups for i in g)
    if flat != list(range(in_features)):
        missing = sorted(set(range(in_features)) - set(flat))
        extra = sorted(
            {i for i in flat if not 0 <= i < in_features} | {i for i in flat if flat.count(i) > 1}
        )
        raise ValueError(
            f"{owner}: argument 'blocks' must be {expected}, got {blocks!r} "
            f"(missing {missing}, out of range or repeated {extra})"
        )
    return tuple(groups)


def block_index(
    blocks: tuple[tuple[int, ...], ...] | None, in_features: int, device: torch.device | str | None
) -> Tensor | None:
    """Each input dimension's block: ``Tensor[D]`` of block numbers, or ``None`` (one
    bandwidth per dimension) when ``blocks`` is ``None``."""
    if blocks is None:
        return None
    index = torch.empty(in_features, dtype=torch.long)
    for k, group in enumerate(blocks):
        index[list(group)] = k
    return index.to(device)
