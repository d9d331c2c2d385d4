"""Regression tests for the bad-input and odd-sequence findings: each one failed (wrong
answer, lost data, foreign code run, or an error deep inside) before its fix."""

from __future__ import annotations

import errno
import gzip
import logging
import pickle
import signal
import subprocess
import sys
import warnings
from collections.abc import Callable
from pathlib import Path

import lightning as L
import numpy as np
import pytest
import torch
from formats import IDX_NAMES, make_mnist_dir, write_covtype
from lightning.pytorch.callbacks import ModelCheckpoint

from kernel_layers import (
    FourierLayer,
    KernelClassifier,
    NystromLayer,
    discriminant_information,
)
from kernel_layers.callbacks import DISaturationStopping, PlateauDecay
from kernel_layers.data import CovTypeDataModule, DigitsDataModule, MNISTDataModule
from kernel_layers.data.readers import read_idx

F32_MAX = torch.finfo(torch.float32).max


@pytest.fixture(autouse=True)
def _quiet() -> None:
    logging.getLogger("lightning").setLevel(logging.ERROR)


# ------------------------------------------------------------- 1. stale read-out
def test_validate_then_test_gives_the_accuracy_of_test_alone(
    make_trainer: Callable[..., L.Trainer],
) -> None:
    def run(validate_first: bool) -> float:
        L.seed_everything(0)
        model = KernelClassifier(NystromLayer(64, 200, gamma=0.02), num_classes=10)
        dm = DigitsDataModule(batch_size=400)
        trainer = make_trainer()
        if validate_first:
            trainer.validate(model, dm, verbose=False)
        return trainer.test(model, dm, verbose=False)[0]["test/acc"]

    alone = run(False)
    assert alone > 0.95
    assert run(True) == pytest.approx(alone, abs=1e-6)  # was 0.064 with a stale head


def test_read_out_is_refitted_when_the_features_changed(
    make_trainer: Callable[..., L.Trainer],
) -> None:
    L.seed_everything(0)
    model = KernelClassifier(NystromLayer(64, 200, gamma=0.02), num_classes=10)
    dm = DigitsDataModule(batch_size=400)
    trainer = make_trainer()
    first = trainer.test(model, dm, verbose=False)[0]["test/acc"]
    with torch.no_grad():  # new landmarks after the read-out was fitted
        model.kernel_layer.landmarks.copy_(torch.rand_like(model.kernel_layer.landmarks))
    stale_weight = model.head.weight.clone()
    second = trainer.test(model, dm, verbose=False)[0]["test/acc"]
    assert not torch.equal(stale_weight, model.head.weight)  # refitted
    assert first > 0.95 and second > 0.3  # uniform landmarks still give a usable map


# ------------------------------------------------------------- 2. huge values
def test_inputs_near_the_float32_limit_are_refused_by_name() -> None:
    with pytest.raises(
        ValueError,
        match=r"NystromLayer: argument 'x' must have entries with \|value\| <= 4.61e\+18 in "
        r"torch.float32 \(larger ones overflow the squared distances to the landmarks\), "
        r"got max \|value\| = 3e\+38",
    ):
        NystromLayer(4, 8)(torch.full((16, 4), 3e38))
    with pytest.raises(ValueError, match=r"FourierLayer: argument 'x' must have entries with"):
        FourierLayer(4, 8)(torch.full((2, 4), 3e38))
    # The old check summed the entries: the sum overflowed and reported a count of 0.
    with pytest.raises(ValueError, match=r"argument 'x' must be finite, got 1 NaN/Inf"):
        NystromLayer(4, 8)(torch.tensor([[F32_MAX, F32_MAX, 1.0, float("inf")]]))


def test_float64_layers_take_large_inputs() -> None:
    x = torch.full((3, 4), 1e30, dtype=torch.float64)
    out = NystromLayer(4, 8, dtype=torch.float64)(x)
    assert torch.isfinite(out).all()


def test_fourier_gamma_that_overflows_the_frequencies_is_refused() -> None:
    with pytest.raises(
        ValueError,
        match=r"FourierLayer: argument 'gamma' must keep the phases x W of inputs in \[0, 1\] "
        r"finite in torch.float32, got gamma=1e\+300",
    ):
        FourierLayer(4, 8, gamma=1e300)
    wide = FourierLayer(4, 8, gamma=1e300, dtype=torch.float64)
    assert torch.isfinite(wide(torch.rand(2, 4, dtype=torch.float64))).all()


def test_di_of_huge_float32_features_is_correct() -> None:
    gen = torch.Generator().manual_seed(0)
    x, y = torch.rand(100, 20, generator=gen), torch.randint(0, 3, (100,), generator=gen)
    reference = discriminant_information((x * 1e19).double(), y).item()
    value = discriminant_information(x * 1e19, y).item()  # was 0 in float32
    assert value == pytest.approx(reference, abs=1e-4)


# ------------------------------------------------------------- 3. conditioning
@pytest.mark.parametrize(
    ("batch", "width", "form"),
    [(50, 500, "dual"), (50, 500, "primal"), (1000, 100, "primal"), (600, 300, "auto")],
)
def test_float32_di_of_nearly_rank_deficient_features_matches_float64(
    batch: int, width: int, form: str
) -> None:
    gen = torch.Generator().manual_seed(0)
    low_rank = torch.randn(batch, 5, generator=gen, dtype=torch.float64) @ torch.randn(
        5, width, generator=gen, dtype=torch.float64
    )
    x = low_rank + 1e-3 * torch.randn(batch, width, generator=gen, dtype=torch.float64)
    y = torch.randint(0, 10, (batch,), generator=gen)
    reference = discriminant_information(x, y, form=form).item()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no jitter warning either: the Gram is exact
        value = discriminant_information(x.float(), y, form=form).item()
    assert abs(value - reference) < 1e-3  # was 8.66 (dual) / 0.92 (primal) vs 7.54


def test_well_conditioned_float32_features_keep_float32_products(monkeypatch) -> None:
    from kernel_layers import objectives

    factors = []
    original = objectives._factor

    def spy(scatter, ridge, dtype, owner):
        factor = original(scatter, ridge, dtype, owner)
        factors.append(None if factor is None else factor.dtype)
        return factor

    monkeypatch.setattr(objectives, "_factor", spy)
    dm = DigitsDataModule()
    x, y = dm.train_features()[:1000], dm.train_targets()[:1000]
    for layer in (FourierLayer(64, 300, gamma=0.02, seed=0), NystromLayer(64, 300, gamma=0.02)):
        with torch.no_grad():
            discriminant_information(layer(x), y)
    # Both keep the float32 Gram (None would mean it was redone in float64); Fourier's
    # round-off estimate also allows a float32 factor, the Nystrom features' does not.
    assert factors == [torch.float32, torch.float64]


# ------------------------------------------------------------- 4. silent truncation
@pytest.mark.parametrize("seed", [1.5, True, "1"])
def test_non_integer_seed_is_refused(seed: object) -> None:
    with pytest.raises(TypeError, match=r"argument 'seed' must be an integer >= 0"):
        FourierLayer(4, 8, seed=seed)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"argument 'seed' must be an integer >= 0"):
        NystromLayer(4, 8, seed=seed)  # type: ignore[arg-type]


def test_float_idx_labels_are_refused(tmp_path: Path) -> None:
    make_mnist_dir(tmp_path)
    labels = tmp_path / IDX_NAMES[1]
    values = np.arange(50, dtype=">f4") % 10 + 0.5
    labels.write_bytes(bytes([0, 0, 0x0D, 1]) + (50).to_bytes(4, "big") + values.tobytes())
    with pytest.raises(
        ValueError,
        match=r"MNISTDataModule: '.*train-labels-idx1-ubyte' must hold integer labels .*"
        r"got dtype float32",
    ):
        MNISTDataModule(tmp_path, download=False, val_fraction=0.0).setup()


# ------------------------------------------------------------- 7, 8. files and shapes
def test_truncated_gzip_names_the_file(tmp_path: Path) -> None:
    make_mnist_dir(tmp_path, gz=True)
    path = tmp_path / (IDX_NAMES[0] + ".gz")
    path.write_bytes(path.read_bytes()[:200])
    with pytest.raises(
        ValueError, match=r"'.*train-images-idx3-ubyte.gz' is a truncated or corrupt"
    ):
        read_idx(path)
    path.write_bytes(b"\x1f\x8b" + b"garbage" * 10)
    with pytest.raises(ValueError, match=r"train-images-idx3-ubyte.gz' is a truncated or corrupt"):
        MNISTDataModule(tmp_path, download=False).setup()


def test_corrupt_covtype_gzip_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "covtype.data.gz"
    write_covtype(path, n=50)
    path.write_bytes(path.read_bytes()[:100])
    with pytest.raises(ValueError, match=r"covtype.data.gz' is a truncated or corrupt gzip"):
        CovTypeDataModule(tmp_path, download=False).setup()


def test_idx_file_with_zero_images_is_refused(tmp_path: Path) -> None:
    make_mnist_dir(tmp_path)
    (tmp_path / IDX_NAMES[0]).write_bytes(bytes([0, 0, 8, 3]) + b"\0\0\0\0" + b"\0\0\0\x1c" * 2)
    with pytest.raises(ValueError, match=r"must hold at least one image, got 0"):
        MNISTDataModule(tmp_path, download=False).setup()


@pytest.mark.parametrize("cls", [NystromLayer, FourierLayer])
def test_meta_wrong_device_and_wrong_width_inputs_fail_at_the_first_call(cls: type) -> None:
    name = cls.__name__
    with pytest.raises(ValueError, match=rf"{name}: argument 'x' must have last dimension 4"):
        cls(4, 8)(torch.rand(3, 5))
    with pytest.raises(ValueError, match=rf"{name}: argument 'x' must hold data, got a meta"):
        cls(4, 8)(torch.rand(3, 4, device="meta"))
    layer = cls(4, 8)
    layer.to("meta")
    with pytest.raises(
        ValueError, match=rf"{name}: argument 'x' must be on the layer's device meta, got cpu"
    ):
        layer(torch.rand(3, 4))


def test_rank_truncated_nystrom_trains_inside_kernel_classifier(
    make_trainer: Callable[..., L.Trainer],
) -> None:
    L.seed_everything(0)
    model = KernelClassifier(NystromLayer(64, 100, gamma=0.02, rank=20), num_classes=10)
    trainer = make_trainer(max_epochs=1)
    trainer.fit(model, DigitsDataModule(batch_size=400))
    assert model.head.weight.shape == (20, 10)
    assert trainer.test(model, DigitsDataModule(batch_size=400), verbose=False)[0]["test/acc"] > 0.8


# ------------------------------------------------------------- 9. older callback states
@pytest.mark.parametrize("cls", [PlateauDecay, DISaturationStopping])
def test_callback_state_without_every_key_loads_with_defaults(cls: type) -> None:
    callback = cls()
    callback.load_state_dict({"best_score": 3.5})
    assert callback.best_score == 3.5
    assert callback.wait_count == 0
    callback.load_state_dict({})
    assert callback.state_dict() == {**cls().state_dict(), "best_score": 3.5}


# ------------------------------------------------------------- 5. no code from a data folder
class _Payload:
    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self):  # unpickling writes a marker file: the code ran
        return (Path.write_text, (Path(self.marker), "ran"))


def test_sklearn_cache_pickle_in_the_data_folder_is_never_unpickled(tmp_path: Path) -> None:
    marker = tmp_path / "marker"
    cache = tmp_path / "covertype"
    cache.mkdir()
    for name in ("samples_py3", "targets_py3"):
        with open(cache / name, "wb") as fh:
            pickle.dump(_Payload(str(marker)), fh)
    with pytest.raises(
        ValueError,
        match=r"CovTypeDataModule: refusing to read scikit-learn's pickled cache "
        r"'.*covertype' \(loading a pickle can run code",
    ):
        CovTypeDataModule(tmp_path, download=False).setup()
    assert not marker.exists()
    write_covtype(tmp_path / "covtype.data.gz", n=60)  # the CSV beside it is read instead
    dm = CovTypeDataModule(tmp_path, download=False, val_fraction=0.0)
    dm.setup()
    assert not marker.exists() and len(dm.train_dataset) + len(dm.test_dataset) == 60


def test_gzip_helper_round_trip(tmp_path: Path) -> None:
    """The test's own helper writes real gzip (guards the truncation tests above)."""
    path = tmp_path / "x.gz"
    with gzip.open(path, "wb") as fh:
        fh.write(b"abc")
    assert gzip.decompress(path.read_bytes()) == b"abc"


# ------------------------------------------------------------- 6. unwritable checkpoints
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


# ------------------------------------------------------------- 10. divergence
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


# ------------------------------------------------------------- 13. atomic checkpoints
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
