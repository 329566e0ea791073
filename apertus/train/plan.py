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
  sequence length and RoPE theta; RECIPE §6); with no phase (``pretrain.phases: []``), the
  first loads those of the released checkpoint ``pretrain.init_from`` names;
- beside the line, the Goldfish control ``<phase>-no-goldfish`` when
  ``pretrain.goldfish_control`` names a phase: that phase trained a second time, from the same
  start on the same data, with Goldfish off, so the memorization probes it plants show what
  Goldfish suppresses (RECIPE §2, §8). Nothing continues from it; it is listed right after its
  phase.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from apertus.core import ApertusError
from apertus.train.config import PretrainConfig
from apertus.train.run_spec import batch_ramp

__all__ = [
    "CONTROL_SUFFIX",
    "PlannedPhase",
    "PlannedStage",
    "launch_layout",
    "planned_phases",
    "planned_stage",
    "pretrain_stages",
]

CONTROL_SUFFIX = "-no-goldfish"


@dataclass(frozen=True)
class PlannedStage:
    """One pretraining stage of the plan."""

    name: str
    kind: Literal["phase", "long_context", "control"]
    previous: str | None
    """The stage it starts from (None: the first stage, from a fresh model or from
    ``pretrain.init_from``; a long-context stage only when ``pretrain.phases`` is empty)."""
    start: Literal["fresh", "continue", "weights"]
    """How it starts from `previous`: "continue" (a later phase: optimizer, step count and
    schedule carried on), "weights" (a long-context stage: the weights only) or "fresh"."""
    nnodes: int
    """Nodes of its job: ``pretrain.nnodes``, or a long-context stage's own ``nnodes``."""
    context_parallel: int = 1
    """Ranks each sequence is split over (a long-context stage's ``context_parallel``)."""


def launch_layout(cfg: PretrainConfig, stage: PlannedStage) -> str:
    """How the stage's torchrun ranks divide (`apertus explain --sbatch`): nodes x processes,
    then context x tensor x data parallel (what the run's preflight checks again)."""
    ranks = stage.nnodes * cfg.nproc
    split = cfg.tensor_parallel * stage.context_parallel
    data = f"data_parallel {ranks // split}" if ranks % split == 0 else "does not divide"
    return (
        f"torchrun {stage.nnodes} node(s) x {cfg.nproc} = {ranks} rank(s): context_parallel "
        f"{stage.context_parallel} x tensor_parallel {cfg.tensor_parallel} x {data}"
    )


def pretrain_stages(cfg: PretrainConfig) -> list[PlannedStage]:
    """The stages of the ``pretrain:`` config section, in training order."""
    control = cfg.goldfish_control
    names = [*cfg.phases, *(stage.name for stage in cfg.long_context)]
    if control is not None:
        if control not in cfg.phases:
            raise ApertusError(
                f"pretrain.goldfish_control: {control!r} is not one of pretrain.phases "
                f"{list(cfg.phases)}"
            )
        if not cfg.goldfish.enabled:
            raise ApertusError(
                "pretrain.goldfish_control: Goldfish is off (pretrain.goldfish.enabled), so "
                "a run without it controls nothing; set goldfish_control to null"
            )
        names.append(control + CONTROL_SUFFIX)
    if len(set(names)) != len(names):
        duplicated = sorted({n for n in names if names.count(n) > 1})
        raise ApertusError(f"pretrain: stage name(s) {duplicated} appear more than once")
    stages: list[PlannedStage] = []
    line: list[PlannedStage] = []  # the stages that continue each other
    for name in cfg.phases:
        previous = line[-1].name if line else None
        start = "continue" if previous else "fresh"
        line.append(PlannedStage(name, "phase", previous, start, cfg.nnodes))
        stages.append(line[-1])
        if name == control:
            stages.append(
                PlannedStage(name + CONTROL_SUFFIX, "control", previous, start, cfg.nnodes)
            )
    if not names:
        raise ApertusError(
            "pretrain.phases and pretrain.long_context are both empty: nothing to pretrain (a "
            "run that only post-trains a released checkpoint sets posttrain.init_from)"
        )
    if not cfg.phases and cfg.init_from is None:
        raise ApertusError(
            f"pretrain.phases is empty, so long-context stage {names[0]!r} comes first, but a "
            "long-context stage continues weights and there are none: add a phase, or set "
            "pretrain.init_from to the released checkpoint it starts from"
        )
    for stage in cfg.long_context:
        nnodes = cfg.nnodes if stage.nnodes is None else stage.nnodes
        # The first stage of all (no phase): from `pretrain.init_from`'s weights.
        previous = line[-1].name if line else None
        line.append(
            PlannedStage(
                stage.name, "long_context", previous, "weights", nnodes, stage.context_parallel
            )
        )
        stages.append(line[-1])
    return stages


def planned_stage(cfg: PretrainConfig, name: str) -> PlannedStage:
    """Stage `name` of the plan, or an ApertusError naming it."""
    for stage in pretrain_stages(cfg):
        if stage.name == name:
            return stage
    raise ApertusError(f"no pretraining phase or long-context stage named {name!r}")


@dataclass(frozen=True)
class PlannedPhase:
    """A data phase's share of the one WSD schedule, planned from its token budget."""

    name: str
    windows: int
    """Training windows of ``seq_len + 1`` tokens its budget holds."""
    first_step: int
    steps: int
    """The updates whose batches (the ramp's, from `first_step`) its windows fill; 0: not one."""
    batch: int
    """The global batch at its first step."""


def planned_phases(cfg: PretrainConfig, budgets: Mapping[str, int]) -> list[PlannedPhase]:
    """The phases of ``pretrain.phases`` in order, each from its tokenization budget
    (`budgets`: phase name -> tokens), before any data exists: what the config check and
    `apertus plan` count on (a phase trains at least its budget's windows once the data is
    there, `apertus.train.stage`)."""
    ramp = batch_ramp(cfg.batch_ramp, seq_len=cfg.seq_len, global_batch=cfg.global_batch)
    phases, step = [], 0
    for name in cfg.phases:
        windows = budgets[name] // (cfg.seq_len + 1)
        steps = ramp.steps_within(windows, step)
        phases.append(PlannedPhase(name, windows, step, steps, ramp.batch_at(step)))
        step += steps
    return phases
