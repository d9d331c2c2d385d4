"""Kernel feature maps: the :class:`KernelFeatureMap` contract, :class:`NystromLayer`,
:class:`FourierLayer`, :class:`FastfoodLayer`, :class:`EnsembleNystrom`, and the feature
normalisations.

Shared pieces: :mod:`~kernel_layers.layers.ard` (learned bandwidths),
:mod:`~kernel_layers.layers.kernel_choice` (kernel settings),
:mod:`~kernel_layers.layers.projection_cache` (the eval-mode inference matrix).
"""

from kernel_layers.layers.base import KernelFeatureMap
from kernel_layers.layers.ensemble import EnsembleNystrom
from kernel_layers.layers.fastfood import FastfoodLayer
from kernel_layers.layers.fourier import FourierLayer
from kernel_layers.layers.normalize import FeatureCentering, FeatureNormalization
from kernel_layers.layers.nystrom import NystromLayer

__all__ = [
    "EnsembleNystrom",
    "FastfoodLayer",
    "FeatureCentering",
    "FeatureNormalization",
    "FourierLayer",
    "KernelFeatureMap",
    "NystromLayer",
]
