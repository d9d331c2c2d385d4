"""KernelClassifier(approximation_rows=m) logs the kernel approximation errors on
validation, equal to KernelApproximationError computed directly."""

from __future__ import annotations

from collections.abc import Callable

import lightning as L
import pytest
import torch
from sklearn.datasets import make_classification

from kernel_layers import FourierLayer, KernelApproximationError, NystromLayer
from kernel_layers.data import TensorDataModule
from kernel_layers.training.approximation import KernelApproximationLogging
from kernel_layers.training.module import KernelClassifier


def _data() -> TensorDataModule:
    x, y = make_classification(
        n_samples=900, n_features=10, n_informative=6, n_redundant=0, n_classes=3,
        random_state=0,
    )  # fmt: skip
    return TensorDataModule(x[:700], y[:700], x[700:], y[700:], batch_size=32, seed=0)


@pytest.mark.parametrize("layer_cls", [NystromLayer, FourierLayer])
def test_fit_logs_the_errors_of_the_first_validation_rows(
    make_trainer: Callable[..., L.Trainer], device: torch.device, layer_cls: type
) -> None:
    L.seed_everything(0)
    dm = _data()
    layer = layer_cls(10, 24, gamma=0.3, seed=0)
    model = KernelClassifier(layer, num_classes=3, lr=0.05, approximation_rows=50)
    trainer = make_trainer(max_epochs=2)
    trainer.fit(model, dm)
    logged = trainer.callback_metrics
    direct = KernelApproximationError(model.kernel_layer, max_rows=50, norm="both").to(device)
    model.eval()  # as in validation: the maps' eval-mode features (a cached projection)
    with torch.no_grad():
        for x, _ in dm.val_dataloader():  # batches of 32: the rows span two of them
            direct.update(model.embed(x.to(device)))
    want = direct.compute()
    assert direct.kept == 50
    for norm, name in (("fro", "val/kernel_error"), ("spectral", "val/kernel_error_spectral")):
        assert 0 < float(logged[name]) < 1
        assert float(logged[name]) == pytest.approx(float(want[norm]), rel=1e-6)


def test_off_by_default_and_nothing_added_to_the_checkpoint(
    make_trainer: Callable[..., L.Trainer],
) -> None:
    dm = _data()
    plain = KernelClassifier(NystromLayer(10, 24, seed=0), num_classes=3)
    measured = KernelClassifier(NystromLayer(10, 24, seed=0), num_classes=3, approximation_rows=5)
    assert not any(isinstance(c, KernelApproximationLogging) for c in plain.configure_callbacks())
    assert any(isinstance(c, KernelApproximationLogging) for c in measured.configure_callbacks())
    assert list(plain.state_dict()) == list(measured.state_dict())
    trainer = make_trainer(max_epochs=1)
    trainer.fit(plain, dm)
    assert "val/acc" in trainer.callback_metrics
    assert "val/kernel_error" not in trainer.callback_metrics


@pytest.mark.parametrize(
    ("value", "error", "match"),
    [
        (-1, ValueError, "KernelClassifier: argument 'approximation_rows' must be"),
        (2.5, TypeError, "KernelClassifier: argument 'approximation_rows'"),
    ],
)
def test_bad_approximation_rows(value: object, error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        KernelClassifier(NystromLayer(10, 4, seed=0), num_classes=3, approximation_rows=value)
    with pytest.raises(error, match="KernelApproximationLogging: argument 'max_rows'"):
        KernelApproximationLogging(value)  # type: ignore[arg-type]
