"""Kernel feature maps: :class:`NystromLayer`, :class:`FourierLayer`,
:class:`FastfoodLayer`, :class:`EnsembleNystrom`, and the feature normalisations."""

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
    "NystromLayer",
]
