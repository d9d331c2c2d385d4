"""The ``kernel-layers`` console script: commands that need no model answer before
torch and Lightning are imported (``kernel-layers recipes`` in a fraction of a second
instead of seconds); everything else goes to :func:`kernel_layers.cli.app.main`.
"""

from __future__ import annotations

import argparse
import os
import sys
import warnings

__all__ = ["SIGPIPE_STATUS", "main", "quiet_third_party_deprecations", "recipes_command"]

#: Exit status when the reader closes the pipe early: 128 + SIGPIPE, as a shell reports
#: for a command that SIGPIPE ended.
SIGPIPE_STATUS = 141


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


def main(args: list[str] | None = None) -> None:
    """Entry point of the ``kernel-layers`` console script.

    Args:
        args: the command line without the program name (default: ``sys.argv[1:]``).
    """
    argv = sys.argv[1:] if args is None else list(args)
    if argv[:1] == ["recipes"]:
        raise SystemExit(recipes_command(argv[1:]))
    quiet_third_party_deprecations()
    from kernel_layers.cli import app

    app.main(args)
