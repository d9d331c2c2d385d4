"""kernel-layers: trainable kernel-approximation layers for PyTorch Lightning.

``import kernel_layers`` loads torch only: the layers, kernels and objectives are
plain PyTorch. Names that need Lightning, torchmetrics or scikit-learn
(``KernelClassifier``, ``KernelRegressor``, ``KernelApproximationError``, the backbones,
``select_gamma``) are imported on first use, through the module ``__getattr__`` below.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from kernel_layers._version import __version__

if TYPE_CHECKING:  # the names below, for type checkers and IDEs
    from kernel_layers.cli.allocator import keep_freed_host_memory
    from kernel_layers.kernels import Kernel, available_kernels, get_kernel, register_kernel
    from kernel_layers.kernels.approximation import KernelApproximationError
    from kernel_layers.layers.base import KernelFeatureMap
    from kernel_layers.layers.ensemble import EnsembleNystrom
    from kernel_layers.layers.fastfood import FastfoodLayer
    from kernel_layers.layers.fourier import FourierLayer
    from kernel_layers.layers.normalize import FeatureCentering, FeatureNormalization
    from kernel_layers.layers.nystrom import NystromLayer
    from kernel_layers.objectives import (
        DILoss,
        discriminant_information,
        least_squares_loss,
        nystrom_discriminant_information,
    )
    from kernel_layers.selection.gamma import GammaSearchResult, select_gamma
    from kernel_layers.selection.greedy import greedy_landmarks
    from kernel_layers.selection.heuristic import gamma_heuristic
    from kernel_layers.selection.landmarks import kmeans, kmeans_plus_plus, random_landmarks
    from kernel_layers.training.backbones import (
        MLP,
        ResNet18Backbone,
        SmallCNN,
        strip_head,
        with_kernel_head,
    )
    from kernel_layers.training.heads import RidgeHead
    from kernel_layers.training.module import KernelClassifier
    from kernel_layers.training.regression import KernelRegressor

#: Public name -> the module that defines it (imported when the name is first used).
_EXPORTS: dict[str, str] = {
    "DILoss": "kernel_layers.objectives",
    "EnsembleNystrom": "kernel_layers.layers.ensemble",
    "FastfoodLayer": "kernel_layers.layers.fastfood",
    "FeatureCentering": "kernel_layers.layers.normalize",
    "FeatureNormalization": "kernel_layers.layers.normalize",
    "FourierLayer": "kernel_layers.layers.fourier",
    "GammaSearchResult": "kernel_layers.selection.gamma",
    "Kernel": "kernel_layers.kernels",
    "KernelApproximationError": "kernel_layers.kernels.approximation",
    "KernelClassifier": "kernel_layers.training.module",
    "KernelFeatureMap": "kernel_layers.layers.base",
    "KernelRegressor": "kernel_layers.training.regression",
    "MLP": "kernel_layers.training.backbones",
    "NystromLayer": "kernel_layers.layers.nystrom",
    "ResNet18Backbone": "kernel_layers.training.backbones",
    "RidgeHead": "kernel_layers.training.heads",
    "SmallCNN": "kernel_layers.training.backbones",
    "available_kernels": "kernel_layers.kernels",
    "discriminant_information": "kernel_layers.objectives",
    "gamma_heuristic": "kernel_layers.selection.heuristic",
    "get_kernel": "kernel_layers.kernels",
    "greedy_landmarks": "kernel_layers.selection.greedy",
    "keep_freed_host_memory": "kernel_layers.cli.allocator",
    "kmeans": "kernel_layers.selection.landmarks",
    "kmeans_plus_plus": "kernel_layers.selection.landmarks",
    "least_squares_loss": "kernel_layers.objectives",
    "nystrom_discriminant_information": "kernel_layers.objectives",
    "random_landmarks": "kernel_layers.selection.landmarks",
    "register_kernel": "kernel_layers.kernels",
    "select_gamma": "kernel_layers.selection.gamma",
    "strip_head": "kernel_layers.training.backbones",
    "with_kernel_head": "kernel_layers.training.backbones",
}

__all__ = [
    "MLP",
    "DILoss",
    "EnsembleNystrom",
    "FastfoodLayer",
    "FeatureCentering",
    "FeatureNormalization",
    "FourierLayer",
    "GammaSearchResult",
    "Kernel",
    "KernelApproximationError",
    "KernelClassifier",
    "KernelFeatureMap",
    "KernelRegressor",
    "NystromLayer",
    "ResNet18Backbone",
    "RidgeHead",
    "SmallCNN",
    "__version__",
    "available_kernels",
    "discriminant_information",
    "gamma_heuristic",
    "get_kernel",
    "greedy_landmarks",
    "keep_freed_host_memory",
    "kmeans",
    "kmeans_plus_plus",
    "least_squares_loss",
    "nystrom_discriminant_information",
    "random_landmarks",
    "register_kernel",
    "select_gamma",
    "strip_head",
    "with_kernel_head",
]


def __getattr__(name: str) -> Any:
    """Import a public name's module on first use (PEP 562)."""
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'kernel_layers' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later look-ups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
