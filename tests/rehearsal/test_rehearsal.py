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
from apertus.rehearsal.models import LM_EVAL_TAGS
from tests.conftest import assert_slurm_jobs_but_local_rules, run_tool
from tests.rehearsal.background import DATA_HOME, GROUPED_STEPS, OVERLAY, PRESET, digests

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
    assert_slurm_jobs_but_local_rules(jobs, grouped=GROUPED_STEPS)
    # The groups of profiles/slurm-rehearsal: one job makes the data, one tokenizes it, one
    # samples and scores QRPO's completions, one per checkpoint exports and evaluates it.
    shared = {job for step, job in jobs.items() if GROUPED_STEPS.search(step)}
    checkpoints = {step for step in jobs if step.startswith("export/")}
    assert len(shared) == 3 + len(checkpoints) == 3 + 11, sorted(shared)


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


def test_every_training_stage_ran_the_presets_numerics(rehearsal, merged):
    """bf16 parameters and compute over fp32 master weights and reductions, and torch.compile,
    in every pretraining stage (the long-context ones with CP), SFT and QRPO (issue 43); the
    compiled graphs are made at a stage's first step and never again, but for SFT's and QRPO's
    lengths, which vary and compile once more with dynamic shapes."""
    stages = [f"pretrain/{p}" for p in merged["pretrain"]["phases"]]
    stages += [f"pretrain/{s['name']}" for s in merged["pretrain"]["long_context"]]
    for stage in [*stages, "posttrain/sft", "posttrain/qrpo"]:
        numerics = _manifest(rehearsal, f"{stage}.manifest.json")["summary"]["numerics"]
        assert numerics["dtype"] == "bfloat16", stage
        assert numerics["master_weights"] == numerics["gradient_reduction"] == "float32"
        assert numerics["compile"] is True, stage
        # {step: count} where the count changed; a phase's steps go on from the previous one's.
        graphs = {int(step): count for step, count in numerics["compiled_graphs"].items()}
        assert graphs, stage
        if stage.startswith("pretrain/"):
            assert len(graphs) == 1, (stage, graphs)  # fixed shapes: no recompilation
        else:
            assert max(graphs.values()) <= 2 * graphs[min(graphs)], (stage, graphs)
    export = _manifest(rehearsal, "export/ctx64k.manifest.json")["summary"]
    assert export["dtype"] == "bfloat16" and export["max_abs_diff"] <= export["tolerance"]


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


def _metrics(results: dict, task: str) -> set[str]:
    return {
        key
        for key, value in results.get(task, {}).items()
        if "_stderr" not in key and isinstance(value, int | float) and not isinstance(value, bool)
    }


@pytest.mark.parametrize("model", ["sft", "qrpo"])
def test_every_instruct_task_scored_offline_on_the_stand_ins(
    rehearsal, rehearsal_run, merged, model
):
    """Each task of the preset's instruct suite gave its metrics, from the stand-ins and the data
    home alone: the run had no Hugging Face cache, no home of this machine's and no network
    (background.offline_env), and lm-eval and `evaluate` wrote nothing in the data home."""
    out = rehearsal / "evaluate" / "lm_eval_instruct" / model
    found: dict[str, dict] = {}
    for path in sorted((out / "lm_eval").glob("results-*.json")):
        found.update(json.loads(path.read_text())["results"])
    options = merged["evaluate"]["instruct"]
    for name in (entry["task"] for entry in options["tasks"]):
        for leaf in LM_EVAL_TAGS.get(name, (name,)):  # a tag has no row of its own
            assert _metrics(found, leaf), (leaf, found.get(leaf))
    assert {"pass@1,create_test"} <= _metrics(found, "humaneval_instruct")
    assert {"pass_at_1,extract_code"} <= _metrics(found, "mbpp_instruct")
    assert {"prompt_level_strict_acc,none"} <= _metrics(found, "ifeval")
    lengths = options["metadata"]["max_seq_lengths"]
    assert {f"{n},none" for n in lengths} <= _metrics(found, "ruler")
    script = (out / "command.sh").read_text()
    for variable, folder in (("HF_MODULES_CACHE", "modules"), ("NLTK_DATA", "nltk_data")):
        assert f"{variable}={DATA_HOME / folder}" in script
    assert "HF_EVALUATE_OFFLINE=1" in script and "HF_ALLOW_CODE_EVAL=1" in script
    assert rehearsal_run.data_home and digests(DATA_HOME) == rehearsal_run.data_home


def test_apertus_audit_finds_the_release_and_the_run_whole(rehearsal):
    for where in (rehearsal / "release", rehearsal):
        proc = run_tool("apertus", "audit", where, timeout=900)
        assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]


def test_the_shards_are_the_bos_only_hub_tokenizers_documents_framed_by_the_pipeline(rehearsal):
    """The preset's tokenizer is a Hub one whose post-processor adds only <s> (as Apertus',
    Llama's and Mistral's do), with the Apertus layout (the stand-in of
    apertus.rehearsal.models): every source's shards hold exactly its training documents as
    transformers tokenizes them, framed <s> ... </s> by the pipeline, and the tokenizer the
    run keeps is still BOS-only for inference."""
    from transformers import AutoTokenizer

    from tests.tokenize.test_tokenize_stage import stored_and_expected

    tokenizer = AutoTokenizer.from_pretrained(str(rehearsal / "tokenize" / "tokenizer"))
    assert 2 not in tokenizer("Allegra!")["input_ids"]
    # The corpus's sources (the shards also hold the planted probes and the funnel).
    corpus = rehearsal / "data" / "corpus"
    sources = sorted(p.name for p in corpus.iterdir() if p.is_dir() and not p.name.startswith("_"))
    assert len(sources) > 10
    for source in sources:
        stored, expected = stored_and_expected(rehearsal, tokenizer, source)
        assert stored and stored == expected, source
        assert all(doc[0] == 1 and doc[-1] == 2 and 2 not in doc[:-1] for doc in stored), source
