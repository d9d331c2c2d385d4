"""benchmarks/svm_readout.py: the linear SVM (C by CV) and ridge read-outs of a checkpoint."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from contextlib import redirect_stdout
from io import StringIO
from pathlib import Path

import numpy as np
import pytest
import torch
from sklearn.preprocessing import StandardScaler
from sklearn.svm import LinearSVC

from kernel_layers import KernelClassifier
from kernel_layers.cli.entry import main
from kernel_layers.data import DigitsDataModule

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "svm_readout.py"


@pytest.fixture(scope="module")
def quickstart_ckpt(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, float]:
    """A quick-start checkpoint after 2 epochs, and the test accuracy the fit printed."""
    run = tmp_path_factory.mktemp("fit")
    cwd = Path.cwd()
    out = StringIO()
    try:
        os.chdir(run)
        with redirect_stdout(out):
            main(["fit", "--config", "quickstart", "--trainer.max_epochs=2"])
    finally:
        os.chdir(cwd)
    acc = float(out.getvalue().split("\n  test/acc")[1].split()[0])  # the trained model
    return run / "checkpoints" / "quickstart" / "last.ckpt", acc


def _run(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=600,
    )


def test_readouts_match_the_model_and_an_independent_svm(tmp_path, quickstart_ckpt):
    ckpt, fitted_acc = quickstart_ckpt
    out = tmp_path / "rows.jsonl"
    done = _run(tmp_path, "quickstart", str(ckpt), "--svm-c", "0.1", "1", "--json", str(out))
    assert done.returncode == 0, done.stderr
    row = json.loads(out.read_text().splitlines()[-1])
    assert "LinearSVC (C = " in done.stdout and "by 3-fold CV among [0.1, 1.0]" in done.stdout
    # The ridge head on the same training rows is the model's own read-out.
    assert row["test_acc"] == pytest.approx(fitted_acc, abs=1.5 / row["test_rows"])
    # The SVM: the same features and rows through scikit-learn directly.
    model = KernelClassifier.load_from_checkpoint(ckpt, map_location="cpu").eval()
    dm = DigitsDataModule(num_features=200, batch_size=400)
    dm.setup("fit")
    dm.setup("test")
    (x_train, y_train), (x_test, y_test) = dm.train_dataset.tensors, dm.test_dataset.tensors
    assert row["train_rows"] == len(x_train) and row["svm_rows"] == len(x_train)
    with torch.no_grad():
        f_train, f_test = model(x_train).double().numpy(), model(x_test).double().numpy()
    scaler = StandardScaler().fit(f_train)
    svm = LinearSVC(C=row["svm_c"], random_state=0).fit(scaler.transform(f_train), y_train)
    expected = float(np.mean(svm.predict(scaler.transform(f_test)) == y_test.numpy()))
    assert row["svm_c"] in (0.1, 1.0)
    assert row["svm_test_acc"] == pytest.approx(expected, abs=1.5 / len(x_test))
    assert row["svm_test_acc"] > 0.8


def test_a_checkpoint_of_another_layer_is_refused(tmp_path, quickstart_ckpt):
    ckpt, _ = quickstart_ckpt
    done = _run(
        tmp_path,
        "quickstart",
        str(ckpt),
        "--",
        "--model.kernel_layer.init_args.out_features",
        "100",
    )
    assert done.returncode != 0
    assert (
        "argument 'ckpt' must hold the recipe's kernel layer NystromLayer(out_features=100), "
        "got NystromLayer(out_features=20)" in done.stderr
    )


def test_a_missing_checkpoint_is_refused(tmp_path):
    done = _run(tmp_path, "quickstart", "nowhere.ckpt")
    assert done.returncode == 2
    assert "argument 'ckpt' must be an existing checkpoint file, got 'nowhere.ckpt'" in done.stderr
