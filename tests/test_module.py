"""KernelClassifier and the ridge head."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import lightning as L
import numpy as np
import pytest
import torch
from sklearn.datasets import make_classification
from sklearn.linear_model import Ridge
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from kernel_layers import FourierLayer, NystromLayer, discriminant_information
from kernel_layers.data import TensorDataModule
from kernel_layers.layers.base import KernelFeatureMap
from kernel_layers.training.heads import RidgeHead
from kernel_layers.training.module import KernelClassifier


def _data(n: int = 1200, seed: int = 0) -> TensorDataModule:
    x, y = make_classification(
        n_samples=n + 400,
        n_features=10,
        n_informative=6,
        n_redundant=0,
        n_classes=4,
        n_clusters_per_class=2,
        class_sep=1.0,
        random_state=seed,
    )
    return TensorDataModule(x[:n], y[:n], x[n:], y[n:], batch_size=300, val_fraction=0.0, seed=seed)


def test_ridge_head_equals_sklearn_ridge(device: torch.device) -> None:
    rng = np.random.default_rng(0)
    phi = rng.normal(size=(300, 12)) + 5.0
    labels = rng.integers(0, 3, 300)
    head = RidgeHead(12, 3, rho=0.7).to(device)
    for chunk in np.array_split(np.arange(300), 7):  # streamed in uneven batches
        head.update(torch.tensor(phi[chunk], device=device), torch.tensor(labels[chunk]).to(device))
    head.fit()
    reference = Ridge(alpha=0.7).fit(phi, np.eye(3)[labels])
    np.testing.assert_allclose(head.weight.double().cpu().numpy(), reference.coef_.T, rtol=1e-6)
    np.testing.assert_allclose(head.bias.double().cpu().numpy(), reference.intercept_, rtol=1e-6)
    scores = head(torch.tensor(phi, dtype=torch.float32, device=device)).cpu().numpy()
    np.testing.assert_allclose(scores, reference.predict(phi), rtol=1e-4, atol=1e-4)


def test_ridge_head_streamed_over_batches_equals_sklearn_ridge() -> None:
    rng = np.random.default_rng(1)
    phi = rng.normal(size=(900, 600)) + 2.0
    labels = rng.integers(0, 4, 900)
    head = RidgeHead(600, 4, rho=3.0)
    for chunk in np.array_split(np.arange(900), 4):
        head.update(torch.tensor(phi[chunk]), torch.tensor(labels[chunk]))
    head.fit()
    reference = Ridge(alpha=3.0).fit(phi, np.eye(4)[labels])
    np.testing.assert_allclose(
        head.weight.double().numpy(), reference.coef_.T, rtol=1e-6, atol=1e-9
    )
    np.testing.assert_allclose(head.bias.double().numpy(), reference.intercept_, rtol=1e-6)


def test_fit_on_an_empty_training_loader_says_the_training_data_holds_no_row(
    make_trainer: Callable[..., L.Trainer],
) -> None:
    empty = DataLoader(TensorDataset(torch.rand(0, 5), torch.zeros(0, dtype=torch.long)))
    model = KernelClassifier(NystromLayer(5, 4), num_classes=2)
    with pytest.raises(
        ValueError,
        match=r"KernelClassifier: the ridge read-out needs training rows to be fitted on, "
        r"and the training data held none",
    ):
        make_trainer(max_epochs=1).fit(model, empty)


def test_bad_validation_labels_are_named_in_the_sanity_check(
    make_trainer: Callable[..., L.Trainer],
) -> None:
    x, y = torch.rand(300, 5), torch.arange(300) % 2
    train = DataLoader(TensorDataset(x[:200], y[:200]), batch_size=100)
    val = DataLoader(TensorDataset(x[200:], y[200:] * 10), batch_size=100)  # labels 0, 10
    model = KernelClassifier(NystromLayer(5, 4), num_classes=2)
    with pytest.raises(
        ValueError,
        match=r"KernelClassifier: argument 'y' must be labels in \[0, num_classes=2\), got 10 "
        r".*\(in val batch 0\)",
    ):
        make_trainer(max_epochs=1, num_sanity_val_steps=1).fit(model, train, val)


def test_a_callback_on_val_di_that_is_never_logged_says_why(
    make_trainer: Callable[..., L.Trainer],
) -> None:
    from kernel_layers.callbacks import PlateauDecay

    x, y = torch.rand(300, 5), torch.arange(300) % 2
    train = DataLoader(TensorDataset(x[:200], y[:200]), batch_size=100)
    val = DataLoader(TensorDataset(x[200:], y[200:]), batch_size=20)  # 20 rows <= J = 30
    model = KernelClassifier(NystromLayer(5, 30), num_classes=2, keep_best=None)
    trainer = make_trainer(max_epochs=2, callbacks=[PlateauDecay(monitor="val/di")])
    with pytest.raises(
        RuntimeError,
        match=r"'val/di' is not in trainer.callback_metrics .* logs 'val/di' only with "
        r"objective='di', and only for validation batches of more rows than its feature",
    ):
        trainer.fit(model, train, val)


def test_ridge_head_errors() -> None:
    head = RidgeHead(4, 2)
    with pytest.raises(RuntimeError, match=r"RidgeHead: fit\(\) called before any update\(\)"):
        head.fit()
    with pytest.raises(
        ValueError, match="RidgeHead: argument 'features' must have last dimension 4"
    ):
        head.update(torch.rand(5, 3), torch.zeros(5, dtype=torch.long))
    with pytest.raises(ValueError, match="RidgeHead: argument 'rho'"):
        RidgeHead(4, 2, rho=0.0)


def _fitted_accuracy(
    make_trainer: Callable[..., L.Trainer], model: KernelClassifier, dm: TensorDataModule
) -> float:
    return make_trainer().test(model, dm, verbose=False)[0]["test/acc"]


def _train(
    make_trainer: Callable[..., L.Trainer], layer_cls: type, objective: str, trainable: bool
) -> tuple[float, L.Trainer]:
    L.seed_everything(0)
    dm = _data()
    layer = layer_cls(10, 24, gamma=3.0, seed=0, trainable=trainable)
    model = KernelClassifier(layer, num_classes=4, objective=objective, lr=0.05)
    trainer = make_trainer(max_epochs=25)
    trainer.fit(model, dm)
    return _fitted_accuracy(make_trainer, model, dm), trainer


@pytest.mark.parametrize("objective", ["di", "ls", "ce"])
@pytest.mark.parametrize("layer_cls", [NystromLayer, FourierLayer])
def test_each_objective_beats_its_untrained_start(
    make_trainer: Callable[..., L.Trainer], device: torch.device, objective: str, layer_cls: type
) -> None:
    # Same data, seeds, read-out and schedule; only the kernel layer's trainability differs.
    frozen, _ = _train(make_trainer, layer_cls, objective, trainable=False)
    trained, trainer = _train(make_trainer, layer_cls, objective, trainable=True)
    assert trained > frozen + 0.03, (frozen, trained)
    metrics = trainer.logged_metrics
    assert "train/loss_epoch" in metrics and "lr" in metrics
    if objective == "di":
        # -DI of the epoch, logged once per epoch; no per-step copy of train/di
        assert "train/di_epoch" in metrics and "train/loss_step" not in metrics
        torch.testing.assert_close(
            metrics["train/loss_epoch"], -metrics["train/di_epoch"], rtol=1e-6, atol=0
        )


def test_di_rejects_batches_not_larger_than_j(make_trainer: Callable[..., L.Trainer]) -> None:
    dm = _data()
    model = KernelClassifier(FourierLayer(10, 300, seed=0), num_classes=4)
    with pytest.raises(
        ValueError,
        match=r"larger than the feature width J=300, got a batch of 300 rows.*at least 600",
    ):
        make_trainer(max_epochs=1).fit(model, dm)


def test_predict_returns_classes_and_scores_on_request(
    make_trainer: Callable[..., L.Trainer], device: torch.device
) -> None:
    dm = _data()
    model = KernelClassifier(FourierLayer(10, 16, seed=0), num_classes=4, return_scores=True)
    make_trainer(max_epochs=1).fit(model, dm)
    out = make_trainer().predict(model, dm)
    classes, scores = out[0]
    assert scores.shape == (len(classes), 4)
    assert torch.equal(classes, scores.argmax(1))
    model.hparams.return_scores = False
    assert make_trainer().predict(model, dm)[0].shape == classes.shape


def test_landmarks_initialised_from_training_rows_once(
    make_trainer: Callable[..., L.Trainer], device: torch.device
) -> None:
    L.seed_everything(0)
    dm = _data()
    model = KernelClassifier(NystromLayer(10, 20, seed=0), num_classes=4, lr=1e-9)
    make_trainer(max_epochs=1).fit(model, dm)
    train = torch.as_tensor(dm.train_features())
    z = model.kernel_layer.landmarks.detach().cpu()
    gap = (z[:, None, :] - train[None, :, :]).abs().amax(-1).min(1).values
    assert bool(model.landmarks_initialised)
    assert gap.max() < 1e-6  # every landmark is (within one tiny Adam step of) a training row
    before = z.clone()
    make_trainer(max_epochs=1).fit(model, dm)  # flag set: not re-initialised
    assert torch.allclose(model.kernel_layer.landmarks.detach().cpu(), before, atol=1e-4)


def test_backbone_is_trained_with_its_own_learning_rate(
    make_trainer: Callable[..., L.Trainer], device: torch.device
) -> None:
    dm = _data()
    backbone = nn.Sequential(nn.Linear(10, 8), nn.Tanh())
    model = KernelClassifier(
        NystromLayer(8, 12, seed=0), num_classes=4, backbone=backbone, lr=1e-2, backbone_lr=1e-3
    )
    first = backbone[0].weight.detach().clone()
    trainer = make_trainer(max_epochs=1)
    trainer.fit(model, dm)
    assert not torch.equal(first, backbone[0].weight.detach().cpu())
    lrs = {g["name"]: g["lr"] for g in trainer.optimizers[0].param_groups}
    assert lrs == {"kernel": 1e-2, "backbone": 1e-3}


class _NaNLayer(KernelFeatureMap):
    def __init__(self) -> None:
        super().__init__(10, 3)
        self.w = nn.Parameter(torch.ones(10, 3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x @ self.w * float("nan")

    def get_config(self) -> dict[str, object]:
        return {}


def test_non_finite_objective_stops_with_reason(make_trainer: Callable[..., L.Trainer]) -> None:
    model = KernelClassifier(_NaNLayer(), num_classes=4, objective="ce")
    trainer = make_trainer(max_epochs=5)
    with pytest.warns(UserWarning, match="non-finite training objective"):
        trainer.fit(model, _data())
    assert trainer.should_stop and trainer.current_epoch <= 1  # not the 5 epochs asked for
    assert torch.equal(model.kernel_layer.w.detach(), torch.ones(10, 3))  # no update applied


def test_untrained_baseline_evaluates_without_fit(make_trainer: Callable[..., L.Trainer]) -> None:
    dm = _data()
    model = KernelClassifier(
        NystromLayer(10, 24, gamma=0.05, trainable=False, seed=0), num_classes=4
    )
    acc = _fitted_accuracy(make_trainer, model, dm)
    assert 0.25 < acc <= 1.0
    assert model.configure_optimizers() is None
    # The standard-Nystrom baseline: landmarks are training rows even without fit.
    train = torch.as_tensor(dm.train_features())
    z = model.kernel_layer.landmarks.detach()
    assert (z[:, None, :] - train[None, :, :]).abs().amax(-1).min(1).values.max() == 0


@pytest.mark.parametrize(
    ("kwargs", "exc", "match"),
    [
        ({"objective": "svm"}, ValueError, r"'objective' must be one of \['di', 'ls', 'ce'\]"),
        ({"num_classes": 1}, ValueError, "'num_classes' must be an integer >= 2, got 1"),
        ({"rho": -1.0}, ValueError, "'rho' must be a finite number > 0"),
        ({"lr": 0.0}, ValueError, "'lr' must be a finite number > 0"),
        ({"backbone_lr": 0.0}, ValueError, "'backbone_lr' must be a finite number > 0"),
        (
            {"kernel_layer": nn.ReLU()},
            TypeError,
            r"'kernel_layer' must be a KernelFeatureMap \(NystromLayer, .*\), got ReLU",
        ),
        (
            {"kernel_layer": nn.Linear(3, 4)},
            TypeError,
            r"'kernel_layer' must be a KernelFeatureMap .*subclass of "
            r"kernel_layers\.layers\.base\.KernelFeatureMap.*got Linear",
        ),
    ],
)
def test_constructor_errors(kwargs: dict, exc: type, match: str) -> None:
    args = {"kernel_layer": FourierLayer(3, 4), "num_classes": 3}
    args.update(kwargs)
    with pytest.raises(exc, match=f"KernelClassifier: argument {match}"):
        KernelClassifier(args.pop("kernel_layer"), **args)


def test_int32_labels_work_for_every_objective(make_trainer: Callable[..., L.Trainer]) -> None:
    x, y = make_classification(
        n_samples=700, n_features=6, n_classes=3, n_informative=4, random_state=0
    )
    for objective in ("di", "ls", "ce"):
        dm = TensorDataModule(x, y.astype(np.int32), x[:50], y[:50], batch_size=200)
        model = KernelClassifier(FourierLayer(6, 16, seed=0), num_classes=3, objective=objective)
        make_trainer(max_epochs=1).fit(model, dm)


def test_user_landmarks_are_kept(make_trainer: Callable[..., L.Trainer]) -> None:
    dm = _data()
    z = torch.rand(20, 10)
    model = KernelClassifier(NystromLayer(10, 20, landmarks=z), num_classes=4, lr=1e-9)
    make_trainer(max_epochs=1).fit(model, dm)
    assert torch.allclose(model.kernel_layer.landmarks.detach(), z, atol=1e-6)
    from_data = NystromLayer.from_data(torch.rand(50, 10), 20, seed=0)
    assert from_data.landmarks_given


def test_refit_restores_module_modes() -> None:
    dm = _data()
    backbone = nn.Sequential(nn.Linear(10, 8), nn.Dropout(0.5))
    model = KernelClassifier(NystromLayer(8, 12, seed=0), num_classes=4, backbone=backbone)
    model.train()
    backbone[1].eval()  # a user-frozen submodule stays frozen
    dm.setup()
    model.refit_head(dm.train_eval_dataloader())
    assert model.training and backbone[0].training and not backbone[1].training


def test_ls_read_out_does_not_depend_on_validation(make_trainer: Callable[..., L.Trainer]) -> None:
    dm = _data()
    dm.shuffle = False  # a DataLoader iterator draws from the global RNG: keep order fixed
    dm.setup()
    weights = []
    for validate in (False, True):
        L.seed_everything(0)
        model = KernelClassifier(FourierLayer(10, 16, seed=0), num_classes=4, objective="ls")
        make_trainer(max_epochs=3).fit(
            model,
            train_dataloaders=dm.train_dataloader(),
            val_dataloaders=dm.test_dataloader() if validate else None,
        )
        weights.append(model.head.weight.clone())
    torch.testing.assert_close(weights[0], weights[1])


def test_ls_running_statistics_are_checkpointed() -> None:
    head = RidgeHead(3, 2)
    head.update(torch.rand(10, 3), torch.arange(10) % 2)
    state = head.state_dict()
    fresh = RidgeHead(3, 2)
    fresh.load_state_dict(state)
    for a, b in zip(head.statistics, fresh.statistics, strict=True):
        torch.testing.assert_close(a, b)
    empty = RidgeHead(3, 2)
    empty.load_state_dict(RidgeHead(3, 2).state_dict())
    assert empty.statistics is None


def test_test_without_training_data_explains(make_trainer: Callable[..., L.Trainer]) -> None:
    model = KernelClassifier(FourierLayer(10, 8, seed=0), num_classes=4)
    dm = _data()
    dm.setup()
    with pytest.raises(RuntimeError, match="fitting the ridge read-out needs the training data"):
        make_trainer().test(model, dataloaders=dm.test_dataloader())


@pytest.mark.parametrize(
    ("kwargs", "exc", "match"),
    [
        ({"head_rho": 0.0}, ValueError, "'head_rho' must be a finite number > 0"),
        ({"init_landmarks": "no"}, TypeError, "'init_landmarks' must be a bool, got 'no'"),
        ({"return_scores": 1}, TypeError, "'return_scores' must be a bool, got 1"),
        ({"backbone": "resnet"}, TypeError, "'backbone' must be an nn.Module or None"),
    ],
)
def test_more_constructor_errors(kwargs: dict, exc: type, match: str) -> None:
    with pytest.raises(exc, match=f"KernelClassifier: argument {match}"):
        KernelClassifier(FourierLayer(3, 4), num_classes=3, **kwargs)


class _StepDI(L.Callback):
    """Records each step's train/di and every train/di_epoch the callbacks can see."""

    def __init__(self) -> None:
        self.steps: list[list[float]] = []
        self.epoch_values: list[float] = []

    def on_train_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.steps.append([])

    def on_train_batch_end(self, trainer: L.Trainer, *args: object) -> None:
        self.steps[-1].append(float(trainer.callback_metrics["train/di"]))

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.epoch_values.append(float(trainer.callback_metrics["train/di_epoch"]))


def test_di_epoch_is_logged_once_per_epoch_as_the_mean_of_its_steps(
    make_trainer: Callable[..., L.Trainer], monkeypatch: pytest.MonkeyPatch
) -> None:
    model = KernelClassifier(NystromLayer(10, 40, gamma=0.1, seed=0), num_classes=4)
    names: list[str] = []
    log = model.log

    def counting_log(name: str, *args: object, **kwargs: object) -> None:
        names.append(name)
        log(name, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(model, "log", counting_log)
    record = _StepDI()
    make_trainer(callbacks=[record], max_epochs=3).fit(model, _data())
    assert [len(s) for s in record.steps] == [4, 4, 4]  # 1200 rows, batches of 300
    assert names.count("train/di_epoch") == 3  # once per epoch, not once per step
    assert names.count("train/di") == 12
    means = [float(np.mean(s)) for s in record.steps]  # equal batches: the plain mean
    np.testing.assert_allclose(record.epoch_values, means, rtol=1e-6)


def test_a_second_fit_of_the_same_model_logs_the_di_of_its_own_steps(
    make_trainer: Callable[..., L.Trainer],
) -> None:
    # a new fit (no ckpt_path) starts the epoch's sums afresh: the first fit's epoch 0
    # is not this fit's epoch 0
    model = KernelClassifier(NystromLayer(10, 40, gamma=0.1, seed=0), num_classes=4, lr=0.05)
    for _ in range(2):
        record = _StepDI()
        make_trainer(callbacks=[record], max_epochs=1).fit(model, _data())
        assert [len(s) for s in record.steps] == [4]
        np.testing.assert_allclose(record.epoch_values, [np.mean(record.steps[0])], rtol=1e-6)
    assert int(model.di_epoch_rows) == 1200


class _Logged(L.Callback):
    """Each step's DI (from its loss) and, where the step logged it, train/di."""

    def __init__(self) -> None:
        self.di: list[float] = []
        self.logged: dict[int, float] = {}

    def on_train_batch_end(
        self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, *args: object
    ) -> None:
        self.di.append(-float(outputs["loss"]))
        if "train/di" in trainer.logged_metrics and trainer.global_step not in self.logged:
            value = float(trainer.logged_metrics.pop("train/di"))
            self.logged[trainer.global_step] = value


def test_train_di_is_logged_on_the_loggers_steps_and_each_epochs_last(
    make_trainer: Callable[..., L.Trainer], monkeypatch: pytest.MonkeyPatch
) -> None:
    model = KernelClassifier(NystromLayer(10, 40, gamma=0.1, seed=0), num_classes=4)
    steps: list[int] = []
    log = model.log

    def counting_log(name: str, *args: object, **kwargs: object) -> None:
        if name == "train/di":
            steps.append(model.global_step + 1)
        log(name, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(model, "log", counting_log)
    record = _Logged()
    make_trainer(callbacks=[record], max_epochs=3, log_every_n_steps=3).fit(model, _data())
    # 4 batches an epoch: every third step (the logger's) and every fourth (epoch's end)
    assert steps == [3, 4, 6, 8, 9, 12]
    assert len(record.di) == 12
    np.testing.assert_allclose(
        [record.logged[k] for k in steps], [record.di[k - 1] for k in steps], rtol=1e-6
    )


@pytest.mark.parametrize("stop", ["max_steps", "limit_train_batches"])
def test_di_epoch_is_logged_when_the_epoch_ends_early(
    make_trainer: Callable[..., L.Trainer], stop: str
) -> None:
    model = KernelClassifier(NystromLayer(10, 40, gamma=0.1, seed=0), num_classes=4)
    record = _StepDI()
    limit = {"max_steps": 2} if stop == "max_steps" else {"limit_train_batches": 2}
    make_trainer(callbacks=[record], max_epochs=1, **limit).fit(model, _data())
    assert [len(s) for s in record.steps] == [2]
    np.testing.assert_allclose(record.epoch_values, [np.mean(record.steps[0])], rtol=1e-6)


# ------------------------------------------------------------ user-defined maps
class _CosineMap(KernelFeatureMap):
    """Random Fourier features with trainable frequencies and phases."""

    def __init__(self, in_features: int, out_features: int, seed: int = 0) -> None:
        super().__init__(in_features, out_features)
        g = torch.Generator().manual_seed(seed)
        self.weight = nn.Parameter(torch.randn(in_features, out_features, generator=g))
        self.phase = nn.Parameter(2 * torch.pi * torch.rand(out_features, generator=g))
        self.seed = seed

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (2.0 / self.out_features) ** 0.5 * torch.cos(x @ self.weight + self.phase)

    def get_config(self) -> dict[str, object]:
        return {"in_features": self.in_features, "out_features": self.out_features}


class _RowsMap(_CosineMap):
    """Asks for 7 training rows and keeps what it is given."""

    def __init__(self, in_features: int, out_features: int) -> None:
        super().__init__(in_features, out_features)
        self.received: list[torch.Tensor] = []

    def data_rows_wanted(self) -> int:
        return 7

    def init_from_data(self, rows: torch.Tensor) -> None:
        self.received.append(rows.detach().clone())


class _DIEpochs(L.Callback):
    def __init__(self) -> None:
        self.values: list[float] = []

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.values.append(float(trainer.callback_metrics["train/di_epoch"]))


def test_a_user_defined_map_trains_with_di(
    make_trainer: Callable[..., L.Trainer], device: torch.device
) -> None:
    L.seed_everything(0)
    dm = _data()
    layer = _CosineMap(10, 24)
    start = layer.weight.detach().clone()
    model = KernelClassifier(layer, num_classes=4, objective="di", lr=0.05)
    assert model.num_features == 24 and model.hparams["kernel_layer"]["init_args"] == {
        "in_features": 10,
        "out_features": 24,
    }
    record = _DIEpochs()
    make_trainer(max_epochs=6, callbacks=[record]).fit(model, dm)
    assert not torch.equal(layer.weight.detach().cpu(), start)  # trained by the DI gradient
    assert len(record.values) == 6 and record.values[-1] > record.values[0] + 0.05
    # The DI the model trains is the map's (the default: DI of its features).
    x, y = (t.to(model.device) for t in next(iter(dm.train_dataloader())))
    with torch.no_grad():
        di = discriminant_information(layer(x), y, rho=model.rho, num_classes=4)
        assert torch.allclose(model._di(x, y), di)
    assert _fitted_accuracy(make_trainer, model, dm) > 0.5  # chance: 0.25


def test_a_map_that_wants_rows_gets_exactly_those_rows_once(
    make_trainer: Callable[..., L.Trainer],
) -> None:
    dm = _data()
    layer = _RowsMap(10, 12)
    model = KernelClassifier(layer, num_classes=4, objective="ce", lr=0.05)
    make_trainer(max_epochs=2).fit(model, dm)
    assert len(layer.received) == 1 and bool(model.landmarks_initialised)
    rows = layer.received[0]
    train = torch.as_tensor(dm.train_features(), dtype=rows.dtype)
    assert rows.shape == (7, 10)
    # Each row is a training row (exactly, not a copy with round-off).
    assert (rows[:, None, :] - train[None, :, :]).abs().amax(-1).min(1).values.max() == 0
    make_trainer(max_epochs=3).fit(model, dm)  # done once: not asked again
    assert len(layer.received) == 1
    unset = KernelClassifier(_RowsMap(10, 12), num_classes=4, init_landmarks=False)
    make_trainer(max_epochs=1).fit(unset, dm)
    assert unset.kernel_layer.received == []


def test_bf16_mixed_precision_trains_and_tests(
    make_trainer: Callable[..., L.Trainer], device: torch.device
) -> None:
    """``precision="bf16-mixed"``: the DI objective stays float32 and training still helps."""
    L.seed_everything(0)
    dm = _data()
    model = KernelClassifier(NystromLayer(10, 24, gamma=3.0, seed=0), num_classes=4, lr=0.05)
    record = _DIEpochs()
    make_trainer(max_epochs=4, precision="bf16-mixed", callbacks=[record]).fit(model, dm)
    assert all(np.isfinite(record.values)) and record.values[-1] > record.values[0]
    assert model.kernel_layer.landmarks.dtype == torch.float32
    assert _fitted_accuracy(make_trainer, model, dm) > 0.5  # chance: 0.25


@pytest.mark.parametrize("precision", ["bf16-true", "16-true"])
def test_half_true_precision_is_refused_naming_the_mixed_one(
    make_trainer: Callable[..., L.Trainer], precision: str
) -> None:
    model = KernelClassifier(NystromLayer(10, 24, gamma=3.0, seed=0), num_classes=4)
    mixed = precision.replace("-true", "-mixed")
    with pytest.raises(
        ValueError,
        match=rf"KernelClassifier: Trainer\(precision='{precision}'\) casts the kernel "
        rf"layer.*use precision='{mixed}'",
    ):
        make_trainer(max_epochs=1, precision=precision).fit(model, _data())


def test_float64_precision_fits_the_read_out_baseline_and_best_epoch(
    make_trainer: Callable[..., L.Trainer],
) -> None:
    """``precision="64-true"``: the model's own passes over the data (landmark draw,
    read-out fit, untrained baseline, best-epoch candidate) get float64 batches, as
    Lightning's loops do, and the tested accuracy is the float64 read-out's."""
    from kernel_layers import KernelRegressor
    from kernel_layers.callbacks import UntrainedBaseline

    L.seed_everything(0)
    x_all, y_all = _rows(1600)
    dm = TensorDataModule(
        x_all[:1200], y_all[:1200], x_all[1200:], y_all[1200:], batch_size=300, val_fraction=0.2
    )
    model = KernelClassifier(NystromLayer(10, 24, gamma=3.0), num_classes=4, keep_best="val/acc")
    baseline = UntrainedBaseline()
    trainer = make_trainer(max_epochs=2, precision="64-true", callbacks=[baseline])
    trainer.fit(model, dm)
    assert model.kernel_layer.landmarks.dtype == torch.float64 and baseline.accuracy is not None
    tested = trainer.test(model, dm, verbose=False)[0]["test/acc"]
    x, y = dm.test_dataset.tensors[:2]  # type: ignore[union-attr]
    model.eval()
    with torch.no_grad():
        scores = model.head(model(x.double()))
    assert tested == pytest.approx(float((scores.argmax(1) == y).double().mean()), abs=1e-6)
    x_rows, _ = _rows(600)
    targets = (x_rows[:, :2] @ np.array([[1.0], [-2.0]])).astype(np.float32)
    regression = TensorDataModule(
        x_rows[:400], targets[:400], x_rows[400:], targets[400:], float_targets=True,
        batch_size=400, val_fraction=0.2,
    )  # fmt: skip
    regressor = KernelRegressor(NystromLayer(10, 24, gamma=3.0), keep_best="val/r2")
    make_trainer(max_epochs=2, precision="64-true").fit(regressor, regression)
    assert regressor.head.weight.dtype == torch.float64


# ------------------------------------------------------------------ bad batches, short batches
def _loader(x: np.ndarray, y: np.ndarray, batch_size: int = 300) -> torch.utils.data.DataLoader:
    dataset = torch.utils.data.TensorDataset(
        torch.tensor(x, dtype=torch.float32), torch.tensor(y, dtype=torch.long)
    )
    return torch.utils.data.DataLoader(dataset, batch_size=batch_size)


def _rows(n: int = 1200, classes: int = 4) -> tuple[np.ndarray, np.ndarray]:
    x, y = make_classification(
        n_samples=n,
        n_features=10,
        n_informative=6,
        n_redundant=0,
        n_classes=classes,
        random_state=0,
    )
    return (x - x.min(0)) / (x.max(0) - x.min(0)), y


def test_a_short_last_batch_is_skipped_with_one_warning_not_called_divergence(
    make_trainer: Callable[..., L.Trainer],
) -> None:
    x, y = make_classification(
        n_samples=1612,
        n_features=10,
        n_informative=6,
        n_redundant=0,
        n_classes=4,
        random_state=0,
    )  # 1212 training rows: 4 batches of 300 and a last one of 12 < J = 24
    dm = TensorDataModule(
        x[:1212], y[:1212], x[1212:], y[1212:], batch_size=300, val_fraction=0.0, drop_last=False
    )
    model = KernelClassifier(FourierLayer(10, 24, gamma=0.5, seed=0), num_classes=4, lr=0.01)
    trainer = make_trainer(max_epochs=3)
    with pytest.warns(UserWarning, match="short batch") as record:
        trainer.fit(model, dm)
    short = [w for w in record if "short batch" in str(w.message)]
    assert len(short) == 1  # once per fit, not once per epoch
    message = str(short[0].message)
    assert "12 rows" in message and "J=24" in message and "drop_last=True" in message
    assert not any("diverged" in str(w.message) for w in record)
    assert model.stop_reason is None and trainer.current_epoch == 3  # all epochs ran
    assert model.short_batches_skipped == 3  # the 12 rows of each epoch
    assert int(model.di_epoch_rows) == 1200  # the epoch's DI: the full batches only


def test_a_batch_too_small_for_di_that_is_not_the_last_is_refused(
    make_trainer: Callable[..., L.Trainer],
) -> None:
    x, y = _rows()
    model = KernelClassifier(FourierLayer(10, 24, gamma=0.5, seed=0), num_classes=4)
    with pytest.raises(ValueError, match=r"J=24, got a batch of 20 rows.*training batch 0"):
        make_trainer(max_epochs=1).fit(model, _loader(x, y, batch_size=20))


@pytest.mark.parametrize("objective", ["di", "ls", "ce"])
def test_a_bad_label_in_a_later_batch_is_an_error_naming_the_batch(
    make_trainer: Callable[..., L.Trainer], objective: str
) -> None:
    x, y = _rows()
    y[700] = 7  # batch 2 of a user's DataLoader; 4 classes
    model = KernelClassifier(
        FourierLayer(10, 24, gamma=0.5, seed=0), num_classes=4, objective=objective, lr=0.01
    )
    # "ls" first fits its read-out in a pass over the training rows: that pass names it.
    where = "read-out fit batch 2" if objective == "ls" else "training batch 2 of epoch 0"
    with pytest.raises(ValueError, match=rf"num_classes=4\), got 7 .*\(in {where}\)"):
        make_trainer(max_epochs=1).fit(model, _loader(x, y))
    assert model.stop_reason is None  # not reported as divergence


@pytest.mark.parametrize("objective", ["di", "ce"])
def test_a_negative_label_is_a_clear_error(
    make_trainer: Callable[..., L.Trainer], objective: str
) -> None:
    x, y = _rows()
    y[5] = -1
    model = KernelClassifier(FourierLayer(10, 24, seed=0), num_classes=4, objective=objective)
    with pytest.raises(ValueError, match=r"num_classes=4.*got -1.*training batch 0"):
        make_trainer(max_epochs=1).fit(model, _loader(x, y))


def test_float_labels_are_refused_by_name(make_trainer: Callable[..., L.Trainer]) -> None:
    x, y = _rows()
    dataset = torch.utils.data.TensorDataset(
        torch.tensor(x, dtype=torch.float32), torch.tensor(y, dtype=torch.float32) + 0.5
    )
    model = KernelClassifier(FourierLayer(10, 24, seed=0), num_classes=4, objective="ce")
    with pytest.raises(TypeError, match=r"argument 'y' must be integer labels.*float32"):
        make_trainer(max_epochs=1).fit(model, torch.utils.data.DataLoader(dataset, 300))


@pytest.mark.parametrize("objective", ["di", "ce"])
def test_a_nan_in_a_later_batch_is_an_error_naming_the_batch(
    make_trainer: Callable[..., L.Trainer], objective: str
) -> None:
    x, y = _rows()
    x[950, 3] = np.nan  # batch 3
    model = KernelClassifier(
        FourierLayer(10, 24, gamma=0.5, seed=0), num_classes=4, objective=objective, lr=0.01
    )
    with pytest.raises(ValueError, match=r"must be finite.*training batch 3 of epoch 0"):
        make_trainer(max_epochs=1).fit(model, _loader(x, y))
    assert model.stop_reason is None


class _BlowUp(nn.Module):
    """A backbone whose output turns non-finite from its third training call (a diverged
    backbone; the parameters the guard restores do not undo it, so eval mode does)."""

    out_features = 10

    def __init__(self) -> None:
        super().__init__()
        self.scale = nn.Parameter(torch.ones(10))
        self.calls = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        blown = self.training and self.calls >= 3  # the read-out's passes run in eval mode
        return x * self.scale * (float("inf") if blown else 1.0)


def test_a_backbone_whose_output_explodes_is_divergence(
    make_trainer: Callable[..., L.Trainer],
) -> None:
    x, y = _rows()
    model = KernelClassifier(
        FourierLayer(10, 24, gamma=0.5, seed=0), num_classes=4, backbone=_BlowUp(), lr=0.01
    )
    trainer = make_trainer(max_epochs=3)
    with pytest.warns(UserWarning, match=r"training diverged at epoch 0, batch 2: .*backbone"):
        trainer.fit(model, _loader(x, y))
    assert model.stop_reason is not None and trainer.current_epoch == 1


def test_test_accuracy_refuses_labels_out_of_range(make_trainer: Callable[..., L.Trainer]) -> None:
    x, y = _rows()
    model = KernelClassifier(FourierLayer(10, 24, gamma=0.5, seed=0), num_classes=4)
    trainer = make_trainer(max_epochs=1)
    trainer.fit(model, _loader(x, y))
    y_test = y[:200].copy()
    y_test[150] = 9
    with pytest.raises(
        ValueError,
        match=r"argument 'y' must be labels in \[0, num_classes=4\), "
        r"got 9.*test batch 1",
    ):
        trainer.test(model, _loader(x[:200], y_test, batch_size=100))
    trainer.test(model, _loader(x[:200], y[:200], batch_size=100))  # in range: fine
