"""The divergence guard: undo an optimiser step that made the training diverge, and stop.

A step diverges when it makes a parameter non-finite or so large that the kernel's
squared distances overflow, or when the objective (or a backbone's output, on finite
inputs) is non-finite after it (too large a learning rate), and in no other case: what is
wrong with a batch itself is an error that names the batch
(:mod:`~kernel_layers.training.batch_checks`). :class:`DivergenceGuard` keeps the
parameters from before the last step, puts them back and stops the fit with the reason
(warned, and kept in ``stop_reason``), so the checkpoints written as the fit stops hold
the last good parameters. With deferred checks (on a GPU by default, or
``check_every="epoch"``: :class:`~kernel_layers.training.deferred.EpochChecks`) the
failures are recorded on the device instead and what is restored is the epoch's start.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import torch
from lightning.pytorch import LightningModule
from lightning.pytorch.utilities import rank_zero_warn
from torch import Tensor

from kernel_layers.numerics.deferred import DeferredChecks, deferred_checks
from kernel_layers.numerics.precision import distance_limit

__all__ = ["DivergenceGuard"]


def _largest(params: list[Tensor]) -> Tensor:
    """The largest magnitude over ``params`` (NaN if any is NaN), as a device scalar."""
    return torch.stack([p.detach().abs().amax() for p in params]).amax()


class DivergenceGuard:
    """Keeps the parameters from before the last optimiser step and undoes a diverging one.

    Args:
        owner: the model's class name, for the messages.
        in_features: ``D`` of the kernel layer (the magnitude limit depends on it).
    """

    def __init__(self, owner: str, in_features: int) -> None:
        self.owner = owner
        self.in_features = in_features
        #: Why the fit stopped on a diverging step, or ``None``.
        self.stop_reason: str | None = None
        #: The parameters and their values a failure goes back to.
        self.saved: list[tuple[Tensor, Tensor]] | None = None
        #: The current epoch's deferred checks; ``None``: each is read at once.
        self.deferred: DeferredChecks | None = None

    def snapshot(self, params: Iterable[Tensor]) -> None:
        """Keep copies of ``params`` as what a failure goes back to."""
        self.saved = [(p, p.detach().clone()) for p in params]

    def restore(self) -> None:
        """Put back the saved parameters (before the last step, or the epoch's start)."""
        if self.saved is not None:
            with torch.no_grad():
                for param, saved in self.saved:
                    param.copy_(saved)
                    param.grad = None

    def stop(self, module: LightningModule, what: str, batch_idx: int | None) -> None:
        """Restore the saved parameters and stop the fit, warning ``what`` went wrong.

        Args:
            module: the model being fitted.
            what: the failure.
            batch_idx: the batch it showed at; ``None``: found by the epoch's deferred
                checks (the epoch's start is restored).
        """
        self.restore()
        where = "" if batch_idx is None else f", batch {batch_idx}"
        kept = (
            "the parameters from the epoch's start (the checks are read once per epoch)"
            if batch_idx is None
            else "the parameters before the last optimiser step"
        )
        self.stop_reason = (
            f"{self.owner}: training diverged at epoch {module.current_epoch}{where}: "
            f"{what}; {kept} are kept (is the learning rate too large?) and training stops"
        )
        rank_zero_warn(self.stop_reason)
        module.trainer.should_stop = True

    def check_embedding(
        self, module: LightningModule, x: Tensor, h: Tensor, batch_idx: int, world_size: int
    ) -> bool:
        """Whether the training step may go on with the backbone's output ``h
        (Tensor[B, D])`` of the batch ``x (Tensor[B, ...])``: a non-finite ``h`` from a
        finite ``x`` after a step of ours is a diverged backbone, which stops the fit
        (recorded for the epoch's end with deferred checks). Anything else is left to the
        kernel layer's input check: a non-finite ``x`` is bad data, not divergence.

        Raises:
            FloatingPointError: a diverged backbone under DDP.
        """
        if torch.compiler.is_compiling() or x.numel() == 0 or h.numel() == 0:
            return True
        if self.saved is None:  # no step of ours came before: not a divergence
            return True
        exploded = torch.isfinite(x.detach()).all() & ~torch.isfinite(h.detach()).all()
        what = "the backbone's output is non-finite on finite inputs"
        if self.deferred is not None:
            self.deferred.record(FloatingPointError, what, exploded)
            return True
        if not bool(exploded):
            return True
        if world_size > 1:  # stopping one process alone would hang the others
            raise FloatingPointError(
                f"{self.owner}: {what} at epoch {module.current_epoch}, batch {batch_idx}"
            )
        self.stop(module, what, batch_idx)
        return False

    def check_objective(
        self, module: LightningModule, loss: Tensor, batch_idx: int, world_size: int
    ) -> bool:
        """Whether the training step may go on with ``loss``; a non-finite one stops the
        fit (recorded for the epoch's end with deferred checks).

        Raises:
            FloatingPointError: a non-finite objective under DDP.
        """
        if self.deferred is not None:
            self.deferred.record(
                FloatingPointError, "a non-finite training objective", ~torch.isfinite(loss)
            )
            return True
        if bool(torch.isfinite(loss)):
            return True
        what = f"non-finite training objective ({loss.item()})"
        if world_size > 1:  # skipping on one process would hang the others
            raise FloatingPointError(
                f"{self.owner}: {what} at epoch {module.current_epoch}, batch {batch_idx}"
            )
        self.stop(module, what, batch_idx)
        return False

    def step(
        self,
        module: LightningModule,
        optimizer: Any,
        closure: Callable[[], Any] | None,
        batch_idx: int,
        after_step: Callable[[], None],
        world_size: int,
    ) -> None:
        """``optimizer.step(closure)`` then ``after_step()`` (e.g. a proximal step), kept
        undoable until the next step succeeds; a step that makes a parameter reach
        beyond :func:`~kernel_layers.numerics.precision.distance_limit` or NaN stops the fit.
        """
        if self.stop_reason is not None:  # no further step (Lightning still needs the
            if closure is not None:  # closure to run)
                closure()
            return
        params = [p for group in optimizer.param_groups for p in group["params"]]
        if self.deferred is not None:  # recorded on the device, read at the epoch's end
            with deferred_checks(self.deferred):
                optimizer.step(closure=closure)
                after_step()
            if params and not torch.compiler.is_compiling():
                limit = distance_limit(params[0].dtype, self.in_features)
                self.deferred.record(
                    FloatingPointError,
                    f"an optimiser step made a parameter reach beyond {limit:.3g} (where "
                    "the kernel's squared distances overflow) or NaN",
                    ~(_largest(params) <= limit),
                )
            return
        pending = [(p, p.detach().clone()) for p in params]
        optimizer.step(closure=closure)  # runs training_step (the closure)
        if self.stop_reason is not None:  # training_step found the previous step diverged
            return
        after_step()
        self.saved = pending  # what a failure at the next step goes back to
        if torch.compiler.is_compiling() or not params or world_size > 1:
            return
        largest = float(_largest(params))  # one read
        limit = distance_limit(params[0].dtype, self.in_features)
        if not largest <= limit:
            self.stop(
                module,
                f"the optimiser step made a parameter reach {largest:.3g} (beyond {limit:.3g}, "
                "where the kernel's squared distances overflow)",
                batch_idx,
            )
