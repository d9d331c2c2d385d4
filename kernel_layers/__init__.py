"""kernel-layers: trainable kernel-approximation layers for PyTorch Lightning."""

from __future__ import annotations

from kernel_layers.backbones import ResNet18Backbone, SmallCNN, strip_head, with_kernel_head
from kernel_layers.ensemble import EnsembleNystrom
from kernel_layers.fourier import FourierLayer
from kernel_layers.gamma import GammaSearchResult, gamma_heuristic, select_gamma
from kernel_layers.heads import RidgeHead
from kernel_layers.kernels import Kernel, available_kernels, get_kernel, register_kernel
from kernel_layers.landmarks import greedy_landmarks, kmeans, kmeans_plus_plus, random_landmarks
from kernel_layers.module import KernelClassifier
from kernel_layers.normalize import FeatureCentering, FeatureNormalization
from kernel_layers.nystrom import NystromLayer
from kernel_layers.objectives import (
    DILoss,
    discriminant_information,
    least_squares_loss,
    nystrom_discriminant_information,
)

__all__ = [
    "DILoss",
    "EnsembleNystrom",
    "FeatureCentering",
    "FeatureNormalization",
    "FourierLayer",
    "GammaSearchResult",
    "Kernel",
    "KernelClassifier",
    "NystromLayer",
    "ResNet18Backbone",
    "RidgeHead",
    "SmallCNN",
    "available_kernels",
    "discriminant_information",
    "gamma_heuristic",
    "get_kernel",
    "greedy_landmarks",
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

__version__ = "0.1.0"
