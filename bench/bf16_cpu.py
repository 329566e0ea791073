"""bf16 training on a CPU without bf16 units: the step with this project's CPU kernels for bf16
matrix products (`apertus.core.device.bf16_matmuls_in_fp32`: fp32 products of exact copies,
rounded once) against the same step on torch's own bf16 kernels, with the fp32 step beside them.

    python -m bench.bf16_cpu [--quick] [--flavor tiny] [--batch 4] [--seq-len 128] [--steps 3]
        [--threads 1] [--json FILE]

One forward and backward of an Apertus model of `--flavor` in bf16 (the rehearsal's numerics:
bf16 parameters and compute), a summed cross-entropy in fp32, on one batch; each reports its
best of `--steps`. torch's kernels are timed first (the replacement is for the whole process),
then ours. On a CPU with bf16 instructions (oneDNN's check) nothing is replaced and the bench
says so.
"""

from __future__ import annotations

import argparse
import time

import torch
import torch.nn.functional as F

from apertus.core.device import bf16_matmuls_in_fp32, cpu_has_bf16
from apertus.model.flavors import flavor
from apertus.model.model import ApertusModel
from bench.common import Ratio, main


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--flavor", default="tiny", help="model flavor (debug/tiny/...)")
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--seq-len", type=int, default=128)
    parser.add_argument("--steps", type=int, default=3, help="timed steps (best of)")
    parser.add_argument("--threads", type=int, default=1)


def best_step(model: ApertusModel, tokens: torch.Tensor, steps: int) -> float:
    def step() -> None:
        logits = model(tokens)
        F.cross_entropy(logits.float().flatten(0, 1), tokens.flatten()).backward()
        model.zero_grad(set_to_none=True)

    step()  # warm-up
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        step()
        times.append(time.perf_counter() - start)
    return min(times)


def measure(args: argparse.Namespace) -> list[Ratio]:
    if args.quick:
        args.flavor, args.batch, args.seq_len, args.steps = "debug", 2, 32, 1
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    config = flavor(args.flavor, max_seq_len=max(args.seq_len, 64))
    model = ApertusModel(config)
    tokens = torch.randint(0, config.vocab_size, (args.batch, args.seq_len))
    fp32 = best_step(model, tokens, args.steps)
    model = model.to(torch.bfloat16)
    native = best_step(model, tokens, args.steps)
    replaced = bf16_matmuls_in_fp32("cpu", torch.bfloat16)
    ours = best_step(model, tokens, args.steps)
    where = f"{args.flavor}, {args.batch} x {args.seq_len} tokens, {args.threads} thread(s)"
    note = (
        f"{where}; this CPU has no bf16 units: products replaced"
        if replaced
        else f"{where}; this CPU has bf16 units (cpu_has_bf16={cpu_has_bf16()}): nothing replaced"
    )
    ms = 1000.0
    return [
        Ratio(
            "bf16 step: ours / torch's kernels",
            ours * ms,
            native * ms,
            "ms",
            "torch bf16",
            goal=0.25 if replaced else None,
            note=note,
        ),
        Ratio("bf16 step (ours) / fp32 step", ours * ms, fp32 * ms, "ms", "fp32", note=where),
    ]


if __name__ == "__main__":
    main(add_arguments, measure, __doc__)
