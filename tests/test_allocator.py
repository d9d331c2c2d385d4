"""keep_freed_host_memory: argument checks, where it is applied, and its effect (page faults)."""

from __future__ import annotations

import statistics
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from kernel_layers.cli import allocator, entry
from kernel_layers.cli.allocator import (
    _mallopt,
    allocator_configured_by_user,
    keep_freed_host_memory,
)

GLIBC = _mallopt() is not None

# Minor page faults per DI step of a Nystrom layer at (B, D, J) = (1000, 54, 500), after
# a warm-up: with glibc's defaults the step's large buffers go back to the system when
# freed and fault in again at the next step; with freed memory kept they are reused. A
# few dozen faults a step remain from allocations that do not go through glibc's heap.
_FAULTS = textwrap.dedent(
    """
    import resource, sys, torch
    from kernel_layers import NystromLayer, discriminant_information
    from kernel_layers.cli.allocator import keep_freed_host_memory
    torch.set_num_threads(1)
    if sys.argv[1] == "keep":
        assert keep_freed_host_memory()
    gen = torch.Generator().manual_seed(0)
    x, labels = torch.rand(1000, 54, generator=gen), torch.randint(0, 10, (1000,), generator=gen)
    layer = NystromLayer(54, 500, gamma=0.1, seed=0)
    def step():
        layer.zero_grad(set_to_none=True)
        discriminant_information(layer(x), labels, num_classes=10).backward()
    for _ in range(15):
        step()
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(20):
        step()
    print((resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / 20)
    """
)


def _faults(mode: str) -> float:
    env = {"PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1"}
    out = subprocess.run(
        [sys.executable, "-c", _FAULTS, mode], capture_output=True, text=True, env=env, check=True
    )
    return float(out.stdout.split()[-1])


@pytest.mark.skipif(not GLIBC, reason="glibc's mallopt only")
def test_freed_memory_is_reused_without_page_faults():
    # glibc's dynamic mmap threshold makes the default's count vary from run to run, so
    # the worst of three default runs shows that the workload faults without it. One
    # [1000, 500] float64 buffer of the step is 977 pages, each faulted in again whenever
    # the buffer is not reused; kept memory faults a few dozen times a step.
    default = max(_faults("default") for _ in range(3))
    keep = statistics.median(_faults("keep") for _ in range(3))
    assert default > 200
    assert keep < 250


@pytest.mark.skipif(not GLIBC, reason="glibc's mallopt only")
def test_returns_true_on_glibc():
    # Process-wide, but only glibc's thresholds: harmless for the rest of the tests.
    assert keep_freed_host_memory() is True


@pytest.mark.parametrize("name", ["mmap_threshold", "trim_threshold"])
def test_rejects_bad_thresholds(name):
    with pytest.raises(TypeError, match=rf"argument '{name}' must be an integer >= 0, got 1.5"):
        keep_freed_host_memory(**{name: 1.5})
    with pytest.raises(ValueError, match=rf"argument '{name}' must be an integer >= 0, got -1"):
        keep_freed_host_memory(**{name: -1})
    with pytest.raises(ValueError, match=rf"argument '{name}' must be an integer <= 2147483647"):
        keep_freed_host_memory(**{name: 1 << 31})


def test_user_configuration_is_respected():
    assert not allocator_configured_by_user({})
    assert not allocator_configured_by_user({"KERNEL_LAYERS_HOST_MEMORY": "default"})
    assert allocator_configured_by_user({"MALLOC_TRIM_THRESHOLD_": "131072"})
    assert allocator_configured_by_user({"GLIBC_TUNABLES": "glibc.malloc.trim_threshold=0"})


def test_console_script_applies_it_unless_opted_out(monkeypatch):
    from kernel_layers.cli import app, commands

    calls: list[int] = []
    monkeypatch.setattr(allocator, "keep_freed_host_memory", lambda: calls.append(1) or True)
    monkeypatch.setattr(app, "run_lightning_cli", lambda argv, console: None)
    monkeypatch.setattr(commands, "plot_command", lambda argv: 0)
    monkeypatch.setattr(entry.sys, "argv", ["kernel-layers"])
    for name in allocator.ALLOCATOR_ENV_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    entry.main(["fit", "--config", "quickstart"])
    assert calls == [1]
    entry.main(["--host_memory", "default", "fit", "--config", "quickstart"])
    entry.main(["fit", "--host_memory=default", "--config", "quickstart"])
    with pytest.raises(SystemExit):
        entry.main(["plot", "run"])  # draws pictures: not tuned
    assert calls == [1]
    monkeypatch.setenv("GLIBC_TUNABLES", "glibc.malloc.trim_threshold=0")
    entry.main(["fit", "--config", "quickstart"])
    assert calls == [1]


def test_host_memory_rejects_other_values(capsys):
    with pytest.raises(SystemExit) as done:
        entry.main(["--host_memory", "off", "fit"])
    assert done.value.code == 2
    assert "argument '--host_memory' must be one of ['keep', 'default'], got 'off'" in (
        capsys.readouterr().err
    )


def test_applied_in_the_console_script_only():
    """No module but the entry point calls it, and the library reads no switch for it."""
    package = Path(allocator.__file__).parents[1]
    callers = sorted(
        str(path.relative_to(package))
        for path in package.rglob("*.py")
        if "keep_freed_host_memory(" in path.read_text() and path.name != "allocator.py"
    )
    assert callers == ["cli/entry.py"]
    for path in package.rglob("*.py"):
        assert "KERNEL_LAYERS_HOST_MEMORY" not in path.read_text(), path
