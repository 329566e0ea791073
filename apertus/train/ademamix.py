"""AdEMAMix: Adam with a second, slow EMA of the gradient mixed into the numerator
(Pagliardini et al., arXiv 2409.03137; RECIPE.md §3).

    m1 = b1*m1 + (1-b1)*g;  m2 = b3(t)*m2 + (1-b3(t))*g;  v = b2*v + (1-b2)*g^2
    u  = (m1/(1-b1^t) + alpha(t)*m2) / (sqrt(v)/sqrt(1-b2^t) + eps)    # no bias correction on m2
    p <- p - lr*(u + wd*p)

The slow EMA (b3 = 0.9999, a half-life of ~6900 steps) would dominate the update early in
training, when it is mostly made of stale gradients, so both its weight alpha(t) and its
momentum b3(t) are warmed up (`ademamix_alpha`, `ademamix_beta3`).

Weight decay is decoupled (AdamW style, multiplied by lr). Norm weights and the xIELU scalars
are excluded from it through parameter groups (`param_groups`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch import nn

__all__ = ["AdEMAMix", "ademamix_alpha", "ademamix_beta3", "param_groups"]

# Parameters of the xIELU activation (RECIPE.md §1): learnable scalars that get no weight decay.
XIELU_SCALAR_SUFFIXES = ("alpha_p", "alpha_n")


def ademamix_alpha(t: int, alpha: float, t_alpha: int | None) -> float:
    """Weight of the slow EMA at step t (1-based): a linear warmup over `t_alpha` steps,
    `alpha * min(t / t_alpha, 1)`; `t_alpha=None` means no warmup (RECIPE.md §3)."""
    if t_alpha is None:
        return alpha
    return alpha * min(t / t_alpha, 1.0)


def _half_life(beta: float) -> float:
    # f(b) = ln(0.5)/ln(b) - 1: the number of steps after which an EMA with momentum b has
    # forgotten half of a gradient (minus one). The warmup is linear in this quantity, not in b.
    return math.log(0.5) / math.log(beta) - 1.0


def ademamix_beta3(t: int, beta1: float, beta3: float, t_beta3: int | None) -> float:
    """Momentum of the slow EMA at step t (RECIPE.md §3).

    For t < t_beta3 the half-life is interpolated linearly from that of beta1 to that of beta3:
    `b3(t) = 0.5 ** (1 / (f_t + 1))`, `f_t = (1 - t/T) f(beta1) + (t/T) f(beta3)`,
    `f(b) = ln(0.5)/ln(b) - 1`, so b3(0) = beta1; from t_beta3 on it is beta3.
    `t_beta3=None` means no warmup.
    """
    if t_beta3 is None or t >= t_beta3:
        return beta3
    frac = t / t_beta3
    f_t = (1.0 - frac) * _half_life(beta1) + frac * _half_life(beta3)
    return 0.5 ** (1.0 / (f_t + 1.0))


class AdEMAMix(torch.optim.Optimizer):
    """AdEMAMix (RECIPE.md §3), with per-group options.

    Args:
        params: parameters or parameter groups (dicts); any option below can be set per group.
        lr: learning rate; a schedule sets `group["lr"]` before each step.
        betas: (beta1, beta2, beta3): fast EMA, second moment, slow EMA.
        alpha: final weight of the slow EMA in the numerator.
        t_alpha: warmup steps of alpha (None: no warmup).
        t_beta3: warmup steps of beta3 (None: no warmup).
        eps: added to the bias-corrected sqrt(v).
        weight_decay: decoupled weight decay, applied as `lr * weight_decay * p`.
        foreach: use the multi-tensor (`torch._foreach_*`) implementation; `False` runs the
            per-parameter loop. On CPU both perform the same operations in the same order and give
            bit-identical results.

    State per parameter: `step` (a float32 CPU scalar tensor, as torch's Adam keeps it), `m1`,
    `m2`, `v` (same shape and dtype as the parameter). A parameter whose `.grad` is None is
    skipped and its step does not advance, so parameters can have different step counts.
    """

    def __init__(
        self,
        params: Iterable[torch.Tensor] | Iterable[dict[str, Any]],
        lr: float,
        betas: tuple[float, float, float] = (0.9, 0.999, 0.9999),
        alpha: float = 8.0,
        t_alpha: int | None = None,
        t_beta3: int | None = None,
        eps: float = 1e-8,
        weight_decay: float = 0.1,
        *,
        foreach: bool = True,
    ) -> None:
        defaults = {
            "lr": lr,
            "betas": tuple(betas),
            "alpha": alpha,
            "t_alpha": t_alpha,
            "t_beta3": t_beta3,
            "eps": eps,
            "weight_decay": weight_decay,
            "foreach": foreach,
        }
        super().__init__(params, defaults)

    def add_param_group(self, param_group: dict[str, Any]) -> None:
        super().add_param_group(param_group)
        # Options may come per group, so they are checked here rather than only in __init__.
        _check_options(self.param_groups[-1])

    @torch.no_grad()
    def step(self, closure: Callable[[], float] | None = None) -> float | None:  # type: ignore[override]
        """Perform one optimization step; `closure` re-evaluates the model and returns the loss."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()

        for group in self.param_groups:
            params: list[torch.Tensor] = []
            for p in group["params"]:
                if p.grad is None:
                    continue
                if p.grad.is_sparse:
                    raise RuntimeError("AdEMAMix does not support sparse gradients")
                if torch.is_complex(p):
                    raise RuntimeError("AdEMAMix does not support complex parameters")
                state = self.state[p]
                if not state:
                    state["step"] = torch.tensor(0.0, dtype=torch.float32)
                    state["m1"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                    state["m2"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                    state["v"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                state["step"] += 1
                params.append(p)
            if not params:
                continue
            if group["foreach"]:
                self._step_foreach(group, params)
            else:
                self._step_loop(group, params)
        return loss

    def _step_loop(self, group: dict[str, Any], params: list[torch.Tensor]) -> None:
        for p in params:
            state = self.state[p]
            s = _StepScalars(group, int(state["step"].item()))
            g, m1, m2, v = p.grad, state["m1"], state["m2"], state["v"]
            p.mul_(s.decay)
            m1.lerp_(g, 1.0 - s.beta1)
            m2.lerp_(g, 1.0 - s.beta3_t)
            v.mul_(s.beta2).addcmul_(g, g, value=1.0 - s.beta2)
            denom = v.sqrt().add_(s.eps_scaled)
            p.addcdiv_(m1, denom, value=s.step_size)
            p.addcdiv_(m2, denom, value=s.step_size * s.m2_weight)

    def _step_foreach(self, group: dict[str, Any], params: list[torch.Tensor]) -> None:
        # The foreach kernels need one device and dtype per list, and the step scalars differ
        # between parameters that skipped steps, so parameters are bucketed by all three.
        buckets: dict[tuple[torch.device, torch.dtype, int], list[torch.Tensor]] = {}
        for p in params:
            key = (p.device, p.dtype, int(self.state[p]["step"].item()))
            buckets.setdefault(key, []).append(p)
        for (_, _, t), ps in buckets.items():
            s = _StepScalars(group, t)
            states = [self.state[p] for p in ps]
            grads = [p.grad for p in ps]
            m1s = [st["m1"] for st in states]
            m2s = [st["m2"] for st in states]
            vs = [st["v"] for st in states]
            torch._foreach_mul_(ps, s.decay)
            torch._foreach_lerp_(m1s, grads, 1.0 - s.beta1)
            torch._foreach_lerp_(m2s, grads, 1.0 - s.beta3_t)
            torch._foreach_mul_(vs, s.beta2)
            torch._foreach_addcmul_(vs, grads, grads, value=1.0 - s.beta2)
            denoms = torch._foreach_sqrt(vs)
            torch._foreach_add_(denoms, s.eps_scaled)
            torch._foreach_addcdiv_(ps, m1s, denoms, value=s.step_size)
            torch._foreach_addcdiv_(ps, m2s, denoms, value=s.step_size * s.m2_weight)


class _StepScalars:
    """The per-step Python scalars of the update, computed once per (group, step) in float64.

    The update is rearranged so that it takes few passes over parameter-sized tensors and
    allocates only one (the step is memory-bound; on CPU a fresh allocation costs page faults
    that dwarf an in-place pass):
    ``p*(1 - lr*wd) - lr * (m1/bc1 + alpha*m2) / (sqrt(v)/sqrt(bc2) + eps)``
    ``= p*decay + step_size * m1/denom + step_size*m2_weight * m2/denom``
    with ``denom = sqrt(v) + eps*sqrt(bc2)``, ``decay = 1 - lr*wd``, ``m2_weight = alpha*bc1``,
    ``step_size = -lr*sqrt(bc2)/bc1``: the same formula (RECIPE.md §3), in 9 passes and one
    allocation (the literal order takes 12 passes and three allocations). It is AdamW's own
    arrangement plus the slow EMA's lerp and one more addcdiv.
    """

    def __init__(self, group: dict[str, Any], t: int) -> None:
        self.beta1, self.beta2, beta3 = group["betas"]
        lr = group["lr"]
        self.alpha_t = ademamix_alpha(t, group["alpha"], group["t_alpha"])
        self.beta3_t = ademamix_beta3(t, self.beta1, beta3, group["t_beta3"])
        bias_correction1 = 1.0 - self.beta1**t
        sqrt_bias_correction2 = math.sqrt(1.0 - self.beta2**t)
        self.decay = 1.0 - lr * group["weight_decay"]
        self.m2_weight = self.alpha_t * bias_correction1
        self.eps_scaled = group["eps"] * sqrt_bias_correction2
        self.step_size = -lr * sqrt_bias_correction2 / bias_correction1


def _check_options(group: dict[str, Any]) -> None:
    name = f"param group {group['name']!r}" if "name" in group else "AdEMAMix"
    betas = group["betas"]
    if len(betas) != 3:
        raise ValueError(f"{name}: betas must be (beta1, beta2, beta3), got {betas!r}")
    for label, beta in zip(("beta1", "beta2", "beta3"), betas, strict=True):
        if not 0.0 <= beta < 1.0:
            raise ValueError(f"{name}: {label} must be in [0, 1), got {beta}")
    if group["t_beta3"] is not None and (betas[0] == 0.0 or betas[2] == 0.0):
        # The beta3 warmup interpolates half-lives, ln(0.5)/ln(beta), undefined at beta = 0.
        raise ValueError(f"{name}: the beta3 warmup needs beta1 > 0 and beta3 > 0, got {betas!r}")
    for label in ("t_alpha", "t_beta3"):
        value = group[label]
        if value is not None and not value > 0:
            raise ValueError(f"{name}: {label} must be None (no warmup) or > 0, got {value}")
    for label in ("lr", "alpha", "eps", "weight_decay"):
        if not group[label] >= 0.0:
            raise ValueError(f"{name}: {label} must be >= 0, got {group[label]}")


def param_groups(model: nn.Module, weight_decay: float) -> list[dict[str, Any]]:
    """Split a model's trainable parameters into a decayed and a non-decayed group.

    No weight decay for 1-D (and 0-D) parameters, i.e. norm weights and biases, and for the xIELU
    scalars (names ending in `alpha_p` / `alpha_n`) whatever their shape (RECIPE.md §1, §3);
    everything else (projections, embeddings, lm_head) decays. Each group carries `name`
    ("decay" / "no_decay") and `param_names` for logging; empty groups are left out.
    """
    decay: list[tuple[str, nn.Parameter]] = []
    no_decay: list[tuple[str, nn.Parameter]] = []
    for param_name, param in model.named_parameters():
        if not param.requires_grad:
            continue
        if param.ndim < 2 or param_name.endswith(XIELU_SCALAR_SUFFIXES):
            no_decay.append((param_name, param))
        else:
            decay.append((param_name, param))
    groups = []
    for group_name, members, wd in (("decay", decay, weight_decay), ("no_decay", no_decay, 0.0)):
        if members:
            groups.append(
                {
                    "name": group_name,
                    "params": [p for _, p in members],
                    "param_names": [n for n, _ in members],
                    "weight_decay": wd,
                }
            )
    return groups
