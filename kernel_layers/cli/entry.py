"""The ``kernel-layers`` console script: the one table of commands.

``recipes`` and ``--version`` answer before torch and Lightning are imported; the other
commands import what they need. ``select-gamma``, ``plot`` and ``export`` are this
package's (:mod:`kernel_layers.cli.commands`); everything else (``fit``, ``validate``,
``test``, ``predict``, ``--help``) goes to LightningCLI (:mod:`kernel_layers.cli.app`).

Host memory: before LightningCLI's commands and ``export`` the console script makes
glibc keep freed memory for reuse (:func:`~kernel_layers.cli.allocator.keep_freed_host_memory`),
unless ``--host_memory default`` is given or glibc's allocator is configured through its
own environment variables. It is the one place this is done.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import warnings

__all__ = [
    "COMMANDS",
    "HOST_MEMORY_CHOICES",
    "SIGPIPE_STATUS",
    "main",
    "pop_host_memory",
    "quiet_third_party_deprecations",
    "recipes_command",
]

#: Exit status when the reader closes the pipe early: 128 + SIGPIPE, as a shell reports
#: for a command that SIGPIPE ended.
SIGPIPE_STATUS = 141

#: This package's commands: name -> ``module:function`` taking the remaining arguments
#: and returning the exit status. Any other command is LightningCLI's.
COMMANDS = {
    "recipes": "kernel_layers.cli.entry:recipes_command",
    "select-gamma": "kernel_layers.cli.commands:select_gamma_command",
    "plot": "kernel_layers.cli.commands:plot_command",
    "export": "kernel_layers.cli.commands:export_command",
}
#: Commands before which freed host memory is kept for reuse (they train or run a model).
_TUNED = ("fit", "validate", "test", "predict", "export")

#: ``--host_memory``: ``keep`` (default) freed memory for reuse, or glibc's ``default``.
HOST_MEMORY_CHOICES = ("keep", "default")


def recipes_command(argv: list[str]) -> int:
    """``kernel-layers recipes``: print the shipped recipes; returns the exit status."""
    from kernel_layers.cli.recipe_files import print_recipes

    parser = argparse.ArgumentParser(
        prog="kernel-layers recipes", description="List the shipped recipes."
    )
    parser.parse_args(argv)
    try:
        print_recipes()
        sys.stdout.flush()
    except BrokenPipeError:
        # The reader left early (``kernel-layers recipes | head``): stop quietly, as
        # command-line tools killed by SIGPIPE do, instead of a traceback; point stdout
        # at devnull so that the interpreter's own flush at exit cannot fail again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return SIGPIPE_STATUS
    return 0


def quiet_third_party_deprecations() -> None:
    """Silence, for the console script only, a deprecation warning that Lightning's own
    code draws from PyTorch (``isinstance(treespec, LeafSpec)``, from
    ``lightning.pytorch.utilities._pytree`` on every ``fit``): nothing a user of
    ``kernel-layers`` can act on. Warnings from any other module, and this one's from
    other modules, still show."""
    warnings.filterwarnings(
        "ignore",
        message=r"`isinstance\(treespec, LeafSpec\)` is deprecated",
        category=FutureWarning,
        module=r"lightning\.pytorch\.utilities\._pytree",
    )


def pop_host_memory(argv: list[str]) -> tuple[str, list[str]]:
    """``--host_memory keep|default`` (anywhere on the line) and the line without it.

    Raises:
        SystemExit: status 2, the value is not one of :data:`HOST_MEMORY_CHOICES`.
    """
    choice, rest, i = "keep", [], 0
    while i < len(argv):
        arg = argv[i]
        if arg == "--host_memory" and i + 1 < len(argv):
            choice, i = argv[i + 1], i + 2
            continue
        if arg.startswith("--host_memory="):
            choice = arg.split("=", 1)[1]
        else:
            rest.append(arg)
        i += 1
    if choice not in HOST_MEMORY_CHOICES:
        print(
            f"kernel-layers: argument '--host_memory' must be one of "
            f"{list(HOST_MEMORY_CHOICES)}, got {choice!r}",
            file=sys.stderr,
        )
        raise SystemExit(2)
    return choice, rest


def _tune_host_memory(choice: str) -> None:
    from kernel_layers.cli.allocator import allocator_configured_by_user, keep_freed_host_memory

    if choice == "keep" and not allocator_configured_by_user():
        keep_freed_host_memory()


def main(args: list[str] | None = None) -> None:
    """Entry point of the ``kernel-layers`` console script.

    Args:
        args: the command line without the program name (default: ``sys.argv[1:]``).

    Raises:
        SystemExit: with the command's exit status.
    """
    argv = sys.argv[1:] if args is None else list(args)
    if argv[:1] in (["--version"], ["-V"]):
        from kernel_layers._version import __version__

        print(f"kernel-layers {__version__}")
        raise SystemExit(0)
    host_memory, argv = pop_host_memory(argv)
    command = argv[0] if argv else None
    if command != "recipes":
        quiet_third_party_deprecations()
    if command in _TUNED:
        _tune_host_memory(host_memory)
    if command in COMMANDS:
        module, _, function = COMMANDS[command].partition(":")
        raise SystemExit(getattr(importlib.import_module(module), function)(argv[1:]))
    from kernel_layers.cli.app import run_lightning_cli

    if args is None:
        sys.argv[1:] = argv
    run_lightning_cli(argv, console=args is None)
