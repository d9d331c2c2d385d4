"""Discriminant Information (DI) of a batch of features, as a function and a loss.

For a mini-batch of features ``Phi (B x J)``, targets ``Y (B x L)`` and the centring
``C = I - 11^T / B``, with ``Phi_c = C Phi`` and ``Y_c = C Y``::

    DI = tr((Phi_c^T Phi_c + rho I)^-1 Phi_c^T Y Y^T Phi_c)

(Kung, "Discriminant component analysis for privacy protection and visualization of
big data", 2017; Al-Qershi/Li/Kung, "Kernel approximation via the Discriminant
Information criterion", the *DI paper*). ``||Y_c||^2 - DI`` is the minimum
regularised least-squares error (MRLSE) of a ridge fit of ``Y`` on ``Phi``, so
maximising DI makes the features linearly separable. The solve is in
:mod:`.solve`, its gradient in :mod:`.autograd`.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import Tensor, nn

from kernel_layers._validation import check_choice, check_int, check_matrix, check_positive
from kernel_layers.numerics.deferred import active_checks
from kernel_layers.numerics.precision import SUM_OVERFLOW, sum_limit
from kernel_layers.objectives.autograd import _DIFunction
from kernel_layers.objectives.statistics import Sync, global_num_classes
from kernel_layers.objectives.targets import encode_targets

__all__ = ["DEFAULT_RHO", "FORMS", "DILoss", "check_rho", "discriminant_information"]

#: The paper's ridge parameter.
DEFAULT_RHO = 1e-4
#: Forms of the DI computation: ``"auto"``, ``"primal"`` (``J x J``), ``"dual"`` (``B x B``).
FORMS = ("auto", "primal", "dual")


def check_rho(owner: str, rho: float) -> float:
    """``rho`` as a float, or a ``ValueError`` naming ``owner`` unless it is ``> 0``."""
    return check_positive(owner, "rho", rho)


def discriminant_information(
    features: Tensor,
    targets: Tensor,
    *,
    rho: float = DEFAULT_RHO,
    num_classes: int | None = None,
    form: str = "auto",
    sync_dist: bool = False,
    process_group: dist.ProcessGroup | None = None,
) -> Tensor:
    """Discriminant Information of a batch of features about its targets.

    ``DI = tr((Phi_c^T Phi_c + rho I)^-1 Phi_c^T Y Y^T Phi_c)``, with ``0 <= DI <=
    ||Y_c||_F^2`` (``= L - 1`` for unit-norm one-hot columns with all ``L`` classes
    present). Differentiable with a closed-form backward.

    Args:
        features (Tensor[B, J]): features ``Phi``.
        targets (Tensor[B] | Tensor[B, L]): integer labels (one-hot encoded, each
            present class column scaled to unit norm) or a float target matrix used
            as is (regression, multi-label).
        rho: ridge parameter ``> 0``.
        num_classes: number of classes ``L`` for integer labels (default
            ``max(label) + 1``; absent classes contribute nothing).
        form: ``"primal"`` (``J x J`` solve), ``"dual"`` (``B x B`` solve) or
            ``"auto"`` (dual when ``B < J`` and its round-off bound ``eps ||Phi_c||_F^2
            / rho`` is within :data:`~kernel_layers.objectives.solve.DUAL_ROUNDOFF_LIMIT`;
            the dual form loses digits on features of rank below ``B - 1`` with a
            ``rho`` that small). Both give the same value up to that round-off; note
            that with ``B <= J`` the centred features span the batch and DI tends to
            its maximum as ``rho -> 0``, which is why the paper keeps batches larger
            than ``J``.
        sync_dist: under ``torch.distributed`` (world size > 1), compute the exact DI of
            the union of every process's batch by all-reducing the sufficient
            statistics; the gradient with respect to the local features equals the
            matching rows of the single-process gradient. Uses the primal form. A no-op
            without an initialised process group. Under DDP, which averages gradients
            over processes, multiply the loss by the world size (``KernelClassifier``
            does) to get the single-process update. Every process must call it (a
            validation error raised on one process alone leaves the others waiting).
        process_group: the group to reduce over (default: the world).

    Returns:
        Tensor[]: DI, in the features' dtype.
    """
    owner = "discriminant_information"
    # The entries are checked from the column sums DI forms anyway (one pass over the
    # features fewer), except where no host read may decide (deferred checks, compiling).
    scan = active_checks() is not None or torch.compiler.is_compiling()
    check_matrix(
        owner, "features", features, max_abs=sum_limit(features), why=SUM_OVERFLOW, values=scan
    )
    rho = check_rho(owner, rho)
    check_choice(owner, "form", form, FORMS)
    batch = features.shape[0]
    if batch < 2:
        raise ValueError(f"{owner}: argument 'features' must have at least 2 rows, got {batch}")
    sync = Sync.create(sync_dist, process_group)
    if sync is not None and form == "dual":
        raise ValueError(
            f"{owner}: argument 'form' must be 'primal' or 'auto' with sync_dist=True "
            "(the dual form needs every row on one process), got 'dual'"
        )
    num_classes = global_num_classes(targets, num_classes, sync)
    y, scale_columns = encode_targets(
        targets, batch, num_classes=num_classes, owner=owner, dtype=features.dtype
    )
    if sync is not None:
        form = "primal"
    return _DIFunction.apply(features, y, rho, scale_columns, form, owner, sync, not scan)


class DILoss(nn.Module):
    """``-DI`` as a loss to minimise (see :func:`discriminant_information`).

    Args:
        rho: ridge parameter ``> 0``.
        num_classes: number of classes for integer labels (recommended, so that every
            batch has the same ``L``).
        form: ``"auto"``, ``"primal"`` or ``"dual"``.

    Shape:
        features (Tensor[B, J]), targets (Tensor[B] | Tensor[B, L]) -> Tensor[].
    """

    def __init__(
        self, *, rho: float = DEFAULT_RHO, num_classes: int | None = None, form: str = "auto"
    ) -> None:
        super().__init__()
        self.rho = check_rho("DILoss", rho)
        self.num_classes = (
            None if num_classes is None else check_int("DILoss", "num_classes", num_classes)
        )
        check_choice("DILoss", "form", form, FORMS)
        self.form = form

    def forward(self, features: Tensor, targets: Tensor) -> Tensor:
        """Return ``-DI(features, targets)``."""
        return -discriminant_information(
            features, targets, rho=self.rho, num_classes=self.num_classes, form=self.form
        )

    def extra_repr(self) -> str:
        return f"rho={self.rho}, num_classes={self.num_classes}, form={self.form!r}"
