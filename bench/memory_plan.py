r"""The memory plan held to reality on the CPU: `apertus.sizing.memory.training_memory` (what
`apertus plan` says one training rank holds at its peak) against the peak of real training steps
of our model, measured per rank (issue 42, item 2a).

    python -m bench.memory_plan [--quick] [--cases NAME,...] [--threads N]

Each case is one training job on 1 or 2 gloo processes (`torch.multiprocessing` spawn): the model
built on the meta device, tensor parallelism (`apply_tensor_parallel`), context parallelism
(`apply_context_parallel`), full activation checkpointing (torchtitan's FullAC: a non-reentrant
`checkpoint_wrapper` per block), then FSDP2 as `parallelize_apertus` shards it (each block, then
[norm, lm_head] not resharded after forward, then the root; summed gradients), materialised,
initialised, and AdEMAMix with the recipe's two parameter groups. A step: forward with the dense
document mask the CPU path uses (``attn_backend="sdpa"``, `ApertusModel.attention_mask`; under CP
the rank's rows of it), torchtitan's summed fp32 cross-entropy over the kept labels, backward,
AdEMAMix step, ``zero_grad(set_to_none=True)``. Two steps run; the second is measured (the
optimizer states exist after the first).

- **tracked peak**: the highest sum of live tensor storages during the second step, from
  `torch.distributed._tools.mem_tracker.MemTracker` (a dispatch mode that sees every storage
  the step creates and the model and optimizer hold), with its per-category peaks (parameters,
  gradients, optimizer states, activations, temporaries); this is what the plan's ``counted``
  (every part but the allocator margin, 0 on the CPU) is compared with: goal within +-10 %;
- **RSS peak**: the process's ``ru_maxrss`` after the steps minus its RSS right before the model
  was built, for information (glibc's allocator, the gloo buffers and torch's own caches are in
  it; the plan does not count them).

The ratio printed is tracked / planned, goal 0.9 .. 1.1 (the `Ratio` goal column shows the upper
bound; the note says when the lower one is missed).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import resource
import socket
import tempfile
from contextlib import nullcontext
from dataclasses import dataclass

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F
from torch.distributed._tools.mem_tracker import MemTracker
from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import FSDPModule, MixedPrecisionPolicy, fully_shard
from torch.distributed.tensor.parallel import loss_parallel

from apertus.model.flavors import flavor
from apertus.model.shapes import FLAVOR_SHAPES, Shape
from apertus.sizing.memory import TrainingLayout, training_memory
from apertus.train.ademamix import AdEMAMix, param_groups
from apertus.train.run_spec import AdEMAMixSpec
from bench.common import Ratio, main

MB = 1 << 20
LR = 3e-4
TOLERANCE = 0.10
IGNORE_INDEX = -100

# A larger shape that still runs in seconds on 2 cores.
MEDIUM = Shape(
    dim=512,
    n_layers=4,
    n_heads=8,
    n_kv_heads=4,
    head_dim=64,
    ffn_hidden=1536,
    vocab_size=16384,
    max_seq_len=1024,
)
SHAPES = {"tiny": FLAVOR_SHAPES["tiny"], "medium": MEDIUM}


@dataclass(frozen=True)
class Case:
    name: str
    shape: str
    ranks: int = 1
    tp: int = 1
    cp: int = 1
    ac: str = "none"
    dtype: str = "float32"
    batch: int = 2
    seq_len: int = 256


CASES = (
    Case("tiny 1p", "tiny"),
    Case("tiny 1p AC", "tiny", ac="full"),
    Case("tiny 2p", "tiny", ranks=2),
    Case("tiny 2p AC", "tiny", ranks=2, ac="full"),
    Case("medium 1p", "medium", seq_len=512),
    Case("medium 1p AC", "medium", seq_len=512, ac="full"),
    Case("medium 2p", "medium", ranks=2, seq_len=512),
    Case("medium 2p AC", "medium", ranks=2, seq_len=512, ac="full"),
    Case("tiny 1p bf16", "tiny", dtype="bfloat16"),
    Case("tiny CP2", "tiny", ranks=2, cp=2),
    Case("tiny TP2", "tiny", ranks=2, tp=2),
)
QUICK_CASES = (
    Case("debug 1p", "debug", batch=1, seq_len=64),
    Case("debug 1p AC", "debug", batch=1, seq_len=64, ac="full"),
)


def shape_of(name: str) -> Shape:
    return SHAPES.get(name) or FLAVOR_SHAPES[name]


def layout(case: Case) -> TrainingLayout:
    return TrainingLayout(
        shape=shape_of(case.shape),
        seq_len=case.seq_len,
        micro_batch=case.batch,
        ranks=case.ranks,
        tensor_parallel=case.tp,
        context_parallel=case.cp,
        dtype=case.dtype,
        activation_checkpoint=case.ac,
        attention="sdpa",
        accelerator=False,
    )


def _rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _batch(case: Case, vocab: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    from bench.train_step import synthetic_batch

    return synthetic_batch(case.batch, case.seq_len, vocab, seed=1)


def _build(case: Case, world: int):
    shape = shape_of(case.shape)
    overrides = {
        f.name: getattr(shape, f.name) for f in dataclasses.fields(Shape) if f.name != "max_seq_len"
    }
    config = flavor("tiny", **overrides, max_seq_len=max(case.seq_len, 64), attn_backend="sdpa")
    dims, names = [], []
    fsdp = world // (case.tp * case.cp)
    for degree, name in ((fsdp, "dp"), (case.cp, "cp"), (case.tp, "tp")):
        dims.append(degree)
        names.append(name)
    mesh = init_device_mesh("cpu", tuple(dims), mesh_dim_names=tuple(names))
    with torch.device("meta"):
        model = config.build()
    if case.tp > 1:
        from apertus.model.parallelize import apply_tensor_parallel

        apply_tensor_parallel(model, mesh["tp"])
    if case.cp > 1:
        from apertus.model.parallelize import apply_context_parallel

        apply_context_parallel(model, mesh["cp"])
    if case.ac == "full":
        for key, block in list(model.layers.named_children()):
            model.layers.register_module(
                key, checkpoint_wrapper(block, preserve_rng_state=False, early_stop=False)
            )
    fsdp_mesh = mesh["dp", "cp"]._flatten("fsdp") if case.cp > 1 else mesh["dp"]
    dtype = getattr(torch, case.dtype)
    options = {
        "mesh": fsdp_mesh,
        "mp_policy": MixedPrecisionPolicy(
            param_dtype=dtype, reduce_dtype=torch.float32, cast_forward_inputs=False
        ),
    }
    fully_shard(model.tok_embeddings, **options, reshard_after_forward=True)
    for block in model.layers.values():
        fully_shard(block, **options, reshard_after_forward=True)
    fully_shard([model.norm, model.lm_head], **options, reshard_after_forward=False)
    fully_shard(model, **options)
    for module in model.modules():
        if isinstance(module, FSDPModule):
            module.set_gradient_divide_factor(1.0)
            module.set_force_sum_reduction_for_comms(True)
    model.to_empty(device="cpu")
    with torch.no_grad():
        model.init_weights(buffer_device=torch.device("cpu"))
    spec = dataclasses.asdict(AdEMAMixSpec())
    optimizer = AdEMAMix(param_groups(model, spec["weight_decay"]), lr=LR, foreach=True, **spec)
    return model.train(), optimizer, config


def _worker(rank: int, world: int, case: Case, init: str, threads: int, queue) -> None:
    torch.set_num_threads(threads)
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=world)
    try:
        queue.put((rank, _measure_rank(case, world)))
    finally:
        dist.destroy_process_group()


class _PeakMoment(MemTracker):
    """MemTracker that also remembers where the step was at its peak: the innermost modules
    running then, and whether in the forward or the backward."""

    moment = "before the step"

    def _update_peak_stats(self, peak_state) -> None:
        before = dict(self._peak_mem)
        super()._update_peak_stats(peak_state)
        if self._peak_mem != before:
            parents = [p for p in self._mod_tracker.parents if p != "Global"]
            where = max(parents, key=len) if parents else "outside the modules (loss / optimizer)"
            phase = "backward" if self._mod_tracker.is_bw else "forward"
            self.moment = f"{phase}, {where}"


def _measure_rank(case: Case, world: int) -> dict:
    before = _rss_bytes()
    model, optimizer, config = _build(case, world)
    inputs, positions, labels = _batch(case, config.vocab_size)
    extra = {}
    if case.cp > 1:
        group = model.layers["0"].attention.context
        order = group.layout(inputs.shape[1], inputs.device)
        extra["attention_mask"] = model.attention_mask(positions, inputs, queries=order)
        inputs, positions, labels = (group.shard(t, order) for t in (inputs, positions, labels))
    kept = (labels != IGNORE_INDEX).sum()

    # Under TP the logits are vocab-sharded (Shard(-1)): torchtitan's vocab-parallel loss.
    loss_context = loss_parallel if case.tp > 1 else nullcontext

    def step() -> None:
        logits = model(inputs, positions, **extra)
        with loss_context():
            loss = (
                F.cross_entropy(logits.float().flatten(0, 1), labels.flatten(), reduction="sum")
                / kept
            )
            del logits
            loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    step()
    tracker = _PeakMoment()
    tracker.track_external(model, optimizer, inputs, positions, labels)
    with tracker:
        step()
    peak = tracker.get_tracker_snapshot("peak")
    device = next(k for k in peak if getattr(k, "type", str(k)) == "cpu")
    by_kind = {str(getattr(k, "value", k)): v for k, v in peak[device].items()}
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - before
    total = by_kind.pop("Total")
    return {"tracked": total, "kinds": by_kind, "rss": rss, "moment": tracker.moment}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_case(case: Case, threads: int) -> list[dict]:
    """Every rank's measurement of `case` (spawned processes, gloo)."""
    context = mp.get_context("spawn")
    queue = context.SimpleQueue()
    with tempfile.TemporaryDirectory() as tmp:
        init = f"file://{tmp}/store"
        if case.ranks == 1:
            processes = [context.Process(target=_worker, args=(0, 1, case, init, threads, queue))]
        else:
            init = f"tcp://127.0.0.1:{_free_port()}"
            processes = [
                context.Process(target=_worker, args=(r, case.ranks, case, init, threads, queue))
                for r in range(case.ranks)
            ]
        for p in processes:
            p.start()
        for p in processes:
            p.join()
        failed = [p.exitcode for p in processes if p.exitcode]
        if failed:
            raise RuntimeError(f"{case.name}: a rank exited with {failed}")
        results = dict(queue.get() for _ in processes)
    return [results[r] for r in sorted(results)]


def _mb(n: float) -> str:
    return f"{n / MB:.1f}"


def measure(args: argparse.Namespace) -> list[Ratio]:
    cases = QUICK_CASES if args.quick else CASES
    if args.cases:
        wanted = {c.strip() for c in args.cases.split(",")}
        cases = tuple(c for c in (*CASES, *QUICK_CASES) if c.name in wanted)
    rows, table = [], []
    for case in cases:
        plan = training_memory(layout(case))
        ranks = run_case(case, args.threads)
        print(
            f"{case.name}: planned {_mb(plan.counted)} MB, tracked per rank "
            f"{[_mb(r['tracked']) for r in ranks]} MB",
            flush=True,
        )
        worst = max(ranks, key=lambda r: r["tracked"])
        ratio = worst["tracked"] / plan.counted
        parts = ", ".join(f"{k} {_mb(v)}" for k, v in plan.parts.items() if v)
        kinds = ", ".join(f"{k} {_mb(v)}" for k, v in worst["kinds"].items() if v)
        ok = abs(ratio - 1) <= TOLERANCE
        table.append(
            (
                case.name,
                plan.counted,
                worst["tracked"],
                ratio,
                worst["rss"],
                ok,
                f"{parts} (at {plan.moment})",
                f"{kinds} (at {worst['moment']})",
            )
        )
        rows.append(
            Ratio(
                f"{case.name} tracked peak / plan",
                worst["tracked"] / MB,
                plan.counted / MB,
                "MB",
                "planned counted",
                goal=1 + TOLERANCE,
                note=f"{'' if ok else 'OUTSIDE +-10 %; '}plan at {plan.moment}: {parts}; "
                f"tracked at its peak ({worst['moment']}): {kinds}; "
                f"RSS peak {_mb(worst['rss'])} MB; "
                f"{case.batch} x {case.seq_len} tokens, {case.dtype}",
            )
        )
    print(format_memory_table(table), flush=True)
    print(flush=True)
    return rows


def format_memory_table(table: list[tuple]) -> str:
    header = ("case", "planned MB", "tracked MB", "ratio", "RSS peak MB", "+-10%")
    lines = [header] + [
        (name, _mb(plan), _mb(tracked), f"{ratio:.3f}", _mb(rss), "ok" if ok else "MISSED")
        for name, plan, tracked, ratio, rss, ok, _, _ in table
    ]
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    out = [
        "  ".join(
            c.ljust(w) if i == 0 else c.rjust(w)
            for i, (c, w) in enumerate(zip(line, widths, strict=True))
        )
        for line in lines
    ]
    out.insert(1, "  ".join("-" * w for w in widths))
    out.append("")
    for name, _, _, _, _, _, parts, kinds in table:
        out.append(f"{name}: plan {parts}")
        out.append(f"{' ' * len(name)}  tracked {kinds}")
    return "\n".join(out)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--cases", help="comma-separated case names (default: all)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads per process")


if __name__ == "__main__":
    main(add_arguments, measure, __doc__)
