"""Batch augmentation of the image data modules: shifts and flips against a loop
reference, seeding, the training-only hook, argument errors and a short fit."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
import torch
from formats import make_mnist_dir
from lightning.pytorch import Callback, LightningModule, Trainer

from kernel_layers import KernelClassifier, NystromLayer
from kernel_layers.data import FashionMNISTDataModule, MNISTDataModule
from kernel_layers.data.augment import ShiftFlip, draw_shift_flip, shift_flip, step_generator
from kernel_layers.training.backbones import SmallCNN


def _reference(x: np.ndarray, dy: np.ndarray, dx: np.ndarray, flip: np.ndarray) -> np.ndarray:
    """Pixel by pixel: output (i, j) = (mirrored) input (i - dy, j - dx), else 0."""
    out = np.zeros_like(x)
    _, _, height, width = x.shape
    for b in range(len(x)):
        source = x[b, :, :, ::-1] if flip[b] else x[b]
        for i in range(height):
            for j in range(width):
                si, sj = i - dy[b], j - dx[b]
                if 0 <= si < height and 0 <= sj < width:
                    out[b, :, i, j] = source[:, si, sj]
    return out


def test_shift_flip_matches_pixel_loop() -> None:
    rng = np.random.default_rng(0)
    x = rng.random((7, 2, 5, 6)).astype(np.float32)
    dy = np.array([0, 1, -2, 2, 0, -1, 3])
    dx = np.array([0, -1, 2, 0, 3, 1, -3])
    flip = np.array([0, 1, 0, 1, 1, 0, 1], bool)
    params = ShiftFlip(torch.from_numpy(dy), torch.from_numpy(dx), torch.from_numpy(flip))
    out = shift_flip(torch.from_numpy(x), params)
    assert out.shape == x.shape and out.is_contiguous()
    np.testing.assert_array_equal(out.numpy(), _reference(x, dy, dx, flip))


def test_zero_shift_no_flip_is_identity() -> None:
    x = torch.rand(4, 1, 28, 28)
    params = draw_shift_flip(4, 0, False, step_generator(0, 0))
    assert torch.equal(shift_flip(x, params), x)


def test_draws_cover_range_and_are_seeded_by_step_and_rank() -> None:
    p = draw_shift_flip(4000, 2, True, step_generator(3, 10))
    assert set(p.dy.tolist()) == {-2, -1, 0, 1, 2} == set(p.dx.tolist())
    assert 0.45 < p.flip.float().mean().item() < 0.55
    q = draw_shift_flip(4000, 2, True, step_generator(3, 10))
    assert torch.equal(p.dy, q.dy) and torch.equal(p.flip, q.flip)
    r = draw_shift_flip(4000, 2, True, step_generator(3, 11))
    s = draw_shift_flip(4000, 2, True, step_generator(3, 10, rank=1))
    assert not torch.equal(p.dy, r.dy) and not torch.equal(p.dy, s.dy)
    assert not draw_shift_flip(100, 1, False, step_generator(0, 0)).flip.any()


def _hooked(dm, training: bool, step: int = 0):
    dm.trainer = SimpleNamespace(training=training, global_step=step, global_rank=0)
    return dm


@pytest.mark.parametrize("flatten", [False, True])
def test_hook_augments_training_batches_only(tmp_path: Path, flatten: bool) -> None:
    make_mnist_dir(tmp_path)
    dm = FashionMNISTDataModule(
        tmp_path,
        flatten=flatten,
        download=False,
        batch_size=8,
        augment_shift=2,
        augment_flip=True,
    )
    dm.setup()
    x, y = next(iter(dm.train_dataloader()))
    out = _hooked(dm, training=True, step=4).on_after_batch_transfer([x, y], 0)
    images = x.reshape(8, 1, 28, 28)
    params = draw_shift_flip(8, 2, True, step_generator(0, 4))
    expected = _reference(images.numpy(), params.dy.numpy(), params.dx.numpy(), params.flip.numpy())
    assert out[0].shape == x.shape and out[1] is y
    np.testing.assert_array_equal(out[0].reshape(8, 1, 28, 28).numpy(), expected)
    assert not torch.equal(out[0], x)
    same = _hooked(dm, training=False).on_after_batch_transfer([x, y], 0)
    assert same[0] is x


def test_hook_is_off_by_default(tmp_path: Path) -> None:
    make_mnist_dir(tmp_path)
    dm = MNISTDataModule(tmp_path, download=False, batch_size=8)
    dm.setup()
    x, y = next(iter(dm.train_dataloader()))
    assert _hooked(dm, training=True).on_after_batch_transfer([x, y], 0)[0] is x


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"augment_shift": -1}, ValueError, r"argument 'augment_shift' must be .*>= 0.*-1"),
        (
            {"augment_shift": 28},
            ValueError,
            r"'augment_shift' must be below the image side 28, got 28",
        ),
        ({"augment_shift": 1.5}, TypeError, r"argument 'augment_shift'"),
        ({"augment_flip": 1}, TypeError, r"argument 'augment_flip' must be a bool, got 1"),
    ],
)
def test_bad_augment_arguments(tmp_path: Path, kwargs: dict, error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        MNISTDataModule(tmp_path, download=False, **kwargs)


class _Record(Callback):
    """Keeps every training batch as the model receives it (after the transfer hook)."""

    def __init__(self) -> None:
        self.batches: list[list[torch.Tensor]] = []

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        self.batches.append([t.detach().clone() for t in batch[:2]])


def _fit(root: Path, augment: bool) -> list[list[torch.Tensor]]:
    torch.manual_seed(0)
    dm = FashionMNISTDataModule(
        root,
        flatten=False,
        download=False,
        batch_size=16,
        augment_shift=2 if augment else 0,
        augment_flip=augment,
    )
    model = KernelClassifier(
        NystromLayer(16, 12, gamma=0.1),
        num_classes=10,
        backbone=SmallCNN(1, 16, width=4),
        lr=1e-2,
    )
    record = _Record()
    _trainer(root, record, max_epochs=2).fit(model, dm)
    return record.batches


def _trainer(root: Path, record: Callback, **options: Any) -> Trainer:
    """A quiet CPU trainer that records the training batches with ``record``."""
    return Trainer(
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        callbacks=[record],
        default_root_dir=root,
        accelerator="cpu",
        **options,
    )


def test_fit_trains_on_the_augmented_batches(tmp_path: Path) -> None:
    """In a fit, step k's batch is the plain run's batch k shifted and flipped with the
    draws of ``(seed 0, step k)``: the hook runs in training, seeded by the step."""
    make_mnist_dir(tmp_path)
    plain, augmented = _fit(tmp_path, False), _fit(tmp_path, True)
    assert len(plain) == len(augmented) == 4  # 45 training rows, batches of 16, last dropped
    for step, ((x, y), (xa, ya)) in enumerate(zip(plain, augmented, strict=True)):
        assert torch.equal(y, ya)
        params = draw_shift_flip(len(x), 2, True, step_generator(0, step))
        assert torch.equal(xa, shift_flip(x, params)) and not torch.equal(xa, x)


def _old_step_generator(seed: int, step: int, rank: int = 0) -> torch.Generator:
    """The draws of releases before micro-batch seeding, pinned for the recorded runs."""
    entropy = np.random.SeedSequence([seed, step, rank]).generate_state(1, np.uint64)[0]
    return torch.Generator().manual_seed(int(entropy) & ((1 << 63) - 1))


class _Plain(LightningModule):
    """Learns nothing: the recorded batches are the whole point."""

    def __init__(self) -> None:
        super().__init__()
        self.w = torch.nn.Linear(1, 1)

    def training_step(self, batch, batch_idx):
        return (self.w.weight * 0).sum()

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.0)


def _fit_accumulating(root: Path, augment: bool, accumulate: int) -> list[list[torch.Tensor]]:
    dm = MNISTDataModule(
        root,
        flatten=False,
        download=False,
        batch_size=8,
        val_fraction=0.0,
        augment_shift=3 if augment else 0,
    )
    record = _Record()
    _trainer(root, record, max_epochs=1, accumulate_grad_batches=accumulate).fit(_Plain(), dm)
    return record.batches


@pytest.mark.parametrize("accumulate", [1, 2])
def test_each_accumulated_micro_batch_gets_its_own_draws(tmp_path: Path, accumulate: int) -> None:
    """With ``accumulate_grad_batches=2`` the two batches of a step (same global step) are
    shifted with different draws: the first with the step's, the second with those of
    micro-batch 1. Without accumulation every batch keeps the step's draws of before."""
    make_mnist_dir(tmp_path)
    plain = _fit_accumulating(tmp_path, False, accumulate)
    augmented = _fit_accumulating(tmp_path, True, accumulate)
    assert len(plain) == len(augmented) == 6  # 50 rows, batches of 8, last dropped
    for k, ((x, y), (xa, ya)) in enumerate(zip(plain, augmented, strict=True)):
        assert torch.equal(y, ya)
        step, micro = divmod(k, accumulate)
        step_draws = draw_shift_flip(len(x), 3, False, _old_step_generator(0, step))
        if micro == 0:  # the first micro-batch (every batch without accumulation): as before
            assert torch.equal(xa, shift_flip(x, step_draws))
        else:
            assert not torch.equal(xa, shift_flip(x, step_draws))  # the old code's
            own = draw_shift_flip(len(x), 3, False, step_generator(0, step, micro_batch=micro))
            assert torch.equal(xa, shift_flip(x, own))
