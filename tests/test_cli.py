"""The ``kernel-layers`` LightningCLI: every recipe parses and runs one step offline."""

from __future__ import annotations

import logging
import os
import re
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml
from formats import write_covtype, write_idx_images, write_idx_labels, write_letter
from hostile import serve, write_code_running_checkpoint

from kernel_layers import KernelClassifier
from kernel_layers.cli.app import list_recipes
from kernel_layers.cli.entry import SIGPIPE_STATUS, main
from kernel_layers.cli.entry import main as entry_main

RECIPES = sorted((Path(__file__).parents[1] / "recipes").glob("*.yaml"))
IDX = (
    "train-images-idx3-ubyte",
    "train-labels-idx1-ubyte",
    "t10k-images-idx3-ubyte",
    "t10k-labels-idx1-ubyte",
)


@pytest.fixture(autouse=True)
def _console_argv(monkeypatch: pytest.MonkeyPatch) -> None:
    """As from the console script: no pytest arguments on sys.argv."""
    monkeypatch.setattr(sys, "argv", ["kernel-layers"])


QUIET = ["--trainer.enable_progress_bar=false", "--trainer.enable_model_summary=false"]


@pytest.fixture(scope="module")
def offline_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Small files in the real formats: MNIST-layout IDX files, UCI covtype and Letter CSVs."""
    root = tmp_path_factory.mktemp("data")
    rng = np.random.default_rng(0)
    for n_train, folder in ((2400, root / "idx"),):
        folder.mkdir()
        write_idx_images(folder / IDX[0], rng.integers(0, 256, (n_train, 28, 28)))
        write_idx_labels(folder / IDX[1], np.arange(n_train) % 10)
        write_idx_images(folder / IDX[2], rng.integers(0, 256, (300, 28, 28)))
        write_idx_labels(folder / IDX[3], np.arange(300) % 10)
    write_covtype(root / "covtype.data.gz", n=1600)
    write_letter(root / "letter-recognition.data", n=1600)  # 1200 / 400: J = 500 fits
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


def test_fit_is_quiet_and_ends_with_a_summary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    monkeypatch.chdir(tmp_path)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        main(["fit", "--config", "quickstart", "--trainer.max_epochs=2"])
    # the recipe sets log_every_n_steps for its 3 batches an epoch
    assert not [w for w in caught if "log_every_n_steps" in str(w.message)]
    captured = capsys.readouterr()
    out, err = captured.out, captured.err
    for noise in ("litlogger", "GPU available", "TPU available", "Total params", "Seed set"):
        assert noise not in out + err
    assert "\r" not in out + err  # stdout is not a terminal: no progress bar
    assert "epoch 0: train/di" in err and "epoch 1: train/di" in err  # one line an epoch
    assert "UntrainedBaseline: test/acc of the untrained map" in err
    lines = out.splitlines()
    assert lines[0] == "kernel-layers fit: done"
    assert lines[1].startswith("  untrained map: test/acc 0.")
    assert lines[2].startswith("  test/acc 0.") and "points)" in lines[2]
    assert lines[3] == "  epochs: 2 (max_epochs=2 reached)"
    assert lines[4] == f"  checkpoint: {tmp_path / 'checkpoints' / 'quickstart' / 'last.ckpt'}"
    assert lines[5] == "  configuration: lightning_logs/quickstart/version_0/config.yaml"
    assert lines[6] == "  logs: lightning_logs/quickstart/version_0"
    assert (tmp_path / "lightning_logs/quickstart/version_0/config.yaml").is_file()


def test_fit_names_the_epoch_keep_best_handed_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    # 3 batches an epoch: keep_best="auto" keeps the best epoch on validation; over 4
    # epochs of the quick start that is not the last, and the summary (after its test
    # run) says which, and that last.ckpt holds the last epoch
    monkeypatch.chdir(tmp_path)
    main(["fit", "--config", "quickstart", "--trainer.max_epochs=4", *QUIET])
    lines = capsys.readouterr().out.splitlines()
    (model,) = [line for line in lines if line.startswith("  model: ")]
    assert re.fullmatch(
        r"  model: (epoch [012]|the untrained map), the best on val/acc \(0\.\d{4}; "
        r"keep_best\); the checkpoint below holds the last epoch",
        model,
    ), model
    assert lines.index(model) == lines.index("  epochs: 4 (max_epochs=4 reached)") + 1


def test_enable_checkpointing_false_drops_the_recipes_checkpoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    monkeypatch.chdir(tmp_path)
    off = ["--trainer.enable_checkpointing=false", "--trainer.logger=false"]
    main(["fit", "--config", "quickstart", "--trainer.max_epochs=1", *QUIET[:1], *off])
    out = capsys.readouterr().out
    assert "  checkpoint: none (no ModelCheckpoint, or checkpointing off)" in out
    assert "  logs: none (no logger)" in out and "  configuration: not saved" in out
    assert not (tmp_path / "checkpoints").exists()


def test_model_summary_only_on_request(tmp_path: Path, monkeypatch, capsys, caplog) -> None:
    monkeypatch.chdir(tmp_path)
    args = [
        "fit",
        "--config",
        "quickstart",
        "--trainer.fast_dev_run=true",
        "--test_after_fit=false",
    ]
    # Lightning writes the summary through its own logger, which propagates to pytest's
    # capture only when Lightning was first imported under it: make it propagate here.
    monkeypatch.setattr(logging.getLogger("lightning.pytorch"), "propagate", True)
    caplog.set_level(logging.INFO, logger="lightning.pytorch")

    def printed() -> str:
        out, err = capsys.readouterr()
        text = out + err + caplog.text
        caplog.clear()
        return text

    main(args)
    assert "Trainable params" not in printed()
    main([*args, "--trainer.enable_model_summary=true"])
    assert "Trainable params" in printed()


def test_version_is_the_packages(capsys) -> None:
    from kernel_layers import __version__

    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0
    assert capsys.readouterr().out == f"kernel-layers {__version__}\n"


def test_fit_help_is_ours_and_short(capsys) -> None:
    with pytest.raises(SystemExit):
        main(["fit", "--help"])
    out = capsys.readouterr().out
    assert out.startswith("usage: kernel-layers fit [--config RECIPE] [--KEY VALUE]...")
    assert "Train the model of a recipe" in out.split("options:")[0]
    assert "Lightning Trainer command line tool" not in out and "<lambda>" not in out
    assert "num_classes_of(data) --> model.num_classes" in out


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
    best = out.split("best gamma:")[1].split()[0]
    assert f"use it with: --model.kernel_layer.init_args.gamma={best}" in out


@pytest.mark.slow
def test_quickstart_full_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    monkeypatch.chdir(tmp_path)
    main(["fit", "--config", str(next(p for p in RECIPES if p.stem == "quickstart"))])
    out = capsys.readouterr().out
    untrained = float(out.split("untrained map: test/acc")[1].split()[0])
    trained = float(out.split("\n  test/acc")[1].split()[0])
    assert trained > 0.97
    assert trained - untrained > 0.03  # what DI training adds to the J = 20 map


def test_test_subcommand_loads_last_checkpoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    monkeypatch.chdir(tmp_path)
    recipe = str(next(p for p in RECIPES if p.stem == "quickstart"))
    main(
        ["fit", "--config", recipe, "--trainer.max_epochs=2", "--trainer.enable_progress_bar=false"]
    )
    fitted = float(capsys.readouterr().out.split("\n  test/acc")[1].split()[0])
    assert (tmp_path / "checkpoints" / "quickstart" / "last.ckpt").is_file()
    main(["test", "--config", recipe, "--ckpt_path", "last", "--trainer.enable_progress_bar=false"])
    tested = float(capsys.readouterr().out.split("test/acc")[1].split()[0])
    assert tested == pytest.approx(fitted, abs=5e-5)  # the summary rounds to 4 places


def test_select_gamma_rejects_root_for_bundled_data(capsys) -> None:
    with pytest.raises(SystemExit) as done:
        main(["select-gamma", "--data", "digits", "--root", "somewhere"])
    assert done.value.code == 2
    assert "--root does not apply to --data digits" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "match"),
    [
        (
            ["select-gamma", "--landmarks", "0"],
            "argument --landmarks: must be an integer >= 1, got '0'",
        ),
        (["select-gamma", "--max-samples", "x"], "argument --max-samples: must be an integer >= 1"),
        (["select-gamma", "--landmarks", "\u00b2"], "argument --landmarks: must be an integer"),
        (
            ["plot", "run", "--image-shape", "8"],
            "argument --image-shape: must be H,W (two integers",
        ),
        (["plot", "run", "--image-shape", "8,x"], "argument --image-shape: must be H,W"),
        (["plot", "run", "--image-shape", "0,8"], "argument --image-shape: must be H,W"),
        (  # a value only the search refuses: it was a traceback
            ["select-gamma", "--max-samples", "3"],
            "select_gamma: argument 'max_samples' must be an integer >= 6, got 3",
        ),
    ],
)
def test_a_bad_command_option_is_named_with_status_2(capsys, argv: list[str], match: str) -> None:
    with pytest.raises(SystemExit) as done:
        main(argv)
    assert done.value.code == 2
    assert match in capsys.readouterr().err


# ------------------------------------------------------------------ recipes by name
def test_recipes_ship_with_the_package_and_list_one_line_each(capsys) -> None:
    with pytest.raises(SystemExit) as done:
        entry_main(["recipes"])
    assert done.value.code == 0
    out = capsys.readouterr().out
    names = sorted(p.stem for p in RECIPES)
    assert sorted(list_recipes()) == names
    for name in names:
        (line,) = [row for row in out.splitlines() if row.split()[:1] == [name]]
        assert len(line.split()) > 1  # the recipe's one-line summary, a whole sentence
        assert line.rstrip().endswith("."), line
    assert "kernel-layers fit --config NAME" in out


def test_console_script_lists_recipes_without_importing_torch_or_lightning() -> None:
    """``kernel-layers recipes`` is the console script's light path: the same listing,
    with neither torch nor Lightning imported."""
    code = (
        "import sys\n"
        "from kernel_layers.cli.entry import main\n"
        "try:\n"
        "    main(['recipes'])\n"
        "except SystemExit as done:\n"
        "    assert done.code == 0, done.code\n"
        "heavy = [m for m in ('torch', 'lightning', 'sklearn') if m in sys.modules]\n"
        "print('HEAVY', heavy)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert "HEAVY []" in out
    for name in list_recipes():
        assert any(row.split()[:1] == [name] for row in out.splitlines()), name


def test_console_fit_without_its_data_says_where_to_put_it_without_a_traceback(
    tmp_path: Path,
) -> None:
    code = "import sys; from kernel_layers.cli.entry import main; main()"
    done = subprocess.run(
        [
            *(sys.executable, "-c", code, "fit", "--config", "mnist_nystrom_di"),
            *(f"--data.init_args.root={tmp_path}", "--data.init_args.download=false"),
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert done.returncode == 1
    assert "Traceback" not in done.stderr
    assert f"MNISTDataModule: no MNIST data under '{tmp_path}'" in done.stderr


def test_console_script_stops_quietly_when_its_reader_leaves() -> None:
    """``kernel-layers recipes | head -3``: no BrokenPipeError traceback, status 141."""
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader is gone before the first line is written
    try:
        done = subprocess.run(
            [
                sys.executable,
                "-c",
                "from kernel_layers.cli.entry import main; main()",
                "recipes",
            ],
            stdout=write_end,
            stderr=subprocess.PIPE,
            text=True,
            check=False,
        )
    finally:
        os.close(write_end)
    assert done.stderr == ""
    assert done.returncode == SIGPIPE_STATUS


def test_bare_recipe_name_runs_from_any_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    monkeypatch.chdir(tmp_path)
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)  # "provide both args and command line"
        main(
            [
                "fit",
                "--config",
                "quickstart",
                "--trainer.max_epochs=1",
                "--trainer.logger=false",
                *QUIET,
            ]
        )
    assert "test/acc" in capsys.readouterr().out


@pytest.mark.parametrize("form", ["--config", "--config=", "-c"])
def test_a_folder_named_like_a_recipe_does_not_hide_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, form: str
) -> None:
    from kernel_layers.cli.recipe_files import recipe_path, resolve_config_args

    monkeypatch.chdir(tmp_path)
    (tmp_path / "quickstart").mkdir()
    argv = ["fit", "--config=quickstart"] if form == "--config=" else ["fit", form, "quickstart"]
    resolved = resolve_config_args(argv)
    assert str(recipe_path("quickstart")) in resolved[-1]
    assert Path(str(recipe_path("quickstart"))).is_file()


def test_unknown_recipe_name_lists_the_shipped_ones(capsys) -> None:
    with pytest.raises(SystemExit) as done:
        main(["fit", "--config", "quickstrat"])
    assert done.value.code == 2
    err = capsys.readouterr().err
    assert "argument '--config' must be a file or one of the shipped recipes" in err
    assert "'quickstart'" in err and "got 'quickstrat'" in err


def test_help_names_the_extra_commands(capsys) -> None:
    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    assert "Train and use kernel layers" in out and "Lightning Trainer command" not in out
    assert "--host_memory default" in out  # the host-memory tuning is stated
    assert "kernel-layers select-gamma" in out and "kernel-layers recipes" in out
    assert "kernel-layers export --config NAME --ckpt_path CKPT" in out
    assert "--ckpt_path" in out


# ------------------------------------------------------------------ sizes set once
def test_num_features_is_linked_from_the_layer(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    from kernel_layers.cli.app import KernelLayersCLI
    from kernel_layers.data import ArrayDataModule

    cli = KernelLayersCLI(
        KernelClassifier,
        ArrayDataModule,
        subclass_mode_data=True,
        run=False,
        args=["--config", str(RECIPES[-1]), "--model.kernel_layer.init_args.out_features=300"],
    )
    assert cli.datamodule.num_features == 300 and cli.datamodule.batch_size == 400


def test_j_set_a_second_time_on_the_data_is_refused(tmp_path: Path, capsys) -> None:
    with pytest.raises(SystemExit) as done:
        main(["fit", "--config", "quickstart", "--data.init_args.num_features=300"])
    assert done.value.code == 2
    assert "J is set once, as --model.kernel_layer.init_args.out_features" in (
        capsys.readouterr().err
    )
    config = yaml.safe_load(RECIPES[-1].read_text())
    config["data"]["init_args"]["num_features"] = 200
    path = tmp_path / "twice.yaml"
    path.write_text(yaml.safe_dump(config))
    for flag in ("--config", "-c"):  # the short form is read alike
        with pytest.raises(SystemExit):
            main(["fit", flag, str(path)])
        assert f"data.init_args.num_features: 200 in {path}" in capsys.readouterr().err
    with pytest.raises(SystemExit) as done:  # a flag without its value: argparse's message
        main(["fit", "--config", "quickstart", "--data.init_args.num_features"])
    assert done.value.code == 2


def test_in_features_mismatch_fails_before_the_first_step(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(
        ValueError,
        match=r"KernelClassifier: the kernel layer's in_features=60 must equal the data's "
        r"in_features=64; set in_features to 64",
    ):
        main(
            [
                "fit",
                "--config",
                "quickstart",
                "--model.kernel_layer.init_args.in_features=60",
                *QUIET,
            ]
        )
    assert not (tmp_path / "checkpoints").exists()  # no step, no checkpoint


# ------------------------------------------------------------------ config files
def test_config_is_saved_beside_the_logs_and_never_overwrites(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    mine = tmp_path / "config.yaml"
    mine.write_text("my own file\n")
    args = [
        "fit",
        "--config",
        "quickstart",
        "--trainer.max_epochs=1",
        "--trainer.limit_train_batches=1",
        "--test_after_fit=false",
        *QUIET,
    ]
    main([*args, "--trainer.logger=false"])
    assert mine.read_text() == "my own file\n"
    logger = [
        "--trainer.logger=lightning.pytorch.loggers.CSVLogger",
        f"--trainer.logger.save_dir={tmp_path}",
        "--trainer.logger.name=run",
        "--trainer.logger.version=fixed",
    ]
    main([*args, *logger])
    main([*args, *logger])  # the same log directory again
    saved = sorted(p.name for p in (tmp_path / "run" / "fixed").glob("config*.yaml"))
    assert saved == ["config-1.yaml", "config.yaml"]
    assert yaml.safe_load((tmp_path / "run" / "fixed" / "config.yaml").read_text())["model"]
    assert mine.read_text() == "my own file\n"


# ------------------------------------------------------------------ checkpoints
@pytest.fixture(scope="module")
def fitted_quickstart(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 2-epoch quick start run; returns its working directory."""
    root = tmp_path_factory.mktemp("qs")
    here = Path.cwd()
    try:
        import os

        os.chdir(root)
        sys.argv = ["kernel-layers"]
        main(
            [
                "fit",
                "--config",
                "quickstart",
                "--trainer.max_epochs=2",
                "--test_after_fit=false",
                *QUIET,
            ]
        )
    finally:
        os.chdir(here)
    return root


def test_ckpt_path_with_other_hyperparameters_is_an_error(
    fitted_quickstart: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(fitted_quickstart)
    with pytest.raises(
        ValueError,
        match=r"argument '--ckpt_path' 'last' was saved with other hyper-parameters than the "
        r"configuration sets: model.objective: checkpoint 'di', configuration 'ls'",
    ):
        main(
            [
                "test",
                "--config",
                "quickstart",
                "--ckpt_path",
                "last",
                "--model.objective=ls",
                *QUIET,
            ]
        )
    with pytest.raises(ValueError, match=r"model.kernel_layer.init_args.gamma: checkpoint 0.02, "):
        main(
            [
                "test",
                "--config",
                "quickstart",
                "--ckpt_path",
                str(fitted_quickstart / "checkpoints" / "quickstart" / "last.ckpt"),
                "--model.kernel_layer.init_args.gamma=0.5",
                *QUIET,
            ]
        )


@pytest.mark.parametrize("command", ["test", "validate", "predict"])
def test_scoring_without_a_checkpoint_is_refused(
    command: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Without --ckpt_path the model would be the recipe's untrained map, scored as if
    # it were the trained one.
    monkeypatch.chdir(tmp_path)
    with pytest.raises(
        ValueError, match=rf"kernel-layers {command}: argument '--ckpt_path' is required"
    ):
        main([command, "--config", "quickstart", *QUIET])
    assert not list(tmp_path.iterdir())  # nothing written


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["predict", "--config", "quickstart"], "kernel-layers predict: argument '--ckpt_path' is"),
        (
            ["test", "--config", "quickstart", "--ckpt_path", "missing.ckpt"],
            "kernel-layers: argument '--ckpt_path'",
        ),
        (
            ["fit", "--config", "quickstart", "--model.objective", "xx"],
            "KernelClassifier: argument 'objective' must be one of ['di', 'ls', 'ce'], got 'xx'",
        ),
        *(
            (
                [
                    command,
                    "--config",
                    "quickstart",
                    "--model.kernel_layer.init_args.in_features=10",
                ],
                "KernelClassifier: the kernel layer's in_features=10 must equal the data's "
                "in_features=64; set in_features to 64",
            )
            for command in ("fit", "validate", "test", "predict")
        ),
    ],
)
def test_from_a_console_a_refused_argument_is_a_usage_error(
    argv: list[str], message: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    # From a shell these ended in a Python traceback, which reads as a crash.
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", ["kernel-layers", *argv, *QUIET])
    with pytest.raises(SystemExit) as done:
        main()
    assert done.value.code == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


@pytest.mark.parametrize(
    ("argv", "match"),
    [
        (
            ["test", "--predict_input=/nowhere.npy"],
            r"test: --predict_input apply to kernel-layers predict only",
        ),
        (
            ["fit", "--predict_scores=false"],
            r"fit: --predict_scores apply to kernel-layers predict only",
        ),
        (
            ["predict", "--test_after_fit=false"],
            r"predict: --test_after_fit apply to kernel-layers fit only",
        ),
    ],
)
def test_another_commands_option_is_refused(
    argv: list[str],
    match: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as done:
        main([argv[0], "--config", "quickstart", *argv[1:], *QUIET])
    assert done.value.code == 2
    assert re.search(match, capsys.readouterr().err)


def test_a_fits_saved_config_serves_test(
    fitted_quickstart: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # The saved config.yaml holds every command's options (test_after_fit among them):
    # only options typed for another command are refused.
    monkeypatch.chdir(fitted_quickstart)
    (saved,) = fitted_quickstart.glob("lightning_logs/quickstart/version_*/config.yaml")
    main(["test", "--config", str(saved), "--ckpt_path", "last", *QUIET])
    assert "test/acc" in capsys.readouterr().out


def test_cli_checkpoint_loads_alone(fitted_quickstart: Path, monkeypatch, capsys) -> None:
    monkeypatch.chdir(fitted_quickstart)
    path = fitted_quickstart / "checkpoints" / "quickstart" / "last.ckpt"
    model = KernelClassifier.load_from_checkpoint(path)
    assert model.kernel_layer.gamma == 0.02 and model.kernel_layer.out_features == 20
    main(["test", "--config", "quickstart", "--ckpt_path", "last", *QUIET])
    tested = float(capsys.readouterr().out.split("test/acc")[1].split()[0])
    from kernel_layers.data import DigitsDataModule

    dm = DigitsDataModule(batch_size=400)
    dm.setup()
    x, y = dm.test_dataset.tensors
    model.eval()
    with torch.no_grad():
        acc = (model.scores(model(x)).argmax(1) == y).float().mean().item()
    assert acc == pytest.approx(tested, abs=1e-6)


# ------------------------------------------------------------------ checkpoint sources
def test_ckpt_path_last_checks_the_file_lightning_loads(
    fitted_quickstart: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A second fit in the folder writes last-v1.ckpt; 'last' is the newest last*.ckpt."""
    monkeypatch.chdir(fitted_quickstart)
    folder = fitted_quickstart / "checkpoints" / "quickstart"
    checkpoint = torch.load(folder / "last.ckpt", weights_only=True)
    checkpoint["hyper_parameters"]["kernel_layer"]["init_args"]["gamma"] = 2.0
    newer = folder / "last-v1.ckpt"
    torch.save(checkpoint, newer)
    stat = (folder / "last.ckpt").stat()
    os.utime(newer, (stat.st_atime + 10, stat.st_mtime + 10))
    try:
        with pytest.raises(
            ValueError,
            match=r"argument '--ckpt_path' 'last' was saved with other hyper-parameters than "
            r"the configuration sets: model.kernel_layer.init_args.gamma: checkpoint 2.0, "
            r"configuration 0.02",
        ):
            main(["test", "--config", "quickstart", "--ckpt_path", "last", *QUIET])
    finally:
        newer.unlink()


@pytest.mark.parametrize(
    ("option", "difference"),
    [
        ("--data.init_args.seed=7", r"data.seed: checkpoint 0, configuration 7"),
        (
            "--data.init_args.scaling=feature",
            r"data.scaling: checkpoint 'global', configuration 'feature'",
        ),
        (
            "--data.init_args.val_fraction=0.2",
            r"data.val_fraction: checkpoint 0.1, configuration 0.2",
        ),
    ],
)
@pytest.mark.parametrize("command", ["test", "predict", "export"])
def test_ckpt_path_with_other_data_settings_is_an_error(
    fitted_quickstart: Path,
    monkeypatch: pytest.MonkeyPatch,
    command: str,
    option: str,
    difference: str,
) -> None:
    monkeypatch.chdir(fitted_quickstart)
    with pytest.raises(
        ValueError,
        match=r"was saved with other hyper-parameters than the "
        r"configuration sets: " + difference,
    ):
        main([command, "--config", "quickstart", "--ckpt_path", "last", option, *QUIET])
    assert not (fitted_quickstart / "model.onnx").exists()


def test_checkpoint_saved_from_python_is_accepted_by_the_cli(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The Python API records kernel_params {} and the class by its own path; the recipe
    says kernel_layers.NystromLayer and kernel_params None: the same layer."""
    import lightning as L

    from kernel_layers import NystromLayer
    from kernel_layers.data import DigitsDataModule

    monkeypatch.chdir(tmp_path)
    model = KernelClassifier(
        NystromLayer(64, 20, gamma=0.02), num_classes=10, rho=1e-4, lr=1e-2, head_rho=1e-3
    )  # the quick start's settings
    model.hparams["kernel_layer"]["class_path"] = "kernel_layers.layers.nystrom.NystromLayer"
    trainer = L.Trainer(
        max_epochs=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(model, DigitsDataModule(batch_size=400))
    trainer.save_checkpoint(tmp_path / "python.ckpt")
    main(["test", "--config", "quickstart", "--ckpt_path", str(tmp_path / "python.ckpt"), *QUIET])
    assert "test/acc" in capsys.readouterr().out
    with pytest.raises(
        ValueError,
        match=r"model.kernel_layer.init_args.gamma: checkpoint 0.02, "
        r"configuration 0.5",
    ):
        main(
            [
                "test",
                "--config",
                "quickstart",
                "--ckpt_path",
                str(tmp_path / "python.ckpt"),
                "--model.kernel_layer.init_args.gamma=0.5",
                *QUIET,
            ]
        )


def test_cli_checkpoint_url_runs_no_code(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    folder = tmp_path / "www"
    folder.mkdir()
    marker = tmp_path / "marker"
    write_code_running_checkpoint(folder / "evil.ckpt", marker)
    with serve(folder) as base:
        url = f"{base}/evil.ckpt"
        for command in ("test", "predict", "validate", "fit"):
            with pytest.raises(
                ValueError,
                match=r"checkpoint 'http://127.0.0.1:\d+/evil.ckpt' "
                r"refused: it holds Python objects other than tensors",
            ):
                main([command, "--config", "quickstart", "--ckpt_path", url, *QUIET])
            assert not marker.exists()
        with pytest.raises(ValueError, match=r"argument 'weights_only' must be True or None"):
            main(
                [
                    "test",
                    "--config",
                    "quickstart",
                    "--ckpt_path",
                    url,
                    "--weights_only=false",
                    *QUIET,
                ]
            )
        assert not marker.exists()


# ------------------------------------------------------------------ predict
def _predict(workdir: Path, *extra: str) -> None:
    main(["predict", "--config", "quickstart", "--ckpt_path", "last", *QUIET, *extra])


def test_predict_writes_the_named_csv_with_scores(fitted_quickstart: Path, monkeypatch, capsys):
    monkeypatch.chdir(fitted_quickstart)
    _predict(fitted_quickstart, "--predict_output", "out/test.csv")
    out = fitted_quickstart / "out" / "test.csv"
    assert f"predictions written to {Path('out/test.csv')} (450 rows)" in capsys.readouterr().out
    rows = np.loadtxt(out, delimiter=",", skiprows=1)
    header = out.read_text().splitlines()[0].split(",")
    assert header == ["index", "prediction"] + [f"score_{j}" for j in range(10)]
    assert rows.shape == (450, 12)
    np.testing.assert_array_equal(rows[:, 0], np.arange(450))
    np.testing.assert_array_equal(rows[:, 1], rows[:, 2:].argmax(1))
    from kernel_layers.data import DigitsDataModule

    dm = DigitsDataModule(batch_size=400)
    dm.setup()
    model = KernelClassifier.load_from_checkpoint(
        fitted_quickstart / "checkpoints" / "quickstart" / "last.ckpt"
    ).eval()
    with torch.no_grad():
        expected = model.scores(model(dm.test_dataset.tensors[0]))
    np.testing.assert_allclose(rows[:, 2:], expected.numpy(), rtol=1e-6, atol=1e-7)


def test_predict_train_split_to_pt_without_scores(fitted_quickstart: Path, monkeypatch):
    monkeypatch.chdir(fitted_quickstart)
    _predict(
        fitted_quickstart,
        "--predict_split=train",
        "--predict_output=train.pt",
        "--predict_scores=false",
    )
    saved = torch.load(fitted_quickstart / "train.pt", weights_only=True)
    assert set(saved) == {"index", "prediction"}
    assert len(saved["prediction"]) == 1212  # the training rows after the validation split


def test_predict_a_user_file_and_an_image_folder(fitted_quickstart: Path, monkeypatch, tmp_path):
    import csv

    from PIL import Image

    from kernel_layers.data import DigitsDataModule

    monkeypatch.chdir(fitted_quickstart)
    dm = DigitsDataModule(batch_size=400)
    raw = np.asarray(__import__("sklearn.datasets").datasets.load_digits().data[:12])
    np.save(tmp_path / "rows.npy", raw)
    np.savetxt(tmp_path / "rows.csv", raw, delimiter=",", header="a" * 3, comments="")
    with (tmp_path / "pandas.csv").open("w", newline="") as fh:  # DataFrame(raw).to_csv
        csv.writer(fh).writerows([list(range(64)), *raw.astype(int).tolist()])
    images = tmp_path / "images"
    images.mkdir()
    png = np.round(raw * (255 / 16)).astype(np.uint8)  # ordinary 8-bit images, 0..255
    for i, row in enumerate(png):  # 2.png is read before 10.png, not after
        Image.fromarray(row.reshape(8, 8), mode="L").save(images / f"{i}.png")
    model = KernelClassifier.load_from_checkpoint(
        fitted_quickstart / "checkpoints" / "quickstart" / "last.ckpt"
    ).eval()

    def classes(rows: np.ndarray) -> np.ndarray:
        with torch.no_grad():
            return model.scores(model(dm.transform(rows))).argmax(1).numpy()

    expected = classes(raw)
    from_png = classes(png * (16 / 255))  # the same images as arrays in the digits' units
    assert len(set(from_png.tolist())) > 1 and (from_png == expected).mean() >= 10 / 12
    for source, want in (
        ("rows.npy", expected),
        ("rows.csv", expected),
        ("pandas.csv", expected),
        ("images", from_png),
    ):
        _predict(
            fitted_quickstart,
            f"--predict_input={tmp_path / source}",
            f"--predict_output={source}.csv",
        )
        with (fitted_quickstart / f"{source}.csv").open() as fh:
            table = list(csv.DictReader(fh))
        assert len(table) == 12, source  # a numeric header is not a data row
        got = np.array([int(row["prediction"]) for row in table])
        np.testing.assert_array_equal(got, want)
        files = [row.get("file") for row in table]  # an image folder's rows name their file
        assert files == ([f"{i}.png" for i in range(12)] if source == "images" else [None] * 12)


def test_predict_says_when_it_replaces_a_file(fitted_quickstart: Path, monkeypatch, capsys):
    monkeypatch.chdir(fitted_quickstart)
    (fitted_quickstart / "mine.csv").write_text("notes\n")
    _predict(fitted_quickstart, "--predict_output=mine.csv")
    said = capsys.readouterr().out
    assert "predictions written to mine.csv (450 rows; it replaced the file that was there)" in said
    assert (fitted_quickstart / "mine.csv").read_text().startswith("index,prediction,")


def test_predict_refuses_an_output_that_is_its_input(fitted_quickstart: Path, monkeypatch):
    monkeypatch.chdir(fitted_quickstart)
    source = fitted_quickstart / "same.csv"
    np.savetxt(source, np.zeros((3, 64)), delimiter=",")
    before = source.read_bytes()
    with pytest.raises(
        ValueError,
        match=r"kernel-layers predict: argument '--predict_output' 'same.csv' is the input "
        r"file '.*same.csv'; writing the predictions would overwrite it",
    ):
        _predict(fitted_quickstart, "--predict_input=same.csv", "--predict_output=same.csv")
    (fitted_quickstart / "link.csv").symlink_to(source)
    with pytest.raises(ValueError, match=r"argument '--predict_output' 'link.csv' is the input"):
        _predict(fitted_quickstart, f"--predict_input={source}", "--predict_output=link.csv")
    assert source.read_bytes() == before


def test_predict_rejects_a_bad_output_and_a_missing_input(fitted_quickstart: Path, monkeypatch):
    monkeypatch.chdir(fitted_quickstart)
    with pytest.raises(
        ValueError,
        match=r"^kernel-layers predict: argument '--predict_output': PredictionWriter: "
        r"argument 'output' must end in one of \['.csv', '.pt'\]",
    ):
        _predict(fitted_quickstart, "--predict_output=out.txt")
    with pytest.raises(
        ValueError,
        match=r"^kernel-layers predict: argument '--predict_input': .*argument 'path' must "
        r"be an existing .npy / .csv file",
    ):
        _predict(fitted_quickstart, "--predict_input=nowhere.npy")
    (fitted_quickstart / "text.csv").write_text("1,2\n3,abc\n")
    with pytest.raises(
        ValueError,
        match=r"^kernel-layers predict: argument '--predict_input': DigitsDataModule: cannot "
        r"read 'text.csv' as comma-separated numbers: line 2",
    ):
        _predict(fitted_quickstart, "--predict_input=text.csv", "--predict_output=t.csv")
    assert not (fitted_quickstart / "t.csv").exists()
    np.save(fitted_quickstart / "rows.npy", np.zeros((2, 64)))  # a good file, bad training data
    from kernel_layers.data import DigitsDataModule

    def broken(self, stage=None):
        raise ValueError("the training files are broken")

    with monkeypatch.context() as patch, pytest.raises(ValueError, match=r"^the training"):
        patch.setattr(DigitsDataModule, "setup", broken)  # not --predict_input's fault
        _predict(fitted_quickstart, "--predict_input=rows.npy", "--predict_output=r.csv")
    with pytest.raises(
        ValueError,
        match=r"^kernel-layers predict: argument '--predict_split': .*argument 'split' must "
        r"be one of \['train', 'val', ",
    ):
        _predict(fitted_quickstart, "--predict_split=validation")
    with pytest.raises(
        FileNotFoundError,
        match=r"^kernel-layers: argument '--ckpt_path': no checkpoint file at 'nowhere.ckpt'",
    ):
        main(["test", "--config", "quickstart", "--ckpt_path", "nowhere.ckpt", *QUIET])


# ------------------------------------------------------------------ export
def _export(*extra: str) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["export", "--config", "quickstart", *QUIET, *extra])
    assert exit_info.value.code == 0


def test_export_writes_an_onnx_model_of_raw_rows(fitted_quickstart: Path, monkeypatch, capsys):
    import onnxruntime as ort
    from sklearn.datasets import load_digits

    from kernel_layers.data import DigitsDataModule

    monkeypatch.chdir(fitted_quickstart)
    _export("--ckpt_path", "last", "--export_output", "out/digits.onnx")
    out = capsys.readouterr().out
    assert (
        f"wrote {Path('out/digits.onnx')}: input x [batch, 64] raw features; outputs classes "
        "[batch], scores [batch, 10] (float32); onnxruntime on 64 test rows: classes agree "
        "100.0%" in out
    ), out
    session = ort.InferenceSession(str(fitted_quickstart / "out" / "digits.onnx"))
    assert [i.name for i in session.get_inputs()] == ["x"]
    assert [o.name for o in session.get_outputs()] == ["classes", "scores"]
    raw = load_digits().data.astype(np.float32)  # pixels 0..16, as in the data files
    classes, scores = session.run(None, {"x": raw})
    dm = DigitsDataModule(batch_size=400)
    model = KernelClassifier.load_from_checkpoint(
        fitted_quickstart / "checkpoints" / "quickstart" / "last.ckpt"
    ).eval()
    model.kernel_layer.keep_jitter()  # the float64 reference of the same map
    with torch.no_grad():
        expected = model.scores(model(dm.transform(raw)))
        exact = model.double().scores(model(dm.transform(raw).double()))
    # as close to the float64 model as a float32 forward can be: onnxruntime's kernels
    # sum in another order than PyTorch's; 1e-5 is under 100 float32 steps at scores of
    # order 1, for sums of 64 and 20 terms
    eager_error = float((expected.double() - exact).abs().max())
    onnx_error = float((torch.from_numpy(scores).double() - exact).abs().max())
    assert float(exact.abs().max()) < 10  # scores of order 1
    assert onnx_error <= 2 * eager_error + 1e-5, (onnx_error, eager_error)
    assert (classes == expected.argmax(1).numpy()).mean() > 0.999


def test_export_from_the_console_script_warns_nothing(fitted_quickstart: Path, monkeypatch):
    monkeypatch.chdir(fitted_quickstart)
    command = ["export", "--config", "quickstart", "--ckpt_path", "last", *QUIET]
    monkeypatch.setattr(sys, "argv", ["kernel-layers", *command, "--export_output=c.onnx"])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(SystemExit) as exit_info:
            main()
    assert exit_info.value.code == 0 and (fitted_quickstart / "c.onnx").is_file()
    assert not [w for w in caught if "LightningCLI's args parameter" in str(w.message)]
    assert sys.argv[0] == "kernel-layers" and sys.argv[-1] == "--export_output=c.onnx"


def test_export_in_float64(fitted_quickstart: Path, monkeypatch, capsys) -> None:
    import onnxruntime as ort
    from sklearn.datasets import load_digits

    from kernel_layers.data import DigitsDataModule

    monkeypatch.chdir(fitted_quickstart)
    _export("--ckpt_path", "last", "--export_output", "d64.onnx", "--export_dtype", "float64")
    assert "scores [batch, 10] (float64)" in capsys.readouterr().out
    session = ort.InferenceSession(str(fitted_quickstart / "d64.onnx"))
    raw = load_digits().data.astype(np.float32)
    _, scores = session.run(None, {"x": raw})
    assert scores.dtype == np.float64
    model = KernelClassifier.load_from_checkpoint(
        fitted_quickstart / "checkpoints" / "quickstart" / "last.ckpt"
    ).eval()
    model.kernel_layer.keep_jitter()  # the trained map's jitter, not float64's default
    with torch.no_grad():
        exact = model.double().scores(model(DigitsDataModule().transform(raw).double()))
    # float32 round-off gone: 2.3e-4 from float64 in float32 (test above), here under 1e-6
    np.testing.assert_allclose(scores, exact.numpy(), atol=1e-6, rtol=0)


def test_export_refuses_bad_arguments(fitted_quickstart: Path, monkeypatch, capsys) -> None:
    monkeypatch.chdir(fitted_quickstart)
    with pytest.raises(SystemExit) as exit_info:
        main(["export", "--config", "quickstart", "--ckpt_path", "last", "--export_output", "m.pt"])
    assert exit_info.value.code == 2
    assert "argument --export_output must end in .onnx, got 'm.pt'" in capsys.readouterr().err
    (fitted_quickstart / "a-file").write_text("")  # a folder that is a file: refused first
    with pytest.raises(SystemExit) as exit_info:
        main(
            [
                "export",
                "--config",
                "quickstart",
                "--ckpt_path",
                "last",
                "--export_output",
                "a-file/m.onnx",
            ]
        )
    assert exit_info.value.code == 2
    assert (
        "argument --export_output must be a file in a folder that can be written, got "
        "'a-file/m.onnx' (NotADirectoryError: a file is in the folder's place)"
        in capsys.readouterr().err
    )
    with monkeypatch.context() as patch:
        patch.setitem(sys.modules, "onnxscript", None)  # as if the extra were not installed
        with pytest.raises(SystemExit):
            main(["export", "--config", "quickstart", "--ckpt_path", "last"])
    assert (
        "exporting to ONNX needs onnx, onnxscript and onnxruntime; install the 'onnx' extra: "
        'pip install "kernel-layers[onnx]"' in capsys.readouterr().err
    )
    with pytest.raises(SystemExit):
        main(["export", "--config", "quickstart", "--ckpt_path", "nowhere.ckpt", *QUIET])
    assert "argument --ckpt_path: no checkpoint file at 'nowhere.ckpt'" in capsys.readouterr().err
    with pytest.raises(ValueError, match=r"model.objective: checkpoint 'di', configuration 'ls'"):
        main(["export", "--config", "quickstart", "--ckpt_path", "last", "--model.objective=ls"])
    assert not (fitted_quickstart / "model.onnx").exists()  # the default output
    assert not list(fitted_quickstart.glob(".*.tmp"))


def test_console_script_quiets_lightnings_pytree_deprecation_only() -> None:
    import warnings

    from kernel_layers.cli.entry import quiet_third_party_deprecations

    message = "`isinstance(treespec, LeafSpec)` is deprecated, use ... instead."
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        quiet_third_party_deprecations()
        for module in ("lightning.pytorch.utilities._pytree", "my_project.trees"):
            warnings.warn_explicit(message, FutureWarning, "x.py", 1, module=module)
        warnings.warn_explicit(
            "another deprecation",
            FutureWarning,
            "x.py",
            2,
            module="lightning.pytorch.utilities._pytree",
        )
    assert [(str(w.message)[:20], w.category) for w in seen] == [
        (message[:20], FutureWarning),
        ("another deprecation", FutureWarning),
    ]
