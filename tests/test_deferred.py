"""Deferred checks: a training step that never reads a device value on the host
(``KernelClassifier`` off the CPU by default, or with ``check_every="epoch"``), and
failures still reported clearly.

A GPU is not needed to see a host synchronisation coming: every one passes through a
Python-level read of a tensor (``bool``, ``int``, ``float``, ``item``, ``tolist``), which
a ``TorchFunctionMode`` counts on the CPU; on CUDA the same steps also run under
``torch.cuda.set_sync_debug_mode("error")``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import lightning as L
import pytest
import torch
from sklearn.datasets import make_classification
from torch import nn
from torch.overrides import TorchFunctionMode
from torch.utils.data import DataLoader, TensorDataset

from kernel_layers import FourierLayer, NystromLayer, nystrom_discriminant_information
from kernel_layers.data import TensorDataModule
from kernel_layers.layers.base import KernelFeatureMap
from kernel_layers.numerics.deferred import DeferredChecks, deferred_checks
from kernel_layers.numerics.linalg import robust_cholesky
from kernel_layers.training.deferred import defers_checks
from kernel_layers.training.module import KernelClassifier

READS = {"item", "tolist", "__bool__", "__int__", "__float__", "__index__", "numpy"}


class HostReads(TorchFunctionMode):
    """Counts the Python-level reads of tensor values (each a host sync on a GPU),
    except those of ``skip`` (e.g. Adam's step counters, CPU tensors on any device)."""

    def __init__(self, skip: Callable[[Any], bool]) -> None:
        super().__init__()
        self.skip = skip
        self.reads: list[str] = []

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        name = getattr(func, "__name__", "")
        if name in READS and not (args and self.skip(args[0])):
            self.reads.append(name)
        return func(*args, **(kwargs or {}))


def _data(n: int = 1200, classes: int = 4, seed: int = 0) -> TensorDataModule:
    x, y = make_classification(
        n_samples=n + 400,
        n_features=10,
        n_informative=6,
        n_redundant=0,
        n_classes=classes,
        random_state=seed,
    )
    return TensorDataModule(x[:n], y[:n], x[n:], y[n:], batch_size=300, val_fraction=0.0, seed=seed)


def _counted_fit(
    make_trainer: Callable[..., L.Trainer], model: KernelClassifier, dm: TensorDataModule
) -> list[str]:
    """Fit 2 epochs; the host reads made inside the optimiser steps (training step,
    backward, Adam, the divergence guard). On a GPU each step also runs under
    ``torch.cuda.set_sync_debug_mode("error")`` when the model defers its checks."""
    reads: list[str] = []
    step = model.optimizer_step

    def counted(*args: Any, **kwargs: Any) -> None:
        optimizer = args[2]
        on_gpu = model.device.type == "cuda"

        def skip(t: Any) -> bool:
            # Adam's step counters are CPU scalars on every device, and reading any CPU
            # tensor costs no synchronisation when the model is on a GPU.
            if any(t is s.get("step") for s in optimizer.state.values()):
                return True
            return on_gpu and isinstance(t, torch.Tensor) and t.device.type == "cpu"

        watch = on_gpu and model.guard.deferred is not None
        with HostReads(skip) as mode:
            if watch:
                torch.cuda.set_sync_debug_mode("error")
            try:
                step(*args, **kwargs)
            finally:
                if watch:
                    torch.cuda.set_sync_debug_mode(0)
        reads.extend(mode.reads)

    model.optimizer_step = counted  # type: ignore[method-assign]
    make_trainer(max_epochs=2).fit(model, dm)
    return reads


CASES = [(NystromLayer, "di"), (FourierLayer, "di"), (NystromLayer, "ls"), (FourierLayer, "ce")]


@pytest.mark.parametrize(("layer_cls", "objective"), CASES)
def test_epoch_checks_make_no_host_read_in_a_training_step(
    make_trainer: Callable[..., L.Trainer], device: torch.device, layer_cls: type, objective: str
) -> None:
    reads = {}
    for check_every in ("step", "epoch"):
        L.seed_everything(0)
        layer = layer_cls(10, 24, gamma=0.5, seed=0)
        model = KernelClassifier(
            layer, num_classes=4, objective=objective, lr=0.01, check_every=check_every
        )
        reads[check_every] = _counted_fit(make_trainer, model, _data())
    assert reads["step"], "the counter sees the per-step reads"
    assert reads["epoch"] == []


@pytest.mark.parametrize(("layer_cls", "objective"), CASES)
def test_by_default_the_checks_are_read_per_step_on_the_cpu_only(
    make_trainer: Callable[..., L.Trainer], device: torch.device, layer_cls: type, objective: str
) -> None:
    """The default ``check_every="auto"``: no host read in a step off the CPU; on the CPU
    the same reads as ``check_every="step"`` (a failure is reported at its batch)."""
    reads = {}
    for check_every in ("step", "auto"):
        L.seed_everything(0)
        layer = layer_cls(10, 24, gamma=0.5, seed=0)
        model = KernelClassifier(
            layer, num_classes=4, objective=objective, lr=0.01, check_every=check_every
        )
        reads[check_every] = _counted_fit(make_trainer, model, _data())
    assert KernelClassifier(layer_cls(10, 24), num_classes=4).hparams["check_every"] == "auto"
    assert reads["auto"] == (reads["step"] if device.type == "cpu" else [])


def test_auto_defers_the_checks_on_every_device_but_the_cpu() -> None:
    assert not defers_checks("auto", torch.device("cpu"))
    for name in ("cuda", "cuda:1", "mps", "xpu"):
        assert defers_checks("auto", torch.device(name))
    for name in ("cpu", "cuda"):
        assert defers_checks("epoch", torch.device(name))
        assert not defers_checks("step", torch.device(name))


def test_epoch_checks_train_nystrom_di_exactly_like_step_checks(
    make_trainer: Callable[..., L.Trainer], device: torch.device
) -> None:
    landmarks = {}
    for check_every in ("step", "epoch"):
        L.seed_everything(0)
        model = KernelClassifier(
            NystromLayer(10, 24, gamma=0.5, seed=0), num_classes=4, lr=0.01, check_every=check_every
        )
        make_trainer(max_epochs=3).fit(model, _data())
        landmarks[check_every] = model.kernel_layer.landmarks.detach().clone()
    # The same float64 factorisations either way: bit for bit the same landmarks on the
    # CPU (a GPU's atomic sums may differ in the last bits between two runs).
    if device.type == "cpu":
        assert torch.equal(landmarks["step"], landmarks["epoch"])
    torch.testing.assert_close(landmarks["step"], landmarks["epoch"], rtol=1e-6, atol=1e-7)


def test_epoch_checks_report_a_non_finite_batch_and_restore_the_epoch_start(
    make_trainer: Callable[..., L.Trainer], device: torch.device
) -> None:
    dm = _data()
    dm.setup("fit")
    x = dm.train_dataset.tensors[0]
    x[700, 3] = float("nan")  # one bad value in the third of four batches
    model = KernelClassifier(
        FourierLayer(10, 24, gamma=0.5, seed=0), num_classes=4, lr=0.01, check_every="epoch"
    )
    start = model.kernel_layer.frequencies.detach().clone()
    trainer = make_trainer(max_epochs=2)
    with pytest.raises(
        ValueError, match=r"argument 'x' must be finite.*epoch 0.*check_every='epoch'"
    ):
        trainer.fit(model, dm)
    assert torch.equal(model.kernel_layer.frequencies.detach().cpu(), start)


def test_epoch_checks_report_labels_out_of_range(
    make_trainer: Callable[..., L.Trainer], device: torch.device
) -> None:
    model = KernelClassifier(
        NystromLayer(10, 24, gamma=0.5, seed=0), num_classes=3, lr=0.01, check_every="epoch"
    )
    with pytest.raises(ValueError, match=r"labels in \[0, num_classes=3\)"):
        make_trainer(max_epochs=1).fit(model, _data(classes=4))


class _NaNLayer(KernelFeatureMap):
    def __init__(self) -> None:
        super().__init__(10, 3)
        self.w = nn.Parameter(torch.ones(10, 3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x @ self.w * float("nan")

    def get_config(self) -> dict[str, object]:
        return {}


def test_epoch_checks_stop_a_diverged_fit_with_the_epoch_start(
    make_trainer: Callable[..., L.Trainer], device: torch.device
) -> None:
    model = KernelClassifier(_NaNLayer(), num_classes=4, objective="ce", check_every="epoch")
    trainer = make_trainer(max_epochs=5)
    with pytest.warns(UserWarning, match="non-finite training objective.*epoch's start"):
        trainer.fit(model, _data())
    assert trainer.should_stop and trainer.current_epoch <= 1
    assert torch.equal(model.kernel_layer.w.detach().cpu(), torch.ones(10, 3))
    assert model.stop_reason is not None and "epoch 0" in model.stop_reason


def test_check_every_is_validated() -> None:
    with pytest.raises(ValueError, match=r"check_every.*'auto', 'step', 'epoch'.*'batch'"):
        KernelClassifier(NystromLayer(10, 24, gamma=0.5), num_classes=4, check_every="batch")


def test_deferred_checks_report_the_check_that_failed_first() -> None:
    checks = DeferredChecks()
    checks.record(ValueError, "landmarks", torch.tensor(False))  # registered first, passing
    checks.record(ValueError, "x", torch.tensor(True))  # the cause
    checks.record(ValueError, "landmarks", torch.tensor(True))  # its consequence
    checks.record(ValueError, "x", torch.tensor(False))
    failure = checks.first_failure()
    assert isinstance(failure, ValueError) and str(failure) == "x"
    checks.reset()
    checks.record(RuntimeError, "late", torch.tensor(False))
    assert checks.first_failure() is None and len(checks) == 1


def test_deferred_checks_count_records_exactly_in_a_half_default_dtype() -> None:
    checks, default = DeferredChecks(), torch.get_default_dtype()
    torch.set_default_dtype(torch.bfloat16)  # 300 and 301 are one bfloat16 number
    try:
        for _ in range(300):
            checks.record(ValueError, "landmarks", torch.tensor(False))
        checks.record(ValueError, "x", torch.tensor(True))
        checks.record(ValueError, "landmarks", torch.tensor(True))
    finally:
        torch.set_default_dtype(default)
    assert str(checks.first_failure()) == "x"


def test_a_nan_training_row_is_named_when_checks_are_deferred(
    make_trainer: Callable[..., L.Trainer],
) -> None:
    # the NaN row's step makes the landmarks NaN; the row, not the landmarks, is reported
    x, y = torch.rand(400, 5), torch.arange(400) % 2
    x[150, 2] = float("nan")
    loader = DataLoader(TensorDataset(x, y), batch_size=100)
    model = KernelClassifier(NystromLayer(5, 10), num_classes=2, check_every="epoch")
    with pytest.raises(ValueError, match=r"argument 'x' must be finite.*training batch"):
        make_trainer(max_epochs=1).fit(model, loader)


def test_deferred_checks_record_instead_of_raising_and_report_once() -> None:
    checks = DeferredChecks()
    z = torch.rand(30, 5, dtype=torch.float64)
    x = torch.rand(60, 5, dtype=torch.float64)
    y = torch.arange(60) % 3
    with deferred_checks(checks):
        good = nystrom_discriminant_information(x, y, z, gamma=1.0, num_classes=3)
    assert checks.first_failure() is None
    want = nystrom_discriminant_information(x, y, z, gamma=1.0, num_classes=3)
    assert good.item() == want.item()
    x[5, 2] = float("inf")
    with deferred_checks(checks):
        nystrom_discriminant_information(x, y, z, gamma=1.0, num_classes=3)
    failure = checks.first_failure()
    assert isinstance(failure, ValueError)
    assert "argument 'x' must be finite" in str(failure)
    checks.reset()
    with deferred_checks(checks):  # not positive definite: reported, not retried
        robust_cholesky(-torch.eye(4, dtype=torch.float64), owner="test")
    failure = checks.first_failure()
    assert isinstance(failure, RuntimeError) and "Cholesky" in str(failure)
    # Outside the block the same call retries with a jitter and, failing, raises at once.
    with pytest.raises(RuntimeError, match="Cholesky factorisation failed even with a jitter"):
        robust_cholesky(-torch.eye(4, dtype=torch.float64), owner="test")
