"""WSD learning-rate schedule, long-context warmup, batch ramp (RECIPE.md §4, §6)."""

from __future__ import annotations

import itertools
import math

import pytest

from apertus.train.schedule import (
    BatchRamp,
    batch_size_at,
    constant_lr_with_warmup,
    gradient_accumulation_steps,
    steps_for_tokens,
    wsd_lr,
)

# A small schedule: 10 warmup steps, 100 steps in all, the last 40 cool down.
SMALL = {"peak": 1.0e-3, "warmup_steps": 10, "total_steps": 100, "decay_steps": 40}


def lr(step, **overrides):
    return wsd_lr(step, **{**SMALL, **overrides})


def test_warmup_is_linear_from_zero():
    assert lr(0) == 0.0
    assert lr(1) == pytest.approx(1.0e-4)
    assert lr(5) == pytest.approx(5.0e-4)
    assert lr(9) == pytest.approx(9.0e-4)
    assert lr(10) == 1.0e-3


def test_warmup_from_a_fraction_of_peak():
    # The report's variant: from 0.1 x peak. Step 5: 1e-4 + (1e-3 - 1e-4) * 5/10 = 5.5e-4.
    assert lr(0, warmup_start=0.1) == pytest.approx(1.0e-4)
    assert lr(5, warmup_start=0.1) == pytest.approx(5.5e-4)
    assert lr(10, warmup_start=0.1) == 1.0e-3


def test_stable_phase_is_peak():
    assert all(lr(step) == 1.0e-3 for step in range(10, 60))


def test_cooldown_follows_one_minus_sqrt():
    # Cooldown steps 60..99 are s = 1..40; min = 1e-4, peak - min = 9e-4.
    assert lr(60) == pytest.approx(1e-4 + 9e-4 * (1 - math.sqrt(1 / 40)))
    # s = 10: sqrt(1/4) = 0.5 -> 1e-4 + 4.5e-4 = 5.5e-4.
    assert lr(69) == pytest.approx(5.5e-4)
    # s = 30: sqrt(3/4) = 0.8660254 -> 1e-4 + 9e-4 * 0.1339746 = 2.2057714e-4.
    assert lr(89) == pytest.approx(2.2057714e-4)
    assert lr(99) == pytest.approx(1.0e-4)


def test_last_step_is_min_for_any_ratio():
    assert lr(99, min_lr_ratio=0.0) == 0.0
    assert lr(99, min_lr_ratio=0.25) == pytest.approx(2.5e-4)


def test_schedule_rises_then_never_increases():
    values = [lr(step) for step in range(100)]
    assert values[:11] == sorted(values[:11])
    assert all(a >= b for a, b in itertools.pairwise(values[10:]))
    assert min(values[10:]) == pytest.approx(1.0e-4)


def test_recipe_8b_numbers():
    # 8B: peak 1.1e-4, warmup 4000 steps of 1024 x 4096 tokens (16.78B tokens).
    peak = 1.1e-4
    common = {"peak": peak, "warmup_steps": 4000, "total_steps": 10_000, "decay_steps": 2000}
    assert wsd_lr(2000, **common) == pytest.approx(peak / 2)
    assert wsd_lr(5000, **common) == peak
    assert wsd_lr(9999, **common) == pytest.approx(1.1e-5)


def test_no_warmup_and_no_cooldown():
    assert wsd_lr(0, peak=2.0, warmup_steps=0, total_steps=5, decay_steps=0) == 2.0
    assert wsd_lr(4, peak=2.0, warmup_steps=0, total_steps=5, decay_steps=0) == 2.0


@pytest.mark.parametrize(
    ("step", "overrides", "message"),
    [
        (100, {}, r"step 100 is outside the schedule \[0, 100\)"),
        (-1, {}, "outside the schedule"),
        (0, {"warmup_steps": 70}, "warmup_steps=70, decay_steps=40, total_steps=100"),
        (0, {"decay_steps": -1}, "decay_steps=-1"),
        (0, {"min_lr_ratio": 1.5}, "min_lr_ratio=1.5"),
    ],
)
def test_bad_schedules_are_rejected(step, overrides, message):
    with pytest.raises(ValueError, match=message):
        lr(step, **overrides)


def test_constant_lr_with_warmup():
    # 8B long-context stages: 1.1e-5 after 150 warmup steps.
    assert constant_lr_with_warmup(0, lr=1.1e-5, warmup_steps=150) == 0.0
    assert constant_lr_with_warmup(75, lr=1.1e-5, warmup_steps=150) == pytest.approx(5.5e-6)
    assert constant_lr_with_warmup(150, lr=1.1e-5, warmup_steps=150) == 1.1e-5
    assert constant_lr_with_warmup(9349, lr=1.1e-5, warmup_steps=150) == 1.1e-5
    assert constant_lr_with_warmup(0, lr=1.0e-6, warmup_steps=0) == 1.0e-6
    with pytest.raises(ValueError, match="step >= 0"):
        constant_lr_with_warmup(-1, lr=1e-6, warmup_steps=75)


def test_batch_doubles_at_the_token_threshold():
    ramp = {"start_batch": 1024, "doubled_batch": 2048, "double_at_tokens": 7_038_000_000_000}
    assert batch_size_at(0, **ramp) == 1024
    assert batch_size_at(7_037_999_999_999, **ramp) == 1024
    assert batch_size_at(7_038_000_000_000, **ramp) == 2048
    assert batch_size_at(15_000_000_000_000, **ramp) == 2048
    with pytest.raises(ValueError, match="tokens_seen"):
        batch_size_at(-1, **ramp)


def test_steps_for_tokens_matches_a_step_by_step_simulation():
    seq_len = 8
    ramp = {"start_batch": 4, "doubled_batch": 8, "double_at_tokens": 100}
    # Simulate training: each step trains on batch_size_at(tokens seen so far) sequences.
    tokens_seen, steps, tokens_after = 0, 0, [0]
    while tokens_seen < 400:
        tokens_seen += batch_size_at(tokens_seen, **ramp) * seq_len
        steps += 1
        tokens_after.append(tokens_seen)
    for target in range(0, 401):
        expected = next(i for i, seen in enumerate(tokens_after) if seen >= target)
        assert steps_for_tokens(target, seq_len=seq_len, **ramp) == expected, target
    # 100 tokens need 4 steps of 32 (128 tokens); then steps of 64.
    assert tokens_after[:6] == [0, 32, 64, 96, 128, 192]


def test_steps_for_recipe_warmup_tokens():
    # 16.78B warmup tokens are 4000 steps of 1024 x 4096 tokens (4000 * 4194304 = 16,777,216,000).
    ramp = {"start_batch": 1024, "doubled_batch": 2048, "double_at_tokens": 7_038_000_000_000}
    assert steps_for_tokens(16_777_216_000, seq_len=4096, **ramp) == 4000
    assert steps_for_tokens(16_777_216_001, seq_len=4096, **ramp) == 4001


def test_gradient_accumulation_steps():
    assert gradient_accumulation_steps(1024, micro_batch=2, data_parallel=64) == 8
    assert gradient_accumulation_steps(2048, micro_batch=2, data_parallel=64) == 16
    assert gradient_accumulation_steps(8, micro_batch=8, data_parallel=1) == 1
    with pytest.raises(ValueError, match=r"global batch 1000 .* micro_batch 3 x data_parallel 4"):
        gradient_accumulation_steps(1000, micro_batch=3, data_parallel=4)
    with pytest.raises(ValueError, match="must be positive"):
        gradient_accumulation_steps(1024, micro_batch=0, data_parallel=4)


@pytest.mark.parametrize("switch", [0, 1, 7, 50])
def test_batch_ramp_counts_match_a_step_by_step_sum(switch):
    ramp = BatchRamp(start_batch=3, batch=8, switch_step=switch)
    per_step = [ramp.batch_at(i) for i in range(120)]
    assert per_step == [3 if i < switch else 8 for i in range(120)]
    for first in (0, 1, 6, 7, 8, 49, 60):
        for last in range(first, 100, 7):
            assert ramp.sequences(first, last) == sum(per_step[first:last])
        for sequences in range(0, 400, 13):
            # the most updates from `first` on whose sequences fit
            fit = max(n for n in range(0, 110) if sum(per_step[first : first + n]) <= sequences)
            assert ramp.steps_within(sequences, first) == fit, (first, sequences)


def test_batch_ramp_switches_where_batch_size_at_does():
    ramp = BatchRamp.at_tokens(seq_len=4096, start_batch=1024, batch=2048, tokens=7_038 * 10**9)
    options = {"start_batch": 1024, "doubled_batch": 2048, "double_at_tokens": 7_038 * 10**9}
    step_tokens = 1024 * 4096
    for step in (0, ramp.switch_step - 1, ramp.switch_step, ramp.switch_step + 1):
        assert ramp.batch_at(step) == batch_size_at(step * step_tokens, **options)
    assert ramp.switch_step == -(-7_038 * 10**9 // step_tokens) == 1_677_990
    assert BatchRamp.constant(8).batch_at(10**9) == 8
    with pytest.raises(ValueError, match="positive batches"):
        BatchRamp(0, 8, 1)
