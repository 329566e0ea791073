"""xIELU MLP against a SwiGLU MLP at matched parameters and FLOPs: forward + backward time,
eager and torch.compile'd, measured side by side in one run.

    python bench/activation.py [--dim N] [--tokens N] [--threads N] [--no-compile]

RECIPE §1: the Apertus MLP is not gated, down(xIELU(up(x))), with a hidden size 1.5x the SwiGLU
baseline so both have 3 * dim * hidden weights and the same matmul FLOPs; what differs is the
elementwise part (xIELU on 1.5h channels vs SiLU(gate) * up on h channels).
"""

from __future__ import annotations

import argparse
import time

import torch
import torch.nn.functional as F
from torch import nn

from apertus.model.config_registry import flavor
from apertus.model.model import FeedForward


class SwiGLU(nn.Module):
    def __init__(self, dim: int, hidden: int) -> None:
        super().__init__()
        self.w_gate = nn.Linear(dim, hidden, bias=False)
        self.w_up = nn.Linear(dim, hidden, bias=False)
        self.w_down = nn.Linear(hidden, dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w_down(F.silu(self.w_gate(x)) * self.w_up(x))


def time_fwd_bwd(module: nn.Module, x: torch.Tensor, repeat: int) -> float:
    def once() -> None:
        module.zero_grad(set_to_none=True)
        module(x).float().pow(2).mean().backward()

    for _ in range(3):  # warm-up (and compilation)
        once()
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        once()
        best = min(best, time.perf_counter() - start)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dim", type=int, default=512)
    parser.add_argument("--swiglu-hidden", type=int, default=1536)
    parser.add_argument("--tokens", type=int, default=4096)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=10)
    parser.add_argument("--no-compile", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)

    hidden = args.swiglu_hidden * 3 // 2
    config = flavor("debug", dim=args.dim, ffn_hidden=hidden)
    xielu_mlp, swiglu_mlp = FeedForward(config), SwiGLU(args.dim, args.swiglu_hidden)
    n_x = sum(p.numel() for p in xielu_mlp.parameters())
    n_s = sum(p.numel() for p in swiglu_mlp.parameters())
    x = torch.randn(args.tokens, args.dim, requires_grad=True)

    modes = [("eager", lambda m: m)]
    if not args.no_compile:
        modes.append(("compiled", torch.compile))
    print(
        f"\ntokens {args.tokens}, dim {args.dim}, params xIELU {n_x:,} / SwiGLU {n_s:,}, "
        f"{args.threads} threads, best of {args.repeat}"
    )
    print(f"{'mode':<10} {'xIELU ms':>9} {'SwiGLU ms':>10} {'ratio':>7}")
    for mode, wrap in modes:
        tx = time_fwd_bwd(wrap(xielu_mlp), x, args.repeat)
        ts = time_fwd_bwd(wrap(swiglu_mlp), x, args.repeat)
        print(f"{mode:<10} {tx * 1e3:>9.2f} {ts * 1e3:>10.2f} {tx / ts:>7.3f}")


if __name__ == "__main__":
    main()
