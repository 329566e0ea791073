"""The plan (`apertus.sizing.memory.training_memory`) against one training step of the real
model traced on fake tensors at the presets' real widths and world sizes
(`apertus.sizing.fake_cluster`): every parameter's and optimizer state's shard as planned, the
weights and states to the byte, and the rank's traced peak within 15 % of the plan's
`Memory.counted`.

Cases (full activation checkpointing, bf16, micro-batch 1, rank 0): the 8B pretraining layout
(256 ranks, seq 4096), the 70B one (2048 ranks, seq 4096), and 8B's ctx64k stage (128 ranks,
seq 65536, context parallelism 4: its key/value all-gather runs on the fake process group), and
8B with tensor parallelism 4.
Fewer layers than the flavors' at full width (the presets' layouts 8, the CP and TP variants 4;
the plan is asked for the same reduced shape): ~25 s of CPU in all. Every case at full depth
(`python -m apertus.sizing.fake_cluster`, ~110 s of CPU) is in bench/RESULTS.md: at the CI's
contention (the rehearsal at a higher priority) full depth took 300 s, over the test budget.
The traces run one after another in one fresh interpreter (`traces_in_subprocess`), which keeps
no process group in the tests'.

Where the peaks fall: 8B, with and without CP, at the start of the loss's backward (the logits'
12 bytes per logit); 70B in a block's backward; under TP in the embedding's backward
(`apertus.sizing.fake_cluster`'s module doc).
"""

from __future__ import annotations

import functools

import pytest

from apertus.sizing.fake_cluster import (
    comparison,
    plan_for,
    sharding_mismatches,
    traces_in_subprocess,
)

pytestmark = pytest.mark.slow  # one subprocess for the four traces, ~25 s

CASES = {
    # The presets' pretraining layouts at their real widths and world sizes, eight layers.
    "8b-256-ranks": ("8b", {"world_size": 256, "seq_len": 4096, "n_layers": 8}),
    "70b-2048-ranks": ("70b", {"world_size": 2048, "seq_len": 4096, "n_layers": 8}),
    # Their variants, four layers.
    "8b-ctx64k-cp4": (
        "8b",
        {"world_size": 128, "seq_len": 65536, "context_parallel": 4, "n_layers": 4},
    ),
    # Tensor parallelism: the peak is the embedding's backward (its gradient is the whole
    # vocabulary on every TP rank).
    "8b-tp4": ("8b", {"world_size": 256, "seq_len": 4096, "tensor_parallel": 4, "n_layers": 4}),
}


@functools.cache
def _traces() -> dict:
    # Cached for the session, not a module fixture: the session's scheduler (tests/conftest.py)
    # may run other modules' tests between these, which would tear a module fixture down.
    return traces_in_subprocess(CASES)


@pytest.fixture
def traces():
    """Every case traced once, all in one interpreter (torch imported once)."""
    return _traces().__getitem__


@pytest.mark.parametrize("case", CASES)
def test_every_parameter_and_optimizer_state_is_sharded_as_planned(traces, case):
    trace = traces(case)
    assert trace.param_numel, "no parameters traced"
    assert set(trace.optimizer_numel) == set(trace.param_numel)
    assert all(set(states) == {"m1", "m2", "v"} for states in trace.optimizer_numel.values())
    assert sharding_mismatches(trace) == []


@pytest.mark.parametrize("case", CASES)
def test_master_weights_and_optimizer_states_are_the_planned_bytes(traces, case):
    rows = {part: (traced, planned) for part, traced, planned in comparison(traces(case))}
    for part in ("master weights", "optimizer states"):
        traced, planned = rows[part]
        assert traced == pytest.approx(planned, rel=1e-3), part


@pytest.mark.parametrize("case", CASES)
def test_traced_peak_is_the_planned_one_within_15_percent(traces, case):
    trace = traces(case)
    plan = plan_for(trace)
    assert trace.peak_bytes == pytest.approx(plan.counted, rel=0.15), (
        f"traced {trace.peak_bytes / 2**30:.2f} GiB in the {trace.where[trace.moment]}, "
        f"planned {plan.counted / 2**30:.2f} GiB at the {plan.moment}"
    )
