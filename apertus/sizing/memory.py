"""What one GPU of a training or inference job holds at its peak, from the model's shape and the
job's layout alone (no torch, nothing allocated): the formulas of `apertus plan`.

Training (torchtitan's trainer on `apertus.model.parallelize`: FSDP2 over the data- and
context-parallel ranks, tensor parallelism of the blocks, AdEMAMix):

- **master weights**: FSDP2 keeps each rank's shard of every parameter in fp32 (the trainer's
  ``training.dtype``), dim 0 padded to a multiple of the FSDP degree (`sharded_numel`);
- **optimizer states**: AdEMAMix's m1, m2 and v, each a parameter-shaped fp32 tensor
  (`apertus.train.ademamix.AdEMAMix.step`), on the same shards;
- **gradients**: the sharded fp32 gradients, all of them alive from the end of the backward to
  the optimizer step, plus the step's one parameter-sized temporary (``denoms``);
- **parameters**: the unsharded compute copies (``pretrain.dtype``) FSDP2 all-gathers, one
  unit at a time with the next prefetched: the lm_head unit stays gathered from the end of the
  forward through its backward (not resharded after forward, `parallelize_apertus`), then two
  blocks at a time;
- **activations**: the tensors autograd keeps for the backward, counted tensor by tensor from
  the model's code (`block_saved_bytes`: the norms in fp32, QK-norm, RoPE's tables, attention's
  q, k, v, output and log-sum-exp, xIELU's input and ``w_down``'s input); full activation
  checkpointing keeps each block's input and recomputes one block at a time; context
  parallelism gathers the keys and values of the whole sequence in every attention;
- **logits and loss**: cross-entropy upcasts the logits to fp32 and keeps the log-softmax; its
  backward holds that, its gradient and the input's gradient: 12 bytes per token and vocabulary
  entry (the vocabulary split over the tensor-parallel ranks; 16 with its vocabulary-parallel
  form under tensor parallelism);
- **communication buffers**: a unit's gradient in fp32 for the reduce-scatter (the embedding's
  also unsharded in the compute dtype);
- **allocator margin**: what the plan adds for what it does not count (the CUDA context, NCCL's
  buffers, the caching allocator's fragmentation).

Where the code differs by device, the formulas follow the eager code: ``torch.compile``
(the presets' GPU path) fuses the norms and xIELU and keeps fewer tensors, so the plan is an
upper bound there. Selective activation checkpointing is planned as no checkpointing (an upper
bound: torchtitan's op-level policy keeps the matmul outputs).

Peak = the largest of five moments: the start of the loss's backward (all activations kept,
the loss's fp32 tensors, the lm_head unit gathered), lm_head's backward (its weight gradient
for the reduce-scatter), a block's backward (the logits freed; two units gathered, the
recomputed block under checkpointing, xIELU's backward temporaries), the embedding's backward
(its whole-vocabulary gradient) and the optimizer step (every gradient and the step's
temporary). `apertus.sizing.fake_cluster` traced which one is the peak at the presets' sizes,
`bench/memory_plan.py` on real steps on the CPU.

`tests/sizing/test_memory.py` checks `block_saved_bytes` against the tensors autograd really
saves for one block, and `apertus.sizing.fake_cluster` traces a real training step on fake
tensors at the presets' real sizes against `training_memory`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from apertus.model.shapes import Shape

__all__ = [
    "ALLOCATOR_MARGIN_FRACTION",
    "CUDA_CONTEXT_BYTES",
    "InferenceLayout",
    "Memory",
    "TrainingLayout",
    "block_saved_bytes",
    "inference_memory",
    "parameter_units",
    "sharded_numel",
    "training_memory",
]

DTYPE_BYTES = {"float32": 4, "bfloat16": 2}
# The CUDA context and NCCL's communicators: ~1 GiB per process on Hopper (PyTorch's own
# estimate of the context is 0.5-1 GiB; NCCL's buffers several hundred MiB).
CUDA_CONTEXT_BYTES = 1 << 30
# The caching allocator's fragmentation on top of the tensors it holds: torchtitan's memory
# estimator and Megatron-Bridge's both leave ~10 %.
ALLOCATOR_MARGIN_FRACTION = 0.10
# Cross-entropy's forward keeps the fp32 log-softmax; its backward holds that, the gradient of
# its output and the gradient of its input, all fp32 (bytes per token and vocabulary entry).
LOSS_BYTES_PER_LOGIT = 12


@dataclass(frozen=True)
class Memory:
    """Bytes per GPU at the job's peak, by what holds them."""

    parts: dict[str, int]
    """Named parts at the peak moment (`training_memory`'s module doc)."""
    moment: str
    """When the peak falls ("loss backward", "optimizer step", "forward")."""

    @property
    def counted(self) -> int:
        """The tensors the plan counts (what a tracer sees): every part but the margin."""
        return sum(v for k, v in self.parts.items() if k != "allocator margin")

    @property
    def total(self) -> int:
        return sum(self.parts.values())


@dataclass(frozen=True)
class TrainingLayout:
    """One training job as the memory depends on it."""

    shape: Shape
    seq_len: int
    micro_batch: int
    ranks: int
    tensor_parallel: int = 1
    context_parallel: int = 1
    dtype: str = "bfloat16"
    """Compute dtype of the parameters and activations (the stage's ``dtype``)."""
    activation_checkpoint: str = "none"
    attention: Literal["flex", "sdpa"] = "flex"
    """flex: block masks (GPU); sdpa: a dense boolean mask per micro-batch (the CPU)."""
    accelerator: bool = True
    """Whether the CUDA context and the allocator margin apply (not on the CPU)."""

    @property
    def data_parallel(self) -> int:
        return self.ranks // (self.tensor_parallel * self.context_parallel)

    @property
    def fsdp(self) -> int:
        """The FSDP degree: the data- and context-parallel ranks (`parallelize_apertus`)."""
        return self.data_parallel * self.context_parallel

    @property
    def tokens_per_rank(self) -> int:
        """Tokens of one micro-batch on one rank (the sequence split over the CP ranks)."""
        return self.micro_batch * self.seq_len // self.context_parallel


def parameter_units(shape: Shape) -> dict[str, list[tuple[tuple[int, ...], int | None]]]:
    """The FSDP units of the model (`parallelize_apertus`: the embedding, each block, the final
    norm with lm_head) with each parameter's shape and the dimension tensor parallelism splits
    (None: replicated over the TP ranks; `apply_tensor_parallel`). One block stands for all."""
    d, hd, f = shape.dim, shape.attention_head_dim, shape.ffn_hidden
    q, kv = shape.n_heads * hd, shape.n_kv_heads * hd
    block = [
        ((d,), None),  # attention_norm
        ((q, d), 0),  # wq, column-parallel
        ((kv, d), 0),  # wk
        ((kv, d), 0),  # wv
        ((d, q), 1),  # wo, row-parallel
        ((hd,), None),  # q_norm
        ((hd,), None),  # k_norm
        ((d,), None),  # ffn_norm
        ((f, d), 0),  # w_up
        ((1,), None),  # xIELU alpha_p
        ((1,), None),  # xIELU alpha_n
        ((d, f), 1),  # w_down
    ]
    return {
        "tok_embeddings": [((shape.vocab_size, d), None)],
        "block": block,
        "norm + lm_head": [((d,), None), ((shape.vocab_size, d), 0)],
    }


def _local(dims: tuple[int, ...], split: int | None, tp: int) -> tuple[int, ...]:
    if split is None or tp == 1:
        return dims
    return tuple(n // tp if i == split else n for i, n in enumerate(dims))


def sharded_numel(dims: tuple[int, ...], fsdp: int) -> int:
    """Elements of one rank's FSDP2 shard: dim 0 padded up to a multiple of the FSDP degree."""
    rest = math.prod(dims[1:])
    return math.ceil(dims[0] / fsdp) * rest


def _unit_numel(params, tp: int, fsdp: int | None = None) -> int:
    """Elements of a unit on one rank: its TP-local parameters, sharded over `fsdp` if given."""
    total = 0
    for dims, split in params:
        local = _local(dims, split, tp)
        total += sharded_numel(local, fsdp) if fsdp else math.prod(local)
    return total


def _norm_saved(n: int, a: int, rows: int = 1, consumer_keeps_output: bool = True) -> int:
    """Bytes an RMSNorm over `n` elements per token keeps per token
    (`apertus.model.model.rms_norm`: the fp32 input for the square, the fp32 reciprocal RMS of
    each of its `rows` (one, or one per head), the normalised input cast back for the weight's
    gradient) plus, when the next op is a matmul, its output (the matmul's saved input)."""
    return 4 * n + 4 * rows + a * n + (a * n if consumer_keeps_output else 0)


def block_saved_bytes(shape: Shape, dtype: str, context_parallel: int = 1) -> int:
    """Bytes one transformer block keeps for its backward per token of the rank, in the eager
    code (`apertus.model.model.TransformerBlock`), the RoPE tables aside (computed once per
    forward and shared by every block: `model_saved_bytes`)."""
    a = DTYPE_BYTES[dtype]
    d, hd, f = shape.dim, shape.attention_head_dim, shape.ffn_hidden
    q, kv = shape.n_heads * hd, shape.n_kv_heads * hd
    attention = (
        _norm_saved(d, a)  # attention_norm, its output kept once by wq, wk and wv
        + _norm_saved(q, a, rows=shape.n_heads, consumer_keeps_output=False)  # q_norm
        + _norm_saved(kv, a, rows=shape.n_kv_heads, consumer_keeps_output=False)  # k_norm
        # attention: rotated q, k and v (k and v gathered over the CP ranks), the output
        # (also wo's input) and the fp32 log-sum-exp per head
        + a * (q + 2 * kv * context_parallel + q)
        + 4 * shape.n_heads
    )
    feed_forward = _norm_saved(d, a) + a * f + a * f  # ffn_norm; xIELU's x; w_down's input
    return attention + feed_forward


def model_saved_bytes(shape: Shape, dtype: str) -> int:
    """Bytes per token the model keeps outside the blocks: the token ids (int64, for the
    embedding's backward), RoPE's cos and sin tables, the final norm and lm_head's input."""
    a = DTYPE_BYTES[dtype]
    return 8 + 2 * a * shape.attention_head_dim + _norm_saved(shape.dim, a)


# Hidden-sized temporaries of xIELU's backward at its peak (`apertus.model.model`): the CPU's
# where-free form keeps x's positive and negative parts, the masks, expm1 and the slope; the
# `torch.where` form (accelerators; compiled code fuses either into fewer) about five.
XIELU_BACKWARD_TEMPORARIES = {"masked": 8, "where": 5}


def _backward_workspace(shape: Shape, dtype: str, tp: int, accelerator: bool) -> int:
    """Bytes per token the backward of one block allocates beyond what it frees: xIELU's
    backward temporaries over the MLP's hidden units, and the residual stream's gradient."""
    a = DTYPE_BYTES[dtype]
    hidden = XIELU_BACKWARD_TEMPORARIES["where" if accelerator else "masked"]
    return a * (hidden * shape.ffn_hidden // tp + 2 * shape.dim)


def training_memory(layout: TrainingLayout) -> Memory:
    """Peak bytes per GPU of one training job (the module doc)."""
    shape, tp, fsdp = layout.shape, layout.tensor_parallel, layout.fsdp
    a = DTYPE_BYTES[layout.dtype]
    units = parameter_units(shape)
    layers = shape.n_layers
    sharded = sum(
        _unit_numel(params, tp, fsdp) * (layers if name == "block" else 1)
        for name, params in units.items()
    )
    whole = {name: _unit_numel(params, tp) for name, params in units.items()}
    tokens = layout.tokens_per_rank
    cp = layout.context_parallel
    block = block_saved_bytes(shape, layout.dtype, cp)
    if layout.activation_checkpoint == "full":
        # Each block's input (torch.utils.checkpoint keeps the inputs); a block's own tensors
        # exist only while it is recomputed in its backward (`recomputed`).
        kept = tokens * layers * a * shape.dim
        recomputed = tokens * block
    else:
        kept, recomputed = tokens * layers * block, 0
    kept += tokens * model_saved_bytes(shape, layout.dtype)
    if layout.attention == "sdpa":
        # The dense block-causal mask, one byte per (query, key) pair of the micro-batch.
        kept += tokens * layout.seq_len
    workspace = tokens * _backward_workspace(shape, layout.dtype, tp, layout.accelerator)
    # The vocabulary-parallel loss (tensor parallelism) keeps one more fp32 tensor per logit.
    per_logit = LOSS_BYTES_PER_LOGIT + (4 if tp > 1 else 0)
    logits = tokens * shape.vocab_size // tp * per_logit
    # A unit's gradient for the reduce-scatter: fp32 (the reduce dtype).
    block_grad = max(math.prod(_local(dims, split, tp)) for dims, split in units["block"])
    states = {"master weights": 4 * sharded, "optimizer states": 12 * sharded}
    none = {
        "gradients": 0,
        "parameters": 0,
        "activations": 0,
        "logits and loss": 0,
        "communication buffers": 0,
    }
    head, embedding = whole["norm + lm_head"], whole["tok_embeddings"]
    moments = {
        # Every activation kept, the loss's fp32 tensors; only the lm_head unit is gathered
        # (not resharded after the forward; the last block is gathered once lm_head's
        # backward starts).
        "loss backward": {
            **states,
            **none,
            "parameters": a * head,
            "activations": kept,
            "logits and loss": logits,
        },
        # lm_head's own backward, the logits' gradient freed: the last block prefetched, the
        # final norm's backward temporaries, lm_head's gradient in fp32 for the reduce-scatter.
        "lm_head backward": {
            **states,
            **none,
            "parameters": a * (head + whole["block"]),
            "activations": kept + tokens * shape.dim * (16 + a),
            "communication buffers": 4 * head,
        },
        # A block's backward: it and the unit below (prefetched: a block, or the embedding)
        # gathered, its tensors recomputed under checkpointing, the gradients flowing through
        # it and its largest weight gradient, the unit above's fp32 reduce-scatter buffer.
        "block backward": {
            **states,
            **none,
            "gradients": 4 * _unit_numel(units["norm + lm_head"], tp, fsdp),
            "parameters": a * (whole["block"] + max(whole["block"], embedding)),
            "activations": kept + recomputed + workspace + a * block_grad,
            "communication buffers": 4 * whole["block"],
        },
        # The embedding's backward, every block's tensors freed: its gradient is the whole
        # vocabulary on every TP rank (not vocab-split), unsharded and in fp32; its weight is
        # not gathered (the backward needs the token ids only).
        "embedding backward": {
            **states,
            **none,
            "gradients": 4 * (sharded - _unit_numel(units["tok_embeddings"], tp, fsdp)),
            "activations": tokens * model_saved_bytes(shape, layout.dtype),
            "communication buffers": embedding * (a + (4 if a != 4 else 0)),
        },
        # Every gradient, and the step's one parameter-sized temporary (`denoms`).
        "optimizer step": {**states, **none, "gradients": 8 * sharded},
    }
    moment, parts = max(moments.items(), key=lambda item: sum(item[1].values()))
    return _with_margin(parts, moment, layout.accelerator)


def _with_margin(parts: dict[str, int], moment: str, accelerator: bool) -> Memory:
    parts = dict(parts)
    if accelerator:
        parts["allocator margin"] = int(ALLOCATOR_MARGIN_FRACTION * sum(parts.values())) + (
            CUDA_CONTEXT_BYTES
        )
    else:
        parts["allocator margin"] = 0
    return Memory(parts, moment)


@dataclass(frozen=True)
class InferenceLayout:
    """A model served on `gpus` GPUs (its weights split over them) for sampling, scoring or
    evaluation: `batch` sequences of up to `context` tokens."""

    params: int
    dtype: str
    batch: int
    context: int
    n_layers: int
    kv_width: int
    """Keys' width per token and layer (kv heads x head_dim)."""
    vocab_size: int
    gpus: int = 1
    logits_tokens: int | None = None
    """Tokens whose logits are kept at once (None: one per sequence, as in generation)."""


def inference_memory(layout: InferenceLayout, accelerator: bool = True) -> Memory:
    """Peak bytes per GPU of a model served for generation or scoring: its weights, the KV cache
    of the batch at its full context, and the fp32 logits of the positions scored at once."""
    a = DTYPE_BYTES[layout.dtype]
    weights = a * layout.params
    kv_cache = 2 * a * layout.n_layers * layout.kv_width * layout.batch * layout.context
    logits_tokens = layout.batch if layout.logits_tokens is None else layout.logits_tokens
    logits = 4 * logits_tokens * layout.vocab_size
    parts = {
        "parameters": weights // layout.gpus,
        "kv cache": kv_cache // layout.gpus,
        "logits and loss": logits,
    }
    return _with_margin(parts, "forward", accelerator)
