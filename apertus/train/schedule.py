"""Learning-rate schedules and the batch-size ramp (RECIPE.md §4, §6, §7).

Steps are 0-based indices of optimizer updates: `lr(step)` is the learning rate of the update
with that index, for `0 <= step < total_steps`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = [
    "BatchRamp",
    "batch_size_at",
    "constant_lr_with_warmup",
    "gradient_accumulation_steps",
    "linear_lr",
    "steps_for_tokens",
    "warmup_steps_for_ratio",
    "wsd_lr",
]


def _warmup(step: int, *, peak: float, warmup_steps: int, warmup_start: float) -> float:
    start = warmup_start * peak
    return start + (peak - start) * step / warmup_steps


def wsd_lr(
    step: int,
    *,
    peak: float,
    warmup_steps: int,
    total_steps: int,
    decay_steps: int,
    min_lr_ratio: float = 0.1,
    warmup_start: float = 0.0,
) -> float:
    """Warmup-Stable-Decay with a 1-sqrt cooldown (RECIPE.md §4).

    - warmup, `step < warmup_steps`: linear from `warmup_start * peak` (at step 0) towards `peak`
      (reached at step `warmup_steps`); the scripts warm up from 0, the report from 0.1 x peak;
    - stable: `peak`;
    - cooldown, the last `decay_steps` steps: with `s = 1..decay_steps` counting them,
      `lr = min + (peak - min) * (1 - sqrt(s / decay_steps))`, `min = min_lr_ratio * peak`,
      so the last step (`total_steps - 1`) runs at `min`.
    """
    if not 0 <= warmup_steps <= total_steps - decay_steps or decay_steps < 0:
        raise ValueError(
            "need 0 <= warmup_steps and 0 <= decay_steps with warmup_steps + decay_steps <= "
            f"total_steps; got warmup_steps={warmup_steps}, decay_steps={decay_steps}, "
            f"total_steps={total_steps}"
        )
    if not 0 <= step < total_steps:
        raise ValueError(f"step {step} is outside the schedule [0, {total_steps})")
    if not (0.0 <= min_lr_ratio <= 1.0 and 0.0 <= warmup_start <= 1.0 and peak >= 0.0):
        raise ValueError(
            f"need peak >= 0 and min_lr_ratio, warmup_start in [0, 1]; got peak={peak}, "
            f"min_lr_ratio={min_lr_ratio}, warmup_start={warmup_start}"
        )
    if step < warmup_steps:
        return _warmup(step, peak=peak, warmup_steps=warmup_steps, warmup_start=warmup_start)
    decay_start = total_steps - decay_steps
    if step < decay_start:
        return peak
    min_lr = min_lr_ratio * peak
    s = step - decay_start + 1
    return min_lr + (peak - min_lr) * (1.0 - math.sqrt(s / decay_steps))


def constant_lr_with_warmup(step: int, *, lr: float, warmup_steps: int) -> float:
    """Linear warmup from 0 (at step 0) to `lr` (at `warmup_steps`), then constant: the
    long-context extension stages (RECIPE.md §6: 1.1e-5 after 150 steps for 8B)."""
    if step < 0 or warmup_steps < 0:
        raise ValueError(f"need step >= 0 and warmup_steps >= 0; got {step}, {warmup_steps}")
    if step < warmup_steps:
        return _warmup(step, peak=lr, warmup_steps=warmup_steps, warmup_start=0.0)
    return lr


def linear_lr(step: int, *, peak: float, warmup_steps: int, total_steps: int) -> float:
    """Linear warmup, then linear decay to 0: the SFT schedule (RECIPE.md §7, "linear decay,
    warmup ratio 0.03").

    - warmup, `step < warmup_steps`: ``peak * step / warmup_steps`` (0 at step 0);
    - decay: ``peak * (total_steps - step) / (total_steps - warmup_steps)``, falling linearly
      to 0 at `total_steps`, the end of the last update: the last update (``total_steps - 1``)
      runs at ``peak / (total_steps - warmup_steps)``.

    This is transformers' ``get_linear_schedule_with_warmup``, the ``lr_scheduler_type:
    linear`` of the Hugging Face trainer that the recipe's SFT settings (warmup ratio, linear
    decay) are written for; it is tested against it.
    """
    if not 0 <= warmup_steps <= total_steps or total_steps < 1:
        raise ValueError(
            f"need total_steps >= 1 and 0 <= warmup_steps <= total_steps; got "
            f"warmup_steps={warmup_steps}, total_steps={total_steps}"
        )
    if not 0 <= step < total_steps:
        raise ValueError(f"step {step} is outside the schedule [0, {total_steps})")
    if peak < 0.0:
        raise ValueError(f"need peak >= 0, got {peak}")
    if step < warmup_steps:
        return _warmup(step, peak=peak, warmup_steps=warmup_steps, warmup_start=0.0)
    return peak * (total_steps - step) / (total_steps - warmup_steps)


def warmup_steps_for_ratio(total_steps: int, ratio: float) -> int:
    """Warmup steps for a warmup given as a share of the run (RECIPE.md §7: 0.03), rounded up
    as the Hugging Face trainer does (``math.ceil(total_steps * ratio)``)."""
    if total_steps < 0 or not 0.0 <= ratio <= 1.0:
        raise ValueError(f"need total_steps >= 0 and ratio in [0, 1]; got {total_steps}, {ratio}")
    return math.ceil(total_steps * ratio)


def batch_size_at(
    tokens_seen: int, *, start_batch: int, doubled_batch: int, double_at_tokens: int
) -> int:
    """Global batch size in sequences once `tokens_seen` tokens were trained on (RECIPE.md §4:
    8B 1024 -> 2048 sequences at 7.038T tokens, 70B 2048 -> 4096 at 4.392T). The switch
    happens at the first step that starts at or after `double_at_tokens`; the LR is unchanged.
    """
    if tokens_seen < 0:
        raise ValueError(f"tokens_seen must be >= 0, got {tokens_seen}")
    return start_batch if tokens_seen < double_at_tokens else doubled_batch


@dataclass(frozen=True)
class BatchRamp:
    """Global batch (sequences) of every optimizer step under the RECIPE.md §4 ramp: the
    updates with index ``0 .. switch_step - 1`` train on `start_batch` sequences, the later
    ones on `batch`. `BatchRamp.at_tokens` places the switch where `batch_size_at` does."""

    start_batch: int
    batch: int
    switch_step: int

    def __post_init__(self) -> None:
        if min(self.start_batch, self.batch) <= 0 or self.switch_step < 0:
            raise ValueError(
                f"need positive batches and switch_step >= 0; got start_batch="
                f"{self.start_batch}, batch={self.batch}, switch_step={self.switch_step}"
            )

    @classmethod
    def constant(cls, batch: int) -> BatchRamp:
        return cls(batch, batch, 0)

    @classmethod
    def at_tokens(cls, *, seq_len: int, start_batch: int, batch: int, tokens: int) -> BatchRamp:
        """The switch at the first update that starts with at least `tokens` tokens seen,
        counting `seq_len` tokens per sequence."""
        if seq_len <= 0 or start_batch <= 0 or tokens < 0:
            raise ValueError(
                f"need seq_len > 0, start_batch > 0, tokens >= 0; got {seq_len}, "
                f"{start_batch}, {tokens}"
            )
        return cls(start_batch, batch, -(-tokens // (start_batch * seq_len)))

    def batch_at(self, step: int) -> int:
        """Sequences of the update with 0-based index `step`."""
        if step < 0:
            raise ValueError(f"step must be >= 0, got {step}")
        return self.start_batch if step < self.switch_step else self.batch

    def sequences(self, first: int, last: int) -> int:
        """Sequences the updates ``first .. last - 1`` train on together."""
        if not 0 <= first <= last:
            raise ValueError(f"need 0 <= first <= last; got {first}, {last}")
        small = max(0, min(last, self.switch_step) - first)
        return small * self.start_batch + (last - first - small) * self.batch

    def steps_within(self, sequences: int, first: int = 0) -> int:
        """How many updates from index `first` on fit into `sequences` sequences."""
        if sequences < 0 or first < 0:
            raise ValueError(f"need sequences >= 0 and first >= 0; got {sequences}, {first}")
        small = max(0, self.switch_step - first)
        if sequences <= small * self.start_batch:
            return sequences // self.start_batch
        return small + (sequences - small * self.start_batch) // self.batch


def steps_for_tokens(
    tokens: int,
    *,
    seq_len: int,
    start_batch: int,
    doubled_batch: int,
    double_at_tokens: int,
) -> int:
    """Number of optimizer steps needed to train on at least `tokens` tokens under the
    `batch_size_at` ramp, e.g. to turn the recipe's token budgets (16.78B warmup tokens,
    cooldown from 13.35T) into step counts for `wsd_lr`."""
    if tokens < 0 or min(seq_len, start_batch, doubled_batch) <= 0:
        raise ValueError(
            f"need tokens >= 0 and positive sizes; got tokens={tokens}, seq_len={seq_len}, "
            f"start_batch={start_batch}, doubled_batch={doubled_batch}"
        )
    ramp = BatchRamp.at_tokens(
        seq_len=seq_len, start_batch=start_batch, batch=doubled_batch, tokens=double_at_tokens
    )
    sequences = -(-tokens // seq_len)
    steps = ramp.steps_within(sequences)
    return steps if ramp.sequences(0, steps) >= sequences else steps + 1


def gradient_accumulation_steps(global_batch: int, *, micro_batch: int, data_parallel: int) -> int:
    """Micro-batches each data-parallel rank accumulates so that
    `micro_batch * data_parallel * steps == global_batch` (all in sequences)."""
    if min(global_batch, micro_batch, data_parallel) <= 0:
        raise ValueError(
            f"sizes must be positive: global_batch={global_batch}, micro_batch={micro_batch}, "
            f"data_parallel={data_parallel}"
        )
    per_step = micro_batch * data_parallel
    if global_batch % per_step:
        raise ValueError(
            f"global batch {global_batch} is not divisible by micro_batch {micro_batch} x "
            f"data_parallel {data_parallel} = {per_step}"
        )
    return global_batch // per_step
