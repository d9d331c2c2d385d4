"""benchmarks/gpu.py rehearsed on the CPU (``--quick``): every step runs on small MNIST
files written in the IDX format, and the record file it writes is one that
benchmarks/report.py accepts. benchmarks/gpu.sh is checked for shell syntax."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from formats import IDX_NAMES, write_idx_images, write_idx_labels

ROOT = Path(__file__).resolve().parents[2]


def _mnist_like(folder: Path) -> None:
    """400 training and 100 test images whose brightness follows the label."""
    rng = np.random.default_rng(0)
    folder.mkdir(parents=True)
    for (images, labels), n in (((0, 1), 400), ((2, 3), 100)):
        y = np.arange(n) % 10
        x = (rng.random((n, 28, 28)) * 60 + y[:, None, None] * 19).astype(np.uint8)
        write_idx_images(folder / IDX_NAMES[images], x)
        write_idx_labels(folder / IDX_NAMES[labels], y)


@pytest.mark.slow
def test_the_quick_rehearsal_runs_every_step_and_writes_records(tmp_path: Path) -> None:
    import report

    _mnist_like(tmp_path / "data" / "mnist")
    out = tmp_path / "out"
    # --data relative to the working folder: the steps run from the repository root
    args = ["--device", "cpu", "--quick", "--data", "data", "--out", str(out)]
    args += ["--budget", "3000", "--target", "0.3", "--commit", "0000000"]
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "gpu.py"), *args],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    data = json.loads((out / "gpu.json").read_text())
    assert report.missing_fields(data) == []
    records = {r["name"]: r["figures"] for r in data["records"]}
    assert list(records) == [
        "tests",
        "di_step fourier 300,20,50",
        "di_step nystrom 300,20,50",
        "mnist_nystrom_di",
        "epoch",
        "cnn",
    ]
    # Every CUDA case is collected (none runs on the CPU): the device fixture's and more.
    assert records["tests"]["collected"] >= 100 and records["tests"]["status"] == 0
    assert records["tests"]["failed_tests"] == []
    assert data["tables"]["gpu_di_step"]["rows"] == [n for n in records if "di_step" in n]
    assert data["tables"]["gpu_epoch"]["rows"] == ["epoch", "cnn"]
    for layer in ("fourier", "nystrom"):
        step = records[f"di_step {layer} 300,20,50"]
        assert step["ours_ms"] > 0 and step["ratio"] > 0
    recipe = records["mnist_nystrom_di"]
    assert recipe["epochs"] == 2 and 0 <= recipe["test_acc"] <= 100
    for name in ("epoch", "cnn"):
        assert records[name]["epoch_s"] > 0 and records[name]["steps_s"] > 0
        assert records[name]["check_every"] == "auto"
    commands = " ".join(r["command"] for r in data["records"])
    assert str(tmp_path) not in commands and str(ROOT) not in commands


def test_the_gpu_script_is_valid_bash_and_refuses_a_missing_gpu() -> None:
    subprocess.run(["bash", "-n", str(ROOT / "benchmarks" / "gpu.sh")], check=True)
    import torch

    if torch.cuda.is_available():
        pytest.skip("a CUDA device is present")
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "gpu.py"), "--device", "cuda"],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 2
    assert "argument --device: 'cuda' asked for, but torch sees no CUDA device" in done.stderr


def test_the_failed_tests_are_named_and_failed_steps_left_out_of_the_tables() -> None:
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import gpu

    output = "F.\n=== short test summary info ===\nFAILED tests/a.py::t[cuda] - Error: x\n"
    output += "ERROR tests/b.py::u - boom\n1 failed, 1 passed, 1 error in 2.0s\n"
    assert gpu.FAILED_TEST.findall(output) == ["tests/a.py::t[cuda]", "tests/b.py::u"]
    stored = [
        {"name": "tests", "figures": {"passed": 1, "status": 1, "seconds": 2.0}},
        {"name": "mnist_nystrom_di", "figures": {"status": 124, "seconds": 30.0}},
        {"name": "epoch", "figures": {"steps_s": 0.3, "epoch_s": 0.6}},
    ]
    rows = {name: table["rows"] for name, table in gpu.tables(stored).items()}
    assert rows == {
        "gpu_tests": ["tests"],
        "gpu_di_step": [],
        "gpu_recipe": [],
        "gpu_epoch": ["epoch"],
    }
