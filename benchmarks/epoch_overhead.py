"""What a user waits for per epoch, against the DI steps the epoch cannot avoid.

Builds a recipe exactly as ``kernel-layers fit --config RECIPE`` does (same model, data
module, trainer, callbacks, logger and checkpoints, run in a temporary directory), then
times in one process, alternating:

* ``steps``: one epoch of the recipe's DI steps alone: the training batches served by the
  recipe's own loader, ``embed`` + the layer's DI + backward + Adam, in a plain loop on a
  copy of the model (no Lightning, no logging, no validation, no read-out);
* ``epoch``: one epoch of ``Trainer.fit`` with everything the recipe does (validation
  with its read-out refit, logging, checkpoints, callbacks), timed from one
  ``on_train_epoch_start`` to the next (the first epoch, with its set-up, is dropped).

By default (``--steps interleaved``) a steps-alone epoch runs at the start of every
Lightning epoch, its time taken out of the epoch it interrupts, so that both kinds see the
same spells of a machine whose speed drifts; ``--steps around`` times them before and
after the fit instead.

It prints the mean epoch (over whole validation cycles), the median steps-alone epoch and
``epoch / steps`` (the bar: at most 1.2), with where
the rest of the epoch goes: training batches inside Lightning, validation (read-out refit
included), and the remainder (hooks, logging, checkpoints).

Usage::

    python benchmarks/epoch_overhead.py mnist_nystrom_di --root DIR/mnist
    python benchmarks/epoch_overhead.py covtype_nystrom_di --data-home DIR/covtype
    python benchmarks/epoch_overhead.py mnist_nystrom_di --root DIR/mnist \\
        -- --trainer.check_val_every_n_epoch 5     # any extra CLI arguments after --
    python benchmarks/epoch_overhead.py mnist_nystrom_di --root DIR/mnist --device cuda

On CUDA the step loop is timed with CUDA events and every epoch boundary synchronises;
``--sync-debug`` additionally runs the Lightning training steps under
``torch.cuda.set_sync_debug_mode("error")`` (a hidden host synchronisation raises), with
the model's checks read once per epoch (``--model.check_every epoch``, which
``--check-every`` also sets on any device).
"""

from __future__ import annotations

import argparse
import copy
import json
import logging
import os
import platform
import statistics
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from typing import Any
from unittest import mock

import torch
from lightning.pytorch import Callback, LightningModule, Trainer

from kernel_layers import KernelClassifier
from kernel_layers.cli.allocator import keep_freed_host_memory
from kernel_layers.cli.app import KernelLayersCLI, resolve_config_args
from kernel_layers.data import ArrayDataModule


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


class EpochClock(Callback):
    """Wall time of every epoch (start to next start, less the steps-alone epochs run in
    between) and of its parts.

    With ``interleave``, that function (a steps-alone epoch, returning its seconds) runs at
    the start of every epoch before the epoch's clock starts; its results are
    :attr:`steps` and its wall time is taken out of the interval it falls in.
    """

    def __init__(
        self,
        device: torch.device,
        sync_debug: bool,
        interleave: Callable[[], float] | None = None,
    ) -> None:
        self.device, self.sync_debug, self.interleave = device, sync_debug, interleave
        self.starts: list[float] = []
        self.paused: list[float] = []  # seconds spent just before starts[k], not training
        self.batches: list[float] = []
        self.validation: list[float] = []
        self.steps: list[float] = []
        self._mark = 0.0

    def _now(self) -> float:
        _sync(self.device)
        return time.perf_counter()

    def epochs(self) -> list[float]:
        """Seconds of every complete epoch after the first (whose set-up is dropped)."""
        starts, paused = self.starts, self.paused
        return [starts[k + 1] - starts[k] - paused[k + 1] for k in range(1, len(starts) - 1)]

    def on_train_epoch_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        paused = 0.0
        if self.interleave is not None:
            begin = self._now()
            self.steps.append(self.interleave())
            paused = self._now() - begin
        self.paused.append(paused)
        self.starts.append(self._now())
        self.batches.append(0.0)
        self.validation.append(0.0)

    def on_train_batch_start(
        self, trainer: Trainer, pl_module: LightningModule, *args: Any
    ) -> None:
        self._mark = self._now()
        if self.sync_debug:
            torch.cuda.set_sync_debug_mode("error")

    def on_train_batch_end(self, trainer: Trainer, pl_module: LightningModule, *args: Any) -> None:
        if self.sync_debug:
            torch.cuda.set_sync_debug_mode("default")
        self.batches[-1] += self._now() - self._mark

    def on_validation_epoch_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._mark = self._now()

    def on_validation_epoch_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if self.validation:
            self.validation[-1] += self._now() - self._mark

    def on_train_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self.paused.append(0.0)
        self.starts.append(self._now())


def build(recipe: str, extra: list[str]) -> KernelLayersCLI:
    """The recipe's model, data module and trainer, as ``kernel-layers fit`` builds them.

    The calling script's own command line is hidden from LightningCLI while it parses
    ``args`` (it warns when it sees both).
    """
    argv = resolve_config_args(["--config", recipe, *extra])
    with mock.patch.object(sys, "argv", sys.argv[:1]):
        return KernelLayersCLI(
            KernelClassifier, ArrayDataModule, subclass_mode_data=True, run=False, args=argv
        )


def steps_epoch(
    model: KernelClassifier, loader: Any, optimizer: Any, device: torch.device
) -> float:
    """Seconds for one epoch of DI steps alone."""
    hp = model.hparams
    layer = model.kernel_layer
    if device.type == "cuda":
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        _sync(device)
        start.record()
    else:
        t0 = time.perf_counter()
    for batch in loader:
        x = batch[0].to(device, non_blocking=True)
        y = batch[1].to(device, non_blocking=True)
        optimizer.zero_grad(set_to_none=True)
        h = model.embed(x)
        di = layer.discriminant_information(h, y, rho=hp["rho"], num_classes=hp["num_classes"])
        (-di).backward()
        optimizer.step()
    if device.type == "cuda":
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / 1e3
    return time.perf_counter() - t0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("recipe", help="recipe name or YAML path (DI objective)")
    parser.add_argument("--root", default=None, help="MNIST / image data folder")
    parser.add_argument("--data-home", default=None, help="CovType data home")
    parser.add_argument(
        "--epochs",
        type=int,
        default=None,
        help="timed Lightning epochs, a multiple of the recipe's check_val_every_n_epoch "
        "(default: the smallest multiple >= 10); with --steps around the steps alone are "
        "timed for epochs // 2 + 1 epochs before and after",
    )
    parser.add_argument(
        "--steps",
        choices=["interleaved", "around"],
        default="interleaved",
        help="interleaved: a steps-alone epoch at the start of every Lightning epoch "
        "(default); around: epochs // 2 + 1 before and as many after the fit",
    )
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument(
        "--sync-debug",
        action="store_true",
        help="CUDA: error on host syncs in a training step (implies --check-every epoch)",
    )
    parser.add_argument(
        "--check-every",
        choices=["step", "epoch"],
        default=None,
        help="KernelClassifier(check_every=...): when the step's checks are read "
        "(default: the recipe's, i.e. 'step')",
    )
    parser.add_argument("--json", default=None, help="append the result as one JSON line")
    parser.add_argument(
        "--host-memory",
        choices=["keep", "default"],
        default="keep",
        help="keep: freed host memory is reused (keep_freed_host_memory, as kernel-layers "
        "does); default: glibc's defaults",
    )
    argv = sys.argv[1:]
    cut = argv.index("--") if "--" in argv else len(argv)
    args = parser.parse_args(argv[:cut])
    if args.host_memory == "keep":
        keep_freed_host_memory()
    args.extra = argv[cut + 1 :]  # more CLI arguments, after --
    logging.getLogger("lightning").setLevel(logging.ERROR)
    warnings.filterwarnings("ignore")
    device = torch.device(args.device)
    extra = list(args.extra)
    if args.root:
        extra += ["--data.init_args.root", args.root]
    if args.data_home:
        extra += ["--data.init_args.data_home", args.data_home]
    check_every = "epoch" if args.sync_debug else args.check_every
    if check_every is not None:
        extra += ["--model.check_every", check_every]
    accelerator = "gpu" if device.type == "cuda" else "cpu"
    extra += ["--trainer.accelerator", accelerator, "--trainer.enable_progress_bar", "false"]
    # Stopping rules would end the timed run early; keep every other callback.
    json_path = os.path.abspath(args.json) if args.json else None
    workdir = tempfile.mkdtemp(prefix="epoch_overhead_")
    os.chdir(workdir)
    cli = build(args.recipe, extra)
    model, dm, trainer = cli.model, cli.datamodule, cli.trainer
    assert isinstance(model, KernelClassifier) and model.hparams["objective"] == "di"
    trainer.callbacks = [c for c in trainer.callbacks if "Stopping" not in type(c).__name__]
    period = int(trainer.check_val_every_n_epoch or 1)
    timed = args.epochs if args.epochs is not None else period * -(-10 // period)
    if timed < 1 or timed % period:
        parser.error(
            f"argument --epochs must be a positive multiple of the recipe's "
            f"check_val_every_n_epoch ({period}), got {timed}"
        )
    trainer.fit_loop.max_epochs = timed + 1  # the first epoch, with its set-up, is dropped

    dm.setup("fit")
    loader = dm.train_dataloader()
    twin = copy.deepcopy(model).to(device)
    twin.train()
    params = [p for p in twin.parameters() if p.requires_grad]
    optimizer = torch.optim.Adam(params, lr=model.hparams["lr"])

    def one_steps_epoch() -> float:
        return steps_epoch(twin, loader, optimizer, device)

    interleaved = args.steps == "interleaved"
    clock = EpochClock(device, args.sync_debug, one_steps_epoch if interleaved else None)
    trainer.callbacks.append(clock)
    one_steps_epoch()  # warm-up
    around = [] if interleaved else [one_steps_epoch() for _ in range(timed // 2 + 1)]
    trainer.fit(model, datamodule=dm)
    if interleaved:
        steps = clock.steps[1:]  # the first ran before the dropped first epoch
    else:
        steps = around + [one_steps_epoch() for _ in range(timed // 2 + 1)]

    epochs = clock.epochs()
    batches, validation = clock.batches[1 : len(epochs) + 1], clock.validation[1 : len(epochs) + 1]
    # Epochs: the mean, so that validations every N epochs count at their rate (time a
    # multiple of N epochs); the steps alone: the median.
    step_s, epoch_s = statistics.median(steps), statistics.fmean(epochs)
    row = {
        "recipe": args.recipe,
        "extra": args.extra,
        "device": torch.cuda.get_device_name(device)
        if device.type == "cuda"
        else platform.machine(),
        "threads": torch.get_num_threads(),
        "check_every": model.hparams.get("check_every", "step"),
        "steps_timing": args.steps,
        "timed_epochs": timed,
        "batches_per_epoch": len(loader),
        "steps_s": round(step_s, 4),
        "epoch_s": round(epoch_s, 4),
        "ratio": round(epoch_s / step_s, 3),
        "train_batches_s": round(statistics.fmean(batches), 4),
        "validation_s": round(statistics.fmean(validation), 4),
        "rest_s": round(epoch_s - statistics.fmean(batches) - statistics.fmean(validation), 4),
        "date": time.strftime("%Y-%m-%d"),
        "torch": torch.__version__,
        # The largest GPU allocation of the run (the fit and the steps alone); CPU: none.
        "peak_mib": (
            round(torch.cuda.max_memory_allocated(device) / 2**20, 1)
            if device.type == "cuda"
            else None
        ),
    }
    print(json.dumps(row))
    if json_path:
        with open(json_path, "a") as out:
            out.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
