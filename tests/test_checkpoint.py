"""Self-describing checkpoints: ``KernelClassifier.load_from_checkpoint(path)`` alone
rebuilds the layer, backbone, objective and read-out, with bit-identical scores."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import lightning as L
import numpy as np
import pytest
import torch
from torch import nn

from kernel_layers import (
    EnsembleNystrom,
    FourierLayer,
    KernelClassifier,
    KernelRegressor,
    NystromLayer,
)
from kernel_layers.data import TensorDataModule
from kernel_layers.training.backbones import MLP, SmallCNN

N, D, CLASSES = 240, 8, 3


def _data(image: bool = False) -> TensorDataModule:
    gen = torch.Generator().manual_seed(0)
    y = torch.arange(N) % CLASSES
    x = torch.rand(N, D, generator=gen) + 0.3 * y[:, None].float()
    if image:
        x = torch.rand(N, 1, 8, 8, generator=gen) + 0.3 * y[:, None, None, None].float()
    return TensorDataModule(
        x[:200], y[:200], x[200:], y[200:], batch_size=100, val_fraction=0.0, scaling="global"
    )


def _fit_and_save(
    model: KernelClassifier, path: Path, dm: TensorDataModule, accelerator: str = "cpu"
) -> None:
    trainer = L.Trainer(
        max_epochs=2,
        accelerator=accelerator,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
    )
    trainer.fit(model, dm)
    trainer.save_checkpoint(path)


def _scores(model: KernelClassifier, x: torch.Tensor) -> torch.Tensor:
    model.eval()
    with torch.no_grad():
        return model.scores(model(x))


MODELS = {
    "nystrom-di": lambda: KernelClassifier(
        NystromLayer(D, 20, gamma=0.7, kernel="polynomial", kernel_params={"degree": 2}),
        num_classes=CLASSES,
    ),
    "nystrom-rank-ls": lambda: KernelClassifier(
        NystromLayer(D, 20, gamma=0.7, rank=12, jitter=1e-5),
        num_classes=CLASSES,
        objective="ls",
        lr=3e-3,
    ),
    "nystrom-ard-di": lambda: KernelClassifier(
        NystromLayer(D, 20, gamma=0.7, ard=True, blocks=[[0, 1, 2, 3], [4, 5, 6, 7]]),
        num_classes=CLASSES,
    ),
    "fourier-ard-ce": lambda: KernelClassifier(
        FourierLayer(D, 24, gamma=0.3, ard=True, blocks=[[0, 1, 2, 3], [4, 5, 6, 7]]),
        num_classes=CLASSES,
        objective="ce",
        rho=1e-3,
    ),
    "fourier-cossin-laplacian": lambda: KernelClassifier(
        FourierLayer(D, 24, kernel="laplacian", gamma=0.5, features="cossin"),
        num_classes=CLASSES,
        head_rho=1e-2,
    ),
    "ensemble": lambda: KernelClassifier(
        EnsembleNystrom(D, [10, 10], gamma=0.5), num_classes=CLASSES
    ),
}


@pytest.mark.parametrize("name", sorted(MODELS))
def test_checkpoint_alone_rebuilds_the_model_bit_for_bit(
    name: str, tmp_path: Path, device: torch.device
) -> None:
    """Trained on ``device``, saved, rebuilt on the CPU: the same scores to the bit."""
    torch.manual_seed(0)
    model, dm = MODELS[name](), _data()
    path = tmp_path / "model.ckpt"
    _fit_and_save(model, path, dm, device.type)
    loaded = KernelClassifier.load_from_checkpoint(path, map_location="cpu")
    model.cpu()  # Lightning hands a model back on the CPU; say so for any version
    assert loaded.device.type == "cpu"
    assert type(loaded.kernel_layer) is type(model.kernel_layer)
    assert loaded.kernel_layer.get_config() == model.kernel_layer.get_config()
    assert repr(loaded.kernel_layer) == repr(model.kernel_layer)
    for key in ("objective", "rho", "lr", "head_rho", "num_classes"):
        assert loaded.hparams[key] == model.hparams[key]
    dm.setup()
    x = dm.test_dataset.tensors[0]
    assert torch.equal(_scores(loaded, x), _scores(model, x))


def _save_weights(model: KernelClassifier, path: Path) -> Path:
    """A checkpoint of ``model``'s weights and settings, written without a Trainer."""
    state = {"state_dict": model.state_dict(), "hyper_parameters": dict(model.hparams)}
    torch.save({**state, "pytorch-lightning_version": L.__version__}, path)
    return path


def test_float64_layer_is_rebuilt_in_float64(tmp_path: Path) -> None:
    model = KernelClassifier(NystromLayer(D, 10, gamma=0.5, dtype=torch.float64), num_classes=3)
    path = _save_weights(model, tmp_path / "m.ckpt")
    loaded = KernelClassifier.load_from_checkpoint(path)
    assert loaded.kernel_layer.landmarks.dtype == torch.float64
    assert torch.equal(loaded.kernel_layer.landmarks, model.kernel_layer.landmarks)


def test_a_model_trained_in_float64_after_it_was_built_comes_back_in_float64(
    tmp_path: Path,
) -> None:
    model = KernelClassifier(NystromLayer(D, 10, gamma=0.5, seed=0), num_classes=CLASSES)
    trainer = L.Trainer(
        max_epochs=2,
        precision="64-true",  # the layer was built in float32
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(model, _data())
    path = tmp_path / "m.ckpt"
    trainer.save_checkpoint(path)
    loaded = KernelClassifier.load_from_checkpoint(path)
    assert loaded.kernel_layer.landmarks.dtype == torch.float64
    assert loaded.head.weight.dtype == torch.float64
    x = torch.rand(20, D, dtype=torch.float64)
    assert torch.equal(_scores(loaded, x), _scores(model, x))  # no weight rounded
    # float32 rows, as a default Trainer serves them, are cast up exactly
    assert torch.equal(_scores(loaded, x.float()), _scores(model, x.float().double()))
    quiet = {"logger": False, "enable_progress_bar": False, "enable_model_summary": False}
    (result,) = L.Trainer(**quiet).test(loaded, _data(), verbose=False)
    assert 0.0 <= result["test/acc"] <= 1.0


def test_a_regressor_trained_in_float64_keeps_its_float64_read_out(
    tmp_path: Path, make_trainer: Callable[..., L.Trainer]
) -> None:
    # its GCV read-out holds a float64 penalty beside float32 weights as built: the
    # weights were rounded to float32 when loaded
    from kernel_layers import KernelRegressor

    gen = torch.Generator().manual_seed(0)
    x, y = torch.rand(240, D, generator=gen), torch.randn(240, 2, generator=gen)
    data = TensorDataModule(x[:200], y[:200], x[200:], y[200:], batch_size=50, float_targets=True)
    model = KernelRegressor(NystromLayer(D, 10, gamma=0.5, seed=0), num_targets=2)
    trainer = make_trainer(max_epochs=1, precision="64-true")
    trainer.fit(model, data)
    path = tmp_path / "r.ckpt"
    trainer.save_checkpoint(path)
    loaded = KernelRegressor.load_from_checkpoint(path)
    assert loaded.head.weight.dtype == torch.float64
    assert torch.equal(loaded.head.weight, model.head.weight.cpu())
    assert torch.equal(loaded.head.bias, model.head.bias.cpu())


def test_weights_saved_narrower_than_the_built_layer_load_into_it(tmp_path: Path) -> None:
    model = KernelClassifier(NystromLayer(D, 10, gamma=0.5, seed=0), num_classes=CLASSES)
    model.kernel_layer.to(torch.bfloat16)
    path = _save_weights(model, tmp_path / "m.ckpt")
    loaded = KernelClassifier.load_from_checkpoint(path)
    assert loaded.kernel_layer.landmarks.dtype == torch.float32  # as built: exact copy
    want = model.kernel_layer.landmarks.float()
    assert torch.equal(loaded.kernel_layer.landmarks.detach(), want.detach())


def test_logged_hparams_describe_the_model_and_load_it_back(tmp_path: Path) -> None:
    # Loggers write the initial hyper-parameters; load_from_checkpoint(hparams_file=)
    # builds the model from them instead of the checkpoint's.
    from lightning.pytorch.loggers import CSVLogger

    model = KernelClassifier(NystromLayer(D, 10, gamma=0.5), num_classes=CLASSES)
    trainer = L.Trainer(max_epochs=1, logger=CSVLogger(tmp_path, name="run"),
                        enable_progress_bar=False, enable_model_summary=False)  # fmt: skip
    trainer.fit(model, _data())
    trainer.save_checkpoint(tmp_path / "m.ckpt")
    hparams = tmp_path / "run" / "version_0" / "hparams.yaml"
    assert model.hparams_initial["kernel_layer"]["class_path"] == "kernel_layers.NystromLayer"
    loaded = KernelClassifier.load_from_checkpoint(tmp_path / "m.ckpt", hparams_file=hparams)
    x = torch.rand(6, D)
    torch.testing.assert_close(_scores(loaded, x), _scores(model, x), rtol=0, atol=0)


def test_numpy_scalar_settings_are_recorded_as_python_numbers(tmp_path: Path) -> None:
    # A hyper-parameter sweep hands NumPy scalars; weights_only loads refuse them.
    layer = NystromLayer(D, np.int64(10), gamma=np.float64(0.5))
    options = {"lr": np.float64(0.01), "rho": np.float32(0.1), "head_rho": np.float64(0.2)}
    model = KernelClassifier(layer, num_classes=np.int64(CLASSES), **options)
    _fit_and_save(model, tmp_path / "m.ckpt", _data())
    loaded = KernelClassifier.load_from_checkpoint(tmp_path / "m.ckpt")
    recorded = {k: loaded.hparams[k] for k in ("num_classes", "lr", "rho", "head_rho")}
    assert recorded == {
        "num_classes": CLASSES,
        "lr": 0.01,
        "rho": pytest.approx(0.1),
        "head_rho": 0.2,
    }
    assert {type(v) for v in recorded.values()} == {int, float}
    regressor = KernelRegressor(NystromLayer(D, 10, gamma=0.5), num_targets=np.int64(1),
                                lr=np.float64(0.01))  # fmt: skip
    torch.save({"state_dict": regressor.state_dict(), "hyper_parameters": dict(regressor.hparams),
                "pytorch-lightning_version": L.__version__}, tmp_path / "r.ckpt")  # fmt: skip
    assert type(KernelRegressor.load_from_checkpoint(tmp_path / "r.ckpt").hparams["lr"]) is float


@pytest.mark.parametrize(
    "options", [{}, {"dropout": 0.25, "batch_norm": True}], ids=["plain", "dropout-bn"]
)
def test_backbone_given_by_its_settings_is_rebuilt(tmp_path: Path, options: dict[str, Any]) -> None:
    torch.manual_seed(0)
    backbone = SmallCNN(1, 16, width=4, **options)
    model = KernelClassifier(
        NystromLayer(16, 12, gamma=0.5), backbone=backbone, num_classes=CLASSES
    )
    dm = _data(image=True)
    path = tmp_path / "cnn.ckpt"
    _fit_and_save(model, path, dm)
    loaded = KernelClassifier.load_from_checkpoint(path)
    assert isinstance(loaded.backbone, SmallCNN) and loaded.backbone.width == 4
    assert loaded.backbone.get_config() == backbone.get_config()
    dm.setup()
    x = dm.test_dataset.tensors[0]
    assert torch.equal(_scores(loaded, x), _scores(model, x))


def test_mlp_backbone_is_rebuilt(tmp_path: Path) -> None:
    torch.manual_seed(0)
    backbone = MLP(D, [16], 6, batch_norm=True)
    model = KernelClassifier(
        FourierLayer(6, 12, gamma=0.5, seed=0),
        backbone=backbone,
        num_classes=CLASSES,
        objective="ce",
    )
    dm = _data()
    path = tmp_path / "mlp.ckpt"
    _fit_and_save(model, path, dm)
    loaded = KernelClassifier.load_from_checkpoint(path)
    assert isinstance(loaded.backbone, MLP)
    assert loaded.backbone.get_config() == backbone.get_config()
    dm.setup()
    x = dm.test_dataset.tensors[0]
    assert torch.equal(_scores(loaded, x), _scores(model, x))


class _Opaque(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Flatten(), nn.Linear(64, 16))
        self.out_features = 16

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


def test_live_backbone_that_cannot_be_rebuilt_asks_for_it_by_name(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = KernelClassifier(NystromLayer(16, 12, gamma=0.5), backbone=_Opaque(), num_classes=3)
    dm = _data(image=True)
    path = tmp_path / "opaque.ckpt"
    _fit_and_save(model, path, dm)
    with pytest.raises(
        ValueError,
        match=r"KernelClassifier: argument 'backbone' must be passed: the checkpoint records "
        r"its class '.*_Opaque' but not its settings .*pass backbone=_Opaque\(\.\.\.\)",
    ):
        KernelClassifier.load_from_checkpoint(path)
    loaded = KernelClassifier.load_from_checkpoint(path, backbone=_Opaque())
    dm.setup()
    x = dm.test_dataset.tensors[0]
    assert torch.equal(_scores(loaded, x), _scores(model, x))


def _callable_kernel(x: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
    return torch.exp(-torch.cdist(x, z))


def test_user_callable_kernel_trains_and_loads_with_the_layer_passed(tmp_path: Path) -> None:
    model = KernelClassifier(NystromLayer(D, 10, kernel=_callable_kernel), num_classes=3)
    path = tmp_path / "callable.ckpt"
    _fit_and_save(model, path, _data())
    with pytest.raises(ValueError, match=r"argument 'kernel_layer' must be passed"):
        KernelClassifier.load_from_checkpoint(path)
    layer = NystromLayer(D, 10, kernel=_callable_kernel)
    loaded = KernelClassifier.load_from_checkpoint(path, kernel_layer=layer)
    assert torch.equal(loaded.kernel_layer.landmarks, model.kernel_layer.landmarks)


def test_old_checkpoint_without_the_layer_record_explains(tmp_path: Path) -> None:
    model = KernelClassifier(NystromLayer(D, 10, gamma=0.5), num_classes=3)
    path = tmp_path / "old.ckpt"
    _fit_and_save(model, path, _data())
    checkpoint = torch.load(path, weights_only=True)
    del checkpoint["hyper_parameters"]["kernel_layer"], checkpoint["hyper_parameters"]["backbone"]
    torch.save(checkpoint, path)
    with pytest.raises(
        ValueError,
        match=r"KernelClassifier: argument 'kernel_layer' must be passed to load_from_checkpoint "
        r"for '.*old.ckpt': the checkpoint does not record its kernel layer",
    ):
        KernelClassifier.load_from_checkpoint(path)
    loaded = KernelClassifier.load_from_checkpoint(
        path, kernel_layer=NystromLayer(D, 10, gamma=0.5)
    )
    assert torch.equal(loaded.kernel_layer.landmarks, model.kernel_layer.landmarks)


def _untrusted(name: str, class_path: str) -> str:
    """The message (a ``match`` pattern) refusing a checkpoint's ``class_path`` for the
    argument ``name``."""
    return (
        rf"argument '{re.escape(name)}' must name an nn.Module class from kernel_layers, "
        rf"torch.nn or torchvision.models, or one already imported, got class_path "
        rf"'{re.escape(class_path)}'"
    )


def test_checkpoint_cannot_import_arbitrary_classes(tmp_path: Path) -> None:
    model = KernelClassifier(NystromLayer(D, 10, gamma=0.5), num_classes=3)
    path = tmp_path / "evil.ckpt"
    _fit_and_save(model, path, _data())
    checkpoint = torch.load(path, weights_only=True)
    checkpoint["hyper_parameters"]["kernel_layer"]["class_path"] = "evil_module_xyz.Payload"
    torch.save(checkpoint, path)
    with pytest.raises(ValueError, match=_untrusted("kernel_layer", "evil_module_xyz.Payload")):
        KernelClassifier.load_from_checkpoint(path)
    checkpoint["hyper_parameters"]["kernel_layer"]["class_path"] = "torch.nn.functional.relu"
    torch.save(checkpoint, path)
    with pytest.raises(ValueError, match=r"must name an nn.Module class, got 'torch.nn.f"):
        KernelClassifier.load_from_checkpoint(path)


def _built_by_cli(backbone_spec: dict[str, Any], backbone: nn.Module) -> KernelClassifier:
    """A Nystrom classifier on ``backbone`` (16 features), built as LightningCLI builds a
    model from a configuration whose backbone is ``backbone_spec``."""
    import inspect

    from lightning.pytorch.core.mixins.hparams_mixin import _given_hyperparameters_context

    defaults = {  # the CLI's configuration holds every argument, defaults included
        name: p.default
        for name, p in inspect.signature(KernelClassifier).parameters.items()
        if p.default is not inspect.Parameter.empty
    }
    config = {
        **defaults,
        "kernel_layer": {
            "class_path": "kernel_layers.NystromLayer",
            "init_args": {"in_features": 16, "out_features": 12, "gamma": 0.5},
        },
        "backbone": backbone_spec,
        "num_classes": CLASSES,
    }
    with _given_hyperparameters_context(
        hparams=dict(config), instantiator="lightning.pytorch.cli.instantiate_module"
    ):
        model = KernelClassifier(
            NystromLayer(16, 12, gamma=0.5), backbone=backbone, num_classes=CLASSES
        )
    assert model.hparams["backbone"] == backbone_spec
    return model


def test_backbone_from_a_cli_config_is_rebuilt_from_that_config(tmp_path: Path) -> None:
    """LightningCLI builds modules from class_path / init_args; the checkpoint keeps them,
    so a backbone without get_config() (here torch.nn.Linear) is rebuilt too."""
    backbone = {
        "class_path": "torch.nn.Linear",
        "init_args": {"in_features": D, "out_features": 16},
    }
    torch.manual_seed(0)
    model = _built_by_cli(backbone, nn.Linear(D, 16))
    dm = _data()
    path = tmp_path / "cli.ckpt"
    _fit_and_save(model, path, dm)
    loaded = KernelClassifier.load_from_checkpoint(path)
    assert isinstance(loaded.backbone, nn.Linear) and loaded.backbone.out_features == 16
    dm.setup()
    x = dm.test_dataset.tensors[0]
    assert torch.equal(_scores(loaded, x), _scores(model, x))


def test_cli_backbone_with_module_classes_as_settings_is_rebuilt(tmp_path: Path) -> None:
    """torchvision's MLP takes its norm and activation as classes; the CLI records each as
    ``{"class_path"}``, which the checkpoint's rebuild resolves under the same rules."""
    from torchvision.ops import MLP as TorchvisionMLP

    backbone = {
        "class_path": "torchvision.ops.MLP",
        "init_args": {
            "in_channels": D,
            "hidden_channels": [24, 16],
            "norm_layer": {"class_path": "torch.nn.BatchNorm1d"},
            "activation_layer": {"class_path": "torch.nn.GELU"},
        },
    }
    torch.manual_seed(0)
    net = TorchvisionMLP(D, [24, 16], norm_layer=nn.BatchNorm1d, activation_layer=nn.GELU)
    model = _built_by_cli(backbone, net)
    dm = _data()
    path = tmp_path / "mlp.ckpt"
    _fit_and_save(model, path, dm)
    loaded = KernelClassifier.load_from_checkpoint(path)
    assert isinstance(loaded.backbone, TorchvisionMLP)
    assert isinstance(loaded.backbone[1], nn.BatchNorm1d) and isinstance(
        loaded.backbone[2], nn.GELU
    )
    dm.setup()
    x = dm.test_dataset.tensors[0]
    assert torch.equal(_scores(loaded, x), _scores(model, x))
    checkpoint = torch.load(path, weights_only=True)
    init_args = checkpoint["hyper_parameters"]["backbone"]["init_args"]
    init_args["activation_layer"] = {"class_path": "evil_module_xyz.Payload"}
    torch.save(checkpoint, path)
    with pytest.raises(
        ValueError, match=_untrusted("backbone.activation_layer", "evil_module_xyz.Payload")
    ):
        KernelClassifier.load_from_checkpoint(path)


def test_unfitted_ridge_readout_refuses_to_score() -> None:
    model = KernelClassifier(NystromLayer(D, 12, gamma=0.5), num_classes=CLASSES)
    with pytest.raises(RuntimeError, match=r"read-out is not fitted; call refit_head"):
        model.scores(model(torch.rand(4, D)))


def test_readout_older_than_the_features_refuses_to_score() -> None:
    model, dm = MODELS["nystrom-di"](), _data()
    dm.setup()
    model.refit_head(dm.train_eval_dataloader())
    x = dm.test_dataset.tensors[0]
    model.scores(model(x))  # current: fine
    with torch.no_grad():
        model.kernel_layer.landmarks.add_(0.01)
    with pytest.raises(RuntimeError, match=r"read-out is older than the features"):
        model.scores(model(x))


def test_checkpoint_between_validations_is_refitted_on_load(tmp_path: Path) -> None:
    """Validation (the read-out's refit) every 2 epochs, checkpoints every epoch: the
    checkpoint of epoch 3 holds a read-out fitted at epoch 2. Loaded, it is not trusted:
    scores() refuses and test refits it on the saved features."""
    torch.manual_seed(0)
    model, dm = MODELS["nystrom-di"](), _data()
    model.hparams["keep_best"] = None  # the model in hand is the last epoch, as saved
    dm.val_fraction = 0.2
    checkpoint = L.pytorch.callbacks.ModelCheckpoint(
        dirpath=tmp_path, save_last=True, save_on_train_epoch_end=True
    )
    trainer = L.Trainer(
        max_epochs=3,
        check_val_every_n_epoch=2,
        accelerator="cpu",
        logger=False,
        callbacks=[checkpoint],
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
    )
    trainer.fit(model, dm)  # on_fit_end refits the in-memory read-out
    saved = torch.load(tmp_path / "last.ckpt", weights_only=True)
    assert saved["epoch"] == 2 and saved["kernel_layers_head_current"] is False
    loaded = KernelClassifier.load_from_checkpoint(tmp_path / "last.ckpt")
    assert not bool(loaded.head.fitted)
    x = dm.test_dataset.tensors[0]
    with pytest.raises(RuntimeError, match=r"read-out is not fitted"):
        loaded.scores(loaded(x))
    tester = L.Trainer(accelerator="cpu", logger=False, enable_progress_bar=False)
    acc = tester.test(loaded, dm, verbose=False)[0]["test/acc"]
    assert acc == tester.test(model, dm, verbose=False)[0]["test/acc"]
    assert torch.allclose(_scores(loaded, x), _scores(model, x), rtol=1e-5, atol=1e-6)


def test_checkpoint_after_a_validation_keeps_its_readout(tmp_path: Path) -> None:
    model, dm = MODELS["nystrom-di"](), _data()
    path = tmp_path / "m.ckpt"
    _fit_and_save(model, path, dm)  # saved after on_fit_end's refit: current
    assert torch.load(path, weights_only=True)["kernel_layers_head_current"] is True
    assert bool(KernelClassifier.load_from_checkpoint(path).head.fitted)


# ------------------------------------------------------------- checks before loading
@pytest.fixture
def saved_nystrom(tmp_path: Path) -> Path:
    """A fitted ``NystromLayer(D, 20, gamma=0.5)`` model's checkpoint."""
    torch.manual_seed(0)
    model = KernelClassifier(NystromLayer(D, 20, gamma=0.5), num_classes=CLASSES)
    path = tmp_path / "m.ckpt"
    _fit_and_save(model, path, _data())
    return path


def _edited(path: Path, edit: Any) -> Path:
    checkpoint = torch.load(path, weights_only=True)
    edit(checkpoint)
    out = path.with_name("edited.ckpt")
    torch.save(checkpoint, out)
    return out


def test_a_layer_other_than_the_checkpoints_is_refused(saved_nystrom: Path) -> None:
    other = KernelClassifier(NystromLayer(D, 20, gamma=2.0), num_classes=CLASSES)
    trainer = L.Trainer(accelerator="cpu", logger=False, enable_progress_bar=False)
    with pytest.raises(
        ValueError,
        match=r"checkpoint '.*m\.ckpt' was saved with other settings than the model and data "
        r"it is loaded into: model\.kernel_layer\.init_args\.gamma: checkpoint 0\.5, model 2\.0",
    ):
        trainer.test(other, _data(), ckpt_path=saved_nystrom, verbose=False)
    with pytest.raises(
        ValueError,
        match=r"the modules passed to load_from_checkpoint differ from those checkpoint "
        r"'.*m\.ckpt' was trained with: model\.kernel_layer\.init_args\.gamma: checkpoint "
        r"0\.5, argument 1\.0",
    ):
        KernelClassifier.load_from_checkpoint(saved_nystrom, kernel_layer=NystromLayer(D, 20))
    same = KernelClassifier(NystromLayer(D, 20, gamma=0.5, kernel_params=None), num_classes=3)
    trainer.test(same, _data(), ckpt_path=saved_nystrom, verbose=False)  # the same layer
    layer = NystromLayer(D, 20, gamma=0.5)
    KernelClassifier.load_from_checkpoint(saved_nystrom, kernel_layer=layer)


def test_a_spec_is_checked_against_the_tensors_before_it_is_built(saved_nystrom: Path) -> None:
    def huge(checkpoint: dict[str, Any]) -> None:
        checkpoint["hyper_parameters"]["kernel_layer"]["init_args"]["in_features"] = 10**9
        checkpoint["hyper_parameters"]["backbone"] = {
            "class_path": "torch.nn.Linear",
            "init_args": {"in_features": 10**7, "out_features": 10**7},
        }

    with pytest.raises(
        ValueError,
        match=r"checkpoint '.*edited\.ckpt': the recorded kernel_layer \(kernel_layers\."
        r"NystromLayer\) does not build the tensors the checkpoint carries: "
        r"'kernel_layer\.landmarks': spec \[20, 1000000000\], tensor \[20, 8\]",
    ):
        KernelClassifier.load_from_checkpoint(_edited(saved_nystrom, huge))

    def huge_backbone(checkpoint: dict[str, Any]) -> None:
        checkpoint["hyper_parameters"]["backbone"] = {
            "class_path": "torch.nn.Linear",
            "init_args": {"in_features": 10**7, "out_features": 10**7},
        }

    with pytest.raises(
        ValueError,
        match=r"the recorded backbone \(torch\.nn\.Linear\) does not build the tensors the "
        r"checkpoint carries: 'backbone\.weight': spec \[10000000, 10000000\], tensor missing",
    ):
        KernelClassifier.load_from_checkpoint(_edited(saved_nystrom, huge_backbone))


def test_non_finite_weights_are_refused_by_name(saved_nystrom: Path) -> None:
    def nan_head(checkpoint: dict[str, Any]) -> None:
        checkpoint["state_dict"]["head.weight"][0, 0] = float("nan")

    with pytest.raises(
        ValueError,
        match=r"checkpoint '.*edited\.ckpt' must hold finite weights, got NaN or infinite "
        r"values in 'head\.weight'",
    ):
        KernelClassifier.load_from_checkpoint(_edited(saved_nystrom, nan_head))


def test_unreadable_or_incomplete_checkpoints_are_named(saved_nystrom: Path) -> None:
    empty = saved_nystrom.with_name("empty.ckpt")
    empty.write_bytes(b"")
    with pytest.raises(
        ValueError,
        match=r"checkpoint '.*empty\.ckpt' is not a readable checkpoint \(empty, truncated, "
        r"or not written by torch\.save\): EOFError",
    ):
        KernelClassifier.load_from_checkpoint(empty)
    truncated = saved_nystrom.with_name("truncated.ckpt")
    data = saved_nystrom.read_bytes()
    truncated.write_bytes(data[: len(data) // 2])
    with pytest.raises(
        ValueError,
        match=r"checkpoint '.*truncated\.ckpt' is not a readable checkpoint \(empty, "
        r"truncated, or not written by torch\.save\): (RuntimeError|OSError)",
    ):
        KernelClassifier.load_from_checkpoint(truncated)

    def int8(checkpoint: dict[str, Any]) -> None:
        checkpoint["hyper_parameters"]["kernel_layer"]["dtype"] = "int8"

    with pytest.raises(
        ValueError,
        match=r"argument 'kernel_layer\.dtype' must be one of \['float16', 'bfloat16', "
        r"'float32', 'float64'\], got 'int8'",
    ):
        KernelClassifier.load_from_checkpoint(_edited(saved_nystrom, int8))

    def no_head(checkpoint: dict[str, Any]) -> None:
        del checkpoint["state_dict"]["head.weight"]

    with pytest.raises(
        ValueError,
        match=r"checkpoint '.*edited\.ckpt' does not hold the tensors the model needs: (?s:.*)"
        r"Missing key\(s\) in state_dict: \"head\.weight\"",
    ):
        KernelClassifier.load_from_checkpoint(_edited(saved_nystrom, no_head))

    def no_landmarks(checkpoint: dict[str, Any]) -> None:
        del checkpoint["state_dict"]["kernel_layer.landmarks"]

    with pytest.raises(
        ValueError, match=r"'kernel_layer\.landmarks': spec \[20, 8\], tensor missing"
    ):
        KernelClassifier.load_from_checkpoint(_edited(saved_nystrom, no_landmarks))


@pytest.mark.parametrize("classes", [10**9, 2, "3", True])
def test_num_classes_must_be_the_width_of_the_read_out_carried(
    saved_nystrom: Path, classes: object
) -> None:
    """An edited ``num_classes`` is refused before a read-out of that width is built."""

    def edit(checkpoint: dict[str, Any]) -> None:
        checkpoint["hyper_parameters"]["num_classes"] = classes

    with pytest.raises(
        ValueError,
        match=rf"checkpoint '.*edited\.ckpt': argument 'num_classes' must be the width of "
        rf"the read-out it carries \('head\.bias': {CLASSES}\), got {classes!r}",
    ):
        KernelClassifier.load_from_checkpoint(_edited(saved_nystrom, edit))
    with pytest.raises(ValueError, match=r"argument 'num_classes' must be the width"):
        KernelClassifier.load_from_checkpoint(saved_nystrom, num_classes=CLASSES + 1)


@pytest.mark.parametrize("objective", ["di", "ls", "ce"])
def test_a_float64_layer_in_a_float32_model_is_read_out_in_float64(
    tmp_path: Path, objective: str
) -> None:
    layer = NystromLayer(D, 10, gamma=0.5, seed=0, dtype=torch.float64)
    model = KernelClassifier(layer, num_classes=CLASSES, objective=objective)
    assert model.head.weight.dtype == torch.float64
    if model.readout is not None:
        assert model.readout.weight.dtype == torch.float64
    path = tmp_path / "m.ckpt"
    _fit_and_save(model, path, _data())  # float32 rows, cast up for the layer
    loaded = KernelClassifier.load_from_checkpoint(path)
    x = torch.rand(20, D)
    assert torch.equal(_scores(loaded, x), _scores(model, x))
    assert _scores(model, x).dtype == torch.float64
