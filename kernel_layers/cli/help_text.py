"""What ``kernel-layers --help`` and ``kernel-layers COMMAND --help`` say."""

from __future__ import annotations

import argparse
from typing import Any

__all__ = ["COMMAND_HELP", "DESCRIPTION", "EXTRA_COMMANDS", "help_parser_kwargs"]

#: ``kernel-layers --help``: what the tool is.
DESCRIPTION = """Train and use kernel layers (Nystrom, random Fourier) with the Discriminant
Information objective. Start with: kernel-layers fit --config quickstart

LightningCLI's commands (fit, validate, test, predict) take a recipe (--config NAME or
a YAML file) and overrides (--section.option VALUE); `kernel-layers COMMAND --help`
lists the options. glibc's allocator is set to keep freed host memory for reuse
(faster steps on CPU); --host_memory default keeps glibc's settings."""

#: Each LightningCLI command's description and a usage line short enough to read.
COMMAND_HELP = {
    "fit": "Train the model of a recipe, then test it and print a summary (test accuracy, "
    "epochs, where the checkpoint, configuration and logs are).",
    "validate": "Score a checkpoint on the validation split.",
    "test": "Score a checkpoint on the test split (--ckpt_path last: the recipe's last.ckpt).",
    "predict": "Write a checkpoint's predictions for a split or a file of raw rows.",
}

#: Commands of ``kernel-layers`` besides LightningCLI's, shown in ``--help``.
EXTRA_COMMANDS = """other commands:
  kernel-layers recipes             list the shipped recipes (use one as --config NAME)
  kernel-layers plot RUN_DIR        draw a run's curves (and landmarks / bandwidths)
  kernel-layers export --config NAME --ckpt_path CKPT [--export_output model.onnx]
                                    the trained model, with the data's scaling, as ONNX
  kernel-layers select-gamma ...    the paper's gamma search (3-fold CV, Nystrom + linear SVM)

--ckpt_path: a checkpoint whose saved hyper-parameters differ from the configuration is an
error naming both values; the configuration is never silently replaced."""


def help_parser_kwargs() -> dict[str, Any]:
    """LightningCLI's ``parser_kwargs``: the program's and each command's description and
    a short usage line, with the texts' line breaks kept."""
    raw = argparse.RawDescriptionHelpFormatter
    kwargs: dict[str, Any] = {
        "prog": "kernel-layers",
        "description": DESCRIPTION,
        "epilog": EXTRA_COMMANDS,
        "formatter_class": raw,
    }
    for command, text in COMMAND_HELP.items():
        kwargs[command] = {
            "description": text,
            "usage": f"kernel-layers {command} [--config RECIPE] [--KEY VALUE]...",
            "formatter_class": raw,
        }
    return kwargs
