"""One training step of the real model at a preset's real size and world size, traced for one
rank on fake tensors, against the plan (`apertus.sizing.memory.training_memory`).

Nothing is allocated and no GPU is needed: the process joins torch's fake process group
(``init_process_group("fake")``: every collective returns at once with the right shapes) as one
rank of `world_size`, torchtitan's `ParallelDims` builds the meshes on it, the model
(`apertus.model.flavors.flavor`, built on the meta device as the trainer builds it) goes
through the project's own `apertus.model.parallelize.parallelize_apertus` (tensor and context
parallelism, torchtitan's activation checkpointing, FSDP2 with bf16 compute copies and fp32
reductions) and is materialised under `FakeTensorMode`. torch's
`torch.distributed._tools.fsdp2_mem_tracker.FSDPMemTracker` then follows, tensor by tensor,
what this rank holds through the step the trainer runs: the forward, torchtitan's
cross-entropy (``cross_entropy_loss``: ``logits.float()`` then ``cross_entropy``, or the
vocab-parallel one over a ``Shard(-1)`` DTensor under TP), the ``del pred`` of torchtitan's
``_forward_backward_body``, the backward and `apertus.train.ademamix.AdEMAMix.step`.

What is traced, and how it differs from a GPU run:

- **Steady state.** AdEMAMix makes m1, m2 and v at its first step. Before tracing, one step on
  zero gradients creates them (no forward), so the traced step is any later step: the states
  are alive through the forward and backward, as in `training_memory`.
- **Two phases.** The forward with the backward, and the optimizer step, are traced by two
  trackers (`Trace.phases`); the peak is the larger of the two, as the plan's.
- **Attention.** Without a dense mask: the causal path of SDPA (``is_causal``, the model's
  ``mask=None``), which on CPU fake tensors is the flash kernel and keeps q, k, v, the output
  and the log-sum-exp, like FlexAttention on GPU; the plan is asked for ``attention="flex"``
  (no dense mask). Under context parallelism the rank's queries attend to the gathered keys
  with SDPA's causal flag (a [L/c, L] causal corner) instead of the trainer's block mask: the
  same tensors, another pattern; masks do not change what is kept.
- **The CPU's eager code.** The tracer runs the model eagerly on the CPU, so it sees what the
  plan plans (the eager code; ``torch.compile``'s fusion on GPU keeps less). The CUDA context,
  NCCL's buffers and the caching allocator's fragmentation are not tensors: the plan's
  ``allocator margin`` is left out of the comparison (`Memory.counted`). xIELU runs its
  where-free CPU form (`apertus.model.model._masked_form`): its backward's temporaries are
  that form's (eager GPUs run the ``torch.where`` form; compiled, either is one kernel).
- **Collectives.** The fake process group returns the output of every collective at once, so
  the tracer cannot see how far FSDP2's prefetch runs ahead of the compute on a GPU's separate
  streams: the unsharded parameters it shows are those alive in program order.
- **Gradient clipping** (the trainer's ``max_norm``) is not traced: per-parameter norms, a few
  bytes each.

`trace_step` traces in the calling process (it joins and leaves the fake process group and
patches torchtitan's device to the CPU, `apertus.train.cpu_workarounds.use_cpu_device`);
`trace_step_in_subprocess` runs it in a fresh interpreter, for callers that must stay clean
(the tests). ``python -m apertus.sizing.fake_cluster`` prints the traced peak against the plan,
part by part (`comparison`).

Where the peaks fall (what the tracer shows; `Trace.where` names the module): (A) the start of
the loss's backward: the fp32 log-softmax, its gradient and the logits' gradient (12 bytes per
logit; 16 in the vocab-parallel loss under TP), the lm_head unit gathered, the checkpointed
block inputs; (B) the lm_head unit's reduce-scatter: its fp32 gradient copy, the last block
prefetched; (C) a block's backward: the block gathered, the next unit's all-gather buffer
(prefetch; the embedding's below block 0), the previous unit's fp32 reduce-scatter buffer
(FSDP2 keeps it until the next reduce-scatter), the block's recomputed tensors, its unsharded
weight gradients so far and the backward's temporaries (xIELU's the largest); (D) the embedding's
backward: its whole weight gradient (the embedding is not split over TP ranks); (E) the
optimizer step. 8B at 4096 tokens peaks at (A), 70B at (C), 8B under TP 4 at (D).

Timings (one core of this project's 2-core machine, torch 2.13, nothing else running): 8B at 256
ranks, seq 4096, full AC, 32 layers: 29 s (setup 10 s, the traced step 18 s); 8B at 128 ranks,
seq 65536, CP 4, 32 layers: 27 s; 70B at 2048 ranks, seq 4096, 80 layers: 118 s (setup 36 s, step
82 s). The time grows with the layers, not the width: fake tensors cost per op, and the tracker
visits every FSDP unit at every op, so the time grows faster than the layers. `n_layers`
traces fewer layers at full width (8 layers of 70B: 12 s), and the plan is then asked for the
same reduced shape (`plan_for`), so like is compared with like.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from apertus.model.shapes import FLAVOR_SHAPES, Shape
from apertus.sizing.memory import Memory, TrainingLayout, training_memory

__all__ = [
    "PLAN_PARTS",
    "Trace",
    "comparison",
    "plan_for",
    "sharding_mismatches",
    "trace_shape",
    "trace_step",
    "trace_step_in_subprocess",
    "traces_in_subprocess",
]

# The tracker's categories (`_FSDPRefType`'s values) summed into the plan's parts. The tracker
# cannot tell the logits from the other activations (both are "Activation" in the forward and
# "Temp" in the backward), so those two parts are compared together; the optimizer step's
# temporary (``denoms``) is an "OptState" to the tracker (it is made inside ``step``) while the
# plan counts it with the gradients, so at the optimizer step it moves from one to the other.
# In a block's backward the tracker counts its recomputed tensors and its unsharded weight
# gradients as "Temp" (the latter become "Unsharded Grad" only at the block's post-backward).
PLAN_PARTS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "master weights": (("master weights",), ("Sharded Param", "Buffer")),
    "optimizer states": (("optimizer states",), ("OptState",)),
    "gradients": (("gradients",), ("Sharded Grad",)),
    "parameters": (("parameters",), ("Unsharded Param", "All Gather")),
    "activations + logits": (("activations", "logits and loss"), ("Activation", "Temp", "Inputs")),
    "communication buffers": (("communication buffers",), ("Unsharded Grad", "Reduce Scatter")),
}

_FORWARD_BACKWARD = "forward + backward"
_OPTIMIZER_STEP = "optimizer step"


@dataclass
class Trace:
    """What one rank holds at the peak of a traced training step (`trace_step`)."""

    flavor: str
    shape: Shape
    """The traced shape (the flavor's, with `n_layers` and the sequence length applied)."""
    world_size: int
    tensor_parallel: int
    context_parallel: int
    seq_len: int
    micro_batch: int
    activation_checkpoint: str
    dtype: str
    rank: int
    peak_bytes: int
    """The larger of the phases' peaks."""
    moment: str
    """The phase the peak falls in: "forward + backward" or "optimizer step"."""
    phases: dict[str, dict[str, int]]
    """Per phase, the tracker's categories (bytes) at that phase's peak, "Total" included."""
    where: dict[str, str]
    """Per phase, where its peak falls: "forward" or "backward" of the innermost module
    running (the backward of a checkpointed block includes its recomputation)."""
    param_numel: dict[str, int]
    """Per parameter (its name in the model), the elements of this rank's FSDP2 shard storage
    (dim 0 padded to a multiple of the FSDP degree)."""
    param_local_shape: dict[str, tuple[int, ...]]
    """Per parameter, its shape on this rank's tensor-parallel slice before FSDP2 (the DTensor's
    global shape divided along its TP-sharded dimension)."""
    optimizer_numel: dict[str, dict[str, int]]
    """Per parameter, the elements of each of its AdEMAMix states (m1, m2, v) on this rank."""
    seconds: dict[str, float] = field(default_factory=dict)
    """Wall time: "setup" (meshes, model, sharding, states), "step" (the traced step), "total"."""

    @property
    def categories(self) -> dict[str, int]:
        """The tracker's categories at the peak."""
        return self.phases[self.moment]

    def layout(self) -> TrainingLayout:
        """The plan's layout of this trace (`plan_for`)."""
        return TrainingLayout(
            shape=self.shape,
            seq_len=self.seq_len,
            micro_batch=self.micro_batch,
            ranks=self.world_size,
            tensor_parallel=self.tensor_parallel,
            context_parallel=self.context_parallel,
            dtype=self.dtype,
            activation_checkpoint=self.activation_checkpoint,
            # No dense mask is traced (the module doc); FlexAttention's block mask is tiny.
            attention="flex",
            accelerator=False,
        )

    def as_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["shape"] = dataclasses.asdict(self.shape)
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Trace:
        data = dict(data)
        data["shape"] = Shape(**data["shape"])
        data["param_local_shape"] = {k: tuple(v) for k, v in data["param_local_shape"].items()}
        return cls(**data)


def trace_shape(flavor: str, *, seq_len: int, n_layers: int | None = None) -> Shape:
    """The shape a trace builds: the flavor's, with `n_layers` blocks (None: all) and room for
    `seq_len` tokens (the long-context stages raise ``max_seq_len`` the same way)."""
    shape = FLAVOR_SHAPES[flavor]
    return dataclasses.replace(
        shape,
        n_layers=shape.n_layers if n_layers is None else n_layers,
        max_seq_len=max(shape.max_seq_len, seq_len),
    )


def plan_for(trace: Trace) -> Memory:
    """`training_memory` for the traced layout and the traced (possibly reduced) shape."""
    return training_memory(trace.layout())


def _peak_locating_tracker(model, optimizer):
    """An `FSDPMemTracker` that also notes where each new peak falls (`Trace.where`)."""
    from torch.distributed._tools.fsdp2_mem_tracker import FSDPMemTracker
    from torch.distributed._tools.mem_tracker import _TOTAL_KEY

    class PeakLocatingTracker(FSDPMemTracker):
        where = ""

        def _update_peak_stats(self, peak_state) -> None:
            # The rank's peak only: the parent's also updates every module's own peak on
            # every op, a walk over all modules per op that makes a trace quadratic in depth
            # (80 layers of 70B: 109 s, 36 s without it).
            for device, snapshot in self._curr_mem_snap.items():
                total = snapshot[_TOTAL_KEY]
                if self._peak_mem.get(device, 0) < total:
                    self._peak_mem[device] = total
                    self._peak_mem_snap[device] = dict(snapshot)
                    running = self._mod_tracker.parents - {"Global"}
                    module = max(running, key=len) if running else "the loss (outside the model)"
                    direction = "backward" if self._mod_tracker.is_bw else "forward"
                    self.where = "optimizer step" if self._in_opt else f"{direction} of {module}"

    return PeakLocatingTracker(model, optimizer)


def _tracker_snapshot(tracker) -> dict[str, int]:
    """The tracker's peak snapshot of the CPU device as {category: bytes}, "Total" included."""
    snapshot = tracker.get_tracker_snapshot("peak")
    totals: dict[str, int] = {}
    for categories in snapshot.values():
        for key, value in categories.items():
            name = getattr(key, "value", key)
            totals[name] = totals.get(name, 0) + int(value)
    return totals


def trace_step(
    flavor: str,
    *,
    world_size: int,
    seq_len: int,
    tensor_parallel: int = 1,
    context_parallel: int = 1,
    micro_batch: int = 1,
    activation_checkpoint: str = "full",
    dtype: str = "bfloat16",
    n_layers: int | None = None,
    rank: int = 0,
) -> Trace:
    """Trace one training step of `flavor` for rank `rank` of `world_size` (the module doc).

    Joins the fake process group for the trace and destroys it at the end; raises if a
    process group is already initialised in this process.
    """
    start = time.perf_counter()
    import torch
    import torch.distributed as dist
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.distributed.tensor import DTensor, Shard
    from torch.testing._internal.distributed.fake_pg import FakeStore
    from torchtitan.components.loss import CrossEntropyLoss
    from torchtitan.config import CompileConfig, ParallelismConfig, TrainingConfig
    from torchtitan.distributed import ParallelDims
    from torchtitan.distributed import utils as dist_utils
    from torchtitan.distributed.activation_checkpoint import FullAC, SelectiveAC

    from apertus.model.flavors import flavor as flavor_config
    from apertus.model.parallelize import parallelize_apertus
    from apertus.train import cpu_workarounds
    from apertus.train.ademamix import AdEMAMix, param_groups
    from apertus.train.run_spec import MASTER_DTYPE, REDUCE_DTYPE

    if dist.is_initialized():
        raise RuntimeError("trace_step joins the fake process group; one is already initialised")
    shape = trace_shape(flavor, seq_len=seq_len, n_layers=n_layers)
    ac_config = {
        "none": None,
        "full": FullAC.Config(),
        "selective": SelectiveAC.Config(),
    }[activation_checkpoint]
    # torchtitan picks "cuda" at import without an accelerator; the meshes live on the CPU.
    cpu_workarounds.use_cpu_device()
    dist_utils.set_spmd_backend("partial_dtensor")
    dist.init_process_group("fake", rank=rank, world_size=world_size, store=FakeStore())
    try:
        parallel_dims = ParallelDims(
            dp_replicate=1,
            dp_shard=-1,
            cp=context_parallel,
            tp=tensor_parallel,
            pp=1,
            ep=1,
            world_size=world_size,
            spmd_backend="partial_dtensor",
        )
        parallel_dims.build_mesh()
        config = flavor_config(
            flavor, n_layers=shape.n_layers, max_seq_len=shape.max_seq_len, attn_backend="sdpa"
        )
        with torch.device("meta"):
            model = config.build()
        # As `apertus.train.config_registry.trainer_config`: fp32 master weights, the stage's
        # dtype for the compute copies, fp32 reductions.
        model = parallelize_apertus(
            model,
            parallel_dims=parallel_dims,
            training=TrainingConfig(
                dtype=MASTER_DTYPE,
                mixed_precision_param=dtype,
                mixed_precision_reduce=REDUCE_DTYPE,
            ),
            parallelism=ParallelismConfig(
                spmd_backend="partial_dtensor",
                tensor_parallel_degree=tensor_parallel,
                enable_sequence_parallel=False,
                context_parallel_degree=context_parallel,
            ),
            compile_config=CompileConfig(enable=False),
            ac_config=ac_config,
            dump_folder="",
        )
        # The meta model's tensors are not fake ones: to_empty turns them into fake tensors.
        with FakeTensorMode(allow_non_fake_inputs=True):
            model.to_empty(device="cpu")
            optimizer = AdEMAMix(param_groups(model, weight_decay=0.1), lr=1e-4)
            # The first step creates m1, m2 and v, and fills DTensor's sharding-propagation
            # cache for the foreach ops (a first propagation inside the tracker would count
            # full-size tensors); the traced step is a later one.
            for param in model.parameters():
                param.grad = torch.zeros_like(param)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)

            tokens_per_rank = seq_len // context_parallel
            tokens = torch.randint(0, shape.vocab_size, (micro_batch, tokens_per_rank))
            labels = torch.randint(0, shape.vocab_size, (micro_batch, tokens_per_rank))
            # The trainer's loss (`apertus.train.config_registry.trainer_config`): the sum
            # over the tokens divided by the global batch's.
            loss_fn = CrossEntropyLoss(CrossEntropyLoss.Config(global_vocab_size=shape.vocab_size))
            global_valid_tokens = torch.tensor(float(tokens.numel() * world_size))
            setup_done = time.perf_counter()

            tracker = _peak_locating_tracker(model, optimizer)
            tracker.track_inputs((tokens, labels))
            with tracker:
                pred = model(tokens)
                loss, _ = loss_fn(pred, labels, global_valid_tokens)
                del pred  # as torchtitan's _forward_backward_body, before the backward
                loss.backward()
                del loss
            phases = {_FORWARD_BACKWARD: _tracker_snapshot(tracker)}
            where = {_FORWARD_BACKWARD: tracker.where}
            tracker = _peak_locating_tracker(model, optimizer)
            with tracker:
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)
            phases[_OPTIMIZER_STEP] = _tracker_snapshot(tracker)
            where[_OPTIMIZER_STEP] = tracker.where
            step_done = time.perf_counter()

            param_numel: dict[str, int] = {}
            param_local_shape: dict[str, tuple[int, ...]] = {}
            optimizer_numel: dict[str, dict[str, int]] = {}
            for name, param in model.named_parameters():
                local = param.to_local() if isinstance(param, DTensor) else param
                storage = local.untyped_storage()
                param_numel[name] = storage.nbytes() // local.element_size()
                dims = list(param.shape)
                tp_mesh = parallel_dims.get_mesh("tp") if tensor_parallel > 1 else None
                if isinstance(param, DTensor) and tp_mesh is not None:
                    for mesh_dim, placement in enumerate(param.placements):
                        names = param.device_mesh.mesh_dim_names or ()
                        if isinstance(placement, Shard) and names[mesh_dim : mesh_dim + 1] == (
                            "tp",
                        ):
                            dims[placement.dim] //= tensor_parallel
                param_local_shape[name] = tuple(dims)
                state = optimizer.state[param]
                optimizer_numel[name] = {
                    key: (value.to_local() if isinstance(value, DTensor) else value).numel()
                    for key, value in state.items()
                    if key in ("m1", "m2", "v")
                }
    finally:
        dist.destroy_process_group()
    moment = max(phases, key=lambda phase: phases[phase]["Total"])
    return Trace(
        flavor=flavor,
        shape=shape,
        world_size=world_size,
        tensor_parallel=tensor_parallel,
        context_parallel=context_parallel,
        seq_len=seq_len,
        micro_batch=micro_batch,
        activation_checkpoint=activation_checkpoint,
        dtype=dtype,
        rank=rank,
        peak_bytes=phases[moment]["Total"],
        moment=moment,
        phases=phases,
        where=where,
        param_numel=param_numel,
        param_local_shape=param_local_shape,
        optimizer_numel=optimizer_numel,
        seconds={
            "setup": setup_done - start,
            "step": step_done - setup_done,
            "total": time.perf_counter() - start,
        },
    )


def trace_step_in_subprocess(flavor: str, *, timeout: float = 600, **options: Any) -> Trace:
    """`trace_step` in a fresh interpreter (``python -m apertus.sizing.fake_cluster --json``),
    so that the caller's process keeps no process group and no torchtitan patch."""
    return traces_in_subprocess({"trace": (flavor, options)}, timeout=timeout)["trace"]


def traces_in_subprocess(
    cases: Mapping[str, tuple[str, Mapping[str, Any]]], *, timeout: float = 600
) -> dict[str, Trace]:
    """`trace_step` of each case (name -> (flavor, options)) one after another in one fresh
    interpreter (``--many``): torch is imported once, the process group made and destroyed
    per trace."""
    specs = [{"flavor": flavor, **options} for flavor, options in cases.values()]
    command = [sys.executable, "-m", "apertus.sizing.fake_cluster", "--many", json.dumps(specs)]
    proc = subprocess.run(command, capture_output=True, text=True, timeout=timeout, check=False)
    if proc.returncode != 0:
        raise RuntimeError(
            f"{' '.join(command)} exited with {proc.returncode}:\n{proc.stderr[-4000:]}"
        )
    lines = proc.stdout.splitlines()[-len(specs) :]
    return {
        name: Trace.from_dict(json.loads(line)) for name, line in zip(cases, lines, strict=True)
    }


def comparison(trace: Trace, plan: Memory | None = None) -> list[tuple[str, int, int]]:
    """Rows (part, traced bytes, planned bytes) at the plan's peak moment, compared with the
    traced phase it falls in (the loss's or lm_head's backward: the forward and backward; the
    optimizer step: the step), then "counted" (the plan's `Memory.counted`) against the traced
    peak of the whole step. `PLAN_PARTS` says which categories make which part."""
    plan = plan_for(trace) if plan is None else plan
    phase = _OPTIMIZER_STEP if plan.moment == "optimizer step" else _FORWARD_BACKWARD
    traced = trace.phases[phase]
    planned = dict(plan.parts)
    if phase == _OPTIMIZER_STEP:
        # The step's temporary: an OptState to the tracker, a gradient-sized part to the plan.
        sharded = planned["master weights"] // 4
        planned["gradients"] -= 4 * sharded
        planned["optimizer states"] += 4 * sharded
    rows = []
    for part, (plan_keys, categories) in PLAN_PARTS.items():
        rows.append(
            (
                part,
                sum(traced.get(c, 0) for c in categories),
                sum(planned.get(k, 0) for k in plan_keys),
            )
        )
    rows.append(("counted", trace.peak_bytes, plan.counted))
    return rows


def _format_table(trace: Trace, plan: Memory) -> str:
    gib = 2**30
    lines = [
        f"{trace.flavor} ({trace.shape.n_layers} layers), {trace.world_size} ranks, "
        f"tp {trace.tensor_parallel}, cp {trace.context_parallel}, seq {trace.seq_len}, "
        f"micro-batch {trace.micro_batch}, AC {trace.activation_checkpoint}, {trace.dtype}; "
        f"rank {trace.rank}",
        f"traced peak in the {trace.moment}, in the {trace.where[trace.moment]}; "
        f"planned peak at the {plan.moment}",
        f"{'part':<24}{'traced GiB':>12}{'planned GiB':>13}{'ratio':>8}",
    ]
    for part, traced, planned in comparison(trace, plan):
        ratio = f"{traced / planned:.3f}" if planned else "-"
        lines.append(f"{part:<24}{traced / gib:>12.3f}{planned / gib:>13.3f}{ratio:>8}")
    other = [p for p in trace.phases if p != trace.moment]
    for phase in other:
        lines.append(f"traced peak of the {phase}: {trace.phases[phase]['Total'] / gib:.3f} GiB")
    seconds = ", ".join(f"{k} {v:.1f} s" for k, v in trace.seconds.items())
    lines.append(f"wall time: {seconds}")
    return "\n".join(lines)


def sharding_mismatches(trace: Trace) -> list[str]:
    """Parameters and optimizer states whose elements on this rank differ from the plan's
    sharding (`apertus.sizing.memory.sharded_numel` of the TP-local shape)."""
    from apertus.sizing.memory import sharded_numel

    fsdp = trace.world_size // trace.tensor_parallel
    problems = []
    for name, numel in trace.param_numel.items():
        expected = sharded_numel(trace.param_local_shape[name], fsdp)
        if numel != expected:
            problems.append(f"{name}: shard of {numel} elements, planned {expected}")
        # Rank r's states hold its unpadded slice of dim 0 (rank 0: the full padded one).
        rows = math.ceil(trace.param_local_shape[name][0] / fsdp)
        unpadded = min(rows, max(0, trace.param_local_shape[name][0] - trace.rank * rows))
        state_numel = unpadded * math.prod(trace.param_local_shape[name][1:])
        for key, value in trace.optimizer_numel[name].items():
            if value != state_numel:
                problems.append(f"{name}.{key}: {value} elements, planned {state_numel}")
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m apertus.sizing.fake_cluster",
        description="Trace one training step of a flavor at its real size on a fake cluster "
        "and compare the rank's peak with the plan (apertus.sizing.memory.training_memory).",
    )
    parser.add_argument("--flavor", choices=sorted(FLAVOR_SHAPES))
    parser.add_argument("--world-size", type=int)
    parser.add_argument("--seq-len", type=int, default=4096)
    parser.add_argument("--tensor-parallel", type=int, default=1)
    parser.add_argument("--context-parallel", type=int, default=1)
    parser.add_argument("--micro-batch", type=int, default=1)
    parser.add_argument(
        "--activation-checkpoint", choices=["none", "full", "selective"], default="full"
    )
    parser.add_argument("--dtype", choices=["bfloat16", "float32"], default="bfloat16")
    parser.add_argument("--n-layers", type=int, default=None, help="default: the flavor's")
    parser.add_argument("--rank", type=int, default=0)
    parser.add_argument("--json", action="store_true", help="print the trace as one JSON line")
    parser.add_argument(
        "--many",
        metavar="JSON",
        help="a JSON list of trace_step arguments ({flavor, world_size, ...}): trace each, one "
        "JSON line per trace (the other options are ignored)",
    )
    args = parser.parse_args(argv)
    if args.many:
        for spec in json.loads(args.many):
            flavor = spec.pop("flavor")
            print(json.dumps(trace_step(flavor, **spec).as_dict()), flush=True)
        return 0
    if args.flavor is None or args.world_size is None:
        parser.error("--flavor and --world-size are required (or --many)")
    trace = trace_step(
        args.flavor,
        world_size=args.world_size,
        seq_len=args.seq_len,
        tensor_parallel=args.tensor_parallel,
        context_parallel=args.context_parallel,
        micro_batch=args.micro_batch,
        activation_checkpoint=args.activation_checkpoint,
        dtype=args.dtype,
        n_layers=args.n_layers,
        rank=args.rank,
    )
    if args.json:
        print(json.dumps(trace.as_dict()))
        return 0
    print(_format_table(trace, plan_for(trace)))
    problems = sharding_mismatches(trace)
    print(
        "sharding: every parameter and optimizer state as planned"
        if not problems
        else "sharding differs from the plan:\n  " + "\n  ".join(problems)
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
