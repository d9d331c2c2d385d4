"""Nystrom feature layer with learnable landmarks."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
from torch import Tensor, nn

from kernel_layers._random import make_generator
from kernel_layers._validation import (
    check_bool,
    check_dtype,
    check_factory,
    check_matrix,
    check_positive,
)
from kernel_layers.kernels import Kernel
from kernel_layers.layers.ard import Bandwidths
from kernel_layers.layers.base import KernelFeatureMap
from kernel_layers.layers.kernel_choice import KernelChoice
from kernel_layers.layers.landmark_init import INITS, select_landmarks
from kernel_layers.layers.nystrom_rank import EIGEN_RTOL, RankTruncation, rank_k_map
from kernel_layers.layers.projection_cache import ProjectionCache
from kernel_layers.numerics.linalg import default_jitter, landmark_gram, robust_cholesky
from kernel_layers.numerics.precision import (
    DISTANCE_OVERFLOW,
    autocast_off,
    data_limit,
    kernel_dtype,
    power_limit,
    upcast,
)
from kernel_layers.objectives import DEFAULT_RHO, nystrom_discriminant_information

__all__ = ["EIGEN_RTOL", "INITS", "NystromLayer", "default_jitter", "landmark_gram", "rank_k_map"]


class NystromLayer(KernelChoice, Bandwidths, RankTruncation, ProjectionCache, KernelFeatureMap):
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

    **Learned bandwidths** (``ard=True``, automatic relevance determination): the kernel
    acts on ``x * sigma`` and ``Z * sigma`` with ``sigma = exp(log_bandwidth)``, one
    positive scale per input dimension or per block of dimensions (``blocks``), so that
    a Gaussian kernel becomes ``exp(-gamma sum_d sigma_d^2 (x_d - z_d)^2)`` and DI training
    learns which inputs matter and at what scale, together with the landmarks (which
    stay in input space). Every ``sigma`` starts at 1: the layer starts as the isotropic
    one. Kernels whose inputs are restricted to a domain (``chi2``, the skewed kernels)
    are refused with ``ard=True``.

    **Kernels with an input domain** (``chi2``: ``z >= 0``; the skewed kernels:
    ``z > -c``): given landmarks (``landmarks=``, :meth:`from_data`,
    :meth:`init_from_data`) must lie in it. Trainable landmarks may step out of it (one
    optimiser step can move an entry of a chi2 landmark below 0): the kernel is
    evaluated on the landmarks projected into the domain (raised to 0 for ``chi2``, to
    ``-c`` plus a relative margin of
    :data:`~kernel_layers.kernels.functions.DOMAIN_MARGIN` for the skewed kernels), so
    the layer stays usable; the gradient is the projection's: it passes on the
    boundary, and an entry below it gets none and is evaluated on the boundary. A
    user's :class:`~kernel_layers.kernels.Kernel` with an input check and no
    ``project_input`` has no known projection: its landmarks must be
    ``trainable=False``.

    Args:
        in_features: input dimension ``D``.
        out_features: number of landmarks and features ``n``.
        kernel: a registered kernel name (``"gaussian"``, ``"laplacian"``, ``"cauchy"``,
            ``"skewed_chi2"``, ``"skewed_intersection"``, ``"polynomial"``,
            ``"linear"``, ``"chi2"``; see :mod:`kernel_layers.kernels`), a
            :class:`~kernel_layers.kernels.Kernel`, or a callable
            ``k(X (Tensor[B, D]), Z (Tensor[n, D])) -> Tensor[B, n]`` (``gamma`` is then
            unused; a layer holding a lambda cannot be pickled, a module-level function
            can).
        gamma: kernel parameter ``> 0`` (scikit-learn's convention).
        kernel_params: further kernel parameters by name (``{"c": ...}`` for the skewed
            kernels, ``{"degree": ..., "coef0": ...}`` for ``"polynomial"``); unknown
            names raise, listing the valid ones.
        landmarks (Tensor[n, D] | None): initial landmarks, in the kernel's input
            domain if it has one; ``None`` draws them uniformly in ``[0, 1)^D`` (the
            protocol scales features to ``[0, 1]``); use :meth:`from_data` to pick them
            from data.
        trainable: whether the landmarks (and learned bandwidths) receive gradients
            (``False`` gives the standard Nystrom baseline); must be ``False`` for a
            user's kernel with an input check (see above).
        ard: learn one bandwidth per input dimension (or per block).
        blocks: with ``ard``, one bandwidth per block: block sizes summing to
            ``in_features`` (e.g. ``[10, 44]``) or index groups partitioning
            ``range(in_features)``.
        rank: ``None`` for the full map, or ``k <= n``: map through the top-k
            eigenpairs of ``K_Z`` (:func:`rank_k_map`, the ``K_Z[k]^+`` of the Nystrom
            subspace methods), giving ``k`` features; meant for inference (the
            eigen-decomposition's backward is unstable for near-degenerate spectra).
            Settable after construction (``layer.rank = k``).
        jitter: relative diagonal jitter of ``K_Z`` (default: ``1e-6`` for float32,
            ``1e-10`` for float64 landmarks).
        seed: seed of the random landmarks (exclusive with ``generator``).
        generator: a CPU ``torch.Generator``.
        device: device of the landmarks.
        dtype: dtype of the landmarks.

    Attributes:
        landmarks (Parameter[n, D]): ``Z``.
        log_bandwidth (Parameter[K] | None): with ``ard``, ``log sigma`` per block
            (``K = D`` without ``blocks``); ``None`` otherwise.

    Shape:
        x (Tensor[..., D]) -> Tensor[..., n] (``Tensor[..., rank]`` with truncation).
    """

    def __init__(
        self,
        in_features: int,
        out_features: int,
        *,
        kernel: str | Kernel | Callable[[Tensor, Tensor], Tensor] = "gaussian",
        gamma: float = 1.0,
        kernel_params: Mapping[str, float] | None = None,
        landmarks: Tensor | None = None,
        trainable: bool = True,
        ard: bool = False,
        blocks: Sequence[int] | Sequence[Sequence[int]] | None = None,
        rank: int | None = None,
        jitter: float | None = None,
        seed: int | None = None,
        generator: torch.Generator | None = None,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__(in_features, out_features)
        owner = type(self).__name__
        device, dtype = check_factory(owner, device, dtype)
        trainable = check_bool(owner, "trainable", trainable)
        spec = self._set_kernel(kernel, gamma, kernel_params)
        self._check_ard(ard, blocks)
        if self.ard and spec.check_input is not None:
            raise ValueError(
                f"{owner}: argument 'ard' must be False with kernel {spec.name!r}, whose "
                f"inputs are restricted to a domain that scaling them could leave (learned "
                f"bandwidths suit 'gaussian', 'laplacian', 'cauchy'), got ard=True"
            )
        if trainable and spec.check_input is not None and spec.project_input is None:
            raise ValueError(
                f"{owner}: argument 'trainable' must be False with kernel {spec.name!r}, "
                "whose input check has no projection onto its domain (project_input; "
                "training could move the landmarks out of it), got trainable=True"
            )
        self._jitter = None if jitter is None else check_positive(owner, "jitter", jitter)
        if landmarks is None:
            gen = make_generator(seed, generator, owner=owner)
            z = torch.rand(self.out_features, self.in_features, generator=gen, dtype=torch.float64)
            z = z.to(dtype=dtype or torch.get_default_dtype(), device=device)
        else:
            check_matrix(
                owner,
                "landmarks",
                landmarks,
                width=self.in_features,
                max_abs=data_limit(landmarks),
                why=DISTANCE_OVERFLOW,
            )
            if landmarks.shape[0] != self.out_features:
                raise ValueError(
                    f"{owner}: argument 'landmarks' must have out_features={self.out_features} "
                    f"rows, got shape {list(landmarks.shape)}"
                )
            self.kernel_spec.validate_input(owner, "landmarks", landmarks)
            z = landmarks.detach().clone().to(dtype=dtype or landmarks.dtype, device=device)
        self.landmarks = nn.Parameter(z, requires_grad=trainable)
        self._init_bandwidths(0.0, trainable=trainable, dtype=z.dtype, device=z.device)
        #: Whether the landmarks were given (``landmarks=`` or :meth:`from_data`) rather
        #: than drawn uniformly; ``KernelClassifier(init_landmarks=True)`` keeps given ones.
        self.landmarks_given = landmarks is not None
        self.rank = rank
        self._init_projection_cache()  # R^-T (or the rank-k map) in eval mode

    @classmethod
    def from_data(
        cls,
        x: Tensor,
        out_features: int,
        *,
        init: str = "random",
        seed: int | None = None,
        generator: torch.Generator | None = None,
        eta: float | None = None,
        **kwargs: Any,
    ) -> NystromLayer:
        """Build a layer whose landmarks are selected from data.

        The selection runs on ``x``'s device (see :mod:`kernel_layers.selection.landmarks`, whose
        functions also work on their own, e.g. to pass ``landmarks=`` yourself with
        non-default k-means settings).

        Args:
            x (Tensor[N, D]): data to select from (``N >= out_features``).
            out_features: number of landmarks ``n``; for ``"greedy"``, the most landmarks.
            init: ``"random"``: a uniformly random subset of ``n`` distinct rows;
                ``"kmeans"``: the centres of k-means (Lloyd from k-means++ seeds, not data
                rows); ``"kmeans++"``: ``n`` distinct rows by k-means++ ``D^2`` sampling;
                ``"greedy"``: the innovation rule of
                :func:`~kernel_layers.selection.landmarks.greedy_landmarks` over the rows in a
                random order (drawn from ``seed``), with the layer's kernel: a row is
                accepted when ``k(x, x) - k_x^T K_Z^-1 k_x > eta``, until ``n`` are
                accepted. The layer may then have fewer landmarks: its
                ``out_features`` is the number accepted.
            seed: seed of the selection (exclusive with ``generator``).
            generator: a CPU ``torch.Generator``.
            eta: innovation threshold ``> 0`` of ``"greedy"`` (default
                :data:`~kernel_layers.selection.landmarks.DEFAULT_ETA`); only valid with it.
            **kwargs: further arguments of :class:`NystromLayer` (``kernel``, ``gamma``,
                ``kernel_params``, ``trainable``, ``rank``, ...).

        Returns:
            NystromLayer: with ``in_features = D`` and the selected landmarks.

        Raises:
            ValueError: unknown ``init`` (the message lists the valid ones),
                ``out_features > N``, ``eta`` without ``init="greedy"``, or no row
                accepted by the greedy rule.
        """
        landmarks = select_landmarks(
            f"{cls.__name__}.from_data",
            x,
            out_features,
            init=init,
            seed=seed,
            generator=generator,
            eta=eta,
            kernel=kwargs.get("kernel", "gaussian"),
            gamma=kwargs.get("gamma", 1.0),
            kernel_params=kwargs.get("kernel_params"),
        )
        return cls(x.shape[1], landmarks.shape[0], landmarks=landmarks, **kwargs)

    @property
    def jitter(self) -> float:
        """Relative diagonal jitter of ``K_Z`` (unset: the default of the landmarks' dtype)."""
        return self._jitter if self._jitter is not None else default_jitter(self.landmarks.dtype)

    def keep_jitter(self) -> None:
        """Set the jitter to the one in use, so that a change of dtype keeps the map (an
        unset jitter follows the landmarks' dtype: ``1e-6`` in float32, less in float64)."""
        self._jitter = self.jitter

    def data_rows_wanted(self) -> int:
        """``out_features`` training rows to draw the landmarks from, unless the
        landmarks were given (``landmarks=`` or :meth:`from_data`)."""
        return 0 if self.landmarks_given else self.out_features

    @torch.no_grad()
    def init_from_data(self, rows: Tensor) -> None:
        """Landmarks := the first ``out_features`` of ``rows (Tensor[N, D])``."""
        needed = self.out_features
        if rows.ndim != 2 or rows.shape[0] < needed or rows.shape[1] != self.in_features:
            raise ValueError(
                f"{type(self).__name__}: argument 'rows' must have shape [>= {needed}, "
                f"{self.in_features}], got {list(rows.shape)}"
            )
        self.kernel_spec.validate_input(type(self).__name__, "rows", rows[:needed])
        self.landmarks.copy_(rows[:needed].to(self.landmarks))

    def kernel_matrices(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """Cross and landmark kernel matrices, evaluated in :meth:`feature_dtype`.

        Args:
            x (Tensor[B, D]): inputs.

        Returns:
            tuple[Tensor[B, n], Tensor[n, n]]: ``G = k(x, Z)`` in
            ``feature_dtype(x.dtype)`` and the jittered ``K_Z`` in float64.
        """
        g, landmarks = self._cross_kernel(x)
        return g, landmark_gram(landmarks, self.kernel_spec, self.gamma, self.jitter)

    def _cross_kernel(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """``G = k(x, Z)`` and the (scaled) landmarks, both in :meth:`feature_dtype`."""
        self.kernel_spec.validate_input(type(self).__name__, "x", x)
        dtype = self.feature_dtype(upcast(x).dtype)
        landmarks = self._scaled_landmarks()
        g = self.kernel_spec.matrix(self._scale_inputs(x.to(dtype)), landmarks, self.gamma)
        return g, landmarks

    def _domain_landmarks(self) -> Tensor:
        """The landmarks projected into the kernel's input domain (themselves when it has
        none, or when they lie in it)."""
        project = self.kernel_spec.project_input
        return self.landmarks if project is None else project(self.landmarks)

    def _scaled_landmarks(self) -> Tensor:
        """The landmarks in the kernel's domain, scaled by the bandwidths (``ard``), in
        :meth:`feature_dtype`."""
        landmarks = upcast(self._domain_landmarks())
        return self._scale_inputs(landmarks.to(self.feature_dtype(landmarks.dtype)))

    def feature_dtype(self, dtype: torch.dtype) -> torch.dtype:
        """The dtype in which the map evaluates ``G`` and ``G P`` for inputs of ``dtype``.

        Float64 for narrow inputs, as in NysDI
        (:func:`~kernel_layers.numerics.precision.kernel_dtype`): a float32 ``G`` of
        narrow inputs at a small ``gamma`` holds too few digits of ``1 - k`` for the
        ill-conditioned ``P`` (DI of the features off by up to 3e-2 relative).
        The features are returned in ``dtype``.
        """
        return kernel_dtype(dtype, self.in_features, self.landmarks.shape[0])

    def exact_kernel(self, x: Tensor, z: Tensor) -> Tensor:
        """``k(x, z) (Tensor[B, n])`` of ``x (Tensor[B, D])``, ``z (Tensor[n, D])``: the
        layer's kernel on inputs scaled by its current bandwidths (``ard``), in their
        dtype; rank-k truncation approximates the same kernel."""
        return self._kernel_matrix(self._scale_inputs(x), self._scale_inputs(z))

    def projection(self) -> Tensor:
        """The map from ``G = k(x, Z)`` to the features: ``phi(x) = G P``.

        ``P = R^-T`` with ``K_Z = R R^T`` (Cholesky), or ``U_k S_k^-1/2`` with rank-k
        truncation; differentiable in the landmarks.

        Returns:
            Tensor[n, n] (``Tensor[n, rank]`` with truncation): ``P`` in float64.
        """
        k_z = landmark_gram(self._scaled_landmarks(), self.kernel_spec, self.gamma, self.jitter)
        if self.rank is not None:
            return rank_k_map(k_z, self.rank)
        factor = robust_cholesky(k_z, owner=type(self).__name__)
        eye = torch.eye(factor.shape[0], dtype=factor.dtype, device=factor.device)
        return torch.linalg.solve_triangular(factor, eye, upper=False).mT

    def _cache_key(self) -> tuple[object, ...]:
        return (self.landmarks, self.log_bandwidth, self.rank, self.gamma, self.jitter)

    def _cache_source(self) -> Tensor:
        return self.landmarks

    def input_limit(self) -> float:
        """The largest input magnitude whose squared distances to the landmarks (for the
        polynomial kernel, whose powers of inner products) stay finite in the landmarks'
        (upcast) dtype (see :meth:`KernelFeatureMap.input_limit`)."""
        limit = self._distance_limit(self.landmarks, self.in_features)
        if self.kernel != "polynomial":
            return limit
        degree, coef0 = int(self.kernel_params["degree"]), self.kernel_params["coef0"]
        dtype = upcast(self.landmarks).dtype
        return min(limit, power_limit(dtype, self.in_features, self.gamma, degree, coef0))

    def forward(self, x: Tensor) -> Tensor:
        """Map ``x (Tensor[..., D])`` to ``Tensor[..., n]`` Nystrom features.

        Runs with autocast disabled; float16 / bfloat16 inputs (or landmarks) are
        computed in float32, and the features come out in that dtype; narrow inputs'
        features are computed in float64 (:meth:`feature_dtype`). In eval mode
        without gradients to the landmarks the map ``P`` of :meth:`projection` is
        cached (recomputed whenever the landmarks change; on a device other than the
        CPU, edit them in place under ``torch.no_grad()`` rather than through ``.data``,
        which changes no version counter), so inference costs one kernel matrix and one
        product, and exported graphs (ONNX) hold ``P`` as a constant.
        """
        owner = type(self).__name__
        what = "powers of inner products" if self.kernel == "polynomial" else "squared distances"
        self._check_input(
            x, self.landmarks, why=f"larger ones overflow the {what} to the landmarks"
        )
        with autocast_off(x):  # distances and solves never run in low precision
            flat = check_dtype(owner, "x", x.reshape(-1, self.in_features), self.landmarks.dtype)
            flat = upcast(flat)
            if self._uses_cache():
                g = self._cross_kernel(flat)[0]
                features = g @ self._cached_projection().to(g.dtype)
            else:
                g, k_z = self.kernel_matrices(flat)
                if self.rank is not None:
                    features = g @ rank_k_map(k_z, self.rank).to(g.dtype)
                else:
                    factor = robust_cholesky(k_z, owner=owner).to(g.dtype)
                    features = torch.linalg.solve_triangular(factor.mT, g, upper=True, left=False)
        return features.to(flat.dtype).reshape(*x.shape[:-1], features.shape[-1])

    def discriminant_information(
        self,
        x: Tensor,
        targets: Tensor,
        *,
        rho: float = DEFAULT_RHO,
        num_classes: int | None = None,
        sync_dist: bool = False,
    ) -> Tensor:
        """DI of this layer's features of ``x`` (arguments as
        :meth:`KernelFeatureMap.discriminant_information`): NysDI (eq. 10 of the DI
        paper), computed from the inputs and landmarks without forming the features; with
        rank-k truncation, the DI of the ``rank`` features.
        """
        if self.rank is not None:  # NysDI is the full map's DI: use the rank-k features
            return super().discriminant_information(
                x, targets, rho=rho, num_classes=num_classes, sync_dist=sync_dist
            )
        return nystrom_discriminant_information(
            x,
            targets,
            self._domain_landmarks(),
            kernel=self.kernel_spec,
            gamma=self.gamma,
            rho=rho,
            jitter=self.jitter,
            num_classes=num_classes,
            sync_dist=sync_dist,
            bandwidth=self.input_bandwidth,
        )

    def get_config(self) -> dict[str, object]:
        """Constructor settings as primitives (the landmarks come from the state dict).

        Raises:
            ValueError: the kernel is a user callable, which has no name to record.
        """
        return {
            **self.base_config(),
            **self._kernel_config(),
            "trainable": self.landmarks.requires_grad,
            **self._ard_config(),
            "rank": self.rank,
            "jitter": self._jitter,
        }

    def extra_repr(self) -> str:
        text = super().extra_repr() + self._kernel_repr()
        text += f", trainable={self.landmarks.requires_grad}" + self._ard_repr()
        return text if self.rank is None else text + f", rank={self.rank}"
