"""Random Fourier feature layer with trainable frequencies and phases, or learned bandwidths."""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Mapping, Sequence

import torch
from torch import Tensor, nn

from kernel_layers._random import make_generator
from kernel_layers._validation import (
    check_bool,
    check_choice,
    check_dtype,
    check_factory,
)
from kernel_layers.kernels import Kernel, spectral_quantiles
from kernel_layers.layers.ard import Bandwidths
from kernel_layers.layers.base import KernelFeatureMap
from kernel_layers.layers.kernel_choice import KernelChoice
from kernel_layers.numerics.linalg import refuse_double_backward
from kernel_layers.numerics.precision import autocast_off, upcast

__all__ = ["FEATURE_MAPS", "FourierLayer", "cosine_features", "cossin_features"]

#: Feature maps of :class:`FourierLayer`: ``sqrt(2/J) cos(x W + b)`` or the phase-free
#: pairs ``sqrt(1/J') [cos(x W), sin(x W)]``.
FEATURE_MAPS = ("cos", "cossin")


class _CosineFeatures(torch.autograd.Function):
    """``scale * cos(x W + b)`` with in-place passes and a fused backward.

    Backward, with ``E = -scale * sin(H) * dL/dPhi``: ``dx = E W^T``, ``dW = x^T E``,
    ``db = colsum(E)``; the factor ``-scale`` is applied to these small results rather
    than to the ``B x J`` matrix ``E`` (one pass over it fewer).
    """

    @staticmethod
    def forward(ctx, x: Tensor, w: Tensor, b: Tensor, scale: float) -> Tensor:
        # The phase added in place rather than by ``addmm`` (see benchmarks/di_step.py).
        h = torch.mm(x, w).add_(b)
        ctx.save_for_backward(x, w, h)
        ctx.scale = scale
        return torch.cos(h).mul_(scale)

    @staticmethod
    def backward(ctx, grad: Tensor):
        refuse_double_backward("FourierLayer")
        return _CosineFeatures._backward(ctx, grad)

    @staticmethod
    def _backward(ctx, grad: Tensor):
        x, w, h = ctx.saved_tensors
        e = torch.sin(h).mul_(grad)  # -scale is applied to the products below
        grad_x = e @ (w.mT * -ctx.scale) if ctx.needs_input_grad[0] else None
        grad_w = (x.mT @ e).mul_(-ctx.scale) if ctx.needs_input_grad[1] else None
        grad_b = e.sum(0).mul_(-ctx.scale) if ctx.needs_input_grad[2] else None
        return grad_x, grad_w, grad_b, None


def cosine_features(x: Tensor, frequencies: Tensor, phases: Tensor) -> Tensor:
    """Random Fourier map ``sqrt(2/J) cos(x W + b)`` (no validation).

    Args:
        x (Tensor[B, D]): inputs.
        frequencies (Tensor[D, J]): ``W``.
        phases (Tensor[J]): ``b``.

    Returns:
        Tensor[B, J]: features.
    """
    return _CosineFeatures.apply(x, frequencies, phases, math.sqrt(2.0 / frequencies.shape[1]))


def cossin_features(x: Tensor, frequencies: Tensor) -> Tensor:
    """Phase-free random Fourier map ``sqrt(1/J') [cos(x W), sin(x W)]`` (no validation).

    ``phi(x)^T phi(y) = (1/J') sum_j cos(w_j^T (x - y))``, an unbiased estimate of
    ``k(x, y)`` with lower variance than the phased map at equal ``J'``.

    Args:
        x (Tensor[B, D]): inputs.
        frequencies (Tensor[D, J']): ``W``.

    Returns:
        Tensor[B, 2 J']: features, the cosines first.
    """
    h = x @ frequencies
    return torch.cat([torch.cos(h), torch.sin(h)], dim=-1).mul_(
        math.sqrt(1.0 / frequencies.shape[1])
    )


class FourierLayer(KernelChoice, Bandwidths, KernelFeatureMap):
    r"""Random Fourier features ``phi(x) = sqrt(2/J) cos(x W + b)`` with learnable ``W, b``.

    For a shift-invariant kernel with spectral law ``p``, drawing ``W[:, j] ~ p`` and
    ``b_j ~ U[0, 2 pi]`` gives ``E[phi(x)^T phi(y)] = k(x, y)`` (Rahimi and Recht,
    "Random features for large-scale kernel machines", NIPS 2007). Training ``W`` and
    ``b`` with the Discriminant Information criterion adapts the map to the labels
    (RFDI in the DI paper). The draw is made eagerly in ``__init__`` so ``state_dict``
    round-trips before any forward pass.

    **Fourier kernel learning** (``ard=True``; Bazavan, Li and Sminchisescu, "Fourier
    kernel learning", ECCV 2012). The frequencies are ``W = diag(sigma) h(Omega)``:
    ``Omega ~ U(0, 1)`` is drawn once, ``h`` is the quantile of the kernel's
    standardised spectral law (``base_frequencies = h(Omega)``), and the bandwidth
    ``sigma = exp(log_bandwidth)`` is learned, one per input dimension or one per block
    of dimensions (``blocks``). Learning ``sigma`` learns an anisotropic kernel (e.g.
    ``exp(-sum_i sigma_i^2 (x_i - y_i)^2 / 2)`` for the Gaussian) without resampling;
    ``sigma_i -> 0`` switches input ``i`` off. The log parameterisation keeps ``sigma``
    positive and makes Adam's steps relative. Initially every ``sigma_i = scale(gamma)``,
    so ``W`` is exactly the non-ARD draw of the same seed. ``base_frequencies`` is a
    buffer, or a parameter with ``trainable_frequencies=True``.

    **Feature maps.** ``features="cos"`` gives ``sqrt(2/J) cos(x W + b)``;
    ``features="cossin"`` gives the phase-free pairs ``sqrt(1/J') [cos(x W), sin(x W)]``
    with ``J' = out_features / 2`` frequencies (``out_features`` must be even), whose
    inner products ``(1/J') sum_j cos(w_j^T (x - y))`` estimate ``k`` with lower variance.

    Kernels acting on ``log(x + c)`` (``"skewed_chi2"``, ``"skewed_intersection"``) map
    the inputs through it first and reject inputs ``<= -c``.

    Args:
        in_features: input dimension ``D``.
        out_features: number of features ``J``.
        kernel: a kernel with a spectral law: ``"gaussian"``
            (``exp(-gamma ||x-y||^2)``, frequencies ``N(0, 2 gamma)``), ``"laplacian"``
            (``exp(-gamma ||x-y||_1)``, Cauchy frequencies of scale ``gamma``),
            ``"cauchy"`` (``prod 1 / (1 + gamma (x_i-y_i)^2)``, Laplace frequencies of
            scale ``sqrt(gamma)``), ``"skewed_chi2"``, ``"skewed_intersection"`` (see
            :mod:`kernel_layers.kernels`).
        gamma: kernel parameter ``> 0`` (scikit-learn's convention).
        kernel_params: further kernel parameters by name (``{"c": ...}`` for the skewed
            kernels); unknown names raise, listing the valid ones.
        trainable: whether any parameter receives gradients (``False`` gives the
            untrained random-Fourier-features baseline).
        ard: learn per-dimension (or per-block) bandwidths ``sigma`` over a fixed draw.
        blocks: with ``ard``, one bandwidth per block: block sizes summing to
            ``in_features`` (``[2, 3]``) or index groups partitioning
            ``range(in_features)`` (``[[0, 3], [1, 2, 4]]``). ``None``: one per dimension.
        separable: with ``blocks``, give each block (channel) its own random Fourier map:
            the features split into ``len(blocks)`` contiguous groups
            (:attr:`feature_blocks`) whose frequencies act on their block's dimensions
            only, so the kernel is the sum of per-channel kernels with per-channel learned
            bandwidths (multiple kernel learning, Fourier kernel learning Sec. 3.4). With
            ``KernelClassifier(..., group_lasso=lam)`` the read-out drops whole channels.
        trainable_frequencies: whether the frequencies train: ``W`` itself without
            ``ard``, ``base_frequencies`` with it. ``None`` (default) means ``trainable``
            without ``ard`` and ``False`` with it.
        features: ``"cos"`` or ``"cossin"``.
        seed: seed of the draw (exclusive with ``generator``).
        generator: a CPU ``torch.Generator`` for the draw.
        device: device of the parameters.
        dtype: dtype of the parameters.

    Attributes:
        frequencies (Parameter[D, J'] | Tensor[D, J']): ``W`` (``J' = J`` for
            ``"cos"``, ``J / 2`` for ``"cossin"``); with ``ard`` a read-only tensor
            computed from ``log_bandwidth`` and ``base_frequencies``.
        phases (Parameter[J] | None): ``b`` (``None`` for ``"cossin"``).
        log_bandwidth (Parameter[K]): with ``ard``, ``log sigma`` per block (``K`` blocks,
            ``K = D`` without ``blocks``).
        base_frequencies (Tensor[D, J']): with ``ard``, ``h(Omega)``.

    Shape:
        x (Tensor[..., D]) -> Tensor[..., J].
    """

    _gamma_fixed = True  # the frequencies were drawn at its scale

    block_mask: Tensor | None

    def __init__(
        self,
        in_features: int,
        out_features: int,
        *,
        kernel: str | Kernel = "gaussian",
        gamma: float = 1.0,
        kernel_params: Mapping[str, float] | None = None,
        trainable: bool = True,
        ard: bool = False,
        blocks: Sequence[int] | Sequence[Sequence[int]] | None = None,
        separable: bool = False,
        trainable_frequencies: bool | None = None,
        features: str = "cos",
        seed: int | None = None,
        generator: torch.Generator | None = None,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__(in_features, out_features)
        owner = type(self).__name__
        device, dtype = check_factory(owner, device, dtype)
        spec = self._set_kernel(kernel, gamma, kernel_params, spectral=True)
        check_choice(owner, "features", features, FEATURE_MAPS)
        if features == "cossin" and self.out_features % 2:
            raise ValueError(
                f"{owner}: argument 'out_features' must be even for features='cossin' "
                f"(cos/sin pairs), got {self.out_features}"
            )
        self.features = features
        self.trainable = check_bool(owner, "trainable", trainable)
        self._check_ard(ard, blocks)
        self.separable = check_bool(owner, "separable", separable)
        if separable and (self.blocks is None or features != "cos"):
            raise ValueError(
                f"{owner}: argument 'separable' must be False unless blocks are given with "
                f"ard=True and features='cos' (one map per block), got separable=True with "
                f"blocks={blocks!r}, features={features!r}"
            )
        if separable and self.out_features < len(self.blocks or ()):
            raise ValueError(
                f"{owner}: argument 'out_features' must be at least the number of blocks "
                f"({len(self.blocks or ())}) with separable=True, got {self.out_features}"
            )
        if trainable_frequencies is None:
            trainable_frequencies = self.trainable and not ard
        check_bool(owner, "trainable_frequencies", trainable_frequencies)
        if trainable_frequencies and not self.trainable:
            raise ValueError(
                f"{owner}: argument 'trainable_frequencies' must be False or None when "
                f"trainable=False, got {trainable_frequencies}"
            )
        self.trainable_frequencies = trainable_frequencies

        num_frequencies = self.out_features // 2 if features == "cossin" else self.out_features
        gen = make_generator(seed, generator, owner=owner)
        dtype = dtype or torch.get_default_dtype()
        # h(Omega) in float64 on the CPU: the same seed gives the same W on every device
        # and dtype, and (at initialisation) with or without ard.
        base = spectral_quantiles(
            spec, self.in_features, num_frequencies, generator=gen, dtype=torch.float64
        )
        assert spec.scale is not None  # get_kernel(..., spectral=True) checked it
        scale = spec.scale(self.gamma)
        # (a shape-only build on the meta device has no values to check)
        largest = 0.0 if base.is_meta else scale * float(base.abs().max()) * self.in_features
        if not largest < torch.finfo(dtype).max:  # x W of inputs in [0, 1] would overflow
            raise ValueError(
                f"{owner}: argument 'gamma' must keep the phases x W of inputs in [0, 1] "
                f"finite in {dtype}, got gamma={self.gamma:g} (frequency scale {scale:.3g})"
            )
        self._init_bandwidths(math.log(scale), trainable=self.trainable, dtype=dtype, device=device)
        if ard:
            base = base.to(dtype=dtype, device=device)
            if trainable_frequencies:
                self.base_frequencies = nn.Parameter(base)
            else:
                self.register_buffer("base_frequencies", base)
            self.register_buffer("block_mask", self._separable_mask(dtype), persistent=False)
        else:
            self.register_parameter(
                "frequencies",
                nn.Parameter(
                    (scale * base).to(dtype=dtype, device=device),
                    requires_grad=trainable_frequencies,
                ),
            )
        if features == "cos":
            phases = torch.rand(num_frequencies, generator=gen, dtype=torch.float64) * (2 * math.pi)
            self.phases = nn.Parameter(
                phases.to(dtype=dtype, device=device), requires_grad=self.trainable
            )
        else:
            self.register_parameter("phases", None)

    # ------------------------------------------------------------------ frequencies
    @property
    def frequencies(self) -> Tensor:
        """``W (Tensor[D, J'])``: the parameter, or ``diag(sigma) h(Omega)`` with ``ard``."""
        params = self._parameters
        if "frequencies" in params:
            frequencies = params["frequencies"]
            assert frequencies is not None
            return frequencies
        sigma = self.input_bandwidth
        if sigma is not None:
            scaled = sigma.to(self.base_frequencies.dtype)[:, None] * self.base_frequencies
            return scaled if self.block_mask is None else scaled * self.block_mask
        raise AttributeError("frequencies")

    @property
    def feature_blocks(self) -> list[range]:
        """With ``separable=True``, the features of each block (contiguous ranges, in
        block order: the channels of multiple kernel learning); else one range of all."""
        if not self.separable or self.blocks is None:
            return [range(self.out_features)]
        count, extra = divmod(self.out_features, len(self.blocks))
        sizes = [count + (k < extra) for k in range(len(self.blocks))]
        bounds = [0, *itertools.accumulate(sizes)]
        return [range(a, b) for a, b in itertools.pairwise(bounds)]

    # ---------------------------------------------------------------------- forward
    def input_limit(self) -> float:
        """The largest input magnitude whose phases ``x W`` stay finite in the layer's
        (upcast) dtype (see :meth:`KernelFeatureMap.input_limit`)."""
        return self._distance_limit(self._device_reference(), self.in_features)

    def forward(self, x: Tensor) -> Tensor:
        """Map ``x (Tensor[..., D])`` to ``Tensor[..., J]`` features.

        Runs with autocast disabled; float16 / bfloat16 inputs (or parameters) are
        computed in float32, and the features come out in that dtype.
        """
        owner = type(self).__name__
        self._check_input(x, self._device_reference(), why="larger ones overflow the phases x W")
        with autocast_off(x):  # the phase x W + b never runs in low precision
            frequencies = self.frequencies
            flat = check_dtype(owner, "x", x.reshape(-1, self.in_features), frequencies.dtype)
            flat, frequencies = upcast(flat), upcast(frequencies)
            transform: Callable[[Tensor], Tensor] | None = self._kernel.transform
            if transform is not None:
                self._kernel.validate_input(owner, "x", flat)
                flat = transform(flat)
            if self.features == "cos":
                out = cosine_features(flat, frequencies, upcast(self.phases))
            else:
                out = cossin_features(flat, frequencies)
        return out.reshape(*x.shape[:-1], self.out_features)

    def exact_kernel(self, x: Tensor, z: Tensor) -> Tensor:
        """``k(x, z) (Tensor[B, n])`` of ``x (Tensor[B, D])``, ``z (Tensor[n, D])``: the
        kernel the features estimate, in the inputs' dtype (trained frequencies and phases
        approximate the same kernel).

        With ``ard``, the frequencies ``diag(sigma) h(Omega)`` estimate the kernel at
        ``gamma`` of the inputs scaled by ``sigma / scale(gamma)`` (the layer starts at
        ``sigma = scale(gamma)``: the isotropic kernel); with ``separable``, the sum over
        blocks of that kernel on the block's inputs, weighted by the block's share of
        the features.

        Raises:
            ValueError: ``ard`` with a kernel that acts on ``log(x + c)`` (the scaled
                kernel has no closed form here).
        """
        spec = self.kernel_spec
        sigma = self.input_bandwidth
        if sigma is None:
            return self._kernel_matrix(x, z)
        if spec.transform is not None or spec.scale is None:
            raise ValueError(
                f"{type(self).__name__}: exact_kernel needs a kernel on the inputs themselves with "
                f"ard=True (the learned bandwidths scale log(x + c) here), got kernel "
                f"{self.kernel!r}"
            )
        ratio = sigma.to(x.dtype) / spec.scale(self.gamma)
        x, z = x * ratio, z * ratio
        if not self.separable or self.blocks is None:
            return self._kernel_matrix(x, z)
        parts = [
            self._kernel_matrix(x[:, list(dims)], z[:, list(dims)])
            * (len(features) / self.out_features)
            for dims, features in zip(self.blocks, self.feature_blocks, strict=True)
        ]
        return torch.stack(parts).sum(0)

    def _device_reference(self) -> Tensor:
        """A parameter or buffer of the layer (they share one device)."""
        for tensor in self.parameters():
            return tensor
        return next(self.buffers())

    def get_config(self) -> dict[str, object]:
        """Constructor settings as primitives (the draws come from the state dict)."""
        return {
            **self.base_config(),
            **self._kernel_config(),
            "trainable": self.trainable,
            **self._ard_config(),
            "separable": self.separable,
            "trainable_frequencies": self.trainable_frequencies,
            "features": self.features,
        }

    def _separable_mask(self, dtype: torch.dtype) -> Tensor | None:
        """``[D, J']``: 1 where input dimension ``d`` belongs to the block of frequency
        ``j`` (``separable`` blocks), else 0; ``None`` when not separable."""
        if not self.separable or self.block_index is None:
            return None
        owner_of = torch.repeat_interleave(  # on the CPU: a meta build has no values
            torch.arange(len(self.feature_blocks), device="cpu"),
            torch.tensor([len(r) for r in self.feature_blocks], device="cpu"),
        ).to(self.block_index.device)
        return (self.block_index[:, None] == owner_of[None, :]).to(dtype)

    @torch.no_grad()
    def _refill_derived_buffers(self) -> None:
        super()._refill_derived_buffers()
        current = getattr(self, "block_mask", None)  # a mask with ard and separable only
        if current is not None:
            mask = self._separable_mask(current.dtype)
            assert mask is not None  # the buffer holds a mask only where there is one
            current.copy_(mask)

    def extra_repr(self) -> str:
        text = super().extra_repr() + self._kernel_repr() + f", trainable={self.trainable}"
        text += self._ard_repr()
        if self.ard:
            text += f", trainable_frequencies={self.trainable_frequencies}"
            if self.separable:
                text += ", separable=True"
        if self.features != "cos":
            text += f", features={self.features!r}"
        return text
