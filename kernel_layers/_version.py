"""The version of kernel-layers, in one place (read by ``pyproject.toml`` too)."""

__version__ = "0.3.0"
