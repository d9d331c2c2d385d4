"""Initial landmarks picked from data, by name: the selection behind ``from_data``."""

from __future__ import annotations

from collections.abc import Callable, Mapping

import torch
from torch import Tensor

from kernel_layers._random import make_generator
from kernel_layers._validation import check_choice, check_int, check_matrix, check_positive
from kernel_layers.kernels import Kernel, get_kernel
from kernel_layers.numerics.precision import DISTANCE_OVERFLOW, data_limit
from kernel_layers.selection.landmarks import (
    DEFAULT_ETA,
    greedy_landmarks,
    kmeans,
    kmeans_plus_plus,
    random_landmarks,
)

__all__ = ["INITS", "select_landmarks"]

#: Landmark initialisations understood by :meth:`NystromLayer.from_data`.
INITS = ("random", "kmeans", "kmeans++", "greedy")


def select_landmarks(
    owner: str,
    x: Tensor,
    out_features: int,
    *,
    init: str,
    seed: int | None = None,
    generator: torch.Generator | None = None,
    eta: float | None = None,
    kernel: str | Kernel | Callable[[Tensor, Tensor], Tensor] = "gaussian",
    gamma: float = 1.0,
    kernel_params: Mapping[str, float] | None = None,
) -> Tensor:
    """Landmarks selected from the rows of ``x`` (see ``NystromLayer.from_data``).

    Args:
        owner: the name used in error messages.
        x (Tensor[N, D]): data to select from (``N >= out_features``).
        out_features: number of landmarks ``n``; for ``"greedy"``, the most landmarks.
        init: one of :data:`INITS`.
        seed: seed of the selection (exclusive with ``generator``).
        generator: a CPU ``torch.Generator``.
        eta: innovation threshold ``> 0`` of ``"greedy"`` (default
            :data:`~kernel_layers.selection.landmarks.DEFAULT_ETA`); only valid with it.
        kernel: the kernel of ``"greedy"`` (name, :class:`Kernel` or callable).
        gamma: its parameter ``> 0``.
        kernel_params: its further parameters.

    Returns:
        Tensor[n', D]: the landmarks, ``n' = out_features`` except for ``"greedy"``,
        which may accept fewer.

    Raises:
        ValueError: unknown ``init`` (the message lists the valid ones),
            ``out_features > N``, ``eta`` without ``init="greedy"``, or no row accepted
            by the greedy rule.
    """
    check_matrix(owner, "x", x, max_abs=data_limit(x), why=DISTANCE_OVERFLOW)
    out_features = check_int(owner, "out_features", out_features)
    check_choice(owner, "init", init, INITS)
    if out_features > x.shape[0]:
        raise ValueError(
            f"{owner}: argument 'out_features' must be <= the number of rows of x "
            f"({x.shape[0]}), got {out_features}"
        )
    if eta is not None and init != "greedy":
        raise ValueError(
            f"{owner}: argument 'eta' must be None unless init='greedy', "
            f"got eta={eta!r} with init={init!r}"
        )
    gen = make_generator(seed, generator, owner=owner)
    if init == "random":
        return x[random_landmarks(x, out_features, generator=gen)]
    if init == "kmeans":
        centres, _ = kmeans(x, out_features, generator=gen)
        return centres
    if init == "kmeans++":
        return x[kmeans_plus_plus(x, out_features, generator=gen)]
    eta = DEFAULT_ETA if eta is None else check_positive(owner, "eta", eta)
    spec = get_kernel(kernel, owner=owner).bind(kernel_params, owner=owner)
    gamma = check_positive(owner, "gamma", gamma)
    order = torch.randperm(x.shape[0], generator=gen).to(x.device)
    selected = greedy_landmarks(
        x[order], kernel=spec, gamma=gamma, eta=eta, max_landmarks=out_features
    )
    assert isinstance(selected, Tensor)  # return_indices=False
    if selected.shape[0] == 0:
        raise ValueError(
            f"{owner}: argument 'eta' must be below the largest k(x, x) so that the "
            f"greedy rule accepts a landmark, got {eta}"
        )
    return selected
