"""The DI step of two source trees of kernel-layers, timed side by side.

Each tree runs in its own worker process (``PYTHONPATH`` set to the tree, one PyTorch
thread, pinned to one core where ``taskset`` exists); the workers time the layer's
``discriminant_information(x, y)`` forward + backward in alternating rounds, so slow
drifts of the machine hit both alike. Reports the median step of each tree and the
median of the per-round ratios ``B / A`` at the sizes of ``di_step.py``.

Usage::

    python benchmarks/compare_trees.py OLD_TREE NEW_TREE --rounds 5 --json out.json
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time

SIZES = ((1000, 54, 500), (2000, 784, 1000), (4000, 784, 2000))
LAYERS = ("fourier", "nystrom")


def worker(sizes: tuple[tuple[int, int, int], ...]) -> None:
    """Serve timing requests ``LAYER B D J REPEATS`` from stdin, one median (ms) a line."""
    import torch

    import kernel_layers as kl

    torch.set_num_threads(1)
    cases = {}
    for b, d, j in sizes:
        gen = torch.Generator().manual_seed(0)
        x, y = torch.rand(b, d, generator=gen), torch.randint(0, 10, (b,), generator=gen)
        cases["nystrom", b, d, j] = (kl.NystromLayer(d, j, gamma=1 / d, landmarks=x[:j]), x, y)
        cases["fourier", b, d, j] = (kl.FourierLayer(d, j, gamma=1 / d, seed=0), x, y)

    def step(layer: torch.nn.Module, x: torch.Tensor, y: torch.Tensor) -> None:
        layer.zero_grad(set_to_none=True)
        layer.discriminant_information(x, y, rho=1e-4, num_classes=10).backward()

    for case in cases.values():
        step(*case)
    print("ready", flush=True)
    for line in sys.stdin:
        name, b, d, j, repeats = line.split()
        layer, x, y = cases[name, int(b), int(d), int(j)]
        step(layer, x, y)
        times = []
        for _ in range(int(repeats)):
            start = time.perf_counter()
            step(layer, x, y)
            times.append(time.perf_counter() - start)
        print(statistics.median(times) * 1e3, flush=True)


def parse_sizes(given: list[str] | None) -> tuple[tuple[int, int, int], ...]:
    """``["1000,54,500", ...]`` as triples (default: :data:`SIZES`)."""
    if not given:
        return SIZES
    triples = tuple(tuple(int(v) for v in text.split(",")) for text in given)
    if any(len(t) != 3 for t in triples):
        raise SystemExit(f"--sizes takes B,d,J triples, got {given}")
    return triples  # type: ignore[return-value]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("tree_a")
    parser.add_argument("tree_b")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--json", default=None, help="also write the rows to this file")
    parser.add_argument("--sizes", nargs="+", default=None, help="B,d,J triples")
    args = parser.parse_args()
    sizes = parse_sizes(args.sizes)
    pin = ["taskset", "-c", "1"] if shutil.which("taskset") and os.cpu_count() != 1 else []
    workers = {}
    for key, tree in (("a", args.tree_a), ("b", args.tree_b)):
        env = dict(os.environ, PYTHONPATH=tree, OMP_NUM_THREADS="1")
        command = [*pin, sys.executable, os.path.abspath(__file__), "--worker"]
        command += [",".join(map(str, size)) for size in sizes]
        workers[key] = subprocess.Popen(
            command, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        assert workers[key].stdout is not None and workers[key].stdin is not None
        if workers[key].stdout.readline().strip() != "ready":
            raise SystemExit(f"the worker of {tree} did not start")
    rows = []
    print("| layer | B | d | J | A ms | B ms | B / A |\n|---|---|---|---|---|---|---|")
    for name in LAYERS:
        for b, d, j in sizes:
            times: dict[str, list[float]] = {"a": [], "b": []}
            ratios = []
            for r in range(args.rounds):
                for key in ("a", "b") if r % 2 == 0 else ("b", "a"):
                    proc = workers[key]
                    assert proc.stdin is not None and proc.stdout is not None
                    proc.stdin.write(f"{name} {b} {d} {j} {7 if j < 2000 else 3}\n")
                    proc.stdin.flush()
                    times[key].append(float(proc.stdout.readline()))
                ratios.append(times["b"][-1] / times["a"][-1])
            row = {
                "layer": name,
                "size": [b, d, j],
                "a_ms": statistics.median(times["a"]),
                "b_ms": statistics.median(times["b"]),
                "b_over_a": statistics.median(ratios),
            }
            rows.append(row)
            print(
                f"| {name} | {b} | {d} | {j} | {row['a_ms']:.1f} | {row['b_ms']:.1f} "
                f"| {row['b_over_a']:.2f} |",
                flush=True,
            )
    for proc in workers.values():
        assert proc.stdin is not None
        proc.stdin.close()
        proc.wait()
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(rows, fh, indent=1)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--worker"]:
        worker(parse_sizes(sys.argv[2:]))
    else:
        main()
