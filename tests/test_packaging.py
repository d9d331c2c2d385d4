"""The wheel's package list in pyproject.toml names every package of the source tree
(setuptools installs only the packages listed: a package missing there is missing from
the wheel, although an editable install still finds it)."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]


def test_every_package_of_the_source_tree_is_in_the_wheel() -> None:
    tomllib = pytest.importorskip("tomllib")
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    folders = {name: ROOT / path for name, path in setuptools["package-dir"].items()}
    found = set()
    for top, folder in folders.items():
        for init in folder.rglob("__init__.py"):
            parts = init.parent.relative_to(folder).parts
            found.add(".".join((top, *parts)))
    found = {name for name in found if "__pycache__" not in name}
    assert set(setuptools["packages"]) == found
