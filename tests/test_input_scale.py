"""A model fitted on a data module's scaled rows warns when it is given raw rows."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from pathlib import Path

import lightning as L
import numpy as np
import pytest
import torch
from sklearn.datasets import load_digits
from torch.utils.data import DataLoader, TensorDataset

from kernel_layers import KernelClassifier, NystromLayer
from kernel_layers.data import TensorDataModule

RAW = r"fitted on rows that TensorDataModule min-max scaled to \[0, 1\], and the first {} batch "
RAW += r"holds an entry of magnitude 48, beyond .*transform\(rows\)"


@pytest.fixture(scope="module")
def digits() -> tuple[np.ndarray, np.ndarray]:
    x, y = load_digits(return_X_y=True)  # raw pixels, 0 .. 16
    return x.astype(np.float32), y


def _scale_warnings(run: Callable[[], object]) -> list[str]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        run()
    return [str(w.message) for w in caught if "min-max scaled" in str(w.message)]


def test_raw_rows_after_a_fit_on_scaled_ones_are_warned_about(
    digits, make_trainer: Callable[..., L.Trainer], tmp_path: Path
) -> None:
    x, y = digits
    x = x.copy()
    x[1200, 5] = 48.0  # a test outlier: 3 times the training range once scaled
    dm = TensorDataModule(x[:1200], y[:1200], x[1200:], y[1200:], batch_size=200)
    model = KernelClassifier(NystromLayer(64, 20, gamma=0.05, seed=0), num_classes=10)
    trainer = make_trainer(max_epochs=1)
    trainer.fit(model, dm)
    assert model.scaled_by == "TensorDataModule"
    raw = DataLoader(TensorDataset(torch.tensor(x[1200:]), torch.tensor(y[1200:])), 200)
    with pytest.warns(UserWarning, match=RAW.format("test")):
        trainer.test(model, raw, verbose=False)
    assert float(dm.test_dataset.tensors[0].abs().max()) > 2  # served by the module
    assert _scale_warnings(lambda: trainer.test(model, dm, verbose=False)) == []
    assert _scale_warnings(lambda: trainer.predict(model, dm)) == []
    scaled = DataLoader(TensorDataset(dm.transform(x[1201:]), torch.tensor(y[1201:])), 200)
    assert _scale_warnings(lambda: trainer.test(model, scaled, verbose=False)) == []
    trainer.save_checkpoint(tmp_path / "m.ckpt")
    loaded = KernelClassifier.load_from_checkpoint(tmp_path / "m.ckpt")
    assert loaded.scaled_by == "TensorDataModule"
    rows = DataLoader(TensorDataset(torch.tensor(x[1200:])), 200)
    with pytest.warns(UserWarning, match=RAW.format("predict")):
        make_trainer().predict(loaded, rows)


def test_a_fit_on_plain_loaders_records_no_scaling(
    digits, make_trainer: Callable[..., L.Trainer]
) -> None:
    x, y = digits
    rows = TensorDataset(torch.tensor(x[:600] / 16), torch.tensor(y[:600]))
    model = KernelClassifier(NystromLayer(64, 20, gamma=0.05, seed=0), num_classes=10)
    trainer = make_trainer(max_epochs=1)
    trainer.fit(model, DataLoader(rows, batch_size=200))
    assert model.scaled_by is None
    raw = DataLoader(TensorDataset(torch.tensor(x[600:]), torch.tensor(y[600:])), 200)
    assert _scale_warnings(lambda: trainer.test(model, raw, verbose=False)) == []
