"""Pictures of a run: curves from a CSVLogger file, landmark grids, bandwidths, CLI."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import lightning as L
import pytest
import torch
from lightning.pytorch.loggers import CSVLogger
from PIL import Image

from kernel_layers import FourierLayer, KernelClassifier, NystromLayer
from kernel_layers.cli.entry import main
from kernel_layers.data import DigitsDataModule
from kernel_layers.training.plots import (
    KernelPlots,
    _grid,
    _read_metrics,
    plot_curves,
    plot_landmarks,
)


def _write_metrics(path: Path) -> None:
    path.write_text(
        "epoch,lr,step,train/loss_epoch,val/acc\n"
        "0,0.01,2,-8.5,\n0,,2,,0.9\n1,0.01,5,-8.7,\n1,,5,,0.95\n2,0.001,8,-8.8,0.97\n"
    )


def test_metrics_are_read_per_epoch(tmp_path: Path) -> None:
    _write_metrics(tmp_path / "metrics.csv")
    series = _read_metrics(tmp_path / "metrics.csv")
    assert series["train/loss_epoch"] == [(0, -8.5), (1, -8.7), (2, -8.8)]
    assert series["val/acc"] == [(0, 0.9), (1, 0.95), (2, 0.97)]
    assert series["lr"] == [(0, 0.01), (1, 0.01), (2, 0.001)]


def test_curves_png_is_written(tmp_path: Path) -> None:
    _write_metrics(tmp_path / "metrics.csv")
    path = plot_curves(tmp_path)
    assert path == tmp_path / "curves.png"
    with Image.open(path) as image:
        assert image.size[0] > 3 * image.size[1]  # three panels side by side


def test_curves_explain_a_folder_without_metrics(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"argument 'run_dir' must hold a CSVLogger metrics.csv"):
        plot_curves(tmp_path)
    (tmp_path / "metrics.csv").write_text("epoch,step,other\n0,1,2\n")
    with pytest.raises(ValueError, match=r"holds none of \['train/loss_epoch', 'lr'"):
        plot_curves(tmp_path)


def test_curves_refuse_a_row_with_more_fields_than_the_header(tmp_path: Path) -> None:
    # The extra field reached float() as a list: a TypeError naming neither the file
    # nor the line.
    (tmp_path / "metrics.csv").write_text("epoch,step,lr\n0,1,0.1\n1,2,0.1,7\n")
    with pytest.raises(
        ValueError, match=r"rows have the header's 3 fields, got 4 on line 3 of '.*metrics.csv'"
    ):
        plot_curves(tmp_path)


def test_landmark_grid_refuses_no_landmarks_to_draw() -> None:
    with pytest.raises(ValueError, match=r"plot_landmarks: argument 'count' must be .*got 0"):
        plot_landmarks([("x", torch.rand(4, 64))], (8, 8), "unused.png", count=0)


def test_landmark_grid_places_every_image() -> None:
    images = torch.arange(5 * 2 * 3, dtype=torch.float64).reshape(5, 2, 3).numpy()
    canvas = _grid(images, columns=3)
    assert canvas.shape == (2 * 3, 3 * 4)
    assert (canvas[0:2, 4:7] == images[1]).all() and (canvas[3:5, 4:7] == images[4]).all()
    with pytest.raises(
        ValueError,
        match=r"argument 'image_shape' must give images of the landmarks' width, 60 columns; "
        r"got \(8, 8\) \(64 columns\)",
    ):
        plot_landmarks([("x", torch.rand(4, 60))], (8, 8), "unused.png")


def test_callback_draws_the_run(tmp_path: Path, make_trainer: Callable[..., L.Trainer]) -> None:
    L.seed_everything(0)
    plots = KernelPlots()
    model = KernelClassifier(NystromLayer(64, 50, gamma=0.02), num_classes=10, lr=1e-2)
    trainer = make_trainer(max_epochs=2, logger=CSVLogger(tmp_path, name="run"), callbacks=[plots])
    trainer.fit(model, DigitsDataModule(batch_size=400))
    assert sorted(p.name for p in plots.written) == ["curves.png", "landmarks.png"]
    assert plots._before is not None
    assert not torch.equal(plots._before, model.kernel_layer.landmarks.detach())  # trained
    ard = KernelClassifier(FourierLayer(64, 50, gamma=0.02, ard=True), num_classes=10)
    trainer = make_trainer(
        max_epochs=1, logger=CSVLogger(tmp_path, name="ard"), callbacks=[KernelPlots()]
    )
    trainer.fit(ard, DigitsDataModule(batch_size=400))
    assert (Path(trainer.log_dir) / "bandwidths.png").is_file()
    nystrom_ard = KernelClassifier(NystromLayer(64, 50, gamma=0.02, ard=True), num_classes=10)
    trainer = make_trainer(
        max_epochs=1, logger=CSVLogger(tmp_path, name="nystrom_ard"), callbacks=[KernelPlots()]
    )
    trainer.fit(nystrom_ard, DigitsDataModule(batch_size=400))
    assert (Path(trainer.log_dir) / "bandwidths.png").is_file()


def test_callback_adds_the_pictures_to_tensorboard(
    tmp_path: Path, make_trainer: Callable[..., L.Trainer]
) -> None:
    pytest.importorskip("tensorboard")
    from lightning.pytorch.loggers import TensorBoardLogger
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    L.seed_everything(0)
    plots = KernelPlots()
    model = KernelClassifier(NystromLayer(64, 50, gamma=0.02), num_classes=10, lr=1e-2)
    logger = TensorBoardLogger(tmp_path, name="tb")
    trainer = make_trainer(max_epochs=2, logger=logger, callbacks=[plots])
    trainer.fit(model, DigitsDataModule(batch_size=400))
    assert [p.name for p in plots.written] == ["landmarks.png"]  # no CSV: no curves
    events = EventAccumulator(logger.log_dir, size_guidance={"images": 0})
    events.Reload()
    assert events.Tags()["images"] == ["kernel-layers/landmarks"]
    (image,) = events.Images("kernel-layers/landmarks")
    with Image.open(plots.written[0]) as png:
        assert (image.width, image.height) == png.size and image.step == trainer.global_step


def test_plot_command(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    monkeypatch.setattr(sys, "argv", ["kernel-layers"])
    monkeypatch.chdir(tmp_path)
    main(
        [
            "fit",
            "--config",
            "quickstart",
            "--trainer.max_epochs=2",
            "--test_after_fit=false",
            "--trainer.enable_progress_bar=false",
        ]
    )
    run = tmp_path / "lightning_logs" / "quickstart" / "version_0"
    with pytest.raises(SystemExit) as done:
        main(
            ["plot", str(run), "--ckpt", "checkpoints/quickstart/last.ckpt", "--image-shape", "8,8"]
        )
    assert done.value.code == 0
    out = capsys.readouterr().out
    assert f"wrote {run / 'curves.png'}" in out and f"wrote {run / 'landmarks.png'}" in out
    with pytest.raises(SystemExit) as done:
        main(["plot", str(tmp_path)])
    assert done.value.code == 2
    ckpt = "checkpoints/quickstart/last.ckpt"
    with pytest.raises(SystemExit) as done:  # a traceback before
        main(["plot", str(run), "--ckpt", ckpt, "--image-shape", "7,7"])
    assert done.value.code == 2
    assert "argument 'image_shape' must give images of the landmarks' width, 64" in (
        capsys.readouterr().err
    )
