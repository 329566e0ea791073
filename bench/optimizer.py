"""AdEMAMix against AdamW: step time and optimizer-state memory at the same parameter count,
measured side by side in one run (goal: AdEMAMix at most 1.35x AdamW's step time).

    python -m bench.optimizer [--params N] [--steps N] [--threads N] [--device cpu|cuda]
        [--quick] [--json FILE]

Both use the multi-tensor (foreach) path; parameters are shaped like a small transformer's
(square and 3x-wide matrices plus norms) and carry fixed gradients. AdEMAMix keeps three
moments (m1, m2, v) against AdamW's two, so its state is 1.5x by construction.
"""

from __future__ import annotations

import argparse
import time

import torch

from apertus.train.ademamix import AdEMAMix
from bench.common import Ratio, main


def make_params(total: int, seed: int = 0, device: str = "cpu") -> list[torch.nn.Parameter]:
    generator = torch.Generator().manual_seed(seed)
    dim = 512
    params, count = [], 0
    while count < total:
        for shape in ((dim, dim), (dim, 3 * dim), (3 * dim, dim), (dim,)):
            p = torch.nn.Parameter((torch.randn(*shape, generator=generator) * 0.02).to(device))
            p.grad = (torch.randn(*shape, generator=generator) * 1e-3).to(device)
            params.append(p)
            count += p.numel()
    return params


def step_time(optimizer: torch.optim.Optimizer, steps: int) -> float:
    synchronize = torch.cuda.synchronize if torch.cuda.is_initialized() else (lambda: None)
    synchronize()
    start = time.perf_counter()
    for _ in range(steps):
        optimizer.step()
    synchronize()
    return (time.perf_counter() - start) / steps


def state_bytes(optimizer: torch.optim.Optimizer) -> int:
    return sum(
        t.numel() * t.element_size()
        for state in optimizer.state.values()
        for t in state.values()
        if torch.is_tensor(t)
    )


OPTIMIZERS = {
    "AdamW": lambda p: torch.optim.AdamW(p, lr=1e-4, weight_decay=0.1, foreach=True),
    "AdEMAMix": lambda p: AdEMAMix(
        p, lr=1e-4, alpha=8.0, t_alpha=100_000, t_beta3=100_000, foreach=True
    ),
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--params", type=int, default=20_000_000)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeat", type=int, default=3, help="best of N rounds of --steps")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")


def measure(args: argparse.Namespace) -> list[Ratio]:
    if args.quick:
        args.params, args.steps, args.repeat = 2_000_000, 3, 2
    torch.set_num_threads(args.threads)
    optimizers, times, states = {}, {}, {}
    for name, build in OPTIMIZERS.items():
        params = make_params(args.params, device=args.device)
        optimizers[name] = build(params)
        optimizers[name].step()  # allocates the state
        states[name] = state_bytes(optimizers[name])
        times[name] = []
        count = sum(p.numel() for p in params)
    # Rounds alternate between the two so a slow phase of the machine hits both alike.
    for _ in range(args.repeat):
        for name, optimizer in optimizers.items():
            times[name].append(step_time(optimizer, args.steps))
    where = f"{count / 1e6:.1f}M params, {args.threads} thread(s), foreach, {args.device}"
    return [
        Ratio(
            "AdEMAMix / AdamW step time",
            min(times["AdEMAMix"]) * 1e3,
            min(times["AdamW"]) * 1e3,
            "ms",
            "AdamW",
            goal=1.35,
            note=where,
        ),
        Ratio(
            "AdEMAMix / AdamW optimizer state",
            states["AdEMAMix"] / 2**20,
            states["AdamW"] / 2**20,
            "MiB",
            "AdamW",
            note="three moments against two: 1.5x by construction",
        ),
    ]


if __name__ == "__main__":
    main(add_arguments, measure, __doc__)
