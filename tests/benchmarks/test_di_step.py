"""The DI-step benchmark (benchmarks/di_step.py, di_step_ops.py, di_step_memory.py): its
baselines and reports are correct."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

from kernel_layers import discriminant_information

di_step = pytest.importorskip("di_step")
ops = pytest.importorskip("di_step_ops")
memory = pytest.importorskip("di_step_memory")


def test_naive_baseline_is_the_same_objective() -> None:
    """The plain-autograd step the ratios compare against computes the library's DI."""
    gen = torch.Generator().manual_seed(3)
    phi = torch.randn(300, 40, generator=gen, dtype=torch.float64)
    labels = torch.randint(0, 10, (300,), generator=gen)
    y = torch.nn.functional.one_hot(labels, 10).double()
    y = y / y.sum(0).clamp_min(1).sqrt()
    naive = ops.naive_di(phi, y, 1e-4 * torch.eye(40, dtype=torch.float64))
    ours = discriminant_information(phi, labels, rho=1e-4, num_classes=10)
    torch.testing.assert_close(naive, ours, rtol=1e-12, atol=0)


@pytest.mark.parametrize("layer", ["fourier", "nystrom"])
def test_float32_agreement(layer: str) -> None:
    # d = 54 (CovType's width) keeps K_Z well conditioned at gamma = 0.01; the bar is the
    # GPU target's 1e-4 relative DI difference.
    row = di_step.agreement(layer, 400, 54, 100, torch.device("cpu"))
    assert 0 < row["di64"] <= ops.NUM_CLASSES - 1
    assert row["rel_di"] == abs(row["di32"] - row["di64"]) / row["di64"]
    assert row["rel_di"] < 1e-4 and row["rel_grad"] < 1e-3


def test_main_writes_rows(tmp_path: Path) -> None:
    out = tmp_path / "rows.json"
    di_step.main(
        [
            *("--sizes", "150,8,40", "--repeats", "2", "--no-memory", "--no-throughput"),
            *("--no-memory-scaling", "--json", str(out)),
        ]
    )
    data = json.loads(out.read_text())
    assert [(r["layer"], r["J"]) for r in data["steps"]] == [("fourier", 40), ("nystrom", 40)]
    for row in data["steps"]:
        assert row["ours_ms"] > 0 and row["floor_ms"] > 0 and row["ratio"] > 0
    fourier, nystrom = data["steps"]
    # The float64 floor is Nystrom's (NysDI's precision rule), absent (NaN) for Fourier.
    assert math.isnan(fourier["floor64_ms"]) and math.isnan(fourier["floor64_ratio"])
    assert nystrom["floor64_ms"] > 0 and nystrom["floor64_ratio"] > 0
    assert nystrom["ours_floor64_ratio"] > 0
    assert [r["layer"] for r in data["agreement"]] == ["fourier", "nystrom"]


def test_agreement_on_mnist_files_draws_batch_and_landmarks_from_the_data(tmp_path: Path) -> None:
    from formats import make_mnist_dir

    make_mnist_dir(tmp_path / "mnist")
    data = di_step.real_data(str(tmp_path / "mnist"), None)
    assert set(data) == {784}
    x, labels, classes = data[784]
    assert x.dtype == torch.float64 and float(x.min()) >= 0 and float(x.max()) <= 1
    assert classes == 10 and len(labels) == len(x)
    for layer in ("fourier", "nystrom"):
        row = di_step.agreement(layer, 40, 784, 10, torch.device("cpu"), data[784])
        assert row["rel_di"] < 1e-5 and row["di64"] > 0
    rows = di_step.agreement_table(
        [(40, 784, 10), (40, 54, 10)], ["nystrom"], torch.device("cpu"), data
    )
    assert [(r["data"], r["d"]) for r in rows] == [
        ("uniform", 784),
        ("MNIST", 784),
        ("uniform", 54),
    ]


def test_peak_memory_runs_from_any_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The fresh subprocess finds this script wherever the user runs it from."""
    monkeypatch.chdir(tmp_path)
    peak = memory.peak_memory("fourier", 64, 8, 16, "cpu", "float32")
    assert math.isfinite(peak) and peak >= 0
