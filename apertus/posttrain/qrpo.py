"""Quantile Reward Policy Optimization (QRPO), the offline alignment step of RECIPE.md §7.

QRPO fits the policy to the closed-form optimum of KL-regularised reward maximisation,
pi*(y|x) = pi_ref(y|x) exp(Rq(x, y) / beta) / Z(x), by regressing the scaled log-ratio on the
reward. What makes the partition function Z(x) tractable is the reward it uses: the quantile
Rq(x, y) of a completion's reward among completions sampled from the reference policy. Under
pi_ref that quantile is uniform on [0, 1], so

    Z(x) = E_{y ~ pi_ref}[exp(Rq / beta)] = integral_0^1 exp(u / beta) du = beta (e^{1/beta} - 1)

whatever the prompt, and the regression needs no pairs and no sampling during training:

    Rq(x, y)  = mean_j 1[ R(x, y_ref_j) <= R(x, y) ]
    beta_y    = min(beta_KL / |y|, 0.1)
    beta logZ = beta log(beta) + beta log(e^{1/beta} - 1)
    L         = mean over completions of (Rq - beta logZ - beta (log pi(y|x) - log pi_ref(y|x)))^2

with log-probabilities summed over the completion's tokens. Each quantity is one function below.
"""

from __future__ import annotations

import torch

from apertus.model.model import ApertusModel

__all__ = [
    "BETA_KL",
    "MAX_BETA",
    "beta_log_partition",
    "length_normalised_beta",
    "optimal_log_ratio",
    "qrpo_loss",
    "qrpo_squared_residuals",
    "quantile_rewards",
    "sequence_logprobs",
    "summed_logprobs",
]

# RECIPE.md §7: beta_KL = 5, and the length-normalised beta is capped at 0.1.
BETA_KL = 5.0
MAX_BETA = 0.1


def quantile_rewards(rewards: torch.Tensor, reference_rewards: torch.Tensor) -> torch.Tensor:
    """Rq(x, y) = mean_j 1[R(x, y_ref_j) <= R(x, y)] (RECIPE.md §7): the empirical CDF of a
    completion's reward among its prompt's reference-policy samples.

    `rewards` [N] holds R(x_i, y_i); `reference_rewards` [N, n] the rewards of the n reference
    samples of prompt x_i. The comparison is `<=`, so a completion that ties with every
    reference sample gets Rq = 1, and Rq is never 0 for a completion scored among the
    reference samples themselves (it ties with itself).
    """
    if rewards.dim() != 1 or reference_rewards.dim() != 2:
        raise ValueError(
            f"need rewards [N] and reference_rewards [N, n]; got shapes {tuple(rewards.shape)} "
            f"and {tuple(reference_rewards.shape)}"
        )
    if reference_rewards.shape[0] != rewards.shape[0] or reference_rewards.shape[1] == 0:
        raise ValueError(
            f"reference_rewards {tuple(reference_rewards.shape)} must have one non-empty row per "
            f"reward ({rewards.shape[0]})"
        )
    if rewards.dtype != reference_rewards.dtype:
        # A tie must stay a tie: 0.3 in float32 is above 0.3 in float64.
        raise ValueError(
            f"rewards ({rewards.dtype}) and reference_rewards ({reference_rewards.dtype}) must "
            "have one dtype, or rounding breaks ties"
        )
    at_or_below = reference_rewards <= rewards[:, None]
    return at_or_below.to(torch.float64).mean(dim=-1)


def length_normalised_beta(
    lengths: torch.Tensor, beta_kl: float = BETA_KL, max_beta: float = MAX_BETA
) -> torch.Tensor:
    """beta_y = min(beta_KL / |y|, max_beta) (RECIPE.md §7): the KL weight per completion.

    A sequence's log-ratio grows with its length, so a fixed beta would let long completions
    dominate the regression; dividing by |y| (completion tokens) makes the regularisation
    per token. The cap keeps short completions from being pinned to the reference.
    """
    lengths = torch.as_tensor(lengths)
    if (lengths <= 0).any():
        raise ValueError(f"completion lengths must be positive, got {lengths.tolist()}")
    if not (beta_kl > 0 and max_beta > 0):
        raise ValueError(f"need beta_kl > 0 and max_beta > 0, got {beta_kl}, {max_beta}")
    return torch.clamp(beta_kl / lengths.to(torch.float64), max=max_beta)


def beta_log_partition(beta: torch.Tensor) -> torch.Tensor:
    """beta log Z with Z = beta (e^{1/beta} - 1), i.e. beta log(beta) + beta log(e^{1/beta} - 1)
    (RECIPE.md §7; the log-partition of the uniform quantile reward, see the module doc).

    e^{1/beta} overflows float64 below beta ~ 0.0014 (float32: ~ 0.0114), which long completions
    reach (beta = 5 / |y|), so the second term is rewritten as
    beta log(e^{1/beta} - 1) = 1 + beta log(1 - e^{-1/beta}) = 1 + beta log(-expm1(-1/beta)),
    finite for every beta >= 0. It decreases from 1 (beta -> 0: beta log beta -> 0 and the
    second term -> 1) to 1/2 (beta -> inf: Z ~ 1 + 1/(2 beta)); beta = 0 gives the limit 1.
    """
    beta = torch.as_tensor(beta)
    if not beta.dtype.is_floating_point:
        beta = beta.to(torch.float64)
    if (beta < 0).any():
        raise ValueError("beta must be >= 0")
    # xlogy(0, 0) = 0, the limit of beta log beta.
    return torch.xlogy(beta, beta) + 1.0 + beta * torch.log(-torch.expm1(-1.0 / beta))


def optimal_log_ratio(quantile_reward: torch.Tensor, beta: torch.Tensor) -> torch.Tensor:
    """The log-ratio log pi*(y|x) - log pi_ref(y|x) = (Rq - beta log Z) / beta of the optimal
    policy pi* = pi_ref exp(Rq / beta) / Z (RECIPE.md §7): where `qrpo_loss` is zero."""
    return (quantile_reward - beta_log_partition(beta)) / beta


def qrpo_squared_residuals(
    policy_logps: torch.Tensor,
    reference_logps: torch.Tensor,
    quantile_rewards: torch.Tensor,
    lengths: torch.Tensor,
    *,
    beta_kl: float = BETA_KL,
    max_beta: float = MAX_BETA,
) -> torch.Tensor:
    """(Rq_i - beta_i log Z_i - beta_i (log pi(y_i|x_i) - log pi_ref(y_i|x_i)))^2, one value
    per completion (RECIPE.md §7), with beta_i = `length_normalised_beta(lengths_i)`: the terms
    `qrpo_loss` averages. A distributed trainer sums them over its ranks and micro-batches and
    divides by the completions of the optimizer step (`apertus.train.qrpo_loss`).

    All arguments are [N], one entry per completion: the policy's and the reference policy's
    log-probabilities summed over the completion's tokens (`sequence_logprobs`), the quantile
    rewards (`quantile_rewards`) and the completions' token counts. The regression is computed
    in float64 (the log-ratio of two long sums is a small difference of large numbers); the
    gradient reaches `policy_logps` in its own dtype. Returns [N] float64.
    """
    n = policy_logps.shape[0]
    for name, value in (
        ("policy_logps", policy_logps),
        ("reference_logps", reference_logps),
        ("quantile_rewards", quantile_rewards),
        ("lengths", lengths),
    ):
        if value.dim() != 1 or value.shape[0] != n:
            raise ValueError(
                f"qrpo_loss needs [N] tensors of one length; {name} has shape {tuple(value.shape)}"
                f", policy_logps {tuple(policy_logps.shape)}"
            )
    if n == 0:
        raise ValueError("qrpo_loss needs at least one completion")
    device = policy_logps.device
    beta = length_normalised_beta(lengths.to(device), beta_kl, max_beta)
    log_ratio = policy_logps.to(torch.float64) - reference_logps.to(device, torch.float64)
    rq = quantile_rewards.to(device, torch.float64)
    residual = rq - beta_log_partition(beta) - beta * log_ratio
    return residual.square()


def qrpo_loss(
    policy_logps: torch.Tensor,
    reference_logps: torch.Tensor,
    quantile_rewards: torch.Tensor,
    lengths: torch.Tensor,
    *,
    beta_kl: float = BETA_KL,
    max_beta: float = MAX_BETA,
) -> torch.Tensor:
    """L = mean_i (Rq_i - beta_i log Z_i - beta_i (log pi(y_i|x_i) - log pi_ref(y_i|x_i)))^2
    (RECIPE.md §7): the mean of `qrpo_squared_residuals` (same arguments)."""
    return qrpo_squared_residuals(
        policy_logps,
        reference_logps,
        quantile_rewards,
        lengths,
        beta_kl=beta_kl,
        max_beta=max_beta,
    ).mean()


def _logits(
    model: torch.nn.Module, input_ids: torch.Tensor, positions: torch.Tensor | None
) -> torch.Tensor:
    if isinstance(model, ApertusModel):
        return model(input_ids, positions)
    # A transformers causal LM: keywords, since its second positional argument is the
    # attention mask; right padding needs no mask under causal attention. Without a cache,
    # transformers makes packed rows block-causal from position_ids (a new document wherever
    # the position does not grow by one); with one (its default) they would attend across
    # documents (apertus/export/verify.py).
    out = model(input_ids=input_ids, position_ids=positions, use_cache=False)
    return out.logits if hasattr(out, "logits") else out


def sequence_logprobs(
    model: torch.nn.Module,
    input_ids: torch.Tensor,
    completion_mask: torch.Tensor,
    positions: torch.Tensor | None = None,
) -> torch.Tensor:
    """log pi(y|x) = sum over completion tokens t of log p(token_t | tokens_<t), one value per
    row: the sequence log-probability QRPO regresses (RECIPE.md §7), for the policy and for
    the reference alike.

    `input_ids` [B, L] holds prompt and completion (rows right-padded with any token, the
    padding masked out), `completion_mask` [B, L] is 1 at completion tokens, 0 at prompt and
    padding tokens; the first token has no context to be predicted from, so it must be 0.
    `model` is our `ApertusModel` (`forward(tokens, positions) -> logits`) or a transformers
    causal LM (`.logits`). Returns [B] float32.
    """
    if input_ids.dim() != 2 or completion_mask.shape != input_ids.shape:
        raise ValueError(
            f"need input_ids [B, L] and completion_mask of the same shape; got "
            f"{tuple(input_ids.shape)} and {tuple(completion_mask.shape)}"
        )
    mask = completion_mask.to(torch.bool)
    if mask[:, 0].any():
        raise ValueError("completion_mask must be 0 at the first token: nothing predicts it")
    logits = _logits(model, input_ids, positions)
    # logits at position t predict the token at t + 1.
    return summed_logprobs(logits[:, :-1], input_ids[:, 1:], mask[:, 1:])


def summed_logprobs(
    logits: torch.Tensor, targets: torch.Tensor, where: torch.Tensor
) -> torch.Tensor:
    """Per row [B] float32: the sum, over the positions where `where` [B, L] is true, of the
    log-probability the logits [B, L, V] give the target token [B, L] there. The log-softmax is
    taken at those positions only (a completion is a fraction of its row). The one place both
    `sequence_logprobs` and the distributed trainer's loss (`apertus.train.qrpo_loss`) sum a
    completion's log-probabilities."""
    rows = where.nonzero()[:, 0]
    selected = logits[where].float()
    token_logps = selected.gather(-1, targets[where][:, None]).squeeze(-1) - selected.logsumexp(-1)
    zeros = torch.zeros(where.shape[0], dtype=torch.float32, device=logits.device)
    return zeros.index_add(0, rows, token_logps)
