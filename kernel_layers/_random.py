"""Seeding helper shared by the layers."""

from __future__ import annotations

import torch

from kernel_layers._validation import UINT64_MAX, check_int

__all__ = ["make_generator"]


def make_generator(
    seed: int | None, generator: torch.Generator | None, *, owner: str
) -> torch.Generator:
    """A CPU generator from ``seed`` or ``generator`` (at most one), else from torch's RNG.

    Raises:
        TypeError: ``seed`` is not an integer or ``generator`` not a ``torch.Generator``.
        ValueError: both were given, or ``seed`` is negative.
    """
    if seed is not None and generator is not None:
        raise ValueError(
            f"{owner}: arguments 'seed' and 'generator' are exclusive, got both (seed={seed!r})"
        )
    if generator is not None:
        if not isinstance(generator, torch.Generator):
            raise TypeError(
                f"{owner}: argument 'generator' must be a torch.Generator or None, "
                f"got {type(generator).__name__}"
            )
        return generator
    if seed is not None:  # 1.5 or True would be silently truncated by manual_seed
        seed = check_int(owner, "seed", seed, minimum=0, maximum=UINT64_MAX)
    gen = torch.Generator()
    if seed is None:  # drawn on the CPU, also inside a torch.device("meta") context
        seed = int(torch.randint(2**62, (), device="cpu").item())
    gen.manual_seed(seed)
    return gen
