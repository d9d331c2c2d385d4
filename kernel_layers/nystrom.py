"""Nystrom feature layer with learnable landmarks."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from kernel_layers._linalg import SOLVE_DTYPE, robust_cholesky
from kernel_layers._random import make_generator
from kernel_layers._validation import check_features, check_int, check_matrix, check_positive
from kernel_layers.kernels import Kernel, get_kernel

__all__ = ["NystromLayer", "default_jitter", "landmark_gram"]

#: Relative diagonal jitter of ``K_Z`` by dtype of the landmarks: about the size below
#: which float32 round-off in ``k(Z, Z)`` makes eigenvalues meaningless.
JITTER = {torch.float16: 1e-3, torch.bfloat16: 1e-3, torch.float32: 1e-6, torch.float64: 1e-10}
#: Landmark initialisations understood by :meth:`NystromLayer.from_data`.
INITS = ("random",)


def default_jitter(dtype: torch.dtype) -> float:
    """The default relative jitter of ``K_Z`` for landmarks of ``dtype``."""
    return JITTER.get(dtype, JITTER[torch.float32])


def landmark_gram(landmarks: Tensor, kernel: Kernel, gamma: float, jitter: float) -> Tensor:
    """``K_Z + jitter * mean(diag K_Z) I`` in :data:`~kernel_layers.objectives.SOLVE_DTYPE`.

    Args:
        landmarks (Tensor[n, D]): landmarks ``Z``.
        kernel: the kernel.
        gamma: kernel parameter.
        jitter: relative jitter.

    Returns:
        Tensor[n, n]: the symmetric, jittered landmark kernel matrix.
    """
    k_z = kernel.matrix(landmarks, landmarks, gamma).to(SOLVE_DTYPE)
    k_z = 0.5 * (k_z + k_z.mT)
    shift = jitter * k_z.diagonal().mean().detach()
    return k_z + shift * torch.eye(k_z.shape[0], dtype=k_z.dtype, device=k_z.device)


class NystromLayer(nn.Module):
    r"""Nystrom features ``phi(x) = k(x, Z) R^-T`` with learnable landmarks ``Z``.

    With ``K_Z = k(Z, Z) + jitter I = R R^T`` (Cholesky, computed in float64), the
    features satisfy ``phi(x)^T phi(y) = k(x, Z) K_Z^-1 k(Z, y)``, the Nystrom
    approximation of ``k(x, y)`` (Williams and Seeger, NIPS 2001); it is exact when
    ``x`` or ``y`` is a landmark. This is an orthogonal rotation of the classic
    ``G U S^-1/2`` map, so DI of these features equals NysDI, eq. (10) of the DI paper,
    which :func:`~kernel_layers.nystrom_discriminant_information` computes without
    forming them. The Cholesky route keeps gradients stable (an eigen-decomposition's
    backward divides by eigenvalue gaps) and duplicated landmarks give finite features
    and gradients thanks to the jitter, relative to ``K_Z``'s mean diagonal, which
    escalates with a warning if the factorisation still fails.

    Args:
        in_features: input dimension ``D``.
        out_features: number of landmarks and features ``n``.
        kernel: a registered kernel name (``"gaussian"``, ``"laplacian"``, ...).
        gamma: kernel parameter ``> 0`` (scikit-learn's convention).
        landmarks (Tensor[n, D] | None): initial landmarks; ``None`` draws them
            uniformly in ``[0, 1)^D`` (the protocol scales features to ``[0, 1]``); use
            :meth:`from_data` to pick them from data.
        trainable: whether the landmarks receive gradients (``False`` gives the
            standard Nystrom baseline).
        jitter: relative diagonal jitter of ``K_Z`` (default: ``1e-6`` for float32,
            ``1e-10`` for float64 landmarks).
        seed: seed of the random landmarks (exclusive with ``generator``).
        generator: a CPU ``torch.Generator``.
        device: device of the landmarks.
        dtype: dtype of the landmarks.

    Attributes:
        landmarks (Parameter[n, D]): ``Z``.

    Shape:
        x (Tensor[..., D]) -> Tensor[..., n].
    """

    def __init__(
        self,
        in_features: int,
        out_features: int,
        *,
        kernel: str | Kernel = "gaussian",
        gamma: float = 1.0,
        landmarks: Tensor | None = None,
        trainable: bool = True,
        jitter: float | None = None,
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
        self.kernel = get_kernel(kernel, owner=owner).name
        self._jitter = None if jitter is None else check_positive(owner, "jitter", jitter)
        if landmarks is None:
            gen = make_generator(seed, generator, owner=owner)
            z = torch.rand(self.out_features, self.in_features, generator=gen, dtype=torch.float64)
            z = z.to(dtype=dtype or torch.get_default_dtype(), device=device)
        else:
            check_matrix(owner, "landmarks", landmarks, width=self.in_features)
            if landmarks.shape[0] != self.out_features:
                raise ValueError(
                    f"{owner}: argument 'landmarks' must have out_features={self.out_features} "
                    f"rows, got shape {list(landmarks.shape)}"
                )
            z = landmarks.detach().clone().to(dtype=dtype or landmarks.dtype, device=device)
        self.landmarks = nn.Parameter(z, requires_grad=trainable)

    @classmethod
    def from_data(
        cls,
        x: Tensor,
        out_features: int,
        *,
        init: str = "random",
        seed: int | None = None,
        generator: torch.Generator | None = None,
        **kwargs: object,
    ) -> NystromLayer:
        """Build a layer whose landmarks are selected from data.

        Args:
            x (Tensor[N, D]): data to select from (``N >= out_features``).
            out_features: number of landmarks ``n``.
            init: ``"random"``: a uniformly random subset of ``n`` distinct rows.
            seed: seed of the selection (exclusive with ``generator``).
            generator: a CPU ``torch.Generator``.
            **kwargs: further arguments of :class:`NystromLayer` (``kernel``, ``gamma``,
                ``trainable``, ...).

        Returns:
            NystromLayer: with ``in_features = D`` and the selected landmarks.
        """
        owner = f"{cls.__name__}.from_data"
        check_matrix(owner, "x", x)
        out_features = check_int(owner, "out_features", out_features)
        if init not in INITS:
            raise ValueError(f"{owner}: argument 'init' must be one of {list(INITS)}, got {init!r}")
        if out_features > x.shape[0]:
            raise ValueError(
                f"{owner}: argument 'out_features' must be <= the number of rows of x "
                f"({x.shape[0]}), got {out_features}"
            )
        gen = make_generator(seed, generator, owner=owner)
        index = torch.randperm(x.shape[0], generator=gen)[:out_features].to(x.device)
        return cls(x.shape[1], out_features, landmarks=x[index], **kwargs)  # type: ignore[arg-type]

    @property
    def jitter(self) -> float:
        """Relative diagonal jitter of ``K_Z``."""
        return self._jitter if self._jitter is not None else default_jitter(self.landmarks.dtype)

    def kernel_matrices(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """Cross and landmark kernel matrices.

        Args:
            x (Tensor[B, D]): inputs.

        Returns:
            tuple[Tensor[B, n], Tensor[n, n]]: ``G = k(x, Z)`` in ``x``'s dtype and the
            jittered ``K_Z`` in float64.
        """
        spec = get_kernel(self.kernel)
        g = spec.matrix(x, self.landmarks, self.gamma)
        return g, landmark_gram(self.landmarks, spec, self.gamma, self.jitter)

    def forward(self, x: Tensor) -> Tensor:
        """Map ``x (Tensor[..., D])`` to ``Tensor[..., n]`` Nystrom features."""
        owner = type(self).__name__
        check_features(owner, "x", x, self.in_features)
        flat = x.reshape(-1, self.in_features)
        g, k_z = self.kernel_matrices(flat)
        factor = robust_cholesky(k_z, owner=owner).to(g.dtype)
        features = torch.linalg.solve_triangular(factor.mT, g, upper=True, left=False)
        return features.reshape(*x.shape[:-1], self.out_features)

    def extra_repr(self) -> str:
        return (
            f"in_features={self.in_features}, out_features={self.out_features}, "
            f"kernel={self.kernel!r}, gamma={self.gamma}, "
            f"trainable={self.landmarks.requires_grad}"
        )
