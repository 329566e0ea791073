"""AdEMAMix against AdamW: step time and optimizer-state memory at the same parameter count,
measured side by side in one run (goal: AdEMAMix at most 1.35x AdamW's step time).

    python bench/optimizer.py [--params N] [--steps N] [--threads N]

Both use torch's multi-tensor (foreach) path on CPU; parameters are shaped like a small
transformer's (square and 3x-wide matrices plus norms).
"""

from __future__ import annotations

import argparse
import time

import torch

from apertus.train.ademamix import AdEMAMix


def make_params(total: int, seed: int = 0) -> list[torch.nn.Parameter]:
    generator = torch.Generator().manual_seed(seed)
    dim = 512
    params, count = [], 0
    while count < total:
        for shape in ((dim, dim), (dim, 3 * dim), (3 * dim, dim), (dim,)):
            p = torch.nn.Parameter(torch.randn(*shape, generator=generator) * 0.02)
            p.grad = torch.randn(*shape, generator=generator) * 1e-3
            params.append(p)
            count += p.numel()
    return params


def step_time(optimizer, steps: int) -> float:
    optimizer.step()  # warm-up: allocates the state
    start = time.perf_counter()
    for _ in range(steps):
        optimizer.step()
    return (time.perf_counter() - start) / steps


def state_bytes(optimizer) -> int:
    return sum(
        t.numel() * t.element_size()
        for state in optimizer.state.values()
        for t in state.values()
        if torch.is_tensor(t)
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--params", type=int, default=20_000_000)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    results = {}
    for name, build in (
        ("AdamW", lambda p: torch.optim.AdamW(p, lr=1e-4, weight_decay=0.1, foreach=True)),
        (
            "AdEMAMix",
            lambda p: AdEMAMix(
                p, lr=1e-4, alpha=8.0, t_alpha=100_000, t_beta3=100_000, foreach=True
            ),
        ),
    ):
        params = make_params(args.params)
        optimizer = build(params)
        best = min(step_time(optimizer, args.steps) for _ in range(args.repeat))
        results[name] = (best, state_bytes(optimizer), sum(p.numel() for p in params))

    adamw, ademamix = results["AdamW"], results["AdEMAMix"]
    print(
        f"\nparameters: {adamw[2]:,}, {args.threads} thread(s),"
        f" best of {args.repeat} x {args.steps} steps"
    )
    print(f"{'optimizer':<10} {'ms/step':>9} {'state MiB':>10}")
    for name, (seconds, state, _) in results.items():
        print(f"{name:<10} {seconds * 1e3:>9.1f} {state / 2**20:>10.1f}")
    print(f"{'ratio':<10} {ademamix[0] / adamw[0]:>9.3f} {ademamix[1] / adamw[1]:>10.3f}")


if __name__ == "__main__":
    main()
