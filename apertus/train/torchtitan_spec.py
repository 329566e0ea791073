"""Apertus in torchtitan 0.3.0's trainer, out of tree: the model spec, the parallelize function,
the AdEMAMix optimizer container, the recipe's LR schedules, the metrics and checkpoint
components, and the CPU workarounds (RECIPE.md §1-§4, §6; PLATFORM.md "torchtitan 0.3.0").

Everything here plugs into torchtitan's own `Trainer` through its config: `config_registry`
builds a `Trainer.Config` whose component configs are the subclasses below, and torchtitan's
`Configurable.build()` constructs them. No torchtitan file is modified; the only monkeypatches
are the two CPU blockers in `use_cpu_device` and `patch_missing_set_timeout`.

Pieces:
- `apertus_model_spec`: the `ModelSpec` (no pipelining, no HF state-dict adapter: export is its
  own stage).
- `parallelize_apertus`: tensor parallelism (`apply_tensor_parallel`), activation
  checkpointing, per-block compile, FSDP2 over the data-parallel ranks (CP / PP / EP raise;
  CP is GPU-only in any case, PLATFORM.md blocker 7).
- `AdEMAMixOptimizers` + `ademamix_optimizer`: torchtitan's optimizer container with AdEMAMix
  registered, two parameter groups (no weight decay for norms and the xIELU scalars), checked
  against `apertus.train.ademamix.param_groups`.
- `RecipeLRSchedulers`: Warmup-Stable-Decay with the 1-sqrt cooldown (`wsd_lr`), constant
  LR after a warmup (`constant_lr_with_warmup`) or SFT's linear warmup and decay to 0
  (`linear_lr`), evaluated exactly per step.
- `ApertusMetrics`: torchtitan's metrics (console, TensorBoard) plus a JSON Lines file, the
  loss-mask fractions from the data loader, and a stop on a non-finite gradient norm.
- `FiniteCheckpointManager`: torchtitan's DCP checkpointer that refuses to write NaN/inf
  weights, so the last checkpoint on disk is always a good one.
- `ApertusTrainer`: torchtitan's `Trainer` with the global-batch ramp of RECIPE.md §4 (the
  number of accumulated micro-batches follows `BatchRamp.batch_at(step)`).
- `init_weights_world_size_invariant`: on CPU, the same initial weights whatever the number of
  ranks (DTensor's random ops shard only on CUDA-like devices).
"""

from __future__ import annotations

import json
import math
import os
import re
import resource
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from functools import partial
from pathlib import Path
from typing import Any, Literal

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.fsdp import FSDPModule, MixedPrecisionPolicy, fully_shard
from torch.distributed.tensor import DTensor, Replicate, Shard, distribute_module
from torch.distributed.tensor.parallel import (
    ColwiseParallel,
    ParallelStyle,
    PrepareModuleInput,
    RowwiseParallel,
    parallelize_module,
)
from torch.distributed.tensor.placement_types import Placement
from torch.optim.lr_scheduler import LRScheduler
from torchtitan.components.checkpoint import MODEL, CheckpointManager
from torchtitan.components.checkpointer.utils import canonical_fqn
from torchtitan.components.metrics import BaseLogger, LoggerContainer, MetricsProcessor
from torchtitan.components.optimizer import (
    LRSchedulersContainer,
    OptimizersContainer,
    ParamGroupConfig,
)
from torchtitan.config import TORCH_DTYPE_MAP, CompileConfig, ParallelismConfig, TrainingConfig
from torchtitan.distributed import ParallelDims
from torchtitan.distributed.activation_checkpoint import ActivationCheckpointingConfig
from torchtitan.distributed.compile import apply_compile
from torchtitan.distributed.fsdp import get_fsdp_reshard_after_forward_policy
from torchtitan.protocols.model_spec import ModelSpec
from torchtitan.tools.logging import logger
from torchtitan.trainer import Trainer

from apertus.core import ApertusError
from apertus.core.progress import Progress
from apertus.model.model import ApertusModel
from apertus.train.ademamix import AdEMAMix, param_groups
from apertus.train.config_registry import STOP_AT_ENV, STOPPED_FILE
from apertus.train.dataloader import LossMaskCounts, active_loader
from apertus.train.schedule import BatchRamp, constant_lr_with_warmup, linear_lr, wsd_lr

__all__ = [
    "NO_DECAY_PATTERN",
    "AdEMAMixOptimizers",
    "ApertusMetrics",
    "ApertusTrainer",
    "FiniteCheckpointManager",
    "JsonlMetricsLogger",
    "RecipeLRSchedulers",
    "ademamix_optimizer",
    "apertus_model_spec",
    "apply_tensor_parallel",
    "assert_finite_parameters",
    "init_weights_world_size_invariant",
    "parallelize_apertus",
    "patch_missing_set_timeout",
    "read_metrics",
    "run_name",
    "tensor_parallel_problems",
    "use_cpu_device",
]

# ---------------------------------------------------------------------------------------------
# CPU workarounds (PLATFORM.md, torchtitan 0.3.0, CPU blockers 1 and 2)
# ---------------------------------------------------------------------------------------------


class _CpuDeviceModule:
    """`torch.cpu` plus the `torch.cuda` calls torchtitan makes whatever the device.

    torchtitan picks its device module once, at import, and falls back to `torch.cuda` when no
    accelerator is present; the trainer then calls `set_device`, the memory monitor calls
    `get_device_name` / `get_device_properties` / `memory_stats`, and the PG-timeout barrier
    passes `current_device()` as a device id (gloo wants an int). Memory "peaks" are the
    process's peak resident set size (it cannot be reset, so it is the peak since start).
    """

    def __getattr__(self, name: str) -> Any:
        return getattr(torch.cpu, name)

    @staticmethod
    def set_device(device: Any) -> None:
        del device  # one CPU "device" per process

    @staticmethod
    def current_device() -> int:
        return 0

    @staticmethod
    def device_count() -> int:
        return 1

    @staticmethod
    def get_device_name(device: Any = None) -> str:
        return "cpu"

    @staticmethod
    def get_device_properties(device: Any = None) -> Any:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        return type("CpuProperties", (), {"total_memory": total, "name": "cpu"})()

    @staticmethod
    def memory_stats(device: Any = None) -> dict[str, int]:
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux
        return {"active_bytes.all.peak": peak, "reserved_bytes.all.peak": peak}

    @staticmethod
    def reset_peak_memory_stats(device: Any = None) -> None:
        return None

    @staticmethod
    def empty_cache() -> None:
        return None

    @staticmethod
    def synchronize(device: Any = None) -> None:
        return None


# Modules that copy `device_type` / `device_module` out of torchtitan.tools.utils at import.
_DEVICE_MODULES = (
    "torchtitan.tools.utils",
    "torchtitan.components.metrics",
    "torchtitan.distributed.parallel_dims",
    "torchtitan.distributed.utils",
    "torchtitan.tools.profiler",
    "torchtitan.models.common.token_dispatcher",
)


def use_cpu_device() -> None:
    """Make torchtitan run on the CPU (blocker 1: its device type falls back to "cuda").

    Sets `device_type = "cpu"` and a CPU device module in every torchtitan module that copied
    them at import. Must run before the trainer is built; idempotent.
    """
    import importlib

    cpu_module = _CpuDeviceModule()
    for name in _DEVICE_MODULES:
        module = importlib.import_module(name)
        if hasattr(module, "device_type"):
            module.device_type = "cpu"
        if hasattr(module, "device_module"):
            module.device_module = cpu_module
    patch_missing_set_timeout()


def _set_timeout(timeout: timedelta, group: dist.ProcessGroup | None = None) -> None:
    pg = group if group is not None else dist.distributed_c10d._get_default_group()
    pg.set_timeout(timeout)


def patch_missing_set_timeout() -> None:
    """Blocker 2: torchtitan lowers the process-group timeouts after the first step with
    `torch.distributed.set_timeout`, which torch 2.13 does not have; map it to the process
    group's own `set_timeout`. No-op where torch has it."""
    if not hasattr(dist, "set_timeout"):
        dist.set_timeout = _set_timeout


def running_on_cpu() -> bool:
    """Whether torchtitan's device type is (now) the CPU."""
    from torchtitan.tools import utils

    return utils.device_type == "cpu"


# ---------------------------------------------------------------------------------------------
# Model spec and parallelism
# ---------------------------------------------------------------------------------------------


def tensor_parallel_problems(config: ApertusModel.Config, degree: int) -> list[str]:
    """What keeps a model of this shape from `degree`-way tensor parallelism (empty: nothing).

    Every rank must hold whole attention heads (the per-head QK-norm, RoPE and the GQA grouping
    work on local heads), whole query groups (``n_heads`` and ``n_kv_heads`` both divide:
    rank r's query heads then use exactly rank r's kv heads), and equal slices of the MLP's
    hidden units and of the vocabulary (vocab-parallel loss).
    """
    if degree < 1:
        return [f"tensor parallel degree must be >= 1, got {degree}"]
    return [
        f"{name}={getattr(config, name)} is not divisible by the tensor parallel degree {degree}"
        for name in ("n_heads", "n_kv_heads", "ffn_hidden", "vocab_size")
        if getattr(config, name) % degree
    ]


class _ReplicatedOverTP(ParallelStyle):
    """A module whose parameters stay whole on every tensor-parallel rank, as Replicate
    DTensors on the TP mesh, and whose first input arrives as a local tensor laid out as
    `input_layout` over the TP ranks (None: leave the inputs alone). The output is handed on
    as a local tensor.

    Why DTensors and not plain tensors: a module that sees only this rank's slice of the
    activations (q_norm/k_norm on the local heads, xIELU on the local hidden units) gets only
    a partial weight gradient; as a Replicate DTensor its gradient comes out Partial and FSDP
    all-reduces it over the TP ranks before the optimizer (`FSDPParam._get_grad_inner_tensor`).
    Modules on whole activations (the RMSNorms, the embedding) compute identical gradients on
    every TP rank; they are DTensors too, as torchtitan's llama3 makes its norms, so that after
    FSDP every parameter lives on the same (fsdp, tp) mesh and the gradient-norm clipping
    counts each replicated weight once. Buffers are left alone: xIELU's `beta` and `eps` hold
    one element, which DTensor treats as replicated, and they get no gradient.
    """

    def __init__(self, input_layout: Placement | None) -> None:
        super().__init__()
        self.input_layout = input_layout

    @staticmethod
    def _replicate_parameters(name: str, module: nn.Module, mesh: DeviceMesh) -> None:
        del name
        for key, param in list(module.named_parameters(recurse=False)):
            # from_local: no communication (the model is still on the meta device) and every
            # rank's weights are overwritten by the same full state afterwards.
            replicated = DTensor.from_local(param, mesh, [Replicate()], run_check=False)
            module.register_parameter(key, nn.Parameter(replicated, param.requires_grad))

    def _prepare_input(self, module: nn.Module, inputs: tuple, mesh: DeviceMesh) -> tuple:
        del module
        if self.input_layout is None or not inputs or not isinstance(inputs[0], torch.Tensor):
            return inputs
        first = inputs[0]
        if not isinstance(first, DTensor):
            first = DTensor.from_local(first, mesh, [self.input_layout], run_check=False)
        return (first, *inputs[1:])

    @staticmethod
    def _prepare_output(module: nn.Module, output: Any, mesh: DeviceMesh) -> Any:
        del module, mesh
        return output.to_local() if isinstance(output, DTensor) else output

    def _apply(self, module: nn.Module, device_mesh: DeviceMesh) -> nn.Module:
        return distribute_module(
            module,
            device_mesh,
            self._replicate_parameters,
            self._prepare_input,
            self._prepare_output,
        )


def apply_tensor_parallel(model: ApertusModel, tp_mesh: DeviceMesh) -> None:
    """Megatron-style tensor parallelism of the Apertus blocks over `tp_mesh` (no sequence
    parallelism), with DTensor's parallel styles, as torchtitan's llama3 plan:

    - attention: wq, wk, wv column-parallel (each rank computes its own heads), wo
      row-parallel (all-reduce of the partial outputs); the block's input enters as one
      Replicate DTensor, so the backward all-reduces the three projections' input gradients
      once; q_norm / k_norm run on the local heads with replicated weights;
    - MLP: w_up column-parallel, xIELU on the local hidden units (its scalars are replicated:
      the activation is elementwise, so every hidden unit sees the same alpha_p, alpha_n,
      beta and eps as in the unsharded model), w_down row-parallel;
    - lm_head column-parallel over the vocabulary, its logits left as a Shard(-1) DTensor:
      torchtitan's cross-entropy then runs vocab-parallel (`_LossParallelCrossEntropy`,
      three TP all-reduces, no all-gather of the logits);
    - embedding, RMSNorms and the final norm replicated (`_ReplicatedOverTP`). The embedding
      is not vocab-sharded: torchtitan's `Embedding` reads a DTensor weight's local shard and
      shards the vocabulary only when set up through its own sharding configs.
    """
    problems = tensor_parallel_problems(model.config, tp_mesh.size())
    if problems:
        raise ApertusError("tensor parallelism: " + "; ".join(problems))
    plan: dict[str, ParallelStyle] = {
        "tok_embeddings": _ReplicatedOverTP(None),
        "norm": _ReplicatedOverTP(Replicate()),
        "lm_head": ColwiseParallel(output_layouts=Shard(-1), use_local_output=False),
    }
    for name in model.layers:
        block = f"layers.{name}"
        plan |= {
            f"{block}.attention_norm": _ReplicatedOverTP(Replicate()),
            f"{block}.attention": PrepareModuleInput(
                input_layouts=(Replicate(), None, None, None),
                desired_input_layouts=(Replicate(), None, None, None),
                use_local_output=False,
            ),
            f"{block}.attention.wq": ColwiseParallel(),
            f"{block}.attention.wk": ColwiseParallel(),
            f"{block}.attention.wv": ColwiseParallel(),
            # [batch, seq, local heads, head_dim]: the heads (dim 2) are split over the ranks.
            f"{block}.attention.q_norm": _ReplicatedOverTP(Shard(2)),
            f"{block}.attention.k_norm": _ReplicatedOverTP(Shard(2)),
            f"{block}.attention.wo": RowwiseParallel(),
            f"{block}.ffn_norm": _ReplicatedOverTP(Replicate()),
            f"{block}.feed_forward.w_up": ColwiseParallel(),
            # [batch, seq, local hidden units]
            f"{block}.feed_forward.act": _ReplicatedOverTP(Shard(-1)),
            f"{block}.feed_forward.w_down": RowwiseParallel(),
        }
    parallelize_module(model, tp_mesh, plan)


def parallelize_apertus(
    model: ApertusModel,
    *,
    parallel_dims: ParallelDims,
    training: TrainingConfig,
    parallelism: ParallelismConfig,
    compile_config: CompileConfig,
    ac_config: ActivationCheckpointingConfig,
    dump_folder: str,
) -> nn.Module:
    """Tensor parallelism (`apply_tensor_parallel`, when ``tensor_parallel_degree`` > 1),
    activation checkpointing, per-block torch.compile, then FSDP2 over the data-parallel
    ranks (HSDP when `data_parallel_replicate_degree` > 1), as torchtitan's llama3 does.

    FSDP units: the embedding, each block, the final norm with lm_head, and the root. Gradients
    are summed, not averaged, across ranks (the trainer already divides the loss by the global
    number of kept tokens) and the reduction is forced to a plain SUM, because gloo has no
    PREMUL_SUM (PLATFORM.md blocker 4). Context, pipeline and expert parallelism are not
    implemented for Apertus; context parallelism cannot run on the CPU at all (blocker 7).
    """
    if parallel_dims.cp_enabled:
        if running_on_cpu():
            raise ApertusError(
                "context parallelism runs on GPU only: on CPU torch has no sharding strategy "
                "for the flash-attention op it needs (PLATFORM.md, torchtitan 0.3.0, CPU "
                "blocker 7); set parallelism.context_parallel_degree to 1"
            )
        raise ApertusError(
            "context parallelism is not implemented for Apertus; use FSDP and tensor parallelism"
        )
    for name, enabled in (
        ("pipeline", parallel_dims.pp_enabled),
        ("expert", parallel_dims.ep_enabled),
    ):
        if enabled:
            raise ApertusError(
                f"{name} parallelism is not implemented for Apertus; use FSDP and tensor "
                "parallelism"
            )
    if parallelism.spmd_backend != "partial_dtensor":
        # PLATFORM.md blocker 5: spmd_types wants sharding configs for every new module.
        raise ApertusError(
            f"parallelism.spmd_backend={parallelism.spmd_backend!r}: Apertus is parallelized "
            "with DTensor's parallel styles and runs with the 'partial_dtensor' backend"
        )
    if parallel_dims.tp_enabled:
        if parallelism.enable_sequence_parallel:
            raise ApertusError(
                "parallelism.enable_sequence_parallel: sequence parallelism is not implemented "
                "for Apertus; tensor parallelism keeps whole sequences (set it to false)"
            )
        tp_mesh = parallel_dims.get_mesh("tp")
        apply_tensor_parallel(model, tp_mesh)
        logger.info(f"Applied tensor parallelism to Apertus over {tp_mesh.size()} rank(s)")
    if ac_config is not None:
        ac_config.build(dump_folder=dump_folder).apply(model)
    if compile_config.enable and "model" in compile_config.components:
        apply_compile(model, compile_config=compile_config, parallel_dims=parallel_dims)

    names = ["dp_replicate", "fsdp"] if parallel_dims.dp_replicate_enabled else ["fsdp"]
    mesh = parallel_dims.get_mesh(names)
    fsdp_options: dict[str, Any] = {
        "mesh": mesh,
        "mp_policy": MixedPrecisionPolicy(
            param_dtype=TORCH_DTYPE_MAP[training.mixed_precision_param],
            reduce_dtype=TORCH_DTYPE_MAP[training.mixed_precision_reduce],
            cast_forward_inputs=False,
        ),
    }
    reshard = get_fsdp_reshard_after_forward_policy(
        parallelism.fsdp_reshard_after_forward, pp_enabled=False
    )
    fully_shard(model.tok_embeddings, **fsdp_options, reshard_after_forward=reshard)
    for block in model.layers.values():
        fully_shard(block, **fsdp_options, reshard_after_forward=reshard)
    # The last unit runs first in backward, so it is not resharded after forward by default.
    fully_shard(
        [model.norm, model.lm_head],
        **fsdp_options,
        reshard_after_forward=parallelism.fsdp_reshard_after_forward == "always",
    )
    fully_shard(model, **fsdp_options)
    for module in model.modules():
        if isinstance(module, FSDPModule):
            module.set_gradient_divide_factor(1.0)
            module.set_force_sum_reduction_for_comms(True)
    logger.info(f"Applied FSDP to Apertus over {mesh.size()} rank(s)")
    return model


@torch.no_grad()
def init_weights_world_size_invariant(
    optimizers: OptimizersContainer,
    model_parts: list[nn.Module],
    parallel_dims: ParallelDims,
    *,
    model_config: ApertusModel.Config,
    seed: int,
) -> None:
    """Give the sharded model the weights of ``torch.manual_seed(seed); model_config.build()``
    (the recipe init, on one CPU), whatever the number of ranks.

    Used as the model spec's `post_optimizer_build_fn`, the trainer's first hook after it
    initialises the sharded model. On CPU each rank draws its shard from the same generator
    state (DTensor's offset-based RNG supports CUDA-like devices only), so ranks would start
    with copies of one shard and a 2-rank run would start from other weights than a 1-rank
    run. On accelerators DTensor's RNG already makes the init independent of sharding and this
    is a no-op. A checkpoint loaded afterwards replaces these weights. The reference model is
    built whole in each process: fine for CPU-sized models.
    """
    del optimizers, parallel_dims
    if not running_on_cpu():
        return
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        reference = model_config.build()
    for part in model_parts:
        set_model_state_dict(
            part,
            reference.state_dict(),
            options=StateDictOptions(full_state_dict=True, strict=True),
        )


def apertus_model_spec(flavor: str, model_config: ApertusModel.Config, *, seed: int) -> ModelSpec:
    """The `ModelSpec` torchtitan's trainer builds Apertus from."""
    return ModelSpec(
        name="apertus",
        flavor=flavor,
        model=model_config,
        parallelize_fn=parallelize_apertus,
        pipelining_fn=None,
        post_optimizer_build_fn=partial(
            init_weights_world_size_invariant, model_config=model_config, seed=seed
        ),
        state_dict_adapter=None,
    )


# ---------------------------------------------------------------------------------------------
# Optimizer: AdEMAMix in torchtitan's container
# ---------------------------------------------------------------------------------------------

# Parameters without weight decay (RECIPE.md §1, §3): the RMSNorm weights (attention_norm,
# ffn_norm, q_norm, k_norm and the final norm, all `...norm.weight`) and the xIELU scalars.
# The container checks this against `ademamix.param_groups` (1-D params and xIELU scalars).
NO_DECAY_PATTERN = r"norm\.weight$|\.alpha_[pn]$"


class AdEMAMixOptimizers(OptimizersContainer):
    """torchtitan's `OptimizersContainer` that also knows ``optimizer_name="AdEMAMix"``
    (`apertus.train.ademamix.AdEMAMix`; RECIPE.md §3).

    On construction it checks the weight-decay split of the parameter groups against
    `ademamix.param_groups`: norm weights and xIELU scalars must not be decayed, and every other
    parameter must be decayed when some group decays.
    """

    @dataclass(kw_only=True, slots=True)
    class Config(OptimizersContainer.Config):
        pass

    @staticmethod
    def _resolve_optimizer_factory(name: str) -> Callable[..., torch.optim.Optimizer]:
        if name == "AdEMAMix":
            return _build_ademamix
        return OptimizersContainer._resolve_optimizer_factory(name)

    def __init__(self, config: Config, *, model_parts: list[nn.Module]) -> None:
        super().__init__(config, model_parts=model_parts)
        decayed_somewhere = any(
            group.get("weight_decay", 0.0) > 0
            for optimizer in self.optimizers
            for group in optimizer.param_groups
        )
        for model in model_parts:
            expected = param_groups(model, weight_decay=1.0)
            no_decay = {
                canonical_fqn(n)
                for g in expected
                if g["name"] == "no_decay"
                for n in g["param_names"]
            }
            for optimizer in self.optimizers:
                for group in optimizer.param_groups:
                    decays = group.get("weight_decay", 0.0) > 0
                    for name in group.get("param_names", []):
                        if decays and name in no_decay:
                            raise ApertusError(
                                f"optimizer: {name} is a norm weight or xIELU scalar and must "
                                "not get weight decay (RECIPE.md §1); fix the param_groups "
                                "patterns"
                            )
                        if decayed_somewhere and not decays and name not in no_decay:
                            raise ApertusError(
                                f"optimizer: {name} is a weight matrix but its group has no "
                                "weight decay; fix the param_groups patterns"
                            )

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        # Every option of the saved param groups is restored except the LR, which belongs to
        # the schedule (RecipeLRSchedulers.load_state_dict sets it from the resumed step).
        lrs = [[group["lr"] for group in opt.param_groups] for opt in self.optimizers]
        super().load_state_dict(state_dict)
        for optimizer, saved in zip(self.optimizers, lrs, strict=True):
            for group, lr in zip(optimizer.param_groups, saved, strict=True):
                group["lr"] = lr


def _build_ademamix(groups: list[dict[str, Any]], **kwargs: Any) -> AdEMAMix:
    # The container passes only parameter groups, each carrying every option; AdEMAMix's
    # constructor also wants a default LR, which no group falls back to.
    return AdEMAMix(groups, lr=groups[0]["lr"], **kwargs)


def ademamix_optimizer(
    *,
    lr: float,
    betas: tuple[float, float, float],
    alpha: float,
    t_alpha: int | None,
    t_beta3: int | None,
    eps: float,
    weight_decay: float,
) -> AdEMAMixOptimizers.Config:
    """The container config for AdEMAMix with the recipe's two groups; `lr` is the peak LR
    (the schedule scales from it)."""
    options: dict[str, Any] = {
        "lr": lr,
        "betas": tuple(betas),
        "alpha": alpha,
        "t_alpha": t_alpha,
        "t_beta3": t_beta3,
        "eps": eps,
    }
    return AdEMAMixOptimizers.Config(
        # foreach: AdEMAMix's multi-tensor path; "fused" would only be a flag it ignores.
        implementation="foreach",
        param_groups=[
            ParamGroupConfig(
                pattern=NO_DECAY_PATTERN,
                optimizer_name="AdEMAMix",
                optimizer_kwargs={**options, "weight_decay": 0.0},
            ),
            ParamGroupConfig(
                pattern=r".*",
                optimizer_name="AdEMAMix",
                optimizer_kwargs={**options, "weight_decay": weight_decay},
            ),
        ],
    )


# ---------------------------------------------------------------------------------------------
# Learning-rate schedule
# ---------------------------------------------------------------------------------------------


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


# ---------------------------------------------------------------------------------------------
# Metrics
# ---------------------------------------------------------------------------------------------

# torchtitan metric names -> the short names of the JSON Lines file.
_JSONL_NAMES = {
    "loss_metrics/global_avg_loss": "loss",
    "loss_metrics/global_max_loss": "max_loss",
    "grad_norm": "grad_norm",
    "throughput(tps)": "tokens_per_s",
    "n_tokens_seen": "tokens_seen",
    "loss_mask/goldfish_fraction": "goldfish_fraction",
    "loss_mask/eod_fraction": "eod_fraction",
    "loss_mask/kept_tokens": "kept_tokens",
    "time_metrics/end_to_end(s)": "step_time_s",
}


class JsonlMetricsLogger(BaseLogger):
    """One JSON object per logged step, appended and flushed line by line (a killed run leaves
    whole lines). Keys: ``step``, ``time``, the short names of `_JSONL_NAMES`, ``lr`` (the first
    group's; all groups share the schedule) and every other torchtitan metric under its own name.
    A resumed run appends: steps redone after a resume appear again, and `read_metrics` keeps
    the last record of each step."""

    def __init__(self, path: str) -> None:
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        self.path = path
        self._file = open(path, "a", encoding="utf-8")  # noqa: SIM115 (closed in close())

    def log(self, metrics: dict[str, Any], step: int) -> None:
        record: dict[str, Any] = {"step": step, "time": time.time()}
        lr_keys = sorted(k for k in metrics if k.startswith("lr/"))
        if lr_keys:
            record["lr"] = metrics[lr_keys[0]]
        for key, value in metrics.items():
            record[_JSONL_NAMES.get(key, key)] = value
        self._file.write(json.dumps(record) + "\n")
        self._file.flush()

    def close(self) -> None:
        self._file.close()


def run_name(dump_folder: str | os.PathLike[str]) -> str:
    """The training run a dump folder belongs to, for the progress line: `train_and_record`
    puts it in ``<work>/<name>-<16 hex key>/out``; any other layout gives the folder's parent."""
    parent = Path(dump_folder).absolute().parent.name
    match = re.fullmatch(r"(.+)-[0-9a-f]{16}", parent)
    return match.group(1) if match else parent


def read_metrics(path: str | os.PathLike[str]) -> dict[int, dict[str, Any]]:
    """The JSON Lines metrics of a run: step -> its last record (a resumed run re-logs the
    steps after its checkpoint). A truncated last line (killed mid-write) is skipped."""
    records: dict[int, dict[str, Any]] = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                continue
            records[int(record["step"])] = record
    return dict(sorted(records.items()))


class ApertusMetrics(MetricsProcessor):
    """torchtitan's `MetricsProcessor` plus:

    - `jsonl_file`: per-step metrics as JSON Lines (rank 0), next to TensorBoard if enabled;
    - the data loader's loss-mask counts since the last log, summed over all ranks: Goldfish's
      dropped fraction (~1/k), the EOD-masked fraction and the kept tokens;
    - progress (rank 0): an `apertus.core.progress` line ``training <run> N/total steps`` with
      the ETA from the mean step time since this process's first logged step (so neither a
      resume nor the first step's warm-up skews it), the loss and tokens/s, and the ETA as
      ``eta_s`` in the metrics (from the second logged step on);
    - a stop on a non-finite gradient norm. torchtitan already stops on a non-finite loss; a
      finite loss with NaN/inf gradients would otherwise poison the weights silently. Both
      checks run before the step's checkpoint is written, on every rank (the values are
      global), so no checkpoint holds the result of a bad step. With ``log_freq=1`` (what
      `config_registry` sets) every step is checked.
    """

    @dataclass(kw_only=True, slots=True)
    class Config(MetricsProcessor.Config):
        jsonl_file: str = ""
        """JSON Lines metrics file; relative paths are under the dump folder. Empty: none."""

        total_steps: int = 0
        """The run's last step, for the progress line and ETA (0: no progress line)."""

    def _build_metric_logger(self, *, config: Config, dump_folder: str, **kwargs: Any):
        self.run_name = run_name(dump_folder)
        base = super()._build_metric_logger(config=config, dump_folder=dump_folder, **kwargs)
        rank = dist.get_rank() if dist.is_initialized() else 0
        if not config.jsonl_file or rank != 0:
            return base
        loggers = LoggerContainer()
        loggers.add_logger(base)
        loggers.add_logger(JsonlMetricsLogger(os.path.join(dump_folder, config.jsonl_file)))
        return loggers

    def _progress(self, step: int, loss: float) -> dict[str, float]:
        """Update the progress line (rank 0) and return ``eta_s`` once there is a rate.

        The count starts at the first logged step, so the rate is the mean time per step of
        the steps after it in this process."""
        total = getattr(self.config, "total_steps", 0)
        if not total or (dist.is_initialized() and dist.get_rank() != 0):
            return {}
        fields: dict[str, float] = {"loss": loss}
        started = getattr(self, "time_last_log", None)
        if started is not None and self.ntokens_since_last_log:
            # torchtitan's tokens/s per device, computed as its `log` does.
            elapsed = max(time.perf_counter() - started, 1e-9)
            dims = getattr(self, "parallel_dims", None)
            per_device = dims.non_data_parallel_size if dims is not None else 1
            fields["tokens_per_s"] = self.ntokens_since_last_log / (elapsed * per_device)
        progress: Progress | None = getattr(self, "progress_line", None)
        if progress is None:
            name = getattr(self, "run_name", "") or "run"
            self.progress_line = Progress(total, f"training {name}", unit="steps", initial=step)
            self.progress_line.update(0, **fields)
            return {}
        progress.update(step - progress.done, **fields)
        eta = progress.eta_s
        return {} if eta is None else {"eta_s": eta}

    def close(self) -> None:
        progress: Progress | None = getattr(self, "progress_line", None)
        if progress is not None:
            progress.close()
        super().close()

    def _global_mask_counts(self) -> LossMaskCounts | None:
        loader = active_loader()
        if loader is None:
            return None
        counts = loader.mask_counts.as_tensor()
        loader.mask_counts = LossMaskCounts()
        dims = getattr(self, "parallel_dims", None)
        if dist.is_initialized() and dims is not None and dims.dp_enabled:
            from torchtitan.tools import utils

            # Summed over the data-parallel ranks only: tensor-parallel ranks read the same
            # batch and would count it once per rank.
            on_device = counts.to(torch.device(utils.device_type))
            dist.all_reduce(on_device, group=dims.get_mesh("batch").get_group())
            counts = on_device.cpu()
        return LossMaskCounts.from_tensor(counts)

    def log(
        self,
        step: int,
        global_avg_loss: float,
        global_max_loss: float,
        grad_norm: float,
        extra_metrics: dict[str, Any] | None = None,
    ) -> None:
        if not math.isfinite(grad_norm):
            raise RuntimeError(
                f"Gradient norm is not finite (grad_norm={grad_norm}) at step {step}. "
                "Stopping training; no checkpoint is written for this step."
            )
        extra = dict(extra_metrics or {})
        extra.update(self._progress(step, global_avg_loss))
        if getattr(self, "global_batch", None) is not None:
            extra["global_batch"] = self.global_batch
        counts = self._global_mask_counts()
        if counts is not None:
            extra["loss_mask/goldfish_fraction"] = counts.goldfish_fraction
            extra["loss_mask/eod_fraction"] = counts.eod_fraction
            extra["loss_mask/kept_tokens"] = counts.kept
        super().log(step, global_avg_loss, global_max_loss, grad_norm, extra_metrics=extra)


# ---------------------------------------------------------------------------------------------
# Early stop: signals and the SLURM time limit
# ---------------------------------------------------------------------------------------------


class StopRequest:
    """Why this rank should stop after the current step: a SIGTERM / SIGUSR1 it received
    (SLURM sends SIGTERM on preemption, `scontrol requeue` and `scancel`, then SIGKILL after
    its KillWait), or the deadline in `APERTUS_STOP_AT` (the SLURM time limit minus a margin)."""

    def __init__(self, stop_at: float | None) -> None:
        self.stop_at = stop_at
        self.signal_name: str | None = None

    @classmethod
    def install(cls) -> StopRequest:
        raw = os.environ.get(STOP_AT_ENV)
        request = cls(float(raw) if raw else None)
        for signum in (signal.SIGTERM, signal.SIGUSR1):
            signal.signal(signum, request._on_signal)
        return request

    def _on_signal(self, signum: int, frame: object) -> None:
        self.signal_name = signal.Signals(signum).name

    def reason(self, *, trained: bool) -> str | None:
        """Why to stop now, or None. The deadline counts only once this process `trained` a
        step, so that every attempt makes progress however late it starts."""
        if self.signal_name is not None:
            return f"received {self.signal_name}"
        if trained and self.stop_at is not None and time.time() >= self.stop_at:
            return TIME_LIMIT
        return None


TIME_LIMIT = "the SLURM time limit is near"


def _any_rank(flag: bool, device: torch.device) -> bool:
    """True on every rank if `flag` is true on any rank."""
    if not (dist.is_initialized() and dist.get_world_size() > 1):
        return flag
    value = torch.tensor([int(flag)], dtype=torch.int32, device=device)
    dist.all_reduce(value, op=dist.ReduceOp.MAX)
    return bool(value.item())


# ---------------------------------------------------------------------------------------------
# The trainer: torchtitan's, with the global-batch ramp
# ---------------------------------------------------------------------------------------------


class ApertusTrainer(Trainer):
    """torchtitan's `Trainer` whose global batch follows a `BatchRamp` (RECIPE.md §4: 1024 ->
    2048 sequences for 8B). Before each step the number of accumulated micro-batches is set
    from the step's global batch; the data loader is a stream of micro-batches, the loss is
    normalised by the step's own token count, and the step number is in the checkpoint, so a
    resumed run takes up the ramp where it was. The LR schedule does not change at the switch.
    The step's global batch is logged as ``global_batch``.
    """

    @dataclass(kw_only=True, slots=True)
    class Config(Trainer.Config):
        ramp_batch: int = 0
        """Global batch (sequences) after the switch; 0: no ramp."""

        ramp_switch_step: int = 0
        """Optimizer steps (from 0 of the schedule) trained with `training.global_batch_size`."""

    def __init__(self, config: Config) -> None:
        self.stop_request = StopRequest.install()
        self._first_step: int | None = None
        super().__init__(config)
        start = config.training.global_batch_size
        self._sequences_per_micro_step = start // self.gradient_accumulation_steps
        self.ramp = (
            BatchRamp(start, config.ramp_batch, config.ramp_switch_step)
            if config.ramp_batch
            else BatchRamp.constant(start)
        )
        if self.ramp.batch % self._sequences_per_micro_step:
            raise ApertusError(
                f"batch ramp: global batch {self.ramp.batch} is not a multiple of "
                f"{self._sequences_per_micro_step} sequences per micro-step on all ranks"
            )

    def should_continue_training(self) -> bool:
        """torchtitan's test before each step, plus an early stop: after a SIGTERM/SIGUSR1 on
        any rank, or once `APERTUS_STOP_AT` has passed (and this process trained a step), every
        rank saves a checkpoint of the last step, rank 0 writes `stopped.txt` in the dump
        folder (the launcher reads it), and training ends normally."""
        if self._first_step is None:  # the first call: the checkpoint, if any, is loaded
            self._first_step = self.step
        if not super().should_continue_training():
            return False
        reason = self.stop_request.reason(trained=self.step > self._first_step)
        if not _any_rank(reason is not None, self.device):
            return True
        if self.step > self._first_step:
            assert isinstance(self.checkpointer, FiniteCheckpointManager)
            self.checkpointer.save_now(self.step)
        if not dist.is_initialized() or dist.get_rank() == 0:
            reason = reason or "another rank received a signal"
            logger.warning(f"Stopping early at step {self.step}: {reason}; checkpoint saved")
            with open(os.path.join(self.config.dump_folder, STOPPED_FILE), "w") as f:
                json.dump(
                    {"step": self.step, "reason": reason, "time_limit": reason == TIME_LIMIT}, f
                )
        return False

    def train_step(self, data_iterator: Any) -> None:
        # torchtitan counts steps from 1; the ramp indexes updates from 0.
        batch = self.ramp.batch_at(self.step - 1)
        self.gradient_accumulation_steps = batch // self._sequences_per_micro_step
        if isinstance(self.metrics_processor, ApertusMetrics):
            self.metrics_processor.global_batch = batch
        super().train_step(data_iterator)


# ---------------------------------------------------------------------------------------------
# Checkpointing
# ---------------------------------------------------------------------------------------------


@torch.no_grad()
def assert_finite_parameters(modules: list[nn.Module], what: str) -> None:
    """Raise on every rank if any rank holds a NaN/inf parameter (local shards are checked
    and the count of bad tensors is summed over the ranks)."""
    bad, first = 0, ""
    device = torch.device("cpu")
    for module in modules:
        for name, param in module.named_parameters():
            local = param.to_local() if isinstance(param, DTensor) else param
            device = local.device
            if not bool(torch.isfinite(local).all()):
                bad += 1
                first = first or canonical_fqn(name)
    count = torch.tensor([bad], dtype=torch.int64, device=device)
    if dist.is_initialized() and dist.get_world_size() > 1:
        dist.all_reduce(count)
    total = int(count.item())
    if total:
        where = f" (on this rank: {first})" if first else ""
        raise RuntimeError(
            f"Weights are not finite: {total} parameter shard(s) hold NaN/inf{where}. "
            f"Refusing to write the {what}; the previous checkpoint is kept."
        )


class FiniteCheckpointManager(CheckpointManager):
    """torchtitan's DCP `CheckpointManager` that checks the weights are finite before each
    save and refuses (raising on every rank) otherwise, so a diverged step never replaces the
    last good checkpoint."""

    @dataclass(kw_only=True, slots=True)
    class Config(CheckpointManager.Config):
        pass

    saved_step: int | None = None
    """The step of the last checkpoint this process wrote."""
    _forced: bool = False

    def _should_save(self, curr_step: int, last_step: bool = False) -> bool:
        return self._forced or super()._should_save(curr_step, last_step)

    def _save(self, curr_step: int, last_step: bool = False) -> bool:
        if self._should_save(curr_step, last_step):
            assert_finite_parameters(self.states[MODEL].model, f"checkpoint of step {curr_step}")
        saved = super()._save(curr_step, last_step)
        if saved:
            self.saved_step = curr_step
        return saved

    def save_now(self, curr_step: int) -> None:
        """A full checkpoint (to resume from) of `curr_step`, whatever the interval, unless
        this step's is already written; waits for it to be on disk."""
        if not self.enable or self.saved_step == curr_step:
            return
        self._forced = True
        try:
            self._save(curr_step)
        finally:
            self._forced = False
        self.maybe_wait_for_saving()
