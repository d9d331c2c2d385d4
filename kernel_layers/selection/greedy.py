"""Greedy landmark selection by the innovation (approximate linear dependence) rule.

:func:`greedy_landmarks` follows Engel, Mannor and Meir ("The kernel recursive
least-squares algorithm", 2004): stream over the data and accept ``x`` as a landmark
when its squared distance, in feature space, to the span of the landmarks so far
exceeds ``eta``::

    delta(x) = k(x, x) - k_x^T K_Z^-1 k_x > eta,   k_x = k(Z, x).

``K_Z = L L^T`` is kept as a Cholesky factor grown by one row per accepted point
(``l = L^-1 k_x``, new diagonal ``sqrt(delta(x))``), so no inverse is formed; every
diagonal entry of ``L`` exceeds ``sqrt(eta)``, which bounds ``K_Z``'s conditioning.
Runs on the device of the data, usable on its own or through
:meth:`~kernel_layers.NystromLayer.from_data` (``init="greedy"``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

import torch
from torch import Tensor

from kernel_layers._validation import check_bool, check_int, check_matrix, check_positive
from kernel_layers.kernels import Kernel, get_kernel
from kernel_layers.numerics.precision import DISTANCE_OVERFLOW, data_limit

__all__ = ["DEFAULT_ETA", "DEFAULT_GREEDY_BATCH", "greedy_landmarks"]

#: Default innovation threshold of :func:`greedy_landmarks`.
DEFAULT_ETA = 1e-3
#: Rows per batch when :func:`greedy_landmarks` streams over a tensor.
DEFAULT_GREEDY_BATCH = 1024
#: Rows per block when the kernel's diagonal is evaluated block by block.
DIAGONAL_BLOCK = 64
#: dtype of the greedy rule's kernel evaluations and Cholesky factor.
GREEDY_DTYPE = torch.float64


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
    relative = check_bool(owner, "relative", relative)
    return_indices = check_bool(owner, "return_indices", return_indices)
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
            if batch.shape[0] == 0:
                continue  # an empty batch offers no row
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
        raise ValueError(f"{owner}: argument 'data' must hold at least one row, got none")
    assert width is not None  # set by the first batch, which exists (state is not None)
    landmarks = torch.cat(rows) if rows else torch.empty(0, width, dtype=dtype, device=device)
    if return_indices:
        return landmarks.detach(), torch.tensor(positions, dtype=torch.long)
    return landmarks.detach()
