"""How the pretraining stage turns the config into torchtitan runs: steps per phase, one WSD
schedule over the phases, long-context stages from the previous weights, the unigram entropy."""

import math

import numpy as np
import pytest

from apertus.core import ApertusError
from apertus.core.config import load_config
from apertus.tokenize.phases import PhaseDataset
from apertus.train.config import PretrainConfig
from apertus.train.run_spec import BatchRampSpec, CheckpointSpec, LRSpec
from apertus.train.schedule import BatchRamp
from apertus.train.stage import cooldown_steps, phase_steps, run_spec, unigram_entropy
from tests.train.test_torchtitan import build_phase


@pytest.fixture(scope="module")
def phases(tmp_path_factory):
    root = tmp_path_factory.mktemp("phases")
    for name, docs in (("phase1", 300), ("phase2", 200)):
        phase = build_phase(root / name, n_docs=docs)
        (root / "phases").mkdir(exist_ok=True)
        phase.rename(root / "phases" / name)
    return root / "phases"


def test_unigram_entropy_is_the_entropy_of_the_planned_tokens(phases):
    docs = list(PhaseDataset(phases / "phase1").iter_documents())
    counts = np.bincount(np.concatenate(docs))
    p = counts[counts > 0] / counts.sum()
    assert unigram_entropy(phases / "phase1") == pytest.approx(-(p * np.log(p)).sum(), rel=1e-12)


def test_steps_are_whole_batches_of_windows(phases):
    tokens = PhaseDataset(phases / "phase1").total_tokens
    assert phase_steps(phases / "phase1", 64, BatchRamp.constant(8)) == tokens // 65 // 8
    with pytest.raises(ApertusError, match="fewer than one batch"):
        phase_steps(phases / "phase1", 64, BatchRamp.constant(10**9))


def test_phases_share_one_schedule_and_long_context_starts_fresh(phases):
    cfg = load_config()["pretrain"]
    # The default ramps the batch 8 -> 16 at 400k tokens; here at 10k, inside phase 1.
    cfg["batch_ramp"] = {"global_batch": 16, "at_tokens": 10_000}
    assert (cfg["seq_len"], cfg["global_batch"]) == (128, 8)
    steps, tokens_seen, switch = [], 0, 0
    for name in cfg["phases"]:  # step by step: the batch is 16 from the first step at 10k
        windows, count = PhaseDataset(phases / name).total_tokens // (cfg["seq_len"] + 1), 0
        while windows >= (batch := 8 if tokens_seen < 10_000 else 16):
            switch += batch == 8
            windows, count, tokens_seen = windows - batch, count + 1, tokens_seen + batch * 128
        steps.append(count)
    assert tokens_seen > 10_000  # the switch happened
    typed = PretrainConfig.from_dict(cfg)
    first = run_spec(typed, "phase1", phases, None)
    second = run_spec(typed, "phase2", phases, {"final_checkpoint": "/ckpt/step-1"})
    assert first.steps == steps[0] and second.steps == sum(steps)
    assert first.batch_ramp == second.batch_ramp == BatchRampSpec(**cfg["batch_ramp"])
    for spec in (first, second):
        assert spec.lr.total_steps == sum(steps)
        # The cooldown covers the last 20% of the sequences: steps of 16 at the end.
        sequences = 8 * switch + 16 * (sum(steps) - switch)
        assert spec.lr.decay_steps == math.floor(cfg["lr"]["decay_fraction"] * sequences / 16)
    assert first.checkpoint.initial is None
    assert second.checkpoint == CheckpointSpec(
        interval=cfg["checkpoint_interval"],
        initial="/ckpt/step-1",
        initial_mode="continue",
    )
    stage = cfg["long_context"][0]
    long = run_spec(typed, stage["name"], phases, {"final_checkpoint": "/ckpt/step-2"})
    assert long.checkpoint.initial_mode == "weights"
    assert long.lr == LRSpec(kind="constant", peak=stage["lr"], warmup_steps=5)
    assert long.model_overrides == {"rope_theta": stage["rope_theta"], "max_seq_len": 256}
    assert long.global_batch % long.micro_batch == 0
    with pytest.raises(ApertusError, match="needs the previous stage"):
        run_spec(typed, stage["name"], phases, None)
    with pytest.raises(ApertusError, match="no pretraining phase or long-context stage"):
        run_spec(typed, "nope", phases, None)


def test_cooldown_covers_the_last_share_of_tokens():
    # A constant batch: the share of the steps, as plain WSD has it.
    assert cooldown_steps(BatchRamp.constant(8), 1000, 0.11) == 110
    # 8B: 1024 -> 2048 sequences at 7.038T, 15T in all; the cooldown is the last 1.65T.
    ramp = BatchRamp.at_tokens(seq_len=4096, start_batch=1024, batch=2048, tokens=7_038 * 10**9)
    total = ramp.switch_step + ramp.steps_within(
        15 * 10**12 // 4096 - ramp.sequences(0, ramp.switch_step), ramp.switch_step
    )
    assert cooldown_steps(ramp, total, 1.65 / 15) == pytest.approx(1.65e12 / (2048 * 4096), abs=1)
