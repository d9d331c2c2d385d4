"""Seeding helper shared by the layers."""

from __future__ import annotations

import torch

__all__ = ["make_generator"]


def make_generator(
    seed: int | None, generator: torch.Generator | None, *, owner: str
) -> torch.Generator:
    """A CPU generator from ``seed`` or ``generator`` (at most one), else from torch's RNG.

    Raises:
        ValueError: both ``seed`` and ``generator`` were given.
    """
    if seed is not None and generator is not None:
        raise ValueError(
            f"{owner}: arguments 'seed' and 'generator' are exclusive, got both (seed={seed!r})"
        )
    if generator is not None:
        return generator
    gen = torch.Generator()
    gen.manual_seed(int(seed) if seed is not None else int(torch.randint(2**62, ()).item()))
    return gen
