"""The recipe's learning-rate schedules in torchtitan's scheduler container (RECIPE.md §4, §6,
§7): Warmup-Stable-Decay with the 1-sqrt cooldown, constant after a warmup (long-context
stages), or SFT's linear warmup and decay to 0; the formulas are `apertus.train.schedule`'s,
evaluated exactly per step.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any, Literal

import torch
from torch.optim.lr_scheduler import LRScheduler
from torchtitan.components.optimizer import (
    LRSchedulersContainer,
    OptimizersContainer,
)

from apertus.core import ApertusError
from apertus.train.schedule import constant_lr_with_warmup, linear_lr, wsd_lr


class _RecipeLR(LRScheduler):
    """Sets each group's LR to ``schedule(step, peak)`` with the group's initial LR as peak;
    stateless in the step, as torchtitan's checkpointing of schedulers assumes."""

    def __init__(self, optimizer: torch.optim.Optimizer, schedule: Callable[[int, float], float]):
        self.schedule = schedule
        super().__init__(optimizer)

    def get_lr(self) -> list[float]:
        return [self.schedule(self.last_epoch, base_lr) for base_lr in self.base_lrs]


class RecipeLRSchedulers(LRSchedulersContainer):
    """torchtitan's scheduler container running the recipe's schedules (RECIPE.md §4, §6, §7):

    - ``kind="wsd"``: `apertus.train.schedule.wsd_lr`, linear warmup from ``warmup_start`` x
      peak over `warmup_steps`, stable, then the 1-sqrt cooldown over the last `decay_steps`
      down to ``min_lr_factor`` x peak;
    - ``kind="constant"``: `constant_lr_with_warmup` (long-context stages);
    - ``kind="linear"``: `linear_lr`, linear warmup over `warmup_steps`, then linear decay to
      0 at the end of the schedule (SFT, RECIPE.md §7).

    The peak is each optimizer group's configured LR; update ``i`` (0-based) runs at
    ``schedule(i)`` exactly. `total_steps` defaults to the run's steps. torchtitan's own
    `decay_ratio` / `decay_type` do not apply (the cooldown is always 1-sqrt, in steps).
    """

    @dataclass(kw_only=True, slots=True)
    class Config(LRSchedulersContainer.Config):
        kind: Literal["wsd", "constant", "linear"] = "wsd"
        """"wsd" (Warmup-Stable-Decay, 1-sqrt cooldown), "constant" after warmup, or "linear"
        (warmup, then linear decay to 0; SFT)."""

        decay_steps: int = 0
        """Length of the cooldown at the end of the schedule (wsd only)."""

        warmup_start: float = 0.0
        """LR at step 0 as a fraction of the peak (wsd only; the scripts warm up from 0)."""

        decay_type: Literal["linear", "sqrt", "cosine"] = "sqrt"
        min_lr_factor: float = 0.1

        def __post_init__(self) -> None:
            if self.decay_ratio is not None or self.decay_type != "sqrt":
                raise ValueError(
                    "the recipe schedule sets its cooldown with kind/decay_steps (1-sqrt); "
                    "leave decay_ratio unset and decay_type='sqrt'"
                )
            if self.kind not in ("wsd", "constant", "linear"):
                raise ValueError(
                    f"lr_scheduler.kind must be 'wsd', 'constant' or 'linear', not {self.kind!r}"
                )

        # pyrefly: ignore [bad-override]
        def build(self, *, optimizers: OptimizersContainer, training_steps: int):
            total = self.total_steps if self.total_steps is not None else training_steps
            if self.kind == "wsd":
                # Validates the combination now rather than at the first step.
                wsd_lr(
                    0,
                    peak=1.0,
                    warmup_steps=self.warmup_steps,
                    total_steps=total,
                    decay_steps=self.decay_steps,
                    min_lr_ratio=self.min_lr_factor,
                    warmup_start=self.warmup_start,
                )
                schedule = partial(
                    _wsd_at,
                    warmup_steps=self.warmup_steps,
                    total_steps=total,
                    decay_steps=self.decay_steps,
                    min_lr_ratio=self.min_lr_factor,
                    warmup_start=self.warmup_start,
                )
            elif self.kind == "linear":
                linear_lr(0, peak=1.0, warmup_steps=self.warmup_steps, total_steps=total)
                schedule = partial(_linear_at, warmup_steps=self.warmup_steps, total_steps=total)
            else:
                schedule = partial(_constant_at, warmup_steps=self.warmup_steps)
            return RecipeLRSchedulers(optimizers, schedule)

    def __init__(
        self, optimizers: OptimizersContainer, schedule: Callable[[int, float], float]
    ) -> None:
        if len(optimizers) == 0:
            raise ApertusError("no optimizer to schedule")
        self.schedulers = [_RecipeLR(optimizer, schedule) for optimizer in optimizers]

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        # The LR is a function of the step alone: after a resume the next update runs at this
        # run's schedule(step), also when the spec's LR changed since the checkpoint. DCP loads
        # the lr_scheduler before the optimizer (sorted keys), whose saved param groups carry
        # the old LR; AdEMAMixOptimizers.load_state_dict keeps the LR set here.
        super().load_state_dict(state_dict)
        for scheduler in self.schedulers:
            for group, lr in zip(scheduler.optimizer.param_groups, scheduler.get_lr(), strict=True):
                group["lr"] = lr
            scheduler._last_lr = [group["lr"] for group in scheduler.optimizer.param_groups]


def _wsd_at(step: int, peak: float, *, total_steps: int, **options: Any) -> float:
    # The scheduler also steps once after the last update (and reloads there on resume); that
    # LR is never used, so the schedule's last value stands in for it.
    return wsd_lr(min(step, total_steps - 1), peak=peak, total_steps=total_steps, **options)


def _constant_at(step: int, peak: float, *, warmup_steps: int) -> float:
    return constant_lr_with_warmup(step, lr=peak, warmup_steps=warmup_steps)


def _linear_at(step: int, peak: float, *, warmup_steps: int, total_steps: int) -> float:
    # As _wsd_at: the scheduler's step after the last update is clamped (its LR is never used).
    return linear_lr(
        min(step, total_steps - 1), peak=peak, warmup_steps=warmup_steps, total_steps=total_steps
    )
