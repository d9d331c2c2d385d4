"""The README's set-up commands and Python examples stay true."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

README = Path(__file__).parents[1] / "README.md"
CI = Path(__file__).parents[1] / ".ci" / "run"
PYPROJECT = Path(__file__).parents[1] / "pyproject.toml"


def test_first_lines_are_the_two_setup_commands() -> None:
    block = re.search(r"```bash\n(.*?)```", README.read_text(), re.S)
    assert block is not None and README.read_text().index("```bash") < 200
    lines = block.group(1).strip().splitlines()
    assert lines == [
        "pip install . && kernel-layers fit --config quickstart",
        'pip install -e ".[dev]" && ruff check . && ruff format --check . && mypy '
        "&& python -m pytest -q",
    ]


def test_ci_runs_exactly_the_readme_test_command(tmp_path: Path) -> None:
    """.ci/run reads its test command out of the README with this awk program."""
    script = CI.read_text()
    (line,) = [row for row in script.splitlines() if row.startswith("test_command=")]
    assert 'eval "$test_command"' in script
    out = subprocess.run(
        ["bash", "-c", f'{line}\nprintf "%s" "$test_command"'],
        cwd=README.parent,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    first = re.search(r"```bash\n(.*?)```", README.read_text(), re.S)
    assert first is not None
    assert out == first.group(1).strip().splitlines()[1]


@pytest.mark.parametrize("code", re.findall(r"```python\n(.*?)```", README.read_text(), re.S))
def test_python_examples_run(code: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    code = code.replace("max_epochs=60", "max_epochs=2")  # the recipe's budget, shortened
    exec(compile(code, str(README), "exec"), {"__name__": "readme"})


def _names(requirements: list[str]) -> set[str]:
    return {re.split(r"[<>=!~\[; ]", requirement, maxsplit=1)[0] for requirement in requirements}


def test_onnx_extra_installs_what_the_export_example_needs() -> None:
    """``torch.onnx.export(..., dynamo=True)`` imports onnxscript and onnx, and the result
    runs in onnxruntime: the README's export lines name the extra that installs them
    (.ci/run installs the wheel with it in a fresh environment and exports there)."""
    tomllib = pytest.importorskip("tomllib")
    extras = tomllib.loads(PYPROJECT.read_text())["project"]["optional-dependencies"]
    assert {"onnx", "onnxscript", "onnxruntime"} <= _names(extras["onnx"])
    assert _names(extras["onnx"]) <= _names(extras["dev"])
    text = README.read_text()
    assert 'pip install ".[onnx]"' in text
    assert text.index('pip install ".[onnx]"') < text.index("torch.onnx.export(")
