"""The torchtitan entry module: run spec -> torchtitan `Trainer.Config` (RECIPE.md §1-§4, §6, §7).

torchtitan 0.3.0 runs ``torchrun ... -m torchtitan.train --module apertus.train.config_registry
--config from_spec``: it imports this module and calls `from_spec()`, which reads the run spec
(`apertus.train.run_spec.RunSpec`) named by ``APERTUS_TRAIN_SPEC`` and returns a complete
`Trainer.Config` whose component configs are this project's (torchtitan's own command-line
overrides, ``--training.steps 10`` ..., still apply on top). `apertus.train.launch` sets the
variable and runs that command. The path from the stage config to the trainer is three hops:
the stage builds a `RunSpec` (`apertus.train.stage`, `apertus.posttrain.sft`), writes it as
spec.json, and `trainer_config` here maps each of its fields to torchtitan's config.

The components, one file each (torchtitan's ``components/`` layout):
- the model: `apertus.model.spec.model_spec` (`apertus.model.parallelize` for FSDP/TP);
- data: `apertus.train.dataloader.PhaseDataLoader` (pretraining, long context; the EOD and
  Goldfish loss masks), `apertus.train.sft_loader.SFTDataLoader` (SFT),
  `apertus.train.qrpo_loader.QRPODataLoader` with `apertus.train.qrpo_loss.QRPOLoss` (QRPO), and
  `apertus.train.pretokenized.PretokenizedVocabulary` in the tokenizer slot;
- `apertus.train.optimizer` (AdEMAMix), `apertus.train.lr_scheduler` (WSD, constant, linear),
  `apertus.train.metrics` (JSON Lines, TensorBoard, W&B, progress), `apertus.train.checkpoint`
  (finite-only DCP checkpoints), `apertus.train.trainer` (batch ramp, early stop; QRPO's
  per-row extras);
- on the CPU, `apertus.train.cpu_workarounds` (its docstring lists each workaround).

Only this module imports the components together; nothing in the package imports it.
"""

from __future__ import annotations

import os
from pathlib import Path

from torchtitan.components.loss import CrossEntropyLoss
from torchtitan.config import (
    CommConfig,
    CompileConfig,
    DebugConfig,
    ParallelismConfig,
    TrainingConfig,
)
from torchtitan.distributed.activation_checkpoint import FullAC, SelectiveAC
from torchtitan.trainer import Trainer

from apertus.core import ApertusError
from apertus.core.device import bf16_matmuls_in_fp32, resolve_device
from apertus.core.lifetime import die_with_parent
from apertus.model.spec import model_spec
from apertus.train import cpu_workarounds
from apertus.train.checkpoint import FiniteCheckpointManager
from apertus.train.dataloader import PhaseDataLoader
from apertus.train.lr_scheduler import RecipeLRSchedulers
from apertus.train.metrics import SPIKE_FACTOR, ApertusMetrics
from apertus.train.optimizer import ademamix_optimizer
from apertus.train.pretokenized import PretokenizedVocabulary
from apertus.train.qrpo_loader import QRPODataLoader
from apertus.train.qrpo_loss import QRPOLoss
from apertus.train.run_spec import (
    MASTER_DTYPE,
    REDUCE_DTYPE,
    SPEC_ENV,
    WEIGHTS_ONLY_MODES,
    RunSpec,
    load_run_spec,
    preflight,
)
from apertus.train.sft_loader import SFTDataLoader
from apertus.train.trainer import ApertusTrainer, QRPOTrainer
from apertus.train.watchdog import collective_timeout, hang_timeout

__all__ = ["from_spec", "trainer_config"]

if "TORCHELASTIC_RUN_ID" in os.environ:
    # A rank started by torchrun (which puts it in a session of its own): it dies with
    # torchrun rather than train on, orphaned, into a work directory (apertus.core.lifetime).
    die_with_parent("torch.distributed.run", "torchrun")


def trainer_config(spec: RunSpec, *, world_size: int = 1) -> Trainer.Config:
    """The torchtitan `Trainer.Config` for a run spec on `world_size` ranks.

    Runs `preflight`, checks the data's vocabulary and the sequence length against the model,
    then applies the CPU workarounds when the run is on the CPU (they must precede the
    trainer's construction).
    """
    checked = preflight(spec, world_size=world_size)
    device = resolve_device(spec.device, setting="device").type
    overrides = dict(spec.model_overrides)
    # PLATFORM.md blocker 3: FlexAttention has no CPU backward; SDPA with a dense mask there.
    overrides.setdefault("attn_backend", "sdpa" if device == "cpu" else "flex")
    model = model_spec(spec.flavor, seed=spec.seed, **overrides)
    model_config = model.model
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
    if spec.qrpo is not None:
        dataloader = QRPODataLoader.Config(
            sft_dir=str(data_dir),
            seed=spec.seed,
            epochs=spec.sft_epochs,
            step_completions=spec.global_batch,
        )
    elif checked.sft is not None:
        dataloader = SFTDataLoader.Config(
            sft_dir=str(data_dir), seed=spec.seed, epochs=spec.sft_epochs
        )
    else:
        dataloader = PhaseDataLoader.Config(
            phase_dir=str(data_dir),
            goldfish=spec.goldfish.enabled,
            goldfish_k=spec.goldfish.k,
            goldfish_h=spec.goldfish.h,
        )
    checkpoint_folder = Path(spec.checkpoint.folder).absolute()
    initial = str(checked.initial_checkpoint) if checked.initial_checkpoint else None

    # Only once the spec is known to be good: the workarounds patch torchtitan in this process.
    cpu_workarounds.patch_missing_set_timeout()
    if device == "cpu":
        cpu_workarounds.use_cpu_device()
        bf16_matmuls_in_fp32(device, spec.dtype)  # workaround 9

    activation_checkpoint = {
        "none": None,
        "full": FullAC.Config(),
        "selective": SelectiveAC.Config(),
    }[spec.activation_checkpoint]
    opt = spec.ademamix
    ramp = spec.ramp()
    trainer = QRPOTrainer if spec.qrpo is not None else ApertusTrainer
    loss = (
        QRPOLoss.Config(beta_kl=spec.qrpo.beta_kl, max_beta=spec.qrpo.max_beta)
        if spec.qrpo is not None
        else CrossEntropyLoss.Config(global_vocab_size=model_config.vocab_size)
    )
    return trainer.Config(
        ramp_batch=ramp.batch if spec.batch_ramp else 0,
        ramp_switch_step=ramp.switch_step,
        model_spec=model,
        # The data is pre-tokenized: the trainer's tokenizer is the data's vocabulary
        # (torchtitan's HuggingFaceTokenizer cannot even load the Apertus tokenizer directory:
        # its Jinja has no {% generation %} tag, which the chat template uses).
        hf_assets_path=str(data_dir),
        dump_folder=str(Path(spec.metrics_folder).absolute()),
        tokenizer=PretokenizedVocabulary.Config(),
        dataloader=dataloader,
        optimizer=ademamix_optimizer(
            lr=spec.lr.peak,
            betas=opt.betas,
            alpha=opt.alpha,
            t_alpha=opt.t_alpha,
            t_beta3=opt.t_beta3,
            eps=opt.eps,
            weight_decay=opt.weight_decay,
        ),
        lr_scheduler=RecipeLRSchedulers.Config(
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
            dtype=MASTER_DTYPE,
            mixed_precision_param=spec.dtype,
            mixed_precision_reduce=REDUCE_DTYPE,
            # Blocker 6 on CPU; on GPU the block masks are built inside the step.
            disable_cuda_graphs=True,
        ),
        # Blocker 5: the partial-DTensor backend (DTensor for the tensor-parallel axis only;
        # apertus.model.parallelize.apply_tensor_parallel); whole sequences on every TP rank.
        parallelism=ParallelismConfig(
            spmd_backend="partial_dtensor",
            tensor_parallel_degree=spec.tensor_parallel,
            enable_sequence_parallel=False,
            # apertus.model.context_parallel: the trainer shards the sequences itself.
            context_parallel_degree=spec.context_parallel,
        ),
        checkpoint=FiniteCheckpointManager.Config(
            enable=True,
            folder=str(checkpoint_folder),
            interval=spec.checkpoint.interval,
            initial_load_path=initial,
            initial_load_model_only=initial is not None
            and spec.checkpoint.initial_mode in WEIGHTS_ONLY_MODES,
            # A Hugging Face folder: its safetensors through the model spec's state-dict
            # adapter (apertus.model.state_dict_adapter), each rank reading its shards.
            initial_load_in_hf=initial is not None and spec.checkpoint.initial_mode == "hf",
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
        metrics=ApertusMetrics.Config(
            log_freq=1,
            enable_tensorboard=spec.tensorboard,
            enable_wandb=spec.wandb.enabled,
            wandb_project=spec.wandb.project,
            wandb_entity=spec.wandb.entity or "",
            wandb_mode=spec.wandb.mode,
            jsonl_file="metrics.jsonl",
            total_steps=spec.steps,
            # Pretraining and long context only (`SPIKE_FACTOR`).
            spike_factor=SPIKE_FACTOR if isinstance(dataloader, PhaseDataLoader.Config) else 0.0,
            disable_color_printing=True,
        ),
        activation_checkpoint=activation_checkpoint,
        compile=CompileConfig(enable=spec.compile),
        # The hang watchdog (apertus.train.watchdog) speaks before a collective's own timeout;
        # no NCCL flight recorder on gloo.
        comm=CommConfig(
            train_timeout_seconds=collective_timeout(hang_timeout()),
            **({"trace_buf_size": 0} if device == "cpu" else {}),
        ),
        debug=DebugConfig(seed=spec.seed),
        loss=loss,
    )


def from_spec():
    """torchtitan's ``--config from_spec``: the `Trainer.Config` of the run spec named by
    ``$APERTUS_TRAIN_SPEC``."""
    path = os.environ.get(SPEC_ENV)
    if not path:
        raise ApertusError(f"set {SPEC_ENV} to the run spec (JSON); apertus.train.launch does")
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    return trainer_config(load_run_spec(path), world_size=world_size)
