"""A checkpoint written by release 0.2.0 (module paths before the package was split
into sub-packages) loads and scores as it did when written."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from kernel_layers import KernelClassifier, NystromLayer
from kernel_layers.data import DigitsDataModule

ASSETS = Path(__file__).parent / "assets"


def test_release_0_2_0_checkpoint_loads_and_scores_identically() -> None:
    model = KernelClassifier.load_from_checkpoint(
        ASSETS / "quickstart_v0.2.0.ckpt", map_location="cpu"
    ).eval()
    assert isinstance(model.kernel_layer, NystromLayer)
    assert model.kernel_layer.out_features == 40
    data = DigitsDataModule(batch_size=400)
    data.prepare_data()
    data.setup("test")
    batches = list(data.test_dataloader())
    x = torch.cat([b[0] for b in batches])
    y = torch.cat([b[1] for b in batches])
    with torch.no_grad():
        scores = model.scores(model(x)).double().numpy()
        exact = model.double().scores(model(x.double())).numpy()  # float64 reference
    # The scores the 0.2.0 release computed from this checkpoint on the same rows.
    expected = np.load(ASSETS / "quickstart_v0.2.0_test_scores.npy", allow_pickle=False)
    # Float32 scores (of size about 1) lie about 4e-5 from the float64 ones, by an amount
    # that depends on the CPU's order of summation: 1e-4 bounds either evaluation.
    np.testing.assert_allclose(expected, exact, rtol=0, atol=1e-4)
    np.testing.assert_allclose(scores, exact, rtol=0, atol=1e-4)
    np.testing.assert_array_equal(scores.argmax(1), expected.argmax(1))
    assert (scores.argmax(1) == y.numpy()).mean() == (expected.argmax(1) == y.numpy()).mean()


def test_specs_recorded_under_the_old_module_paths_still_build() -> None:
    from kernel_layers.training.architecture import build_module, describe_module

    spec = {
        "class_path": "kernel_layers.nystrom.NystromLayer",
        "init_args": {"in_features": 3, "out_features": 5, "gamma": 0.5},
    }
    layer = build_module("KernelClassifier", "kernel_layer", spec)
    assert isinstance(layer, NystromLayer) and layer.out_features == 5
    # New specs record the public name, which survives moves between modules.
    assert describe_module(layer)["class_path"] == "kernel_layers.NystromLayer"
