"""Command-line entry point ``kernel-layers`` (LightningCLI; the training stack fills it in)."""

from __future__ import annotations

import sys

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    """Print usage; the LightningCLI arrives with the training stack."""
    del argv
    print("usage: kernel-layers fit --config recipes/<name>.yaml", file=sys.stderr)
    return 0
