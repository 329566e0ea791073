"""The ``pretrain:`` config section, typed once at the stage's boundary (`apertus.core.typed`):
the schema (``workflow/schemas/config.schema.yaml``) holds every default and every range; these
classes hold the shape. The settings shared with the run spec are declared once, in
`apertus.train.run_spec.TrainingSettings`, and go into each stage's `RunSpec` as they are. No torch
here: the Snakefile reads it (`apertus.train.plan`).
"""

from __future__ import annotations

from dataclasses import dataclass

from apertus.core import ApertusError
from apertus.core.typed import Config
from apertus.model.hf_checkpoint import InitFrom
from apertus.train.run_spec import BatchRampSpec, TrainingSettings

__all__ = ["LongContextStage", "PretrainConfig", "PretrainLR", "PretrainRestart"]


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
    context_parallel: int = 1
    """Ranks each sequence is split over (RECIPE.md §6, 8B: 1/1/2/4)."""
    activation_checkpoint: str | None = None
    """none | full | selective; None: ``pretrain.activation_checkpoint``."""


@dataclass(frozen=True)
class PretrainRestart(Config, key="pretrain.restart"):
    """A diverged stage taken up again from one of its own checkpoints (README, Troubleshooting,
    "training diverged"): the weights, AdEMAMix state, step count and data position of
    `checkpoint`, the LR schedule with the peak `lr`, in a new work directory (its key holds
    the checkpoint and the LR) whose manifest records both (``restarted_from``)."""

    stage: str
    checkpoint: str
    """A ``step-N`` checkpoint of that stage (the launcher names the last sane one)."""
    lr: float | None = None
    """The peak LR from the restart on: of this stage and, for a phase, of the phases after it
    (one WSD schedule); a long-context stage's own ``lr``. None: the configured one."""


@dataclass(frozen=True, kw_only=True)
class PretrainConfig(TrainingSettings, Config, key="pretrain"):
    """The ``pretrain:`` section (config/README.md): the settings every stage's run spec takes
    over as they are (`TrainingSettings`: flavor, micro_batch, ademamix, grad_clip, goldfish,
    seed, dtype, compile, device, tensor_parallel, wandb; their defaults are unused, the
    schema's fill the section) and the plan of the stages."""

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
    activation_checkpoint: str = "none"
    """Activation checkpointing of the phases' blocks (none | full | selective)."""
    goldfish_control: str | None = None
    """A phase trained a second time without Goldfish (`apertus.train.plan`); None: none."""
    restart: PretrainRestart | None = None
    """A diverged stage restarted from one of its checkpoints with a new LR; None: none."""
    init_from: InitFrom | None = None
    """The released checkpoint the first phase starts from; None: random weights."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.restart is None:
            return
        # The Goldfish control is not restarted: it repeats its phase's run as configured.
        names = [*self.phases, *(stage.name for stage in self.long_context)]
        if self.restart.stage not in names:
            raise ApertusError(
                f"pretrain.restart.stage {self.restart.stage!r} is not a pretraining phase or "
                f"long-context stage ({', '.join(names)})"
            )
