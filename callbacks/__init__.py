"""Lightning callbacks for DI training: lr decay on a plateau and the paper's stopping rule.

``PlateauDecay`` multiplies the learning rate by ``factor`` when the epoch-mean DI saturates;
``DISaturationStopping`` stops training when the objective fails to improve after a decay.
Both watch ``train/di_epoch`` (what ``KernelClassifier`` logs) in ``"max"`` mode by default.
``UntrainedBaseline`` scores the map before training, the baseline that training improves on.
``KeepBest`` hands back the model of the best epoch on a validation metric when fit ends.
"""

from __future__ import annotations

from kernel_layers.callbacks.di_saturation import DISaturationReason, DISaturationStopping
from kernel_layers.callbacks.keep_best import KeepBest
from kernel_layers.callbacks.plateau_decay import PlateauDecay
from kernel_layers.callbacks.untrained_baseline import UntrainedBaseline

__all__ = [
    "DISaturationReason",
    "DISaturationStopping",
    "KeepBest",
    "PlateauDecay",
    "UntrainedBaseline",
]
