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

The steps and their clock are in ``di_step_ops.py``, the memory measurement in
``di_step_memory.py``; this script is the command line and the tables.

Usage::

    python benchmarks/di_step.py                       # the three sizes of the bar, CPU
    python benchmarks/di_step.py --device cuda --dtype float32 float64
    python benchmarks/di_step.py --no-throughput --no-memory-scaling   # first table only
    python benchmarks/di_step.py --host-memory default   # glibc's allocator defaults
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from collections.abc import Callable

import torch
from di_step_memory import memory_scaling_table, peak_memory
from di_step_ops import (
    GAMMA,
    JITTER32,
    NUM_CLASSES,
    SIZES,
    make_steps,
    median_ratio,
    time_interleaved,
)

from kernel_layers import (
    FourierLayer,
    NystromLayer,
    discriminant_information,
    nystrom_discriminant_information,
)
from kernel_layers.cli.allocator import keep_freed_host_memory


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
                    "ratio": median_ratio(t["ours"], t["floor"]),
                    "naive_ratio": median_ratio(t["naive"], t["floor"]) if "naive" in t else nan,
                    "floor64_ms": 1e3 * med.get("floor64", nan),
                    "floor64_ratio": (
                        median_ratio(t["floor64"], t["floor"]) if "floor64" in t else nan
                    ),
                    "ours_floor64_ratio": (
                        median_ratio(t["ours"], t["floor64"]) if "floor64" in t else nan
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
