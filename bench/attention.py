r"""Document-masked attention: FlexAttention with a block mask against dense SDPA with the same
boolean mask, forward and backward, measured side by side in one run (issue 43).

    python -m bench.attention [--quick] [--device cuda] [--seq-len 4096] [--heads 32]
        [--kv-heads 8] [--head-dim 128] [--batch 1] [--doc-len 1024] [--dtype bfloat16]

Both sides are what our model runs (`apertus.model.model`): the mask of packed documents (a
token attends to earlier tokens of its own document, `block_causal_mask` dense,
`block_causal_block_mask` for FlexAttention, compiled on CUDA), grouped-query attention (SDPA
with ``enable_gqa``). Documents are `--doc-len` tokens on average (uniform 1..2x), so the block
mask skips most of the L x L blocks; SDPA computes them all and its mask costs B x L x L bytes.
Timed: the mask build, forward and backward of one call, best of `--repeat`. CUDA only: torch
has no FlexAttention backward on CPU (`--device cpu` measures the forward alone, on the eager
reference path, which says nothing of the GPU kernel).
"""

from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F

from apertus.model.model import _flex_functions, block_causal_block_mask, block_causal_mask
from bench.common import Ratio, interleaved_best, main


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cuda")
    parser.add_argument("--dtype", choices=("float32", "bfloat16"), default="bfloat16")
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--seq-len", type=int, default=4096)
    parser.add_argument("--heads", type=int, default=32)
    parser.add_argument("--kv-heads", type=int, default=8)
    parser.add_argument("--head-dim", type=int, default=128)
    parser.add_argument("--doc-len", type=int, default=1024, help="mean document length")
    parser.add_argument("--repeat", type=int, default=10)


def packed_positions(batch: int, seq_len: int, doc_len: int, device: str) -> torch.Tensor:
    """Positions of rows of packed documents: 0 at each document start, counting up."""
    generator = torch.Generator().manual_seed(0)
    rows = []
    for _ in range(batch):
        row: list[int] = []
        while len(row) < seq_len:
            length = int(torch.randint(doc_len // 2 + 1, 3 * doc_len // 2 + 1, (1,),
                                       generator=generator))  # fmt: skip
            row += range(length)
        rows.append(row[:seq_len])
    return torch.tensor(rows, device=device)


def measure(args: argparse.Namespace) -> list[Ratio]:
    if args.quick:
        args.seq_len, args.heads, args.kv_heads, args.head_dim, args.repeat = 512, 4, 2, 32, 3
        args.doc_len = 128
    device, dtype = args.device, getattr(torch, args.dtype)
    backward = device == "cuda"
    positions = packed_positions(args.batch, args.seq_len, args.doc_len, device)
    shape = (args.batch, args.heads, args.seq_len, args.head_dim)
    kv_shape = (args.batch, args.kv_heads, args.seq_len, args.head_dim)
    q = torch.randn(shape, device=device, dtype=dtype, requires_grad=backward)
    k = torch.randn(kv_shape, device=device, dtype=dtype, requires_grad=backward)
    v = torch.randn(kv_shape, device=device, dtype=dtype, requires_grad=backward)
    grad = torch.randn(shape, device=device, dtype=dtype)
    flex, _ = _flex_functions(torch.device(device))
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)

    def run(attend) -> None:
        out = attend()
        if backward:
            out.backward(grad)
            q.grad = k.grad = v.grad = None
        sync()

    def flex_call():
        mask = block_causal_block_mask(positions)
        return flex(q, k, v, block_mask=mask, enable_gqa=True)

    def sdpa_call():
        mask = block_causal_mask(positions)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)

    with torch.no_grad():
        gap = (flex_call() - sdpa_call()).abs().max().item()
    best = interleaved_best(
        {"flex": lambda: run(flex_call), "sdpa": lambda: run(sdpa_call)}, args.repeat, warmup=2
    )
    peak = {}
    if device == "cuda":
        for name, call in (("flex", flex_call), ("sdpa", sdpa_call)):
            torch.cuda.reset_peak_memory_stats()
            base = torch.cuda.memory_allocated()
            run(call)
            peak[name] = (torch.cuda.max_memory_allocated() - base) / 2**20
    where = (
        f"B {args.batch}, L {args.seq_len}, {args.heads} q / {args.kv_heads} kv heads of "
        f"{args.head_dim}, documents ~{args.doc_len} tokens, {args.dtype} on {device}, "
        f"{'forward + backward' if backward else 'forward only (no CPU backward)'}, mask "
        f"built in each call; max |flex - sdpa| {gap:.2e}"
    )
    rows = [
        Ratio("document-masked attention time", best["flex"] * 1e3, best["sdpa"] * 1e3, "ms",
              "dense SDPA + mask", note=where),
    ]  # fmt: skip
    if peak:
        rows.append(
            Ratio("document-masked attention memory", peak["flex"], peak["sdpa"], "MiB",
                  "dense SDPA + mask", note="peak allocated above the inputs, one call")
        )  # fmt: skip
    return rows


if __name__ == "__main__":
    main(add_arguments, measure, __doc__)
