"""Callback states saved without every key (older checkpoints) load with defaults."""

from __future__ import annotations

import logging

import pytest

from kernel_layers.callbacks import DISaturationStopping, PlateauDecay


@pytest.fixture(autouse=True)
def _quiet() -> None:
    logging.getLogger("lightning").setLevel(logging.ERROR)


@pytest.mark.parametrize("cls", [PlateauDecay, DISaturationStopping])
def test_callback_state_without_every_key_loads_with_defaults(cls: type) -> None:
    callback = cls()
    callback.load_state_dict({"best_score": 3.5})
    assert callback.best_score == 3.5
    assert callback.wait_count == 0
    callback.load_state_dict({})
    assert callback.state_dict() == {**cls().state_dict(), "best_score": 3.5}
