"""Fault tolerance: SIGKILL mid-epoch, resume from ``last``, identical final state.

The runs happen in subprocesses (``tests/resume_script.py``): one uninterrupted, one
killed with SIGKILL between the backward pass and the optimiser step of global step 12
(epoch 2, batch 3 of 5), then resumed with ``ckpt_path="last"`` and
``weights_only=True``. The kill-and-resume run must end bit-identical to the
uninterrupted one: kernel layer, ridge head, optimiser (Adam moments, decayed learning
rates), PlateauDecay / DISaturationStopping state, global step. Each run happens in one
process and under DDP in two (every process killed at the same step).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import lightning as L
import pytest
import torch

from kernel_layers import KernelClassifier, NystromLayer

SCRIPT = Path(__file__).with_name("resume_script.py")
KILL_AT = 12


def _run(out: Path, *args: str, devices: int = 1) -> subprocess.Popen:
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    return subprocess.Popen(
        [sys.executable, str(SCRIPT), str(out), *args, "--devices", str(devices)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
    )


def _wait(proc: subprocess.Popen) -> tuple[int, str]:
    out, _ = proc.communicate(timeout=600)
    return proc.returncode, out


@pytest.fixture(scope="module", params=[1, 2], ids=["one process", "DDP, two processes"])
def runs(
    tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> dict[str, Path]:
    devices = request.param
    root = tmp_path_factory.mktemp("resume")
    plain, killed = root / "plain", root / "killed"
    procs = [
        _run(plain, devices=devices),
        _run(killed, "--kill-at", str(KILL_AT), devices=devices),
    ]  # in parallel
    (rc_plain, log_plain), (rc_killed, log_killed) = (_wait(p) for p in procs)
    assert rc_plain == 0, log_plain
    assert rc_killed == -signal.SIGKILL, log_killed
    assert not (killed / "final.pt").exists()
    rc, log = _wait(_run(killed, "--resume", devices=devices))
    assert rc == 0, log
    assert "Restored all states from the checkpoint" in log
    assert "not resumable" not in log  # the loader's position was restored
    return {"plain": plain, "killed": killed}


def _assert_same(a: object, b: object, where: str) -> None:
    if isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor) and torch.equal(a, b), where
    elif isinstance(a, dict):
        assert isinstance(b, dict) and a.keys() == b.keys(), where
        for key in a:
            _assert_same(a[key], b[key], f"{where}.{key}")
    elif isinstance(a, list | tuple):
        assert isinstance(b, list | tuple) and len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            _assert_same(x, y, f"{where}[{i}]")
    else:
        assert a == b, (where, a, b)


def test_sigkill_mid_epoch_resumes_to_identical_state(runs: dict[str, Path]) -> None:
    plain = torch.load(runs["plain"] / "final.pt", weights_only=True)
    resumed = torch.load(runs["killed"] / "final.pt", weights_only=True)
    _assert_same(plain, resumed, "final")
    # the run exercised the schedule: decays happened and the stopping rule fired
    assert plain["plateau"]["decay_epochs"] and plain["stopping"]["stopped_epoch"] > 0
    assert plain["global_step"] > KILL_AT
    assert plain["model"]["landmarks_initialised"]
    assert plain["optimizer"]["param_groups"][0]["lr"] < 0.05


def test_last_checkpoint_loads_with_weights_only(runs: dict[str, Path]) -> None:
    path = runs["killed"] / "ckpt" / "last.ckpt"
    checkpoint = torch.load(path, weights_only=True)
    assert checkpoint["state_dict"]["kernel_layer.landmarks"].shape == (12, 5)
    model = KernelClassifier.load_from_checkpoint(
        path, kernel_layer=NystromLayer(5, 12, gamma=2.0), weights_only=True
    )
    assert bool(model.landmarks_initialised)
    saved = checkpoint["state_dict"]["kernel_layer.landmarks"]
    assert torch.equal(model.kernel_layer.landmarks, saved)


def test_loading_a_checkpoint_of_another_shape_explains(runs: dict[str, Path]) -> None:
    path = runs["killed"] / "ckpt" / "last.ckpt"
    with pytest.raises(
        ValueError,
        match=r"modules passed to load_from_checkpoint differ from those checkpoint .*last.ckpt"
        r".*kernel_layer.init_args.out_features: checkpoint 12, argument 7",
    ):
        KernelClassifier.load_from_checkpoint(path, kernel_layer=NystromLayer(5, 7, gamma=2.0))
    match = (
        r"KernelClassifier: checkpoint .*last.ckpt' was saved with other settings than the "
        r"model and data it is loaded into: model.kernel_layer.init_args.out_features: "
        r"checkpoint 12, model 7"
    )
    from resume_script import data

    model = KernelClassifier(NystromLayer(5, 7, gamma=2.0), num_classes=3)
    trainer = L.Trainer(
        accelerator="cpu",
        max_epochs=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    with pytest.raises(ValueError, match=match):
        trainer.fit(model, data(), ckpt_path=str(path), weights_only=True)


# ---------------------------------------------------- in-process: limit_train_batches
class _Seen(L.LightningModule):
    """Records the labels (row ids) of every training batch; learns nothing."""

    def __init__(self) -> None:
        super().__init__()
        self.w = torch.nn.Linear(1, 1)
        self.seen: list[list[int]] = []

    def training_step(self, batch, batch_idx):
        self.seen.append(batch[1].tolist())
        return self.w(batch[0][:, :1]).sum() * 0

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.0)


class _Stop(Exception):
    pass


class _StopAt(L.Callback):
    def __init__(self, step: int) -> None:
        self.step = step

    def on_train_batch_start(self, trainer, *args) -> None:
        if trainer.global_step == self.step:
            raise _Stop


def _limited_fit(out: Path, *, stop: int | None = None, resume: bool = False) -> list[list[int]]:
    from lightning.pytorch.callbacks import ModelCheckpoint

    from kernel_layers.data import TensorDataModule

    x = torch.arange(40, dtype=torch.float32)[:, None].repeat(1, 2)
    y = torch.arange(40)  # label = row id
    dm = TensorDataModule(x, y, x[:4], y[:4], num_classes=40, batch_size=8, val_fraction=0.0)
    callbacks: list[L.Callback] = [ModelCheckpoint(out, save_last=True, every_n_train_steps=1)]
    if stop is not None:
        callbacks.append(_StopAt(stop))
    model = _Seen()
    trainer = L.Trainer(
        max_epochs=2,
        limit_train_batches=3,  # 3 of the 5 batches of an epoch
        accelerator="cpu",
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        callbacks=callbacks,
    )
    try:
        trainer.fit(model, dm, ckpt_path="last" if resume else None, weights_only=False)
    except _Stop:
        pass
    return model.seen


def test_resume_after_an_epoch_cut_short_by_limit_train_batches(tmp_path: Path) -> None:
    """The last checkpoint of epoch 0 holds the loader's ``{'epoch': 0, 'batches': 3}``;
    Lightning resumes with epoch 1, whose batches must all be trained on (the count of
    epoch 0 skipped none of them), exactly as in the uninterrupted run."""
    want = _limited_fit(tmp_path / "plain")
    assert len(want) == 6
    first = _limited_fit(tmp_path / "killed", stop=3)  # stops at epoch 1's first batch
    assert first == want[:3]
    second = _limited_fit(tmp_path / "killed", resume=True)
    assert second == want[3:]
