"""Post-training end to end through Snakemake on the embedded default (the shared
`default_run`): SFT from the last pretraining stage, then QRPO on the SFT model's own samples;
each model answers the held-out prompts in its own job and the aligned model's mean reward is
reported next to the SFT model's; both export, verify and evaluate like the base model, with a
working chat template."""

import json
import os

import pytest
import torch

from apertus.train.metrics import read_metrics

pytestmark = pytest.mark.slow


def test_sft_starts_from_the_last_pretraining_stage_and_learns_the_completions(default_run):
    sft = json.loads((default_run / "posttrain" / "sft" / "run.json").read_text())
    spec = json.loads((default_run / "posttrain" / "sft" / "spec.json").read_text())
    ctx = json.loads((default_run / "pretrain" / "ctx256" / "run.json").read_text())
    # Each names the checkpoint relative to its own folder.
    initial = default_run / "posttrain" / "sft" / spec["checkpoint"]["initial"]
    final = default_run / "pretrain" / "ctx256" / ctx["final_checkpoint"]
    assert os.path.normpath(initial) == os.path.normpath(final)
    assert spec["checkpoint"]["initial_mode"] == "weights"
    assert spec["lr"]["kind"] == "linear" and spec["goldfish"]["enabled"] is False
    metrics = read_metrics(default_run / "posttrain" / "sft" / "metrics.jsonl")
    first = sum(metrics[s]["loss"] for s in sorted(metrics)[:5]) / 5
    last = sum(metrics[s]["loss"] for s in sorted(metrics)[-5:]) / 5
    assert last < first - 1.0, (first, last)
    print(f"\nSFT loss on completions: {first:.3f} -> {last:.3f} in {sft['final_step']} steps")


def test_qrpo_trains_on_scored_samples_of_the_sft_model(default_run):
    scored = default_run / "posttrain" / "qrpo_scored"
    lines = (scored / "completions.jsonl").read_text().splitlines()
    prompts = (default_run / "posttrain" / "instructions" / "qrpo.jsonl").read_text().splitlines()
    assert len(lines) == 10 * len(prompts)  # n = 10 reference samples per prompt
    qrpo = json.loads((default_run / "posttrain" / "qrpo" / "run.json").read_text())
    assert qrpo["final_step"] >= 1
    metrics = read_metrics(default_run / "posttrain" / "qrpo" / "metrics.jsonl")
    # beta = min(beta_KL / |y|, 0.1): completions of at most 24 tokens are all clamped
    assert all(row["beta"] == pytest.approx(0.1) for row in metrics.values())


def test_mean_rewards_of_the_sft_and_aligned_models_are_reported(default_run):
    """Greedy answers and 10 samples per prompt (the policy's expected reward, what QRPO
    optimises), on the held-out prompts, with the same reward. The aligned policy's expected
    reward is higher than the SFT policy's; greedy answers of this tiny model barely move
    (README, post-training), so their comparison is printed, not asserted."""
    report = json.loads((default_run / "posttrain" / "reward_report.json").read_text())
    for table in (report, report["sampled"]):
        sft, qrpo = table["models"]["sft"], table["models"]["qrpo"]
        assert sft["count"] == qrpo["count"] == report["prompt_count"] > 0
        assert 0 <= sft["mean"] <= 1 and 0 <= qrpo["mean"] <= 1
        assert table["comparison"]["qrpo"]["mean_delta"] == pytest.approx(
            qrpo["mean"] - sft["mean"]
        )
    print(
        f"\nheld-out mean reward, greedy: SFT {report['models']['sft']['mean']:.4f}, "
        f"QRPO {report['models']['qrpo']['mean']:.4f}; sampled: SFT "
        f"{report['sampled']['models']['sft']['mean']:.4f}, QRPO "
        f"{report['sampled']['models']['qrpo']['mean']:.4f}"
    )
    sampled = report["sampled"]
    assert sampled["models"]["qrpo"]["mean"] > sampled["models"]["sft"]["mean"]
    assert sampled["comparison"]["qrpo"]["delta_stderr"] > 0
    markdown = (default_run / "posttrain" / "reward_report.md").read_text()
    assert "Expected reward" in markdown and "| qrpo |" in markdown
    assert "ended turn" in markdown
    for policy in ("sft", "qrpo"):  # the report is made of each policy's heldout job
        heldout = default_run / "posttrain" / "heldout" / policy / "rewards.json"
        result = json.loads(heldout.read_text())
        assert result["sampled"] == sampled["models"][policy]
        assert {"folder": result["model"], **result["greedy"]} == report["models"][policy]
        for table in (report, sampled):
            assert 0 <= table["models"][policy]["ended_turn"] <= 1
    print(
        "answers that ended their turn, greedy / sampled: "
        + ", ".join(
            f"{p} {report['models'][p]['ended_turn']:.2f} / "
            f"{sampled['models'][p]['ended_turn']:.2f}"
            for p in ("sft", "qrpo")
        )
    )


@pytest.mark.parametrize("stage", ["sft", "qrpo"])
def test_post_trained_models_export_evaluate_and_chat(default_run, stage):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    export = default_run / "export" / stage
    card = json.loads((export / "verification.json").read_text())
    assert card["passed"] and card["max_abs_diff"] <= 1e-4
    table = (default_run / "evaluate" / "table" / "scores.csv").read_text().splitlines()
    assert any(line.startswith(f"{stage},") for line in table)
    tokenizer = AutoTokenizer.from_pretrained(export)
    model = AutoModelForCausalLM.from_pretrained(export, dtype=torch.float32).eval()
    messages = [{"role": "user", "content": "What is 2 plus 3?"}]
    ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, return_dict=True)
    ids = ids["input_ids"]
    text = tokenizer.decode(ids)
    assert text.startswith("<s><|user_start|>What is 2 plus 3?<|user_end|>")
    assert text.endswith("<|assistant_start|>")
    out = model.generate(torch.tensor([ids]), max_new_tokens=8, do_sample=False)
    assert out.shape[1] > len(ids)
