"""The ``kernel-layers`` LightningCLI: every recipe parses and runs one step offline."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml
from formats import write_covtype, write_idx_images, write_idx_labels

from kernel_layers.training.cli import main

RECIPES = sorted((Path(__file__).parents[1] / "recipes").glob("*.yaml"))
IDX = (
    "train-images-idx3-ubyte",
    "train-labels-idx1-ubyte",
    "t10k-images-idx3-ubyte",
    "t10k-labels-idx1-ubyte",
)


@pytest.fixture(scope="module")
def offline_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Small files in the real formats: MNIST-layout IDX files and a UCI covtype CSV."""
    root = tmp_path_factory.mktemp("data")
    rng = np.random.default_rng(0)
    for n_train, folder in ((2400, root / "idx"),):
        folder.mkdir()
        write_idx_images(folder / IDX[0], rng.integers(0, 256, (n_train, 28, 28)))
        write_idx_labels(folder / IDX[1], np.arange(n_train) % 10)
        write_idx_images(folder / IDX[2], rng.integers(0, 256, (300, 28, 28)))
        write_idx_labels(folder / IDX[3], np.arange(300) % 10)
    write_covtype(root / "covtype.data.gz", n=1600)
    return root


def _overrides(recipe: Path, data: Path) -> list[str]:
    config = yaml.safe_load(recipe.read_text())
    args = config["data"]["init_args"]
    if "root" in args:
        return [f"--data.init_args.root={data / 'idx'}", "--data.init_args.download=false"]
    if "data_home" in args:
        return [f"--data.init_args.data_home={data}", "--data.init_args.download=false"]
    return []


def test_every_recipe_is_listed() -> None:
    names = {p.stem for p in RECIPES}
    for ds in ("mnist", "covtype"):
        for layer in ("nystrom", "fourier"):
            for objective in ("di", "ls", "ce"):
                assert f"{ds}_{layer}_{objective}" in names
    assert "quickstart" in names


@pytest.mark.parametrize("recipe", RECIPES, ids=lambda p: p.stem)
def test_recipe_runs_one_step_offline(
    recipe: Path, offline_data: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    config = yaml.safe_load(recipe.read_text())
    callbacks = [c["class_path"] for c in config["trainer"]["callbacks"]]
    assert (
        "kernel_layers.callbacks.PlateauDecay" in callbacks
        and "kernel_layers.callbacks.DISaturationStopping" in callbacks
    )
    main(
        [
            "fit",
            "--config",
            str(recipe),
            "--trainer.fast_dev_run=true",
            "--trainer.enable_progress_bar=false",
            *_overrides(recipe, offline_data),
        ]
    )


def test_fit_reports_test_accuracy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    monkeypatch.chdir(tmp_path)
    recipe = next(p for p in RECIPES if p.stem == "quickstart")
    main(
        [
            "fit",
            "--config",
            str(recipe),
            "--trainer.max_epochs=2",
            "--trainer.enable_progress_bar=false",
        ]
    )
    assert "test/acc" in capsys.readouterr().out
    assert (tmp_path / "lightning_logs" / "quickstart").is_dir()


def test_test_after_fit_can_be_switched_off(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    monkeypatch.chdir(tmp_path)
    recipe = next(p for p in RECIPES if p.stem == "quickstart")
    main(
        [
            "fit",
            "--config",
            str(recipe),
            "--trainer.fast_dev_run=true",
            "--trainer.enable_progress_bar=false",
            "--test_after_fit=false",
        ]
    )
    assert "test/acc" not in capsys.readouterr().out


def test_select_gamma_subcommand(capsys) -> None:
    with pytest.raises(SystemExit) as done:
        main(
            [
                "select-gamma",
                "--data",
                "digits",
                "--landmarks",
                "100",
                "--max-samples",
                "300",
                "--classifier",
                "ridge",
            ]
        )
    assert done.value.code == 0
    out = capsys.readouterr().out
    assert "best gamma:" in out and out.count("cv_accuracy=") == 7


@pytest.mark.slow
def test_quickstart_full_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    monkeypatch.chdir(tmp_path)
    main(["fit", "--config", str(next(p for p in RECIPES if p.stem == "quickstart"))])
    out = capsys.readouterr().out
    acc = float(out.split("test/acc")[1].split()[0])
    assert acc > 0.97


def test_test_subcommand_loads_last_checkpoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    monkeypatch.chdir(tmp_path)
    recipe = str(next(p for p in RECIPES if p.stem == "quickstart"))
    main(
        ["fit", "--config", recipe, "--trainer.max_epochs=2", "--trainer.enable_progress_bar=false"]
    )
    fitted = capsys.readouterr().out.split("test/acc")[1].split()[0]
    assert (tmp_path / "checkpoints" / "quickstart" / "last.ckpt").is_file()
    main(["test", "--config", recipe, "--ckpt_path", "last", "--trainer.enable_progress_bar=false"])
    tested = capsys.readouterr().out.split("test/acc")[1].split()[0]
    assert tested == fitted


def test_select_gamma_rejects_root_for_bundled_data(capsys) -> None:
    with pytest.raises(SystemExit) as done:
        main(["select-gamma", "--data", "digits", "--root", "somewhere"])
    assert done.value.code == 2
    assert "--root does not apply to --data digits" in capsys.readouterr().err
