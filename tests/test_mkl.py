"""Multiple kernel learning: per-channel Fourier maps and a group-lasso read-out."""

from __future__ import annotations

from collections.abc import Callable

import lightning as L
import pytest
import torch

from kernel_layers import FourierLayer, KernelClassifier, NystromLayer
from kernel_layers.data import TensorDataModule


def _channels(n: int = 1200) -> tuple[TensorDataModule, list[bool]]:
    """Four 5-dim channels; channels 0 and 2 carry the class, 1 and 3 are pure noise."""
    gen = torch.Generator().manual_seed(0)
    y = torch.arange(n) % 3
    informative = [True, False, True, False]
    parts = []
    for useful in informative:
        x = torch.rand(n, 5, generator=gen)
        if useful:
            signal = y[:, None].float() / 2 + 0.15 * torch.randn(n, 2, generator=gen)
            x[:, :2] = signal.clamp(0, 1)
        parts.append(x)
    x = torch.cat(parts, 1)
    dm = TensorDataModule(x[:1000], y[:1000], x[1000:], y[1000:], batch_size=200, val_fraction=0.0)
    return dm, informative


def test_separable_layer_maps_each_channel_on_its_own() -> None:
    layer = FourierLayer(6, 7, ard=True, blocks=[2, 2, 2], separable=True, seed=0)
    assert layer.feature_blocks == [range(0, 3), range(3, 5), range(5, 7)]
    x = torch.rand(4, 6)
    moved = x.clone()
    moved[:, 2:4] += 1.0  # channel 1 only
    changed = (layer(x) - layer(moved)).abs().sum(0) > 0
    assert changed.tolist() == [False, False, False, True, True, False, False]
    assert layer.get_config()["separable"] is True


@pytest.mark.parametrize("objective", ["ce", "ls"])
def test_group_lasso_drops_exactly_the_noise_channels(
    objective: str, make_trainer: Callable[..., L.Trainer]
) -> None:
    dm, informative = _channels()
    L.seed_everything(0)
    layer = FourierLayer(20, 80, gamma=1.0, ard=True, blocks=[5] * 4, separable=True, seed=0)
    model = KernelClassifier(layer, num_classes=3, objective=objective, lr=0.05, group_lasso=1e-2)
    trainer = make_trainer(max_epochs=60)
    trainer.fit(model, dm)
    norms = model.block_norms()
    assert norms.shape == (4,)
    for norm, useful in zip(norms.tolist(), informative, strict=True):
        assert (norm > 0.1) if useful else (norm == 0.0)  # exactly zero, not small
    assert trainer.logged_metrics["train/active_blocks"] == 2
    assert trainer.logged_metrics["block_norm/1"] == 0.0
    assert trainer.test(model, dm, verbose=False)[0]["test/acc"] > 0.9


def test_group_lasso_arguments_are_checked() -> None:
    layer = FourierLayer(4, 8, ard=True, blocks=[2, 2], separable=True)
    with pytest.raises(ValueError, match=r"argument 'group_lasso' needs objective 'ce' or 'ls'"):
        KernelClassifier(layer, num_classes=3, group_lasso=0.1)
    with pytest.raises(ValueError, match=r"'group_lasso' needs a kernel layer with feature blocks"):
        KernelClassifier(NystromLayer(4, 8), num_classes=3, objective="ce", group_lasso=0.1)
    with pytest.raises(ValueError, match=r"argument 'group_lasso' must be a finite number >= 0"):
        KernelClassifier(layer, num_classes=3, objective="ce", group_lasso=-1.0)
    with pytest.raises(ValueError, match=r"argument 'separable' must be False unless blocks"):
        FourierLayer(4, 8, separable=True)
    with pytest.raises(RuntimeError, match=r"block_norms\(\) needs a trained read-out"):
        KernelClassifier(layer, num_classes=3).block_norms()
