"""Random Fourier feature layer with trainable frequencies and phases."""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from kernel_layers._random import make_generator
from kernel_layers._validation import check_features, check_int, check_positive
from kernel_layers.kernels import Kernel, get_kernel, sample_frequencies

__all__ = ["FourierLayer", "cosine_features"]


class _CosineFeatures(torch.autograd.Function):
    """``scale * cos(x W + b)`` with in-place passes and a fused backward.

    Backward, with ``E = -scale * sin(H) * dL/dPhi``: ``dx = E W^T``, ``dW = x^T E``,
    ``db = colsum(E)``.
    """

    @staticmethod
    def forward(ctx, x: Tensor, w: Tensor, b: Tensor, scale: float) -> Tensor:  # type: ignore[override]
        h = torch.addmm(b, x, w)
        ctx.save_for_backward(x, w, h)
        ctx.scale = scale
        return torch.cos(h).mul_(scale)

    @staticmethod
    def backward(ctx, grad: Tensor):  # type: ignore[override]
        x, w, h = ctx.saved_tensors
        e = torch.sin(h).mul_(grad).mul_(-ctx.scale)
        grad_x = e @ w.mT if ctx.needs_input_grad[0] else None
        grad_w = x.mT @ e if ctx.needs_input_grad[1] else None
        grad_b = e.sum(0) if ctx.needs_input_grad[2] else None
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


class FourierLayer(nn.Module):
    r"""Random Fourier features ``phi(x) = sqrt(2/J) cos(x W + b)`` with learnable ``W, b``.

    For a shift-invariant kernel with spectral law ``p``, drawing ``W[:, j] ~ p`` and
    ``b_j ~ U[0, 2 pi]`` gives ``E[phi(x)^T phi(y)] = k(x, y)`` (Rahimi and Recht,
    "Random features for large-scale kernel machines", NIPS 2007). Training ``W`` and
    ``b`` with the Discriminant Information criterion adapts the map to the labels
    (RFDI in the DI paper). The draw is made eagerly in ``__init__`` so ``state_dict``
    round-trips before any forward pass.

    Args:
        in_features: input dimension ``D``.
        out_features: number of features ``J``.
        kernel: a kernel with a spectral law (``"gaussian"``: ``exp(-gamma ||x-y||^2)``,
            frequencies ``N(0, 2 gamma)``; ``"laplacian"``: ``exp(-gamma ||x-y||_1)``,
            Cauchy frequencies of scale ``gamma``).
        gamma: kernel parameter ``> 0`` (scikit-learn's convention).
        trainable: whether ``frequencies`` and ``phases`` receive gradients (``False``
            gives the untrained random-Fourier-features baseline).
        seed: seed of the draw (exclusive with ``generator``).
        generator: a CPU ``torch.Generator`` for the draw.
        device: device of the parameters.
        dtype: dtype of the parameters.

    Attributes:
        frequencies (Parameter[D, J]): ``W``.
        phases (Parameter[J]): ``b``.

    Shape:
        x (Tensor[..., D]) -> Tensor[..., J].
    """

    def __init__(
        self,
        in_features: int,
        out_features: int,
        *,
        kernel: str | Kernel = "gaussian",
        gamma: float = 1.0,
        trainable: bool = True,
        seed: int | None = None,
        generator: torch.Generator | None = None,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        owner = type(self).__name__
        self.in_features = check_int(owner, "in_features", in_features)
        self.out_features = check_int(owner, "out_features", out_features)
        self.gamma = check_positive(owner, "gamma", gamma)
        spec = get_kernel(kernel, owner=owner, spectral=True)
        self.kernel = spec.name
        gen = make_generator(seed, generator, owner=owner)
        frequencies = sample_frequencies(
            spec,
            self.in_features,
            self.out_features,
            self.gamma,
            generator=gen,
            dtype=dtype,
            device=device,
        )
        phases = torch.rand(self.out_features, generator=gen, dtype=torch.float64) * (2 * math.pi)
        self.frequencies = nn.Parameter(frequencies, requires_grad=trainable)
        self.phases = nn.Parameter(phases.to(frequencies), requires_grad=trainable)

    def forward(self, x: Tensor) -> Tensor:
        """Map ``x (Tensor[..., D])`` to ``Tensor[..., J]`` features."""
        check_features(type(self).__name__, "x", x, self.in_features)
        flat = x.reshape(-1, self.in_features)
        out = cosine_features(flat, self.frequencies, self.phases)
        return out.reshape(*x.shape[:-1], self.out_features)

    def extra_repr(self) -> str:
        trainable = self.frequencies.requires_grad
        return (
            f"in_features={self.in_features}, out_features={self.out_features}, "
            f"kernel={self.kernel!r}, gamma={self.gamma}, trainable={trainable}"
        )
