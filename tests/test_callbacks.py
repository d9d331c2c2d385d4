"""Tests of the ``callbacks`` package: PlateauDecay and DISaturationStopping.

A one-parameter LightningModule logs a scripted value of ``train/di`` per epoch (``on_step=True,
on_epoch=True`` like ``KernelClassifier``, hence the monitored key ``train/di_epoch``) and records
the learning rate each epoch trains with; real ``lightning.Trainer`` runs on CPU check the epochs
at which the callbacks act.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Sequence
from typing import Any

import lightning as L
import pytest
import torch
from lightning.pytorch.callbacks import Callback, ModelCheckpoint
from lightning.pytorch.trainer.states import RunningStage, TrainerFn
from torch.utils.data import DataLoader, TensorDataset

from kernel_layers.callbacks import (
    DISaturationReason,
    DISaturationStopping,
    KeepBest,
    PlateauDecay,
)
from kernel_layers.callbacks.monitor import (
    LOGGER_NAME,
    MonitorCallback,
    is_improvement,
    read_monitor,
)

pytestmark = [
    pytest.mark.filterwarnings("ignore:.*does not have many workers.*"),
    pytest.mark.filterwarnings("ignore:.*smaller than the logging interval.*"),
    pytest.mark.filterwarnings("ignore:.*isinstance\\(treespec, LeafSpec\\).*"),
]

NAN = math.nan


class ScriptedModule(L.LightningModule):
    """Logs ``script[current_epoch]`` as ``key``; records the lr of every epoch.

    Args:
        script: value logged at each epoch (the last one repeats).
        lrs: initial lr of each param group of the SGD optimizer.
        step_size: if given, a ``StepLR(step_size, gamma=0.1)`` epoch scheduler is attached.
        scheduler: ``"lambda"`` attaches a ``LambdaLR`` (for the warning test).
        key: the key logged (``train/di`` by default).
    """

    def __init__(
        self,
        script: Sequence[float],
        lrs: Sequence[float] = (1.0,),
        step_size: int | None = None,
        scheduler: str | None = None,
        key: str = "train/di",
    ) -> None:
        super().__init__()
        self.script = list(script)
        self.key = key
        self.weights = torch.nn.ParameterList(torch.nn.Parameter(torch.zeros(1)) for _ in lrs)
        self.init_lrs = list(lrs)
        self.step_size = step_size
        self.scheduler = scheduler
        self.epoch_lrs: dict[int, list[float]] = {}

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        epoch = self.current_epoch
        value = self.script[min(epoch, len(self.script) - 1)]
        logged = torch.tensor(float(value), device=self.device)  # on the training device
        self.log(self.key, logged, on_step=True, on_epoch=True)
        if batch_idx == 0:
            self.epoch_lrs[epoch] = [
                float(g["lr"]) for g in self.trainer.optimizers[0].param_groups
            ]
        return sum((w**2).sum() for w in self.weights) + 0.0 * batch[0].sum()

    def train_dataloader(self) -> DataLoader:
        return DataLoader(TensorDataset(torch.zeros(2, 1)), batch_size=2)

    def configure_optimizers(self) -> Any:
        groups = [
            {"params": [w], "lr": lr} for w, lr in zip(self.weights, self.init_lrs, strict=True)
        ]
        optimizer = torch.optim.SGD(groups, lr=self.init_lrs[0])
        if self.step_size is not None:
            step = torch.optim.lr_scheduler.StepLR(optimizer, self.step_size, gamma=0.1)
            return {"optimizer": optimizer, "lr_scheduler": step}
        if self.scheduler == "lambda":
            lam = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda epoch: 1.0)
            return {"optimizer": optimizer, "lr_scheduler": lam}
        return optimizer


def fit(
    make_trainer: Callable[..., L.Trainer],
    script: Sequence[float],
    callbacks: list[Callback],
    max_epochs: int,
    **module_kwargs: Any,
) -> tuple[L.Trainer, ScriptedModule]:
    module = ScriptedModule(script, **module_kwargs)
    trainer = make_trainer(callbacks, max_epochs)
    trainer.fit(module)
    return trainer, module


def epochs_run(module: ScriptedModule) -> list[int]:
    return sorted(module.epoch_lrs)


# --------------------------------------------------------------------------- improvement test


@pytest.mark.parametrize(
    ("current", "best", "mode", "threshold", "threshold_mode", "expected"),
    [
        (1.0, -math.inf, "max", 1e-4, "rel", True),
        (1.0, math.inf, "min", 1e-4, "rel", True),
        (1.0, 1.0, "max", 0.0, "rel", False),
        (1.2, 1.0, "max", 0.1, "rel", True),
        (1.1, 1.0, "max", 0.1, "rel", False),
        (-0.95, -1.0, "max", 0.1, "rel", False),  # margin uses |best|
        (-0.85, -1.0, "max", 0.1, "rel", True),
        (1.6, 1.0, "max", 0.5, "abs", True),
        (1.5, 1.0, "max", 0.5, "abs", False),
        (0.4, 1.0, "min", 0.5, "abs", True),
        (0.5, 1.0, "min", 0.5, "abs", False),
        (NAN, 1.0, "max", 0.0, "rel", False),
        (NAN, -math.inf, "max", 0.0, "rel", False),
    ],
)
def test_is_improvement(
    current: float, best: float, mode: str, threshold: float, threshold_mode: str, expected: bool
) -> None:
    got = is_improvement(
        current, best, mode=mode, threshold=threshold, threshold_mode=threshold_mode
    )
    assert got is expected


# --------------------------------------------------------------------------- PlateauDecay


def test_plateau_decay_fires_exactly_after_patience_epochs(
    make_trainer: Callable[..., L.Trainer], device: torch.device
) -> None:
    # epoch:   0  1  2  3  4  5  6  7  8  9
    script = [1, 2, 3, 3, 3, 3, 4, 4, 4, 4]
    cb = PlateauDecay(patience=2, factor=0.1)
    _, module = fit(make_trainer, script, [cb], max_epochs=10)
    # epochs 3, 4 do not improve on 3 -> decay at end of 4; 5 bad, 6 improves; 7, 8 bad -> decay.
    assert cb.decay_epochs == [4, 8]
    assert cb.num_decays == 2
    lrs = [module.epoch_lrs[e][0] for e in range(10)]
    assert lrs == pytest.approx([1.0] * 5 + [0.1] * 4 + [0.01])
    assert cb.best_score == 4.0
    assert cb.wait_count == 1  # epoch 9 did not improve


def test_plateau_decay_patience_one_and_mode_min(make_trainer: Callable[..., L.Trainer]) -> None:
    script = [5.0, 4.0, 4.0, 3.0, 3.0, 3.0]  # a loss
    cb = PlateauDecay(monitor="train/di_epoch", mode="min", patience=1)
    _, module = fit(make_trainer, script, [cb], max_epochs=6)
    assert cb.decay_epochs == [2, 4, 5]
    assert module.epoch_lrs[5][0] == pytest.approx(0.01)


@pytest.mark.parametrize("make", [PlateauDecay, DISaturationStopping, KeepBest])
@pytest.mark.parametrize(
    ("monitor", "mode"),
    [
        ("train/di_epoch", "max"),
        ("val/acc", "max"),
        ("val/r2", "max"),
        ("train/loss_epoch", "min"),
        ("val/mse", "min"),
        ("val/kernel_error", "min"),
    ],
)
def test_mode_none_reads_the_direction_of_the_librarys_metric(
    make: Callable[..., MonitorCallback], monitor: str, mode: str
) -> None:
    assert make(monitor=monitor).mode == mode
    flipped = "min" if mode == "max" else "max"
    assert make(monitor=monitor, mode=flipped).mode == flipped  # a given mode is kept


@pytest.mark.parametrize("make", [PlateauDecay, DISaturationStopping, KeepBest])
def test_mode_none_with_a_metric_of_unknown_direction_is_refused(
    make: Callable[..., MonitorCallback],
) -> None:
    with pytest.raises(
        ValueError,
        match=r"argument 'mode' must be 'max' \(higher is better\) or 'min' for monitor "
        r"'val/f1': the direction is read only from a name whose last part \(after the last "
        r"'/', without '_epoch' or '_step'\) is one of .*acc.*loss.*, here 'f1'; got None",
    ):
        make(monitor="val/f1")


def test_a_falling_loss_is_an_improvement_by_default(
    make_trainer: Callable[..., L.Trainer],
) -> None:
    script = [5.0, 4.0, 3.0, 2.0, 1.0, 0.5]  # a loss that falls every epoch
    decay = PlateauDecay(monitor="train/loss_epoch", patience=2)
    stop = DISaturationStopping(monitor="train/loss_epoch")
    _, module = fit(make_trainer, script, [decay, stop], max_epochs=6, key="train/loss")
    assert decay.decay_epochs == [] and epochs_run(module) == list(range(6))


def test_plateau_decay_threshold_abs(make_trainer: Callable[..., L.Trainer]) -> None:
    script = [1.0, 1.4, 1.6, 2.2, 2.3]
    cb = PlateauDecay(patience=1, threshold=0.5, threshold_mode="abs")
    fit(make_trainer, script, [cb], max_epochs=5)
    # 1.4 is not > 1.0 + 0.5 -> decay at 1; 1.6 > 1.5 improves; 2.2 > 2.1 improves; 2.3 does not.
    assert cb.decay_epochs == [1, 4]


def test_plateau_decay_cooldown(make_trainer: Callable[..., L.Trainer]) -> None:
    cb = PlateauDecay(patience=1, cooldown=1)
    fit(make_trainer, [1.0] * 7, [cb], max_epochs=7)
    # every decay is followed by one cooldown epoch that is not counted
    assert cb.decay_epochs == [1, 3, 5]


def test_plateau_decay_respects_min_lr_for_every_group(
    make_trainer: Callable[..., L.Trainer],
) -> None:
    cb = PlateauDecay(patience=1, factor=0.1, min_lr=0.01)
    trainer, module = fit(make_trainer, [1.0] * 6, [cb], max_epochs=6, lrs=(1.0, 0.1))
    # epoch 1: [0.1, 0.01]; epoch 2: [0.01, 0.01]; afterwards all groups sit at min_lr
    assert cb.decay_epochs == [1, 2]
    assert module.epoch_lrs[2] == pytest.approx([0.1, 0.01])
    assert module.epoch_lrs[5] == pytest.approx([0.01, 0.01])
    final = [g["lr"] for g in trainer.optimizers[0].param_groups]
    assert final == pytest.approx([0.01, 0.01])
    assert min(final) >= 0.01


def test_plateau_decay_nan_counts_as_no_improvement(make_trainer: Callable[..., L.Trainer]) -> None:
    cb = PlateauDecay(patience=2)
    match = r"PlateauDecay: monitored metric 'train/di_epoch' is NaN at .*no improvement"
    with pytest.warns(RuntimeWarning, match=match):
        fit(make_trainer, [1.0, NAN, NAN, 2.0], [cb], max_epochs=4)
    assert cb.decay_epochs == [2]
    assert cb.best_score == 2.0


def test_plateau_decay_composes_with_step_lr(make_trainer: Callable[..., L.Trainer]) -> None:
    cb = PlateauDecay(patience=1)
    _, module = fit(make_trainer, [1, 2, 3, 3, 4, 5], [cb], max_epochs=6, step_size=2)
    # StepLR x0.1 after epochs 1 and 3 (and 5); PlateauDecay x0.1 after epoch 3
    assert cb.decay_epochs == [3]
    lrs = [module.epoch_lrs[e][0] for e in range(6)]
    assert lrs == pytest.approx([1.0, 1.0, 0.1, 0.1, 0.001, 0.001])


def test_plateau_decay_warns_about_absolute_schedulers(
    make_trainer: Callable[..., L.Trainer],
) -> None:
    module = ScriptedModule([1.0, 2.0], scheduler="lambda")
    trainer = make_trainer([PlateauDecay()], max_epochs=1)
    with pytest.warns(UserWarning, match="PlateauDecay: the scheduler LambdaLR"):
        trainer.fit(module)


# --------------------------------------------------------------------------- DISaturationStopping


def test_di_saturation_alone_with_step_lr_stops_after_non_improving_decay(
    make_trainer: Callable[..., L.Trainer],
) -> None:
    cb = DISaturationStopping()
    # StepLR(3): epochs 3, 6, 9 are the first at a decayed lr.
    # epoch:   0  1  2  3  4  5  6  7
    script = [1, 2, 3, 4, 4, 4, 4, 9]
    trainer, module = fit(make_trainer, script, [cb], max_epochs=20, step_size=3)
    # epoch 3 improves after the first decay (window closes); epoch 6 does not -> stop at 6
    assert cb.lr_drop_epochs == [3, 6]
    assert cb.stopped_epoch == 6
    assert epochs_run(module) == list(range(7))
    assert trainer.should_stop
    assert cb.stopping_reason is DISaturationReason.SATURATED_AFTER_DECAY
    assert cb.stopping_reason_message is not None
    assert "train/di_epoch" in cb.stopping_reason_message
    assert "epoch 6" in cb.stopping_reason_message


def test_di_saturation_without_decay_never_stops(make_trainer: Callable[..., L.Trainer]) -> None:
    cb = DISaturationStopping()
    _, module = fit(make_trainer, [1.0, 1.0, 1.0, 1.0, 1.0], [cb], max_epochs=5)
    assert epochs_run(module) == [0, 1, 2, 3, 4]
    assert cb.stopping_reason is DISaturationReason.NOT_STOPPED
    assert cb.stopped_epoch == 0
    assert cb.stopping_reason_message is None


def test_di_saturation_min_decays_zero_is_early_stopping(
    make_trainer: Callable[..., L.Trainer],
) -> None:
    cb = DISaturationStopping(min_decays=0, patience=2)
    _, module = fit(make_trainer, [1, 2, 2, 3, 3, 3, 3], [cb], max_epochs=10)
    assert cb.stopped_epoch == 5
    assert epochs_run(module) == list(range(6))
    assert cb.stopping_reason is DISaturationReason.SATURATED


def test_di_saturation_min_decays_two_ignores_first_decay(
    make_trainer: Callable[..., L.Trainer],
) -> None:
    cb = DISaturationStopping(min_decays=2)
    fit(make_trainer, [1, 2, 2, 2, 2, 2, 2], [cb], max_epochs=10, step_size=2)
    # decays first in effect at epochs 2 and 4; only the second one arms the rule
    assert cb.lr_drop_epochs == [2, 4]
    assert cb.stopped_epoch == 4


def test_di_saturation_patience_counts_epochs_after_decay(
    make_trainer: Callable[..., L.Trainer],
) -> None:
    cb = DISaturationStopping(patience=2)
    # decay in effect from epoch 2 (StepLR(2)); epochs 2, 3 do not improve -> stop at 3
    _, module = fit(make_trainer, [1, 2, 2, 2, 2, 2], [cb], max_epochs=10, step_size=2)
    assert cb.stopped_epoch == 3
    assert epochs_run(module) == [0, 1, 2, 3]


@pytest.mark.parametrize("bad", [NAN, math.inf, -math.inf])
def test_di_saturation_non_finite_stops_at_once(
    make_trainer: Callable[..., L.Trainer], bad: float, device: torch.device
) -> None:
    cb = DISaturationStopping()
    _, module = fit(make_trainer, [1.0, 2.0, bad, 3.0], [cb], max_epochs=10)
    assert cb.stopped_epoch == 2
    assert epochs_run(module) == [0, 1, 2]
    assert cb.stopping_reason is DISaturationReason.NON_FINITE_METRIC
    assert cb.stopping_reason_message is not None
    assert "non-finite" in cb.stopping_reason_message
    assert "train/di_epoch" in cb.stopping_reason_message


def test_di_saturation_check_finite_false_ignores_nan(
    make_trainer: Callable[..., L.Trainer],
) -> None:
    cb = DISaturationStopping(check_finite=False)
    _, module = fit(make_trainer, [1.0, NAN, 2.0], [cb], max_epochs=3)
    assert epochs_run(module) == [0, 1, 2]
    assert cb.stopping_reason is DISaturationReason.NOT_STOPPED


# --------------------------------------------------------------------------- both together

PAPER_SCRIPT = [1, 2, 3, 3, 3, 4, 4, 4, 4, 4, 4, 4]
"""Decay after epoch 4 (3, 4 flat); 5 improves; decay after 7 (6, 7 flat); 8 flat -> stop at 8."""


@pytest.mark.parametrize("stop_first", [False, True])
def test_both_callbacks_reproduce_the_paper_rule(
    make_trainer: Callable[..., L.Trainer], stop_first: bool, device: torch.device
) -> None:
    decay = PlateauDecay(patience=2)
    stop = DISaturationStopping()
    callbacks: list[Callback] = [stop, decay] if stop_first else [decay, stop]
    trainer, module = fit(make_trainer, PAPER_SCRIPT, callbacks, max_epochs=30)
    assert decay.decay_epochs == [4, 7]
    assert stop.lr_drop_epochs == [5, 8]
    assert stop.stopped_epoch == 8
    assert stop.stopping_reason is DISaturationReason.SATURATED_AFTER_DECAY
    assert epochs_run(module) == list(range(9))
    lrs = [module.epoch_lrs[e][0] for e in range(9)]
    assert lrs == pytest.approx([1.0] * 5 + [0.1] * 3 + [0.01])
    assert trainer.optimizers[0].param_groups[0]["lr"] == pytest.approx(0.01)


def test_messages_go_to_the_callbacks_logger(
    make_trainer: Callable[..., L.Trainer], caplog: pytest.LogCaptureFixture
) -> None:
    """Each decay and the stop are one INFO record of ``kernel_layers.callbacks``."""
    with caplog.at_level(logging.INFO, logger=LOGGER_NAME):
        fit(make_trainer, PAPER_SCRIPT, [PlateauDecay(patience=2), DISaturationStopping()], 30)
    records = [r for r in caplog.records if r.name == LOGGER_NAME]
    assert [r.getMessage().split(":")[0] for r in records] == [
        "PlateauDecay",
        "PlateauDecay",
        "DISaturationStopping",
    ]
    assert "lr multiplied by 0.1 at the end of epoch 4" in records[0].getMessage()
    assert "stopping training at epoch 8" in records[2].getMessage()


def test_both_callbacks_share_the_monitor_base() -> None:
    for cls in (PlateauDecay, DISaturationStopping):
        assert issubclass(cls, MonitorCallback)
        for name in ("state_key", "state_dict", "load_state_dict"):
            assert name not in vars(cls), f"{cls.__name__} redefines {name}"


def test_decisions_are_reduced_across_ranks(
    make_trainer: Callable[..., L.Trainer], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another rank voting "yes" makes this rank decay and stop too."""
    decay = PlateauDecay(patience=3)
    stop = DISaturationStopping(patience=3)
    module = ScriptedModule([1.0, 2.0, 3.0])
    trainer = make_trainer([decay, stop], max_epochs=5)
    calls: list[tuple[bool, bool]] = []

    def any_rank_says_yes(decision: bool, all: bool = True) -> bool:
        calls.append((bool(decision), all))
        return True

    monkeypatch.setattr(trainer.strategy, "reduce_boolean_decision", any_rank_says_yes)
    trainer.fit(module)
    assert calls and all(not all_ for _, all_ in calls)
    assert (False, False) in calls  # local decisions were "no" and still were reduced
    assert decay.decay_epochs == [0]
    assert stop.stopped_epoch == 0
    assert stop.stopping_reason is DISaturationReason.OTHER_RANK
    assert epochs_run(module) == [0]


# --------------------------------------------------------------------------- checkpoints


def _callbacks() -> list[Callback]:
    return [PlateauDecay(patience=2), DISaturationStopping()]


def _summary(trainer: L.Trainer, callbacks: list[Callback]) -> dict[str, Any]:
    decay, stop = callbacks
    assert isinstance(decay, PlateauDecay) and isinstance(stop, DISaturationStopping)
    return {
        "decay": decay.state_dict(),
        "stop": stop.state_dict(),
        "lr": trainer.optimizers[0].param_groups[0]["lr"],
        "epoch": trainer.current_epoch,
    }


@pytest.mark.filterwarnings("ignore:.*callbacks used to create the checkpoint.*")
def test_resume_from_epoch_checkpoints_continues_exactly(
    make_trainer: Callable[..., L.Trainer], tmp_path: Any
) -> None:
    reference_cbs = _callbacks()
    saver = ModelCheckpoint(dirpath=tmp_path, filename="{epoch}", save_top_k=-1, every_n_epochs=1)
    reference = make_trainer([*reference_cbs, saver], max_epochs=30, enable_checkpointing=True)
    reference_module = ScriptedModule(PAPER_SCRIPT)
    reference.fit(reference_module)
    expected = _summary(reference, reference_cbs)
    assert expected["stop"]["stopped_epoch"] == 8

    # 4: the checkpoint is written right after a decay; 5: inside the window; 6: between decays
    for k in (4, 5, 6):
        cbs = _callbacks()
        module = ScriptedModule(PAPER_SCRIPT)
        trainer = make_trainer(cbs, max_epochs=30)
        trainer.fit(module, ckpt_path=tmp_path / f"epoch={k}.ckpt")
        assert epochs_run(module) == list(range(k + 1, 9)), k
        for e in range(k + 1, 9):
            assert module.epoch_lrs[e] == pytest.approx(reference_module.epoch_lrs[e])
        assert _summary(trainer, cbs) == expected, k


def test_resume_from_save_checkpoint_continues_exactly(
    make_trainer: Callable[..., L.Trainer], tmp_path: Any, device: torch.device
) -> None:
    reference_cbs = _callbacks()
    reference, _ = fit(make_trainer, PAPER_SCRIPT, reference_cbs, max_epochs=30)
    expected = _summary(reference, reference_cbs)

    first_cbs = _callbacks()
    first, _ = fit(
        make_trainer, PAPER_SCRIPT, first_cbs, max_epochs=5
    )  # decay at the end of epoch 4
    ckpt = tmp_path / "interrupted.ckpt"
    first.save_checkpoint(ckpt)
    saved = torch.load(ckpt, weights_only=True)  # plain types only
    assert first_cbs[0].state_key in saved["callbacks"]
    assert first_cbs[1].state_key in saved["callbacks"]

    cbs = _callbacks()
    trainer = make_trainer(cbs, max_epochs=30)
    trainer.fit(ScriptedModule(PAPER_SCRIPT), ckpt_path=ckpt)
    assert _summary(trainer, cbs) == expected


def test_resume_inside_cooldown_continues_exactly(
    make_trainer: Callable[..., L.Trainer], tmp_path: Any
) -> None:
    reference = PlateauDecay(patience=1, cooldown=2)
    fit(make_trainer, [1.0] * 10, [reference], max_epochs=10)
    assert reference.decay_epochs == [1, 4, 7]

    first = PlateauDecay(patience=1, cooldown=2)
    trainer, _ = fit(make_trainer, [1.0] * 10, [first], max_epochs=3)  # one cooldown epoch left
    assert first.cooldown_counter == 1
    trainer.save_checkpoint(tmp_path / "cooldown.ckpt")
    resumed = PlateauDecay(patience=1, cooldown=2)
    trainer = make_trainer([resumed], max_epochs=10)
    trainer.fit(ScriptedModule([1.0] * 10), ckpt_path=tmp_path / "cooldown.ckpt")
    assert resumed.state_dict() == reference.state_dict()
    assert trainer.optimizers[0].param_groups[0]["lr"] == pytest.approx(1e-3)


def test_state_dict_round_trip(make_trainer: Callable[..., L.Trainer]) -> None:
    decay, stop = _callbacks()
    assert isinstance(decay, PlateauDecay) and isinstance(stop, DISaturationStopping)
    fit(make_trainer, PAPER_SCRIPT, [decay, stop], max_epochs=30)
    decay2, stop2 = PlateauDecay(patience=2), DISaturationStopping()
    decay2.load_state_dict(decay.state_dict())
    stop2.load_state_dict(stop.state_dict())
    assert decay2.state_dict() == decay.state_dict()
    assert stop2.state_dict() == stop.state_dict()
    assert decay2.decay_epochs == [4, 7] and decay2.num_decays == 2
    assert stop2.stopping_reason is DISaturationReason.SATURATED_AFTER_DECAY
    assert stop2.stopped_epoch == 8 and stop2.decays_seen == 2


def test_state_keys_depend_on_monitor_and_mode() -> None:
    assert PlateauDecay().state_key == "PlateauDecay{'monitor': 'train/di_epoch', 'mode': 'max'}"
    assert DISaturationStopping(monitor="a", mode="min").state_key == (
        "DISaturationStopping{'monitor': 'a', 'mode': 'min'}"
    )
    assert (
        PlateauDecay(monitor="a", mode="max").state_key
        != PlateauDecay(monitor="b", mode="max").state_key
    )


# --------------------------------------------------------------------------- skipping, errors


@pytest.mark.parametrize("cls", [PlateauDecay, DISaturationStopping])
def test_missing_monitor_raises_or_warns(
    make_trainer: Callable[..., L.Trainer], cls: type[Callback]
) -> None:
    with pytest.raises(RuntimeError, match=r"'nope' is not in .*'train/di_epoch'"):
        fit(make_trainer, [1.0], [cls(monitor="nope", mode="max")], max_epochs=1)
    with pytest.warns(RuntimeWarning, match=f"{cls.__name__}: monitored metric 'nope'"):
        fit(make_trainer, [1.0], [cls(monitor="nope", mode="max", strict=False)], max_epochs=1)


@pytest.mark.parametrize("cls", [PlateauDecay, DISaturationStopping])
def test_skips_sanity_check_and_non_fit(
    make_trainer: Callable[..., L.Trainer], cls: type[Callback]
) -> None:
    cb = cls(monitor="nope", mode="max")
    module = ScriptedModule([1.0])
    trainer = make_trainer([cb], max_epochs=1)
    trainer.state.fn = TrainerFn.FITTING
    trainer.sanity_checking = True
    cb.on_train_epoch_start(trainer, module)
    cb.on_train_epoch_end(trainer, module)  # skipped: no error about the missing key
    trainer.state.fn = TrainerFn.VALIDATING
    trainer.state.stage = RunningStage.TRAINING
    cb.on_train_epoch_end(trainer, module)  # skipped: not fitting
    trainer.state.fn = TrainerFn.FITTING
    trainer.sanity_checking = False
    cb.on_train_epoch_start(trainer, module)  # an epoch this process ran (not a resume)
    with pytest.raises(RuntimeError, match="'nope'"):
        cb.on_train_epoch_end(trainer, module)


def test_fast_dev_run_is_skipped(make_trainer: Callable[..., L.Trainer]) -> None:
    cbs: list[Callback] = [
        PlateauDecay(monitor="nope", mode="max"),
        DISaturationStopping(monitor="nope", mode="max"),
    ]
    module = ScriptedModule([1.0])
    make_trainer(cbs, max_epochs=1, fast_dev_run=True).fit(module)
    assert cbs[0].decay_epochs == []


def test_sanity_check_with_validation_loop_does_not_disturb(
    make_trainer: Callable[..., L.Trainer],
) -> None:
    class WithVal(ScriptedModule):
        def validation_step(self, batch: Any, batch_idx: int) -> None:
            self.log("val/x", 0.0)

        def val_dataloader(self) -> DataLoader:
            return DataLoader(TensorDataset(torch.zeros(2, 1)), batch_size=2)

    decay, stop = PlateauDecay(patience=2), DISaturationStopping()
    trainer = make_trainer([decay, stop], max_epochs=30, num_sanity_val_steps=1)
    trainer.fit(WithVal(PAPER_SCRIPT))
    assert decay.decay_epochs == [4, 7]
    assert stop.stopped_epoch == 8


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"monitor": ""}, ValueError, "argument 'monitor' must be a non-empty str, got ''"),
        ({"monitor": 3}, TypeError, "argument 'monitor' must be a non-empty str, got 3"),
        ({"mode": "up"}, ValueError, r"argument 'mode' must be one of \['min', 'max'\], got 'up'"),
        ({"mode": 1}, TypeError, r"argument 'mode' must be one of \['min', 'max'\], got 1"),
        ({"factor": 1.5}, ValueError, r"argument 'factor' must be in \(0, 1\), got 1.5"),
        ({"factor": 0.0}, ValueError, r"argument 'factor' must be in \(0, 1\), got 0.0"),
        ({"factor": 1}, ValueError, r"argument 'factor' must be in \(0, 1\), got 1"),
        ({"factor": True}, TypeError, r"argument 'factor' must be a number in \(0, 1\), got True"),
        (
            {"factor": "0.1"},
            TypeError,
            r"argument 'factor' must be a number in \(0, 1\), got '0.1'",
        ),
        ({"patience": 0}, ValueError, "argument 'patience' must be an integer >= 1, got 0"),
        ({"patience": 2.0}, TypeError, "argument 'patience' must be an integer >= 1, got 2.0"),
        ({"patience": True}, TypeError, "argument 'patience' must be an integer >= 1, got True"),
        ({"threshold": -1e-3}, ValueError, "argument 'threshold' must be a finite number >= 0"),
        ({"threshold": NAN}, ValueError, "argument 'threshold' must be a finite number >= 0"),
        (
            {"threshold_mode": "pct"},
            ValueError,
            r"argument 'threshold_mode' must be one of \['rel', 'abs'\], got 'pct'",
        ),
        ({"cooldown": -1}, ValueError, "argument 'cooldown' must be an integer >= 0, got -1"),
        ({"min_lr": -1.0}, ValueError, "argument 'min_lr' must be a finite number >= 0, got -1.0"),
        ({"min_lr": math.inf}, ValueError, "argument 'min_lr' must be a finite number >= 0"),
        ({"min_lr": "0"}, TypeError, "argument 'min_lr' must be a number >= 0, got '0'"),
        ({"eps": -1.0}, ValueError, "argument 'eps' must be a finite number >= 0, got -1.0"),
        ({"strict": 1}, TypeError, "argument 'strict' must be a bool, got 1"),
        ({"verbose": "yes"}, TypeError, "argument 'verbose' must be a bool, got 'yes'"),
    ],
)
def test_plateau_decay_rejects_bad_arguments(
    kwargs: dict[str, Any], error: type[Exception], match: str
) -> None:
    with pytest.raises(error, match="PlateauDecay: " + match):
        PlateauDecay(**kwargs)


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"monitor": None}, TypeError, "argument 'monitor' must be a non-empty str"),
        ({"mode": "MAX"}, ValueError, r"argument 'mode' must be one of \['min', 'max'\]"),
        ({"patience": 0}, ValueError, "argument 'patience' must be an integer >= 1, got 0"),
        ({"patience": 1.5}, TypeError, "argument 'patience' must be an integer >= 1"),
        ({"threshold": -0.1}, ValueError, "argument 'threshold' must be a finite number"),
        (
            {"threshold_mode": "relative"},
            ValueError,
            r"argument 'threshold_mode' must be one of \['rel', 'abs'\]",
        ),
        ({"min_decays": -1}, ValueError, "argument 'min_decays' must be an integer >= 0"),
        ({"min_decays": None}, TypeError, "argument 'min_decays' must be an integer >= 0"),
        ({"check_finite": 0}, TypeError, "argument 'check_finite' must be a bool"),
        ({"strict": None}, TypeError, "argument 'strict' must be a bool, got None"),
    ],
)
def test_di_saturation_rejects_bad_arguments(
    kwargs: dict[str, Any], error: type[Exception], match: str
) -> None:
    with pytest.raises(error, match="DISaturationStopping: " + match):
        DISaturationStopping(**kwargs)


def test_non_scalar_monitor_raises() -> None:
    logs = {"train/di_epoch": torch.ones(2)}
    with pytest.raises(RuntimeError, match=r"PlateauDecay: .*'train/di_epoch' must be a scalar"):
        read_monitor("PlateauDecay", logs, "train/di_epoch")
    assert read_monitor("PlateauDecay", {"k": torch.tensor([[2.5]])}, "k") == 2.5


def test_public_api() -> None:
    import callbacks

    assert set(callbacks.__all__) >= {"PlateauDecay", "DISaturationStopping"}
    assert issubclass(PlateauDecay, Callback) and issubclass(DISaturationStopping, Callback)


class _EveryOtherValidation(L.LightningModule):
    """Logs ``train/flat`` (constant) every training epoch and ``val/rising`` (higher at
    each epoch) wherever validation runs."""

    def __init__(self) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(torch.zeros(1))

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        self.log("train/flat", 1.0, on_step=False, on_epoch=True)
        return (self.w * batch[0]).sum()

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        self.log("val/rising", float(self.current_epoch))

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=1.0)

    def train_dataloader(self) -> DataLoader:
        return DataLoader(TensorDataset(torch.zeros(4, 1)), batch_size=2)


@pytest.mark.parametrize(
    "schedule",
    [
        {"check_val_every_n_epoch": 1},
        {"check_val_every_n_epoch": 2},
        {"check_val_every_n_epoch": None, "val_check_interval": 6},
    ],
    ids=["every-epoch", "every-2-epochs", "every-6-steps"],
)
def test_a_validation_metric_counts_only_the_epochs_that_validate(
    make_trainer: Callable[..., L.Trainer], schedule: dict[str, Any]
) -> None:
    # Validating every 2 epochs, or every 6 steps of 2-step epochs (epochs 2 and 5): in
    # the epochs without validation val/rising still holds the previous validation's
    # value (or none yet), which is no plateau; train/flat is read every epoch either way
    on_val = PlateauDecay(monitor="val/rising", mode="max", patience=1, verbose=False)
    on_train = PlateauDecay(monitor="train/flat", mode="max", patience=1, verbose=False)
    stop = DISaturationStopping(monitor="val/rising", mode="max", patience=1, min_decays=0)
    trainer = make_trainer(
        callbacks=[on_val, on_train, stop], max_epochs=6, num_sanity_val_steps=0, **schedule
    )
    model = _EveryOtherValidation()
    trainer.fit(model, val_dataloaders=model.train_dataloader())
    assert on_val.decay_epochs == [] and stop.stopping_reason is DISaturationReason.NOT_STOPPED
    assert trainer.current_epoch == 6
    assert on_train.decay_epochs == [1, 2, 3, 4, 5]


@pytest.mark.parametrize("every", [1, 2])
def test_a_validation_metric_without_validation_is_named_when_strict(
    make_trainer: Callable[..., L.Trainer], every: int
) -> None:
    # no validation loader: the metric never comes, whatever check_val_every_n_epoch says
    decay = PlateauDecay(monitor="val/rising", mode="max", patience=1, verbose=False)
    trainer = make_trainer(callbacks=[decay], max_epochs=2, check_val_every_n_epoch=every)
    with pytest.raises(RuntimeError, match=r"PlateauDecay: monitored metric 'val/rising' is not"):
        trainer.fit(_EveryOtherValidation())
