"""Rank-k truncation of the Nystrom map: features through the top-k eigenpairs of ``K_Z``."""

from __future__ import annotations

import torch
from torch import Tensor

from kernel_layers._validation import check_int

__all__ = ["EIGEN_RTOL", "RankTruncation", "rank_k_map"]

#: Rank-k truncation treats eigenvalues of ``K_Z`` at most ``n * EIGEN_RTOL * max`` as
#: zero (NumPy's ``matrix_rank`` tolerance): their columns of the map are 0.
EIGEN_RTOL = torch.finfo(torch.float64).eps


def rank_k_map(k_z: Tensor, rank: int) -> Tensor:
    """The rank-k Nystrom map ``U_k S_k^-1/2`` from the top-k eigenpairs of ``K_Z``.

    With ``K_Z = U S U^T`` (eigenvalues descending), features ``G U_k S_k^-1/2`` satisfy
    ``phi(x)^T phi(y) = k(x, Z) K_Z[k]^+ k(Z, y)``, ``K_Z[k]^+ = U_k S_k^-1 U_k^T`` the
    pseudo-inverse of the best rank-k approximation of ``K_Z``; ``rank = n`` gives the
    full map up to an orthogonal rotation. Eigenvalues at most
    ``n * EIGEN_RTOL * max(S)`` count as zero (their columns are 0). The
    eigen-decomposition's backward divides by eigenvalue gaps: gradients flow but are
    unstable for (near-)degenerate spectra, so use truncation for inference or when asked.

    Args:
        k_z (Tensor[n, n]): symmetric (jittered) landmark kernel matrix.
        rank: ``k``, ``1 <= k <= n``.

    Returns:
        Tensor[n, k]: ``U_k S_k^-1/2`` in ``k_z``'s dtype, columns by decreasing eigenvalue.
    """
    values, vectors = torch.linalg.eigh(k_z)
    values, vectors = values.flip(-1)[:rank], vectors.flip(-1)[:, :rank]
    floor = k_z.shape[-1] * EIGEN_RTOL * values[0].detach().clamp_min(0.0)
    keep = values > floor
    safe = torch.where(keep, values, torch.ones_like(values))  # no inf in the backward
    return vectors * torch.where(keep, safe.rsqrt(), torch.zeros_like(values))


class RankTruncation:
    """The ``rank`` setting of a Nystrom map with ``out_features`` landmarks: ``None``
    for the full map, or ``k <= out_features`` features through :func:`rank_k_map`."""

    out_features: int
    _rank: int | None

    @property
    def feature_width(self) -> int:
        """The width of the features: ``rank`` with truncation, else ``out_features``."""
        return self.out_features if self.rank is None else self.rank

    @property
    def rank(self) -> int | None:
        """Rank-k truncation (``None``: the full map of all ``out_features`` landmarks)."""
        return self._rank

    @rank.setter
    def rank(self, rank: int | None) -> None:
        owner = type(self).__name__
        if rank is not None:
            rank = check_int(owner, "rank", rank)
            if rank > self.out_features:
                raise ValueError(
                    f"{owner}: argument 'rank' must be None or <= out_features="
                    f"{self.out_features}, got {rank}"
                )
        self._rank = rank
