"""Landmark selection for Nystrom maps: random subsets, k-means++ seeding, k-means.

Pure functions on the device and dtype of the data, usable on their own or through
:meth:`~kernel_layers.NystromLayer.from_data`:

* :func:`random_landmarks`: a uniformly random subset of distinct rows (the standard
  Nystrom baseline).
* :func:`kmeans_plus_plus`: ``D^2`` seeding (Arthur and Vassilvitskii, "k-means++: the
  advantages of careful seeding", SODA 2007): each new centre is a data row drawn with
  probability proportional to its squared distance to the nearest centre so far.
* :func:`kmeans`: Lloyd iterations from k-means++ (or random) seeds; squared distances
  come from matrix products, chunked over rows, so nothing ``[N, k, D]`` is formed
  (k-means Nystrom: Zhang, Tsang and Kwok, ICML 2008).

The greedy innovation rule, :func:`~kernel_layers.selection.greedy.greedy_landmarks`,
lives in :mod:`kernel_layers.selection.greedy` and is re-exported here with its
defaults.
"""

from __future__ import annotations

import torch
from torch import Tensor

from kernel_layers._random import make_generator
from kernel_layers._validation import check_choice, check_int, check_matrix, check_nonnegative
from kernel_layers.kernels import squared_distances
from kernel_layers.numerics.precision import DISTANCE_OVERFLOW, data_limit
from kernel_layers.selection.greedy import DEFAULT_ETA, DEFAULT_GREEDY_BATCH, greedy_landmarks

__all__ = [
    "DEFAULT_ETA",
    "DEFAULT_GREEDY_BATCH",
    "DEFAULT_KMEANS_ITERS",
    "DEFAULT_KMEANS_TOL",
    "KMEANS_INITS",
    "greedy_landmarks",
    "kmeans",
    "kmeans_plus_plus",
    "random_landmarks",
]

#: Seedings understood by :func:`kmeans`.
KMEANS_INITS = ("kmeans++", "random")
#: Default maximum number of Lloyd iterations.
DEFAULT_KMEANS_ITERS = 100
#: Default convergence tolerance of :func:`kmeans`: Lloyd stops when the squared shift
#: of the centres, summed, is below ``tol`` times the mean per-feature variance of the
#: data (scikit-learn's convention).
DEFAULT_KMEANS_TOL = 1e-4
#: Most entries of one ``[rows, k]`` distance block (chunking over rows in k-means).
MAX_BLOCK_ELEMENTS = 1 << 24
#: Squared distances below ``ROUNDOFF_FACTOR * eps * (||x||^2 + ||c||^2)`` are round-off
#: of the matrix-product formula and are set to exactly 0 (duplicates of a centre).
ROUNDOFF_FACTOR = 8.0


def _work(x: Tensor) -> Tensor:
    """``x`` detached, in float32 at least (half precision distances are too coarse)."""
    x = x.detach()
    return x if x.dtype in (torch.float32, torch.float64) else x.float()


def _check_count(owner: str, name: str, k: object, rows: int) -> int:
    k = check_int(owner, name, k)
    if k > rows:
        raise ValueError(
            f"{owner}: argument '{name}' must be <= the number of rows of x ({rows}), got {k}"
        )
    return k


def random_landmarks(
    x: Tensor, k: int, *, seed: int | None = None, generator: torch.Generator | None = None
) -> Tensor:
    """Indices of ``k`` distinct rows of ``x`` drawn uniformly at random.

    Args:
        x (Tensor[N, D]): data.
        k: number of rows, ``1 <= k <= N``.
        seed: seed of the draw (exclusive with ``generator``).
        generator: a CPU ``torch.Generator``.

    Returns:
        Tensor[k]: ``int64`` row indices on ``x``'s device.
    """
    owner = "random_landmarks"
    check_matrix(owner, "x", x)
    k = _check_count(owner, "k", k, x.shape[0])
    gen = make_generator(seed, generator, owner=owner)
    return torch.randperm(x.shape[0], generator=gen)[:k].to(x.device)


def _distances_to(x: Tensor, x_sq: Tensor, centre: Tensor) -> Tensor:
    """``||x_i - c||^2`` for one centre ``c (Tensor[D])``, exact 0 for duplicates of ``c``."""
    c_sq = (centre * centre).sum()
    d = torch.addmv(x_sq + c_sq, x, centre, alpha=-2.0).clamp_min_(0.0)
    floor = ROUNDOFF_FACTOR * torch.finfo(x.dtype).eps * (x_sq + c_sq)
    return d.masked_fill_(d <= floor, 0.0)


def kmeans_plus_plus(
    x: Tensor, k: int, *, seed: int | None = None, generator: torch.Generator | None = None
) -> Tensor:
    """k-means++ seeding: ``k`` distinct rows drawn by ``D^2`` sampling.

    The first row is uniform; each next one is drawn with probability proportional to
    its squared distance to the nearest row chosen so far (Arthur and Vassilvitskii,
    SODA 2007). Draws use a CPU generator (so a seed gives the same choice on every
    device) and an inverse-CDF lookup on ``x``'s device; cost ``O(N k D)``, memory
    ``O(N)``. When every remaining row duplicates a chosen one, further rows are drawn
    uniformly among the unchosen ones, so the indices are always distinct.

    Args:
        x (Tensor[N, D]): data.
        k: number of centres, ``1 <= k <= N``.
        seed: seed of the draws (exclusive with ``generator``).
        generator: a CPU ``torch.Generator``.

    Returns:
        Tensor[k]: distinct ``int64`` row indices on ``x``'s device, in order of choice.
    """
    owner = "kmeans_plus_plus"
    check_matrix(owner, "x", x, max_abs=data_limit(x), why=DISTANCE_OVERFLOW)
    k = _check_count(owner, "k", k, x.shape[0])
    gen = make_generator(seed, generator, owner=owner)
    return _kmeans_plus_plus(_work(x), k, gen)


def _kmeans_plus_plus(x: Tensor, k: int, gen: torch.Generator) -> Tensor:
    n = x.shape[0]
    uniforms = torch.rand(k, generator=gen, dtype=torch.float64).tolist()
    x_sq = (x * x).sum(1)
    chosen = torch.zeros(n, dtype=torch.bool, device=x.device)
    first = min(int(uniforms[0] * n), n - 1)
    index = [first]
    chosen[first] = True
    d2 = _distances_to(x, x_sq, x[first]).to(torch.float64)
    for u in uniforms[1:]:
        cumulative = torch.cumsum(d2, 0)
        total = float(cumulative[-1])
        if total > 0.0:
            target = torch.tensor([u * total], dtype=torch.float64, device=x.device)
            j = min(int(torch.searchsorted(cumulative, target, right=True)), n - 1)
            if d2[j] <= 0.0:  # u * total rounded onto the last step: take the last positive
                j = int(torch.nonzero(d2 > 0.0)[-1])
        else:  # all remaining rows duplicate chosen ones
            free = torch.nonzero(~chosen).flatten()
            j = int(free[min(int(u * free.numel()), free.numel() - 1)])
        index.append(j)
        chosen[j] = True
        d2 = torch.minimum(d2, _distances_to(x, x_sq, x[j]).to(torch.float64))
        d2[j] = 0.0
    return torch.tensor(index, dtype=torch.long, device=x.device)


def _assign(x: Tensor, centres: Tensor) -> tuple[Tensor, Tensor]:
    """Nearest centre of each row and the squared distance to it, chunked over rows."""
    rows = max(1, MAX_BLOCK_ELEMENTS // centres.shape[0])
    labels, dists = [], []
    for start in range(0, x.shape[0], rows):
        d = squared_distances(x[start : start + rows], centres)
        best, label = d.min(1)
        labels.append(label)
        dists.append(best)
    return torch.cat(labels), torch.cat(dists)


def kmeans(
    x: Tensor,
    k: int,
    *,
    iters: int = DEFAULT_KMEANS_ITERS,
    tol: float = DEFAULT_KMEANS_TOL,
    init: str = "kmeans++",
    seed: int | None = None,
    generator: torch.Generator | None = None,
) -> tuple[Tensor, Tensor]:
    """k-means clustering by Lloyd iterations, in torch, on ``x``'s device.

    Seeds by :func:`kmeans_plus_plus` (or ``k`` random distinct rows), then alternates
    assignment (squared distances by matrix products, in blocks of at most
    :data:`MAX_BLOCK_ELEMENTS` entries) and centre updates (cluster means). An empty
    cluster is re-seeded at the row farthest from its centre (as scikit-learn does).
    Stops after ``iters`` iterations, when the assignment no longer changes, or when the
    summed squared shift of the centres falls below ``tol`` times the mean per-feature
    variance of ``x``. Half-precision data is clustered in float32. If ``x`` has fewer
    than ``k`` distinct rows, some centres coincide (and their clusters are empty).

    Args:
        x (Tensor[N, D]): data.
        k: number of clusters, ``1 <= k <= N``.
        iters: maximum number of Lloyd iterations ``>= 1``.
        tol: relative tolerance on the centre shift ``>= 0``.
        init: ``"kmeans++"`` or ``"random"``.
        seed: seed of the seeding (exclusive with ``generator``).
        generator: a CPU ``torch.Generator``.

    Returns:
        tuple[Tensor[k, D], Tensor[N]]: the centres in ``x``'s dtype and the ``int64``
        label of each row (its nearest centre).
    """
    owner = "kmeans"
    check_matrix(owner, "x", x, max_abs=data_limit(x), why=DISTANCE_OVERFLOW)
    k = _check_count(owner, "k", k, x.shape[0])
    iters = check_int(owner, "iters", iters)
    tol = check_nonnegative(owner, "tol", tol)
    check_choice(owner, "init", init, KMEANS_INITS)
    gen = make_generator(seed, generator, owner=owner)
    with torch.no_grad():
        data = _work(x)
        if init == "kmeans++":
            seeds = _kmeans_plus_plus(data, k, gen)
        else:
            seeds = torch.randperm(data.shape[0], generator=gen)[:k].to(data.device)
        centres = data[seeds].clone()
        threshold = tol * float(data.var(0, correction=0).mean()) if data.shape[0] > 1 else 0.0
        previous = None
        for _ in range(iters):
            labels, dists = _assign(data, centres)
            if previous is not None and torch.equal(labels, previous):
                break
            previous = labels
            counts = torch.bincount(labels, minlength=k)
            sums = torch.zeros_like(centres).index_add_(0, labels, data)
            updated = sums / counts.clamp_min(1)[:, None].to(sums.dtype)
            empty = torch.nonzero(counts == 0).flatten()
            if empty.numel():
                far = torch.topk(dists, empty.numel()).indices
                updated[empty] = data[far]
                previous = None  # a re-seeded centre may tie with another: look again
            shift = float(((updated - centres) ** 2).sum())
            centres = updated
            if shift <= threshold:
                break
        labels, _ = _assign(data, centres)
    return centres.to(x.dtype), labels
