"""How the pretraining stage turns the config into torchtitan runs: steps per phase, one WSD
schedule over the phases, long-context stages from the previous weights, the unigram entropy."""

import math

import numpy as np
import pytest

from apertus.core import ApertusError
from apertus.core.config import load_config
from apertus.tokenize.phases import PhaseDataset
from apertus.train.stage import phase_steps, run_spec, unigram_entropy
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
    assert phase_steps(phases / "phase1", 64, 8) == tokens // 65 // 8
    with pytest.raises(ApertusError, match="fewer than one batch"):
        phase_steps(phases / "phase1", 64, 10**9)


def test_phases_share_one_schedule_and_long_context_starts_fresh(phases):
    cfg = load_config()["pretrain"]
    steps = [phase_steps(phases / p, cfg["seq_len"], cfg["global_batch"]) for p in cfg["phases"]]
    first = run_spec(cfg, "phase1", phases, None)
    second = run_spec(cfg, "phase2", phases, {"final_checkpoint": "/ckpt/step-1"})
    assert first["steps"] == steps[0] and second["steps"] == sum(steps)
    for spec in (first, second):
        assert spec["lr"]["total_steps"] == sum(steps)
        assert spec["lr"]["decay_steps"] == math.floor(cfg["lr"]["decay_fraction"] * sum(steps))
    assert first["checkpoint"]["initial"] is None
    assert second["checkpoint"] == {
        "interval": cfg["checkpoint_interval"],
        "initial": "/ckpt/step-1",
        "initial_mode": "continue",
    }
    stage = cfg["long_context"][0]
    long = run_spec(cfg, stage["name"], phases, {"final_checkpoint": "/ckpt/step-2"})
    assert long["checkpoint"]["initial_mode"] == "weights"
    assert long["lr"] == {"kind": "constant", "peak": stage["lr"], "warmup_steps": 5}
    assert long["model_overrides"] == {"rope_theta": stage["rope_theta"], "max_seq_len": 256}
    assert long["global_batch"] % long["micro_batch"] == 0
    with pytest.raises(ApertusError, match="needs the previous stage"):
        run_spec(cfg, stage["name"], phases, None)
    with pytest.raises(ApertusError, match="no pretraining phase or long-context stage"):
        run_spec(cfg, "nope", phases, None)
