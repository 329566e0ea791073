r"""Our training step against torchtitan's llama3 at matched size: step time, tokens/s, the share
of our step spent in the EOD + Goldfish loss masks and, on a GPU, MFU; measured side by side in
one run.

    python -m bench.train_step [--quick] [--flavor tiny] [--layers N] [--batch N] [--seq-len N]
        [--steps N] [--threads N] [--device auto|cpu|cuda] [--dtype float32|bfloat16] [--compile]
        [--fsdp] [--apart] [--attention auto|sdpa|flex] [--peak-tflops T]

    # issue 11 item 4 on one H100 (not yet run), with --flavor 1b --batch 2 and with
    # --flavor 8b --layers 8 --batch 1 (~20 bytes a parameter + activations must fit):
    python -m bench.train_step --device cuda --dtype bfloat16 --compile --fsdp --apart \
        --seq-len 4096

Both models come from one shape (`apertus.model.flavors.flavor`, `--layers` truncating
it): dim, layers, q/kv heads, head_dim, vocabulary, sequence length. llama3's SwiGLU hidden size
is 2/3 of our FFN hidden, so both MLPs have 3 * dim * h weights and the same matmul FLOPs
(RECIPE §1). Both are built on the meta device, compiled per block (`--compile`, as torchtitan's
`apply_compile`), sharded (`--fsdp`: `fully_shard` per block on a 1-rank process group, bf16
params and fp32 reductions under `--dtype bfloat16`; without FSDP bf16 is `torch.autocast`), then
materialised and initialised: the order of torchtitan's trainer. Both stay resident and take
turns step by step; `--apart` times one model after the other instead, so only one has to fit
(fp32 weights, grads and optimizer state: 20 bytes a parameter for ours, 16 for llama3).

Our step is what the pretraining trainer runs per micro-batch: the data loader's loss masks on
the CPU labels (`apply_loss_masks`: EOD transitions, then Goldfish k = h = 50), forward with
per-document positions, torchtitan's summed cross-entropy / the kept labels, backward, AdEMAMix
with the recipe's two parameter groups, zero_grad. llama3's: forward, plain cross-entropy,
backward, torch AdamW (foreach), zero_grad. Same batch of packed random documents. The steps
take turns (ours, llama3, the masks alone) and each reports its best time, so load that comes
and goes on a shared machine hits both alike.

Attention: on CUDA both use FlexAttention with a block-causal document mask. torch has no CPU
backward for FlexAttention, so on CPU both use SDPA: ours with its dense document mask (what our
trainer runs on CPU), llama3 with torchtitan's `ScaledDotProductAttention`, plain causal
(torchtitan refuses "sdpa" for llama3 since it cannot take document masks; the bench swaps the
inner attention in).

MFU = model FLOPs/s over the GPU's dense bf16 peak (`PEAK_BF16_FLOPS` by device name, or
`--peak-tflops`), FLOPs per token from torchtitan's dense formula for both (6 * parameters outside
the input embedding + 6 * layers * heads * 2 * head_dim * seq_len). The CUDA path (FlexAttention,
NCCL, MFU) has not yet run on a GPU.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from functools import partial

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
from torchtitan.components.loss import IGNORE_INDEX, cross_entropy_loss
from torchtitan.models.common import ComplexRoPE, Embedding, Linear, RMSNorm
from torchtitan.models.common.attention import FlexAttention, ScaledDotProductAttention
from torchtitan.models.llama3 import (
    _EMBEDDING_INIT,
    _NORM_INIT,
    Llama3Model,
    _build_llama3_layers,
    _output_linear_init,
)

from apertus.core import ApertusError
from apertus.core.device import resolve_device
from apertus.model.flavors import flavor
from apertus.model.model import ApertusModel
from apertus.train.ademamix import AdEMAMix, param_groups
from apertus.train.goldfish import GOLDFISH_H, GOLDFISH_K, apply_loss_masks
from apertus.train.pretokenized import BOS_ID, EOD_ID
from apertus.train.run_spec import AdEMAMixSpec
from bench.common import Ratio, interleaved_best, main

# Peak dense bf16 tensor-core FLOPs by device name (NVIDIA datasheets); the first match wins,
# so the more specific names come first.
PEAK_BF16_FLOPS: tuple[tuple[str, float], ...] = (
    ("H100 NVL", 835e12),
    ("H100 PCIe", 756e12),
    ("H100", 989.4e12),  # SXM
    ("H200", 989.4e12),
    ("A100", 312e12),
    ("B200", 2.25e15),
)

LR = 3e-4
WEIGHT_DECAY = 0.1


# --------------------------------------------------------------------------------------------
# Formulas
# --------------------------------------------------------------------------------------------


def swiglu_hidden(ffn_hidden: int) -> int:
    """The SwiGLU hidden size with the MLP weights of our non-gated FFN: 3 * h = 2 * ffn_hidden
    (rounded when ffn_hidden is not a multiple of 3, as in the `1b` flavor)."""
    return round(2 * ffn_hidden / 3)


def tokens_per_second(batch: int, seq_len: int, step_seconds: float) -> float:
    return batch * seq_len / step_seconds


def mfu(flops_per_token: float, tokens_per_s: float, peak_flops: float) -> float:
    """Model FLOPs utilisation: achieved model FLOPs/s over the device's peak."""
    return flops_per_token * tokens_per_s / peak_flops


def peak_bf16_flops(device_name: str) -> float | None:
    """Peak dense bf16 FLOPs of a GPU from `PEAK_BF16_FLOPS`; None when the name is unknown."""
    for name, flops in PEAK_BF16_FLOPS:
        if name in device_name:
            return flops
    return None


def document_positions(tokens: torch.Tensor) -> torch.Tensor:
    """Positions [B, L] that count from 0 at each row start and at each BOS (a document start),
    as `PhaseDataset.packed_sequences` gives them."""
    index = torch.arange(tokens.shape[1]).expand_as(tokens)
    starts = tokens == BOS_ID
    starts[:, 0] = True
    return index - torch.where(starts, index, 0).cummax(dim=1).values


# --------------------------------------------------------------------------------------------
# Models, batch, step
# --------------------------------------------------------------------------------------------


def llama3_config(config: ApertusModel.Config, seq_len: int, attention: str) -> Llama3Model.Config:
    """torchtitan's llama3 (untied, as its 8B) at the shape of `config`, built with llama3's own
    layer builder; ``attention="sdpa"`` swaps in torchtitan's causal SDPA inner attention."""
    head_dim = config.attention_head_dim
    if head_dim * config.n_heads != config.dim:
        raise ApertusError(
            f"llama3 derives head_dim as dim // n_heads = {config.dim // config.n_heads}, but "
            f"the model has head_dim={head_dim}; pick a flavor where n_heads * head_dim == dim"
        )
    layers = _build_llama3_layers(
        n_layers=config.n_layers,
        dim=config.dim,
        n_heads=config.n_heads,
        n_kv_heads=config.n_kv_heads,
        hidden_dim=swiglu_hidden(config.ffn_hidden),
        rope=ComplexRoPE.Config(
            dim=head_dim, max_seq_len=seq_len, theta=config.rope_theta, scaling="llama"
        ),
        attn_backend="flex",
    )
    if attention == "sdpa":
        for layer in layers:
            layer.attention = dataclasses.replace(
                layer.attention, inner_attention=ScaledDotProductAttention.Config()
            )
    return Llama3Model.Config(
        dim=config.dim,
        vocab_size=config.vocab_size,
        tok_embeddings=Embedding.Config(
            num_embeddings=config.vocab_size, embedding_dim=config.dim, param_init=_EMBEDDING_INIT
        ),
        norm=RMSNorm.Config(normalized_shape=config.dim, param_init=_NORM_INIT),
        lm_head=Linear.Config(
            in_features=config.dim,
            out_features=config.vocab_size,
            param_init=_output_linear_init(config.dim),
        ),
        layers=layers,
    )


def synthetic_batch(
    batch: int, seq_len: int, vocab_size: int, seed: int = 0
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(inputs, positions, labels) [B, L] of packed random documents ``<s> ... </s>`` whose
    lengths are uniform in [seq_len / 8, seq_len], cut into windows of seq_len + 1 tokens."""
    generator = torch.Generator().manual_seed(seed)
    needed, pieces = batch * (seq_len + 1), []
    while needed > 0:
        length = int(torch.randint(max(seq_len // 8, 3), seq_len + 1, (), generator=generator))
        body = torch.randint(3, vocab_size, (length - 2,), generator=generator)
        pieces.append(torch.cat([torch.tensor([BOS_ID]), body, torch.tensor([EOD_ID])]))
        needed -= length
    windows = torch.cat(pieces)[: batch * (seq_len + 1)].view(batch, seq_len + 1)
    inputs = windows[:, :-1].contiguous()
    return inputs, document_positions(inputs), windows[:, 1:].contiguous()


def build(
    model_config, device: torch.device, dtype: torch.dtype, compile_blocks: bool, fsdp_mesh
) -> nn.Module:
    """Build on the meta device, compile each block, shard, then materialise and initialise on
    `device`: the order of torchtitan's trainer and `parallelize_apertus`."""
    with torch.device("meta"):
        model = model_config.build()
    if compile_blocks:
        for block in model.layers.values():
            block.compile(fullgraph=True)
    if fsdp_mesh is not None:
        policy = MixedPrecisionPolicy(
            param_dtype=dtype, reduce_dtype=torch.float32, cast_forward_inputs=False
        )
        for module in (model.tok_embeddings, *model.layers.values()):
            fully_shard(module, mesh=fsdp_mesh, mp_policy=policy)
        fully_shard([model.norm, model.lm_head], mesh=fsdp_mesh, mp_policy=policy)
        fully_shard(model, mesh=fsdp_mesh, mp_policy=policy)
    model.to_empty(device=device)
    with torch.no_grad():
        model.init_weights(buffer_device=device)
    return model.train()


def ademamix(model: nn.Module) -> AdEMAMix:
    """Our optimizer as pretraining configures it (`AdEMAMixSpec` defaults, two groups)."""
    spec = dataclasses.asdict(AdEMAMixSpec())
    return AdEMAMix(param_groups(model, spec["weight_decay"]), lr=LR, foreach=True, **spec)


def adamw(model: nn.Module) -> torch.optim.AdamW:
    return torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=WEIGHT_DECAY, foreach=True)


def loss_masks(inputs: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """The data loader's masking of one batch (`PhaseDataLoader.make_batch`): EOD transitions,
    then Goldfish (k = h = 50)."""
    masked, _ = apply_loss_masks(
        inputs, labels, EOD_ID, goldfish=(GOLDFISH_K, GOLDFISH_H), ignore_index=IGNORE_INDEX
    )
    return masked


def make_step(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    batch: tuple[torch.Tensor, torch.Tensor, torch.Tensor],
    autocast: Callable[[], AbstractContextManager],
    mask_labels: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] | None,
) -> Callable[[], None]:
    """One training step on `batch` (CPU tensors, moved to the model's device each step as the
    loader's batches are): label masks on the CPU (ours), forward with the positions (and, for
    llama3 with FlexAttention, its document block mask), torchtitan's summed cross-entropy over
    the valid labels / their count, backward, optimizer step, zero_grad."""
    device = next(model.parameters()).device
    inputs_cpu, positions_cpu, labels_cpu = batch
    uses_mask_argument = isinstance(model, Llama3Model) and isinstance(
        model.config.first_attention.inner_attention, FlexAttention.Config
    )

    def step() -> None:
        labels = labels_cpu if mask_labels is None else mask_labels(inputs_cpu, labels_cpu)
        inputs, positions, labels = (t.to(device) for t in (inputs_cpu, positions_cpu, labels))
        extra = (
            {"attention_masks": model.get_attention_masks(positions)} if uses_mask_argument else {}
        )
        with autocast():
            logits = model(inputs, positions, **extra)
        loss = cross_entropy_loss(logits, labels) / (labels != IGNORE_INDEX).sum()
        del logits
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    return step


# --------------------------------------------------------------------------------------------
# Protocol
# --------------------------------------------------------------------------------------------


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--flavor", default="tiny", help="model flavor (debug/tiny/1b/8b)")
    parser.add_argument("--layers", type=int, help="truncate the flavor to this many layers")
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--seq-len", type=int, default=256)
    parser.add_argument("--steps", type=int, default=5, help="timed steps (best of)")
    parser.add_argument("--warmup", type=int, default=2, help="untimed steps first")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--device", default="auto", help="auto: CUDA when present, else CPU")
    parser.add_argument("--dtype", choices=("float32", "bfloat16"), default="float32")
    parser.add_argument(
        "--attention",
        choices=("auto", "sdpa", "flex"),
        default="auto",
        help="auto: flex on CUDA, sdpa on CPU",
    )
    parser.add_argument("--compile", action="store_true", help="torch.compile each block")
    parser.add_argument("--fsdp", action="store_true", help="fully_shard on a 1-rank process group")
    parser.add_argument(
        "--apart",
        action="store_true",
        help="time one model at a time (only one resident: bigger shapes fit on a GPU)",
    )
    parser.add_argument(
        "--peak-tflops", type=float, help="peak dense bf16 TFLOPs (default: by GPU name)"
    )


def measure(args: argparse.Namespace) -> list[Ratio]:
    if args.quick:
        args.flavor, args.batch, args.seq_len, args.steps, args.warmup = "debug", 2, 128, 10, 3
    torch.set_num_threads(args.threads)
    device = resolve_device(args.device, setting="--device")
    dtype = getattr(torch, args.dtype)
    attention = args.attention
    if attention == "auto":
        attention = "flex" if device.type == "cuda" else "sdpa"
    overrides = {"attn_backend": attention}
    if args.layers:
        overrides["n_layers"] = args.layers
    if args.quick:
        overrides["head_dim"] = None  # debug's head_dim 32 is not 64 // 4; llama3 derives it
    ours_config = flavor(args.flavor, **overrides)
    llama_config = llama3_config(ours_config, args.seq_len, attention)

    mesh = None
    if args.fsdp:
        backend = "nccl" if device.type == "cuda" else "gloo"
        dist.init_process_group(backend, store=dist.HashStore(), rank=0, world_size=1)
        mesh = init_device_mesh(device.type, (1,))
    # Without FSDP, bf16 is torch.autocast over fp32 weights; with it, FSDP's param_dtype.
    autocast = (
        partial(torch.autocast, device.type, dtype=dtype)
        if dtype != torch.float32 and mesh is None
        else nullcontext
    )
    torch.manual_seed(0)
    batch = synthetic_batch(args.batch, args.seq_len, ours_config.vocab_size)
    jobs = {"ours": (ours_config, ademamix, loss_masks), "llama3": (llama_config, adamw, None)}
    masks = partial(loss_masks, batch[0], batch[2])

    def prepare(model_config, optimizer, mask_labels) -> tuple[tuple[int, int], Callable]:
        model = build(model_config, device, dtype, args.compile, mesh)
        counts = model_config.get_nparams_and_flops(model, args.seq_len)
        return counts, make_step(model, optimizer(model), batch, autocast, mask_labels)

    counts, steps = {}, {}
    if args.apart:
        seconds = interleaved_best({"masks": masks}, args.steps, args.warmup)
        for name, job in jobs.items():
            counts[name], step = prepare(*job)
            seconds |= interleaved_best({name: step}, args.steps, args.warmup)
            del step  # frees the model and its optimizer state before the next one
            gc.collect()
            if device.type == "cuda":
                torch.cuda.empty_cache()
    else:
        for name, job in jobs.items():
            counts[name], steps[name] = prepare(*job)
        seconds = interleaved_best({**steps, "masks": masks}, args.steps, args.warmup)
    (ours_params, ours_flops), (llama_params, llama_flops) = counts["ours"], counts["llama3"]
    if mesh is not None:
        dist.destroy_process_group()

    setup = (
        f"{args.flavor} (dim {ours_config.dim}, {ours_config.n_layers} layers, "
        f"{ours_config.n_heads}/{ours_config.n_kv_heads} heads x {ours_config.attention_head_dim},"
        f" vocab {ours_config.vocab_size}), batch {args.batch} x seq {args.seq_len}, "
        f"{device.type} {args.dtype}, {args.threads} threads"
        + (", compiled blocks" if args.compile else "")
        + (", FSDP (1 rank)" if args.fsdp else "")
        + (", timed one model at a time" if args.apart else "")
        + f"; params ours {ours_params:,} / llama3 {llama_params:,}; best of {args.steps}"
    )
    attention_note = (
        "attention: both FlexAttention, block-causal per document"
        if attention == "flex"
        else "attention: ours SDPA with a dense document mask, llama3 SDPA causal"
    )
    differs = (
        f"ours: xIELU MLP (hidden {ours_config.ffn_hidden}), QK-norm, AdEMAMix, EOD + Goldfish "
        f"masks; llama3: SwiGLU (hidden {swiglu_hidden(ours_config.ffn_hidden)}), AdamW"
    )
    ours_tps = tokens_per_second(args.batch, args.seq_len, seconds["ours"])
    llama_tps = tokens_per_second(args.batch, args.seq_len, seconds["llama3"])
    rows = [
        Ratio(
            "training step",
            seconds["ours"] * 1e3,
            seconds["llama3"] * 1e3,
            "ms",
            "torchtitan llama3",
            note=f"{setup}; {attention_note}; {differs}",
        ),
        Ratio(
            "training throughput",
            ours_tps,
            llama_tps,
            "tokens/s",
            "torchtitan llama3",
            lower_is_better=False,
        ),
        Ratio(
            "EOD + Goldfish masks",
            seconds["masks"] * 1e3,
            seconds["ours"] * 1e3,
            "ms",
            "our training step",
            note=f"{seconds['masks'] / seconds['ours']:.3%} of the step: apply_loss_masks "
            f"(k={GOLDFISH_K}, h={GOLDFISH_H}) on the CPU labels of one batch, as the data "
            "loader runs it (inside our step)",
        ),
    ]
    device_name = torch.cuda.get_device_name(device) if device.type == "cuda" else "the CPU"
    if args.peak_tflops:
        peak, source = args.peak_tflops * 1e12, "--peak-tflops"
    else:
        peak = peak_bf16_flops(device_name) if device.type == "cuda" else None
        source = f"dense bf16 peak of {device_name}"
    if peak is None:
        rows[1] = dataclasses.replace(
            rows[1], note=f"no MFU: peak FLOPs of {device_name} unknown; pass --peak-tflops"
        )
        return rows
    ours_mfu = mfu(ours_flops, ours_tps, peak)
    llama_mfu = mfu(llama_flops, llama_tps, peak)
    rows.append(
        Ratio(
            "MFU",
            ours_mfu,
            llama_mfu,
            "fraction",
            "torchtitan llama3",
            lower_is_better=False,
            note=f"ours {ours_mfu:.1%}, llama3 {llama_mfu:.1%} of {peak / 1e12:.1f} TFLOPs "
            f"({source}; goal: ours >= 40% on an H100); FLOPs/token "
            f"ours {ours_flops:.4g}, llama3 {llama_flops:.4g}",
        )
    )
    return rows


if __name__ == "__main__":
    main(add_arguments, measure, __doc__)
