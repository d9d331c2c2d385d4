"""The README's set-up commands and Python examples stay true."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

README = Path(__file__).parents[1] / "README.md"
CI = Path(__file__).parents[1] / ".ci" / "run"


def test_first_lines_are_the_two_setup_commands() -> None:
    block = re.search(r"```bash\n(.*?)```", README.read_text(), re.S)
    assert block is not None and README.read_text().index("```bash") < 200
    lines = block.group(1).strip().splitlines()
    assert lines == [
        "pip install -e . && kernel-layers fit --config recipes/quickstart.yaml",
        'pip install -e ".[dev]" && ruff check . && python -m pytest -q',
    ]
    assert lines[1] in CI.read_text()  # CI runs exactly the README's test command


@pytest.mark.parametrize("code", re.findall(r"```python\n(.*?)```", README.read_text(), re.S))
def test_python_examples_run(code: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    code = code.replace("max_epochs=60", "max_epochs=2")  # the recipe's budget, shortened
    exec(compile(code, str(README), "exec"), {"__name__": "readme"})
