"""How Apertus is spread over ranks in torchtitan's trainer (torchtitan keeps the same in
``models/llama3/parallelize.py``): tensor parallelism of the blocks (`apply_tensor_parallel`,
checked by `tensor_parallel_problems`), activation checkpointing, per-block compile and FSDP2
over the data-parallel ranks (`parallelize_apertus`), context parallelism of attention
(`apply_context_parallel`), and the initial weights made independent of the number of ranks on
the CPU (`init_weights_world_size_invariant`). Pipeline and expert parallelism raise.
`apertus.model.spec.model_spec` hands these to torchtitan.
"""

from __future__ import annotations

from typing import Any

import torch
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
from torchtitan.components.optimizer import (
    OptimizersContainer,
)
from torchtitan.config import TORCH_DTYPE_MAP, CompileConfig, ParallelismConfig, TrainingConfig
from torchtitan.distributed import ParallelDims
from torchtitan.distributed.activation_checkpoint import ActivationCheckpointingConfig
from torchtitan.distributed.compile import apply_compile
from torchtitan.distributed.fsdp import get_fsdp_reshard_after_forward_policy
from torchtitan.tools.logging import logger

from apertus.core import ApertusError
from apertus.model.context_parallel import ContextGroup
from apertus.model.model import ApertusModel


def running_on_cpu() -> bool:
    """Whether torchtitan's device type is (now) the CPU (`apertus.train.cpu_workarounds`)."""
    from torchtitan.tools import utils

    return utils.device_type == "cpu"


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


def apply_context_parallel(model: ApertusModel, cp_mesh: DeviceMesh) -> None:
    """Every attention layer gathers keys and values over the CP group (its queries stay the
    rank's own tokens; `apertus.model.context_parallel`). The trainer shards the sequences and
    builds the mask rows (`apertus.train.trainer.ApertusTrainer.post_dataloading_process`)."""
    group = ContextGroup(cp_mesh)
    for block in model.layers.values():
        block.attention.context = group
    logger.info(f"Applied context parallelism to Apertus over {group.degree} rank(s)")


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
    PREMUL_SUM (PLATFORM.md blocker 4). Context parallelism (`apply_context_parallel`) gathers
    keys and values in attention; the FSDP mesh then spans the CP ranks too, so their gradient
    parts are summed. Pipeline and expert parallelism are not implemented for Apertus.
    """
    if parallel_dims.cp_enabled:
        apply_context_parallel(model, parallel_dims.get_mesh("cp"))
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
