"""xIELU against SwiGLU at matched parameters and FLOPs: the fused xIELU (issue 11, goal: its
compiled forward + backward costs no more than SwiGLU's elementwise part) and the reference
xIELU, the whole MLP, and the activations each one saves for the backward.

    python -m bench.activation [--tokens N] [--dim N] [--threads N] [--repeat N]
        [--device cpu|cuda] [--dtype float32|bfloat16] [--no-compile] [--quick] [--json FILE]

RECIPE §1: the Apertus MLP is not gated, down(xIELU(up(x))), with a hidden size 1.5x the SwiGLU
baseline's (h = 3 * dim), so both have 3 * dim * h weights and the same matmul FLOPs; what
differs is the elementwise part: xIELU on T x 1.5h values against SiLU(gate) * up on two T x h
tensors. Times are forward + backward (`torch.autograd.grad` of a fixed upstream gradient, so
no .grad accumulation is timed), the best of --repeat, ours and the baseline alternating.

Saved activations: the bytes autograd keeps for the backward (counted once per storage,
parameters excluded), measured in eager mode with `saved_tensors_hooks`. On CPU, glibc returns
blocks above 32 MiB to the system on every free, so much larger tensors time page faults more
than arithmetic; the defaults stay below that.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from apertus.core.device import resolve_device
from apertus.model.flavors import flavor
from apertus.model.model import XIELU, FeedForward, xielu, xielu_fused
from bench.common import Ratio, interleaved_best, main


class SwiGLU(nn.Module):
    """The baseline MLP: down(SiLU(gate(x)) * up(x)), no bias."""

    def __init__(self, dim: int, hidden: int) -> None:
        super().__init__()
        self.w_gate = nn.Linear(dim, hidden, bias=False)
        self.w_up = nn.Linear(dim, hidden, bias=False)
        self.w_down = nn.Linear(hidden, dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w_down(F.silu(self.w_gate(x)) * self.w_up(x))


class ReferenceXIELU(XIELU):
    """XIELU through the reference formula and plain autograd (what the model did before)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return xielu(x, self.alpha_p, self.alpha_n, self.beta, self.eps)


def swiglu_elementwise(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    return F.silu(gate) * up


def fwd_bwd(fn: Callable, inputs: list[torch.Tensor], upstream: torch.Tensor, device: str):
    """A call that runs fn(*inputs) forward and backward to every input, then waits for the
    device."""

    def once() -> None:
        torch.autograd.grad(fn(*inputs), inputs, upstream)
        if device == "cuda":
            torch.cuda.synchronize()

    return once


def saved_bytes(fn: Callable, inputs: list[torch.Tensor], exclude: list[torch.Tensor]) -> int:
    """Bytes of the distinct storages autograd saves while running fn(*inputs), leaving out
    those of `exclude` (the parameters: they are kept anyway)."""
    kept = {t.untyped_storage().data_ptr() for t in exclude}
    storages: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        storage = t.untyped_storage()
        if storage.data_ptr() not in kept:
            storages[storage.data_ptr()] = storage.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        fn(*inputs)
    return sum(storages.values())


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--tokens", type=int, default=2048)
    parser.add_argument("--dim", type=int, default=512, help="model width; SwiGLU hidden 3x")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--no-compile", action="store_true", help="eager mode only")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--dtype", choices=("float32", "bfloat16"), default="float32")


def measure(args: argparse.Namespace) -> list[Ratio]:
    if args.quick:
        args.tokens, args.dim, args.repeat = 512, 128, 5
    device = resolve_device(args.device, setting="--device").type
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    dtype = getattr(torch, args.dtype)
    hidden = 3 * args.dim
    xielu_hidden = hidden * 3 // 2

    def randn(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, device=device, dtype=dtype)

    def leaf(t: torch.Tensor) -> torch.Tensor:
        return t.requires_grad_(True)

    act = XIELU().to(device=device, dtype=dtype)
    scalars = [leaf(act.alpha_p.detach().clone()), leaf(act.alpha_n.detach().clone())]
    x_act = leaf(randn(args.tokens, xielu_hidden))
    gate, up = leaf(randn(args.tokens, hidden)), leaf(randn(args.tokens, hidden))
    act_inputs = [x_act, *scalars]
    beta, eps = act.beta, act.eps
    elementwise = {
        "fused": (lambda x, p, n: xielu_fused(x, p, n, beta, eps), act_inputs),
        "reference": (lambda x, p, n: xielu(x, p, n, beta, eps), act_inputs),
        "SwiGLU": (swiglu_elementwise, [gate, up]),
    }
    act_upstream, swiglu_upstream = randn(args.tokens, xielu_hidden), randn(args.tokens, hidden)

    config = flavor("debug", dim=args.dim, ffn_hidden=xielu_hidden)
    mlps = {
        "fused": FeedForward(config),
        "reference": FeedForward(config),
        "SwiGLU": SwiGLU(args.dim, hidden),
    }
    mlps["reference"].act = ReferenceXIELU()
    mlps["reference"].load_state_dict(mlps["fused"].state_dict())
    x_mlp = leaf(randn(args.tokens, args.dim))
    mlp_upstream = randn(args.tokens, args.dim)
    n_params = {name: sum(p.numel() for p in m.parameters()) for name, m in mlps.items()}
    for mlp in mlps.values():
        mlp.to(device=device, dtype=dtype)

    modes = ["eager"] + ([] if args.no_compile else ["compiled"])
    times: dict[tuple[str, str, str], float] = {}
    act_fns: dict[tuple[str, str], Callable] = {}
    for mode in modes:
        wrap = (lambda f: torch.compile(f, fullgraph=True)) if mode == "compiled" else (lambda f: f)
        calls = {}
        for name, (fn, inputs) in elementwise.items():
            upstream = swiglu_upstream if name == "SwiGLU" else act_upstream
            calls[("elementwise", name)] = fwd_bwd(wrapped := wrap(fn), inputs, upstream, device)
            if name != "SwiGLU":
                act_fns[name, mode] = wrapped
        for name, mlp in mlps.items():
            inputs = [x_mlp, *mlp.parameters()]
            module = wrap(mlp)
            calls[("MLP", name)] = fwd_bwd(
                lambda x, *_, m=module: m(x), inputs, mlp_upstream, device
            )
        for (part, name), seconds in interleaved_best(calls, args.repeat, warmup=2).items():
            times[part, name, mode] = seconds * 1e3
    act_saved = {key: saved_bytes(fn, act_inputs, exclude=[]) for key, fn in act_fns.items()}

    mlp_saved = {
        name: saved_bytes(mlp, [x_mlp], exclude=list(mlp.parameters()))
        for name, mlp in mlps.items()
    }

    where = (
        f"{args.tokens} tokens, dim {args.dim}, SwiGLU hidden {hidden}, xIELU hidden "
        f"{xielu_hidden}, {args.dtype}, {device}, {args.threads} thread(s), best of {args.repeat}"
    )

    def timed(mode: str, name: str, part: str, ours: str, base: str, base_name: str, **kw) -> Ratio:
        return Ratio(
            f"{name} fwd+bwd ({mode})",
            times[part, ours, mode],
            times[part, base, mode],
            "ms",
            f"{base_name} {mode}",
            **kw,
        )

    rows = []
    for mode in modes:
        eager = mode == "eager"
        params = f"{n_params['fused']:,} / {n_params['SwiGLU']:,} parameters"
        rows += [
            timed(
                mode, "xIELU fused / SwiGLU elementwise", "elementwise", "fused", "SwiGLU",
                "silu(g)*u", goal=None if eager else 1.0, note=where if eager else "",
            ),
            timed(
                mode, "xIELU reference / SwiGLU elementwise", "elementwise", "reference", "SwiGLU",
                "silu(g)*u",
            ),
            timed(
                mode, "xIELU fused / reference", "elementwise", "fused", "reference",
                "reference",
            ),
            timed(
                mode, "xIELU MLP / SwiGLU MLP", "MLP", "fused", "SwiGLU", "SwiGLU MLP",
                note=params if eager else "",
            ),
            timed(
                mode, "xIELU MLP fused / reference activation", "MLP", "fused", "reference",
                "reference act",
            ),
        ]  # fmt: skip
    rows += [
        Ratio(
            "xIELU saved activations: fused / reference",
            act_saved["fused", "eager"] / 2**20,
            act_saved["reference", "eager"] / 2**20,
            "MiB",
            "reference",
            note="eager; the fused backward keeps x (and one-element scalars)"
            + (
                f"; compiled, fused {act_saved['fused', 'compiled'] / 2**20:.3g} MiB, reference "
                f"{act_saved['reference', 'compiled'] / 2**20:.3g} MiB (inductor recomputes too)"
                if "compiled" in modes
                else ""
            ),
        ),
        Ratio(
            "xIELU MLP / SwiGLU MLP saved activations",
            mlp_saved["fused"] / 2**20,
            mlp_saved["SwiGLU"] / 2**20,
            "MiB",
            "SwiGLU MLP",
            note=(
                "eager, parameters excluded; xIELU MLP with the reference activation: "
                f"{mlp_saved['reference'] / 2**20:.3g} MiB"
            ),
        ),
    ]
    return rows


if __name__ == "__main__":
    main(add_arguments, measure, __doc__)
