"""How well a feature map approximates its kernel: :class:`KernelApproximationError`.

The relative reconstruction error of the kernel matrix on a sample of rows,

``||K - Phi Phi^T||_F / ||K||_F`` and ``||K - Phi Phi^T||_2 / ||K||_2``,

with ``K = k(X, X)`` the exact kernel computed in float64 and ``Phi`` the map's features
of the same rows ``X``. A torchmetrics metric: rows are gathered over ``update`` calls
(the first ``max_rows`` seen, so the result does not depend on how they were batched),
concatenated over processes under DDP, and the map is evaluated once, in
:meth:`~KernelApproximationError.compute`, with its settings at that moment.

This module imports torchmetrics: it is not imported by :mod:`kernel_layers.kernels`
itself (``import kernel_layers`` loads torch only).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import torch
from torch import Tensor
from torchmetrics import Metric
from torchmetrics.utilities import dim_zero_cat

from kernel_layers._validation import check_choice, check_int, check_matrix
from kernel_layers.numerics.precision import autocast_off

if TYPE_CHECKING:
    from kernel_layers.layers.base import KernelFeatureMap

__all__ = ["DEFAULT_MAX_ROWS", "NORMS", "KernelApproximationError", "relative_errors"]

#: Rows kept by default: ``K`` is then an 8 MB float64 matrix.
DEFAULT_MAX_ROWS = 1000
#: ``"fro"``: the Frobenius norm; ``"spectral"``: the largest singular value; ``"both"``:
#: a dict of the two.
NORMS = ("fro", "spectral", "both")

_OWNER = "KernelApproximationError"


def relative_errors(kernel: Tensor, features: Tensor) -> dict[str, Tensor]:
    """Relative errors of ``Phi Phi^T`` against ``K``, in float64.

    Args:
        kernel (Tensor[m, m]): the exact, symmetric kernel matrix ``K``.
        features (Tensor[m, F]): ``Phi``.

    Returns:
        dict[str, Tensor[]]: ``"fro"``: ``||K - Phi Phi^T||_F / ||K||_F``;
        ``"spectral"``: ``||K - Phi Phi^T||_2 / ||K||_2`` (from the eigenvalues of the
        symmetric matrices).

    Raises:
        ValueError: ``K`` is zero (no relative error exists) or ``Phi`` is not finite.
    """
    m = features.shape[0] if features.ndim == 2 else -1
    if features.ndim != 2 or kernel.shape != (m, m):
        raise ValueError(
            f"{_OWNER}: the kernel must give a [m, m] matrix and the features [m, F] for m "
            f"kept rows, got shapes {list(kernel.shape)} and {list(features.shape)}"
        )
    k = kernel.to(torch.float64)
    phi = features.to(torch.float64)
    if not bool(torch.isfinite(phi).all()):
        raise ValueError(f"{_OWNER}: the map's features of the kept rows must be finite")
    diff = k - phi @ phi.mT
    k_fro = torch.linalg.matrix_norm(k)
    if not float(k_fro) > 0:
        raise ValueError(
            f"{_OWNER}: the kernel matrix of the kept rows must be non-zero for a relative "
            f"error, got ||K||_F = {float(k_fro):g}"
        )

    def spectral(a: Tensor) -> Tensor:
        return torch.linalg.eigvalsh((a + a.mT) / 2).abs().amax()

    return {
        "fro": torch.linalg.matrix_norm(diff) / k_fro,
        "spectral": spectral(diff) / spectral(k),
    }


class KernelApproximationError(Metric):
    """Relative error ``||K - Phi Phi^T|| / ||K||`` of a feature map on a sample of rows.

    ``update(x)`` keeps the first ``max_rows`` rows of the map's inputs it is given (over
    all calls; one call with ``m`` rows keeps the same rows as many smaller calls);
    ``compute()`` evaluates the exact kernel ``K = k(X, X)`` in float64 and the map's
    features ``Phi`` of the kept rows ``X`` (in the map's dtype, on its device, without
    gradients), then the relative error in the Frobenius and / or spectral norm. Under
    DDP the kept rows of every process are concatenated in rank order and the first
    ``max_rows`` are used.

    The kernel is the map's own (:meth:`KernelFeatureMap.exact_kernel
    <kernel_layers.layers.base.KernelFeatureMap.exact_kernel>`) at the time of
    ``compute``: a ``NystromLayer``'s or ``FourierLayer``'s kernel, ``gamma`` and
    ``kernel_params``, on inputs scaled by its current learned bandwidths (``ard``); a
    rank-k ``NystromLayer`` approximates the same kernel with ``rank`` features; an
    ``EnsembleNystrom``'s shared kernel; a ``FastfoodLayer``'s Gaussian kernel. A trained
    map is measured against the kernel it was drawn for (trained Fourier frequencies,
    Fastfood diagonals and Nystrom landmarks all still estimate it).

    The map is held by reference, not as a sub-module: the metric adds nothing to a
    model's ``state_dict``.

    Example::

        metric = KernelApproximationError(layer, max_rows=500, norm="both")
        for x, _ in loader:
            metric.update(x)
        metric.compute()  # {"fro": tensor(...), "spectral": tensor(...)}

    Args:
        feature_map: a :class:`~kernel_layers.layers.base.KernelFeatureMap` whose
            features and kernel are compared; or ``None`` with ``features`` and ``kernel``.
        features: a callable ``x (Tensor[m, D]) -> Tensor[m, F]`` giving the features
            (exclusive with ``feature_map``); it receives the rows in the dtype they were
            given to ``update``.
        kernel: a callable ``k(x (Tensor[m, D]), z (Tensor[m, D])) -> Tensor[m, m]``,
            called on float64 rows; required with ``features``, and with a map it
            replaces the map's own kernel.
        max_rows: the most rows kept (an integer ``>= 1``); ``K`` is ``max_rows^2``.
        norm: ``"fro"``, ``"spectral"`` or ``"both"`` (``compute`` then returns
            ``{"fro": ..., "spectral": ...}``).
        **kwargs: further arguments of :class:`torchmetrics.Metric`.

    Raises:
        TypeError: ``feature_map`` is not a ``KernelFeatureMap``, ``features`` or
            ``kernel`` is not callable, or ``max_rows`` is not an integer.
        ValueError: both or neither of ``feature_map`` and ``features``, ``features``
            without ``kernel``, ``max_rows < 1``, or an unknown ``norm``.
    """

    is_differentiable = False
    higher_is_better = False
    full_state_update = False

    rows: list[Tensor]
    _map: KernelFeatureMap | None

    def __init__(
        self,
        feature_map: KernelFeatureMap | None = None,
        *,
        features: Callable[[Tensor], Tensor] | None = None,
        kernel: Callable[[Tensor, Tensor], Tensor] | None = None,
        max_rows: int = DEFAULT_MAX_ROWS,
        norm: str = "fro",
        **kwargs: object,
    ) -> None:
        super().__init__(**kwargs)
        from kernel_layers.layers.base import KernelFeatureMap

        if (feature_map is None) == (features is None):
            raise ValueError(
                f"{_OWNER}: exactly one of arguments 'feature_map' and 'features' must be "
                f"given, got {'both' if feature_map is not None else 'neither'}"
            )
        if feature_map is not None and not isinstance(feature_map, KernelFeatureMap):
            raise TypeError(
                f"{_OWNER}: argument 'feature_map' must be a KernelFeatureMap, got "
                f"{type(feature_map).__name__} (pass features= and kernel= for other maps)"
            )
        for name, value in (("features", features), ("kernel", kernel)):
            if value is not None and not callable(value):
                raise TypeError(
                    f"{_OWNER}: argument '{name}' must be callable, got {type(value).__name__}"
                )
        if features is not None and kernel is None:
            raise ValueError(
                f"{_OWNER}: argument 'kernel' must be given with 'features' (the exact "
                f"kernel k(x, z) the features approximate), got None"
            )
        self.max_rows = check_int(_OWNER, "max_rows", max_rows)
        self.norm = check_choice(_OWNER, "norm", norm, NORMS)
        # Plain attributes, not sub-modules: the map stays out of the metric's state.
        object.__setattr__(self, "_map", feature_map)
        self._features = features
        self._kernel = kernel
        self.add_state("rows", default=[], dist_reduce_fx="cat")

    @property
    def width(self) -> int | None:
        """``D``, the width the rows must have (the map's ``in_features``), or ``None``."""
        feature_map = self._map
        return None if feature_map is None else int(feature_map.in_features)

    @property
    def kept(self) -> int:
        """How many rows this process keeps so far (at most ``max_rows``)."""
        return sum(int(r.shape[0]) for r in self.rows)

    @property
    def full(self) -> bool:
        """Whether ``max_rows`` rows are kept (later ``update`` calls change nothing)."""
        return self.kept >= self.max_rows

    def update(self, x: Tensor) -> None:
        """Keep the first rows of ``x (Tensor[B, D])`` until ``max_rows`` are kept.

        Raises:
            TypeError: ``x`` is not a floating tensor, or its dtype differs from the
                earlier rows'.
            ValueError: ``x`` is not 2-D, has the wrong width or non-finite values.
        """
        check_matrix(_OWNER, "x", x, width=self.width)
        if self.rows and x.dtype != self.rows[0].dtype:
            raise TypeError(
                f"{_OWNER}: argument 'x' must have the dtype of the earlier rows "
                f"{self.rows[0].dtype}, got {x.dtype}"
            )
        need = self.max_rows - self.kept
        if need > 0 and x.shape[0] > 0:
            # A copy: a view would keep the whole batch alive.
            self.rows.append(x[:need].detach().to(self.device).clone())

    def compute(self) -> Tensor | dict[str, Tensor]:
        """The relative error(s) on the kept rows (see the class docstring).

        Returns:
            Tensor[] | dict[str, Tensor[]]: by ``norm``; float64, on the rows' device.

        Raises:
            ValueError: no row was given, the kernel matrix is zero, or the features are
                not finite.
        """
        kept: list[Tensor] | Tensor = self.rows  # synchronised: one tensor
        if isinstance(kept, list) and not kept:
            raise ValueError(f"{_OWNER}: compute() needs rows: call update(x) first")
        rows = dim_zero_cat(kept)[: self.max_rows]
        feature_map = self._map
        with torch.no_grad():
            if feature_map is not None:
                tensors = [*feature_map.parameters(), *feature_map.buffers()]
                x = rows if not tensors else rows.to(tensors[0].device)
                with autocast_off(x):
                    phi = feature_map(x if not tensors else x.to(tensors[0].dtype))
                    exact = self._kernel or feature_map.exact_kernel
                    k = exact(x.double(), x.double())
            else:
                assert self._features is not None and self._kernel is not None
                with autocast_off(rows):
                    phi = self._features(rows)
                    k = self._kernel(rows.double(), rows.double())
            errors = relative_errors(k, phi.to(k.device))
        errors = {name: value.to(rows.device) for name, value in errors.items()}
        return errors if self.norm == "both" else errors[self.norm]
