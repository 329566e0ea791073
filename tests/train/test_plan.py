"""The pretraining plan (apertus.train.plan): which stage follows which, how it continues and on
how many nodes; the Snakefile's DAG and the stage code both read it."""

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
    assert [s.name for s in stages] == raw["phases"] + [s["name"] for s in raw["long_context"]]
    assert [s.previous for s in stages] == [None] + [s.name for s in stages[:-1]]


def test_a_stage_name_used_twice_is_refused():
    ctx = load_config()["pretrain"]["long_context"][0]
    with pytest.raises(ApertusError, match=r"\['phase1'\] appear more than once"):
        pretrain_stages(pretrain(phases=["phase1"], long_context=[{**ctx, "name": "phase1"}]))
