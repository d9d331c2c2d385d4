"""The DI step that ``di_step.py`` times, and its clock: the library's step, the matrix
products it cannot avoid (``floor``, ``floor64``) and the same formula in plain autograd
(``naive``) for each layer and size ``(B, d, J)``, timed round-robin in one process."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import torch

from kernel_layers import (
    FourierLayer,
    discriminant_information,
    nystrom_discriminant_information,
)
from kernel_layers.layers.nystrom import default_jitter
from kernel_layers.numerics.linalg import gram_matrix
from kernel_layers.numerics.precision import SOLVE_DTYPE, kernel_dtype

SIZES = [(1000, 54, 500), (2000, 784, 1000), (4000, 784, 2000)]
NUM_CLASSES = 10
GAMMA = 0.01
#: Relative jitter of K_Z in both dtypes of the agreement table (float32's default).
JITTER32 = default_jitter(torch.float32)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _time_once(fn: Callable[[], object], device: torch.device) -> float:
    """Seconds of one call: CUDA events on a GPU (device time, no host clock), else the
    host's ``perf_counter``."""
    if device.type == "cuda":
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / 1e3
    start_s = time.perf_counter()
    fn()
    return time.perf_counter() - start_s


def time_interleaved(
    steps: dict[str, Callable[[], object]], device: torch.device, repeats: int
) -> dict[str, list[float]]:
    """Wall times (s) of each step, measured round-robin after one warm-up call each.

    Interleaving exposes every step to the same background load, so per-round ratios
    are more stable than ratios of separately measured medians.
    """
    for fn in steps.values():
        fn()
    times: dict[str, list[float]] = {name: [] for name in steps}
    for _ in range(repeats):
        for name, fn in steps.items():
            times[name].append(_time_once(fn, device))
    return times


def median_ratio(num: list[float], den: list[float]) -> float:
    """The median of the per-round ratios ``num[i] / den[i]`` (times of one round)."""
    return statistics.median(n / d for n, d in zip(num, den, strict=True))


def naive_di(phi: torch.Tensor, y: torch.Tensor, ridge: torch.Tensor) -> torch.Tensor:
    """DI with plain autograd: ``tr(M^T (Phi_c^T Phi_c + R)^-1 M)``."""
    pc, yc = phi - phi.mean(0), y - y.mean(0)
    m = pc.T @ yc
    return (m * torch.linalg.solve(pc.T @ pc + ridge, m)).sum()


def make_steps(
    layer: str,
    b: int,
    d: int,
    j: int,
    device: torch.device,
    dtype: torch.dtype,
    *,
    floor_operands: bool = True,
):
    """Return ``{"ours", "floor", "naive"}`` closures for one configuration, with
    ``"floor64"`` for Nystrom.

    ``floor_operands=False`` skips allocating the floor's operands (for memory runs).
    """
    gen = torch.Generator().manual_seed(0)
    x = torch.rand(b, d, generator=gen).to(device, dtype)
    labels = torch.randint(0, NUM_CLASSES, (b,), generator=gen).to(device)
    y = torch.nn.functional.one_hot(labels, NUM_CLASSES).to(dtype)
    y = y / y.sum(0).clamp_min(1).sqrt()
    if floor_operands:
        w = torch.randn(d, j, generator=gen).to(device, dtype)
        big = torch.randn(b, j, generator=gen).to(device, dtype)
        small = torch.randn(j, j, generator=gen).to(device, dtype)
        wide = kernel_dtype(dtype, d, j)
        x_k, w_k, big_k, small_k = (t.to(wide) for t in (x, w, big, small))
        joint = torch.randn(b, j + NUM_CLASSES, generator=gen, dtype=SOLVE_DTYPE).to(device)
        spd = torch.randn(j, 2 * j, generator=gen, dtype=SOLVE_DTYPE).to(device)
        spd = spd @ spd.T  # a positive definite matrix of order J to factorise
    if layer == "fourier":
        fourier = FourierLayer(d, j, gamma=GAMMA, seed=0, device=device, dtype=dtype)

        def ours() -> None:
            fourier.zero_grad(set_to_none=True)
            discriminant_information(fourier(x), labels, num_classes=NUM_CLASSES).backward()

        def naive() -> None:
            fourier.zero_grad(set_to_none=True)
            eye = torch.eye(j, device=device, dtype=dtype) * 1e-4
            naive_di(fourier(x), y, eye).backward()

        def floor() -> None:
            torch.mm(x, w)
            torch.mm(big.T, big)
            torch.mm(x.T, big)

        steps: dict[str, Callable[[], None]] = {"ours": ours, "floor": floor, "naive": naive}
    else:
        z = x[:j].clone().requires_grad_(True)

        def ours() -> None:
            z.grad = None
            nystrom_discriminant_information(
                x, labels, z, gamma=GAMMA, num_classes=NUM_CLASSES
            ).backward()

        def naive() -> None:
            z.grad = None
            g = torch.exp(-GAMMA * torch.cdist(x, z).square())
            k = torch.exp(-GAMMA * torch.cdist(z, z).square())
            k = k + 1e-6 * torch.eye(j, device=device, dtype=dtype)
            naive_di(g, y, 1e-4 * k).backward()

        def floor() -> None:
            torch.mm(x, w)  # X Z^T
            torch.mm(big.T, big)  # G^T G
            torch.mm(big.T, x)  # dH^T X
            torch.mm(w.T, w)  # Z Z^T
            torch.mm(small, w.T)  # dK Z

        def floor64() -> None:
            torch.mm(x_k, w_k)  # X Z^T in the kernel dtype
            gram_matrix(joint)  # [G_c, Y_c]^T [G_c, Y_c], float64
            torch.linalg.cholesky_ex(spd)  # of G^T C G + rho K_Z, float64
            torch.mm(big_k.T, x_k)  # dH^T X
            torch.mm(w_k.T, w_k)  # Z Z^T
            torch.mm(small_k, w_k.T)  # dK Z

        steps = {"ours": ours, "floor": floor, "naive": naive, "floor64": floor64}
    return steps
