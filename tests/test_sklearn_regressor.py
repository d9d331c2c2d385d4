"""DIRegressor: scikit-learn's estimator checks and what the regressor adds."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.datasets import make_friedman1
from sklearn.kernel_approximation import Nystroem
from sklearn.linear_model import RidgeCV
from sklearn.pipeline import make_pipeline
from sklearn.utils.estimator_checks import parametrize_with_checks

from kernel_layers.sklearn import DIRegressor
from kernel_layers.sklearn.readout import fit_loo_ridge_targets

#: Quick fits; J from the rows (the default), as the checks score the fit on 200 rows.
FAST = {"max_epochs": 2, "random_state": 0}


@parametrize_with_checks([DIRegressor(**FAST), DIRegressor(map="fourier", **FAST)])
def test_sklearn_compatible_estimator(estimator, check) -> None:
    check(estimator)
