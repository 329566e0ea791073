"""The pretraining plan (apertus.train.plan): which stage follows which, how it continues and on
how many nodes; the Snakefile's DAG and the stage code both read it."""

import dataclasses

import pytest

from apertus.core import ApertusError
from apertus.core.config import load_config
from apertus.train.config import PretrainConfig
from apertus.train.plan import PlannedStage, pretrain_stages


def pretrain(**changes) -> PretrainConfig:
    return PretrainConfig.from_dict({**load_config()["pretrain"], **changes})


def test_phases_continue_each_other_and_long_context_stages_take_the_weights():
    ctx = load_config()["pretrain"]["long_context"][0]
    cfg = pretrain(
        phases=["phase1", "phase2", "phase3"],
        nnodes=4,
        long_context=[{**ctx, "name": "ctx8k"}, {**ctx, "name": "ctx64k", "nnodes": 8}],
        goldfish_control=None,
    )
    assert pretrain_stages(cfg) == [
        PlannedStage("phase1", "phase", None, "fresh", 4),
        PlannedStage("phase2", "phase", "phase1", "continue", 4),
        PlannedStage("phase3", "phase", "phase2", "continue", 4),
        PlannedStage("ctx8k", "long_context", "phase3", "weights", 4),
        PlannedStage("ctx64k", "long_context", "ctx8k", "weights", 8),
    ]


def test_the_default_plan_is_what_the_workflow_schedules():
    raw = load_config()["pretrain"]
    stages = pretrain_stages(PretrainConfig.from_dict(raw))
    line = [s for s in stages if s.kind != "control"]
    assert [s.name for s in line] == raw["phases"] + [s["name"] for s in raw["long_context"]]
    assert [s.previous for s in line] == [None] + [s.name for s in line[:-1]]
    control = raw["goldfish_control"]
    assert [s.name for s in stages if s.kind == "control"] == [f"{control}-no-goldfish"]


def test_the_goldfish_control_repeats_its_phase_and_nothing_follows_it():
    ctx = load_config()["pretrain"]["long_context"][0]
    cfg = pretrain(phases=["phase1", "phase2"], long_context=[ctx], goldfish_control="phase2")
    assert pretrain_stages(cfg) == [
        PlannedStage("phase1", "phase", None, "fresh", 1),
        PlannedStage("phase2", "phase", "phase1", "continue", 1),
        PlannedStage("phase2-no-goldfish", "control", "phase1", "continue", 1),
        PlannedStage(ctx["name"], "long_context", "phase2", "weights", 1),
    ]
    first = pretrain_stages(pretrain(phases=["phase1"], long_context=[], goldfish_control="phase1"))
    assert first[1] == PlannedStage("phase1-no-goldfish", "control", None, "fresh", 1)
    with pytest.raises(ApertusError, match=r"'phase9' is not one of pretrain\.phases"):
        pretrain_stages(pretrain(goldfish_control="phase9"))
    off = {"enabled": False, "k": 50, "h": 50}
    with pytest.raises(ApertusError, match="Goldfish is off"):
        pretrain_stages(pretrain(goldfish=off))


def test_the_control_run_is_its_phase_without_goldfish(tmp_path, monkeypatch):
    """Same start, data, steps and schedule as its phase; only Goldfish differs."""
    import apertus.train.stage as stage

    monkeypatch.setattr(stage, "phase_steps", lambda *args, **kwargs: 10)
    monkeypatch.setattr(stage, "vocabulary_cover", lambda *args: {})
    cfg = pretrain(goldfish_control="phase1", long_context=[])
    phase = stage.run_spec(cfg, "phase1", tmp_path, None)
    control = stage.run_spec(cfg, "phase1-no-goldfish", tmp_path, None)
    assert phase.goldfish.enabled and not control.goldfish.enabled
    assert dataclasses.replace(control, goldfish=phase.goldfish) == phase


def test_a_stage_name_used_twice_is_refused():
    ctx = load_config()["pretrain"]["long_context"][0]
    with pytest.raises(ApertusError, match=r"\['phase1'\] appear more than once"):
        pretrain_stages(
            pretrain(
                phases=["phase1"], long_context=[{**ctx, "name": "phase1"}], goldfish_control=None
            )
        )
