"""Ensemble Nystrom: a weighted concatenation of Nystrom maps on disjoint landmark sets."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from numbers import Integral
from typing import Any, cast

import torch
from torch import Tensor, nn

from kernel_layers._random import make_generator
from kernel_layers._validation import (
    check_bool,
    check_factory,
    check_features,
    check_int,
    check_matrix,
    check_positive,
)
from kernel_layers.kernels import Kernel
from kernel_layers.layers.base import KernelFeatureMap
from kernel_layers.layers.kernel_choice import KernelChoice
from kernel_layers.layers.nystrom import NystromLayer
from kernel_layers.selection.landmarks import random_landmarks

__all__ = ["DEFAULT_NUM_MAPS", "EnsembleNystrom", "split_sizes"]

#: Number of maps when ``out_features`` is an integer and ``num_maps`` is not given.
DEFAULT_NUM_MAPS = 4


def split_sizes(total: int, num_maps: int) -> list[int]:
    """Split ``total`` landmarks over ``num_maps`` maps as evenly as possible.

    Returns:
        list[int]: ``num_maps`` sizes summing to ``total``, the larger ones first.
    """
    base, extra = divmod(total, num_maps)
    return [base + (i < extra) for i in range(num_maps)]


class EnsembleNystrom(KernelChoice, KernelFeatureMap):
    r"""Ensemble Nystrom features: ``phi(x) = [sqrt(w_1) phi_1(x), ..., sqrt(w_m) phi_m(x)]``.

    Each ``phi_i`` is a :class:`~kernel_layers.NystromLayer` on its own landmarks
    ``Z_i`` (``n_i`` of them) and the weights are non-negative and sum to 1, so

    .. math:: \phi(x)^T \phi(y) = \sum_i w_i\, k(x, Z_i) K_{Z_i}^{-1} k(Z_i, y),

    the weighted average of the maps' Nystrom approximations of ``k(x, y)`` (Kumar,
    Mohri and Talwalkar, "Ensemble Nystrom method", NIPS 2009; the book chapter's
    ensemble Nystrom). Each map factorises only its own ``n_i x n_i`` landmark matrix,
    so ``m`` maps of ``n / m`` landmarks cost ``m`` times less than one map of ``n`` in
    the ``O(n^3)`` factorisation. :meth:`from_data` draws disjoint landmark sets.

    Args:
        in_features: input dimension ``D``.
        out_features: the total number of features ``n = sum_i n_i`` (split as evenly
            as possible over ``num_maps`` maps, see :func:`split_sizes`), or the sequence
            of per-map sizes ``[n_1, ..., n_m]``.
        num_maps: number of maps ``m`` (default: ``len(out_features)`` for a sequence,
            else :data:`DEFAULT_NUM_MAPS`); at most ``out_features``.
        weights (Sequence[float] | Tensor[m] | None): non-negative weights, not all 0,
            normalised to sum to 1 (default: uniform ``1 / m``). Stored as a buffer.
        kernel: a registered kernel name, a :class:`~kernel_layers.kernels.Kernel` or a
            callable, shared by every map (see :class:`~kernel_layers.NystromLayer`).
        gamma: kernel parameter ``> 0``.
        kernel_params: further kernel parameters by name.
        landmarks (Sequence[Tensor[n_i, D]] | None): initial landmarks, one tensor per
            map (their row counts must match the sizes); ``None`` draws each map's
            landmarks uniformly in ``[0, 1)^D``.
        trainable: whether the landmarks receive gradients.
        jitter: relative diagonal jitter of each ``K_{Z_i}`` (default: the Nystrom
            layer's for the dtype).
        seed: seed of the random landmarks (exclusive with ``generator``).
        generator: a CPU ``torch.Generator``.
        device: device of the landmarks.
        dtype: dtype of the landmarks.

    Attributes:
        maps (ModuleList[NystromLayer]): the ``m`` maps; ``maps[i].landmarks`` is
            ``Parameter[n_i, D]``.
        weights (Tensor[m]): the normalised weights (a buffer).
        sizes (list[int]): ``[n_1, ..., n_m]``.

    Shape:
        x (Tensor[..., D]) -> Tensor[..., n].
    """

    weights: Tensor

    def __init__(
        self,
        in_features: int,
        out_features: int | Sequence[int],
        *,
        num_maps: int | None = None,
        weights: Sequence[float] | Tensor | None = None,
        kernel: str | Kernel | Callable[[Tensor, Tensor], Tensor] = "gaussian",
        gamma: float = 1.0,
        kernel_params: Mapping[str, float] | None = None,
        landmarks: Sequence[Tensor] | None = None,
        trainable: bool = True,
        jitter: float | None = None,
        seed: int | None = None,
        generator: torch.Generator | None = None,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        owner = type(self).__name__
        check_int(owner, "in_features", in_features)
        device, dtype = check_factory(owner, device, dtype)
        check_bool(owner, "trainable", trainable)
        sizes = _check_sizes(owner, out_features, num_maps)
        super().__init__(in_features, sum(sizes))
        self.sizes = sizes
        self.num_maps = len(sizes)
        self._set_kernel(kernel, gamma, kernel_params)
        if jitter is not None:
            check_positive(owner, "jitter", jitter)
        gen = make_generator(seed, generator, owner=owner) if landmarks is None else None
        if landmarks is not None:
            _check_landmarks(owner, landmarks, self.sizes, self.in_features)
            for i, z in enumerate(landmarks):  # in the kernel's input domain, if it has one
                self.kernel_spec.validate_input(owner, f"landmarks[{i}]", z)
        checked = _check_weights(owner, weights, self.num_maps, torch.float64)
        self.maps = nn.ModuleList(
            NystromLayer(
                self.in_features,
                size,
                kernel=kernel,
                gamma=self.gamma,
                kernel_params=kernel_params,
                landmarks=None if landmarks is None else landmarks[i],
                trainable=trainable,
                jitter=jitter,
                generator=gen,
                device=device,
                dtype=dtype,
            )
            for i, size in enumerate(self.sizes)
        )
        # in the maps' dtype (float64 landmarks given: float64 weights) and on their device
        first = cast(NystromLayer, self.maps[0]).landmarks
        self.register_buffer("weights", checked.to(dtype=first.dtype, device=first.device))

    def _on_gamma(self, value: float) -> None:
        """Every map approximates the ensemble's kernel: a new ``gamma`` is theirs too."""
        for m in getattr(self, "maps", ()):
            m.gamma = value

    def get_config(self) -> dict[str, object]:
        """Constructor settings as primitives (landmarks and weights: the state dict)."""
        first = self.maps[0]
        return {
            **self.base_config(),
            "out_features": list(self.sizes),
            **self._kernel_config(),
            "trainable": first.landmarks.requires_grad,
            "jitter": first._jitter,
        }

    @classmethod
    def from_data(
        cls,
        x: Tensor,
        out_features: int | Sequence[int],
        num_maps: int | None = None,
        *,
        seed: int | None = None,
        generator: torch.Generator | None = None,
        **kwargs: Any,
    ) -> EnsembleNystrom:
        """An ensemble whose maps use disjoint, uniformly random subsets of rows of ``x``.

        Args:
            x (Tensor[N, D]): data to select from (``N >= n``).
            out_features: the total ``n`` or the per-map sizes (as in the constructor).
            num_maps: number of maps (as in the constructor).
            seed: seed of the selection (exclusive with ``generator``).
            generator: a CPU ``torch.Generator``.
            **kwargs: further arguments of :class:`EnsembleNystrom` (``weights``,
                ``kernel``, ``gamma``, ``trainable``, ...).

        Returns:
            EnsembleNystrom: with ``in_features = D``; no row is a landmark of two maps.
        """
        owner = f"{cls.__name__}.from_data"
        check_matrix(owner, "x", x)
        sizes = _check_sizes(owner, out_features, num_maps)
        total = sum(sizes)
        if total > x.shape[0]:
            raise ValueError(
                f"{owner}: argument 'out_features' must total <= the number of rows of x "
                f"({x.shape[0]}), got {total}"
            )
        gen = make_generator(seed, generator, owner=owner)
        index = random_landmarks(x, total, generator=gen)
        landmarks = list(x[index].split(sizes))
        return cls(x.shape[1], sizes, landmarks=landmarks, **kwargs)

    def input_limit(self) -> float:
        """The smallest of the maps' :meth:`NystromLayer.input_limit` (each map checks its
        inputs against its own)."""
        return min(cast(NystromLayer, m).input_limit() for m in self.maps)

    def forward(self, x: Tensor) -> Tensor:
        """Map ``x (Tensor[..., D])`` to ``Tensor[..., n]`` ensemble Nystrom features."""
        check_features(type(self).__name__, "x", x, self.in_features)
        features = [m(x) for m in self.maps]  # each in its output dtype (half rows: float32)
        scales = self.weights.sqrt().to(features[0].dtype)
        return torch.cat([f * scales[i] for i, f in enumerate(features)], dim=-1)

    def exact_kernel(self, x: Tensor, z: Tensor) -> Tensor:
        """``k(x, z) (Tensor[B, n])``: the kernel every map approximates, in the inputs' dtype."""
        return self._kernel_matrix(x, z)

    def extra_repr(self) -> str:
        weights = [round(float(w), 6) for w in self.weights]
        text = super().extra_repr()
        text += f", num_maps={self.num_maps}, sizes={self.sizes}, weights={weights}"
        text += self._kernel_repr()
        trainable = any(p.requires_grad for p in self.parameters())
        return text + f", trainable={trainable}"


def _check_sizes(owner: str, out_features: object, num_maps: object) -> list[int]:
    """Per-map sizes from ``out_features`` (total or sequence) and ``num_maps``."""
    if isinstance(out_features, Integral) and not isinstance(out_features, bool):
        total = check_int(owner, "out_features", out_features)
        maps = check_int(owner, "num_maps", DEFAULT_NUM_MAPS if num_maps is None else num_maps)
        if maps > total:
            raise ValueError(
                f"{owner}: argument 'num_maps' must be <= out_features={total} (each map "
                f"needs a landmark), got {maps}"
            )
        return split_sizes(total, maps)
    if isinstance(out_features, Sequence) and not isinstance(out_features, str):
        if len(out_features) == 0:
            raise ValueError(f"{owner}: argument 'out_features' must be non-empty, got []")
        sizes = [check_int(owner, f"out_features[{i}]", n) for i, n in enumerate(out_features)]
        if num_maps is not None and num_maps != len(sizes):
            raise ValueError(
                f"{owner}: argument 'num_maps' must equal len(out_features)={len(sizes)}, "
                f"got {num_maps!r}"
            )
        return sizes
    raise TypeError(
        f"{owner}: argument 'out_features' must be an integer >= 1 or a sequence of them, "
        f"got {out_features!r}"
    )


def _check_weights(owner: str, weights: object, num_maps: int, dtype: torch.dtype | None) -> Tensor:
    """Normalised weights ``Tensor[m]`` (uniform by default)."""
    dtype = dtype or torch.get_default_dtype()
    if weights is None:
        return torch.full((num_maps,), 1.0 / num_maps, dtype=dtype)
    try:
        w = torch.as_tensor(weights, dtype=torch.float64).detach().cpu()
    except (TypeError, ValueError, RuntimeError):
        raise TypeError(
            f"{owner}: argument 'weights' must be a sequence of {num_maps} numbers, got {weights!r}"
        ) from None
    if w.shape != (num_maps,):
        raise ValueError(
            f"{owner}: argument 'weights' must have one entry per map ({num_maps}), "
            f"got shape {list(w.shape)}"
        )
    if not bool(torch.isfinite(w).all()) or bool((w < 0).any()) or not float(w.sum()) > 0:
        raise ValueError(
            f"{owner}: argument 'weights' must be finite, >= 0 and not all 0, got {w.tolist()}"
        )
    return (w / w.sum()).to(dtype)


def _check_landmarks(owner: str, landmarks: object, sizes: list[int], width: int) -> None:
    """One ``Tensor[n_i, D]`` per map."""
    if isinstance(landmarks, Tensor) or not isinstance(landmarks, Sequence):
        raise TypeError(
            f"{owner}: argument 'landmarks' must be a sequence of {len(sizes)} tensors "
            f"(one per map), got {type(landmarks).__name__}"
        )
    if len(landmarks) != len(sizes):
        raise ValueError(
            f"{owner}: argument 'landmarks' must hold one tensor per map ({len(sizes)}), "
            f"got {len(landmarks)}"
        )
    for i, (z, size) in enumerate(zip(landmarks, sizes, strict=True)):
        check_matrix(owner, f"landmarks[{i}]", z, width=width)
        if z.shape[0] != size:
            raise ValueError(
                f"{owner}: argument 'landmarks[{i}]' must have {size} rows (the map's size), "
                f"got shape {list(z.shape)}"
            )
