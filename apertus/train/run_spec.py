"""The run spec: one training run (a pretraining phase, a long-context stage or SFT), typed.

The stages build a `RunSpec` (`apertus.train.stage.run_spec`, `apertus.posttrain.sft.sft_run_spec`)
and write it as ``spec.json``; every reader (the launcher, the torchtitan entry module
`apertus.train.config_registry`, the memorization evaluation) reads it back with
`load_run_spec`. Each part checks itself on construction and names the key it refuses
(``lr.peak must be a number >= 0``), so a bad spec never reaches torchrun. No torch here: the
launcher and the Snakemake side import this module.

``spec.json`` (relative paths are taken from the working directory; the copy a stage leaves in
its output folder, a record, holds them relative to that folder instead: `RunSpec.relative_to`,
`RunSpec.resolved`)::

    {
      "flavor": "tiny",                       # apertus.model.flavors.FLAVORS
      "model_overrides": {"rope_theta": 1e6, "max_seq_len": 8192},
      "phase_dir": "results/run/tokenize/phases/phase1",
      "seq_len": 4096, "micro_batch": 1, "global_batch": 1024, "steps": 1000,
      "batch_ramp": {"global_batch": 2048, "at_tokens": 7038000000000},
      "lr": {"kind": "wsd", "peak": 1.1e-4, "warmup_steps": 100, "decay_steps": 200,
             "min_lr_ratio": 0.1, "warmup_start": 0.0},
      "ademamix": {"betas": [0.9, 0.999, 0.9999], "alpha": 8.0, "t_alpha": 100000,
                   "t_beta3": 100000, "eps": 1e-8, "weight_decay": 0.1},
      "grad_clip": 0.1,
      "goldfish": {"enabled": true, "k": 50, "h": 50},
      "checkpoint": {"folder": "ckpt", "interval": 500, "initial": null, "keep_latest": 0},
      "metrics_folder": "out",                # torchtitan's dump folder; metrics.jsonl, tb/
      "tensorboard": false,
      "wandb": {"enabled": false, "project": "apertus", "entity": null, "mode": "offline"},
      "seed": 0, "dtype": "float32", "compile": false, "device": "auto",
      "activation_checkpoint": "none",        # none | full | selective
      "tensor_parallel": 1,                   # TP degree; world_size / it ranks do FSDP
      "context_parallel": 1                   # CP degree: each sequence split over it ranks
    }

Only `flavor`, `phase_dir` (or `sft_data`), `seq_len`, `micro_batch`, `global_batch`, `steps`,
`lr.peak`, `checkpoint.folder` and `metrics_folder` are required to run (the stages place the two
folders in their work directory; a spec they build leaves them unset until then); everything else
has the recipe's pretraining value (AdEMAMix betas 0.9/0.999/0.9999, alpha 8, T = 100k, eps 1e-8,
wd 0.1; clip 0.1; Goldfish on, k = h = 50; no batch ramp; no tensor parallelism). `batch_ramp`
switches the global batch to its `global_batch` at the first step that starts with `at_tokens`
tokens seen (seq_len tokens per sequence, counted from step 0 of the schedule, so a continued phase
keeps the count; RECIPE.md §4); `steps` then counts steps of either size. `dtype` is the FSDP
compute dtype of the parameters (weights, gradient reductions and optimizer state stay float32:
BF16 with fp32 master weights). `device` "auto" takes CUDA when present. `checkpoint.initial`
starts a new stage: the weights of that checkpoint (a ``step-N`` directory, or a checkpoint folder
whose last step is taken) with a fresh optimizer, data position and schedule (``initial_mode:
weights``, the long-context stages and SFT), or the previous run's optimizer, schedule and step
count with fresh data (``continue``, the next pretraining phase), or everything, the data position
included, with this spec's LR (``restart``: a diverged run taken up again from one of its own
checkpoints with a lower LR, `pretrain.restart` in the config); it is ignored once the run's own
folder holds a checkpoint, so a restarted stage resumes from its own last step. `tensor_parallel`
splits every block over that many ranks (`apertus.model.parallelize.apply_tensor_parallel`; heads,
kv heads, MLP hidden units and vocabulary must divide by it); `context_parallel`
splits every sequence over that many ranks (`apertus.model.context_parallel`; seq_len must divide
by twice it); the world_size / (tensor_parallel x context_parallel) data-parallel ranks share out
the global batch. Checkpoints hold whole tensors, so a run can resume
with another layout. `wandb` logs the metrics to Weights & Biases as well (`WandbSpec`; off by
default, offline when on).

Supervised fine-tuning (RECIPE.md §7): `sft_data` instead of `phase_dir` names a directory
written by `apertus.posttrain.sft_data`; the run then reads one conversation per row with
completion-only labels (`apertus.train.sft_loader.SFTDataLoader`), shuffled per epoch with
`seed`, over `sft_epochs` passes (default 1; `steps * global_batch` must not exceed the rows
times the epochs); `seq_len` must be the data's `max_len`, Goldfish must be off. The recipe's
SFT values (linear LR, AdEMAMix beta3 0.999 and T = steps, no weight decay, clip 1.0) are set by
`apertus.posttrain.sft.sft_run_spec`.

QRPO (RECIPE.md §7): `qrpo` (`QRPOSpec`: beta_kl, max_beta) with `sft_data` naming a QRPO data
directory (`apertus.train.qrpo_loader`: SFT rows plus each completion's reference log-prob and
quantile reward) trains with QRPO's loss (`apertus.train.qrpo_loss`) in `apertus.train.trainer.
QRPOTrainer`; each epoch is ceil(rows / global_batch) steps, the last filled up with weight-0
rows. Set by `apertus.posttrain.qrpo_train.qrpo_run_spec`.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import os
import re
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from apertus.core import ApertusError
from apertus.core.files import (
    Checksummed,
    atomic_write_json,
    recorded_path,
    resolve_recorded,
    sha256_text,
    verify_checksums,
)
from apertus.core.typed import build, is_integer, is_number
from apertus.posttrain.sft_data import read_sft_record
from apertus.tokenize.phases import PhaseDataset
from apertus.train.schedule import BatchRamp

__all__ = [
    "INITIAL_MODES",
    "MASTER_DTYPE",
    "REDUCE_DTYPE",
    "SPEC_ENV",
    "WEIGHTS_ONLY_MODES",
    "AdEMAMixSpec",
    "BatchRampSpec",
    "CheckpointSpec",
    "GoldfishSpec",
    "LRSpec",
    "Preflight",
    "QRPOSpec",
    "RunSpec",
    "TrainingSettings",
    "WandbSpec",
    "batch_ramp",
    "check_tensor_parallel_shape",
    "checkpoint_problem",
    "checkpoint_steps",
    "load_run_spec",
    "preflight",
    "resolve_initial_checkpoint",
    "resumable_checkpoints",
    "sealed_steps",
    "set_aside",
    "set_aside_checkpoints",
    "unloadable_checkpoints",
    "wandb_run_id",
    "write_run_spec",
]

SPEC_ENV = "APERTUS_TRAIN_SPEC"
"""Names the spec.json torchtitan's trainer runs (the launcher sets it)."""
MASTER_DTYPE = "float32"
"""FSDP2's mixed precision: the sharded weights the optimizer steps, whatever `dtype` is."""
REDUCE_DTYPE = "float32"
"""... and the dtype the gradients are reduced in; `dtype` is the compute copies'."""


def _check(condition: bool, message: str) -> None:
    if not condition:
        raise ApertusError(message)


@dataclass(frozen=True)
class LRSpec:
    """The LR schedule (RECIPE.md §4, §6, §7): "wsd" or "constant" after a linear warmup, or
    "linear" (warmup, then linear decay to 0; SFT)."""

    peak: float
    kind: str = "wsd"
    warmup_steps: int = 0
    decay_steps: int = 0
    min_lr_ratio: float = 0.1
    warmup_start: float = 0.0
    total_steps: int | None = None
    """Horizon of the schedule when it spans several runs (pretraining phases continue one
    WSD schedule); None = this run's `steps`."""

    def __post_init__(self) -> None:
        _check(
            self.kind in ("wsd", "constant", "linear"),
            "lr.kind must be 'wsd' or 'constant' (pretraining) or 'linear' (SFT), got "
            f"{self.kind!r}",
        )
        _check(
            is_number(self.peak) and self.peak >= 0,
            f"lr.peak must be a number >= 0, got {self.peak!r}",
        )
        for name in ("warmup_steps", "decay_steps"):
            value = getattr(self, name)
            _check(is_integer(value) and value >= 0, f"lr.{name} must be an integer >= 0")
        for name in ("min_lr_ratio", "warmup_start"):
            value = getattr(self, name)
            _check(is_number(value) and 0 <= value <= 1, f"lr.{name} must be in [0, 1]")
        _check(
            self.total_steps is None or is_integer(self.total_steps),
            f"lr.total_steps must be an integer or null, got {self.total_steps!r}",
        )
        if self.kind == "linear":
            _check(
                self.decay_steps == 0,
                "lr.decay_steps applies to 'wsd' only; 'linear' decays from the end of the "
                "warmup to 0 at the end of the schedule",
            )


@dataclass(frozen=True)
class AdEMAMixSpec:
    """AdEMAMix hyper-parameters; defaults are pretraining's (RECIPE.md §3)."""

    betas: tuple[float, float, float] = (0.9, 0.999, 0.9999)
    alpha: float = 8.0
    t_alpha: int | None = 100_000
    t_beta3: int | None = 100_000
    eps: float = 1e-8
    weight_decay: float = 0.1

    def __post_init__(self) -> None:
        betas = self.betas
        _check(
            isinstance(betas, list | tuple)
            and len(betas) == 3
            and all(is_number(b) and 0 <= b < 1 for b in betas),
            f"ademamix.betas must be three numbers in [0, 1), got {betas!r}",
        )
        object.__setattr__(self, "betas", tuple(betas))
        for name in ("t_alpha", "t_beta3"):
            value = getattr(self, name)
            _check(
                value is None or (is_integer(value) and value > 0),
                f"ademamix.{name} must be a positive integer or null",
            )
        for name in ("alpha", "eps", "weight_decay"):
            value = getattr(self, name)
            _check(is_number(value) and value >= 0, f"ademamix.{name} must be a number >= 0")


@dataclass(frozen=True)
class GoldfishSpec:
    """Goldfish loss (RECIPE.md §2): on in pretraining and long-context stages."""

    enabled: bool = True
    k: int = 50
    h: int = 50

    def __post_init__(self) -> None:
        _check(isinstance(self.enabled, bool), "goldfish.enabled must be true or false")
        _check(
            is_integer(self.k) and self.k >= 1 and is_integer(self.h) and self.h >= 1,
            "goldfish.k and goldfish.h must be integers >= 1",
        )


# How a stage takes its checkpoint.initial (`CheckpointSpec.initial_mode`); the model-only ones.
INITIAL_MODES = ("weights", "continue", "restart", "hf")
WEIGHTS_ONLY_MODES = ("weights", "hf")


@dataclass(frozen=True)
class CheckpointSpec:
    """DCP checkpoints: saved every `interval` steps and at the end, resumed automatically;
    `initial` seeds a new stage; `keep_latest` 0 keeps every checkpoint."""

    folder: str | None = None
    """Where the run's checkpoints go; the stages place it with `RunSpec.placed`."""
    interval: int = 500
    initial: str | None = None
    keep_latest: int = 0
    initial_mode: str = "weights"
    """With `initial`: "weights" starts a new stage (fresh optimizer, schedule and data; the
    long-context stages, SFT), "continue" carries on the previous run's optimizer, schedule and
    step count with fresh data (the next pretraining phase), "restart" all of it, the data
    position included, under this spec's LR schedule (a diverged run taken up again from one of
    its own checkpoints, on the same data, with a lower LR: `pretrain.restart`), "hf" starts a
    new stage, as "weights" does, from a Hugging Face ``ApertusForCausalLM`` folder
    (`apertus.model.hf_checkpoint`: its config.json must be the flavor's shape)."""

    def __post_init__(self) -> None:
        _check(
            self.folder is None or (isinstance(self.folder, str) and bool(self.folder)),
            "checkpoint.folder must be a path",
        )
        _check(
            is_integer(self.interval) and self.interval >= 1,
            "checkpoint.interval must be an integer >= 1",
        )
        _check(
            is_integer(self.keep_latest) and (self.keep_latest == 0 or self.keep_latest >= 2),
            "checkpoint.keep_latest must be 0 (keep all) or >= 2",
        )
        _check(
            self.initial is None or isinstance(self.initial, str),
            "checkpoint.initial must be a path or null",
        )
        _check(
            self.initial_mode in INITIAL_MODES,
            "checkpoint.initial_mode must be 'weights', 'continue', 'restart' or 'hf', got "
            f"{self.initial_mode!r}",
        )


@dataclass(frozen=True)
class QRPOSpec:
    """QRPO (RECIPE.md §7) on `RunSpec.sft_data` written by
    `apertus.train.qrpo_loader.write_qrpo_data`: the loss is QRPO's regression, averaged over
    the completions of each step (`global_batch` of them, the last step of an epoch the rest)."""

    beta_kl: float = 5.0
    max_beta: float = 0.1

    def __post_init__(self) -> None:
        for name in ("beta_kl", "max_beta"):
            value = getattr(self, name)
            _check(is_number(value) and value > 0, f"qrpo.{name} must be a number > 0")


@dataclass(frozen=True)
class BatchRampSpec:
    """The global batch from the step that starts with `at_tokens` tokens seen (RECIPE.md §4)."""

    global_batch: int
    at_tokens: int

    def __post_init__(self) -> None:
        _check(
            is_integer(self.at_tokens) and self.at_tokens >= 0,
            f"batch_ramp.at_tokens must be an integer >= 0, got {self.at_tokens!r}",
        )


WANDB_INSTALL = 'pip install -e ".[wandb]"'
"""How to add wandb to the project's environment (pyproject.toml's ``wandb`` extra)."""


@dataclass(frozen=True)
class WandbSpec:
    """Weights & Biases tracking of a run (torchtitan's ``metrics.enable_wandb``, here with its
    settings in the spec; `apertus.train.metrics.WandbLogger`): the metrics of every logged
    step, under a run id derived from the run's folder (`wandb_run_id`), so a requeued or
    resumed run continues the same W&B run. ``offline`` writes the run under the metrics folder
    (``<metrics_folder>/wandb/offline-run-*``, one per start) for a later ``wandb sync``;
    ``online`` streams it (needs a W&B login and the network). It changes what is logged, not
    what is trained: it is no part of the run's name (`RunSpec.explicit`)."""

    enabled: bool = False
    project: str = "apertus"
    entity: str | None = None
    """The W&B user or team; None: the login's default entity."""
    mode: str = "offline"

    def __post_init__(self) -> None:
        _check(isinstance(self.enabled, bool), "wandb.enabled must be true or false")
        _check(
            isinstance(self.project, str) and bool(self.project),
            f"wandb.project must be a non-empty string, got {self.project!r}",
        )
        _check(
            self.entity is None or (isinstance(self.entity, str) and bool(self.entity)),
            f"wandb.entity must be a non-empty string or null, got {self.entity!r}",
        )
        _check(
            self.mode in ("offline", "online"),
            f"wandb.mode must be 'offline' or 'online', got {self.mode!r}",
        )


def wandb_run_id(metrics_folder: str | os.PathLike[str]) -> str:
    """The W&B run id of the run whose metrics go to `metrics_folder`: its work directory's
    name (``<stage>-<16 hex key>`` for the stages, whose key hashes everything the run depends
    on) and a hash of the folder's absolute path (the same config in two results folders gives
    two runs). The same on every start of the run, so a requeue or resume continues its W&B
    run; a results folder moved elsewhere starts a new one."""
    folder = Path(metrics_folder).absolute()
    # W&B refuses ids holding any of :;,#?/' (wandb_settings.validate_run_id).
    name = re.sub(r"[^A-Za-z0-9._-]", "_", folder.parent.name)[:64]
    return f"{name}-{sha256_text(str(folder))[:8]}"


def batch_ramp(ramp: BatchRampSpec | None, *, seq_len: int, global_batch: int) -> BatchRamp:
    """The global batch of every step: `global_batch` sequences of `seq_len` tokens, then
    `ramp`'s from its token count on (constant without a ramp; RECIPE.md §4)."""
    if ramp is None:
        return BatchRamp.constant(global_batch)
    return BatchRamp.at_tokens(
        seq_len=seq_len, start_batch=global_batch, batch=ramp.global_batch, tokens=ramp.at_tokens
    )


@dataclass(frozen=True, kw_only=True)
class TrainingSettings:
    """The settings a training stage's config and its run spec share, declared once: the
    ``pretrain:`` section (`apertus.train.config.PretrainConfig`) holds them as they are and
    each stage's `RunSpec` takes them over. A new setting of this kind is a field here with its
    check, its key in the schema, and its use in `apertus.train.config_registry`."""

    flavor: str
    micro_batch: int
    ademamix: AdEMAMixSpec = field(default_factory=AdEMAMixSpec)
    grad_clip: float = 0.1
    goldfish: GoldfishSpec = field(default_factory=GoldfishSpec)
    seed: int = 0
    dtype: str = "float32"
    compile: bool = False
    device: str = "auto"
    tensor_parallel: int = 1
    """Tensor-parallel degree: each block's heads, MLP hidden units and the vocabulary are
    split over this many ranks; the ranks divide into world_size / tensor_parallel
    data-parallel (FSDP) groups, which share out the batch."""
    wandb: WandbSpec = field(default_factory=WandbSpec)

    def __post_init__(self) -> None:
        _check(
            isinstance(self.flavor, str) and bool(self.flavor), "flavor must be a non-empty string"
        )
        _check(
            is_integer(self.micro_batch) and self.micro_batch > 0,
            f"micro_batch must be a positive integer, got {self.micro_batch!r}",
        )
        _check(is_number(self.grad_clip) and self.grad_clip > 0, "grad_clip must be > 0")
        _check(is_integer(self.seed) and self.seed >= 0, "seed must be an integer >= 0")
        _check(
            self.dtype in ("float32", "bfloat16"),
            f"dtype must be 'float32' or 'bfloat16', got {self.dtype!r}",
        )
        _check(isinstance(self.compile, bool), "compile must be true or false")
        _check(
            self.device in ("auto", "cpu", "cuda"),
            f"device must be 'auto', 'cpu' or 'cuda', got {self.device!r}",
        )
        _check(
            is_integer(self.tensor_parallel) and self.tensor_parallel >= 1,
            f"tensor_parallel must be an integer >= 1, got {self.tensor_parallel!r}",
        )

    def settings(self) -> dict[str, Any]:
        """These settings by name (to build a `RunSpec` from a config holding them)."""
        return {f.name: getattr(self, f.name) for f in fields(TrainingSettings)}


@dataclass(frozen=True, kw_only=True)
class RunSpec(TrainingSettings):
    """One training run (see the module doc). Exactly one of `phase_dir` and `sft_data` names
    the data."""

    seq_len: int
    global_batch: int
    steps: int
    lr: LRSpec
    checkpoint: CheckpointSpec = field(default_factory=CheckpointSpec)
    metrics_folder: str | None = None
    """torchtitan's dump folder (metrics.jsonl, tb/); the stages place it with `placed`."""
    phase_dir: str | None = None
    """A data phase (apertus.tokenize.phases): pretraining and long-context stages."""
    sft_data: str | None = None
    """An SFT data directory (apertus.posttrain.sft_data): supervised fine-tuning."""
    sft_epochs: int = 1
    """Passes over the SFT rows (RECIPE.md §7: 1)."""
    qrpo: QRPOSpec | None = None
    """QRPO instead of SFT on `sft_data` (a QRPO data directory; RECIPE.md §7)."""
    model_overrides: dict[str, Any] = field(default_factory=dict)
    tensorboard: bool = False
    activation_checkpoint: str = "none"
    context_parallel: int = 1
    """Context-parallel degree (`apertus.model.context_parallel`): each sequence is split over
    this many ranks, which train on the same sequences; world_size / (tensor_parallel x it)
    data-parallel ranks share out the batch."""
    batch_ramp: BatchRampSpec | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        _check(
            self.metrics_folder is None
            or (isinstance(self.metrics_folder, str) and bool(self.metrics_folder)),
            "metrics_folder must be a path",
        )
        _check(
            (self.phase_dir is None) != (self.sft_data is None),
            "give exactly one of phase_dir (pretraining data) and sft_data (SFT data)",
        )
        for name in ("phase_dir", "sft_data"):
            value = getattr(self, name)
            _check(
                value is None or (isinstance(value, str) and bool(value)),
                f"{name} must be a non-empty string or null",
            )
        _check(
            is_integer(self.sft_epochs) and self.sft_epochs >= 1,
            f"sft_epochs must be a positive integer, got {self.sft_epochs!r}",
        )
        if self.sft_data is not None:
            _check(
                not self.goldfish.enabled,
                "goldfish is not applied to SFT data (RECIPE.md §2, §7); set goldfish.enabled "
                "false",
            )
        else:
            _check(self.sft_epochs == 1, "sft_epochs applies to sft_data only")
            _check(self.qrpo is None, "qrpo needs its data in sft_data")
        if self.qrpo is not None:
            _check(
                self.context_parallel == 1 and self.batch_ramp is None,
                "qrpo runs without context_parallel and batch_ramp",
            )
        for name in ("seq_len", "global_batch", "steps"):
            value = getattr(self, name)
            _check(
                is_integer(value) and value > 0, f"{name} must be a positive integer, got {value!r}"
            )
        _check(
            self.global_batch % self.micro_batch == 0,
            f"global_batch {self.global_batch} is not a multiple of micro_batch {self.micro_batch}",
        )
        ramp = self.batch_ramp
        if ramp is not None:
            _check(
                is_integer(ramp.global_batch) and ramp.global_batch % self.micro_batch == 0,
                f"batch_ramp.global_batch must be a multiple of micro_batch {self.micro_batch}, "
                f"got {ramp.global_batch!r}",
            )
        _check(isinstance(self.model_overrides, dict), "model_overrides must be an object")
        self._check_schedule()
        _check(isinstance(self.tensorboard, bool), "tensorboard must be true or false")
        _check(
            self.activation_checkpoint in ("none", "full", "selective"),
            "activation_checkpoint must be 'none', 'full' or 'selective'",
        )
        _check(
            is_integer(self.context_parallel) and self.context_parallel >= 1,
            f"context_parallel must be an integer >= 1, got {self.context_parallel!r}",
        )
        if self.context_parallel > 1:
            from apertus.model.context_parallel import context_parallel_problems

            for problem in context_parallel_problems(self.seq_len, self.context_parallel):
                _check(False, problem)

    def _check_schedule(self) -> None:
        lr = self.lr
        horizon = self.horizon
        _check(
            horizon >= self.steps,
            f"lr.total_steps must be an integer >= steps ({self.steps}), got {lr.total_steps!r}",
        )
        if lr.kind == "wsd":
            _check(
                lr.warmup_steps + lr.decay_steps <= horizon,
                f"lr.warmup_steps + lr.decay_steps ({lr.warmup_steps} + {lr.decay_steps}) "
                f"exceed the schedule's {horizon} steps",
            )
        if lr.kind == "linear":
            _check(
                lr.warmup_steps <= horizon,
                f"lr.warmup_steps ({lr.warmup_steps}) exceed the schedule's {horizon} steps",
            )

    @property
    def horizon(self) -> int:
        """Steps of the LR schedule (`lr.total_steps`, or this run's `steps`)."""
        return self.steps if self.lr.total_steps is None else self.lr.total_steps

    def ramp(self) -> BatchRamp:
        """The global batch of every step (constant without `batch_ramp`)."""
        return batch_ramp(self.batch_ramp, seq_len=self.seq_len, global_batch=self.global_batch)

    def first_step(self) -> int:
        """The step this run starts after: a continued or restarted run (``initial_mode:
        continue`` or ``restart``) starts at its initial checkpoint's step (read from the
        ``step-N`` name; a checkpoint folder is resolved to its last step), any other run at
        0."""
        ckpt = self.checkpoint
        if ckpt.initial is None or ckpt.initial_mode in WEIGHTS_ONLY_MODES:
            return 0
        match = _STEP_DIR.match(Path(ckpt.initial).name)
        if match is None:
            match = _STEP_DIR.match(resolve_initial_checkpoint(ckpt.initial).name)
        return int(match.group(1)) if match else 0

    def placed(self, work: Path) -> RunSpec:
        """This spec with its checkpoints in ``work/ckpt`` and its metrics in ``work/out``."""
        return replace(
            self,
            checkpoint=replace(self.checkpoint, folder=str(work / "ckpt")),
            metrics_folder=str(work / "out"),
        )

    def _with_paths(self, change) -> RunSpec:
        """This spec with `change` applied to each of its paths that is set."""

        def changed(value: str | None) -> str | None:
            return None if value is None else change(value)

        return replace(
            self,
            phase_dir=changed(self.phase_dir),
            sft_data=changed(self.sft_data),
            metrics_folder=changed(self.metrics_folder),
            checkpoint=replace(
                self.checkpoint,
                folder=changed(self.checkpoint.folder),
                initial=changed(self.checkpoint.initial),
            ),
        )

    def relative_to(self, base: str | os.PathLike[str]) -> RunSpec:
        """This spec with its paths (data, checkpoint folder and initial checkpoint, metrics
        folder) relative to folder `base` (`apertus.core.files.recorded_path`): how the copy
        of the spec in a stage's output folder records them, and how the stages hash them into
        their work directory's name, so that neither changes when the results folder moves."""
        return self._with_paths(lambda path: recorded_path(path, base))

    def resolved(self, base: str | os.PathLike[str]) -> RunSpec:
        """The spec a record in folder `base` holds (`relative_to`), with its relative paths
        joined to `base` again."""
        return self._with_paths(lambda path: str(resolve_recorded(path, base)))

    def explicit(self) -> dict[str, Any]:
        """The fields that differ from their defaults, nested parts likewise: what names this
        run (the stages hash it into their work directory's name), unchanged when a field with
        a default is added to the spec, a folder is placed or `wandb` is set."""
        unplaced = replace(
            self,
            checkpoint=replace(self.checkpoint, folder=None),
            metrics_folder=None,
            # Tracking changes what is logged, not what is trained: turning it on resumes.
            wandb=WandbSpec(),
        )
        return _explicit(unplaced)

    def as_dict(self) -> dict[str, Any]:
        """The spec as spec.json holds it (`from_dict` reads it back to an equal spec)."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: Any, where: str = "run spec") -> RunSpec:
        """A spec from its JSON form (`apertus.core.typed.build`: unknown, missing and
        mistyped keys refused); an ApertusError names `where` and the bad key."""
        return build(cls, data, label=where)


def _explicit(spec: Any) -> dict[str, Any]:
    """`spec`'s fields that differ from their defaults (nested dataclasses recursively)."""
    found: dict[str, Any] = {}
    for f in fields(spec):
        value = getattr(spec, f.name)
        if f.default is not dataclasses.MISSING:
            default = f.default
        elif f.default_factory is not dataclasses.MISSING:
            default = f.default_factory()
        else:
            default = dataclasses.MISSING
        if dataclasses.is_dataclass(value):
            value = _explicit(value)
            default = _explicit(default) if dataclasses.is_dataclass(default) else default
        if value != default:
            found[f.name] = value
    return found


def load_run_spec(path: str | os.PathLike[str]) -> RunSpec:
    """Read and check a spec.json; every problem is an ApertusError naming the file."""
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ApertusError(f"run spec {path} not found") from None
    except (OSError, ValueError) as e:
        raise ApertusError(f"run spec {path}: unreadable: {e}") from None
    return RunSpec.from_dict(data, f"run spec {path}")


def write_run_spec(path: str | os.PathLike[str], spec: RunSpec) -> Path:
    """Write `spec` as JSON to `path` (atomically)."""
    return atomic_write_json(path, spec.as_dict())


_STEP_DIR = re.compile(r"^step-(\d+)$")
CHECKPOINT_CHECKSUMS = "checksums.json"
"""In each ``step-N`` checkpoint: the sha256 and size of its every file (DCP's ``.distcp`` files,
which hold the loader state too, and ``.metadata``), written by the trainer once DCP's save has
finished (`apertus.train.checkpoint`), checked before anything loads it."""


def checkpoint_files(step_dir: Path) -> list[str]:
    """The files of a ``step-N`` checkpoint its checksums cover (all but the checksums file)."""
    return sorted(
        p.relative_to(step_dir).as_posix()
        for p in step_dir.rglob("*")
        if p.is_file() and p.name != CHECKPOINT_CHECKSUMS
    )


def checksum_problem(step_dir: Path) -> str | None:
    """Why the files of `step_dir` are not the ones its checksums.json records (missing: the
    save did not finish; a file missing, extra, resized, or with another sha256), or None. Hashes
    every file, a few at a time."""
    path = step_dir / CHECKPOINT_CHECKSUMS
    if not path.is_file():
        return (
            f"it has no {CHECKPOINT_CHECKSUMS} (its save did not finish, or an older version "
            "wrote it): its bytes cannot be verified"
        )
    try:
        recorded = json.loads(path.read_text(encoding="utf-8"))["files"]
        files = [
            Checksummed(step_dir / name, str(entry["sha256"]), int(entry["bytes"]))
            for name, entry in sorted(recorded.items())
        ]
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
        return f"its {CHECKPOINT_CHECKSUMS} is unreadable ({type(e).__name__}: {e})"
    extra = sorted(set(checkpoint_files(step_dir)) - set(recorded))
    if extra:
        return f"{extra[0]} is not in its {CHECKPOINT_CHECKSUMS}"
    try:
        verify_checksums(files, f"checkpoint {step_dir.name}")
    except ApertusError as e:
        return str(e).split(": the file is corrupt")[0]
    return None


def checkpoint_problem(step_dir: str | os.PathLike[str]) -> str | None:
    """Why the DCP checkpoint `step_dir` cannot be loaded (its ``.metadata`` does not unpickle,
    a data file it lists is missing or shorter than the bytes it records there, or a file's bytes
    differ from its checksums.json: `checksum_problem`), or None. Reads the metadata, then hashes
    every file."""
    from torch.distributed.checkpoint import FileSystemReader

    step_dir = Path(step_dir)
    try:
        metadata = FileSystemReader(str(step_dir)).read_metadata()
    except Exception as e:  # pickle raises many kinds on a truncated or garbled file
        return f"its .metadata does not load ({type(e).__name__}: {e})"
    needed: dict[str, int] = {}
    for info in (metadata.storage_data or {}).values():
        end = info.offset + info.length
        needed[info.relative_path] = max(needed.get(info.relative_path, 0), end)
    for name, end in sorted(needed.items()):
        data = step_dir / name
        if not data.is_file():
            return f"{name}, listed in its .metadata, is missing"
        size = data.stat().st_size
        if size < end:
            return f"{name} holds {size} bytes, its .metadata records {end}"
    return checksum_problem(step_dir)


def _complete_steps(folder: Path) -> dict[int, Path]:
    if not folder.is_dir():
        return {}
    found = {}
    for child in folder.iterdir():
        match = _STEP_DIR.match(child.name)
        if match and (child / ".metadata").is_file():
            found[int(match.group(1))] = child
    return dict(sorted(found.items()))


def sealed_steps(folder: str | os.PathLike[str]) -> dict[int, Path]:
    """The complete ``step-N`` checkpoints of a folder whose save was sealed (its checksums.json
    is there), step -> directory, without reading their bytes: what a stopped or finished run
    names as its last checkpoint. Which of them loads is the resume's check
    (`resumable_checkpoints`, hashing each newest first); at 8B a checkpoint is ~100 GB."""
    return {
        step: path
        for step, path in _complete_steps(Path(folder)).items()
        if (path / CHECKPOINT_CHECKSUMS).is_file()
    }


CORRUPT_FOLDER = "corrupt"
"""Where, inside a checkpoint folder, a resumed run moves the checkpoints it cannot load (a name
torchtitan's ``step-N`` scans, for loading and for purging old ones, do not match)."""
SET_ASIDE_NOTE = "set-aside.txt"
_ASIDE_DIR = re.compile(r"^step-(\d+)(?:\.\d+)?$")


def set_aside(step_dir: Path, problem: str) -> Path:
    """Move a checkpoint that cannot be loaded to ``<folder>/corrupt/`` (kept for a look, out of
    resuming's and purging's way), with `problem` in its ``set-aside.txt``; returns where it
    went."""
    target_folder = step_dir.parent / CORRUPT_FOLDER
    target_folder.mkdir(exist_ok=True)
    target, copy = target_folder / step_dir.name, 1
    while target.exists():
        target, copy = target_folder / f"{step_dir.name}.{copy}", copy + 1
    step_dir.rename(target)
    (target / SET_ASIDE_NOTE).write_text(f"{problem}\n", encoding="utf-8")
    return target


def set_aside_checkpoints(folder: str | os.PathLike[str]) -> dict[Path, tuple[int, str]]:
    """The checkpoints `set_aside` moved out of a folder: directory -> (its step, why)."""
    found = {}
    corrupt = Path(folder) / CORRUPT_FOLDER
    for child in sorted(corrupt.iterdir()) if corrupt.is_dir() else []:
        match = _ASIDE_DIR.match(child.name)
        if match:
            note = child / SET_ASIDE_NOTE
            why = note.read_text(encoding="utf-8").strip() if note.is_file() else "unknown"
            found[child] = (int(match.group(1)), why)
    return found


def unloadable_checkpoints(folder: str | os.PathLike[str]) -> dict[int, tuple[Path, str]]:
    """The complete ``step-N`` checkpoints of a folder newer than its newest loadable one (all of
    them when none loads): step -> (directory, what is wrong, `checkpoint_problem`). A run
    resuming from the folder must not pick these (e.g. a node died while the file system
    flushed the last one)."""
    bad = {}
    for step, path in sorted(_complete_steps(Path(folder)).items(), reverse=True):
        problem = checkpoint_problem(path)
        if problem is None:
            break
        bad[step] = (path, problem)
    return dict(sorted(bad.items()))


def resumable_checkpoints(
    folder: str | os.PathLike[str],
) -> tuple[dict[int, Path], dict[int, tuple[Path, str]]]:
    """`checkpoint_steps` of a folder and the `unloadable_checkpoints` it left out, from one
    scan."""
    folder = Path(folder)
    bad = unloadable_checkpoints(folder)
    return {s: p for s, p in _complete_steps(folder).items() if s not in bad}, bad


def checkpoint_steps(folder: str | os.PathLike[str]) -> dict[int, Path]:
    """The checkpoints a run resumes from: step -> ``step-N`` directory of a checkpoint folder,
    each complete (DCP's ``.metadata``, written last, is there) and none newer than the newest
    loadable one (checked newest first, `unloadable_checkpoints`; the older ones are not read)."""
    return resumable_checkpoints(folder)[0]


def resolve_initial_checkpoint(path: str | os.PathLike[str]) -> Path:
    """A ``step-N`` directory, or the last complete step of a checkpoint folder, as an absolute
    path (torchtitan requires one). An unloadable one is an error, not skipped: it is another
    run's result, and seeding from an older step would change this run silently."""
    path = Path(path).absolute()
    if (path / ".metadata").is_file():
        problem = checkpoint_problem(path)
        if problem is not None:
            raise ApertusError(f"checkpoint.initial {path} cannot be loaded: {problem}")
        return path
    bad = unloadable_checkpoints(path)
    if bad:
        step_dir, problem = bad[max(bad)]
        raise ApertusError(
            f"checkpoint.initial {path}: its last checkpoint {step_dir} cannot be loaded: "
            f"{problem}; re-run the stage that wrote it, or move that step aside to start "
            "from the one before"
        )
    steps = _complete_steps(path)  # none unloadable (above): all of them resume-worthy
    if not steps:
        raise ApertusError(
            f"checkpoint.initial {path}: neither a DCP checkpoint (no .metadata) nor a folder "
            "holding step-N checkpoints"
        )
    return steps[max(steps)]


@dataclass(frozen=True)
class Preflight:
    """What `preflight` found: the data's record (a phase's phase.json, or an SFT directory's
    sft.json) and the initial checkpoint to load (if any)."""

    phase_dir: Path | None
    phase: dict[str, Any] | None
    initial_checkpoint: Path | None
    sft_data: Path | None = None
    sft: dict[str, Any] | None = None

    @property
    def data_dir(self) -> Path:
        """The run's data directory (the phase or the SFT data)."""
        directory = self.sft_data if self.sft_data is not None else self.phase_dir
        assert directory is not None
        return directory

    @property
    def vocab_size(self) -> int:
        """Token ids the data was written with."""
        record = self.sft if self.sft is not None else self.phase
        assert record is not None
        return int(record["vocab_size"])


def preflight(spec: RunSpec, *, world_size: int) -> Preflight:
    """The checks before any rank starts: the phase exists and holds the run's windows (SFT:
    the SFT data exists, was made for `seq_len`, and its rows times `sft_epochs` cover the
    run's sequences), the ranks split into `tensor_parallel` groups whose heads, MLP and
    vocabulary divide by it, the global batch splits over the world_size / tensor_parallel
    data-parallel ranks, and `checkpoint.initial` names a checkpoint (only looked at while the
    run's own folder holds none). The launcher runs them before torchrun. Only the
    tensor-parallel shape check imports torch (the model flavors), and only when
    `tensor_parallel` > 1. With `wandb` on, the wandb package must be installed.

    A continued run (``initial_mode: continue``) starts at the initial checkpoint's step with
    its own data from the start, so it needs windows for the steps after that one only. A
    restarted one (``restart``) takes up the checkpoint's data position in the same phase,
    checked here only for the steps left (its loader refuses another phase's position).
    """
    for key, value in (
        ("checkpoint.folder", spec.checkpoint.folder),
        ("metrics_folder", spec.metrics_folder),
    ):
        if value is None:
            raise ApertusError(
                f"{key} is not set: a run needs its checkpoint and metrics folders (the stages "
                "place them in their work directory)"
            )
    if spec.wandb.enabled and importlib.util.find_spec("wandb") is None:
        raise ApertusError(
            "wandb.enabled is true but the wandb package is not installed; install the "
            f"project's wandb extra ({WANDB_INSTALL}) or set wandb.enabled false"
        )
    sft_dir = sft = phase_dir = record = None
    if spec.sft_data is not None:
        sft_dir = Path(spec.sft_data).absolute()
        sft = read_sft_record(sft_dir)
        if spec.qrpo is not None and not sft.get("qrpo"):
            raise ApertusError(
                f"{sft_dir}: SFT data, not QRPO data (apertus.train.qrpo_loader.write_qrpo_data)"
            )
        if sft["max_len"] != spec.seq_len:
            raise ApertusError(
                f"{sft_dir}: rows were made for max_len {sft['max_len']}, the run's seq_len is "
                f"{spec.seq_len}; they must be equal"
            )
    else:
        assert spec.phase_dir is not None
        phase_dir = Path(spec.phase_dir).absolute()
        # Opening checks what is cheap before any rank starts: the index's and the planned
        # shards' sizes and block-checksum sidecars (the blocks are checked as they are read).
        record = PhaseDataset(phase_dir).meta
    tp, cp = spec.tensor_parallel, spec.context_parallel
    if world_size % (tp * cp):
        split = f"tensor_parallel {tp}" + (f" x context_parallel {cp}" if cp > 1 else "")
        raise ApertusError(f"{split} does not divide the {world_size} rank(s) of the run")
    if tp > 1:
        check_tensor_parallel_shape(spec, tp)
    data_parallel = world_size // (tp * cp)
    per_step = spec.micro_batch * data_parallel
    ramp = spec.ramp()
    for batch in sorted({ramp.start_batch, ramp.batch}):
        if batch % per_step:
            ranks = f"{data_parallel} rank(s)"
            if tp * cp > 1:
                ranks = (
                    f"{data_parallel} data-parallel rank(s) ({world_size} ranks / "
                    + " x ".join(
                        f"{name} {degree}"
                        for name, degree in (("tensor_parallel", tp), ("context_parallel", cp))
                        if degree > 1
                    )
                    + ")"
                )
            raise ApertusError(
                f"global batch {batch} is not divisible by micro_batch {spec.micro_batch} x {ranks}"
            )
    initial = None
    if spec.checkpoint.initial is not None and not checkpoint_steps(
        Path(spec.checkpoint.folder).absolute()
    ):
        if spec.checkpoint.initial_mode == "hf":
            from apertus.model.hf_checkpoint import check_hf_checkpoint

            where = f"checkpoint.initial {spec.checkpoint.initial}"
            try:
                checkpoint = check_hf_checkpoint(
                    spec.checkpoint.initial, spec.flavor, spec.model_overrides
                )
            except ApertusError as e:
                raise ApertusError(f"{where}: {e}") from None
            initial = checkpoint.folder
        else:
            initial = resolve_initial_checkpoint(spec.checkpoint.initial)
    first_step = spec.first_step()
    if first_step >= spec.steps:
        raise ApertusError(
            f"steps {spec.steps} must exceed the step of the checkpoint it "
            f"{spec.checkpoint.initial_mode}s from, {first_step}"
        )
    needed = ramp.sequences(first_step, spec.steps)
    if sft is not None:
        examples = sft["examples"]
        if spec.qrpo is not None:  # the last step of an epoch is filled up (qrpo_loader)
            examples = -(-examples // spec.global_batch) * spec.global_batch
        samples = examples * spec.sft_epochs
        if samples < needed:
            raise ApertusError(
                f"{sft_dir}: {sft['examples']} rows x {spec.sft_epochs} epoch(s) = {samples} "
                f"samples, the run needs {needed} sequences for steps {first_step + 1}-"
                f"{spec.steps}; lower steps or global_batch, or raise sft_epochs"
            )
        return Preflight(None, None, initial, sft_dir, sft)
    assert record is not None
    windows = record["tokens_planned"] // (spec.seq_len + 1)
    if windows < needed:
        raise ApertusError(
            f"{phase_dir}: {windows} windows of {spec.seq_len + 1} tokens, the run needs "
            f"{needed} sequences for steps {first_step + 1}-{spec.steps}"
        )
    return Preflight(phase_dir, record, initial)


def data_files(checked: Preflight) -> list[Checksummed]:
    """The SFT (or QRPO) data's arrays a run reads, with the checksums sft.json gives them (a
    phase's files need none: its reader checks every block it reads)."""
    assert checked.sft is not None and checked.sft_data is not None
    return [
        Checksummed(checked.sft_data / name, entry["sha256"], entry["bytes"])
        for name, entry in sorted(checked.sft["files"].items())
    ]


def check_tensor_parallel_shape(spec: RunSpec, tp: int) -> None:
    """The flavor (with its overrides) splits into `tp` tensor-parallel ranks, or an
    ApertusError naming the spec keys and the numbers that do not divide."""
    from apertus.model.flavors import flavor
    from apertus.model.parallelize import tensor_parallel_problems

    problems = tensor_parallel_problems(flavor(spec.flavor, **spec.model_overrides), tp)
    if problems:
        raise ApertusError(
            f"tensor_parallel {tp} does not fit flavor {spec.flavor!r}: " + "; ".join(problems)
        )
