"""``lr_schedule``: a constant rate, or cosine annealing of every parameter group over the
Trainer's ``max_epochs``, for both kernel modules, through a resume, and its errors."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import lightning as L
import pytest
import torch
from lightning.pytorch.callbacks import Callback, ModelCheckpoint
from lightning.pytorch.loggers import Logger
from sklearn.datasets import make_classification
from torch import nn

from kernel_layers import KernelClassifier, KernelRegressor, NystromLayer
from kernel_layers.callbacks import DISaturationStopping, PlateauDecay
from kernel_layers.data.tensor import TensorDataModule

LR, BACKBONE_LR = 1e-2, 3e-3


class EpochRates(Callback):
    """The learning rate of each named parameter group at the start of every epoch."""

    def __init__(self) -> None:
        self.rates: dict[int, dict[str, float]] = {}

    def on_train_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        groups = trainer.optimizers[0].param_groups
        self.rates[trainer.current_epoch] = {g["name"]: g["lr"] for g in groups}


def _cosine(base: float, epoch: int, epochs: int) -> float:
    """The closed form of cosine annealing to zero, in float64."""
    return base * 0.5 * (1.0 + math.cos(math.pi * epoch / epochs))


def _data(float_targets: bool = False) -> TensorDataModule:
    x, y = make_classification(
        n_samples=700, n_features=6, n_informative=4, n_redundant=0, n_classes=3,
        random_state=0,
    )  # fmt: skip
    targets: Any = y.astype("float64") if float_targets else y
    return TensorDataModule(
        x[:500], targets[:500], x[500:], targets[500:], batch_size=100,
        float_targets=float_targets,
    )  # fmt: skip


def _model(kind: str, **options: Any) -> L.LightningModule:
    torch.manual_seed(0)
    layer = NystromLayer(4, 30, gamma=0.5)
    backbone = nn.Sequential(nn.Linear(6, 4), nn.Tanh())
    common = {"backbone": backbone, "lr": LR, "backbone_lr": BACKBONE_LR, **options}
    if kind == "classifier":
        return KernelClassifier(layer, num_classes=3, **common)
    return KernelRegressor(layer, **common)


@pytest.mark.parametrize("kind", ["classifier", "regressor"])
def test_cosine_anneals_each_group_from_its_own_rate_to_zero(
    kind: str, make_trainer: Callable[..., L.Trainer]
) -> None:
    epochs = 5
    rates = EpochRates()
    model = _model(kind, lr_schedule="cosine")
    trainer = make_trainer([rates], max_epochs=epochs)
    trainer.fit(model, _data(float_targets=kind == "regressor"))
    for epoch in range(epochs):
        assert rates.rates[epoch]["kernel"] == pytest.approx(_cosine(LR, epoch, epochs), rel=1e-12)
        assert rates.rates[epoch]["backbone"] == pytest.approx(
            _cosine(BACKBONE_LR, epoch, epochs), rel=1e-12
        )
    # stepped after the last epoch too: the rate the schedule ends at is zero
    assert [g["lr"] for g in trainer.optimizers[0].param_groups] == pytest.approx([0.0, 0.0])


def test_constant_schedule_keeps_the_rates(make_trainer: Callable[..., L.Trainer]) -> None:
    rates = EpochRates()
    trainer = make_trainer([rates], max_epochs=3)
    trainer.fit(_model("classifier"), _data())
    assert trainer.lr_scheduler_configs == []
    assert rates.rates == {e: {"kernel": LR, "backbone": BACKBONE_LR} for e in range(3)}


def test_cosine_resumes_where_it_stopped(
    tmp_path: Path, make_trainer: Callable[..., L.Trainer]
) -> None:
    class StopAfter(Callback):
        def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
            if trainer.current_epoch == 1:
                trainer.should_stop = True

    epochs = 4
    L.seed_everything(0)
    first = make_trainer([StopAfter()], max_epochs=epochs)
    first.fit(_model("classifier", lr_schedule="cosine"), _data())
    path = tmp_path / "two_epochs.ckpt"
    first.save_checkpoint(path)
    rates = EpochRates()
    second = make_trainer([rates], max_epochs=epochs)
    second.fit(_model("classifier", lr_schedule="cosine"), _data(), ckpt_path=path)
    assert sorted(rates.rates) == [2, 3]
    for epoch in (2, 3):
        assert rates.rates[epoch]["kernel"] == pytest.approx(_cosine(LR, epoch, epochs), rel=1e-12)
    loaded = KernelClassifier.load_from_checkpoint(
        path, backbone=nn.Sequential(nn.Linear(6, 4), nn.Tanh())
    )
    assert loaded.hparams["lr_schedule"] == "cosine"


def test_cosine_resumed_over_another_number_of_epochs_is_refused(
    tmp_path: Path, make_trainer: Callable[..., L.Trainer]
) -> None:
    # The restored scheduler keeps its span: a 2-epoch run resumed with max_epochs=4
    # trained its last epochs at rising rates (0 -> LR / 2 -> LR).
    L.seed_everything(0)
    first = make_trainer(max_epochs=2)
    first.fit(_model("classifier", lr_schedule="cosine"), _data())
    path = tmp_path / "done.ckpt"
    first.save_checkpoint(path)
    longer = make_trainer(max_epochs=4)
    with pytest.raises(
        ValueError,
        match=r"done.ckpt' anneals the learning rate \(lr_schedule 'cosine'\) over "
        r"max_epochs=2; resume it with the same Trainer max_epochs, got 4",
    ):
        longer.fit(_model("classifier", lr_schedule="cosine"), _data(), ckpt_path=path)
    # testing the checkpoint under another max_epochs is not a resume
    make_trainer(max_epochs=4).test(
        _model("classifier", lr_schedule="cosine"), _data(), ckpt_path=path, verbose=False
    )


def test_a_users_own_scheduler_resumes_under_another_max_epochs(
    tmp_path: Path, make_trainer: Callable[..., L.Trainer]
) -> None:
    # The span check is lr_schedule="cosine"'s: it refused a subclass's own scheduler.
    class OwnSchedule(KernelClassifier):
        def configure_optimizers(self) -> Any:
            optimizer = torch.optim.Adam(self.parameters(), lr=LR)
            return [optimizer], [torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, 100)]

    def model() -> OwnSchedule:
        torch.manual_seed(0)
        return OwnSchedule(NystromLayer(6, 30, gamma=0.5), num_classes=3, lr=LR)

    first = make_trainer(max_epochs=1)
    first.fit(model(), _data())
    path = tmp_path / "own.ckpt"
    first.save_checkpoint(path)
    second = make_trainer(max_epochs=2)
    second.fit(model(), _data(), ckpt_path=path)
    assert second.current_epoch == 2


class LoggedRates(Logger):
    """The ``lr`` the module logged, by epoch (``log_every_n_steps=1``)."""

    def __init__(self) -> None:
        super().__init__()
        self.rates: dict[int, float] = {}

    @property
    def name(self) -> str:
        return "rates"

    @property
    def version(self) -> int:
        return 0

    def log_metrics(self, metrics: dict[str, float], step: int | None = None) -> None:
        if "lr" in metrics:
            self.rates[int(metrics["epoch"])] = metrics["lr"]

    def log_hyperparams(self, params: Any, *args: Any, **kwargs: Any) -> None:
        pass


def test_lr_is_logged_for_an_epoch_resumed_mid_way(
    tmp_path: Path, make_trainer: Callable[..., L.Trainer]
) -> None:
    # 5 batches an epoch; the checkpoint of step 7 is 2 batches into epoch 1, whose
    # on_train_epoch_start Lightning does not run again on resuming.
    saver = ModelCheckpoint(tmp_path, every_n_train_steps=7, save_top_k=-1)
    first = make_trainer([saver], max_epochs=3, max_steps=7, enable_checkpointing=True)
    first.fit(_model("classifier", lr_schedule="cosine"), _data())
    logged = LoggedRates()
    second = make_trainer(max_epochs=3, logger=logged)
    path = tmp_path / "epoch=1-step=7.ckpt"
    second.fit(_model("classifier", lr_schedule="cosine"), _data(), ckpt_path=path)
    assert sorted(logged.rates) == [1, 2]
    for epoch in (1, 2):
        assert logged.rates[epoch] == pytest.approx(_cosine(LR, epoch, 3), rel=1e-6)


@pytest.mark.parametrize("kind", ["classifier", "regressor"])
def test_unknown_schedule_is_named(kind: str) -> None:
    with pytest.raises(ValueError, match=r"argument 'lr_schedule' must be one of .*'step'"):
        _model(kind, lr_schedule="step")


def test_cosine_needs_a_finite_number_of_epochs(make_trainer: Callable[..., L.Trainer]) -> None:
    trainer = make_trainer(max_epochs=-1, max_steps=3)
    with pytest.raises(ValueError, match=r"'lr_schedule' 'cosine' .* got max_epochs=-1"):
        trainer.fit(_model("classifier", lr_schedule="cosine"), _data())


@pytest.mark.parametrize("callback", [PlateauDecay, DISaturationStopping])
def test_cosine_warns_beside_the_plateau_callbacks(
    callback: type[Callback], make_trainer: Callable[..., L.Trainer]
) -> None:
    trainer = make_trainer([callback()], max_epochs=1)
    with pytest.warns(UserWarning, match=rf"lr_schedule 'cosine' .*{callback.__name__}"):
        trainer.fit(_model("classifier", lr_schedule="cosine"), _data())
