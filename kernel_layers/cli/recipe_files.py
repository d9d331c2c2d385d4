"""The shipped recipes (the repository's ``recipes/`` folder, installed as
``kernel_layers.recipes``): their names, one-line summaries and installed paths, and the
command line's ``--config`` arguments that name them.

Standard library only at import, so that ``kernel-layers recipes`` answers without
importing torch or Lightning.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from importlib import resources
from pathlib import Path
from typing import Any

__all__ = [
    "COMMAND_OPTIONS",
    "RECIPES_PACKAGE",
    "check_command_options",
    "check_j_set_once",
    "list_recipes",
    "print_recipes",
    "recipe_path",
    "resolve_config_args",
]

#: The package that ships the recipes (the repository's ``recipes/`` folder).
RECIPES_PACKAGE = "kernel_layers.recipes"


def list_recipes() -> dict[str, str]:
    """The shipped recipes: name -> the first line of its header comment."""
    recipes: dict[str, str] = {}
    for entry in sorted(resources.files(RECIPES_PACKAGE).iterdir(), key=lambda p: p.name):
        if entry.name.endswith(".yaml"):
            text = entry.read_text()
            first = text.splitlines()[0] if text else ""
            recipes[entry.name.removesuffix(".yaml")] = first.lstrip("# ").strip()
    return recipes


def recipe_path(name: str) -> Path:
    """The installed file of the recipe ``name`` (``"quickstart"`` or ``"quickstart.yaml"``).

    Raises:
        ValueError: no shipped recipe has that name (the message lists them).
    """
    stem = name.removesuffix(".yaml")
    if stem not in list_recipes():
        raise ValueError(
            f"kernel-layers: argument '--config' must be a file or one of the shipped "
            f"recipes {sorted(list_recipes())}, got {name!r}"
        )
    return Path(str(resources.files(RECIPES_PACKAGE) / f"{stem}.yaml"))


def print_recipes() -> None:
    """Print one line per shipped recipe, then how to run one and where the files are."""
    recipes = list_recipes()
    width = max(map(len, recipes))
    for name, summary in recipes.items():
        print(f"{name:<{width}}  {summary}")
    folder = recipe_path(next(iter(recipes))).parent
    print(f"\nrun one with: kernel-layers fit --config NAME   (files in {folder})")


#: The flags of a configuration file (LightningCLI's long and short forms).
CONFIG_FLAGS = ("--config", "-c")


def resolve_config_args(argv: Sequence[str]) -> list[str]:
    """``argv`` with every ``--config NAME`` (or ``-c NAME``) that is not a file replaced
    by the recipe's path.

    Raises:
        ValueError: ``NAME`` is neither a file nor a shipped recipe.
    """
    out = list(argv)
    for i, arg in enumerate(out):
        if arg in CONFIG_FLAGS and i + 1 < len(out):
            if not Path(out[i + 1]).is_file() and not out[i + 1].lstrip().startswith("{"):
                out[i + 1] = str(recipe_path(out[i + 1]))
        elif arg.startswith("--config="):
            value = arg.split("=", 1)[1]
            if not Path(value).is_file() and not value.lstrip().startswith("{"):
                out[i] = f"--config={recipe_path(value)}"
    return out


def check_j_set_once(argv: Sequence[str]) -> None:
    """Refuse the data's ``num_features`` on the command line or in a config file.

    ``J`` is the kernel layer's ``out_features``; the data module's ``num_features`` is
    linked from it (a value given there would be replaced without a word).

    Raises:
        ValueError: naming where the second value was given.
    """
    import yaml

    given: list[str] = []
    for i, arg in enumerate(argv):
        key = arg.split("=", 1)[0]
        if key in ("--data.init_args.num_features", "--data.num_features"):
            value = arg if "=" in arg or i + 1 == len(argv) else f"{arg} {argv[i + 1]}"
            given.append(value)
        if key in CONFIG_FLAGS and ("=" in arg or i + 1 < len(argv)):
            value = arg.split("=", 1)[1] if "=" in arg else argv[i + 1]
            if Path(value).is_file():
                config = yaml.safe_load(Path(value).read_text()) or {}
                data = config.get("data") if isinstance(config, Mapping) else None
                args = data.get("init_args", data) if isinstance(data, Mapping) else None
                if isinstance(args, Mapping) and "num_features" in args:
                    given.append(f"data.init_args.num_features: {args['num_features']} in {value}")
    if given:
        raise ValueError(
            "kernel-layers: J is set once, as --model.kernel_layer.init_args.out_features "
            "(the data's num_features is linked from it); remove " + "; ".join(given)
        )


#: Options that one command reads, with their defaults: typed for another command, they
#: are refused (it would ignore them).
COMMAND_OPTIONS: dict[str, dict[str, Any]] = {
    "fit": {"test_after_fit": True},
    "predict": {
        "predict_output": "predictions.csv",
        "predict_split": "test",
        "predict_input": None,
        "predict_scores": True,
    },
}


def check_command_options(argv: Sequence[str]) -> None:
    """Refuse a flag typed on the command line for another command than the one run
    (:data:`COMMAND_OPTIONS`: it would be ignored). A configuration file may hold them
    all: a fit's saved ``config.yaml`` serves ``test`` and ``predict`` too.

    Raises:
        ValueError: naming the flags and the command they belong to.
    """
    command = next((arg for arg in argv if not arg.startswith("-")), None)
    typed = {arg.split("=", 1)[0].lstrip("-") for arg in argv if arg.startswith("--")}
    for owner, options in COMMAND_OPTIONS.items():
        given = sorted(f"--{name}" for name in typed & set(options))
        if command is not None and owner != command and given:
            raise ValueError(
                f"kernel-layers {command}: {', '.join(given)} apply to kernel-layers "
                f"{owner} only, and would be ignored here"
            )
