"""The QRPO loss for torchtitan (RECIPE.md §7; the formulas are `apertus.posttrain.qrpo`'s).

torchtitan calls its loss as ``loss_fn(logits, labels, global_valid_tokens)`` and divides a sum
by the step's global token count. QRPO's loss is a mean over completions instead: each row's
sequence log-probability (the sum of its completion tokens' log-probabilities; the labels are
the completion tokens, `IGNORE_INDEX` elsewhere), its squared residual
(`apertus.posttrain.qrpo.qrpo_squared_residuals`), weighted by the row's ``weight`` from
`apertus.train.qrpo_loader.QRPODataLoader` (1 / completions of the step, 0 for a filler row).
Summed over micro-batches and data-parallel ranks, as torchtitan sums the returned losses and
the gradients, that is the mean over the step's completions: ``global_valid_tokens`` is ignored.

The per-row extras (``reference_logp``, ``quantile_reward``, ``weight``) do not pass through
torchtitan's loss call: `apertus.train.trainer.QRPOTrainer` takes them out of the micro-batch
(they are no model inputs) and hands them over with `QRPOLoss.set_rows` just before the
forward. The loss also sums detached statistics of the rows (`take_statistics`) for the
metrics: mean quantile reward, log-ratio and beta of the step, and the untrained policy's mean
|log-ratio| per completion token (how well ``reference_logp`` matches the starting weights).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch.distributed.tensor import DTensor
from torchtitan.components.loss import IGNORE_INDEX, BaseLoss, compute_logprobs
from torchtitan.config import CompileConfig

from apertus.posttrain.qrpo import (
    BETA_KL,
    MAX_BETA,
    length_normalised_beta,
    qrpo_squared_residuals,
    summed_logprobs,
)

__all__ = ["QRPO_ROW_KEYS", "QRPOLoss"]

QRPO_ROW_KEYS = ("reference_logp", "quantile_reward", "weight")
"""The per-row tensors of a QRPO micro-batch that are no model inputs."""

STATISTICS = ("quantile_reward", "log_ratio", "beta", "abs_log_ratio_per_token", "completions")
"""What `take_statistics` sums over the real rows (fillers have weight 0 and count nothing)."""


def completion_logprobs(pred: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """log pi(y|x) of each row [B]: the sum of the log-probabilities of its labelled tokens
    (`apertus.posttrain.qrpo.sequence_logprobs`, from the logits [B, L, V] and the labels). The
    log-softmax is taken at the labelled positions only (a completion is a fraction of its row);
    a vocabulary-sharded (tensor-parallel) logits DTensor goes through torchtitan's
    `compute_logprobs`, which gathers it."""
    if isinstance(pred, DTensor):
        return compute_logprobs(pred, labels).sum(dim=-1)
    return summed_logprobs(pred, labels, labels != IGNORE_INDEX)


class QRPOLoss(BaseLoss):
    """sum_i weight_i (Rq_i - beta_i log Z_i - beta_i log(pi / pi_ref)(y_i|x_i))^2 over a
    micro-batch's rows (module doc)."""

    @dataclass(kw_only=True, slots=True)
    class Config(BaseLoss.Config):
        beta_kl: float = BETA_KL
        """beta_y = min(beta_kl / |y|, max_beta) (RECIPE.md §7)."""

        max_beta: float = MAX_BETA

    def __init__(self, config: Config, *, compile_config: CompileConfig | None = None) -> None:
        del compile_config  # the loss is cheap next to the model; never compiled
        self.config = config
        self._rows: dict[str, torch.Tensor] | None = None
        self._sums = torch.zeros(len(STATISTICS), dtype=torch.float64)  # on the loss's device

    def set_rows(self, rows: dict[str, torch.Tensor]) -> None:
        """The extras (`QRPO_ROW_KEYS`) of the micro-batch whose logits come next."""
        self._rows = rows

    def take_statistics(self) -> torch.Tensor:
        """The statistics (`STATISTICS`) summed over the real rows since the last call, reset."""
        sums, self._sums = self._sums, torch.zeros(len(STATISTICS), dtype=torch.float64)
        return sums

    def __call__(
        self,
        pred: torch.Tensor,
        labels: torch.Tensor,
        global_valid_tokens: torch.Tensor | None = None,
        **kwargs: Any,
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        del global_valid_tokens, kwargs  # normalised by the rows' weights instead
        rows, self._rows = self._rows, None
        if rows is None:
            raise RuntimeError("QRPOLoss called without the micro-batch's rows (set_rows)")
        logps = completion_logprobs(pred, labels)
        lengths = (labels != IGNORE_INDEX).sum(dim=-1)
        squared = qrpo_squared_residuals(
            logps,
            rows["reference_logp"],
            rows["quantile_reward"],
            lengths,
            beta_kl=self.config.beta_kl,
            max_beta=self.config.max_beta,
        )
        weight = rows["weight"].to(squared.device, torch.float64)
        with torch.no_grad():
            real = (weight > 0).to(torch.float64)
            log_ratio = logps.detach().double() - rows["reference_logp"].double()
            beta = length_normalised_beta(lengths, self.config.beta_kl, self.config.max_beta)
            step = torch.stack(
                [
                    (real * rows["quantile_reward"].double()).sum(),
                    (real * log_ratio).sum(),
                    (real * beta).sum(),
                    (real * log_ratio.abs() / lengths.double()).sum(),
                    real.sum(),
                ]
            )
            self._sums = self._sums.to(step.device) + step
        return (weight * squared).sum(), {}
