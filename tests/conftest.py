"""Shared pytest configuration and fixtures: GPU skipping, seeding, the package logger
restored after each test and a quiet ``Trainer`` factory."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from typing import Any

import lightning as L
import pytest
import torch
from lightning.pytorch.callbacks import Callback


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    skip_gpu = pytest.mark.skip(reason="gpu: no CUDA device")
    for item in items:
        if "gpu" in item.keywords and not torch.cuda.is_available():
            item.add_marker(skip_gpu)


@pytest.fixture(autouse=True)
def _seed() -> None:
    torch.manual_seed(0)


#: The ``kernel_layers`` logger as the tests start (handlers, level, propagation).
_PACKAGE_LOGGER = logging.getLogger("kernel_layers")
_LOGGER_AT_START = (
    list(_PACKAGE_LOGGER.handlers),
    _PACKAGE_LOGGER.level,
    _PACKAGE_LOGGER.propagate,
)


def _reset_package_logger() -> None:
    handlers, level, propagate = _LOGGER_AT_START
    _PACKAGE_LOGGER.handlers[:] = handlers
    _PACKAGE_LOGGER.level, _PACKAGE_LOGGER.propagate = level, propagate


@pytest.fixture(autouse=True)
def _restore_package_logger() -> Iterator[None]:
    """Undo what an in-process CLI run (in a test or a module-scoped fixture) does to the
    ``kernel_layers`` logger (its own handler, no propagation), so that every test's
    ``caplog`` sees the package's records."""
    _reset_package_logger()
    yield
    _reset_package_logger()


#: The devices the behavioural tests run on: the CPU always, CUDA where a GPU exists (the
#: CUDA cases are collected everywhere and skipped without one, so their count shows).
DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)]


@pytest.fixture(params=DEVICES)
def device(request: pytest.FixtureRequest) -> torch.device:
    """The device a test runs on; a test that takes it runs once per entry of
    :data:`DEVICES`, and :func:`make_trainer` then trains on it."""
    return torch.device(request.param)


@pytest.fixture
def make_trainer(request: pytest.FixtureRequest) -> Callable[..., L.Trainer]:
    """A quiet ``Trainer`` factory shared by the tests: one device (the test's ``device``
    if it takes one, else the CPU), no logger, no checkpoints, no progress bar,
    deterministic, logging every step; keyword arguments override."""
    on = request.getfixturevalue("device") if "device" in request.fixturenames else None
    accelerator = "cpu" if on is None else on.type

    def factory(
        callbacks: list[Callback] | None = None, max_epochs: int | None = None, **kwargs: Any
    ) -> L.Trainer:
        options: dict[str, Any] = {
            "accelerator": accelerator,
            "devices": 1,
            "logger": False,
            "enable_checkpointing": False,
            "enable_progress_bar": False,
            "enable_model_summary": False,
            # Some CUDA kernels have no deterministic version: warn there, not fail.
            "deterministic": True if accelerator == "cpu" else "warn",
            "log_every_n_steps": 1,
        }
        if max_epochs is not None:
            options["max_epochs"] = max_epochs
        options.update(kwargs)
        return L.Trainer(callbacks=callbacks, **options)

    return factory
