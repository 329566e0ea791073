"""Run settings -> torchtitan `Trainer.Config` for training Apertus: pretraining, long-context
stages and supervised fine-tuning (RECIPE.md §1-§4, §6, §7).

torchtitan 0.3.0 runs ``torchrun ... -m torchtitan.train --module apertus.train.config_registry
--config from_spec``: it imports this module and calls `from_spec()`, which reads the run spec
(JSON) named by the environment variable ``APERTUS_TRAIN_SPEC`` and returns a complete
`Trainer.Config`; torchtitan's command-line overrides (``--training.steps 10`` ...) still apply on
top. `apertus.train.launch` sets the variable and runs that command.

The run spec (`RunSpec`; relative paths are taken from the working directory)::

    {
      "flavor": "tiny",                       # apertus.model.config_registry.FLAVORS
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
      "seed": 0, "dtype": "float32", "compile": false, "device": "auto",
      "activation_checkpoint": "none",
      "tensor_parallel": 1                    # TP degree; world_size / it ranks do FSDP
    }

Only `flavor`, `phase_dir` (or `sft_data`), `seq_len`, `micro_batch`, `global_batch`, `steps`,
`lr.peak`, `checkpoint.folder` and `metrics_folder` are required; everything else has the
recipe's pretraining value
(AdEMAMix betas 0.9/0.999/0.9999, alpha 8, T = 100k, eps 1e-8, wd 0.1; clip 0.1; Goldfish on,
k = h = 50; no batch ramp; no tensor parallelism). `batch_ramp` switches the global batch to
its `global_batch` at the first step that starts with `at_tokens` tokens seen (seq_len tokens per
sequence, counted from step 0 of the schedule, so a continued phase keeps the count; RECIPE.md
§4); `steps` then counts steps of either size. `dtype` is the FSDP compute dtype of the
parameters (weights, gradient reductions and optimizer state stay float32: BF16 with fp32 master
weights). `device` "auto" takes CUDA when present. `checkpoint.initial` starts a new stage: the
weights of that checkpoint (a ``step-N`` directory, or a checkpoint folder whose last step is
taken) with a fresh optimizer, data position and schedule; it is ignored once the run's own
folder holds a checkpoint, so a restarted stage resumes from its own last step.
`tensor_parallel` splits every block over that many ranks (`torchtitan_spec.apply_tensor_parallel`;
heads, kv heads, MLP hidden units and vocabulary must divide by it); the world_size /
tensor_parallel data-parallel ranks share out the global batch. Checkpoints hold whole tensors,
so a run can resume with another layout.

Supervised fine-tuning (RECIPE.md §7): `sft_data` instead of `phase_dir` names a directory
written by `apertus.posttrain.sft_data`; the run then reads one conversation per row with
completion-only labels (`apertus.train.sft_loader.SFTDataLoader`), shuffled per epoch with
`seed`, over `sft_epochs` passes (default 1; `steps * global_batch` must not exceed the rows
times the epochs); `seq_len` must be the data's `max_len`, Goldfish must be off
(``"goldfish": {"enabled": false}``). The recipe's SFT settings are spec values: ``"lr":
{"kind": "linear", "peak": ..., "warmup_steps": ceil(0.03 * steps)}`` (linear warmup, linear
decay to 0; `schedule.linear_lr`), ``"ademamix": {"betas": [0.9, 0.999, 0.999], "alpha": 8,
"t_alpha": steps, "t_beta3": steps, "weight_decay": 0}``, ``"grad_clip": 1.0``, and
``"checkpoint": {"initial": <the last stage's checkpoint>, "initial_mode": "weights"}``.

CPU (PLATFORM.md): the device type is set to "cpu", the missing
`torch.distributed.set_timeout` is mapped, attention uses SDPA with a dense block-causal mask,
FSDP reduces with SUM, the SPMD backend is "partial_dtensor", CUDA graphs are off and the
weights are initialised identically for any number of ranks (`torchtitan_spec`).
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import MISSING, dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from apertus.core import ApertusError
from apertus.posttrain.sft_data import read_sft_record
from apertus.tokenize.phases import PHASE_FILE
from apertus.train.schedule import BatchRamp

__all__ = [
    "SPEC_ENV",
    "STOPPED_FILE",
    "STOP_AT_ENV",
    "AdEMAMixSpec",
    "BatchRampSpec",
    "CheckpointSpec",
    "GoldfishSpec",
    "LRSpec",
    "Preflight",
    "RunSpec",
    "check_tensor_parallel_shape",
    "checkpoint_steps",
    "from_spec",
    "load_run_spec",
    "preflight",
    "read_phase_record",
    "read_sft_record",
    "resolve_initial_checkpoint",
    "trainer_config",
]

SPEC_ENV = "APERTUS_TRAIN_SPEC"
# Epoch seconds after which training saves a checkpoint and stops (the launcher sets it in a
# SLURM job), and the file rank 0 then writes into the dump folder for the launcher to read.
STOP_AT_ENV = "APERTUS_STOP_AT"
STOPPED_FILE = "stopped.txt"


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


@dataclass(frozen=True)
class AdEMAMixSpec:
    """AdEMAMix hyper-parameters; defaults are pretraining's (RECIPE.md §3)."""

    betas: tuple[float, float, float] = (0.9, 0.999, 0.9999)
    alpha: float = 8.0
    t_alpha: int | None = 100_000
    t_beta3: int | None = 100_000
    eps: float = 1e-8
    weight_decay: float = 0.1


@dataclass(frozen=True)
class GoldfishSpec:
    """Goldfish loss (RECIPE.md §2): on in pretraining and long-context stages."""

    enabled: bool = True
    k: int = 50
    h: int = 50


@dataclass(frozen=True)
class CheckpointSpec:
    """DCP checkpoints: saved every `interval` steps and at the end, resumed automatically;
    `initial` seeds a new stage with weights only; `keep_latest` 0 keeps every checkpoint."""

    folder: str
    interval: int = 500
    initial: str | None = None
    keep_latest: int = 0
    initial_mode: str = "weights"
    """With `initial`: "weights" starts a new stage (fresh optimizer, schedule and data; the
    long-context stages), "continue" carries on the previous run's optimizer, schedule and step
    count with fresh data (the next pretraining phase)."""


@dataclass(frozen=True)
class BatchRampSpec:
    """The global batch from the step that starts with `at_tokens` tokens seen (RECIPE.md §4)."""

    global_batch: int
    at_tokens: int


@dataclass(frozen=True)
class RunSpec:
    """One training run (a pretraining phase, a long-context stage or SFT); see the module
    doc. Exactly one of `phase_dir` and `sft_data` names the data."""

    flavor: str
    seq_len: int
    micro_batch: int
    global_batch: int
    steps: int
    lr: LRSpec
    checkpoint: CheckpointSpec
    metrics_folder: str
    phase_dir: str | None = None
    """A data phase (apertus.tokenize.phases): pretraining and long-context stages."""
    sft_data: str | None = None
    """An SFT data directory (apertus.posttrain.sft_data): supervised fine-tuning."""
    sft_epochs: int = 1
    """Passes over the SFT rows (RECIPE.md §7: 1)."""
    model_overrides: dict[str, Any] = field(default_factory=dict)
    ademamix: AdEMAMixSpec = field(default_factory=AdEMAMixSpec)
    grad_clip: float = 0.1
    goldfish: GoldfishSpec = field(default_factory=GoldfishSpec)
    tensorboard: bool = False
    seed: int = 0
    dtype: str = "float32"
    compile: bool = False
    device: str = "auto"
    activation_checkpoint: str = "none"
    batch_ramp: BatchRampSpec | None = None
    tensor_parallel: int = 1
    """Tensor-parallel degree: each block's heads, MLP hidden units and the vocabulary are
    split over this many ranks; the ranks divide into world_size / tensor_parallel
    data-parallel (FSDP) groups, which share out the batch."""

    def ramp(self) -> BatchRamp:
        """The global batch of every step (constant without `batch_ramp`)."""
        if self.batch_ramp is None:
            return BatchRamp.constant(self.global_batch)
        return BatchRamp.at_tokens(
            seq_len=self.seq_len,
            start_batch=self.global_batch,
            batch=self.batch_ramp.global_batch,
            tokens=self.batch_ramp.at_tokens,
        )


# Fields of RunSpec that are objects of their own.
_NESTED = {
    "lr": LRSpec,
    "ademamix": AdEMAMixSpec,
    "goldfish": GoldfishSpec,
    "checkpoint": CheckpointSpec,
    "batch_ramp": BatchRampSpec,
}


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _build(cls: type, data: Any, where: str) -> Any:
    if not isinstance(data, dict):
        raise ApertusError(f"{where}: expected an object, got {type(data).__name__}")
    known = {f.name for f in fields(cls)}
    unknown = sorted(set(data) - known)
    if unknown:
        raise ApertusError(f"{where}: unknown key(s) {unknown}; known: {sorted(known)}")
    values = {}
    for f in fields(cls):
        if f.name not in data:
            continue
        value = data[f.name]
        if cls is RunSpec and f.name in _NESTED and not (f.name == "batch_ramp" and value is None):
            value = _build(_NESTED[f.name], value, f"{where}.{f.name}")
        values[f.name] = value
    try:
        return cls(**values)
    except TypeError as e:
        missing = [
            f.name
            for f in fields(cls)
            if f.name not in data and f.default is MISSING and f.default_factory is MISSING
        ]
        raise ApertusError(f"{where}: missing required key(s) {missing}") from e


def _check(condition: bool, where: str, message: str) -> None:
    if not condition:
        raise ApertusError(f"{where}: {message}")


def _validate(spec: RunSpec, where: str) -> RunSpec:
    for name in ("flavor", "metrics_folder"):
        _check(
            isinstance(getattr(spec, name), str) and bool(getattr(spec, name)),
            where,
            f"{name} must be a non-empty string",
        )
    _check(
        (spec.phase_dir is None) != (spec.sft_data is None),
        where,
        "give exactly one of phase_dir (pretraining data) and sft_data (SFT data)",
    )
    for name in ("phase_dir", "sft_data"):
        value = getattr(spec, name)
        _check(
            value is None or (isinstance(value, str) and bool(value)),
            where,
            f"{name} must be a non-empty string or null",
        )
    _check(
        _is_int(spec.sft_epochs) and spec.sft_epochs >= 1,
        where,
        f"sft_epochs must be a positive integer, got {spec.sft_epochs!r}",
    )
    if spec.sft_data is not None:
        _check(
            not (isinstance(spec.goldfish.enabled, bool) and spec.goldfish.enabled),
            where,
            "goldfish is not applied to SFT data (RECIPE.md §2, §7); set goldfish.enabled false",
        )
    else:
        _check(spec.sft_epochs == 1, where, "sft_epochs applies to sft_data only")
    for name in ("seq_len", "micro_batch", "global_batch", "steps"):
        value = getattr(spec, name)
        _check(
            _is_int(value) and value > 0, where, f"{name} must be a positive integer, got {value!r}"
        )
    _check(
        spec.global_batch % spec.micro_batch == 0,
        where,
        f"global_batch {spec.global_batch} is not a multiple of micro_batch {spec.micro_batch}",
    )
    ramp = spec.batch_ramp
    if ramp is not None:
        _check(
            _is_int(ramp.global_batch) and ramp.global_batch % spec.micro_batch == 0,
            where,
            f"batch_ramp.global_batch must be a multiple of micro_batch {spec.micro_batch}, "
            f"got {ramp.global_batch!r}",
        )
        _check(
            _is_int(ramp.at_tokens) and ramp.at_tokens >= 0,
            where,
            f"batch_ramp.at_tokens must be an integer >= 0, got {ramp.at_tokens!r}",
        )
    _check(isinstance(spec.model_overrides, dict), where, "model_overrides must be an object")
    lr = spec.lr
    _check(
        lr.kind in ("wsd", "constant", "linear"),
        where,
        f"lr.kind must be 'wsd' or 'constant' (pretraining) or 'linear' (SFT), got {lr.kind!r}",
    )
    _check(
        _is_number(lr.peak) and lr.peak >= 0,
        where,
        f"lr.peak must be a number >= 0, got {lr.peak!r}",
    )
    for name in ("warmup_steps", "decay_steps"):
        value = getattr(lr, name)
        _check(_is_int(value) and value >= 0, where, f"lr.{name} must be an integer >= 0")
    for name in ("min_lr_ratio", "warmup_start"):
        value = getattr(lr, name)
        _check(_is_number(value) and 0 <= value <= 1, where, f"lr.{name} must be in [0, 1]")
    horizon = spec.steps if lr.total_steps is None else lr.total_steps
    _check(
        _is_int(horizon) and horizon >= spec.steps,
        where,
        f"lr.total_steps must be an integer >= steps ({spec.steps}), got {lr.total_steps!r}",
    )
    if lr.kind == "wsd":
        _check(
            lr.warmup_steps + lr.decay_steps <= horizon,
            where,
            f"lr.warmup_steps + lr.decay_steps ({lr.warmup_steps} + {lr.decay_steps}) exceed "
            f"the schedule's {horizon} steps",
        )
    if lr.kind == "linear":
        _check(
            lr.decay_steps == 0,
            where,
            "lr.decay_steps applies to 'wsd' only; 'linear' decays from the end of the "
            "warmup to 0 at the end of the schedule",
        )
        _check(
            _is_int(lr.warmup_steps) and lr.warmup_steps <= horizon,
            where,
            f"lr.warmup_steps ({lr.warmup_steps}) exceed the schedule's {horizon} steps",
        )
    opt = spec.ademamix
    _check(
        isinstance(opt.betas, list | tuple)
        and len(opt.betas) == 3
        and all(_is_number(b) and 0 <= b < 1 for b in opt.betas),
        where,
        f"ademamix.betas must be three numbers in [0, 1), got {opt.betas!r}",
    )
    for name in ("t_alpha", "t_beta3"):
        value = getattr(opt, name)
        _check(
            value is None or (_is_int(value) and value > 0),
            where,
            f"ademamix.{name} must be a positive integer or null",
        )
    for name in ("alpha", "eps", "weight_decay"):
        value = getattr(opt, name)
        _check(_is_number(value) and value >= 0, where, f"ademamix.{name} must be a number >= 0")
    _check(_is_number(spec.grad_clip) and spec.grad_clip > 0, where, "grad_clip must be > 0")
    gold = spec.goldfish
    _check(isinstance(gold.enabled, bool), where, "goldfish.enabled must be true or false")
    _check(
        _is_int(gold.k) and gold.k >= 1 and _is_int(gold.h) and gold.h >= 1,
        where,
        "goldfish.k and goldfish.h must be integers >= 1",
    )
    ckpt = spec.checkpoint
    _check(
        isinstance(ckpt.folder, str) and bool(ckpt.folder),
        where,
        "checkpoint.folder must be a path",
    )
    _check(
        _is_int(ckpt.interval) and ckpt.interval >= 1,
        where,
        "checkpoint.interval must be an integer >= 1",
    )
    _check(
        _is_int(ckpt.keep_latest) and (ckpt.keep_latest == 0 or ckpt.keep_latest >= 2),
        where,
        "checkpoint.keep_latest must be 0 (keep all) or >= 2",
    )
    _check(
        ckpt.initial is None or isinstance(ckpt.initial, str),
        where,
        "checkpoint.initial must be a path or null",
    )
    _check(
        ckpt.initial_mode in ("weights", "continue"),
        where,
        f"checkpoint.initial_mode must be 'weights' or 'continue', got {ckpt.initial_mode!r}",
    )
    _check(_is_int(spec.seed) and spec.seed >= 0, where, "seed must be an integer >= 0")
    _check(
        spec.dtype in ("float32", "bfloat16"),
        where,
        f"dtype must be 'float32' or 'bfloat16', got {spec.dtype!r}",
    )
    _check(isinstance(spec.compile, bool), where, "compile must be true or false")
    _check(isinstance(spec.tensorboard, bool), where, "tensorboard must be true or false")
    _check(
        spec.device in ("auto", "cpu", "cuda"),
        where,
        f"device must be 'auto', 'cpu' or 'cuda', got {spec.device!r}",
    )
    _check(
        spec.activation_checkpoint in ("none", "full", "selective"),
        where,
        "activation_checkpoint must be 'none', 'full' or 'selective'",
    )
    _check(
        _is_int(spec.tensor_parallel) and spec.tensor_parallel >= 1,
        where,
        f"tensor_parallel must be an integer >= 1, got {spec.tensor_parallel!r}",
    )
    return spec


def load_run_spec(path: str | os.PathLike[str]) -> RunSpec:
    """Read and validate a run spec; every problem is an ApertusError naming the file."""
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ApertusError(f"run spec {path} not found") from None
    except (OSError, ValueError) as e:
        raise ApertusError(f"run spec {path}: unreadable: {e}") from None
    spec = _build(RunSpec, data, f"run spec {path}")
    spec = _validate(spec, f"run spec {path}")
    return replace(spec, ademamix=replace(spec.ademamix, betas=tuple(spec.ademamix.betas)))


_STEP_DIR = re.compile(r"^step-(\d+)$")


def checkpoint_steps(folder: str | os.PathLike[str]) -> dict[int, Path]:
    """Complete DCP checkpoints in a checkpoint folder: step -> ``step-N`` directory (one with
    DCP's ``.metadata``, which is written last)."""
    folder = Path(folder)
    if not folder.is_dir():
        return {}
    found = {}
    for child in folder.iterdir():
        match = _STEP_DIR.match(child.name)
        if match and (child / ".metadata").is_file():
            found[int(match.group(1))] = child
    return dict(sorted(found.items()))


def resolve_initial_checkpoint(path: str | os.PathLike[str]) -> Path:
    """A ``step-N`` directory, or the last complete step of a checkpoint folder, as an absolute
    path (torchtitan requires one)."""
    path = Path(path).absolute()
    if (path / ".metadata").is_file():
        return path
    steps = checkpoint_steps(path)
    if not steps:
        raise ApertusError(
            f"checkpoint.initial {path}: neither a DCP checkpoint (no .metadata) nor a folder "
            "holding step-N checkpoints"
        )
    return steps[max(steps)]


def read_phase_record(phase_dir: str | os.PathLike[str]) -> dict[str, Any]:
    """A built phase's phase.json, with its integer vocab_size and tokens_planned checked."""
    path = Path(phase_dir) / PHASE_FILE
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ApertusError(f"{path}: not found (is {phase_dir} a built data phase?)") from None
    except (OSError, ValueError) as e:
        raise ApertusError(f"{path}: unreadable: {e}") from None
    for key in ("vocab_size", "tokens_planned"):
        if not isinstance(record, dict) or not _is_int(record.get(key)):
            raise ApertusError(f"{path}: no integer {key}")
    return record


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
    run's sequences), the
    ranks split into `tensor_parallel` groups whose heads, MLP and vocabulary divide by it, the
    global batch splits over the world_size / tensor_parallel data-parallel ranks, and
    `checkpoint.initial` names a checkpoint (only looked at while the run's own folder holds
    none). The launcher runs them before torchrun. Only the tensor-parallel shape check
    imports torch (the model registry), and only when `tensor_parallel` > 1.

    A continued run (``initial_mode: continue``) starts at the initial checkpoint's step with
    its own data from the start, so it needs windows for the steps after that one only.
    """
    sft_dir = sft = phase_dir = record = None
    if spec.sft_data is not None:
        sft_dir = Path(spec.sft_data).absolute()
        sft = read_sft_record(sft_dir)
        if sft["max_len"] != spec.seq_len:
            raise ApertusError(
                f"{sft_dir}: rows were made for max_len {sft['max_len']}, the run's seq_len is "
                f"{spec.seq_len}; they must be equal"
            )
    else:
        assert spec.phase_dir is not None
        phase_dir = Path(spec.phase_dir).absolute()
        record = read_phase_record(phase_dir)
    tp = spec.tensor_parallel
    if world_size % tp:
        raise ApertusError(
            f"tensor_parallel {tp} does not divide the {world_size} rank(s) of the run"
        )
    if tp > 1:
        check_tensor_parallel_shape(spec, tp)
    data_parallel = world_size // tp
    per_step = spec.micro_batch * data_parallel
    ramp = spec.ramp()
    for batch in sorted({ramp.start_batch, ramp.batch}):
        if batch % per_step:
            ranks = f"{data_parallel} rank(s)"
            if tp > 1:
                ranks = (
                    f"{data_parallel} data-parallel rank(s) ({world_size} ranks / "
                    f"tensor_parallel {tp})"
                )
            raise ApertusError(
                f"global batch {batch} is not divisible by micro_batch {spec.micro_batch} x {ranks}"
            )
    initial = None
    if spec.checkpoint.initial is not None and not checkpoint_steps(
        Path(spec.checkpoint.folder).absolute()
    ):
        initial = resolve_initial_checkpoint(spec.checkpoint.initial)
    first_step = 0
    if spec.checkpoint.initial is not None and spec.checkpoint.initial_mode == "continue":
        match = _STEP_DIR.match(resolve_initial_checkpoint(spec.checkpoint.initial).name)
        first_step = int(match.group(1)) if match else 0
        if first_step >= spec.steps:
            raise ApertusError(
                f"steps {spec.steps} must exceed the continued checkpoint's step {first_step}"
            )
    needed = ramp.sequences(first_step, spec.steps)
    if sft is not None:
        samples = sft["examples"] * spec.sft_epochs
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


def check_tensor_parallel_shape(spec: RunSpec, tp: int) -> None:
    """The flavor (with its overrides) splits into `tp` tensor-parallel ranks, or an
    ApertusError naming the spec keys and the numbers that do not divide."""
    from apertus.model.config_registry import flavor
    from apertus.train.torchtitan_spec import tensor_parallel_problems

    problems = tensor_parallel_problems(flavor(spec.flavor, **spec.model_overrides), tp)
    if problems:
        raise ApertusError(
            f"tensor_parallel {tp} does not fit flavor {spec.flavor!r}: " + "; ".join(problems)
        )


def _resolve_device(requested: str) -> str:
    import torch

    if requested == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if requested == "cuda" and not torch.cuda.is_available():
        raise ApertusError("device 'cuda' requested but no CUDA device is available")
    return requested


def trainer_config(spec: RunSpec, *, world_size: int = 1):
    """The torchtitan `Trainer.Config` for a run spec on `world_size` ranks.

    Runs `preflight`, checks the data's vocabulary and the sequence length against the model,
    then applies the CPU workarounds when the run is on the CPU (they must precede the
    trainer's construction).
    """
    from torchtitan.components.loss import CrossEntropyLoss
    from torchtitan.config import (
        CommConfig,
        CompileConfig,
        DebugConfig,
        ParallelismConfig,
        TrainingConfig,
    )
    from torchtitan.distributed.activation_checkpoint import FullAC, SelectiveAC

    from apertus.model.config_registry import flavor
    from apertus.train import torchtitan_spec as spec_parts
    from apertus.train.dataloader import PhaseDataLoader, PhaseVocabulary
    from apertus.train.sft_loader import SFTDataLoader, SFTVocabulary

    checked = preflight(spec, world_size=world_size)
    device = _resolve_device(spec.device)
    overrides = dict(spec.model_overrides)
    # PLATFORM.md blocker 3: FlexAttention has no CPU backward; SDPA with a dense mask there.
    overrides.setdefault("attn_backend", "sdpa" if device == "cpu" else "flex")
    model_config = flavor(spec.flavor, **overrides)
    if checked.vocab_size > model_config.vocab_size:
        raise ApertusError(
            f"{checked.data_dir}: tokenized with {checked.vocab_size} ids, more than "
            f"the model's vocab_size {model_config.vocab_size} (flavor {spec.flavor!r})"
        )
    if spec.seq_len > model_config.max_seq_len:
        raise ApertusError(
            f"seq_len {spec.seq_len} exceeds the model's max_seq_len {model_config.max_seq_len} "
            f"(flavor {spec.flavor!r}); raise it in model_overrides"
        )
    data_dir = checked.data_dir
    if checked.sft is not None:
        tokenizer = SFTVocabulary.Config()
        dataloader = SFTDataLoader.Config(
            sft_dir=str(data_dir), seed=spec.seed, epochs=spec.sft_epochs
        )
    else:
        tokenizer = PhaseVocabulary.Config()
        dataloader = PhaseDataLoader.Config(
            phase_dir=str(data_dir),
            goldfish=spec.goldfish.enabled,
            goldfish_k=spec.goldfish.k,
            goldfish_h=spec.goldfish.h,
        )
    checkpoint_folder = Path(spec.checkpoint.folder).absolute()
    initial = str(checked.initial_checkpoint) if checked.initial_checkpoint else None

    # Only once the spec is known to be good: the workarounds patch torchtitan in this process.
    spec_parts.patch_missing_set_timeout()
    if device == "cpu":
        spec_parts.use_cpu_device()

    activation_checkpoint = {
        "none": None,
        "full": FullAC.Config(),
        "selective": SelectiveAC.Config(),
    }[spec.activation_checkpoint]
    opt = spec.ademamix
    ramp = spec.ramp()
    return spec_parts.ApertusTrainer.Config(
        ramp_batch=ramp.batch if spec.batch_ramp else 0,
        ramp_switch_step=ramp.switch_step,
        model_spec=spec_parts.apertus_model_spec(spec.flavor, model_config, seed=spec.seed),
        # The data is pre-tokenized: the trainer's tokenizer is the data's vocabulary
        # (torchtitan's HuggingFaceTokenizer cannot even load the Apertus tokenizer directory:
        # its Jinja has no {% generation %} tag, which the chat template uses).
        hf_assets_path=str(data_dir),
        dump_folder=str(Path(spec.metrics_folder).absolute()),
        tokenizer=tokenizer,
        dataloader=dataloader,
        optimizer=spec_parts.ademamix_optimizer(
            lr=spec.lr.peak,
            betas=opt.betas,
            alpha=opt.alpha,
            t_alpha=opt.t_alpha,
            t_beta3=opt.t_beta3,
            eps=opt.eps,
            weight_decay=opt.weight_decay,
        ),
        lr_scheduler=spec_parts.RecipeLRSchedulers.Config(
            kind=spec.lr.kind,
            warmup_steps=spec.lr.warmup_steps,
            decay_steps=spec.lr.decay_steps,
            min_lr_factor=spec.lr.min_lr_ratio,
            warmup_start=spec.lr.warmup_start,
            total_steps=spec.lr.total_steps,
        ),
        training=TrainingConfig(
            local_batch_size=spec.micro_batch,
            global_batch_size=spec.global_batch,
            seq_len=spec.seq_len,
            max_norm=spec.grad_clip,
            steps=spec.steps,
            dtype="float32",
            mixed_precision_param=spec.dtype,
            # Blocker 6 on CPU; on GPU the block masks are built inside the step.
            disable_cuda_graphs=True,
        ),
        # Blocker 5: the partial-DTensor backend (DTensor for the tensor-parallel axis only;
        # torchtitan_spec.apply_tensor_parallel); whole sequences on every TP rank.
        parallelism=ParallelismConfig(
            spmd_backend="partial_dtensor",
            tensor_parallel_degree=spec.tensor_parallel,
            enable_sequence_parallel=False,
        ),
        checkpoint=spec_parts.FiniteCheckpointManager.Config(
            enable=True,
            folder=str(checkpoint_folder),
            interval=spec.checkpoint.interval,
            initial_load_path=initial,
            initial_load_model_only=initial is not None
            and spec.checkpoint.initial_mode == "weights",
            # Continuing a phase: everything but the data position, which belongs to the old
            # phase. Only while this run has no checkpoint of its own (then `initial` is None).
            exclude_from_loading=(
                ["dataloader"]
                if initial is not None and spec.checkpoint.initial_mode == "continue"
                else []
            ),
            # The last checkpoint is a full one, so re-running a finished run is a no-op and
            # a run can be extended; the next stage loads its weights only.
            last_save_model_only=False,
            keep_latest_k=spec.checkpoint.keep_latest,
        ),
        metrics=spec_parts.ApertusMetrics.Config(
            log_freq=1,
            enable_tensorboard=spec.tensorboard,
            jsonl_file="metrics.jsonl",
            total_steps=spec.steps,
            disable_color_printing=True,
        ),
        activation_checkpoint=activation_checkpoint,
        compile=CompileConfig(enable=spec.compile),
        # No NCCL flight recorder on gloo.
        comm=CommConfig(trace_buf_size=0) if device == "cpu" else CommConfig(),
        debug=DebugConfig(seed=spec.seed),
        loss=CrossEntropyLoss.Config(global_vocab_size=model_config.vocab_size),
    )


def from_spec():
    """torchtitan's ``--config from_spec``: the `Trainer.Config` of the run spec named by
    ``$APERTUS_TRAIN_SPEC``."""
    path = os.environ.get(SPEC_ENV)
    if not path:
        raise ApertusError(f"set {SPEC_ENV} to the run spec (JSON); apertus.train.launch does")
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    return trainer_config(load_run_spec(path), world_size=world_size)
