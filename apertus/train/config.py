"""The ``pretrain:`` config section, typed once at the stage's boundary (`apertus.core.typed`):
the schema (``workflow/schemas/config.schema.yaml``) holds every default and every range; these
classes hold the shape. The settings shared with the run spec are declared once, in
`apertus.train.run_spec.TrainingSettings`, and go into each stage's `RunSpec` as they are. No torch
here: the Snakefile reads it (`apertus.train.plan`).
"""

from __future__ import annotations

from dataclasses import dataclass

from apertus.core.typed import Config
from apertus.train.run_spec import BatchRampSpec, TrainingSettings

__all__ = ["LongContextStage", "PretrainConfig", "PretrainLR"]


@dataclass(frozen=True)
class PretrainLR(Config, key="pretrain.lr"):
    """One Warmup-Stable-Decay schedule over all phases (RECIPE.md §4)."""

    peak: float
    warmup_steps: int
    decay_fraction: float
    """Share of the sequences the 1-sqrt cooldown covers, at the end of the last phase."""
    min_lr_ratio: float


@dataclass(frozen=True)
class LongContextStage(Config, key="pretrain.long_context[]"):
    """A long-context stage (RECIPE.md §6): the previous weights, a longer sequence and RoPE
    theta, a constant LR after its warmup."""

    name: str
    phase: str
    seq_len: int
    rope_theta: float
    global_batch: int
    steps: int
    lr: float
    warmup_steps: int
    nnodes: int | None = None
    """Nodes of this stage's job; None: ``pretrain.nnodes`` (the schema gives no default)."""


@dataclass(frozen=True, kw_only=True)
class PretrainConfig(TrainingSettings, Config, key="pretrain"):
    """The ``pretrain:`` section (config/README.md): the settings every stage's run spec takes
    over as they are (`TrainingSettings`: flavor, micro_batch, ademamix, grad_clip, goldfish,
    seed, dtype, compile, device, tensor_parallel; their defaults are unused, the schema's fill
    the section) and the plan of the stages."""

    seq_len: int
    global_batch: int
    batch_ramp: BatchRampSpec | None
    rope_theta: float
    lr: PretrainLR
    checkpoint_interval: int
    nproc: int
    nnodes: int
    phases: tuple[str, ...]
    long_context: tuple[LongContextStage, ...]
    goldfish_control: str | None = None
    """A phase trained a second time without Goldfish (`apertus.train.plan`); None: none."""
