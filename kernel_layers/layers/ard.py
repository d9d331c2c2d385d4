"""Learned bandwidths (automatic relevance determination) shared by the feature maps.

A map with ``ard=True`` scales its inputs by ``sigma = exp(log_bandwidth)``: one positive
bandwidth per input dimension, or one per block of dimensions (``blocks``). The log
parameterisation keeps ``sigma`` positive and makes Adam's steps relative.
:class:`Bandwidths` is a mixin of :class:`~kernel_layers.layers.base.KernelFeatureMap`
subclasses: it registers ``log_bandwidth`` on the map itself, so the state-dict keys
are the map's own (``log_bandwidth``), as they always were.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from numbers import Integral
from typing import cast

import torch
from torch import Tensor, nn

from kernel_layers._validation import check_bool
from kernel_layers.numerics.precision import upcast

__all__ = ["Bandwidths", "block_index", "check_blocks"]

#: ``blocks=`` as users pass it: block sizes (``[2, 3]``) or index groups (``[[0, 3], [1]]``).
BlocksArg = Sequence[int] | Sequence[Sequence[int]] | None


def check_blocks(owner: str, blocks: object, in_features: int) -> tuple[tuple[int, ...], ...]:
    """Normalise ``blocks`` (sizes or index groups) to index groups partitioning ``[0, D)``.

    Raises:
        ValueError: ``blocks`` is neither sizes summing to ``in_features`` nor groups
            partitioning ``range(in_features)`` (the message says what is wrong).
    """
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
        bounds = [0, *itertools.accumulate(sizes)]  # no tensor: a meta build has no values
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
    index = torch.empty(in_features, dtype=torch.long, device="cpu")
    for k, group in enumerate(blocks):
        index[list(group)] = k
    return index.to(device)


def _refill_after_load(module: nn.Module, incompatible_keys: object) -> None:
    """``load_state_dict`` post-hook of :class:`Bandwidths` maps."""
    cast("Bandwidths", module)._refill_derived_buffers()


class Bandwidths(nn.Module):
    """Mixin: the ``ard`` / ``blocks`` settings and the ``log_bandwidth`` parameter.

    A map calls :meth:`_check_ard` early in ``__init__`` (it validates and records
    ``ard`` and ``blocks``) and :meth:`_init_bandwidths` where the parameter belongs in
    its registration order.

    Attributes:
        ard (bool): whether bandwidths are learned.
        blocks (tuple[tuple[int, ...], ...] | None): index groups sharing a bandwidth;
            ``None``: one per dimension.
        log_bandwidth (Parameter[K] | None): ``log sigma`` per block (``K = D`` without
            ``blocks``); ``None`` without ``ard``.
        block_index (Tensor[D] | None): each dimension's block (a non-persistent buffer);
            ``None`` without ``blocks``.
    """

    in_features: int
    ard: bool
    blocks: tuple[tuple[int, ...], ...] | None
    log_bandwidth: nn.Parameter | None
    block_index: Tensor | None

    def _check_ard(self, ard: object, blocks: BlocksArg) -> None:
        """Validate and record ``ard`` and ``blocks`` (``blocks`` needs ``ard``)."""
        owner = type(self).__name__
        self.ard = check_bool(owner, "ard", ard)
        if blocks is not None and not self.ard:
            raise ValueError(
                f"{owner}: argument 'blocks' must be None when ard=False (one bandwidth "
                f"per block needs ard=True), got {blocks!r}"
            )
        self.blocks = None if blocks is None else check_blocks(owner, blocks, self.in_features)

    def _init_bandwidths(
        self,
        start: float,
        *,
        trainable: bool,
        dtype: torch.dtype,
        device: torch.device | str | None,
    ) -> None:
        """Register ``log_bandwidth`` (every entry ``start``; ``None`` without ``ard``)
        and the ``block_index`` buffer."""
        if self.ard:
            log_bandwidth = torch.full((self.num_bandwidths,), float(start), dtype=torch.float64)
            self.log_bandwidth = nn.Parameter(
                log_bandwidth.to(dtype=dtype, device=device), requires_grad=trainable
            )
        else:
            self.register_parameter("log_bandwidth", None)
        index = block_index(self.blocks, self.in_features, device)
        self.register_buffer("block_index", index, persistent=False)
        self.register_load_state_dict_post_hook(_refill_after_load)

    @torch.no_grad()
    def _refill_derived_buffers(self) -> None:
        """Write the buffers derived from the settings again (``block_index``): they are
        not in a state dict, so a map built on the meta device and ``to_empty()``-ed gets
        them back when its state is loaded."""
        index = block_index(self.blocks, self.in_features, "cpu")
        if self.block_index is not None and index is not None:
            self.block_index.copy_(index)

    @property
    def num_bandwidths(self) -> int:
        """``K``: the number of learned bandwidths (blocks, or input dimensions)."""
        return self.in_features if self.blocks is None else len(self.blocks)

    @property
    def bandwidth(self) -> Tensor:
        """``sigma (Tensor[K])``: one learned bandwidth per block (``ard`` only)."""
        if self.log_bandwidth is None:
            raise AttributeError(f"{type(self).__name__} has no bandwidth: built with ard=False")
        return self.log_bandwidth.exp()

    @property
    def input_bandwidth(self) -> Tensor | None:
        """``sigma (Tensor[D])``: each input dimension's bandwidth (float32 for half
        parameters), or ``None`` without ``ard``."""
        if self.log_bandwidth is None:
            return None
        sigma = upcast(self.log_bandwidth).exp()
        return sigma if self.block_index is None else sigma[self.block_index]

    def _scale_inputs(self, t: Tensor) -> Tensor:
        """``t (Tensor[..., D])`` times each dimension's bandwidth (``ard``), else ``t``."""
        sigma = self.input_bandwidth
        return t if sigma is None else t * sigma.to(t.dtype)

    def _ard_config(self) -> dict[str, object]:
        """``ard`` and ``blocks`` as constructor arguments (primitives)."""
        return {
            "ard": self.ard,
            "blocks": None if self.blocks is None else [list(b) for b in self.blocks],
        }

    def _ard_repr(self) -> str:
        """``", ard=True, blocks=..."`` for :meth:`extra_repr` (empty without ``ard``)."""
        if not self.ard:
            return ""
        text = ", ard=True"
        if self.blocks is not None:
            text += f", blocks={[list(b) for b in self.blocks]}"
        return text
