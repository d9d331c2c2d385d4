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
* ``floor64`` (Nystrom only): the float64 work NysDI's precision rule requires, timed the
  same way: the float64 Gram (:func:`~kernel_layers.numerics.linalg.gram_matrix`) of
  ``[G_c, Y_c]`` (``B x (J + L)``), the float64 Cholesky factorisation of order ``J``,
  and the kernel products ``X Z^T``, ``Z Z^T``, ``dH^T X``, ``dK Z`` in the dtype
  :func:`~kernel_layers.numerics.precision.kernel_dtype` picks (float64 for narrow inputs such as
  CovType's 54 columns). ``floor64 / floor`` is the part of ``ours / floor`` that no
  implementation keeping the precision can remove; ``ours / floor64`` is what is left.

measured round-robin (``--repeats`` rounds), and prints the median per-round ratios
``ours / floor`` and ``naive / floor`` with the peak memory of the step
(CUDA: ``max_memory_allocated``; CPU: peak RSS growth of a fresh subprocess).

Two more tables follow in the same run (skip them with ``--no-throughput`` /
``--no-memory-scaling``):

* **feature-map throughput** at the same ``(B, d, J)``: our layers' forward pass (no
  gradient; the Nystrom forward includes its ``K_Z`` Cholesky factorisation) against
  scikit-learn's ``Nystroem(n_components=J).fit_transform`` (landmark draw, ``K_Z`` SVD and
  transform) and ``RBFSampler(n_components=J).fit_transform`` on the same ``B x d``
  float32 data, in rows per second, timed round-robin.
* **float32 vs float64**: DI and its gradient (to the frequencies / landmarks) on the
  same data and parameters in both dtypes, relative differences (the GPU bar: DI within
  1e-4 relative of float64 at ``(4000, 784, 2000)``).
* **memory scaling**: the peak memory of one DI step for ``J`` in ``--scaling-dims``
  with ``B = 2J`` and ``d = 784``, against ``(B J + J^2) x itemsize`` and their ratio
  (constant when the peak follows ``B J + J^2``).

Usage::

    python benchmarks/di_step.py                       # the three sizes of the bar, CPU
    python benchmarks/di_step.py --device cuda --dtype float32 float64
    python benchmarks/di_step.py --no-throughput --no-memory-scaling   # first table only
    python benchmarks/di_step.py --host-memory default   # glibc's allocator defaults
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch

from kernel_layers import (
    FourierLayer,
    NystromLayer,
    discriminant_information,
    nystrom_discriminant_information,
)
from kernel_layers.cli.allocator import keep_freed_host_memory
from kernel_layers.layers.nystrom import default_jitter
from kernel_layers.numerics.linalg import gram_matrix
from kernel_layers.numerics.precision import SOLVE_DTYPE, kernel_dtype

SIZES = [(1000, 54, 500), (2000, 784, 1000), (4000, 784, 2000)]
NUM_CLASSES = 10
GAMMA = 0.01
#: Relative jitter of K_Z in both dtypes of the agreement table (float32's default).
JITTER32 = default_jitter(torch.float32)
#: glibc mmap threshold (bytes) of the memory-scaling subprocesses (see :func:`peak_memory`).
MMAP_THRESHOLD = 1 << 17


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
            _naive_di(fourier(x), y, eye).backward()

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
            _naive_di(g, y, 1e-4 * k).backward()

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


def real_data(root: str | None, data_home: str | None) -> dict[int, tuple[torch.Tensor, ...]]:
    """Scaled training rows and labels by width: MNIST (784) and CovType (54), when given."""
    from kernel_layers.data import CovTypeDataModule, MNISTDataModule

    found: dict[int, tuple[torch.Tensor, ...]] = {}
    modules = []
    if root:
        modules.append(MNISTDataModule(root, download=False, val_fraction=0.0))
    if data_home:
        modules.append(CovTypeDataModule(data_home, download=False, val_fraction=0.0))
    for dm in modules:
        dm.setup()
        x = dm.train_features()
        found[x[0].numel()] = (x.reshape(len(x), -1).double(), dm.train_targets(), dm.num_classes)
    return found


def agreement(
    layer: str,
    b: int,
    d: int,
    j: int,
    device: torch.device,
    data: tuple[torch.Tensor, ...] | None = None,
) -> dict[str, float]:
    """DI and its gradient in float32 against float64 on the same data and parameters
    (for Nystrom, the same jitter: the float32 layer's default).

    ``data``: ``(x, labels, classes)`` of a real data set of width ``d`` (``b`` rows
    drawn with a fixed seed, landmarks ``j`` further rows); default uniform noise.

    Returns ``di64``, ``di32``, ``rel_di = |di32 - di64| / |di64|`` and ``rel_grad`` =
    ``max |g32 - g64| / max |g64|`` (gradient to the frequencies or the landmarks).
    """
    gen = torch.Generator().manual_seed(0)
    classes = NUM_CLASSES
    if data is None:
        x64 = torch.rand(b, d, generator=gen, dtype=torch.float64).to(device)
        labels = torch.randint(0, NUM_CLASSES, (b,), generator=gen).to(device)
        landmarks64 = x64[:j]  # landmarks: rows of the batch
    else:
        rows = torch.randperm(len(data[0]), generator=gen)[: b + j]
        x64, labels, classes = data[0][rows[:b]], data[1][rows[:b]], data[2]
        x64, labels, landmarks64 = x64.to(device), labels.to(device), data[0][rows[b:]].to(device)
    out: dict[str, tuple[float, torch.Tensor]] = {}
    for dtype in (torch.float64, torch.float32):
        x = x64.to(dtype)
        if layer == "fourier":
            fourier = FourierLayer(d, j, gamma=GAMMA, seed=0, device=device, dtype=torch.float64)
            fourier = fourier.to(dtype)
            di = discriminant_information(fourier(x), labels, num_classes=classes)
            (grad,) = torch.autograd.grad(di, fourier.frequencies)
        else:
            z = landmarks64.to(dtype).clone().requires_grad_(True)
            # The same model in both dtypes: the float32 layer's default jitter.
            di = nystrom_discriminant_information(
                x, labels, z, gamma=GAMMA, num_classes=classes, jitter=JITTER32
            )
            (grad,) = torch.autograd.grad(di, z)
        out[str(dtype)] = (float(di.detach()), grad.double())
    (di64, g64), (di32, g32) = out["torch.float64"], out["torch.float32"]
    return {
        "di64": di64,
        "di32": di32,
        "rel_di": abs(di32 - di64) / abs(di64),
        "rel_grad": float((g32 - g64).abs().max() / g64.abs().max()),
    }


def agreement_table(
    sizes: list[tuple[int, int, int]],
    layers: list[str],
    device: torch.device,
    data: dict[int, tuple[torch.Tensor, ...]] | None = None,
) -> list[dict[str, float]]:
    """Print and return float32-vs-float64 DI agreement for every layer and size, on
    uniform noise and on each real data set of the size's width."""
    print(
        "\n| layer | data | B | d | J | DI float64 | DI float32 | rel. DI diff | rel. grad diff |"
    )
    print("|---" * 9 + "|")
    rows = []
    names = {784: "MNIST", 54: "CovType"}
    for layer in layers:
        for b, d, j in sizes:
            sources = {"uniform": None}
            if data and d in data:
                sources[names.get(d, f"d={d}")] = data[d]
            for name, source in sources.items():
                res = agreement(layer, b, d, j, device, source)
                row = {"layer": layer, "data": name, "B": b, "d": d, "J": j, **res}
                rows.append(row)
                print(
                    f"| {layer} | {name} | {b} | {d} | {j} | {row['di64']:.6f} | "
                    f"{row['di32']:.6f} | {row['rel_di']:.1e} | {row['rel_grad']:.1e} |",
                    flush=True,
                )
    return rows


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


def peak_memory(
    layer: str,
    b: int,
    d: int,
    j: int,
    device: str,
    dtype: str,
    *,
    mmap_threshold: int | None = None,
) -> float:
    """:func:`measure_peak` in a fresh subprocess (so earlier runs do not pollute it).

    ``mmap_threshold`` (bytes) fixes glibc's ``MALLOC_MMAP_THRESHOLD_`` in the subprocess, so
    every larger buffer is mapped on allocation and unmapped on release: the resident-set
    high-water mark then sees each step's buffers even when a warm-up step freed same-sized
    ones (glibc's default dynamic threshold keeps such blocks resident and reuses them).
    """
    env = dict(os.environ)
    if mmap_threshold is not None:
        env["MALLOC_MMAP_THRESHOLD_"] = str(mmap_threshold)
    # This file's own folder, not the working directory's `benchmarks/`: the script runs
    # from any directory.
    here = str(Path(__file__).resolve().parent)
    code = (
        f"import sys; sys.path.insert(0, {here!r}); from di_step import measure_peak;"
        f"print(measure_peak('{layer}', {b}, {d}, {j}, '{device}', '{dtype}'))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env
    )
    return float(out.stdout.strip().splitlines()[-1])


def make_maps(
    b: int, d: int, j: int, device: torch.device, dtype: torch.dtype
) -> dict[str, Callable[[], object]]:
    """Feature-map closures on the same ``B x d`` data: ours (forward) vs scikit-learn."""
    from sklearn.kernel_approximation import Nystroem, RBFSampler

    gen = torch.Generator().manual_seed(0)
    x = torch.rand(b, d, generator=gen).to(device, dtype)
    x_np = x.cpu().numpy()
    fourier = FourierLayer(d, j, gamma=GAMMA, seed=0, device=device, dtype=dtype)
    nystrom = NystromLayer(d, j, gamma=GAMMA, landmarks=x[:j].clone(), device=device, dtype=dtype)

    @torch.no_grad()
    def ours_fourier() -> None:
        fourier(x)

    @torch.no_grad()
    def ours_nystrom() -> None:
        nystrom(x)

    def sk_nystroem() -> None:
        Nystroem(gamma=GAMMA, n_components=j, random_state=0).fit_transform(x_np)

    def sk_rbf() -> None:
        RBFSampler(gamma=GAMMA, n_components=j, random_state=0).fit_transform(x_np)

    return {
        "fourier": ours_fourier,
        "rbfsampler": sk_rbf,
        "nystrom": ours_nystrom,
        "nystroem": sk_nystroem,
    }


def throughput_table(
    sizes: list[tuple[int, int, int]], device: torch.device, dtype: torch.dtype, repeats: int
) -> list[dict[str, float]]:
    """Print and return the feature-map throughput table (ours vs scikit-learn)."""
    print(
        "\n| B | d | J | FourierLayer ms | RBFSampler ms | NystromLayer ms | Nystroem ms | "
        "Fourier rows/s | RBFSampler rows/s | Nystrom rows/s | Nystroem rows/s |"
    )
    print("|---" * 11 + "|")
    rows = []
    for b, d, j in sizes:
        t = time_interleaved(make_maps(b, d, j, device, dtype), device, repeats)
        ms = {k: 1e3 * statistics.median(v) for k, v in t.items()}
        rate = {k: b / (v / 1e3) for k, v in ms.items()}
        rows.append({"B": b, "d": d, "J": j, **{f"{k}_ms": v for k, v in ms.items()}})
        print(
            f"| {b} | {d} | {j} | {ms['fourier']:.1f} | {ms['rbfsampler']:.1f} | "
            f"{ms['nystrom']:.1f} | {ms['nystroem']:.1f} | {rate['fourier']:.3g} | "
            f"{rate['rbfsampler']:.3g} | {rate['nystrom']:.3g} | {rate['nystroem']:.3g} |",
            flush=True,
        )
    return rows


def memory_scaling_table(
    dims: list[int], layers: list[str], device: str, dtype_name: str, d: int = 784
) -> list[dict[str, float]]:
    """Print and return peak memory of one DI step for ``B = 2J`` vs ``B J + J^2``."""
    itemsize = getattr(torch, dtype_name).itemsize
    print(
        "\n| layer | B | d | J | peak MiB | (BJ+J^2) x itemsize MiB | peak / (BJ+J^2) | "
        "growth vs previous J | (BJ+J^2) growth |"
    )
    print("|---" * 9 + "|")
    rows = []
    for layer in layers:
        prev = None
        for j in dims:
            b = 2 * j
            peak = peak_memory(layer, b, d, j, device, dtype_name, mmap_threshold=MMAP_THRESHOLD)
            theory = (b * j + j * j) * itemsize / 2**20
            growth = f"{peak / prev[0]:.2f}x" if prev and prev[0] > 0 else "-"
            tgrowth = f"{theory / prev[1]:.2f}x" if prev else "-"
            prev = (peak, theory)
            rows.append({"layer": layer, "B": b, "d": d, "J": j, "peak_mib": peak})
            print(
                f"| {layer} | {b} | {d} | {j} | {peak:.0f} | {theory:.1f} | "
                f"{peak / theory:.2f} | {growth} | {tgrowth} |",
                flush=True,
            )
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--root", default=None, help="MNIST IDX folder: agreement on MNIST")
    parser.add_argument(
        "--data-home", default=None, help="CovType folder: agreement on CovType rows"
    )
    parser.add_argument("--dtype", nargs="+", default=["float32"])
    parser.add_argument("--layers", nargs="+", default=["fourier", "nystrom"])
    parser.add_argument("--sizes", nargs="+", default=None, help="B,d,J triples, e.g. 1000,54,500")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--no-naive", action="store_true", help="skip the plain-autograd step")
    parser.add_argument("--no-memory", action="store_true", help="skip the memory subprocesses")
    parser.add_argument("--json", default=None, help="also write the rows to this JSON file")
    parser.add_argument(
        "--no-throughput", action="store_true", help="skip the ours-vs-scikit-learn map table"
    )
    parser.add_argument(
        "--no-agreement", action="store_true", help="skip the float32-vs-float64 DI table"
    )
    parser.add_argument(
        "--no-memory-scaling", action="store_true", help="skip the B = 2J memory table"
    )
    parser.add_argument(
        "--scaling-dims",
        nargs="+",
        type=int,
        default=[500, 1000, 2000, 3000],
        help="J values of the memory-scaling table (B = 2J, d = 784)",
    )
    parser.add_argument(
        "--host-memory",
        choices=["keep", "default"],
        default="keep",
        help="keep: freed host memory is reused (keep_freed_host_memory, as kernel-layers "
        "does); default: glibc's defaults",
    )
    args = parser.parse_args(argv)
    if args.host_memory == "keep":
        keep_freed_host_memory()
    sizes = [tuple(int(v) for v in s.split(",")) for s in args.sizes] if args.sizes else SIZES
    device = torch.device(args.device)
    print(
        f"# torch {torch.__version__}, {device}, threads {torch.get_num_threads()}, "
        f"host memory {args.host_memory}, "
        f"{platform.processor() or platform.machine()}, {time.strftime('%Y-%m-%d')}"
    )
    header = (
        "| layer | dtype | B | d | J | ours ms | floor ms | naive ms | ours/floor | "
        "naive/floor | floor64/floor | ours/floor64 | peak MiB | "
        "(BJ+J^2) x itemsize MiB |"
    )
    print(header)
    print("|---" * 14 + "|")
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
                    "floor64_ms": 1e3 * med.get("floor64", nan),
                    "floor64_ratio": (
                        _median_ratio(t["floor64"], t["floor"]) if "floor64" in t else nan
                    ),
                    "ours_floor64_ratio": (
                        _median_ratio(t["ours"], t["floor64"]) if "floor64" in t else nan
                    ),
                    "peak_mib": mem,
                    "theory_mib": theory,
                }
                rows.append(row)
                print(
                    f"| {layer} | {dtype_name} | {b} | {d} | {j} | {row['ours_ms']:.1f} | "
                    f"{row['floor_ms']:.1f} | {row['naive_ms']:.1f} | {row['ratio']:.2f} | "
                    f"{row['naive_ratio']:.2f} | {row['floor64_ratio']:.2f} | "
                    f"{row['ours_floor64_ratio']:.2f} | "
                    f"{mem:.0f} | {theory:.0f} |",
                    flush=True,
                )
    extra: dict[str, list[dict[str, float]]] = {}
    if not args.no_agreement:
        data = real_data(args.root, args.data_home)
        extra["agreement"] = agreement_table(sizes, args.layers, device, data)
    if not args.no_throughput:
        extra["throughput"] = throughput_table(
            sizes, device, getattr(torch, args.dtype[0]), args.repeats
        )
    if not args.no_memory_scaling:
        extra["memory_scaling"] = memory_scaling_table(
            args.scaling_dims, args.layers, args.device, args.dtype[0]
        )
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"steps": rows, **extra} if extra else rows, fh, indent=1)


if __name__ == "__main__":
    main()
