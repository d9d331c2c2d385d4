"""docs/architecture.md lists every module of the package, and nothing that is not one."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ARCHITECTURE = ROOT / "docs" / "architecture.md"
# The package's own folders; kernel_layers/callbacks and kernel_layers/recipes are the
# repository's callbacks/ and recipes/ folders once installed.
PACKAGES = ("kernel_layers", "callbacks")
INSTALLED_ELSEWHERE = ("kernel_layers/callbacks/", "kernel_layers/recipes/")


def _modules_on_disk() -> set[str]:
    found = set()
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            name = path.relative_to(ROOT).as_posix()
            if not name.startswith(INSTALLED_ELSEWHERE) and "__pycache__" not in name:
                found.add(name)
    return found


def _modules_listed() -> list[str]:
    text = ARCHITECTURE.read_text()
    table = text[text.index("## Modules") :]
    table = table[: table.index("\n## ", 1)]
    return re.findall(r"^\| `((?:kernel_layers|callbacks)/[\w/]+\.py)` \|", table, re.M)


def test_every_module_is_listed() -> None:
    missing = sorted(_modules_on_disk() - set(_modules_listed()))
    assert not missing, f"docs/architecture.md does not list {missing}"


def test_everything_listed_exists_once() -> None:
    listed = _modules_listed()
    assert len(listed) == len(set(listed)), "a module is listed twice"
    gone = sorted(set(listed) - _modules_on_disk())
    assert not gone, f"docs/architecture.md lists modules that do not exist: {gone}"


def test_the_path_of_one_batch_is_drawn() -> None:
    text = ARCHITECTURE.read_text()
    assert "## The path of one batch through `training_step`" in text
    assert "KernelClassifier.training_step" in text
