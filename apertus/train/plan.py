"""The pretraining plan: which stage follows which, and how each continues (RECIPE.md §4-§6).

One function, `pretrain_stages`, read by both sides: `workflow/rules/pretrain.smk` (the DAG:
each stage's job depends on the previous stage's output, and runs on its node count) and
`apertus.train.stage` (the run spec: how the stage starts from the previous weights), both
from the typed section (`apertus.train.config.PretrainConfig`). No torch here: the Snakefile
imports it.

The stages, in order:
- the data phases of ``pretrain.phases``: the first starts from a fresh model; each later one
  continues the previous phase's run (``continue``: its optimizer state, step count and one WSD
  schedule over all phases, with its own data from the start);
- then the long-context stages of ``pretrain.long_context``: each loads the previous stage's
  weights only (``weights``: a fresh optimizer, a constant LR after its warmup, its own
  sequence length and RoPE theta; RECIPE §6).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from apertus.core import ApertusError
from apertus.train.config import PretrainConfig

__all__ = ["PlannedStage", "planned_stage", "pretrain_stages"]


@dataclass(frozen=True)
class PlannedStage:
    """One pretraining stage of the plan."""

    name: str
    kind: Literal["phase", "long_context"]
    previous: str | None
    """The stage it starts from (None: the first phase, from a fresh model)."""
    start: Literal["fresh", "continue", "weights"]
    """How it starts from `previous`: "continue" (a later phase: optimizer, step count and
    schedule carried on), "weights" (a long-context stage: the weights only) or "fresh"."""
    nnodes: int
    """Nodes of its job: ``pretrain.nnodes``, or a long-context stage's own ``nnodes``."""


def pretrain_stages(cfg: PretrainConfig) -> list[PlannedStage]:
    """The stages of the ``pretrain:`` config section, in training order."""
    names = [*cfg.phases, *(stage.name for stage in cfg.long_context)]
    if len(set(names)) != len(names):
        duplicated = sorted({n for n in names if names.count(n) > 1})
        raise ApertusError(f"pretrain: stage name(s) {duplicated} appear more than once")
    stages: list[PlannedStage] = []
    for name in cfg.phases:
        previous = stages[-1].name if stages else None
        start = "continue" if previous else "fresh"
        stages.append(PlannedStage(name, "phase", previous, start, cfg.nnodes))
    for stage in cfg.long_context:
        previous = stages[-1].name if stages else None
        nnodes = cfg.nnodes if stage.nnodes is None else stage.nnodes
        stages.append(PlannedStage(stage.name, "long_context", previous, "weights", nnodes))
    return stages


def planned_stage(cfg: PretrainConfig, name: str) -> PlannedStage:
    """Stage `name` of the plan, or an ApertusError naming it."""
    for stage in pretrain_stages(cfg):
        if stage.name == name:
            return stage
    raise ApertusError(f"no pretraining phase or long-context stage named {name!r}")
