"""Centring and normalising explicit kernel features.

With explicit features ``phi`` (Nystrom or Fourier) the kernel is ``K = Phi Phi^T``, so
the two classic kernel-matrix operations of kernel subspace methods become operations
on rows of ``Phi``:

* **Centring** (the kernel of features centred in feature space). With ``N`` training
  rows and ``H = I - 11^T / N``, the centred training kernel ``H K H`` is
  ``Phi_c Phi_c^T`` with ``Phi_c = Phi - 1 mu^T``, ``mu`` the training mean of the
  features. A new point is centred with the *training* mean, which reproduces the
  test-kernel formula ``K_t - 1_t K / N - K_t 1 1^T / N + 1_t 1^T K 1 1^T / N^2``.
* **Normalisation** (the cosine kernel ``k(x, y) / sqrt(k(x, x) k(y, y))``): divide
  each row by its Euclidean norm.

Pure functions plus thin modules; compose them with ``nn.Sequential`` (centre first,
then normalise, for the normalised centred kernel).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from kernel_layers._validation import check_features, check_int, check_matrix, check_positive
from kernel_layers.numerics.precision import SUM_OVERFLOW, sum_limit

__all__ = [
    "NORM_EPS",
    "FeatureCentering",
    "FeatureNormalization",
    "center_features",
    "normalize_features",
]

#: Rows with norm below ``NORM_EPS`` are divided by ``NORM_EPS`` (so a zero row, where
#: the normalised kernel is undefined, stays 0 instead of becoming NaN).
NORM_EPS = 1e-12


def center_features(features: Tensor, mean: Tensor | None = None) -> Tensor:
    """Subtract a mean from every row: ``phi(x) - mu``.

    Args:
        features (Tensor[..., J]): features.
        mean (Tensor[J] | None): the (training) mean ``mu``; ``None`` uses the mean of
            ``features`` over all leading dimensions.

    Returns:
        Tensor[..., J]: centred features; with ``mean=None`` and 2-D ``features`` their
        Gram matrix is ``H K H``.
    """
    if mean is None:
        mean = features.reshape(-1, features.shape[-1]).mean(0)
    return features - mean.to(features.dtype)


def normalize_features(features: Tensor, *, eps: float = NORM_EPS) -> Tensor:
    """Scale every row to unit Euclidean norm: ``phi(x) / max(||phi(x)||, eps)``.

    Args:
        features (Tensor[..., J]): features.
        eps: guard on the norm ``> 0``.

    Returns:
        Tensor[..., J]: rows of norm 1 (rows of norm below ``eps`` divided by ``eps``,
        so a zero row stays 0); their inner products are the normalised kernel
        ``k(x, y) / sqrt(k(x, x) k(y, y))``.
    """
    # Scaled by each row's largest magnitude first, so huge rows do not overflow the norm.
    largest = features.detach().abs().amax(dim=-1, keepdim=True)
    scale = torch.where(largest > 0, largest, torch.ones_like(largest))
    scaled = features / scale
    return scaled / torch.maximum(scaled.norm(dim=-1, keepdim=True), eps / scale)


class FeatureCentering(nn.Module):
    """Subtract the training mean of the features (kernel centring in feature space).

    The mean is a buffer, estimated either exactly, by :meth:`fit` on the training
    features or by :meth:`update` on each of their batches (a cumulative mean), or, with
    ``momentum``, as an exponential moving average updated by every forward pass in
    training mode (first batch: its mean), as batch normalisation does. The forward pass
    always subtracts the stored mean, so a training batch and a test point are centred
    alike; it raises until a mean has been estimated.

    Args:
        num_features: feature width ``J``.
        momentum: ``None`` (no update in forward) or the weight ``in (0, 1]`` of the new
            batch in the moving average.

    Attributes:
        mean (Tensor[J]): the estimated mean (a buffer).
        count (Tensor[]): number of rows seen (``int64`` buffer; 0 until fitted).

    Shape:
        features (Tensor[..., J]) -> Tensor[..., J].
    """

    mean: Tensor
    count: Tensor

    def __init__(self, num_features: int, *, momentum: float | None = None) -> None:
        super().__init__()
        owner = type(self).__name__
        self.num_features = check_int(owner, "num_features", num_features)
        if momentum is not None:
            momentum = check_positive(owner, "momentum", momentum)
            if momentum > 1.0:
                raise ValueError(
                    f"{owner}: argument 'momentum' must be None or in (0, 1], got {momentum}"
                )
        self.momentum = momentum
        self.register_buffer("mean", torch.zeros(self.num_features))
        self.register_buffer("count", torch.zeros((), dtype=torch.long))

    @property
    def fitted(self) -> bool:
        """Whether a mean has been estimated."""
        return int(self.count) > 0

    def reset(self) -> None:
        """Forget the estimated mean."""
        self.mean.zero_()
        self.count.zero_()

    @torch.no_grad()
    def update(self, features: Tensor) -> FeatureCentering:
        """Fold a batch into the cumulative mean (exact over all batches seen).

        Args:
            features (Tensor[B, J]): a batch of training features.

        Returns:
            FeatureCentering: ``self``.
        """
        owner = type(self).__name__
        check_matrix(owner, "features", features, width=self.num_features)
        batch = features.shape[0]
        if batch == 0:
            return self
        seen = int(self.count)
        batch_mean = features.detach().to(torch.float64).mean(0)
        mean = self.mean.to(torch.float64)
        mean += (batch_mean.to(mean.device) - mean) * (batch / (seen + batch))
        self.mean.copy_(mean)
        self.count += batch
        return self

    def fit(self, features: Tensor) -> FeatureCentering:
        """Set the mean to that of ``features (Tensor[N, J])``; returns ``self``."""
        self.reset()
        return self.update(features)

    def forward(self, features: Tensor) -> Tensor:
        """Centre ``features (Tensor[..., J])`` with the stored mean."""
        owner = type(self).__name__
        check_features(
            owner,
            "features",
            features,
            self.num_features,
            max_abs=sum_limit(features),
            why=SUM_OVERFLOW,
        )
        if self.momentum is not None and self.training:
            self._moving_average(features)
        if not self.fitted:
            raise RuntimeError(
                f"{owner}: the mean is not estimated; call fit() or update() on training "
                "features first (or pass momentum= and run a forward pass in training mode)"
            )
        return center_features(features, self.mean)

    @torch.no_grad()
    def _moving_average(self, features: Tensor) -> None:
        flat = features.detach().reshape(-1, self.num_features)
        if flat.shape[0] == 0:
            return
        batch_mean = flat.mean(0).to(self.mean.dtype)
        if self.fitted and self.momentum is not None:
            self.mean.lerp_(batch_mean, self.momentum)
        else:
            self.mean.copy_(batch_mean)
        self.count += flat.shape[0]

    def extra_repr(self) -> str:
        return f"num_features={self.num_features}, momentum={self.momentum}"


class FeatureNormalization(nn.Module):
    """Scale every feature row to unit norm (the normalised kernel).

    ``phi(x) / ||phi(x)||`` gives ``phi(x)^T phi(y) = k(x, y) / sqrt(k(x, x) k(y, y))``
    for the approximate kernel ``k = phi^T phi``; rows with norm below ``eps`` are divided
    by ``eps`` (a zero row stays 0).

    Args:
        eps: guard on the norm ``> 0``.

    Shape:
        features (Tensor[..., J]) -> Tensor[..., J].
    """

    def __init__(self, *, eps: float = NORM_EPS) -> None:
        super().__init__()
        self.eps = check_positive(type(self).__name__, "eps", eps)

    def forward(self, features: Tensor) -> Tensor:
        """Normalise the rows of ``features (Tensor[..., J])``."""
        owner = type(self).__name__
        width = features.shape[-1] if isinstance(features, Tensor) and features.ndim else -1
        check_features(owner, "features", features, width)
        return normalize_features(features, eps=self.eps)

    def extra_repr(self) -> str:
        return f"eps={self.eps}"
