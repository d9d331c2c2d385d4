"""Fastfood features: Gaussian-kernel random features in ``O(J log d)`` time, ``O(J)`` memory.

Le, Sarlós and Smola, "Fastfood — approximating kernel expansions in loglinear time"
(ICML 2013). Random Fourier features need a dense ``[d, J]`` Gaussian matrix ``W``;
Fastfood replaces each ``d' x d'`` block of ``W^T`` (``d'`` = ``d`` padded to a power
of two) by ``V = (1 / (sigma sqrt(d'))) S H G P H B`` with ``H`` the Walsh–Hadamard
matrix (applied in ``O(d' log d')`` by the fast transform), ``B`` random signs, ``P`` a
random permutation, ``G`` a Gaussian diagonal and ``S`` a diagonal that gives each row the
norm of a Gaussian vector (``s_i ~ chi(d')``, ``S_ii = s_i / ||G||``). Every row of ``V``
then has the law of a row of ``W`` (Gaussian kernel ``exp(-gamma ||x - y||^2)``,
``1 / sigma^2 = 2 gamma``), and ``phi(x) = sqrt(2/J) cos(V x + b)``.

Trainable like :class:`~kernel_layers.FourierLayer` (the DI paper's Discussion names
Fastfood as the next map to train): the diagonals ``G`` and ``log S`` and the phases
``b`` are parameters (``2 K d' + J`` numbers for ``K = ceil(J / d')`` blocks: ``3 J``
when ``J`` is a multiple of ``d'``), ``B`` and ``P`` fixed buffers.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from kernel_layers._random import make_generator
from kernel_layers._validation import (
    check_bool,
    check_dtype,
    check_factory,
)
from kernel_layers.kernels import gaussian_kernel
from kernel_layers.layers.base import KernelFeatureMap
from kernel_layers.layers.kernel_choice import GammaSetting
from kernel_layers.numerics.precision import autocast_off, upcast

__all__ = ["FastfoodLayer", "hadamard_transform"]


def hadamard_transform(x: Tensor) -> Tensor:
    """The unnormalised Walsh–Hadamard transform along the last dimension.

    ``O(n log n)`` additions (``log2 n`` butterfly stages), differentiable.

    Args:
        x (Tensor[..., n]): ``n`` a power of two.

    Returns:
        Tensor[..., n]: ``x H`` with ``H`` the Sylvester Hadamard matrix (``H H = n I``).
    """
    n = x.shape[-1]
    lead = x.shape[:-1]
    h = 1
    while h < n:
        pairs = x.reshape(*lead, n // (2 * h), 2, h)
        first, second = pairs[..., 0, :], pairs[..., 1, :]
        x = torch.stack((first + second, first - second), dim=-2).reshape(*lead, n)
        h *= 2
    return x


class FastfoodLayer(GammaSetting, KernelFeatureMap):
    r"""Gaussian-kernel random features ``sqrt(2/J) cos(V x + b)`` with Fastfood ``V``.

    See the module docstring for the construction. ``J`` features come from
    ``ceil(J / d')`` independent blocks (the last one truncated).

    Args:
        in_features: input dimension ``d``.
        out_features: number of features ``J``.
        gamma: Gaussian kernel parameter ``> 0`` (scikit-learn's convention).
        trainable: whether ``G``, ``S`` and ``b`` receive gradients.
        seed: seed of the random draws (exclusive with ``generator``).
        generator: a CPU ``torch.Generator``.
        device: device of the parameters.
        dtype: dtype of the parameters.

    Attributes:
        gaussian (Parameter[K, d']): the diagonals ``G``.
        log_scale (Parameter[K, d']): ``log`` of the diagonals ``S / (sigma sqrt(d'))``.
        phases (Parameter[J]): ``b``.
        signs (Tensor[K, d']): the ``B`` diagonals (buffer).
        permutation (Tensor[K, d']): the ``P`` permutations (buffer).

    Shape:
        x (Tensor[..., d]) -> Tensor[..., J].
    """

    signs: Tensor
    permutation: Tensor

    _gamma_fixed = True  # S and G were drawn at its scale

    def __init__(
        self,
        in_features: int,
        out_features: int,
        *,
        gamma: float = 1.0,
        trainable: bool = True,
        seed: int | None = None,
        generator: torch.Generator | None = None,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__(in_features, out_features)
        owner = type(self).__name__
        device, dtype = check_factory(owner, device, dtype)
        self.gamma = gamma  # checked; fixed once built (S and G are drawn at its scale)
        self.trainable = check_bool(owner, "trainable", trainable)
        self.padded = 1 << (self.in_features - 1).bit_length()  # d' = a power of two
        self.num_blocks = math.ceil(self.out_features / self.padded)
        gen = make_generator(seed, generator, owner=owner)
        dtype = dtype or torch.get_default_dtype()
        blocks, width = self.num_blocks, self.padded
        # Draws in float64 on the CPU: a seed gives the same map on every device / dtype.
        signs = torch.randint(0, 2, (blocks, width), generator=gen).double() * 2 - 1
        permutation = torch.stack([torch.randperm(width, generator=gen) for _ in range(blocks)])
        gaussian = torch.randn(blocks, width, generator=gen, dtype=torch.float64)
        # s_i ~ chi(d'): the norm of a d'-dimensional standard Gaussian vector.
        chi = torch.stack(  # one block at a time: a d' x d' draw each
            [
                torch.randn(width, width, generator=gen, dtype=torch.float64).norm(dim=-1)
                for _ in range(blocks)
            ]
        )
        sigma_inv = math.sqrt(2.0 * self.gamma)
        scale = chi / gaussian.norm(dim=-1, keepdim=True) * (sigma_inv / math.sqrt(width))
        # |V x| of inputs in [0, 1] is at most scale * max|G| * d' * d: it must stay finite
        largest = (  # (a shape-only build on the meta device has no values to check)
            0.0
            if scale.is_meta
            else float(scale.max()) * float(gaussian.abs().max()) * width * self.in_features
        )
        if not largest < torch.finfo(dtype).max:
            raise ValueError(
                f"{owner}: argument 'gamma' must keep the projections V x of inputs in "
                f"[0, 1] finite in {dtype}, got gamma={self.gamma:g}"
            )
        phases = torch.rand(self.out_features, generator=gen, dtype=torch.float64) * 2 * math.pi
        self.register_buffer("signs", signs.to(device=device, dtype=dtype))
        self.register_buffer("permutation", permutation.to(device=device))
        self.gaussian = nn.Parameter(
            gaussian.to(device=device, dtype=dtype), requires_grad=trainable
        )
        # Learned in log space, like FourierLayer's ARD bandwidths: Adam's steps are then
        # relative, whatever the (small, ~sqrt(2 gamma / d')) size of the scales.
        self.log_scale = nn.Parameter(
            scale.log().to(device=device, dtype=dtype), requires_grad=trainable
        )
        self.phases = nn.Parameter(phases.to(device=device, dtype=dtype), requires_grad=trainable)

    def projections(self, x: Tensor) -> Tensor:
        """``V x`` for every block, truncated to ``J``: ``x (Tensor[B, d]) -> Tensor[B, J]``."""
        padded = nn.functional.pad(x, (0, self.padded - self.in_features))
        z = hadamard_transform(padded[:, None, :] * self.signs)  # [B, K, d']
        index = self.permutation.expand(z.shape[0], -1, -1)
        z = hadamard_transform(torch.gather(z, 2, index) * self.gaussian)
        blocks = (z * self.log_scale.exp()).reshape(x.shape[0], z.shape[1] * z.shape[2])
        return blocks[:, : self.out_features]

    def input_limit(self) -> float:
        """The largest input magnitude whose Hadamard transforms over the padded width
        ``d'`` stay finite in the layer's (upcast) dtype (see
        :meth:`KernelFeatureMap.input_limit`)."""
        return self._distance_limit(self.gaussian, self.padded)

    def forward(self, x: Tensor) -> Tensor:
        """Map ``x (Tensor[..., d])`` to ``Tensor[..., J]`` features (autocast off)."""
        owner = type(self).__name__
        self._check_input(x, self.gaussian, why="larger ones overflow the Hadamard transforms")
        with autocast_off(x):
            flat = check_dtype(owner, "x", x.reshape(-1, self.in_features), self.gaussian.dtype)
            phase = self.projections(upcast(flat)) + upcast(self.phases)
            out = torch.cos(phase) * math.sqrt(2.0 / self.out_features)
        return out.reshape(*x.shape[:-1], self.out_features)

    def exact_kernel(self, x: Tensor, z: Tensor) -> Tensor:
        """``exp(-gamma ||x - z||^2) (Tensor[B, n])``, the Gaussian kernel the features
        approximate (also once ``G``, ``S`` and ``b`` are trained), in the inputs' dtype."""
        return gaussian_kernel(x, z, self.gamma)

    def get_config(self) -> dict[str, object]:
        """Constructor settings as primitives (the draws come from the state dict)."""
        return {**self.base_config(), "gamma": self.gamma, "trainable": self.trainable}

    def extra_repr(self) -> str:
        return super().extra_repr() + (
            f", gamma={self.gamma}, blocks={self.num_blocks} x {self.padded}, "
            f"trainable={self.trainable}"
        )
