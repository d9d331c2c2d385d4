"""Backbones for kernel layers: an MLP for tabular rows, a small CNN, a 28x28 ResNet-18,
and head replacement.

A kernel layer sits where a network's linear classifier was: :func:`strip_head` removes
the classifier head of an existing model (torchvision ResNet's ``fc``, VGG / MobileNet's
``classifier``, or a ``Sequential``'s last ``Linear``) and reports its input width;
:func:`with_kernel_head` builds a :class:`~kernel_layers.KernelClassifier` that trains the
headless model end to end with the kernel layer (DI by default), the landmarks initialised
from backbone features of the first training batches (``init_landmarks``) and the backbone
optionally on its own learning rate (``backbone_lr``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from torch import Tensor, nn

from kernel_layers._validation import check_bool, check_fraction, check_int
from kernel_layers.layers.base import KernelFeatureMap
from kernel_layers.training.module import KernelClassifier

__all__ = [
    "HEAD_ATTRIBUTES",
    "MLP",
    "ResNet18Backbone",
    "SmallCNN",
    "resnet18_backbone",
    "strip_head",
    "with_kernel_head",
]

#: Attribute names searched, in order, for a model's classifier head.
HEAD_ATTRIBUTES = ("fc", "classifier", "head", "heads")


class MLP(nn.Module):
    """Fully connected layers for tabular rows: torchvision's ``MLP``, described by its
    settings so that a checkpoint rebuilds it.

    For each width ``H`` of ``hidden_features``: ``Linear(., H) -> BatchNorm1d(H)`` (with
    ``batch_norm``) ``-> ReLU -> Dropout(dropout)``; then ``Linear(., out_features) ->
    Dropout(dropout)``, with no activation: the kernel layer after it is the nonlinearity.
    The layers are :class:`torchvision.ops.MLP`'s (``layers``), built in its order, so
    that a seed gives the same weights.

    Args:
        in_features: input width ``D_in`` (a row's features).
        hidden_features: widths of the hidden layers, in order (empty: one ``Linear``).
        out_features: feature width ``D`` (the kernel layer's ``in_features``).
        batch_norm: batch normalisation after each hidden ``Linear``.
        dropout: drop probability in ``[0, 1)`` after each layer (``0``: none).

    Shape:
        x (Tensor[B, in_features]) -> Tensor[B, out_features].
    """

    def __init__(
        self,
        in_features: int,
        hidden_features: Sequence[int],
        out_features: int,
        *,
        batch_norm: bool = False,
        dropout: float = 0.0,
    ) -> None:
        super().__init__()
        from torchvision.ops import MLP as TorchvisionMLP

        owner = type(self).__name__
        self.in_features = check_int(owner, "in_features", in_features)
        if isinstance(hidden_features, str | bytes) or not isinstance(hidden_features, Sequence):
            raise TypeError(
                f"{owner}: argument 'hidden_features' must be a sequence of integers >= 1, "
                f"got {hidden_features!r}"
            )
        self.hidden_features = [
            check_int(owner, f"hidden_features[{i}]", width)
            for i, width in enumerate(hidden_features)
        ]
        self.out_features = check_int(owner, "out_features", out_features)
        self.batch_norm = check_bool(owner, "batch_norm", batch_norm)
        self.dropout = check_fraction(owner, "dropout", dropout, include_zero=True)
        self.layers = TorchvisionMLP(
            self.in_features,
            [*self.hidden_features, self.out_features],
            norm_layer=nn.BatchNorm1d if batch_norm else None,
            dropout=self.dropout,
        )

    def get_config(self) -> dict[str, object]:
        """Constructor settings (the weights come from the state dict)."""
        return {
            "in_features": self.in_features,
            "hidden_features": list(self.hidden_features),
            "out_features": self.out_features,
            "batch_norm": self.batch_norm,
            "dropout": self.dropout,
        }

    def forward(self, x: Tensor) -> Tensor:
        """Features ``x (Tensor[B, in_features]) -> Tensor[B, out_features]``."""
        if x.ndim != 2 or x.shape[1] != self.in_features:
            raise ValueError(
                f"{type(self).__name__}: argument 'x' must have shape "
                f"[B, {self.in_features}], got {list(x.shape)}"
            )
        return self.layers(x)


class SmallCNN(nn.Module):
    """Two conv + max-pool blocks and a linear layer: images to ``out_features`` features.

    ``conv(3x3, width) -> ReLU -> maxpool(2) -> conv(3x3, 2 width) -> ReLU -> maxpool(2)
    -> adaptive avg-pool(4x4) -> Linear(32 width, out_features) -> Tanh``. The ``Tanh``
    keeps the features in ``[-1, 1]``, so a Gaussian kernel's ``gamma`` (about
    ``1 / out_features``) stays sensible however the backbone trains. Any input size of at
    least ``4 x 4`` works (28x28 MNIST / Fashion-MNIST: 105k parameters at the defaults).
    Two optional regularisers: ``batch_norm`` puts a ``BatchNorm2d`` between each conv
    (then without bias) and its ReLU; ``dropout`` zeroes the pooled ``32 width`` features
    with that probability before the linear layer (training only). At their defaults the
    module and its state-dict keys are the plain network's.

    Args:
        in_channels: input channels ``C`` (1 for grayscale).
        out_features: feature width ``D`` (the kernel layer's ``in_features``).
        width: channels of the first conv block (the second has ``2 width``).
        dropout: drop probability in ``[0, 1)`` before the linear layer (``0``: none).
        batch_norm: batch normalisation after each convolution.

    Shape:
        x (Tensor[B, C, H, W]) -> Tensor[B, out_features].
    """

    def __init__(
        self,
        in_channels: int = 1,
        out_features: int = 128,
        *,
        width: int = 32,
        dropout: float = 0.0,
        batch_norm: bool = False,
    ) -> None:
        super().__init__()
        owner = type(self).__name__
        self.in_channels = check_int(owner, "in_channels", in_channels)
        self.out_features = check_int(owner, "out_features", out_features)
        self.width = check_int(owner, "width", width)
        self.dropout = check_fraction(owner, "dropout", dropout, include_zero=True)
        self.batch_norm = check_bool(owner, "batch_norm", batch_norm)
        layers: list[nn.Module] = []
        for c_in, c_out in ((self.in_channels, width), (width, 2 * width)):
            layers.append(nn.Conv2d(c_in, c_out, 3, padding=1, bias=not batch_norm))
            if batch_norm:
                layers.append(nn.BatchNorm2d(c_out))
            layers += [nn.ReLU(inplace=True), nn.MaxPool2d(2)]
        layers += [nn.AdaptiveAvgPool2d(4), nn.Flatten()]
        if self.dropout > 0.0:
            layers.append(nn.Dropout(self.dropout))  # after every parameter: keys unchanged
        self.features = nn.Sequential(*layers)
        self.project = nn.Sequential(nn.Linear(32 * width, self.out_features), nn.Tanh())

    def get_config(self) -> dict[str, object]:
        """Constructor settings (the weights come from the state dict)."""
        return {
            "in_channels": self.in_channels,
            "out_features": self.out_features,
            "width": self.width,
            "dropout": self.dropout,
            "batch_norm": self.batch_norm,
        }

    def forward(self, x: Tensor) -> Tensor:
        """Features ``x (Tensor[B, C, H, W]) -> Tensor[B, out_features]``."""
        if x.ndim != 4 or x.shape[1] != self.in_channels:
            raise ValueError(
                f"{type(self).__name__}: argument 'x' must have shape "
                f"[B, {self.in_channels}, H, W], got {list(x.shape)} (serve images: "
                "flatten=False in the data module)"
            )
        return self.project(self.features(x))


class ResNet18Backbone(nn.Module):
    """torchvision's ResNet-18 without its ``fc``, adapted to small grayscale images.

    The 7x7 stride-2 stem is replaced by a 3x3 conv of stride ``stem_stride`` over
    ``in_channels`` (the max-pool is kept): with ``stem_stride=1`` a 28x28 image enters the
    first stage at 14x14 and the last at 2x2; ``stem_stride=2`` (7x7 and 1x1) costs about
    4x less, e.g. for CPU runs. ``fc`` is an ``nn.Identity``. Randomly initialised:
    pretrained weights need a network and expect 3-channel 224x224 inputs.

    Args:
        in_channels: input channels ``C``.
        stem_stride: stride of the first conv, ``1`` or ``2``.

    Attributes:
        out_features (int): 512, the width of the pooled features.
        net (torchvision.models.ResNet): the network.

    Shape:
        x (Tensor[B, C, H, W]) -> Tensor[B, 512].
    """

    def __init__(self, in_channels: int = 1, *, stem_stride: int = 1) -> None:
        super().__init__()
        from torchvision.models import resnet18

        owner = type(self).__name__
        self.in_channels = check_int(owner, "in_channels", in_channels)
        if stem_stride not in (1, 2):
            raise ValueError(f"{owner}: argument 'stem_stride' must be 1 or 2, got {stem_stride!r}")
        self.stem_stride = stem_stride
        net = resnet18(weights=None)
        net.conv1 = nn.Conv2d(self.in_channels, 64, 3, stride=stem_stride, padding=1, bias=False)
        self.net, self.out_features = strip_head(net)

    def get_config(self) -> dict[str, object]:
        """Constructor settings (the weights come from the state dict)."""
        return {"in_channels": self.in_channels, "stem_stride": self.stem_stride}

    def forward(self, x: Tensor) -> Tensor:
        """Features ``x (Tensor[B, C, H, W]) -> Tensor[B, 512]``."""
        return self.net(x)


def resnet18_backbone(in_channels: int = 1, *, stem_stride: int = 1) -> ResNet18Backbone:
    """A headless ResNet-18 for small grayscale images (see :class:`ResNet18Backbone`)."""
    return ResNet18Backbone(in_channels, stem_stride=stem_stride)


def _find_head(model: nn.Module, attr: str | None) -> tuple[nn.Module, str, nn.Linear]:
    """``(parent, name, linear)`` of the model's classifier head."""
    owner = "strip_head"
    if not isinstance(model, nn.Module):
        kind = type(model).__name__
        raise TypeError(f"{owner}: argument 'model' must be an nn.Module, got {kind}")
    candidates = [attr] if attr is not None else [a for a in HEAD_ATTRIBUTES if hasattr(model, a)]
    for name in candidates:
        parent: nn.Module = model
        *path, leaf = name.split(".")
        for part in path:
            parent = getattr(parent, part)
        head = getattr(parent, leaf, None)
        if isinstance(head, nn.Linear):
            return parent, leaf, head
        if isinstance(head, nn.Sequential):  # e.g. VGG's classifier: its last Linear
            linears = [k for k, m in head.named_children() if isinstance(m, nn.Linear)]
            if linears:
                return head, linears[-1], getattr(head, linears[-1])
        if attr is not None:
            raise ValueError(
                f"{owner}: argument 'attr' must name an nn.Linear (or a Sequential ending "
                f"in one) of the model, got {attr!r} -> {type(head).__name__}"
            )
    if isinstance(model, nn.Sequential):
        linears = [k for k, m in model.named_children() if isinstance(m, nn.Linear)]
        if linears:
            return model, linears[-1], getattr(model, linears[-1])
    raise ValueError(
        f"{owner}: argument 'model' must have a Linear head ({', '.join(HEAD_ATTRIBUTES)} "
        f"or a Sequential's last Linear), got {type(model).__name__}; pass attr='...'"
    )


def strip_head(model: nn.Module, *, attr: str | None = None) -> tuple[nn.Module, int]:
    """Replace a model's linear classifier head by ``nn.Identity``, in place.

    The head is ``model.<attr>`` if given (dotted paths such as ``"classifier.6"`` work),
    else the first of :data:`HEAD_ATTRIBUTES` that is an ``nn.Linear`` or a
    ``Sequential`` holding one (its last ``Linear`` is replaced, so the dropout before it
    stays), else a ``Sequential`` model's last ``Linear``. Layers after the replaced
    ``Linear`` in a ``Sequential`` (e.g. a softmax) are kept: remove them yourself.

    Args:
        model: e.g. ``torchvision.models.resnet18()`` or an ``nn.Sequential``.
        attr: the head's attribute name (default: found as above).

    Returns:
        tuple[nn.Module, int]: ``model`` itself, now mapping inputs to ``[B, D]``, and the
        head's ``in_features`` ``D`` (the kernel layer's ``in_features``).

    Raises:
        ValueError: no linear head found, or ``attr`` names something else.
    """
    parent, name, head = _find_head(model, attr)
    setattr(parent, name, nn.Identity())
    return model, head.in_features


def with_kernel_head(
    model: nn.Module,
    kernel_layer: KernelFeatureMap,
    *,
    num_classes: int,
    attr: str | None = None,
    **kwargs: Any,
) -> KernelClassifier:
    """A :class:`~kernel_layers.KernelClassifier` with ``model``'s head replaced.

    ``model`` loses its linear head (:func:`strip_head`, in place) and becomes the
    backbone; ``kernel_layer`` takes the head's inputs; the read-out is the classifier's
    (a closed-form ridge head for DI, a linear softmax layer for ``objective="ce"``).

    Args:
        model: a network ending in a linear classifier.
        kernel_layer: e.g. ``NystromLayer(D, J, gamma=...)`` with ``D`` the head's
            ``in_features``.
        num_classes: number of classes.
        attr: the head's attribute name (default: found by :func:`strip_head`).
        **kwargs: further :class:`~kernel_layers.KernelClassifier` arguments
            (``objective``, ``lr``, ``backbone_lr``, ``init_landmarks``, ...).

    Returns:
        KernelClassifier: with ``backbone=model``.

    Raises:
        ValueError: the kernel layer's ``in_features`` differs from the head's.
    """
    if not isinstance(kernel_layer, KernelFeatureMap):
        raise TypeError(
            "with_kernel_head: argument 'kernel_layer' must be a KernelFeatureMap "
            f"(NystromLayer, FourierLayer, ...), got {type(kernel_layer).__name__}"
        )
    width = kernel_layer.in_features
    _, parent_name, head = _find_head(model, attr)
    if width != head.in_features:
        raise ValueError(
            f"with_kernel_head: argument 'kernel_layer' must have in_features="
            f"{head.in_features} (the input width of the replaced head {parent_name!r}), "
            f"got {width}"
        )
    backbone, _ = strip_head(model, attr=attr)
    return KernelClassifier(kernel_layer, num_classes=num_classes, backbone=backbone, **kwargs)
