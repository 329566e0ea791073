"""The QRPO formulas of RECIPE.md §7 (apertus.posttrain.qrpo), each against hand arithmetic or an
independent computation, and the sequence log-probability against a token-by-token loop."""

from __future__ import annotations

import math
import os

import pytest
import torch

from apertus.model.flavors import flavor
from apertus.posttrain.qrpo import (
    beta_log_partition,
    length_normalised_beta,
    optimal_log_ratio,
    qrpo_loss,
    quantile_rewards,
    sequence_logprobs,
)

F64 = torch.float64


def t64(values) -> torch.Tensor:
    return torch.tensor(values, dtype=F64)


def naive_beta_log_partition(beta: float) -> float:
    """RECIPE §7 as written, beta log(beta) + beta log(e^{1/beta} - 1), in Python floats
    (valid while e^{1/beta} fits a double, beta > 1/709)."""
    return beta * math.log(beta) + beta * math.log(math.exp(1.0 / beta) - 1.0)


# --------------------------------------------------------------------------------------------
# Rq
# --------------------------------------------------------------------------------------------


def test_quantile_rewards_hand_computed():
    refs = t64([[0.0, 1.0, 2.0, 3.0]] * 5 + [[3.0, 3.0, 3.0, 3.0]])
    rewards = t64([0.5, 2.0, -1.0, 1.0, 3.5, 3.0])
    # 0.5: only 0 is <= it -> 1/4; 2.0: 0, 1, 2 -> 3/4; -1.0: none -> 0;
    # 1.0 ties with 1: 0 and 1 count -> 2/4; 3.5: all -> 1; 3.0 ties with all four -> 1.
    assert quantile_rewards(rewards, refs).tolist() == [0.25, 0.75, 0.0, 0.5, 1.0, 1.0]


def test_quantile_rewards_match_an_empirical_cdf_by_sorting():
    gen = torch.Generator().manual_seed(0)
    # Rounded so that ties between rewards and reference rewards occur often.
    refs = torch.round(torch.randn(50, 10, generator=gen, dtype=F64) * 2) / 2
    rewards = torch.round(torch.randn(50, generator=gen, dtype=F64) * 2) / 2
    expected = [
        torch.searchsorted(row.sort().values, r, right=True).item() / 10
        for row, r in zip(refs, rewards, strict=True)
    ]
    assert quantile_rewards(rewards, refs).tolist() == pytest.approx(expected, abs=0)


def test_all_rewards_equal_give_quantile_one():
    # By the `<=` definition a completion that ties with every reference sample is at the top.
    rewards, refs = torch.full((4,), 0.3, dtype=F64), torch.full((4, 10), 0.3, dtype=F64)
    assert quantile_rewards(rewards, refs).tolist() == [1.0] * 4


def test_quantile_rewards_refuse_mixed_dtypes():
    # float32(0.3) > float64(0.3): mixing them would turn ties into losses.
    with pytest.raises(ValueError, match="one dtype"):
        quantile_rewards(torch.full((2,), 0.3, dtype=F64), torch.full((2, 3), 0.3))


def test_quantile_rewards_reject_mismatched_shapes():
    with pytest.raises(ValueError, match="one non-empty row per reward"):
        quantile_rewards(t64([1.0, 2.0]), t64([[1.0, 2.0]]))
    with pytest.raises(ValueError, match="reference_rewards"):
        quantile_rewards(t64([1.0]), t64([1.0, 2.0]))


# --------------------------------------------------------------------------------------------
# beta and beta log Z
# --------------------------------------------------------------------------------------------


def test_length_normalised_beta_clamps_short_completions():
    beta = length_normalised_beta(torch.tensor([1, 10, 50, 51, 100, 10_000]))
    # 5/1, 5/10, 5/50 = 0.1 all hit the cap; 5/51, 5/100 = 0.05, 5/10^4 = 5e-4 do not.
    assert beta.tolist() == pytest.approx([0.1, 0.1, 0.1, 5 / 51, 0.05, 5e-4], rel=1e-15)
    assert length_normalised_beta(torch.tensor([4]), beta_kl=1.0, max_beta=0.5).item() == 0.25
    with pytest.raises(ValueError, match="positive"):
        length_normalised_beta(torch.tensor([3, 0]))


def test_beta_log_partition_hand_computed():
    # beta = 1: 1*log 1 + log(e - 1) = log(1.718281828...) = 0.541324854612918
    assert beta_log_partition(t64(1.0)).item() == pytest.approx(0.541324854612918, abs=1e-15)
    # beta = 0.1: 0.1*log 0.1 = -0.230258509299405; e^10 - 1 = 22025.465794806718,
    # log of it = 9.999954599039630, times 0.1 = 0.999995459903963; sum 0.769736950604558.
    assert beta_log_partition(t64(0.1)).item() == pytest.approx(0.769736950604558, abs=1e-14)


def test_beta_log_partition_matches_the_recipe_formula_where_it_is_finite():
    betas = [0.0015, 0.002, 0.01, 0.03, 0.05, 0.1, 0.3, 1.0, 3.0, 20.0]
    got = beta_log_partition(t64(betas)).tolist()
    assert got == pytest.approx([naive_beta_log_partition(b) for b in betas], rel=1e-12)


def test_beta_log_partition_is_finite_for_long_completions():
    lengths = torch.tensor([10_000, 100_000, 10**6])
    beta = length_normalised_beta(lengths)
    # The formula as written overflows there: e^{1/beta} = e^{2000} is inf in float64.
    with pytest.raises(OverflowError):
        naive_beta_log_partition(beta[0].item())
    for dtype in (torch.float32, F64):
        value = beta_log_partition(beta.to(dtype))
        assert torch.isfinite(value).all()
        # e^{-1/beta} underflows to 0 there, so beta log Z = 1 + beta log beta exactly.
        expected = [1 + b * math.log(b) for b in beta.tolist()]
        assert value.tolist() == pytest.approx(expected, rel=1e-6 if dtype != F64 else 1e-15)
    loss_input = torch.zeros(3, dtype=torch.float32, requires_grad=True)
    loss = qrpo_loss(loss_input - 5000.0, torch.full((3,), -5000.0), t64([0.1, 0.5, 1.0]), lengths)
    loss.backward()
    assert torch.isfinite(loss) and torch.isfinite(loss_input.grad).all()


def test_beta_log_partition_limits():
    # beta -> 0: beta log beta -> 0 and beta log(e^{1/beta} - 1) -> 1, so beta log Z -> 1 (not 0);
    # beta = 0 itself gives the limit.
    assert beta_log_partition(t64(0.0)).item() == 1.0
    assert beta_log_partition(t64(1e-12)).item() == pytest.approx(1.0, abs=1e-10)
    # beta -> inf: Z = beta (e^{1/beta} - 1) = 1 + 1/(2 beta) + 1/(6 beta^2) + ..., so
    # beta log Z = 1/2 + 1/(24 beta) + O(1/beta^2).
    for beta in (100.0, 1000.0):
        assert beta_log_partition(t64(beta)).item() == pytest.approx(
            0.5 + 1 / (24 * beta), abs=1 / beta**2
        )
    grid = beta_log_partition(torch.logspace(-4, 2, 200, dtype=F64))
    assert (grid.diff() < 0).all(), "beta log Z decreases from 1 to 1/2"


# --------------------------------------------------------------------------------------------
# The loss
# --------------------------------------------------------------------------------------------


def test_qrpo_loss_hand_computed():
    # Completion 1: 20 tokens -> beta = min(5/20, 0.1) = 0.1, beta log Z = 0.769736950604558;
    #   log-ratio -10 - (-12) = 2; residual 1.0 - 0.769736950604558 - 0.1*2 = 0.030263049395442.
    # Completion 2: 100 tokens -> beta = 0.05; beta log Z = 0.05 log 0.05 + 0.05 log(e^20 - 1)
    #   = -0.149786613677700 + 0.999999999896942 = 0.850213386219242;
    #   log-ratio -30 - (-29) = -1; residual 0.25 - 0.850213386219242 + 0.05 = -0.550213386219242.
    # Loss = (0.030263049395442^2 + 0.550213386219242^2) / 2
    #      = (0.000915852159 + 0.302734770375) / 2 = 0.151825311267.
    loss = qrpo_loss(
        t64([-10.0, -30.0]), t64([-12.0, -29.0]), t64([1.0, 0.25]), torch.tensor([20, 100])
    )
    assert loss.item() == pytest.approx(0.151825311267, rel=1e-10)
    r1 = 1.0 - naive_beta_log_partition(0.1) - 0.1 * 2
    r2 = 0.25 - naive_beta_log_partition(0.05) - 0.05 * -1
    assert loss.item() == pytest.approx((r1**2 + r2**2) / 2, rel=1e-12)


def test_qrpo_loss_is_a_mean_over_completions():
    args = (t64([-3.0, -8.0]), t64([-4.0, -7.0]), t64([0.9, 0.2]), torch.tensor([12, 70]))
    twice = [torch.cat([a, a]) for a in args]
    assert qrpo_loss(*twice).item() == pytest.approx(qrpo_loss(*args).item(), rel=1e-14)
    single = [qrpo_loss(*(a[i : i + 1] for a in args)).item() for i in range(2)]
    assert qrpo_loss(*args).item() == pytest.approx(sum(single) / 2, rel=1e-14)


@pytest.mark.parametrize("rq,length", [(1.0, 10), (0.7, 30), (0.25, 80), (0.0, 400), (0.9, 10_000)])
def test_qrpo_loss_is_minimised_at_the_optimal_log_ratio(rq, length):
    beta = length_normalised_beta(torch.tensor([length]))
    target = ((rq - beta_log_partition(beta)) / beta).item()
    assert optimal_log_ratio(t64([rq]), beta).item() == pytest.approx(target, rel=1e-14)
    reference = t64([-50.0])

    def loss_at(log_ratio: float) -> float:
        return qrpo_loss(reference + log_ratio, reference, t64([rq]), torch.tensor([length])).item()

    assert loss_at(target) == pytest.approx(0.0, abs=1e-20)
    # A grid scan finds the same minimiser, and the loss is a parabola in the log-ratio with
    # curvature beta^2: L(target + d) = beta^2 d^2.
    grid = torch.linspace(target - 50, target + 50, 2001, dtype=F64)
    losses = torch.tensor([loss_at(r) for r in grid.tolist()])
    assert grid[losses.argmin()].item() == pytest.approx(target, abs=0.05 + 1e-9)
    assert loss_at(target + 3.0) == pytest.approx(beta.item() ** 2 * 9.0, rel=1e-9)


def test_gradient_raises_high_quantile_completions_and_lowers_low_ones():
    # At the reference (log-ratio 0), beta = 0.1: the optimum is (Rq - 0.7697) / 0.1, +2.30 for
    # Rq = 1 and -5.20 for Rq = 0.25, so gradient descent must raise log pi of the first
    # completion (dL/dlogpi < 0) and lower that of the second.
    policy = t64([-20.0, -20.0]).requires_grad_()
    qrpo_loss(policy, t64([-20.0, -20.0]), t64([1.0, 0.25]), torch.tensor([10, 10])).backward()
    assert policy.grad[0] < 0 < policy.grad[1]
    # dL/dlogpi_i = -2 beta (Rq - beta log Z - beta r) / N = -2 * 0.1 * (1 - 0.769736950604558) / 2
    assert policy.grad[0].item() == pytest.approx(-0.1 * (1.0 - 0.769736950604558), rel=1e-12)


def test_qrpo_loss_rejects_mismatched_lengths():
    with pytest.raises(ValueError, match="one length"):
        qrpo_loss(t64([1.0, 2.0]), t64([1.0]), t64([1.0, 1.0]), torch.tensor([3, 3]))


# --------------------------------------------------------------------------------------------
# Sequence log-probabilities
# --------------------------------------------------------------------------------------------


@torch.no_grad()
def randomized_debug_model(seed: int):
    """The debug flavor with weights at a scale where log-probabilities differ clearly between
    tokens (the recipe init gives near-uniform predictions)."""
    torch.manual_seed(seed)
    model = flavor("debug").build()
    gen = torch.Generator().manual_seed(seed)
    for p in model.parameters():
        noise = torch.randn(p.shape, generator=gen)
        p.copy_(0.3 * noise if p.dim() >= 2 else 1.0 + 0.2 * noise)
    return model.eval()


def rows_and_masks():
    """Three rows of different lengths (prompt, completion), right-padded with a junk token."""
    gen = torch.Generator().manual_seed(3)
    spec = [(3, 5), (6, 2), (1, 9)]
    width = max(p + c for p, c in spec) + 2
    ids = torch.full((3, width), 7)
    mask = torch.zeros(3, width, dtype=torch.long)
    for row, (p, c) in enumerate(spec):
        ids[row, : p + c] = torch.randint(0, 256, (p + c,), generator=gen)
        mask[row, p : p + c] = 1
    return ids, mask, spec


def loop_logprobs(logits_of, ids: torch.Tensor, spec) -> list[float]:
    """Independent: each completion token scored from a forward pass over its prefix alone."""
    totals = []
    for row, (p, c) in enumerate(spec):
        total = 0.0
        for t in range(p, p + c):
            logits = logits_of(ids[row : row + 1, :t])[0, -1]
            total += torch.log_softmax(logits.double(), -1)[ids[row, t]].item()
        totals.append(total)
    return totals


def test_sequence_logprobs_of_our_model_match_a_token_by_token_loop():
    model = randomized_debug_model(0)
    ids, mask, spec = rows_and_masks()
    with torch.no_grad():
        got = sequence_logprobs(model, ids, mask)
        expected = loop_logprobs(model, ids, spec)
        with_positions = sequence_logprobs(
            model, ids, mask, torch.arange(ids.shape[1]).expand_as(ids)
        )
    assert got.dtype == torch.float32
    assert got.tolist() == pytest.approx(expected, rel=1e-5)
    assert with_positions.tolist() == pytest.approx(expected, rel=1e-5)
    # Not the sum over all tokens, nor over the prompt: only the completion counts.
    assert min(expected) < -5


def test_sequence_logprobs_of_a_transformers_model_match_our_model():
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from transformers import ApertusForCausalLM

    from apertus.model.state_dict_adapter import hf_config, hf_state_dict

    model = randomized_debug_model(1)
    config = hf_config(model.config)
    config._attn_implementation = "eager"
    hf_model = ApertusForCausalLM(config).eval()
    hf_model.load_state_dict(hf_state_dict(model.state_dict()), strict=True)
    ids, mask, spec = rows_and_masks()
    with torch.no_grad():
        got = sequence_logprobs(hf_model, ids, mask)
        expected = loop_logprobs(lambda x: hf_model(input_ids=x).logits, ids, spec)
        ours = sequence_logprobs(model, ids, mask)
    assert got.tolist() == pytest.approx(expected, rel=1e-5)
    assert got.tolist() == pytest.approx(ours.tolist(), rel=1e-4)


@pytest.mark.parametrize("attention", ["eager", "sdpa"])
def test_packed_rows_of_a_transformers_model_score_each_document_alone(attention):
    """Two (prompt, completion) pairs packed in one row, positions restarting at the second:
    each scores as it does alone, as in our model (issue 26: without use_cache=False,
    transformers let the second attend to the first; logits off by several nats)."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from transformers import ApertusForCausalLM

    from apertus.model.state_dict_adapter import hf_config, hf_state_dict

    model = randomized_debug_model(4)
    config = hf_config(model.config)
    config._attn_implementation = attention
    hf_model = ApertusForCausalLM(config).eval()
    hf_model.load_state_dict(hf_state_dict(model.state_dict()), strict=True)
    ids, mask, spec = rows_and_masks()
    (p0, c0), (p1, c1) = spec[0], spec[1]
    first, second = ids[0, : p0 + c0], ids[1, : p1 + c1]
    packed = torch.cat([first, second])[None]
    positions = torch.cat([torch.arange(p0 + c0), torch.arange(p1 + c1)])[None]
    only_second = torch.zeros_like(packed)
    only_second[0, p0 + c0 + p1 : p0 + c0 + p1 + c1] = 1
    with torch.no_grad():
        got = sequence_logprobs(hf_model, packed, only_second, positions)
        alone = sequence_logprobs(hf_model, ids[1:2], mask[1:2])
        ours = sequence_logprobs(model, packed, only_second, positions)
    assert got.item() == pytest.approx(alone.item(), rel=1e-5)
    assert got.item() == pytest.approx(ours.item(), rel=1e-4)


def test_sequence_logprobs_carry_gradients_and_reject_a_masked_first_token():
    model = randomized_debug_model(2)
    ids, mask, _ = rows_and_masks()
    sequence_logprobs(model, ids, mask).sum().backward()
    assert model.lm_head.weight.grad is not None and model.lm_head.weight.grad.abs().sum() > 0
    mask[1, 0] = 1
    with pytest.raises(ValueError, match="first token"):
        sequence_logprobs(model, ids, mask)
