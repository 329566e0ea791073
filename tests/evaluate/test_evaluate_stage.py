"""Export and evaluation end to end through Snakemake on the embedded default (the shared
`default_run`): every checkpoint exported and verified, evaluated with lm-eval, its memorization
measured, one table across checkpoints; lm-eval run by hand on an export gives the same numbers;
a change re-runs only what depends on it."""

import csv
import glob
import json
import os
import subprocess
from pathlib import Path

import pytest
import torch

from tests.conftest import planned_jobs

pytestmark = pytest.mark.slow

STAGES = ["phase1", "phase2", "phase2-no-goldfish", "ctx256", "sft", "qrpo"]
BIN = Path(__file__).resolve().parents[2] / ".venv" / "bin"


def lm_eval_results(run_dir: Path, stage: str) -> dict[str, dict]:
    """task -> metrics over all of a checkpoint's lm-eval invocations."""
    merged: dict[str, dict] = {}
    for path in sorted(
        (run_dir / "evaluate" / "lm_eval" / stage / "lm_eval").glob("results-*.json")
    ):
        merged.update(json.loads(path.read_text())["results"])
    return merged


def test_every_checkpoint_is_exported_with_a_passing_verification_card(default_run):
    for stage in STAGES:
        export = default_run / "export" / stage
        card = json.loads((export / "verification.json").read_text())
        assert card["passed"] is True, card
        assert card["max_abs_diff"] <= 1e-4
        # several documents per row: the block-causal mask is part of what is compared
        assert card["batch"]["segments"] >= 2 * card["batch"]["rows"], card["batch"]
        config = json.loads((export / "config.json").read_text())
        assert config["model_type"] == "apertus"
        trained = "posttrain" if stage in ("sft", "qrpo") else "pretrain"
        run = json.loads((default_run / trained / stage / "run.json").read_text())
        assert config["rope_parameters"]["rope_theta"] == run["model_overrides"]["rope_theta"]
        print(f"\n{stage}: max |logit diff| torchtitan vs transformers {card['max_abs_diff']:.2e}")


def test_an_export_loads_in_transformers_and_continues_text(default_run):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    export = default_run / "export" / "ctx256"
    model = AutoModelForCausalLM.from_pretrained(export, dtype=torch.float32).eval()
    tokenizer = AutoTokenizer.from_pretrained(export)
    assert type(model).__name__ == "ApertusForCausalLM"
    prompt = [1, *tokenizer("The city", add_special_tokens=False)["input_ids"]]
    out = model.generate(torch.tensor([prompt]), max_new_tokens=8, do_sample=False)
    assert out.shape[1] == len(prompt) + 8


def test_heldout_perplexity_falls_from_the_first_to_the_last_pretraining_stage(default_run):
    first, last = (lm_eval_results(default_run, s) for s in ("phase1", "ctx256"))
    languages = sorted(
        t.removeprefix("apertus_ppl_") for t in first if t.startswith("apertus_ppl_")
    )
    assert len(languages) >= 5, languages
    for language in languages:
        task = f"apertus_ppl_{language}"
        before = first[task]["bits_per_byte,none"]
        after = last[task]["bits_per_byte,none"]
        assert after < before, (language, before, after)
    mc_languages = [t for t in first if t.startswith("apertus_mc_")]
    assert len(mc_languages) >= 5


def test_the_table_lists_every_checkpoint(default_run):
    table = default_run / "evaluate" / "table"
    with open(table / "scores.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert [row[next(iter(row))] for row in rows] == STAGES
    markdown = (table / "scores.md").read_text()
    assert all(stage in markdown for stage in STAGES)
    assert (table / "scores.png").stat().st_size > 10_000


def test_memorization_is_measured_at_the_planted_exposures(default_run):
    probes = [
        json.loads(line)
        for line in (default_run / "data" / "probes" / "probes.jsonl").read_text().splitlines()
    ]
    planted = sorted({p["exposures"] for p in probes if p["exposures"] > 0})
    assert planted == [1, 4, 16, 64, 256]
    seen_in_phase2 = None
    for stage in STAGES:
        result = json.loads(
            (default_run / "evaluate" / "memorization" / stage / "memorization.json").read_text()
        )
        measured = {row["exposures"] for row in result["curve"]}
        assert 0 in measured  # the never-planted controls
        # Each probe's exposures in what the checkpoint trained on (mismatches are reported).
        seen = {p["probe_id"]: p["exposures"] for p in probes if p["exposures"] > 0}
        seen |= {m["probe_id"]: m["measured"] for m in result["exposure_mismatches"]}
        if stage == "phase1":  # the probes are planted in phase 2
            assert measured == {0} and set(seen.values()) == {0}
        elif stage.startswith("phase2"):
            # Copies past the point where training stopped are reported, not hidden.
            assert len(result["exposure_mismatches"]) <= 2, result["exposure_mismatches"]
            assert seen_in_phase2 in (None, seen)  # the control read the same stream
            seen_in_phase2 = seen
        else:  # the long-context stage reads phase 2's stream again: never fewer exposures
            assert all(seen[p] >= seen_in_phase2[p] for p in seen), result["exposure_mismatches"]
        assert all(0 <= row["rouge_l_mean"] <= 1 for row in result["curve"])
        print(
            f"\n{stage}: "
            + ", ".join(
                f"{row['exposures']}x rouge-L {row['rouge_l_mean']:.3f}" for row in result["curve"]
            )
        )


def test_lm_eval_by_hand_on_an_export_gives_the_pipelines_numbers(default_run, tmp_path):
    """What a new user does: run the recorded `lm_eval` command, from another directory. Each
    lm_eval line of command.sh gives its invocation's results file of the pipeline."""
    stage_dir = default_run / "evaluate" / "lm_eval" / "ctx256"
    env = {
        **os.environ,
        "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}",
        "HTTP_PROXY": "http://127.0.0.1:9",  # any network access fails at once
        "HTTPS_PROXY": "http://127.0.0.1:9",
        "NO_PROXY": "",
    }
    proc = subprocess.run(
        ["bash", str(stage_dir / "command.sh"), "again"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    invocations = sorted((stage_dir / "lm_eval").glob("results-*.json"))
    assert len(invocations) >= 2  # rolling perplexity and multiple choice run apart
    assert len(glob.glob(str(tmp_path / "again" / "results-*_*.json"))) == len(invocations)
    for path in invocations:
        (again,) = glob.glob(str(tmp_path / "again" / f"{path.stem}_*.json"))
        by_hand = json.loads(Path(again).read_text())["results"]
        pipeline = json.loads(path.read_text())["results"]
        assert by_hand.keys() == pipeline.keys()
        for task, metrics in pipeline.items():
            for metric, value in metrics.items():
                if isinstance(value, float):
                    assert by_hand[task][metric] == pytest.approx(value, rel=1e-9), (task, metric)


def test_changing_the_suite_reruns_only_evaluation(default_run, tmp_path):
    text = "evaluate:\n  suite:\n    tasks: [{task: apertus_mc}]\n"
    assert planned_jobs(default_run, tmp_path, text) == {
        "evaluate_checkpoint": 6,
        "evaluate_table": 1,
        "release": 1,
        "report_summary": 1,
    }


def test_changing_the_export_dtype_reruns_exports_and_their_evaluations(default_run, tmp_path):
    jobs = planned_jobs(default_run, tmp_path, "export:\n  dtype: bfloat16\n")
    # QRPO samples from the SFT export, so its data and training follow
    assert jobs == {
        "export_checkpoint": 6,
        "evaluate_checkpoint": 6,
        "evaluate_memorization": 6,
        "evaluate_table": 1,
        "posttrain_qrpo_sample": 1,
        "posttrain_qrpo_score": 1,
        "posttrain_qrpo_score_shard": 1,
        "posttrain_heldout": 2,
        "posttrain_qrpo": 1,
        "posttrain_report": 1,
        "release": 1,
        "report_training": 1,  # QRPO's curves
        "report_summary": 1,
    }
