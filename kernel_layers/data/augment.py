"""Per-image random shifts and horizontal flips of a training batch, on its device.

The image data modules serve whole batches gathered from in-memory tensors (no
per-sample Python), so augmentation works on the batch too: each image gets its own
shift and flip, drawn from a generator seeded by the step, which makes a run
reproducible and a resumed run draw exactly what the uninterrupted one would have.
Shifts pad with zeros (the background of MNIST-style images after min-max scaling).
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

__all__ = ["ShiftFlip", "draw_shift_flip", "shift_flip", "step_generator"]


class ShiftFlip:
    """Random per-image parameters of :func:`shift_flip`.

    Attributes:
        dy (Tensor[B]): vertical shifts in ``[-max_shift, max_shift]`` (pixels, int64).
        dx (Tensor[B]): horizontal shifts, the same range.
        flip (Tensor[B]): ``True`` where the image is mirrored left-right.
    """

    __slots__ = ("dx", "dy", "flip")

    def __init__(self, dy: Tensor, dx: Tensor, flip: Tensor) -> None:
        self.dy, self.dx, self.flip = dy, dx, flip


def step_generator(seed: int, step: int, rank: int = 0, micro_batch: int = 0) -> torch.Generator:
    """A CPU generator seeded from ``(seed, step, rank)`` (independent streams), and from
    ``micro_batch`` too when it is not ``0``: the index of a batch among those accumulated
    into one optimizer step (``accumulate_grad_batches``), so each gets its own draws
    while micro-batch ``0`` (every batch without accumulation) keeps the step's."""
    words = [seed, step, rank] if micro_batch == 0 else [seed, step, rank, micro_batch]
    entropy = np.random.SeedSequence(words).generate_state(1, np.uint64)[0]
    return torch.Generator().manual_seed(int(entropy) & ((1 << 63) - 1))


def draw_shift_flip(
    batch: int, max_shift: int, flip: bool, generator: torch.Generator
) -> ShiftFlip:
    """Draw every image's shift (uniform over ``[-max_shift, max_shift]`` per axis) and,
    when ``flip``, a fair coin for its mirror image; on the CPU.

    Returns:
        ShiftFlip: parameters for ``batch`` images.
    """
    dy = torch.randint(-max_shift, max_shift + 1, (batch,), generator=generator)
    dx = torch.randint(-max_shift, max_shift + 1, (batch,), generator=generator)
    mirror = torch.rand(batch, generator=generator) < 0.5 if flip else torch.zeros(batch) > 0
    return ShiftFlip(dy, dx, mirror)


def shift_flip(images: Tensor, params: ShiftFlip) -> Tensor:
    """Shift each image by ``(dy, dx)`` pixels (zeros move in) and mirror the flagged ones.

    Output pixel ``(i, j)`` of image ``b`` is input pixel ``(i - dy[b], j - dx[b])`` of
    the (mirrored, where flagged) image, or ``0`` outside it.

    Args:
        images (Tensor[B, C, H, W]): the batch.
        params: per-image shifts and flips (any device: moved to ``images``').

    Returns:
        Tensor[B, C, H, W]: the augmented batch, a new tensor.
    """
    batch, _, height, width = images.shape
    device = images.device
    mirror = params.flip.to(device).view(batch, 1, 1, 1)
    source = torch.where(mirror, images.flip(-1), images)
    pad = int(max(params.dy.abs().max(), params.dx.abs().max())) if batch else 0
    padded = torch.nn.functional.pad(source, (pad, pad, pad, pad))
    rows = torch.arange(height, device=device) + pad - params.dy.to(device).view(batch, 1)
    cols = torch.arange(width, device=device) + pad - params.dx.to(device).view(batch, 1)
    index = torch.arange(batch, device=device).view(batch, 1, 1)
    # [B, H, W, C] after advanced indexing on the batch and both spatial axes.
    out = padded.permute(0, 2, 3, 1)[index, rows.view(batch, height, 1), cols.view(batch, 1, width)]
    return out.permute(0, 3, 1, 2).contiguous()
