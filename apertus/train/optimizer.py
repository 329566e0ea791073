"""AdEMAMix in torchtitan's optimizer container (RECIPE.md §3): `AdEMAMixOptimizers` registers
``optimizer_name="AdEMAMix"`` (`apertus.train.ademamix.AdEMAMix`) and checks the weight-decay
split against `apertus.train.ademamix.param_groups`; `ademamix_optimizer` is its config with the
recipe's two parameter groups (no weight decay for norms and the xIELU scalars).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn as nn
from torchtitan.components.checkpointer.utils import canonical_fqn
from torchtitan.components.optimizer import (
    OptimizersContainer,
    ParamGroupConfig,
)

from apertus.core import ApertusError
from apertus.train.ademamix import AdEMAMix, param_groups

# Parameters without weight decay (RECIPE.md §1, §3): the RMSNorm weights (attention_norm,
# ffn_norm, q_norm, k_norm and the final norm, all `...norm.weight`) and the xIELU scalars.
# The container checks this against `ademamix.param_groups` (1-D params and xIELU scalars).
NO_DECAY_PATTERN = r"norm\.weight$|\.alpha_[pn]$"


class AdEMAMixOptimizers(OptimizersContainer):
    """torchtitan's `OptimizersContainer` that also knows ``optimizer_name="AdEMAMix"``
    (`apertus.train.ademamix.AdEMAMix`; RECIPE.md §3).

    On construction it checks the weight-decay split of the parameter groups against
    `ademamix.param_groups`: norm weights and xIELU scalars must not be decayed, and every other
    parameter must be decayed when some group decays.
    """

    @dataclass(kw_only=True, slots=True)
    class Config(OptimizersContainer.Config):
        pass

    @staticmethod
    def _resolve_optimizer_factory(name: str) -> Callable[..., torch.optim.Optimizer]:
        if name == "AdEMAMix":
            return _build_ademamix
        return OptimizersContainer._resolve_optimizer_factory(name)

    def __init__(self, config: Config, *, model_parts: list[nn.Module]) -> None:
        super().__init__(config, model_parts=model_parts)
        decayed_somewhere = any(
            group.get("weight_decay", 0.0) > 0
            for optimizer in self.optimizers
            for group in optimizer.param_groups
        )
        for model in model_parts:
            expected = param_groups(model, weight_decay=1.0)
            no_decay = {
                canonical_fqn(n)
                for g in expected
                if g["name"] == "no_decay"
                for n in g["param_names"]
            }
            for optimizer in self.optimizers:
                for group in optimizer.param_groups:
                    decays = group.get("weight_decay", 0.0) > 0
                    for name in group.get("param_names", []):
                        if decays and name in no_decay:
                            raise ApertusError(
                                f"optimizer: {name} is a norm weight or xIELU scalar and must "
                                "not get weight decay (RECIPE.md §1); fix the param_groups "
                                "patterns"
                            )
                        if decayed_somewhere and not decays and name not in no_decay:
                            raise ApertusError(
                                f"optimizer: {name} is a weight matrix but its group has no "
                                "weight decay; fix the param_groups patterns"
                            )

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        # Every option of the saved param groups is restored except the LR, which belongs to
        # the schedule (RecipeLRSchedulers.load_state_dict sets it from the resumed step).
        lrs = [[group["lr"] for group in opt.param_groups] for opt in self.optimizers]
        super().load_state_dict(state_dict)
        for optimizer, saved in zip(self.optimizers, lrs, strict=True):
            for group, lr in zip(optimizer.param_groups, saved, strict=True):
                group["lr"] = lr


def _build_ademamix(groups: list[dict[str, Any]], **kwargs: Any) -> AdEMAMix:
    # The container passes only parameter groups, each carrying every option; AdEMAMix's
    # constructor also wants a default LR, which no group falls back to.
    return AdEMAMix(groups, lr=groups[0]["lr"], **kwargs)


def ademamix_optimizer(
    *,
    lr: float,
    betas: tuple[float, float, float],
    alpha: float,
    t_alpha: int | None,
    t_beta3: int | None,
    eps: float,
    weight_decay: float,
) -> AdEMAMixOptimizers.Config:
    """The container config for AdEMAMix with the recipe's two groups; `lr` is the peak LR
    (the schedule scales from it)."""
    options: dict[str, Any] = {
        "lr": lr,
        "betas": tuple(betas),
        "alpha": alpha,
        "t_alpha": t_alpha,
        "t_beta3": t_beta3,
        "eps": eps,
    }
    return AdEMAMixOptimizers.Config(
        # foreach: AdEMAMix's multi-tensor path; "fused" would only be a flag it ignores.
        implementation="foreach",
        param_groups=[
            ParamGroupConfig(
                pattern=NO_DECAY_PATTERN,
                optimizer_name="AdEMAMix",
                optimizer_kwargs={**options, "weight_decay": 0.0},
            ),
            ParamGroupConfig(
                pattern=r".*",
                optimizer_name="AdEMAMix",
                optimizer_kwargs={**options, "weight_decay": weight_decay},
            ),
        ],
    )
