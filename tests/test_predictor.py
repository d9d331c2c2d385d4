"""``KernelClassifier.predictor``: the trained model as one module (the data's scaling,
backbone, kernel layer and read-out), eager and exported to onnxruntime, against the
data module's own scaling and ``Trainer.predict``.

Data: scikit-learn's bundled digits in their raw units (pixels 0..16, with constant
columns), split by hand so that the raw test rows are at hand.
"""

from __future__ import annotations

import copy
import pathlib
import warnings
from collections.abc import Callable

import lightning as L
import numpy as np
import onnxruntime as ort
import pytest
import torch
from sklearn.datasets import load_digits

from kernel_layers import FourierLayer, NystromLayer
from kernel_layers.data import InputScaling, TensorDataModule
from kernel_layers.training.backbones import SmallCNN
from kernel_layers.training.module import KernelClassifier
from kernel_layers.training.predictor import Predictor

TRAIN = 1400


def _digits(image: bool = False) -> tuple[np.ndarray, ...]:
    x, y = load_digits(return_X_y=True)
    x = x.astype(np.float32)
    if image:
        x = x.reshape(-1, 1, 8, 8)
    return x[:TRAIN], y[:TRAIN], x[TRAIN:], y[TRAIN:]


def _data(image: bool = False, **kwargs: object) -> TensorDataModule:
    options: dict[str, object] = {"batch_size": 200, "val_fraction": 0.0}
    options.update(kwargs)
    return TensorDataModule(*_digits(image), **options)  # type: ignore[arg-type]


def _onnx(module: torch.nn.Module, x: torch.Tensor) -> ort.InferenceSession:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        program = torch.onnx.export(
            module, (x,), dynamo=True, dynamic_shapes={"x": {0: "batch"}}, verbose=False
        )
    assert program is not None
    return ort.InferenceSession(
        program.model_proto.SerializeToString(), providers=["CPUExecutionProvider"]
    )


def _predict(trainer: L.Trainer, model: KernelClassifier, dm: TensorDataModule):
    model.hparams["return_scores"] = True
    batches = trainer.predict(model, dm)
    assert batches is not None
    classes = torch.cat([b[0] for b in batches])  # type: ignore[index]
    scores = torch.cat([b[1] for b in batches])  # type: ignore[index]
    return classes, scores


# ------------------------------------------------------------------ InputScaling
@pytest.mark.parametrize("clip", [False, True])
@pytest.mark.parametrize("scaling", ["feature", "global"])
def test_input_scaling_equals_the_data_modules_scaling_bit_for_bit(
    clip: bool, scaling: str
) -> None:
    dm = _data(clip=clip, scaling=scaling)
    module = dm.input_scaling()
    raw_test = torch.from_numpy(_digits()[2])
    expected = dm.test_dataset.tensors[0]  # type: ignore[union-attr]
    assert torch.equal(module(raw_test), expected)
    assert torch.equal(module(raw_test), dm.transform(raw_test))
    assert module(raw_test.double()).dtype == torch.float32
    # constant training columns (digits' first pixel) map to 0 in every split
    assert bool((module(raw_test)[:, 0] == 0).all())
    beyond = raw_test * 2 - 8  # rows outside the training range
    assert torch.equal(module(beyond), dm.transform(beyond))
    low, high = float(module(beyond).min()), float(module(beyond).max())
    assert (low, high) == (0.0, 1.0) if clip else (low < 0 and high > 1)


def test_input_scaling_keeps_the_image_shape() -> None:
    dm = _data(image=True)
    module = dm.input_scaling()
    raw = torch.from_numpy(_digits(image=True)[2])
    out = module(raw)
    assert out.shape == (len(raw), 1, 8, 8)
    assert torch.equal(out, dm.test_dataset.tensors[0])  # type: ignore[union-attr]
    assert torch.equal(module(raw.reshape(len(raw), -1)), out)  # flat rows too


def test_input_scaling_rejects_mismatched_sizes() -> None:
    with pytest.raises(ValueError, match=r"InputScaling: arguments 'shift'.*same number"):
        InputScaling(torch.zeros(3), torch.ones(3), torch.ones(2), clip=False, input_shape=(3,))
    with pytest.raises(ValueError, match=r"got \[3, 3, 3\] and input_shape \[1, 2, 2\]"):
        InputScaling(
            torch.zeros(3), torch.ones(3), torch.ones(3), clip=False, input_shape=(1, 2, 2)
        )
    module = _data().input_scaling()
    with pytest.raises(ValueError, match=r"argument 'x' must have 64 features per row.*\[5, 63\]"):
        module(torch.zeros(5, 63))


# ------------------------------------------------------------------ Predictor
@pytest.fixture(scope="module")
def fitted() -> tuple[KernelClassifier, TensorDataModule, L.Trainer]:
    L.seed_everything(0)
    dm = _data()
    model = KernelClassifier(NystromLayer(64, 60, gamma=0.5), num_classes=10, lr=1e-2)
    trainer = L.Trainer(
        max_epochs=3,
        accelerator="cpu",
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(model, dm)
    return model, dm, trainer


def test_predictor_on_raw_rows_gives_trainer_predict_classes_and_scores(
    fitted: tuple[KernelClassifier, TensorDataModule, L.Trainer],
) -> None:
    model, dm, trainer = fitted
    classes, scores = _predict(trainer, model, dm)
    predictor = model.predictor(dm)
    assert isinstance(predictor, Predictor) and isinstance(predictor.scaling, InputScaling)
    raw_test = torch.from_numpy(_digits()[2])
    got_classes, got_scores = predictor(raw_test)
    assert got_classes.dtype == torch.int64
    assert torch.equal(got_classes, classes)
    torch.testing.assert_close(got_scores, scores, atol=1e-6, rtol=0)
    # the accuracy the test split gives (test/acc) is the predictor's
    test_acc = trainer.test(model, dm, verbose=False)[0]["test/acc"]
    y_test = torch.from_numpy(_digits()[3])
    assert float((got_classes == y_test).float().mean()) == pytest.approx(test_acc, abs=1e-6)
    assert test_acc > 0.9
    # without a data module it takes the inputs as scaled in training
    plain = model.predictor()
    assert plain.scaling is None
    scaled = dm.test_dataset.tensors[0]  # type: ignore[union-attr]
    assert torch.equal(plain(scaled)[0], got_classes)


def test_predictor_runs_in_onnxruntime(
    fitted: tuple[KernelClassifier, TensorDataModule, L.Trainer],
) -> None:
    model, dm, _ = fitted
    predictor = model.predictor(dm)
    raw_test = torch.from_numpy(_digits()[2])
    session = _onnx(predictor, raw_test[:8])
    assert [i.name for i in session.get_inputs()] == ["x"]
    onnx_classes, onnx_scores = session.run(None, {"x": raw_test.numpy()})
    classes, scores = predictor(raw_test)
    # as close to the float64 model as PyTorch's own float32 forward
    reference = copy.deepcopy(predictor)
    reference.kernel_layer.keep_jitter()  # the float64 reference of the same map
    reference.double()
    assert reference.scaling is not None
    exact = reference.readout(reference.kernel_layer(reference.scaling(raw_test).double()))
    eager_error = float((scores.double() - exact).abs().max())
    onnx_error = float((torch.from_numpy(onnx_scores).double() - exact).abs().max())
    assert onnx_error <= 2 * eager_error + 1e-6
    assert (onnx_classes == classes.numpy()).mean() >= 0.99


def test_predictor_is_a_frozen_copy(
    fitted: tuple[KernelClassifier, TensorDataModule, L.Trainer],
) -> None:
    model, dm, _ = fitted
    predictor = model.predictor(dm)
    assert not predictor.training
    assert not any(p.requires_grad for p in predictor.parameters())
    assert model.kernel_layer.landmarks.requires_grad  # the model itself is untouched
    raw_test = torch.from_numpy(_digits()[2])
    before = predictor(raw_test)[1]
    saved = model.kernel_layer.landmarks.detach().clone()
    try:
        with torch.no_grad():
            model.kernel_layer.landmarks.mul_(0.5)
        assert torch.equal(predictor(raw_test)[1], before)
    finally:
        with torch.no_grad():
            model.kernel_layer.landmarks.copy_(saved)


def test_predictor_refits_a_stale_read_out_from_the_data_module() -> None:
    dm = _data()
    dm.setup()
    x_train = dm.train_dataset.tensors[0]  # type: ignore[union-attr]
    layer = NystromLayer.from_data(x_train, 60, gamma=0.5, seed=0)
    model = KernelClassifier(layer, num_classes=10)
    with pytest.raises(
        RuntimeError,
        match=r"predictor: the ridge read-out is not fitted.*"
        r"pass argument 'datamodule'",
    ):
        model.predictor()
    predictor = model.predictor(dm)  # refits on the training split
    assert bool(model.head.fitted)
    scaled = dm.test_dataset.tensors[0]  # type: ignore[union-attr]
    expected = model.scores(model(scaled))
    torch.testing.assert_close(predictor(torch.from_numpy(_digits()[2]))[1], expected)


def test_predictor_refuses_landmarks_never_drawn() -> None:
    model = KernelClassifier(NystromLayer(64, 60, gamma=0.5), num_classes=10)
    with pytest.raises(RuntimeError, match=r"landmarks were never initialised"):
        model.predictor(_data())


def test_predictor_rejects_other_data() -> None:
    model = KernelClassifier(FourierLayer(64, 30, seed=0), num_classes=10)
    with pytest.raises(
        TypeError,
        match=r"argument 'datamodule' must be a kernel_layers.data "
        r"ArrayDataModule or None, got dict",
    ):
        model.predictor({})  # type: ignore[arg-type]
    rng = np.random.default_rng(0)
    narrow = TensorDataModule(
        rng.random((50, 32)), np.arange(50) % 10, rng.random((10, 32)), np.arange(10)
    )
    with pytest.raises(ValueError, match=r"in_features=64 must equal the data's in_features=32"):
        model.predictor(narrow)


def test_predictor_with_a_backbone_and_a_trained_read_out(
    make_trainer: Callable[..., L.Trainer],
) -> None:
    L.seed_everything(0)
    dm = _data(image=True, scaling="global")
    model = KernelClassifier(
        FourierLayer(16, 40, gamma=0.5, seed=0),
        num_classes=10,
        backbone=SmallCNN(1, 16, width=4),
        objective="ce",
        lr=1e-2,
    )
    trainer = make_trainer(max_epochs=2)
    trainer.fit(model, dm)
    classes, scores = _predict(trainer, model, dm)
    predictor = model.predictor(dm)
    assert predictor.backbone is not None
    raw = torch.from_numpy(_digits(image=True)[2])
    got_classes, got_scores = predictor(raw)
    assert torch.equal(got_classes, classes)
    torch.testing.assert_close(got_scores, scores, atol=1e-5, rtol=0)
    onnx_classes, onnx_scores = _onnx(predictor, raw[:8]).run(None, {"x": raw.numpy()})
    np.testing.assert_allclose(onnx_scores, got_scores.numpy(), atol=1e-4, rtol=0)
    assert (onnx_classes == got_classes.numpy()).mean() >= 0.99


def test_export_onnx_writes_the_file_whole_and_checks_it(
    fitted: tuple[KernelClassifier, TensorDataModule, L.Trainer], tmp_path
) -> None:
    from kernel_layers.training.export import export_onnx

    model, dm, _ = fitted
    predictor = model.predictor(dm)
    raw_test = torch.from_numpy(_digits()[2])
    with pytest.raises(ValueError, match=r"argument 'path' must end in .onnx, got '.*m.pt'"):
        export_onnx(predictor, tmp_path / "m.pt", raw_test[:8])
    with pytest.raises(ValueError, match=r"'example' must be a batch of at least 2 rows.*\[1, 6"):
        export_onnx(predictor, tmp_path / "m.onnx", raw_test[:1])
    assert not list(tmp_path.iterdir())
    check = export_onnx(predictor, tmp_path / "sub" / "m.onnx", raw_test[:64])
    assert [p.name for p in (tmp_path / "sub").iterdir()] == ["m.onnx"]  # no scratch file
    assert check.classes_agree == 1.0 and 0 <= check.max_abs_gap < 1e-4
    session = ort.InferenceSession(str(tmp_path / "sub" / "m.onnx"))
    classes, _ = session.run(None, {"x": raw_test.numpy()})
    assert (classes == predictor(raw_test)[0].numpy()).mean() >= 0.99


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_predictor_of_a_cuda_model_scales_on_its_device(tmp_path) -> None:
    from kernel_layers.training.export import export_onnx

    dm = _data()
    dm.setup()
    x_train = dm.train_dataset.tensors[0]  # type: ignore[union-attr]
    layer = NystromLayer.from_data(x_train, 60, gamma=0.5, seed=0)
    model = KernelClassifier(layer, num_classes=10)
    cpu = model.predictor(dm)
    predictor = model.cuda().predictor(dm)
    assert predictor.scaling is not None and predictor.scaling.shift.device.type == "cuda"
    assert predictor.scaling.shift.dtype == torch.float64
    raw_test = torch.from_numpy(_digits()[2])
    classes, scores = predictor(raw_test.cuda())
    assert torch.equal(classes.cpu(), cpu(raw_test)[0])
    torch.testing.assert_close(scores.cpu(), cpu(raw_test)[1], atol=1e-5, rtol=0)
    export_onnx(predictor, tmp_path / "m.onnx", raw_test[:8])
    assert predictor.scaling.shift.device.type == "cuda"  # the caller's copy did not move


def test_a_float64_predictor_has_no_float32_round_off(
    fitted: tuple[KernelClassifier, TensorDataModule, L.Trainer], tmp_path
) -> None:
    from kernel_layers.training.export import export_onnx

    model, dm, _ = fitted
    predictor = model.predictor(dm, dtype=torch.float64)
    assert predictor.scaling is not None and predictor.scaling.dtype == torch.float64
    raw_test = torch.from_numpy(_digits()[2])
    classes, scores = predictor(raw_test)
    assert classes.dtype == torch.int64
    assert scores.dtype == torch.float64
    reference = copy.deepcopy(model)
    reference.kernel_layer.keep_jitter()  # the trained map's jitter, not float64's default
    reference = reference.double().eval()
    with torch.no_grad():
        # its scaling hands the model float64 rows (not rounded to float32 first)
        exact = reference.head(reference(predictor.scaling(raw_test)))
    torch.testing.assert_close(scores, exact, atol=1e-12, rtol=0)
    # the same map as the float32 model's (its jitter kept), without float32 round-off
    float32_scores = model.predictor(dm)(raw_test)[1].double()
    assert float((scores - float32_scores).abs().max()) < 1e-5  # measured: 4.3e-7
    assert model.kernel_layer.landmarks.dtype == torch.float32  # the model is untouched
    check = export_onnx(predictor, tmp_path / "m64.onnx", raw_test[:8])
    assert check.classes_agree == 1.0 and check.max_abs_gap < 1e-6
    with pytest.raises(
        ValueError,
        match=r"argument 'dtype' must be torch.float32, torch.float64 "
        r"or None, got torch.float16",
    ):
        model.predictor(dm, dtype=torch.float16)


@pytest.mark.parametrize("scaled", [True, False])
def test_a_model_trained_in_float64_predicts_in_float64_by_default(
    scaled: bool, make_trainer: Callable[..., L.Trainer]
) -> None:
    # dtype=None is "as the model is": the scaling handed a float64 map float32 rows
    L.seed_everything(0)
    dm = _data()
    model = KernelClassifier(NystromLayer(64, 20, gamma=0.5), num_classes=10, lr=1e-2)
    make_trainer(max_epochs=1, precision="64-true").fit(model, dm)
    raw = torch.from_numpy(_digits()[2][:20])  # float32 rows
    predictor = model.predictor(dm if scaled else None)
    rows = raw if scaled else dm.input_scaling()(raw)
    assert predictor.input_dtype == torch.float64
    classes, scores = predictor(rows.float())
    assert scores.dtype == torch.float64
    reference = model.predictor(dm if scaled else None, dtype=torch.float64)(rows.double())
    torch.testing.assert_close(scores, reference[1], atol=0, rtol=0)
    torch.testing.assert_close(classes, reference[0])


def test_export_onnx_names_what_onnxruntime_cannot_run(tmp_path) -> None:
    """onnxruntime's CPU convolution is float32 only: a float64 CNN model is refused with
    a message that says so, and no file is left behind."""
    from kernel_layers.training.export import export_onnx

    torch.manual_seed(0)
    predictor = Predictor(
        FourierLayer(16, 20, seed=0),
        torch.nn.Linear(20, 10),
        backbone=SmallCNN(1, 16, width=4),
        dtype=torch.float64,
    )
    with pytest.raises(
        RuntimeError,
        match=r"onnxruntime cannot run the exported graph .*Conv.*"
        r"export such a model in float32",
    ):
        export_onnx(predictor, tmp_path / "cnn64.onnx", torch.rand(4, 1, 8, 8, dtype=torch.float64))
    assert not list(tmp_path.iterdir())


# ------------------------------------------------------------------ predictions file
@pytest.mark.parametrize("link", ["same", "symlink", "hardlink"])
def test_prediction_writer_never_overwrites_the_predicted_file(
    fitted: tuple[KernelClassifier, TensorDataModule, L.Trainer], tmp_path, link: str
) -> None:
    import os

    from kernel_layers.training.predictions import PredictionWriter

    model, dm, _ = fitted
    source = tmp_path / "rows.csv"
    np.savetxt(source, _digits()[2][:5], delimiter=",")
    before = source.read_bytes()
    output = source
    if link != "same":
        output = tmp_path / "out.csv"
        (os.symlink if link == "symlink" else os.link)(source, output)
    dm.set_predict_source(path=source)
    trainer = L.Trainer(
        accelerator="cpu",
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[PredictionWriter(output)],
    )
    try:
        with pytest.raises(
            ValueError,
            match=r"PredictionWriter: argument 'output' '.*' is the input file '.*rows.csv'; "
            r"writing the predictions would overwrite it",
        ):
            trainer.predict(model, dm)
    finally:
        dm.set_predict_source("test")
    assert source.read_bytes() == before


def test_exported_model_flags_a_non_finite_row_with_class_minus_one(
    fitted: tuple[KernelClassifier, TensorDataModule, L.Trainer], tmp_path
) -> None:
    from kernel_layers.training.export import export_onnx

    model, dm, _ = fitted
    predictor = model.predictor(dm)
    raw_test = torch.from_numpy(_digits()[2][:16]).clone()
    want = predictor(raw_test)[0].numpy()
    export_onnx(predictor, tmp_path / "m.onnx", raw_test)
    bad = raw_test.clone()
    bad[3, 10] = float("nan")
    bad[7, 0] = float("inf")
    bad[11] = float("-inf")
    classes, _ = ort.InferenceSession(str(tmp_path / "m.onnx")).run(None, {"x": bad.numpy()})
    flagged = np.array([3, 7, 11])
    assert (classes[flagged] == -1).all()  # no class (never class 0) for such a row
    keep = np.setdiff1d(np.arange(16), flagged)
    np.testing.assert_array_equal(classes[keep], want[keep])
    assert (want >= 0).all()  # finite rows are never flagged
    # In PyTorch the same rows are refused by name before anything is computed.
    with pytest.raises(ValueError, match=r"argument 'x' must be finite"):
        predictor(bad)


def test_written_predictions_name_their_files(tmp_path: pathlib.Path) -> None:
    from kernel_layers.training.predictions import write_predictions

    classes, scores = torch.tensor([2, 0, 1]), torch.rand(3, 3, dtype=torch.float64)
    names = ["1.png", "2.png", "10.png"]
    write_predictions(tmp_path / "p.csv", classes, scores, names=names)
    lines = (tmp_path / "p.csv").read_text().splitlines()
    assert lines[0] == "index,file,prediction,score_0,score_1,score_2"
    assert [line.split(",")[:3] for line in lines[1:]] == [
        ["0", "1.png", "2"],
        ["1", "2.png", "0"],
        ["2", "10.png", "1"],
    ]
    write_predictions(tmp_path / "p.pt", classes, scores, names=names)
    saved = torch.load(tmp_path / "p.pt", weights_only=True)
    assert saved["file"] == names and torch.equal(saved["prediction"], classes)
    with pytest.raises(ValueError, match=r"'names' must hold one name per row \(3\), got 2"):
        write_predictions(tmp_path / "q.csv", classes, names=names[:2])


def test_a_regressors_predictions_are_written_as_numbers(tmp_path: pathlib.Path) -> None:
    import lightning as L
    from torch.utils.data import DataLoader, TensorDataset

    from kernel_layers import KernelRegressor
    from kernel_layers.training.predictions import PredictionWriter, write_predictions

    x = torch.rand(40, 3)
    for targets in (1, 2):
        y = torch.stack([x.sum(1), x[:, 0] - x[:, 1]], 1)[:, :targets]
        model = KernelRegressor(NystromLayer(3, 8, seed=0), num_targets=targets, keep_best=None)
        model.refit_head(DataLoader(TensorDataset(x, y), batch_size=20))
        writer = PredictionWriter(tmp_path / f"r{targets}.csv")
        trainer = L.Trainer(callbacks=[writer], logger=False, enable_progress_bar=False)
        trainer.predict(model, DataLoader(TensorDataset(x), batch_size=16))
        model.eval()
        with torch.no_grad():
            want = model.predict(model(x)).reshape(40, targets)
        lines = (tmp_path / f"r{targets}.csv").read_text().splitlines()
        columns = ["prediction"] if targets == 1 else ["prediction_0", "prediction_1"]
        assert lines[0].split(",") == ["index", *columns]
        written = torch.tensor(
            [[float(v) for v in line.split(",")[1:]] for line in lines[1:]], dtype=torch.float64
        )
        torch.testing.assert_close(written, want.double(), rtol=1e-8, atol=0.0)
    write_predictions(tmp_path / "c.csv", torch.tensor([0.25, 1.5]))  # float, one column
    assert (tmp_path / "c.csv").read_text().splitlines()[1:] == ["0,0.25", "1,1.5"]


def test_predictions_of_part_of_an_image_folder_name_their_files(tmp_path: pathlib.Path) -> None:
    # limit_predict_batches or fast_dev_run serve the first rows only, in order
    from types import SimpleNamespace

    from kernel_layers.training.predictions import PredictionWriter

    writer = PredictionWriter(tmp_path / "p.csv")
    names = [f"{i}.png" for i in range(12)]
    trainer = SimpleNamespace(datamodule=SimpleNamespace(predict_row_names=names), world_size=1)
    batch = (torch.tensor([3, 1, 4, 1]), torch.rand(4, 5))
    writer.write_on_epoch_end(trainer, None, [batch], None)  # type: ignore[arg-type]
    rows = (tmp_path / "p.csv").read_text().splitlines()[1:]
    assert [row.split(",")[1] for row in rows] == names[:4]


def test_image_files_come_in_natural_order(tmp_path: pathlib.Path) -> None:
    from kernel_layers.data.user_files import image_files

    for name in ("10.png", "2.png", "1\u00b22.png", "a.png", "notes.txt", "02.png"):
        (tmp_path / name).write_bytes(b"")
    # 02 and 2 are both the number 2 (ties keep text order); a superscript is text
    assert [p.name for p in image_files(tmp_path)] == [
        "1\u00b22.png",
        "02.png",
        "2.png",
        "10.png",
        "a.png",
    ]


def test_prediction_writer_refuses_a_folder_it_cannot_write_before_predicting(
    tmp_path: pathlib.Path,
) -> None:
    from kernel_layers.training.predictions import PredictionWriter

    (tmp_path / "a-file").write_text("")
    match = (
        r"PredictionWriter: argument 'output' must be a file in a folder that can be written, "
        r"got '.*a-file/p.csv' \(NotADirectoryError: a file is in the folder's place\)"
    )
    with pytest.raises(ValueError, match=match):
        PredictionWriter(tmp_path / "a-file" / "p.csv")
    PredictionWriter(tmp_path / "new" / "deeper" / "p.csv")  # made by the write itself
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a-file"]  # nothing left behind


def test_integer_rows_reach_the_backbone_as_they_are() -> None:
    # a backbone that scales uint8 images itself (torchvision's ToDtype(scale=True))
    # must see uint8, not floats 0..255 cast before it
    class Scale(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            assert x.dtype == torch.uint8
            return x.flatten(1).float() / 255

    layer = NystromLayer(4, 3, seed=0)
    predictor = Predictor(layer, torch.nn.Linear(3, 2), backbone=Scale())
    images = torch.randint(0, 256, (5, 2, 2), dtype=torch.uint8)
    with torch.no_grad():
        scores = predictor.readout(layer.eval()(images.flatten(1).float() / 255))
    torch.testing.assert_close(predictor(images)[1], scores)
