"""Landmark selection for Nystrom maps: random subsets, k-means (++), greedy innovation.

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
* :func:`greedy_landmarks`: the innovation, or approximate-linear-dependence, rule
  (Engel, Mannor and Meir, "The kernel recursive least-squares algorithm", 2004): stream
  over the data and accept ``x`` as a landmark when its squared distance, in feature
  space, to the span of the landmarks so far exceeds ``eta``::

      delta(x) = k(x, x) - k_x^T K_Z^-1 k_x > eta,   k_x = k(Z, x).

  ``K_Z = L L^T`` is kept as a Cholesky factor grown by one row per accepted point
  (``l = L^-1 k_x``, new diagonal ``sqrt(delta(x))``), so no inverse is formed; every
  diagonal entry of ``L`` exceeds ``sqrt(eta)``, which bounds ``K_Z``'s conditioning.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

import torch
from torch import Tensor

from kernel_layers._random import make_generator
from kernel_layers._validation import (
    check_choice,
    check_int,
    check_matrix,
    check_nonnegative,
    check_positive,
)
from kernel_layers.kernels import Kernel, get_kernel, squared_distances
from kernel_layers.numerics.precision import DISTANCE_OVERFLOW, data_limit

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
#: Default innovation threshold of :func:`greedy_landmarks`.
DEFAULT_ETA = 1e-3
#: Rows per batch when :func:`greedy_landmarks` streams over a tensor.
DEFAULT_GREEDY_BATCH = 1024
#: Most entries of one ``[rows, k]`` distance block (chunking over rows in k-means).
MAX_BLOCK_ELEMENTS = 1 << 24
#: Rows per block when the kernel's diagonal is evaluated block by block.
DIAGONAL_BLOCK = 64
#: Squared distances below ``ROUNDOFF_FACTOR * eps * (||x||^2 + ||c||^2)`` are round-off
#: of the matrix-product formula and are set to exactly 0 (duplicates of a centre).
ROUNDOFF_FACTOR = 8.0
#: dtype of the greedy rule's kernel evaluations and Cholesky factor.
GREEDY_DTYPE = torch.float64


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


def _kernel_diagonal(kernel: Kernel, x: Tensor, gamma: float) -> Tensor:
    """``k(x_i, x_i)`` for each row, from ``DIAGONAL_BLOCK``-row blocks of the kernel."""
    parts = []
    for start in range(0, x.shape[0], DIAGONAL_BLOCK):
        block = x[start : start + DIAGONAL_BLOCK]
        parts.append(kernel.matrix(block, block, gamma).diagonal())
    return torch.cat(parts)


class _GreedyState:
    """Landmarks accepted so far and the Cholesky factor of their kernel matrix."""

    def __init__(self, width: int, capacity: int, device: torch.device) -> None:
        self.size = 0
        self.points = torch.empty(capacity, width, dtype=GREEDY_DTYPE, device=device)
        self.factor = torch.zeros(capacity, capacity, dtype=GREEDY_DTYPE, device=device)

    def reserve(self, size: int) -> None:
        """Grow the buffers (by doubling) to hold ``size`` landmarks."""
        capacity = self.points.shape[0]
        if size <= capacity:
            return
        new = max(size, 2 * capacity)
        points = self.points.new_empty(new, self.points.shape[1])
        points[: self.size] = self.points[: self.size]
        factor = self.factor.new_zeros(new, new)
        factor[: self.size, : self.size] = self.factor[: self.size, : self.size]
        self.points, self.factor = points, factor


def _greedy_batch(
    state: _GreedyState,
    batch: Tensor,
    kernel: Kernel,
    gamma: float,
    eta: float,
    relative: bool,
    limit: int | None,
) -> list[int]:
    """Run the innovation rule over one batch (in order); returns the accepted rows.

    Innovations of the whole batch against the current landmarks come from one
    triangular solve; after each acceptance they are downdated by the new row of the
    Cholesky factor (``delta -= r^2``), so the decisions are those of the one-by-one
    rule at ``O(B (n + D))`` per acceptance.
    """
    n0 = state.size
    diag = _kernel_diagonal(kernel, batch, gamma)
    threshold = eta * diag if relative else torch.full_like(diag, eta)
    room = batch.shape[0] if limit is None else min(batch.shape[0], limit - n0)
    # Rows of L^-1 k(Z, batch): n0 from the solve, plus one per acceptance.
    proj = batch.new_zeros(n0 + room, batch.shape[0])
    if n0:
        cross = kernel.matrix(state.points[:n0], batch, gamma)
        proj[:n0] = torch.linalg.solve_triangular(state.factor[:n0, :n0], cross, upper=False)
    delta = diag - (proj[:n0] * proj[:n0]).sum(0)
    accepted: list[int] = []
    start = 0
    while len(accepted) < room and start < batch.shape[0]:
        above = (delta[start:] > threshold[start:]).nonzero()
        if above.numel() == 0:
            break
        i = start + int(above[0])
        n = n0 + len(accepted)
        pivot = torch.sqrt(delta[i])
        row = kernel.matrix(batch[i : i + 1], batch, gamma)[0]
        new = (row - proj[:n, i] @ proj[:n]) / pivot
        state.reserve(n + 1)
        state.factor[n, :n] = proj[:n, i]
        state.factor[n, n] = pivot
        state.points[n] = batch[i]
        state.size = n + 1
        proj[n] = new
        delta = delta - new * new
        accepted.append(i)
        start = i + 1
    return accepted


def _batches(data: Tensor | Iterable[object], batch_size: int) -> Iterable[Tensor]:
    if isinstance(data, Tensor):
        yield from data.split(batch_size)
        return
    for item in data:
        if isinstance(item, (tuple, list)) and item:
            item = item[0]
        if not isinstance(item, Tensor):
            raise TypeError(
                f"greedy_landmarks: argument 'data' must yield Tensors or (Tensor, ...) "
                f"batches, got {type(item).__name__}"
            )
        yield item


def greedy_landmarks(
    data: Tensor | Iterable[object],
    *,
    kernel: str | Kernel | Callable[[Tensor, Tensor], Tensor] = "gaussian",
    gamma: float = 1.0,
    kernel_params: Mapping[str, float] | None = None,
    eta: float = DEFAULT_ETA,
    max_landmarks: int | None = None,
    relative: bool = False,
    batch_size: int = DEFAULT_GREEDY_BATCH,
    return_indices: bool = False,
) -> Tensor | tuple[Tensor, Tensor]:
    """Landmarks by the innovation (approximate linear dependence) rule, in one pass.

    Streams over the rows in order and accepts ``x`` when its innovation, the squared
    feature-space distance to the span of the landmarks accepted so far,
    ``delta(x) = k(x, x) - k_x^T K_Z^-1 k_x``, exceeds ``eta`` (or ``eta * k(x, x)``
    when ``relative``, a scale-free test of the angle to the span; for kernels with
    ``k(x, x) = 1`` such as the Gaussian the two agree). A point already in the span
    (a duplicate, or a linear combination for the linear kernel) has ``delta = 0`` and is
    never accepted. ``K_Z`` is held as a Cholesky factor grown by one row per
    acceptance; kernels and the factor are evaluated in float64. The result depends on
    the order of the rows: shuffle the data (or the ``DataLoader``) for a
    representative set; it stops as soon as ``max_landmarks`` are accepted. A small
    ``eta`` with ``max_landmarks`` keeps the first non-redundant rows (close to random
    selection); a selective rule needs ``eta`` near the innovation of a typical row.

    Each batch's innovations come from one triangular solve against the factor, then
    are downdated after each acceptance within the batch, which makes the same
    decisions as the one-by-one rule: cost ``O(N n^2 + N n D)`` for ``n`` landmarks,
    memory ``O(n^2 + B n)``.

    Args:
        data (Tensor[N, D] | Iterable): a tensor, or an iterable of batches
            ``Tensor[B, D]`` or ``(Tensor[B, D], ...)`` tuples (e.g. a ``DataLoader``
            yielding ``x`` or ``(x, y)``); only the first element of a tuple is used.
        kernel: a registered kernel name, a :class:`~kernel_layers.kernels.Kernel`, or
            a callable ``k(X, Z) -> Tensor[B, n]`` (as for
            :class:`~kernel_layers.NystromLayer`).
        gamma: kernel parameter ``> 0``.
        kernel_params: further kernel parameters by name (see
            :class:`~kernel_layers.NystromLayer`).
        eta: innovation threshold ``> 0``.
        max_landmarks: stop after this many landmarks (``None``: no limit).
        relative: compare ``delta(x)`` with ``eta * k(x, x)`` instead of ``eta``.
        batch_size: rows per batch when ``data`` is a tensor.
        return_indices: also return the positions of the accepted rows in the stream.

    Returns:
        Tensor[n, D] | tuple[Tensor[n, D], Tensor[n]]: the accepted rows, in the data's
        dtype and on its device (``n`` may be 0), and, if asked, their ``int64`` positions
        in the stream (on the CPU).
    """
    owner = "greedy_landmarks"
    spec = get_kernel(kernel, owner=owner).bind(kernel_params, owner=owner)
    gamma = check_positive(owner, "gamma", gamma)
    eta = check_positive(owner, "eta", eta)
    if max_landmarks is not None:
        max_landmarks = check_int(owner, "max_landmarks", max_landmarks)
    batch_size = check_int(owner, "batch_size", batch_size)
    if isinstance(data, Tensor):
        check_matrix(owner, "data", data, max_abs=data_limit(data), why=DISTANCE_OVERFLOW)
    elif not isinstance(data, Iterable):
        raise TypeError(
            f"{owner}: argument 'data' must be a torch.Tensor or an iterable of batches, "
            f"got {type(data).__name__}"
        )
    state: _GreedyState | None = None
    rows: list[Tensor] = []
    positions: list[int] = []
    offset = 0
    width = dtype = device = None
    with torch.no_grad():
        for batch in _batches(data, batch_size):
            check_matrix(
                owner, "data", batch, width=width, max_abs=data_limit(batch), why=DISTANCE_OVERFLOW
            )
            if state is None:
                width, dtype, device = batch.shape[1], batch.dtype, batch.device
                capacity = max_landmarks or DEFAULT_GREEDY_BATCH
                state = _GreedyState(width, min(capacity, DEFAULT_GREEDY_BATCH), batch.device)
            accepted = _greedy_batch(
                state, batch.to(GREEDY_DTYPE), spec, gamma, eta, relative, max_landmarks
            )
            if accepted:
                rows.append(batch[torch.tensor(accepted, device=batch.device)].to(dtype))
                positions.extend(offset + i for i in accepted)
            offset += batch.shape[0]
            if max_landmarks is not None and state.size >= max_landmarks:
                break
    if state is None:
        raise ValueError(f"{owner}: argument 'data' must hold at least one batch, got none")
    assert width is not None  # set by the first batch, which exists (state is not None)
    landmarks = torch.cat(rows) if rows else torch.empty(0, width, dtype=dtype, device=device)
    if return_indices:
        return landmarks.detach(), torch.tensor(positions, dtype=torch.long)
    return landmarks.detach()
