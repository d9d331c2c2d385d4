"""FastfoodLayer: the shared layer contract, Hadamard transform, kernel convergence,
gradients, DI training, export."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import lightning as L
import numpy as np
import pytest
import torch
from layer_contract import IN_FEATURES, OUT_FEATURES, LayerContract
from scipy.linalg import hadamard

from kernel_layers import FastfoodLayer, KernelClassifier
from kernel_layers.data import DigitsDataModule
from kernel_layers.layers.fastfood import hadamard_transform


class TestFastfoodContract(LayerContract):
    takes_kernel = False

    def make_layer(self, **kwargs: object) -> FastfoodLayer:
        args = {"in_features": IN_FEATURES, "out_features": OUT_FEATURES, "gamma": 0.5}
        args |= {"seed": 0, **kwargs}
        if "generator" in kwargs and "seed" not in kwargs:
            args.pop("seed")
        return FastfoodLayer(args.pop("in_features"), args.pop("out_features"), **args)


@pytest.mark.parametrize("n", [1, 2, 8, 64])
def test_hadamard_transform_is_the_sylvester_matrix(n: int) -> None:
    x = torch.randn(5, n, dtype=torch.float64)
    expected = x.numpy() @ hadamard(n)
    np.testing.assert_allclose(hadamard_transform(x).numpy(), expected, rtol=1e-12, atol=1e-12)


def _kernel_error(features: int, seeds: int = 4) -> float:
    gen = torch.Generator().manual_seed(0)
    x = torch.rand(30, 20, dtype=torch.float64, generator=gen)
    diff = x.numpy()[:, None, :] - x.numpy()[None, :, :]
    exact = np.exp(-0.5 * (diff**2).sum(-1))  # float64 reference, gamma = 0.5
    errors = []
    for seed in range(seeds):
        layer = FastfoodLayer(20, features, gamma=0.5, seed=seed, dtype=torch.float64)
        with torch.no_grad():
            phi = layer(x).numpy()
        errors.append(np.abs(phi @ phi.T - exact).max())
    return float(np.mean(errors))


def test_kernel_approximation_converges_to_the_gaussian_kernel() -> None:
    errors = [_kernel_error(j) for j in (256, 1024, 4096)]
    assert errors[0] > errors[1] > errors[2]
    assert errors[2] < 0.08  # ~ 1 / sqrt(J): the seeded draws give 0.19, 0.11, 0.05
    assert errors[0] / errors[2] > 2.5  # 16x the features: about 4x smaller error


def test_rows_have_gaussian_norms() -> None:
    """Every row of V has the norm law of a N(0, 2 gamma I) vector: E||v||^2 = 2 gamma d'."""
    layer = FastfoodLayer(16, 4096, gamma=0.25, seed=0, dtype=torch.float64)
    eye = torch.eye(16, dtype=torch.float64)
    with torch.no_grad():
        v = layer.projections(eye)  # [16, J]: column j is the row v_j restricted to x's dims
    full = layer.padded  # here d' = d, so the columns are whole rows
    np.testing.assert_allclose(float(v.square().sum(0).mean()), 2 * 0.25 * full, rtol=0.05)


def test_gradcheck() -> None:
    layer = FastfoodLayer(5, 12, gamma=0.7, seed=0, dtype=torch.float64)
    x = torch.rand(4, 5, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(
        lambda x_, g, s, b: _with(layer, g, s, b)(x_),
        (x, layer.gaussian, layer.log_scale, layer.phases),
    )


def _with(layer: FastfoodLayer, g: torch.Tensor, s: torch.Tensor, b: torch.Tensor):
    def forward(x: torch.Tensor) -> torch.Tensor:
        return torch.func.functional_call(layer, {"gaussian": g, "scale": s, "phases": b}, (x,))

    return forward


def test_di_training_beats_the_untrained_map(make_trainer: Callable[..., L.Trainer]) -> None:
    def accuracy(trainable: bool) -> float:
        L.seed_everything(0)
        layer = FastfoodLayer(64, 200, gamma=0.02, seed=0, trainable=trainable)
        model = KernelClassifier(layer, num_classes=10, lr=1e-2)
        trainer = make_trainer(max_epochs=15)
        dm = DigitsDataModule(batch_size=600)
        trainer.fit(model, dm)
        return trainer.test(model, dm, verbose=False)[0]["test/acc"]

    assert accuracy(True) > accuracy(False)


def test_checkpoint_and_export(tmp_path: Path, make_trainer: Callable[..., L.Trainer]) -> None:
    model = KernelClassifier(FastfoodLayer(64, 100, gamma=0.02, seed=0), num_classes=10)
    trainer = make_trainer(max_epochs=1)
    trainer.fit(model, DigitsDataModule(batch_size=400))
    trainer.save_checkpoint(tmp_path / "ff.ckpt")
    loaded = KernelClassifier.load_from_checkpoint(tmp_path / "ff.ckpt")
    x = torch.rand(7, 64)
    model.eval()
    loaded.eval()
    with torch.no_grad():
        assert torch.equal(loaded.scores(loaded(x)), model.scores(model(x)))
    layer = model.kernel_layer.eval()
    exported = torch.export.export(layer, (x,)).module()
    torch.testing.assert_close(exported(x), layer(x), atol=1e-5, rtol=0)


def test_arguments_are_checked() -> None:
    with pytest.raises(
        ValueError, match=r"FastfoodLayer: argument 'gamma' must be a finite number > 0"
    ):
        FastfoodLayer(4, 8, gamma=0.0)
    with pytest.raises(ValueError, match=r"FastfoodLayer: argument 'x' must have last dimension 4"):
        FastfoodLayer(4, 8)(torch.rand(2, 5))
    assert FastfoodLayer(5, 20).num_blocks == 3 and FastfoodLayer(5, 20).padded == 8


@pytest.mark.parametrize(("d", "j"), [(784, 100), (784, 2048), (16, 100), (54, 512), (5, 3)])
def test_learnable_numbers_are_two_diagonals_per_block_and_a_phase_per_feature(
    d: int, j: int
) -> None:
    padded = 1 << (d - 1).bit_length()  # d' = d rounded up to a power of two
    blocks = -(-j // padded)
    layer = FastfoodLayer(d, j, seed=0)
    assert sum(p.numel() for p in layer.parameters()) == 2 * blocks * padded + j
