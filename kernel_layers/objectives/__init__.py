"""The objectives: Discriminant Information (DI), its Nystrom form (NysDI) and the
least-squares objective.

Modules: :mod:`.statistics` (DI's sufficient statistics: centring, target scaling and
the all-reduce, in one place), :mod:`.solve` (the forward solves), :mod:`.autograd`
(the closed-form backward passes), :mod:`.di`, :mod:`.nysdi`, :mod:`.least_squares`
and :mod:`.targets` (target encoding).
"""

from kernel_layers.objectives.di import DEFAULT_RHO, FORMS, DILoss, discriminant_information
from kernel_layers.objectives.least_squares import least_squares_loss
from kernel_layers.objectives.nysdi import nystrom_discriminant_information
from kernel_layers.objectives.statistics import DIStatistics, di_statistics, merge_statistics
from kernel_layers.objectives.targets import encode_targets, unit_norm_columns

__all__ = [
    "DEFAULT_RHO",
    "FORMS",
    "DILoss",
    "DIStatistics",
    "di_statistics",
    "discriminant_information",
    "encode_targets",
    "least_squares_loss",
    "merge_statistics",
    "nystrom_discriminant_information",
    "unit_norm_columns",
]
