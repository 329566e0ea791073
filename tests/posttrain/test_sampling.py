"""QRPO's data: reference samples, reference log-probs, completions.jsonl (RECIPE.md §7); each
policy's scored answers to held-out prompts and the reward report built from them.

A tiny random ApertusForCausalLM (the shape of the ``debug`` flavor) is saved as a Hugging Face
folder with a tiny tokenizer trained by our own `train_tokenizer` (chat template included), the
same layout as the export stage's output. Samples are checked against a naive token-by-token
sampler written here, log-probs against one forward pass per token.
"""

from __future__ import annotations

import itertools
import json
import math
import os
import statistics
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from sacrebleu.metrics import CHRF
from transformers import ApertusForCausalLM, AutoModelForCausalLM, AutoTokenizer

from apertus.core import ApertusError
from apertus.model.flavors import flavor
from apertus.posttrain import sampling
from apertus.posttrain.rewards import build_reward
from apertus.posttrain.sampling import (
    QrpoPrompt,
    Sample,
    SamplingConfig,
    completion_records,
    generate_answers,
    gumbel_noise,
    load_prompts,
    main,
    mean_reward,
    read_samples,
    reference_logprobs,
    reward_comparison,
    sample_references,
    sample_seed,
)
from apertus.tokenize.tokenizer import CHAT_TEMPLATE, train_tokenizer
from tests.model.test_model import hf_config

os.environ.setdefault("HF_HUB_OFFLINE", "1")

TEXTS = [
    "The quick brown fox jumps over the lazy dog. Answer: the fox is quick.",
    "Der schnelle braune Fuchs springt über den faulen Hund. Antwort: der Fuchs.",
    "Le renard brun rapide saute par-dessus le chien paresseux. Réponse : le renard.",
    "Rate it (1) (2) (3) (4) (5) (6) (7) (8) (9) (10) out of (10).",
] * 4


def make_tokenizer(folder: Path, texts=TEXTS) -> Path:
    train_tokenizer(texts, folder, vocab_size=400)
    return folder


@torch.no_grad()
def make_causal_lm(
    folder: Path, tokenizer_dir: Path, seed: int, scale: float = 0.3, head_scale: float = 1.0
) -> Path:
    """A random ApertusForCausalLM of the debug flavor's shape saved with the tokenizer;
    weights drawn at a scale where the next-token distributions are far from uniform (the
    output layer's `head_scale` flattens them again)."""
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    cfg = flavor("debug", vocab_size=len(tokenizer), max_seq_len=8192)
    config = hf_config(cfg)
    config.bos_token_id, config.eos_token_id, config.pad_token_id = 1, 2, 3
    torch.manual_seed(seed)
    model = ApertusForCausalLM(config)
    gen = torch.Generator().manual_seed(seed)
    for p in model.parameters():
        if p.dim() >= 2:
            p.copy_(scale * torch.randn(p.shape, generator=gen))
    model.lm_head.weight.mul_(head_scale)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def prompt(pid: str, lang: str, text: str, reference: str, system: str | None = None):
    messages = ([{"role": "system", "content": system}] if system else []) + [
        {"role": "user", "content": text}
    ]
    return {"id": pid, "language": lang, "messages": messages, "reference": reference}


PROMPTS = [
    prompt("en-1", "en", "Who jumps?", "The quick brown fox jumps."),
    prompt("de-1", "de", "Wer springt über den Hund?", "Der schnelle Fuchs.", "Antworte kurz."),
    prompt("en-2", "en", "What is the dog like? Answer in one word please.", "Lazy."),
    prompt("fr-1", "fr", "Qui saute ?", "Le renard brun."),
]


def write_jsonl(path: Path, rows) -> Path:
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
    return path


@pytest.fixture(scope="module")
def workspace(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("qrpo_data")
    make_tokenizer(root / "tokenizer")
    make_causal_lm(root / "sft", root / "tokenizer", seed=1)
    write_jsonl(root / "prompts.jsonl", PROMPTS)
    return root


@pytest.fixture(scope="module")
def prompts(workspace) -> list[QrpoPrompt]:
    return load_prompts(workspace / "prompts.jsonl")


@pytest.fixture(scope="module")
def hf(workspace):
    model = AutoModelForCausalLM.from_pretrained(workspace / "sft", dtype=torch.float32).eval()
    return model, AutoTokenizer.from_pretrained(workspace / "sft")


def sample(model_dir, prompts, **kw) -> list[Sample]:
    args = dict(n=3, temperature=1.0, max_new_tokens=12, seed=7, batch_size=4, device="cpu")
    args.update(kw)
    return sample_references(model_dir, prompts, **args)


@torch.no_grad()
def naive_sampler(model, prompt_ids, seed, *, temperature, max_new_tokens, stops):
    """One sample the slow way: a full forward pass over the whole prefix for every token, the
    sample's own generator, argmax of logits / T + Gumbel noise (greedy at T = 0)."""
    gen = torch.Generator().manual_seed(seed)
    ids = list(prompt_ids)
    out = []
    for _ in range(max_new_tokens):
        logits = model(torch.tensor([ids])).logits[0, -1].float()
        if temperature > 0:
            scores = logits / temperature + gumbel_noise(logits.shape[-1], gen).float()
        else:
            scores = logits
        token = int(scores.argmax())
        out.append(token)
        ids.append(token)
        if token in stops:
            break
    return out


# --- the model folder --------------------------------------------------------------------------


def test_tokenizer_carries_the_chat_template_and_assistant_end(workspace, hf):
    _, tokenizer = hf
    assert tokenizer.chat_template == CHAT_TEMPLATE
    assert "<|assistant_end|>" in tokenizer.get_vocab()
    # What a fresh process reads from the folder (transformers 5 writes chat_template.jinja).
    assert AutoTokenizer.from_pretrained(workspace / "sft").chat_template == CHAT_TEMPLATE
    assert "'<|assistant_end|>'" in CHAT_TEMPLATE


def test_prompts_are_rendered_with_the_chat_template_without_eos(workspace, prompts, hf):
    _, tok = hf
    samples = sample(workspace / "sft", prompts[1:2], n=1)
    ids = samples[0].prompt_ids
    expected = (
        "<s><|system_start|>Antworte kurz.<|system_end|>"
        "<|user_start|>Wer springt über den Hund?<|user_end|><|assistant_start|>"
    )
    assert tok.decode(ids) == expected
    assert ids.count(tok.bos_token_id) == 1 and tok.eos_token_id not in ids
    assert ids[-1] == tok.convert_tokens_to_ids("<|assistant_start|>")


# --- sampling ----------------------------------------------------------------------------------


@pytest.mark.parametrize("temperature", [1.0, 0.7, 0.0])
def test_samples_equal_a_token_by_token_sampler(workspace, prompts, hf, temperature):
    model, tok = hf
    stops = {tok.convert_tokens_to_ids("<|assistant_end|>"), tok.eos_token_id}
    got = generate_answers(
        workspace / "sft",
        prompts,
        n=2,
        temperature=temperature,
        max_new_tokens=10,
        seed=3,
        batch_size=3,  # batches mix prompts of different lengths (left padding)
        device="cpu",
    )
    assert [(s.prompt_id, s.sample_index) for s in got] == [
        (p.id, j) for p in prompts for j in range(2)
    ]
    for s in got:
        want = naive_sampler(
            model,
            s.prompt_ids,
            sample_seed(3, s.prompt_id, s.sample_index),
            temperature=temperature,
            max_new_tokens=10,
            stops=stops,
        )
        assert s.completion_ids == want, (s.prompt_id, s.sample_index)
    if temperature > 0:  # samples of one prompt differ from each other
        assert got[0].completion_ids != got[1].completion_ids
    else:  # greedy: the sample index does not matter
        assert got[0].completion_ids == got[1].completion_ids


def test_samples_do_not_depend_on_batching_or_prompt_order(workspace, prompts):
    reference = sample(workspace / "sft", prompts, batch_size=1)
    for batch_size in (5, 12):
        other = sample(workspace / "sft", prompts, batch_size=batch_size)
        assert other == reference
    reversed_run = sample(workspace / "sft", prompts[::-1], batch_size=5)
    by_key = {(s.prompt_id, s.sample_index): s.completion_ids for s in reversed_run}
    assert all(by_key[(s.prompt_id, s.sample_index)] == s.completion_ids for s in reference)
    other_seed = sample(workspace / "sft", prompts, seed=8)
    assert [s.completion_ids for s in other_seed] != [s.completion_ids for s in reference]


def test_every_sample_has_its_own_random_stream():
    seeds = {sample_seed(s, p, j) for s in (0, 1) for p in ("a", "b", "a0") for j in range(3)}
    assert len(seeds) == 18 and all(0 <= x < 2**63 for x in seeds)
    assert sample_seed(0, "a", 1) == sample_seed(0, "a", 1)


def test_gumbel_max_draws_follow_the_softmax_at_the_temperature():
    logits = torch.tensor([2.0, 0.5, 0.0, -1.0, 1.0])
    temperature = 0.7
    gen = torch.Generator().manual_seed(0)
    draws = 40_000
    counts = torch.zeros(5)
    for _ in range(draws):
        counts[int((logits / temperature + gumbel_noise(5, gen)).argmax())] += 1
    expected = torch.softmax(logits / temperature, dim=0)
    # Standard error of a frequency is at most 0.0025 at this size: 0.01 is 4 of them.
    assert torch.allclose(counts / draws, expected, atol=0.01)
    # At T = 1 the same draws would give visibly different frequencies.
    assert not torch.allclose(counts / draws, torch.softmax(logits, dim=0), atol=0.03)


@pytest.fixture(scope="module")
def stopping_model(workspace) -> Path:
    """The SFT model with an output layer that gives <|assistant_end|> a logit of +-50 (sign by
    the hidden state) and every other token 0: answers end after a few tokens."""
    folder = workspace / "stopping"
    tok = AutoTokenizer.from_pretrained(workspace / "sft")
    model = AutoModelForCausalLM.from_pretrained(workspace / "sft", dtype=torch.float32)
    with torch.no_grad():
        head = model.lm_head.weight
        direction = torch.randn(head.shape[1], generator=torch.Generator().manual_seed(5))
        head.zero_()
        head[tok.convert_tokens_to_ids("<|assistant_end|>")] = 50 * direction / direction.norm()
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


def test_answers_stop_at_assistant_end_or_max_new_tokens(stopping_model, prompts, hf):
    _, tok = hf
    end = tok.convert_tokens_to_ids("<|assistant_end|>")
    samples = sample(stopping_model, prompts, n=6, max_new_tokens=4)
    reasons = {s.finish_reason for s in samples}
    assert reasons >= {"assistant_end", "length"}
    for s in samples:
        ids = s.completion_ids
        if s.finish_reason == "assistant_end":
            assert ids[-1] == end and end not in ids[:-1] and len(ids) <= 4
            assert s.text == tok.decode(ids[:-1], skip_special_tokens=True)
        elif s.finish_reason == "eos":
            assert ids[-1] == tok.eos_token_id
        else:
            assert len(ids) == 4 and end not in ids and tok.eos_token_id not in ids
            assert s.text == tok.decode(ids, skip_special_tokens=True)


def test_reference_samples_need_a_positive_temperature(workspace, prompts):
    with pytest.raises(ApertusError, match="temperature"):
        sample(workspace / "sft", prompts, temperature=0.0)


# --- reference log-probs -----------------------------------------------------------------------


@torch.no_grad()
def token_by_token_logp(model, prompt_ids, completion_ids) -> float:
    total = 0.0
    ids = list(prompt_ids)
    for token in completion_ids:
        logits = model(torch.tensor([ids])).logits[0, -1].double()
        total += float(torch.log_softmax(logits, dim=-1)[token])
        ids.append(token)
    return total


def test_reference_logp_equals_a_token_by_token_computation(workspace, prompts, hf, stopping_model):
    model, _ = hf
    # Completions of different lengths (stopped early or cut) in one batch.
    samples = sample(stopping_model, prompts, n=2, max_new_tokens=6)
    samples += sample(workspace / "sft", prompts, n=1, max_new_tokens=9)
    assert len({len(s.completion_ids) for s in samples}) > 2
    got = reference_logprobs(workspace / "sft", samples, batch_size=5, device="cpu")
    want = [token_by_token_logp(model, s.prompt_ids, s.completion_ids) for s in samples]
    assert got == pytest.approx(want, abs=1e-4, rel=1e-5)
    # The prompt is context, not scored: moving a token from prompt to completion changes it.
    s = samples[0]
    moved = Sample(
        **{
            **s.__dict__,
            "prompt_ids": s.prompt_ids[:-1],
            "completion_ids": s.prompt_ids[-1:] + s.completion_ids,
        }
    )
    assert reference_logprobs(workspace / "sft", [moved], device="cpu")[0] < got[0] - 1e-3


# --- completions.jsonl -------------------------------------------------------------------------


def test_completion_records_mask_the_generated_tokens_and_share_reference_rewards():
    samples = [
        Sample("a", 1, "en", [1, 5, 6], [7, 11], "x", "assistant_end"),
        Sample("a", 0, "en", [1, 5, 6], [8, 9, 11], "y", "assistant_end"),
        Sample("b", 0, "de", [1, 4], [20], "z", "length"),
        Sample("b", 1, "de", [1, 4], [21, 22], "w", "length"),
    ]
    rewards = [0.5, 0.25, 0.0, 1.0]
    records = completion_records(samples, rewards, [-1.0, -2.0, -3.0, -4.0])
    for rec, s, r in zip(records, samples, rewards, strict=True):
        mask = rec["completion_mask"]
        assert len(mask) == len(rec["input_ids"])
        assert [t for t, m in zip(rec["input_ids"], mask, strict=True) if m] == s.completion_ids
        assert [t for t, m in zip(rec["input_ids"], mask, strict=True) if not m] == s.prompt_ids
        assert rec["reward"] == r
    assert records[0]["reference_rewards"] == records[1]["reference_rewards"] == [0.25, 0.5]
    assert records[2]["reference_rewards"] == records[3]["reference_rewards"] == [0.0, 1.0]
    assert [r["completion_id"] for r in records] == ["a:1", "a:0", "b:0", "b:1"]
    with pytest.raises(ApertusError, match="not finite"):
        completion_records(samples, [0.1, math.nan, 0.2, 0.3], [-1.0] * 4)


# --- entry points ------------------------------------------------------------------------------

CONFIG = {"n_samples": 3, "max_new_tokens": 8, "seed": 11, "batch_size": 4, "device": "cpu"}


def run_cli(*args) -> None:
    main([str(a) for a in args])


@pytest.fixture(scope="module")
def cli_run(workspace, prompts):
    out = workspace / "cli"
    config = json.dumps(CONFIG)
    run_cli(
        "sample",
        "--config",
        config,
        "--manifest",
        out / "sample.json",
        "--model",
        workspace / "sft",
        "--prompts",
        workspace / "prompts.jsonl",
        "--output",
        out / "samples",
    )
    run_cli(
        "score",
        "--config",
        config,
        "--manifest",
        out / "score.json",
        "--model",
        workspace / "sft",
        "--samples",
        out / "samples",
        "--prompts",
        workspace / "prompts.jsonl",
        "--output",
        out / "scored",
    )
    return out


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_sample_command_writes_every_sample_of_every_prompt(cli_run, workspace, prompts):
    rows = read_jsonl(cli_run / "samples" / "samples.jsonl")
    assert [(r["prompt_id"], r["sample_index"]) for r in rows] == [
        (p.id, j) for p in prompts for j in range(3)
    ]
    direct = sample(workspace / "sft", prompts, n=3, max_new_tokens=8, seed=11, batch_size=1)
    assert [r["completion_ids"] for r in rows] == [s.completion_ids for s in direct]
    manifest = json.loads((cli_run / "sample.json").read_text())
    assert manifest["stage"] == "posttrain" and manifest["step"] == "qrpo_sample"


def test_score_command_writes_consistent_quantile_inputs(cli_run, workspace, prompts, hf):
    model, _ = hf
    samples = read_jsonl(cli_run / "samples" / "samples.jsonl")
    records = read_jsonl(cli_run / "scored" / "completions.jsonl")
    assert len(records) == len(samples) == 3 * len(prompts)
    refs = {p.id: p.reference for p in prompts}
    chrf = CHRF()
    by_prompt: dict[str, list[float]] = {}
    for rec, s in zip(records, samples, strict=True):
        assert set(rec) == {
            "prompt_id",
            "completion_id",
            "input_ids",
            "completion_mask",
            "reward",
            "reference_rewards",
            "reference_logp",
        }
        assert rec["input_ids"] == s["prompt_ids"] + s["completion_ids"]
        assert rec["completion_mask"] == [0] * len(s["prompt_ids"]) + [1] * len(s["completion_ids"])
        want = chrf.corpus_score([s["text"]], [[refs[s["prompt_id"]]]]).score / 100
        assert rec["reward"] == pytest.approx(want, abs=1e-12)
        by_prompt.setdefault(rec["prompt_id"], []).append(rec["reward"])
        assert rec["reference_logp"] == pytest.approx(
            token_by_token_logp(model, s["prompt_ids"], s["completion_ids"]), abs=1e-4
        )
    # Every sample is one of its prompt's reference samples: reference_rewards are exactly the
    # rewards of the prompt's samples, in sample order, and the same on each of its lines.
    for rec in records:
        assert rec["reference_rewards"] == by_prompt[rec["prompt_id"]]
    assert len({r["reward"] for r in records}) > 3  # the rewards do differ
    summary = json.loads((cli_run / "scored" / "rewards.json").read_text())
    rewards = [r["reward"] for r in records]
    assert summary["mean"] == pytest.approx(sum(rewards) / len(rewards))
    langs = {p.id: p.language for p in prompts}
    en = [r["reward"] for r in records if langs[r["prompt_id"]] == "en"]
    assert summary["per_language"]["en"] == {"count": 6, "mean": pytest.approx(sum(en) / 6)}
    assert set(summary["per_language"]) == {"en", "de", "fr"}
    manifest = json.loads((cli_run / "score.json").read_text())
    assert manifest["step"] == "qrpo_score"


def test_score_refuses_samples_that_do_not_match_the_prompts(cli_run, workspace, tmp_path):
    rows = read_jsonl(cli_run / "samples" / "samples.jsonl")
    config = json.dumps(CONFIG)

    def score(sample_rows, prompts_file=workspace / "prompts.jsonl"):
        (tmp_path / "s").mkdir(exist_ok=True)
        write_jsonl(tmp_path / "s" / "samples.jsonl", sample_rows)
        run_cli(
            "score",
            "--config",
            config,
            "--manifest",
            tmp_path / "m.json",
            "--model",
            workspace / "sft",
            "--samples",
            tmp_path / "s",
            "--prompts",
            prompts_file,
            "--output",
            tmp_path / "out",
        )

    with pytest.raises(ApertusError, match="without their 3 samples"):
        score(rows[:-1])
    with pytest.raises(ApertusError, match=r"samples.jsonl line 2: sample .* already on line 1"):
        score([rows[0], rows[0], *rows[2:]])
    outside = [dict(rows[0], completion_ids=[5, 10**6]), *rows[1:]]
    with pytest.raises(ApertusError, match="token ids outside the vocabulary"):
        score(outside)
    changed = [dict(rows[0], prompt_ids=rows[0]["prompt_ids"][:-1]), *rows[1:]]
    with pytest.raises(ApertusError, match="was not sampled from this prompt"):
        score(changed)
    with pytest.raises(ApertusError, match=r"samples.jsonl line 3: not valid JSON"):
        (tmp_path / "s").mkdir(exist_ok=True)
        text = "".join(json.dumps(r) + "\n" for r in rows[:2]) + "{oops\n"
        (tmp_path / "s" / "samples.jsonl").write_text(text)
        run_cli(
            "score",
            "--config",
            config,
            "--manifest",
            tmp_path / "m.json",
            "--model",
            workspace / "sft",
            "--samples",
            tmp_path / "s",
            "--prompts",
            workspace / "prompts.jsonl",
            "--output",
            tmp_path / "out",
        )
    other = [dict(PROMPTS[0], id="zz"), *PROMPTS[1:]]
    with pytest.raises(ApertusError, match="'en-1' is not in the prompts file"):
        score(rows, write_jsonl(tmp_path / "other.jsonl", other))
    assert not (tmp_path / "m.json").exists()


def test_read_samples_orders_by_prompt_and_index(cli_run, prompts):
    path = cli_run / "samples" / "samples.jsonl"
    rows = read_jsonl(path)
    shuffled = path.parent / "shuffled.jsonl"
    write_jsonl(shuffled, rows[::-1])
    assert read_samples(shuffled, prompts, 3) == read_samples(path, prompts, 3)
    with pytest.raises(ApertusError, match=r"sample_index must be in 0\.\.1"):
        read_samples(path, prompts, 2)


# --- held-out answers per policy, and the report -----------------------------------------------

REPORT_CONFIG = {**CONFIG, "max_new_tokens": 6}
POLICIES = ("sft", "aligned", "stopping")


@pytest.fixture(scope="module")
def policies(workspace, stopping_model) -> dict[str, Path]:
    """Three policies on one tokenizer: the SFT model, another random one, and one that often
    ends its turn after a few tokens."""
    aligned = make_causal_lm(workspace / "aligned", workspace / "tokenizer", seed=2)
    return {"sft": workspace / "sft", "aligned": aligned, "stopping": stopping_model}


def run_heldout(model: Path, prompts_file: Path, output: Path) -> Path:
    run_cli(
        "heldout",
        "--config",
        json.dumps(REPORT_CONFIG),
        "--manifest",
        output.with_name(output.name + ".manifest.json"),
        "--model",
        model,
        "--prompts",
        prompts_file,
        "--output",
        output,
    )
    return output


def run_report(heldout: dict[str, Path], out: Path, config=REPORT_CONFIG) -> dict:
    run_cli(
        "report",
        "--config",
        json.dumps(config),
        "--manifest",
        out / "report.manifest.json",
        *(a for name, folder in heldout.items() for a in ("--policy", f"{name}={folder}")),
        "--output",
        out / "report.json",
        "--markdown",
        out / "report.md",
    )
    return json.loads((out / "report.json").read_text())


@pytest.fixture(scope="module")
def heldout_run(workspace, policies) -> Path:
    """One heldout step per policy (as the workflow's one job per policy), then the report."""
    out = workspace / "heldout_run"
    prompts_file = workspace / "prompts.jsonl"
    heldout = {
        name: run_heldout(model, prompts_file, out / name) for name, model in policies.items()
    }
    run_report(heldout, out)
    return out


def test_heldout_step_scores_the_greedy_answers_of_one_policy(heldout_run, policies, prompts, hf):
    result = json.loads((heldout_run / "sft" / "rewards.json").read_text())
    assert result["model"] == str(policies["sft"]) and result["config"] == REPORT_CONFIG
    model, tok = hf
    stops = {tok.convert_tokens_to_ids("<|assistant_end|>"), tok.eos_token_id}
    chrf = CHRF()
    for p in prompts:  # the SFT answers are greedy and scored with chrF
        ids = tok.apply_chat_template(list(p.messages), add_generation_prompt=True)["input_ids"]
        answer = naive_sampler(model, ids, 0, temperature=0, max_new_tokens=6, stops=stops)
        body = answer[:-1] if answer[-1] in stops else answer
        text = tok.decode(body, skip_special_tokens=True)
        entry = result["greedy"]["prompts"][p.id]
        assert entry["answer"] == text
        assert entry["reward"] == pytest.approx(
            chrf.sentence_score(text, [p.reference]).score / 100
        )
    for part in ("greedy", "sampled"):
        per_prompt = [v["reward"] for v in result[part]["prompts"].values()]
        assert result[part]["mean"] == pytest.approx(sum(per_prompt) / len(per_prompt))
        assert result[part]["count"] == len(prompts)
    manifest = json.loads((heldout_run / "sft.manifest.json").read_text())
    assert manifest["step"] == "heldout" and manifest["summary"]["prompts"] == len(prompts)


def test_ended_turn_is_the_fraction_of_answers_closed_by_assistant_end(
    heldout_run, policies, prompts
):
    """Greedy answers and the n samples per prompt (seeded with seed + 1) of each policy: the
    fraction whose finish reason is <|assistant_end|>, not max_new_tokens nor </s>."""
    options = dict(max_new_tokens=6, batch_size=4, device="cpu")
    for name, model in policies.items():
        result = json.loads((heldout_run / name / "rewards.json").read_text())
        greedy = generate_answers(model, prompts, temperature=0.0, seed=0, **options)
        sampled = generate_answers(model, prompts, n=3, temperature=1.0, seed=12, **options)
        for part, answers in (("greedy", greedy), ("sampled", sampled)):
            ended = [a.finish_reason == "assistant_end" for a in answers]
            assert result[part]["ended_turn"] == sum(ended) / len(ended), (name, part)
    stopping = json.loads((heldout_run / "stopping" / "rewards.json").read_text())
    assert 0 < stopping["sampled"]["ended_turn"] < 1  # the stopping model ends some turns


def test_report_compares_each_policy_with_the_first(heldout_run, prompts):
    report = json.loads((heldout_run / "report.json").read_text())
    assert report["baseline"] == "sft" and report["order"] == list(POLICIES)
    assert report["prompt_count"] == len(prompts) and report["reward"]["kind"] == "chrf"
    assert (report["sampled"]["n"], report["sampled"]["temperature"]) == (3, 1.0)
    for table in (report, report["sampled"]):
        sft = table["models"]["sft"]["prompts"]
        for name in POLICIES[1:]:
            own = table["models"][name]["prompts"]
            diffs = [own[p]["reward"] - sft[p]["reward"] for p in sft]
            cmp = table["comparison"][name]
            assert cmp["win_rate"] == sum(d > 0 for d in diffs) / len(diffs)
            assert cmp["tie_rate"] == sum(d == 0 for d in diffs) / len(diffs)
            assert cmp["mean_delta"] == pytest.approx(
                table["models"][name]["mean"] - table["models"]["sft"]["mean"]
            )
            assert cmp["delta_stderr"] == pytest.approx(
                statistics.stdev(diffs) / math.sqrt(len(diffs))
            )
    md = (heldout_run / "report.md").read_text()
    assert "| sft |" in md and "| aligned |" in md and "chrf" in md
    for title, table in (("# Expected reward", report["sampled"]), ("# Reward of greedy", report)):
        head, rows = markdown_table(md, title)
        assert head[-1] == "ended turn"
        for name in POLICIES:
            assert rows[name][-1] == f"{table['models'][name]['ended_turn']:.2f}"
    manifest = json.loads((heldout_run / "report.manifest.json").read_text())
    assert manifest["step"] == "qrpo_report"
    assert [Path(i["path"]).parent.name for i in manifest["inputs"]] == list(POLICIES)


def markdown_table(markdown: str, title: str) -> tuple[list[str], dict[str, list[str]]]:
    """The header and the rows (by model) of the Markdown table under `title`."""
    lines = markdown[markdown.index(title) :].splitlines()[2:]
    table = list(itertools.takewhile(lambda line: line.startswith("|"), lines))
    cells = [[c.strip() for c in line.strip("|").split("|")] for line in table]
    return cells[0], {row[0]: row for row in cells[2:]}


def test_split_report_equals_both_policies_in_one_process(heldout_run, policies, prompts):
    """The report from one heldout job per policy holds exactly the numbers of answering and
    scoring every policy in one process with one reward: each sample has its own seeded
    stream, so a policy's answers do not depend on which policies share the process."""
    cfg = SamplingConfig.from_dict(REPORT_CONFIG)
    reward = build_reward(cfg.reward)
    options = dict(max_new_tokens=6, batch_size=4, dtype="float32", device="cpu")
    greedy, sampled = {}, {}
    for name, model in policies.items():
        greedy[name] = {"folder": str(model), **mean_reward(model, prompts, reward, **options)}
        sampled[name] = mean_reward(
            model, prompts, reward, n=3, temperature=1.0, seed=cfg.seed + 1, **options
        )
    report = json.loads((heldout_run / "report.json").read_text())
    assert report["models"] == greedy
    assert report["sampled"]["models"] == sampled
    assert report["comparison"] == reward_comparison(greedy)
    assert report["sampled"]["comparison"] == reward_comparison(sampled)


def test_report_loads_no_model(heldout_run, tmp_path, monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("the report loaded a model")

    monkeypatch.setattr(sampling, "generate_answers", refuse)
    monkeypatch.setattr(sampling, "load_causal_lm", refuse)
    heldout = {name: heldout_run / name for name in ("sft", "stopping")}
    report = run_report(heldout, tmp_path)
    assert report["order"] == ["sft", "stopping"]
    assert (
        report["sampled"]["models"]["stopping"]
        == json.loads((heldout_run / "stopping" / "rewards.json").read_text())["sampled"]
    )


def test_report_refuses_heldout_results_it_cannot_compare(heldout_run, tmp_path):
    heldout = {name: heldout_run / name for name in POLICIES}
    with pytest.raises(ApertusError, match=r"made with another posttrain\.qrpo_data config"):
        run_report(heldout, tmp_path, config={**REPORT_CONFIG, "n_samples": 4})
    with pytest.raises(ApertusError, match="--policy names must differ"):
        run_cli(
            "report",
            "--config",
            json.dumps(REPORT_CONFIG),
            "--manifest",
            tmp_path / "m.json",
            "--policy",
            f"sft={heldout_run / 'sft'}",
            "--policy",
            f"sft={heldout_run / 'aligned'}",
            "--output",
            tmp_path / "r.json",
        )
    with pytest.raises(ApertusError, match="missing input"):
        run_report({"sft": heldout_run / "sft", "qrpo": tmp_path / "nowhere"}, tmp_path)
    fewer = tmp_path / "fewer"
    fewer.mkdir()
    result = json.loads((heldout_run / "aligned" / "rewards.json").read_text())
    result["sampled"]["prompts"].pop("en-1")
    (fewer / "rewards.json").write_text(json.dumps(result))
    with pytest.raises(ApertusError, match=r"policy qrpo \(sampled\) answered other held-out"):
        run_report({"sft": heldout_run / "sft", "qrpo": fewer}, tmp_path)
    (fewer / "rewards.json").write_text(json.dumps({"greedy": {}}))
    with pytest.raises(ApertusError, match="expected an object with the keys config, greedy"):
        run_report({"sft": heldout_run / "sft", "qrpo": fewer}, tmp_path)
    assert not (tmp_path / "report.json").exists()


# --- bad input ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("line", "fragment"),
    [
        ("{not json", "line 2: not valid JSON"),
        (json.dumps({**PROMPTS[0], "id": "x", "reference": None}), "line 2: 'reference'"),
        (json.dumps({**PROMPTS[0], "id": "en-1"}), "line 2: prompt id 'en-1' already used"),
        (json.dumps({**PROMPTS[0], "id": "x", "messages": []}), "line 2: 'messages'"),
        (
            json.dumps({**PROMPTS[0], "id": "x", "messages": [{"role": "bot", "content": "?"}]}),
            "line 2: message 0 has role 'bot'",
        ),
        (
            json.dumps(
                {
                    **PROMPTS[0],
                    "id": "x",
                    "messages": [
                        {"role": "user", "content": "?"},
                        {"role": "assistant", "content": "!"},
                    ],
                }
            ),
            "line 2: the last message is the assistant's",
        ),
        (json.dumps(["a"]), "line 2: a prompt is a JSON object"),
    ],
)
def test_bad_prompt_lines_are_named(tmp_path, line, fragment):
    path = tmp_path / "prompts.jsonl"
    path.write_text(json.dumps(PROMPTS[0]) + "\n" + line + "\n")
    with pytest.raises(ApertusError, match=f"{path}.*{fragment}".replace("?", r"\?")):
        load_prompts(path)


def test_empty_or_missing_prompt_files_are_refused(tmp_path):
    (tmp_path / "empty.jsonl").write_text("\n\n")
    with pytest.raises(ApertusError, match="no prompts"):
        load_prompts(tmp_path / "empty.jsonl")
    with pytest.raises(ApertusError, match="does not exist"):
        load_prompts(tmp_path / "missing.jsonl")


@pytest.mark.parametrize(
    ("config", "fragment"),
    [
        ({"n_sample": 3}, "unknown key.*n_sample"),
        ({"n_samples": 0}, "n_samples must be a positive integer"),
        ({"temperature": 0}, "temperature must be a positive number"),
        ({"engine": "tgi"}, "engine must be one of"),
        ({"reward": {"kind": "bleu"}}, "reward.kind must be one of chrf, reward_model, judge"),
        ({"reward": {"kind": "reward_model"}}, "reward.model: the reward_model reward needs"),
        (
            {"reward": {"kind": "judge", "model": "x", "rubric": "a", "rubric_file": "b"}},
            "not both",
        ),
    ],
)
def test_bad_config_is_refused(config, fragment):
    with pytest.raises(ApertusError, match=fragment):
        SamplingConfig.from_dict(config)


def test_defaults_follow_the_recipe():
    cfg = SamplingConfig.from_dict({})
    assert (cfg.n_samples, cfg.temperature, cfg.reward.kind) == (10, 1.0, "chrf")


def test_missing_model_folder_and_tokenizer_without_assistant_end(tmp_path, workspace, prompts):
    with pytest.raises(ApertusError, match=r"model folder .*nowhere does not exist"):
        sample(tmp_path / "nowhere", prompts)
    (tmp_path / "half").mkdir()
    with pytest.raises(ApertusError, match=r"has no config\.json"):
        sample(tmp_path / "half", prompts)
    # A tokenizer whose chat template is there but whose vocabulary lacks <|assistant_end|>.
    broken = tmp_path / "broken"
    model = AutoModelForCausalLM.from_pretrained(workspace / "sft")
    model.save_pretrained(broken)
    tok = AutoTokenizer.from_pretrained(workspace / "sft")
    tok.save_pretrained(broken)
    tj = json.loads((broken / "tokenizer.json").read_text())
    tj["added_tokens"] = [t for t in tj["added_tokens"] if t["content"] != "<|assistant_end|>"]
    tj["model"]["vocab"].pop("<|assistant_end|>")
    (broken / "tokenizer.json").write_text(json.dumps(tj))
    cfg = json.loads((broken / "tokenizer_config.json").read_text())
    cfg["additional_special_tokens"] = [
        t for t in cfg.get("additional_special_tokens", []) if t != "<|assistant_end|>"
    ]
    cfg.pop("extra_special_tokens", None)
    cfg.pop("added_tokens_decoder", None)
    (broken / "tokenizer_config.json").write_text(json.dumps(cfg))
    for name in ("special_tokens_map.json",):
        path = broken / name
        if path.exists():
            stm = json.loads(path.read_text())
            stm["additional_special_tokens"] = [
                t for t in stm.get("additional_special_tokens", []) if t != "<|assistant_end|>"
            ]
            path.write_text(json.dumps(stm))
    with pytest.raises(ApertusError, match="no <\\|assistant_end\\|> token"):
        sample(broken, prompts)


def test_unknown_command_is_refused():
    with pytest.raises(ApertusError, match="usage"):
        main(["train"])


def test_module_entry_point_reports_bad_input_in_one_line(workspace, tmp_path):
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "apertus.posttrain.sampling",
            "sample",
            "--config",
            json.dumps({"reward": {"kind": "bleu"}}),
            "--manifest",
            tmp_path / "m.json",
            "--model",
            workspace / "sft",
            "--prompts",
            workspace / "prompts.jsonl",
            "--output",
            tmp_path / "out",
        ],
        capture_output=True,
        text=True,
        cwd=Path(__file__).resolve().parents[2],
    )
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines()[-1] == (
        "error: posttrain.qrpo_data.reward.kind must be one of chrf, reward_model, judge, "
        "not 'bleu'"
    )
    assert not (tmp_path / "out").exists() and not (tmp_path / "m.json").exists()
