"""Checkpoints under faults: an unwritable folder fails before the first step, a diverging
run keeps its good checkpoints, a full disk or a kill while writing leaves the previous
checkpoint whole, and the fit resumes from it."""

from __future__ import annotations

import errno
import logging
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import lightning as L
import pytest
import torch
from hostile import serve, write_code_running_checkpoint
from lightning.pytorch.callbacks import ModelCheckpoint

from kernel_layers import (
    FourierLayer,
    KernelClassifier,
    NystromLayer,
)
from kernel_layers.callbacks import DISaturationStopping, PlateauDecay
from kernel_layers.data import DigitsDataModule


@pytest.fixture(autouse=True)
def _quiet() -> None:
    logging.getLogger("lightning").setLevel(logging.ERROR)


def test_unwritable_checkpoint_dir_fails_before_the_first_step(
    tmp_path: Path, make_trainer: Callable[..., L.Trainer]
) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("a file where the checkpoint directory should be")
    model = KernelClassifier(NystromLayer(64, 100, gamma=0.02), num_classes=10)
    trainer = make_trainer(
        max_epochs=1,
        callbacks=[ModelCheckpoint(dirpath=blocker / "ckpt", save_last=True)],
        enable_checkpointing=True,
    )
    with pytest.raises(
        PermissionError,
        match=r"KernelClassifier: ModelCheckpoint's dirpath '.*not-a-dir/ckpt' must be a "
        r"writable directory",
    ):
        trainer.fit(model, DigitsDataModule(batch_size=400))
    assert trainer.global_step == 0  # no step was taken, so no work was lost


@pytest.mark.parametrize("layer_cls", [NystromLayer, FourierLayer])
def test_diverging_run_stops_with_a_reason_and_keeps_good_checkpoints(
    layer_cls: type, tmp_path: Path, make_trainer: Callable[..., L.Trainer]
) -> None:
    L.seed_everything(0)
    model = KernelClassifier(layer_cls(64, 100, gamma=0.02), num_classes=10, lr=1e37)
    checkpoint = ModelCheckpoint(dirpath=tmp_path, save_last=True)
    trainer = make_trainer(
        max_epochs=3,
        callbacks=[checkpoint, PlateauDecay(), DISaturationStopping()],
        enable_checkpointing=True,
    )
    with pytest.warns(UserWarning, match=r"training diverged at epoch 0, batch 0: the optimiser"):
        trainer.fit(model, DigitsDataModule(batch_size=400))
    assert model.stop_reason is not None and "is the learning rate too large?" in model.stop_reason
    assert trainer.current_epoch == 1  # stopped in the first epoch, without a crash
    for value in model.kernel_layer.parameters():  # the last good ones: data-sized, not 1e37
        assert torch.isfinite(value).all() and value.abs().max() < 10
    saved = torch.load(tmp_path / "last.ckpt", weights_only=True)["state_dict"]
    tensors = [v for v in saved.values() if torch.is_tensor(v) and v.is_floating_point()]
    assert all(torch.isfinite(v).all() and v.abs().max() < 1e6 for v in tensors)
    KernelClassifier.load_from_checkpoint(tmp_path / "last.ckpt")  # loads, and is usable


def test_full_disk_while_checkpointing_keeps_the_last_good_one(
    tmp_path: Path, make_trainer: Callable[..., L.Trainer], monkeypatch: pytest.MonkeyPatch
) -> None:
    from kernel_layers.training import checkpoint_io

    L.seed_everything(0)
    model = KernelClassifier(NystromLayer(64, 100, gamma=0.02), num_classes=10, lr=1e-2)
    checkpoint = ModelCheckpoint(dirpath=tmp_path, save_last=True, save_top_k=-1)
    trainer = make_trainer(max_epochs=3, callbacks=[checkpoint], enable_checkpointing=True)
    real_save, calls = torch.save, []

    def full_disk(obj, fh):  # epoch 1's last.ckpt (4th write) hits a full disk half way
        calls.append(1)
        real_save(obj, fh)
        if len(calls) >= 4:
            raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(checkpoint_io.torch, "save", full_disk)
    with pytest.raises(
        OSError,
        match=r"could not write the checkpoint '.*' \(No space left on device\); the previous "
        r"checkpoint there is kept",
    ):
        trainer.fit(model, DigitsDataModule(batch_size=400))
    monkeypatch.undo()
    saved = torch.load(tmp_path / "last.ckpt", weights_only=True)
    assert saved["epoch"] == 0  # the first epoch's checkpoint, complete
    assert not list(tmp_path.glob(".*.tmp-*"))  # no partial file left behind


KILL_SCRIPT = """
import os, signal, sys
import lightning as L, torch
from lightning.pytorch.callbacks import ModelCheckpoint
from kernel_layers import KernelClassifier, NystromLayer
from kernel_layers.data import DigitsDataModule
from kernel_layers.training import checkpoint_io

real_save, calls = torch.save, []
def killed_while_writing(obj, fh):
    calls.append(1)
    if len(calls) == 4:  # epoch 1's last.ckpt (4th write): half written, then SIGKILL
        fh.write(b"partial checkpoint bytes")
        fh.flush()
        os.kill(os.getpid(), signal.SIGKILL)
    real_save(obj, fh)
checkpoint_io.torch.save = killed_while_writing
L.seed_everything(0)
model = KernelClassifier(NystromLayer(64, 100, gamma=0.02), num_classes=10, lr=1e-2)
trainer = L.Trainer(max_epochs=3, logger=False, enable_progress_bar=False,
                    callbacks=[ModelCheckpoint(dirpath=sys.argv[1], save_last=True, save_top_k=-1)])
trainer.fit(model, DigitsDataModule(batch_size=400))
"""


def test_fit_killed_while_writing_a_checkpoint_resumes_from_the_previous_one(
    tmp_path: Path, make_trainer: Callable[..., L.Trainer]
) -> None:
    done = subprocess.run(
        [sys.executable, "-c", KILL_SCRIPT, str(tmp_path)], capture_output=True, timeout=300
    )
    assert done.returncode == -signal.SIGKILL, done.stderr.decode()[-2000:]
    saved = torch.load(tmp_path / "last.ckpt", weights_only=True)  # complete, not partial
    assert saved["epoch"] == 0
    model = KernelClassifier.load_from_checkpoint(tmp_path / "last.ckpt")
    trainer = make_trainer(max_epochs=2)
    trainer.fit(model, DigitsDataModule(batch_size=400), ckpt_path=tmp_path / "last.ckpt")
    assert trainer.current_epoch == 2


# ------------------------------------------------------------- checkpoint sources
@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[Path, str]]:
    """A loopback HTTP server of ``tmp_path/www``; yields ``(folder, base URL)``."""
    folder = tmp_path / "www"
    folder.mkdir()
    with serve(folder) as base:
        yield folder, base


REFUSED = r"checkpoint 'http://127\.0\.0\.1:\d+/evil\.ckpt' refused: it holds Python objects"


def test_trainer_test_with_a_checkpoint_url_runs_no_code(
    served: tuple[Path, str], tmp_path: Path, make_trainer: Callable[..., L.Trainer]
) -> None:
    folder, base = served
    marker = tmp_path / "marker"
    write_code_running_checkpoint(folder / "evil.ckpt", marker)
    model = KernelClassifier(NystromLayer(64, 20, gamma=0.02), num_classes=10)
    with pytest.raises(ValueError, match=REFUSED):
        make_trainer().test(model, DigitsDataModule(batch_size=400), ckpt_path=f"{base}/evil.ckpt")
    assert not marker.exists()
    with pytest.raises(ValueError, match=REFUSED):
        KernelClassifier.load_from_checkpoint(f"{base}/evil.ckpt")
    assert not marker.exists()


def test_weights_only_false_is_refused(
    served: tuple[Path, str], tmp_path: Path, make_trainer: Callable[..., L.Trainer]
) -> None:
    folder, base = served
    marker = tmp_path / "marker"
    write_code_running_checkpoint(folder / "evil.ckpt", marker)
    model = KernelClassifier(NystromLayer(64, 20, gamma=0.02), num_classes=10)
    weights = r"argument 'weights_only' must be True or None .*got False"
    with pytest.raises(ValueError, match=r"AtomicCheckpointIO: " + weights):
        make_trainer().test(
            model,
            DigitsDataModule(batch_size=400),
            ckpt_path=f"{base}/evil.ckpt",
            weights_only=False,
        )
    with pytest.raises(ValueError, match=r"KernelClassifier: " + weights):
        KernelClassifier.load_from_checkpoint(f"{base}/evil.ckpt", weights_only=False)
    assert not marker.exists()


def test_a_good_checkpoint_url_loads(
    served: tuple[Path, str], make_trainer: Callable[..., L.Trainer]
) -> None:
    folder, base = served
    dm = DigitsDataModule(batch_size=400)
    model = KernelClassifier(NystromLayer(64, 20, gamma=0.02), num_classes=10, lr=1e-2)
    trainer = make_trainer(max_epochs=1)
    trainer.fit(model, dm)
    trainer.save_checkpoint(folder / "good.ckpt")
    loaded = KernelClassifier.load_from_checkpoint(f"{base}/good.ckpt")
    assert torch.equal(loaded.kernel_layer.landmarks, model.kernel_layer.landmarks)
    fresh = KernelClassifier(NystromLayer(64, 20, gamma=0.02), num_classes=10, lr=1e-2)
    url_acc = make_trainer().test(fresh, dm, ckpt_path=f"{base}/good.ckpt", verbose=False)
    own_acc = make_trainer().test(model, dm, verbose=False)
    assert url_acc[0]["test/acc"] == own_acc[0]["test/acc"]
