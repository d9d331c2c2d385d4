"""The contract every kernel feature map of this library keeps.

:class:`KernelFeatureMap` is what :class:`~kernel_layers.KernelClassifier`, the
checkpoints and the exporters talk to: a map from ``Tensor[B, in_features]`` to
``Tensor[B, feature_width]`` that knows its own constructor settings, its blocks of
features and how its Discriminant Information is computed. A user-defined map that
derives from it trains in ``KernelClassifier`` like the library's own.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from typing import NoReturn

from torch import Tensor, nn

from kernel_layers._validation import check_device, check_features, check_int, raise_not_scriptable
from kernel_layers.numerics.precision import distance_limit, upcast
from kernel_layers.objectives import DEFAULT_RHO, discriminant_information

__all__ = ["KernelFeatureMap"]


class KernelFeatureMap(nn.Module, ABC):
    """Abstract base of the kernel feature maps.

    A subclass calls ``super().__init__(in_features, out_features)`` (which validates
    both) and implements :meth:`forward` and :meth:`get_config`. The rest has defaults
    that a map overrides where it knows better: ``NystromLayer`` computes its DI from
    the landmarks without forming the features, and asks for training rows to draw its
    landmarks from.

    A minimal map::

        class CosineMap(KernelFeatureMap):
            def __init__(self, in_features: int, out_features: int) -> None:
                super().__init__(in_features, out_features)
                self.register_buffer("w", torch.randn(in_features, out_features))

            def forward(self, x):
                return torch.cos(x @ self.w)

            def get_config(self):
                return self.base_config()

    Args:
        in_features: ``D``, the width of the inputs (an integer ``>= 1``).
        out_features: ``J``, the map's size (landmarks, frequencies; an integer ``>= 1``).

    Attributes:
        in_features (int): ``D``.
        out_features (int): ``J``.

    Raises:
        TypeError: ``in_features`` or ``out_features`` is not an integer.
        ValueError: ``in_features`` or ``out_features`` is below 1.
    """

    in_features: int
    out_features: int

    def __init__(self, in_features: int, out_features: int) -> None:
        super().__init__()
        owner = type(self).__name__
        self.in_features = check_int(owner, "in_features", in_features)
        self.out_features = check_int(owner, "out_features", out_features)

    @abstractmethod
    def forward(self, x: Tensor) -> Tensor:
        """The features of ``x``.

        Args:
            x (Tensor[B, D]): inputs.

        Returns:
            Tensor[B, F]: features, ``F = feature_width``.
        """

    @abstractmethod
    def get_config(self) -> dict[str, object]:
        """Constructor settings as primitives; the learnt and drawn tensors come from
        the state dict.

        Convention: ``type(self)(**self.get_config())`` builds a map of the same shape,
        whose ``load_state_dict(self.state_dict())`` then reproduces this map's
        features. Start from :meth:`base_config` and add the map's own settings; seeds,
        generators, devices and dtypes are not settings (the state dict carries them).
        """

    def base_config(self) -> dict[str, object]:
        """``{"in_features": D, "out_features": J}``, the start of :meth:`get_config`."""
        return {"in_features": self.in_features, "out_features": self.out_features}

    @property
    def feature_width(self) -> int:
        """``F``, the width of :meth:`forward`'s output (``out_features`` by default)."""
        return self.out_features

    @property
    def feature_blocks(self) -> list[range]:
        """Contiguous ranges of feature columns that belong together (the channels of
        multiple kernel learning, penalised as groups); one range of all by default."""
        return [range(self.feature_width)]

    def data_rows_wanted(self) -> int:
        """How many training rows (in the map's input space) :meth:`init_from_data`
        wants before training starts; 0 (the default): none."""
        return 0

    def init_from_data(self, rows: Tensor) -> None:
        """Initialise the map from training rows (called once, before training, with
        :meth:`data_rows_wanted` rows when that is positive).

        Args:
            rows (Tensor[N, D]): training inputs of the map.
        """
        del rows

    def exact_kernel(self, x: Tensor, z: Tensor) -> Tensor:
        """The kernel matrix ``k(x, z)`` this map approximates (``phi(x)^T phi(z)``
        estimates it), with the map's current settings (learned bandwidths included),
        computed in the inputs' dtype; what
        :class:`~kernel_layers.kernels.approximation.KernelApproximationError` compares
        the features with.

        Args:
            x (Tensor[B, D]): inputs.
            z (Tensor[n, D]): inputs.

        Returns:
            Tensor[B, n]: ``k(x, z)``.

        Raises:
            NotImplementedError: the map does not state its kernel (the default); pass
                ``kernel=`` to ``KernelApproximationError`` instead.
        """
        del x, z
        raise NotImplementedError(
            f"{type(self).__name__} does not state the kernel it approximates: override "
            f"exact_kernel(x, z), or pass kernel= to KernelApproximationError"
        )

    def input_limit(self) -> float:
        """The largest input magnitude the map takes: :meth:`forward` refuses an ``x``
        with a larger entry (``ValueError``), and an exported
        :class:`~kernel_layers.training.predictor.Predictor` gives such a row class
        :data:`~kernel_layers.training.predictor.NO_CLASS`. Read from the map's current
        dtype (it changes with ``.to(dtype)``); ``math.inf`` (the default) for a map
        that states no limit."""
        return math.inf

    @staticmethod
    def _distance_limit(reference: Tensor, width: int) -> float:
        """What ``width``-term sums of squares in ``reference``'s (upcast) dtype hold: the
        :meth:`input_limit` of the library's maps."""
        return distance_limit(upcast(reference).dtype, width)

    def _check_input(self, x: Tensor, reference: Tensor, *, why: str) -> None:
        """Check ``x (Tensor[..., D])`` before mapping it: ``D = in_features``, finite
        values no larger than :meth:`input_limit` (``why`` says what would overflow), and
        ``reference``'s device.

        Raises:
            ValueError: wrong width, non-finite or too large values, or ``x`` on another
                device than ``reference``.
        """
        owner = type(self).__name__
        limit = self.input_limit()
        check_features(
            owner,
            "x",
            x,
            self.in_features,
            max_abs=limit if math.isfinite(limit) else None,
            why=why,
        )
        check_device(owner, "x", x, reference.device)

    def discriminant_information(
        self,
        x: Tensor,
        targets: Tensor,
        *,
        rho: float = DEFAULT_RHO,
        num_classes: int | None = None,
        sync_dist: bool = False,
    ) -> Tensor:
        """DI of this map's features of ``x`` (by default computed from the features).

        Args:
            x (Tensor[B, D]): inputs of the map.
            targets (Tensor[B] | Tensor[B, L]): labels or a target matrix.
            rho: ridge parameter ``> 0``.
            num_classes: number of classes ``L`` for int labels.
            sync_dist: all-reduce the sufficient statistics (exact DI under DDP).

        Returns:
            Tensor[]: the DI of the (global) batch.
        """
        return discriminant_information(
            self(x), targets, rho=rho, num_classes=num_classes, sync_dist=sync_dist
        )

    def extra_repr(self) -> str:
        """``in_features=D, out_features=J``; maps append their own settings."""
        return f"in_features={self.in_features}, out_features={self.out_features}"

    def __prepare_scriptable__(self) -> NoReturn:
        """Refuse ``torch.jit.script`` (the maps validate and dispatch in Python),
        naming the routes that work; a scriptable subclass may override this."""
        raise_not_scriptable(type(self).__name__)
