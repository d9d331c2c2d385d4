"""``KernelClassifier`` with Lightning's own ways and plain ``DataLoader``s: checkpoints
loaded back into the fitted model, ``trainer.validate`` after a fit, and the model's own
passes (read-out refits, landmark draws) leaving the fit's training loader alone."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import lightning as L
import pytest
import torch
from lightning.pytorch.callbacks import Callback, ModelCheckpoint
from sklearn.datasets import load_digits
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

from kernel_layers import KernelClassifier, NystromLayer
from kernel_layers.training.heads import ridge_solve
from kernel_layers.training.modes import side_loader
from kernel_layers.training.readout import training_statistics


def _loaders(**train_options: Any) -> tuple[DataLoader, DataLoader, DataLoader]:
    x, y = load_digits(return_X_y=True)
    order = torch.randperm(len(y), generator=torch.Generator().manual_seed(0))
    x = torch.tensor(x / 16.0, dtype=torch.float32)[order]
    y = torch.tensor(y)[order]
    train = TensorDataset(x[:1000], y[:1000])
    options = {"batch_size": 100, "shuffle": True, "drop_last": True, **train_options}
    return (
        DataLoader(train, **options),
        DataLoader(TensorDataset(x[1000:1400], y[1000:1400]), batch_size=400),
        DataLoader(TensorDataset(x[1400:], y[1400:]), batch_size=400),
    )


def _model() -> KernelClassifier:
    return KernelClassifier(NystromLayer(64, 40, gamma=0.02), num_classes=10, lr=1e-2)


def _trainer(**options: Any) -> L.Trainer:
    # no default checkpoint: it would write into the working directory
    saves = any(isinstance(c, ModelCheckpoint) for c in options.get("callbacks", []))
    quiet = {"logger": False, "enable_progress_bar": False, "enable_model_summary": False}
    quiet["enable_checkpointing"] = saves
    return L.Trainer(accelerator="cpu", deterministic=True, **{**quiet, **options})


class TrainedBatches(Callback):
    """How many training batches each epoch ran, and the epochs' training DI."""

    def __init__(self) -> None:
        self.batches: dict[int, int] = {}
        self.di: list[float] = []

    def on_train_batch_start(self, trainer: L.Trainer, *args: Any) -> None:
        self.batches[trainer.current_epoch] = self.batches.get(trainer.current_epoch, 0) + 1

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.di.append(float(trainer.callback_metrics["train/di_epoch"]))


def test_a_checkpoint_loads_back_into_the_model_that_wrote_it(tmp_path: Path) -> None:
    L.seed_everything(0)
    train, val, test = _loaders()
    saver = ModelCheckpoint(tmp_path, monitor="val/acc", mode="max")
    trainer = _trainer(max_epochs=3, callbacks=[saver])
    model = _model()
    trainer.fit(model, train, val)
    (again,) = trainer.test(model, test, ckpt_path="best", verbose=False)
    fresh = _trainer().test(_model(), test, ckpt_path=saver.best_model_path, verbose=False)
    assert again["test/acc"] == fresh[0]["test/acc"] > 0.9


def test_validate_after_a_fit_reads_out_with_the_current_read_out() -> None:
    L.seed_everything(0)
    train, val, _ = _loaders()
    trainer = _trainer(max_epochs=2)
    model = _model()
    trainer.fit(model, train, val)
    last = float(trainer.callback_metrics["val/acc"])
    (result,) = trainer.validate(model, val, verbose=False)
    (fresh,) = _trainer().validate(model, val, verbose=False)
    assert result["val/acc"] == fresh["val/acc"] == pytest.approx(last, abs=0)


def test_validation_leaves_the_training_order_alone() -> None:
    # The read-out refit at each validation reads the rows in order from a loader of its
    # own: the fit's shuffling (and so its DI) is the same with validation or without.
    histories = []
    for val in (True, False):
        L.seed_everything(0)
        # the loader's own generator: the validation loader's iterators draw their base
        # seed from the global stream, which is Lightning's and the user's
        train, val_loader, _ = _loaders(generator=torch.Generator().manual_seed(0))
        seen = TrainedBatches()
        trainer = _trainer(max_epochs=3, callbacks=[seen], num_sanity_val_steps=0)
        trainer.fit(_model(), train, val_loader if val else None)
        histories.append(seen.di)
    assert histories[0] == histories[1]


def test_persistent_workers_train_every_batch_with_validation_mid_epoch() -> None:
    L.seed_everything(0)
    train, val, _ = _loaders(num_workers=1, persistent_workers=True)
    seen = TrainedBatches()
    trainer = _trainer(max_epochs=2, val_check_interval=0.5, callbacks=[seen])
    trainer.fit(_model(), train, val)
    assert seen.batches == {0: 10, 1: 10}


class ReadoutLag(Callback):
    """At each validation, how far the read-out in use is from an exact refit on the
    current features of the training rows."""

    def __init__(self, train: DataLoader) -> None:
        self.train = train
        self.lags: list[float] = []

    def on_validation_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        model: Any = pl_module
        stats = training_statistics(model, self.train)
        weight, _ = ridge_solve(stats, model.head.rho)
        self.lags.append(float((model.head.weight.double() - weight).abs().max()))


def test_a_resumed_fit_validates_with_a_current_read_out(tmp_path: Path) -> None:
    # The checkpoint's read-out is current for the state it loads, and stale after the
    # first step of the resumed fit: every validation reads out the current features.
    L.seed_everything(0)
    train, val, _ = _loaders()
    saver = ModelCheckpoint(tmp_path, save_last=True)
    _trainer(max_epochs=1, callbacks=[saver]).fit(_model(), train, val)
    lag = ReadoutLag(train)
    resumed = _trainer(max_epochs=3, callbacks=[lag], enable_checkpointing=False)
    resumed.fit(_model(), train, val, ckpt_path=tmp_path / "last.ckpt")
    assert len(lag.lags) == 3 and max(lag.lags) < 1e-6  # the sanity check and 2 epochs


def test_the_read_outs_twin_of_a_distributed_loader_reads_every_row() -> None:
    # Under DDP Lightning gives a plain loader a DistributedSampler: the read-out was
    # fitted on each process's shard, so the processes held different read-outs.
    rows = TensorDataset(torch.arange(10.0)[:, None], torch.arange(10) % 2)
    shard = DistributedSampler(rows, num_replicas=2, rank=1, shuffle=True, seed=0)
    loader = DataLoader(rows, batch_size=4, sampler=shard)
    assert sorted(int(x) for batch in loader for x in batch[0][:, 0]) != list(range(10))
    twin = side_loader(loader, ordered=True)
    assert [int(x) for batch in twin for x in batch[0][:, 0]] == list(range(10))
