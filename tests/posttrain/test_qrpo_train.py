"""Offline QRPO training (apertus.posttrain.qrpo_train): the completions file, the config, the
training loop on a toy problem, and the step's entry point end to end."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest
import torch

from apertus.core import ApertusError
from apertus.model.flavors import flavor
from apertus.posttrain.qrpo import length_normalised_beta, optimal_log_ratio, sequence_logprobs
from apertus.posttrain.qrpo_train import (
    QRPOConfig,
    collate,
    main,
    read_completions,
    save_checkpoint,
    steps_per_epoch,
    train_qrpo,
)

DEBUG = flavor("debug")


def completion_record(prompt, completion, *, reward, refs, logp=-10.0, prompt_id="p0", cid="c0"):
    return {
        "prompt_id": prompt_id,
        "completion_id": cid,
        "input_ids": list(prompt) + list(completion),
        "completion_mask": [0] * len(prompt) + [1] * len(completion),
        "reward": reward,
        "reference_rewards": refs,
        "reference_logp": logp,
    }


def write_jsonl(path: Path, records) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def read(path: Path):
    return read_completions(path, vocab_size=DEBUG.vocab_size, max_seq_len=DEBUG.max_seq_len)


def scored_toy_problem(model, rewards, refs, *, prompts=3, completion_len=5, seed=1):
    """`prompts` prompts with len(rewards) completions each: completion k gets rewards[k]; the
    reference log-probabilities are the model's own, so training starts at log-ratio 0."""
    gen = torch.Generator().manual_seed(seed)
    records = []
    for p in range(prompts):
        prompt = [1, *torch.randint(4, 256, (3,), generator=gen).tolist()]
        for k, reward in enumerate(rewards):
            completion = torch.randint(4, 256, (completion_len,), generator=gen).tolist()
            records.append(
                completion_record(
                    prompt, completion, reward=reward, refs=refs, prompt_id=f"p{p}", cid=f"c{k}"
                )
            )
    add_reference_logps(model, records)
    return records


@torch.no_grad()
def add_reference_logps(model, records) -> None:
    for r in records:
        ids, mask = torch.tensor([r["input_ids"]]), torch.tensor([r["completion_mask"]])
        r["reference_logp"] = sequence_logprobs(model, ids, mask).item()


@torch.no_grad()
def log_ratios(model, completions) -> torch.Tensor:
    batch = collate(completions, "cpu")
    logps = sequence_logprobs(model, batch.input_ids, batch.completion_mask).double()
    return logps - batch.reference_logps


# --------------------------------------------------------------------------------------------
# The completions file
# --------------------------------------------------------------------------------------------


def test_read_completions_computes_quantile_rewards(tmp_path):
    path = write_jsonl(
        tmp_path / "c.jsonl",
        [
            completion_record([1, 5], [6, 7], reward=2.0, refs=[0.0, 1.0, 2.0, 3.0], cid="a"),
            completion_record([1, 5], [8], reward=-1.0, refs=[0.0, 1.0, 2.0, 3.0], cid="b"),
            # Another number of reference samples, and integer ids.
            completion_record([1], [9, 9, 9], reward=0.5, refs=[0.5, 1.0], prompt_id=4, cid=7),
        ],
    )
    (tmp_path / "c.jsonl").write_text(
        (tmp_path / "c.jsonl").read_text() + "\n   \n", encoding="utf-8"
    )  # blank lines are skipped
    got = read(path)
    # 2.0 among [0, 1, 2, 3]: 3 of 4 at or below; -1.0: none; 0.5 among [0.5, 1.0]: the tie.
    assert [c.quantile_reward for c in got] == [0.75, 0.0, 0.5]
    assert [c.completion_tokens for c in got] == [2, 1, 3]
    assert (got[2].prompt_id, got[2].completion_id) == ("4", "7")


BAD_RECORDS = {
    "missing key": ({"reward": None}, "missing key\\(s\\) reward"),
    "mask length": ({"completion_mask": [0, 1]}, "as long as input_ids"),
    "mask first token": ({"completion_mask": [1, 1, 1, 1]}, "completion_mask\\[0\\]"),
    "mask values": ({"completion_mask": [0, 2, 1, 1]}, "only 0 and 1"),
    "empty completion": ({"completion_mask": [0, 0, 0, 0]}, "no completion token"),
    "token out of vocabulary": ({"input_ids": [1, 5, 256, 7]}, "in \\[0, 256\\)"),
    "non-finite reward": ({"reward": float("nan")}, "reward must be a finite number"),
    "empty references": ({"reference_rewards": []}, "reference_rewards must be"),
    "string reward in references": ({"reference_rewards": [1.0, "2"]}, "reference_rewards"),
    "positive logp": ({"reference_logp": 12.5}, "negative log-likelihood"),
    "too long": ({"input_ids": [1] * 129, "completion_mask": [0] + [1] * 128}, "max_seq_len 128"),
    "bool id": ({"prompt_id": True}, "prompt_id must be"),
}


@pytest.mark.parametrize("name", sorted(BAD_RECORDS))
def test_read_completions_names_file_and_line_of_a_bad_record(tmp_path, name):
    change, message = BAD_RECORDS[name]
    good = completion_record([1, 5], [6, 7], reward=1.0, refs=[0.0, 2.0], cid="good")
    bad = {**completion_record([1, 5], [6, 7], reward=1.0, refs=[0.0, 2.0], cid="bad"), **change}
    bad = {k: v for k, v in bad.items() if v is not None}
    path = write_jsonl(tmp_path / "c.jsonl", [good, bad])
    with pytest.raises(ApertusError, match=f"c.jsonl:2: .*{message}"):
        read(path)


def test_read_completions_rejects_invalid_json_duplicates_and_empty_files(tmp_path):
    good = completion_record([1, 5], [6, 7], reward=1.0, refs=[0.0])
    path = tmp_path / "c.jsonl"
    path.write_text(json.dumps(good) + "\n{not json\n")
    with pytest.raises(ApertusError, match=re.escape("c.jsonl:2: not valid JSON")):
        read(path)
    write_jsonl(path, [good, good])
    with pytest.raises(
        ApertusError, match=re.escape("c.jsonl:2: completion 'c0' of prompt 'p0' already on line 1")
    ):
        read(path)
    path.write_text("\n")
    with pytest.raises(ApertusError, match="holds no completions"):
        read(path)
    with pytest.raises(ApertusError, match="does not exist"):
        read(tmp_path / "missing.jsonl")


def test_collate_pads_right_and_masks_the_padding(tmp_path):
    records = [
        completion_record([1, 5, 6], [7, 8], reward=1.0, refs=[0.0], cid="a"),
        completion_record([1], [9], reward=0.0, refs=[0.0, 1.0], cid="b"),
    ]
    batch = collate(read(write_jsonl(tmp_path / "c.jsonl", records)), "cpu")
    assert batch.input_ids.tolist() == [[1, 5, 6, 7, 8], [1, 9, 0, 0, 0]]
    assert batch.completion_mask.int().tolist() == [[0, 0, 0, 1, 1], [0, 1, 0, 0, 0]]
    assert batch.lengths.tolist() == [2, 1]
    assert batch.quantile_rewards.tolist() == [1.0, 0.5]


# --------------------------------------------------------------------------------------------
# Config
# --------------------------------------------------------------------------------------------


def test_config_defaults_and_errors():
    cfg = QRPOConfig.from_dict({})
    assert (cfg.lr, cfg.beta_kl, cfg.max_beta, cfg.epochs) == (3e-4, 5.0, 0.1, 1)
    assert cfg.ademamix.betas == (0.9, 0.999, 0.999) and cfg.ademamix.warmup_steps is None
    cases = [
        ({"learning_rate": 1e-6}, "unknown key 'posttrain.qrpo.learning_rate'"),
        ({"lr": -1.0}, "posttrain.qrpo.lr must be a number >= 0.0"),
        ({"batch_size": 0}, "batch_size must be an integer >= 1"),
        ({"epochs": 1.5}, "epochs must be an integer"),
        ({"max_beta": 0}, "max_beta must be a number > 0"),
        ({"ademamix": {"betas": [0.9, 0.999]}}, "betas must be \\[beta1, beta2, beta3\\]"),
        ({"ademamix": {"betas": [0.9, 0.999, 1.0]}}, "betas must be a number >= 0.0 and < 1.0"),
        ({"ademamix": {"t_alpha": 3}}, "unknown key 'posttrain.qrpo.ademamix.t_alpha'"),
        ({"device": "tpu"}, "device must be"),
        ({"dtype": "float16"}, "dtype must be one of float32, bfloat16"),
    ]
    for raw, message in cases:
        with pytest.raises(ApertusError, match=message):
            QRPOConfig.from_dict(raw)


def test_steps_per_epoch_keeps_the_last_partial_batch():
    assert [steps_per_epoch(n, 4) for n in (1, 4, 5, 8, 9)] == [1, 1, 2, 2, 3]


# --------------------------------------------------------------------------------------------
# Training on a toy problem
# --------------------------------------------------------------------------------------------

TOY = {"lr": 1e-3, "warmup_steps": 5, "epochs": 100, "batch_size": 12, "grad_clip": 1.0}


def test_qrpo_moves_the_policy_towards_high_quantile_completions(tmp_path):
    torch.manual_seed(0)
    model = DEBUG.build()
    # Four completions per prompt with rewards 0..3 against reference rewards 0..3:
    # Rq = 1/4, 2/4, 3/4, 1 (the `<=` count), and 5-token completions get beta = 0.1.
    records = scored_toy_problem(model, [0.0, 1.0, 2.0, 3.0], [0.0, 1.0, 2.0, 3.0])
    completions = read(write_jsonl(tmp_path / "c.jsonl", records))
    assert log_ratios(model, completions).abs().max() < 1e-4  # policy == reference at start
    history = train_qrpo(model, completions, QRPOConfig.from_dict(TOY))
    assert len(history) == 100 and history[-1]["loss"] < 0.01 * history[0]["loss"]
    ratios = log_ratios(model, completions).view(3, 4)
    # Top quantile up, the rest down, in the order of the rewards within every prompt.
    assert (ratios[:, 3] > 1.0).all() and (ratios[:, :3] < 0).all()
    assert (ratios.diff(dim=1) > 1.0).all()
    # And close to the optimum (Rq - beta log Z) / beta: -5.20, -2.70, -0.20, +2.30.
    batch = collate(completions, "cpu")
    target = optimal_log_ratio(batch.quantile_rewards, length_normalised_beta(batch.lengths))
    assert target.view(3, 4)[0].tolist() == pytest.approx([-5.197, -2.697, -0.197, 2.303], abs=1e-3)
    assert (ratios - target.view(3, 4)).abs().max() < 0.5


def test_qrpo_with_equal_rewards_prefers_no_completion(tmp_path):
    torch.manual_seed(0)
    model = DEBUG.build()
    # Every reward ties with every reference reward: Rq = 1 for all twelve completions, so the
    # optimum raises each of them by the same log(1/beta)-ish amount, +2.30.
    records = scored_toy_problem(model, [1.0, 1.0, 1.0, 1.0], [1.0, 1.0, 1.0, 1.0])
    completions = read(write_jsonl(tmp_path / "c.jsonl", records))
    train_qrpo(model, completions, QRPOConfig.from_dict(TOY))
    ratios = log_ratios(model, completions).view(3, 4)
    assert (ratios - 2.3026).abs().max() < 0.5
    spread = ratios.max(dim=1).values - ratios.min(dim=1).values
    assert (spread < 0.5).all(), "no completion of a prompt is preferred over another"


def test_micro_batches_give_the_gradient_of_the_whole_batch(tmp_path):
    def trained(micro_batch):
        torch.manual_seed(0)
        model = DEBUG.build()
        records = scored_toy_problem(model, [0.0, 2.0, 3.0], [0.0, 1.0, 2.0], seed=5)
        completions = read(write_jsonl(tmp_path / "c.jsonl", records))
        cfg = {**TOY, "epochs": 2, "batch_size": 6, "micro_batch": micro_batch}
        history = train_qrpo(model, completions, QRPOConfig.from_dict(cfg))
        return model, history

    whole, h1 = trained(None)
    parts, h2 = trained(4)  # 6 = 4 + 2: unequal parts must be weighted by their size
    assert [m["loss"] for m in h1] == pytest.approx([m["loss"] for m in h2], rel=1e-5)
    for (name, a), b in zip(whole.named_parameters(), parts.parameters(), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6, msg=name)


def test_shuffling_is_seeded(tmp_path):
    def losses(seed):
        torch.manual_seed(0)
        model = DEBUG.build()
        records = scored_toy_problem(model, [0.0, 1.0, 3.0], [0.0, 1.0, 2.0], seed=7)
        completions = read(write_jsonl(tmp_path / "c.jsonl", records))
        cfg = {**TOY, "epochs": 2, "batch_size": 2, "seed": seed}
        return [m["loss"] for m in train_qrpo(model, completions, QRPOConfig.from_dict(cfg))]

    assert losses(1) == losses(1)
    assert losses(1) != losses(2)


def test_metrics_report_the_batch_means(tmp_path):
    torch.manual_seed(0)
    model = DEBUG.build()
    records = scored_toy_problem(model, [0.0, 3.0], [0.0, 1.0, 2.0, 3.0], prompts=1)
    completions = read(write_jsonl(tmp_path / "c.jsonl", records))
    cfg = QRPOConfig.from_dict({**TOY, "epochs": 1, "batch_size": 2, "warmup_steps": 0})
    (first,) = train_qrpo(model, completions, cfg)
    # Rq = 1/4 and 1; at the start log-ratio 0, beta 0.1, beta log Z 0.769737:
    # loss = ((0.25 - 0.769737)^2 + (1 - 0.769737)^2) / 2 = (0.270126 + 0.053021) / 2
    assert first["quantile_reward"] == pytest.approx(0.625)
    assert first["beta"] == pytest.approx(0.1)
    assert first["log_ratio"] == pytest.approx(0.0, abs=1e-4)
    assert first["loss"] == pytest.approx(0.1615737, abs=1e-5)
    assert first["lr"] == TOY["lr"] and first["completions"] == 2
    assert first["initial_abs_log_ratio_per_token"] < 1e-4


# --------------------------------------------------------------------------------------------
# The step's entry point
# --------------------------------------------------------------------------------------------


@pytest.fixture
def sft_run(tmp_path):
    """An SFT run directory as the SFT step leaves it: run.json and a DCP checkpoint."""
    torch.manual_seed(3)
    model = flavor("debug", rope_theta=10_000.0, max_seq_len=64).build()
    checkpoint = save_checkpoint(model, tmp_path / "sft-work" / "ckpt" / "step-9")
    run = tmp_path / "sft"
    run.mkdir()
    (run / "run.json").write_text(
        json.dumps(
            {
                "name": "sft",
                "final_checkpoint": str(checkpoint),
                "final_step": 9,
                "final_loss": 3.2,
                "flavor": "debug",
                "model_overrides": {"rope_theta": 10_000.0, "max_seq_len": 64},
                "seq_len": 64,
            }
        )
    )
    return run, model


def test_entry_point_trains_and_writes_a_run_the_export_reads(tmp_path, sft_run):
    from apertus.export.hf import load_model_state
    from apertus.export.stage import read_run_record

    run, sft_model = sft_run
    gen = torch.Generator().manual_seed(11)
    records = []
    for p in range(2):
        prompt = [1, *torch.randint(4, 256, (2 + p,), generator=gen).tolist()]
        for k, length in enumerate([3, 60 - len(prompt)]):  # beta 0.1 and 5/57
            completion = torch.randint(4, 256, (length,), generator=gen).tolist()
            records.append(
                completion_record(
                    prompt,
                    completion,
                    reward=float(k),
                    refs=[0.0, 0.5, 1.0][: 2 + p],
                    prompt_id=f"p{p}",
                    cid=f"c{k}",
                )
            )
    add_reference_logps(sft_model, records)
    completions = write_jsonl(tmp_path / "scored.jsonl", records)
    config = {"lr": 1e-3, "warmup_steps": 1, "epochs": 2, "batch_size": 3, "device": "cpu"}
    out, work, manifest = tmp_path / "out", tmp_path / "work", tmp_path / "out" / "manifest.json"
    args = ["--config", json.dumps(config), "--manifest", str(manifest), "--sft-run", str(run)]
    args += ["--completions", str(completions), "--output", str(out), "--work-dir", str(work)]
    main(args)

    record = json.loads((out / "run.json").read_text())
    assert record["final_step"] == 4  # 2 epochs of ceil(4 / 3) steps
    assert (record["flavor"], record["model_overrides"], record["seq_len"]) == (
        "debug",
        {"rope_theta": 10_000.0, "max_seq_len": 64},
        64,
    )
    assert (record["completions"], record["prompts"]) == (4, 2)
    # Paths relative to the run.json's folder, so a results folder moves whole.
    assert record["sft_run"] == "../sft" and record["final_checkpoint"].startswith("../work/qrpo-")
    metrics = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics] == [1, 2, 3, 4]
    assert record["final_loss"] == metrics[-1]["loss"]
    assert all(0.0 < m["beta"] <= 0.1 for m in metrics)
    assert json.loads((out / "config.json").read_text()) == config
    step = json.loads(manifest.read_text())
    assert step["stage"] == "posttrain" and step["step"] == "qrpo"
    assert step["summary"]["initial_abs_log_ratio_per_token"] < 1e-4

    # The export stage takes the run unchanged, and the weights are the trained ones.
    exported = read_run_record(out)
    state = load_model_state(exported.final_checkpoint, exported.model_config())
    assert set(state) == set(sft_model.state_dict())
    trained = exported.model_config().build()
    trained.load_state_dict(state)
    ratios = log_ratios(trained, read(completions))
    assert not math.isclose(ratios.abs().max().item(), 0.0, abs_tol=1e-3)


def test_entry_point_reports_a_bad_completions_file(tmp_path, sft_run):
    run, _ = sft_run
    bad = write_jsonl(
        tmp_path / "scored.jsonl",
        [completion_record([1, 2], list(range(4, 70)), reward=1.0, refs=[0.0])],  # 68 > 64
    )
    manifest = tmp_path / "out" / "manifest.json"
    args = ["--config", "{}", "--manifest", str(manifest), "--sft-run", str(run)]
    args += [
        "--completions",
        str(bad),
        "--output",
        str(tmp_path / "out"),
        "--work-dir",
        str(tmp_path),
    ]
    with pytest.raises(
        ApertusError,
        match=re.escape("scored.jsonl:1: 68 tokens, more than the model's max_seq_len 64"),
    ):
        main(args)
    assert not manifest.exists()
