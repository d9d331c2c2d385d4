"""Time one DI training step (forward + backward) against the matrix products it cannot avoid.

For each layer and size ``(B, d, J)`` the script times, in the same process and run:

* ``ours``: the library's step. Fourier: ``DI(FourierLayer(x), y)`` backward to the
  frequencies and phases. Nystrom: ``NysDI(x, y, Z)`` (eq. 10) backward to the landmarks.
* ``floor``: the dense products the step cannot avoid, timed back to back.
  Fourier: ``X W`` ``[B,d]x[d,J]``, ``Phi^T Phi`` ``[J,B]x[B,J]``, ``X^T dH``
  ``[d,B]x[B,J]``. Nystrom: ``X Z^T``, ``G^T G``, ``dH^T X`` and the landmark
  products ``Z Z^T``, ``dK Z`` that eq. 10 needs for ``K_Z``.
* ``naive``: the same formula written with plain autograd (``torch.linalg.solve``), whose
  backward needs extra ``B x J x J`` products.

measured round-robin (``--repeats`` rounds), and prints the median per-round ratios
``ours / floor`` and ``naive / floor`` with the peak memory of the step
(CUDA: ``max_memory_allocated``; CPU: peak RSS growth of a fresh subprocess).

Usage::

    python benchmarks/di_step.py                       # the three sizes of the issue, CPU
    python benchmarks/di_step.py --device cuda --dtype float32 float64
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable

import torch

from kernel_layers import FourierLayer, discriminant_information, nystrom_discriminant_information

SIZES = [(1000, 54, 500), (2000, 784, 1000), (4000, 784, 2000)]
NUM_CLASSES = 10
GAMMA = 0.01


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _time_once(fn: Callable[[], object], device: torch.device) -> float:
    _sync(device)
    start = time.perf_counter()
    fn()
    _sync(device)
    return time.perf_counter() - start


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


def _median_ratio(num: list[float], den: list[float]) -> float:
    return statistics.median(n / d for n, d in zip(num, den, strict=True))


def _naive_di(phi: torch.Tensor, y: torch.Tensor, ridge: torch.Tensor) -> torch.Tensor:
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
    """Return ``{"ours", "floor", "naive"}`` closures for one configuration.

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
    if layer == "fourier":
        fourier = FourierLayer(d, j, gamma=GAMMA, seed=0, device=device, dtype=dtype)

        def ours() -> None:
            fourier.zero_grad(set_to_none=True)
            discriminant_information(fourier(x), labels, num_classes=NUM_CLASSES).backward()

        def naive() -> None:
            fourier.zero_grad(set_to_none=True)
            eye = torch.eye(j, device=device, dtype=dtype) * 1e-4
            _naive_di(fourier(x), y, eye).backward()

        def floor() -> None:
            torch.mm(x, w)
            torch.mm(big.T, big)
            torch.mm(x.T, big)

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
            _naive_di(g, y, 1e-4 * k).backward()

        def floor() -> None:
            torch.mm(x, w)  # X Z^T
            torch.mm(big.T, big)  # G^T G
            torch.mm(big.T, x)  # dH^T X
            torch.mm(w.T, w)  # Z Z^T
            torch.mm(small, w.T)  # dK Z

    return {"ours": ours, "floor": floor, "naive": naive}


def _status_kib(field: str) -> int:
    """A ``/proc/self/status`` field (``VmRSS``, ``VmHWM``) in KiB."""
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise KeyError(field)


def measure_peak(layer: str, b: int, d: int, j: int, device: str, dtype: str) -> float:
    """Peak extra memory (MiB) of one ``ours`` step in this process.

    CUDA: ``max_memory_allocated`` growth. CPU: the resident-set high-water mark
    (``VmHWM``, reset through ``/proc/self/clear_refs``) above the resident set before
    the step, after one warm-up step.
    """
    dev = torch.device(device)
    steps = make_steps(layer, b, d, j, dev, getattr(torch, dtype), floor_operands=False)
    steps["ours"]()
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)
        torch.cuda.reset_peak_memory_stats(dev)
        base = torch.cuda.memory_allocated(dev)
        steps["ours"]()
        torch.cuda.synchronize(dev)
        return (torch.cuda.max_memory_allocated(dev) - base) / 2**20
    with open("/proc/self/clear_refs", "w") as fh:
        fh.write("5")
    base = _status_kib("VmRSS")
    steps["ours"]()
    return (_status_kib("VmHWM") - base) / 1024


def peak_memory(layer: str, b: int, d: int, j: int, device: str, dtype: str) -> float:
    """:func:`measure_peak` in a fresh subprocess (so earlier runs do not pollute it)."""
    code = (
        "import sys; sys.path.insert(0, 'benchmarks'); from di_step import measure_peak;"
        f"print(measure_peak('{layer}', {b}, {d}, {j}, '{device}', '{dtype}'))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return float(out.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", nargs="+", default=["float32"])
    parser.add_argument("--layers", nargs="+", default=["fourier", "nystrom"])
    parser.add_argument("--sizes", nargs="+", default=None, help="B,d,J triples, e.g. 1000,54,500")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--no-naive", action="store_true", help="skip the plain-autograd step")
    parser.add_argument("--no-memory", action="store_true", help="skip the memory subprocesses")
    parser.add_argument("--json", default=None, help="also write the rows to this JSON file")
    args = parser.parse_args(argv)
    sizes = [tuple(int(v) for v in s.split(",")) for s in args.sizes] if args.sizes else SIZES
    device = torch.device(args.device)
    print(
        f"# torch {torch.__version__}, {device}, threads {torch.get_num_threads()}, "
        f"{platform.processor() or platform.machine()}, {time.strftime('%Y-%m-%d')}"
    )
    header = (
        "| layer | dtype | B | d | J | ours ms | floor ms | naive ms | ours/floor | "
        "naive/floor | peak MiB | (BJ+J^2) x itemsize MiB |"
    )
    print(header)
    print("|---" * 12 + "|")
    rows = []
    for dtype_name in args.dtype:
        dtype = getattr(torch, dtype_name)
        for layer in args.layers:
            for b, d, j in sizes:
                steps = make_steps(layer, b, d, j, device, dtype)
                if args.no_naive:
                    steps.pop("naive")
                t = time_interleaved(steps, device, args.repeats)
                mem = (
                    float("nan")
                    if args.no_memory
                    else peak_memory(layer, b, d, j, args.device, dtype_name)
                )
                theory = (b * j + j * j) * dtype.itemsize / 2**20
                med = {k: statistics.median(v) for k, v in t.items()}
                nan = float("nan")
                row = {
                    "layer": layer,
                    "dtype": dtype_name,
                    "B": b,
                    "d": d,
                    "J": j,
                    "ours_ms": 1e3 * med["ours"],
                    "floor_ms": 1e3 * med["floor"],
                    "naive_ms": 1e3 * med.get("naive", nan),
                    "ratio": _median_ratio(t["ours"], t["floor"]),
                    "naive_ratio": _median_ratio(t["naive"], t["floor"]) if "naive" in t else nan,
                    "peak_mib": mem,
                    "theory_mib": theory,
                }
                rows.append(row)
                print(
                    f"| {layer} | {dtype_name} | {b} | {d} | {j} | {row['ours_ms']:.1f} | "
                    f"{row['floor_ms']:.1f} | {row['naive_ms']:.1f} | {row['ratio']:.2f} | "
                    f"{row['naive_ratio']:.2f} | {mem:.0f} | {theory:.0f} |",
                    flush=True,
                )
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(rows, fh, indent=1)


if __name__ == "__main__":
    main()
