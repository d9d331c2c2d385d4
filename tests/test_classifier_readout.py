"""KernelClassifier's read-out: refitted whenever the features it was fitted on changed,
and a rank-truncated Nystrom layer trains and reads out like any other (on every device)."""

from __future__ import annotations

import logging
from collections.abc import Callable

import lightning as L
import pytest
import torch

from kernel_layers import (
    KernelClassifier,
    NystromLayer,
)
from kernel_layers.data import DigitsDataModule


@pytest.fixture(autouse=True)
def _quiet() -> None:
    logging.getLogger("lightning").setLevel(logging.ERROR)


def test_validate_then_test_gives_the_accuracy_of_test_alone(
    make_trainer: Callable[..., L.Trainer], device: torch.device
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
    assert run(True) == pytest.approx(alone, abs=1e-6)  # a stale head scores near chance


def test_read_out_is_refitted_when_the_features_changed(
    make_trainer: Callable[..., L.Trainer], device: torch.device
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


def test_rank_truncated_nystrom_trains_inside_kernel_classifier(
    make_trainer: Callable[..., L.Trainer], device: torch.device
) -> None:
    L.seed_everything(0)
    model = KernelClassifier(NystromLayer(64, 100, gamma=0.02, rank=20), num_classes=10)
    trainer = make_trainer(max_epochs=1)
    trainer.fit(model, DigitsDataModule(batch_size=400))
    assert model.head.weight.shape == (20, 10)
    assert trainer.test(model, DigitsDataModule(batch_size=400), verbose=False)[0]["test/acc"] > 0.8
