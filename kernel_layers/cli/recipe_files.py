"""The shipped recipes (the repository's ``recipes/`` folder, installed as
``kernel_layers.recipes``): their names, one-line summaries and installed paths.

Standard library only, so that ``kernel-layers recipes`` answers without importing
torch or Lightning.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

__all__ = ["RECIPES_PACKAGE", "list_recipes", "print_recipes", "recipe_path"]

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
