"""Time and memory of loading a data set into the data module's tensors (``setup()``).

Runs ``setup()`` once in this (fresh) process and prints the wall time and the growth of
the peak resident memory (``VmHWM``) over the process before it, with the size of the
tensors kept.

    python benchmarks/data_load.py covtype --data-home DIR/covtype
    python benchmarks/data_load.py mnist --root DIR/mnist
"""

from __future__ import annotations

import argparse
import json
import re
import time


def peak_mib() -> float:
    with open("/proc/self/status") as fh:
        return int(re.search(r"VmHWM:\s+(\d+)", fh.read())[1]) / 1024  # type: ignore[index]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("data", choices=["covtype", "mnist"])
    parser.add_argument("--root", default=None, help="MNIST IDX folder")
    parser.add_argument("--data-home", default=None, help="CovType folder")
    args = parser.parse_args()
    import torch

    from kernel_layers.data import CovTypeDataModule, MNISTDataModule

    if args.data == "covtype":
        dm = CovTypeDataModule(args.data_home, download=False)
    else:
        dm = MNISTDataModule(args.root, download=False)
    before = peak_mib()
    start = time.perf_counter()
    dm.setup()
    seconds = time.perf_counter() - start
    kept = sum(
        t.numel() * t.element_size()
        for ds in (dm.train_dataset, dm.val_dataset, dm.test_dataset)
        if ds is not None
        for t in ds.tensors
    )
    row = {
        "data": args.data,
        "setup_s": round(seconds, 2),
        "peak_growth_mib": round(peak_mib() - before),
        "tensors_mib": round(kept / 2**20),
        "train_rows": len(dm.train_dataset),
        "dtype": str(dm.train_dataset.tensors[0].dtype),
        "threads": torch.get_num_threads(),
        "date": time.strftime("%Y-%m-%d"),
    }
    print(json.dumps(row))


if __name__ == "__main__":
    main()
