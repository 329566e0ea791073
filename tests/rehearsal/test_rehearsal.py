"""The 8B preset rehearsed end to end (issue 27): config/presets/apertus-8b.yaml with its
overlay config/rehearsal/apertus-8b.yaml (sizes and locations only: tests/rehearsal/
test_overlay.py), on the local stand-ins `python -m apertus.rehearsal rehearsal-inputs` writes
in the preset's formats, through the two-node local SLURM cluster (`cluster.sh start 2`):
pretraining, SFT and QRPO train one rank on each node. The release it makes holds both models,
the five phases and four long-context stages, the classifier heads' accuracy, QRPO's reward
report and the preset's benchmarks by name, and `apertus audit` finds it whole."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from apertus.core.config import load_config
from apertus.core.manifest import find_step_manifests
from tests.conftest import assert_slurm_jobs_but_local_rules, run_tool
from tests.rehearsal.background import OVERLAY, PRESET

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

NODES = ["apertus-n1", "apertus-n2"]


@pytest.fixture(scope="session")
def rehearsal(rehearsal_run) -> Path:
    """The rehearsal's run directory, after the whole pipeline ran on the two-node cluster
    (started at the session's start: tests/rehearsal/background.py)."""
    return rehearsal_run.wait()


@pytest.fixture(scope="session")
def merged() -> dict:
    return load_config([PRESET, OVERLAY])


def _manifest(run: Path, rel: str) -> dict:
    return json.loads((run / rel).read_text())


def test_every_step_but_the_local_rules_ran_as_a_slurm_job(rehearsal):
    jobs = {
        str(path.relative_to(rehearsal)): json.loads(path.read_text())["slurm_job_id"]
        for path in find_step_manifests(rehearsal)
    }
    assert len(jobs) > 100
    assert_slurm_jobs_but_local_rules(jobs)


def test_training_sft_and_qrpo_ran_one_rank_on_each_of_the_two_nodes(rehearsal, merged):
    stages = [p["name"] for p in merged["tokenize"]["phases"] if p["name"] != "longctx"]
    stages += [s["name"] for s in merged["pretrain"]["long_context"]]
    assert len(stages) == 9  # the preset's five phases and four long-context stages
    for stage in stages:
        step = _manifest(rehearsal, f"pretrain/{stage}.manifest.json")
        assert step["summary"]["rank_hosts"] == NODES, stage
    for stage in ("sft", "qrpo"):
        step = _manifest(rehearsal, f"posttrain/{stage}.manifest.json")
        assert step["summary"]["rank_hosts"] == NODES, stage


def test_the_release_holds_what_the_preset_makes(rehearsal, merged):
    release = rehearsal / "release"
    for model in ("base", "aligned"):
        assert (release / model / "model.safetensors").is_file(), model
        assert (release / model / "tokenizer.json").is_file(), model
    card = (release / "README.md").read_text()
    training = card.split("## Training", 1)[1].split("\n## ", 1)[0]
    for phase in merged["tokenize"]["phases"]:
        if phase["name"] != "longctx":
            assert f"| {phase['name']} |" in training, phase["name"]
    for stage in merged["pretrain"]["long_context"]:
        assert f"| {stage['name']} |" in training, stage["name"]
    # The toxicity heads were trained in the pipeline on the ToxicCommons stand-in.
    heads = _manifest(rehearsal, "data/classifiers/manifest.json")["summary"]["toxicity"]
    assert heads, "no toxicity head trained"
    data = card.split("## Data compliance", 1)[1].split("\n## ", 1)[0]
    assert "accuracy" in data and "| toxicity | deu_Latn |" in data
    reward = json.loads((release / "evaluation" / "reward_report.json").read_text())
    assert reward
    # The preset's benchmarks by their names, base and instruct.
    scores = (release / "evaluation" / "scores.csv").read_text().splitlines()[0]
    tasks = [t["task"] for t in merged["evaluate"]["suite"]["tasks"]]
    tasks += [t["task"] for t in merged["evaluate"]["instruct"]["tasks"]]
    missing = [task for task in tasks if f"{task}/" not in scores and f",{task}" not in scores]
    assert not missing, missing


def test_apertus_audit_finds_the_release_and_the_run_whole(rehearsal):
    for where in (rehearsal / "release", rehearsal):
        proc = run_tool("apertus", "audit", where, timeout=900)
        assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
