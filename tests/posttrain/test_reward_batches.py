"""The reward model and the judge at scale: scored in batches with the same results as one at a
time, by their own tokenizers (not the policy's), refusing what exceeds their context by the
prompt's id; the judge's prompt template as a file, recorded by its SHA-256.

Checked against direct forward passes of tiny random models (those of test_rewards.py).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
import torch
from transformers import AutoTokenizer, LlamaForSequenceClassification

from apertus.core import ApertusError
from apertus.core.config import REPO_ROOT
from apertus.posttrain.reward_config import (
    DEFAULT_RUBRIC,
    JUDGE_TEMPLATE,
    RewardConfig,
    describe_reward,
    load_judge_template,
    rubric_files,
)
from apertus.posttrain.rewards import build_reward
from tests.posttrain.test_rewards import (
    MESSAGES,
    direct_expected_rating,
    exchange,
    make_reward_model,
)
from tests.posttrain.test_sampling import TEXTS, make_causal_lm, make_tokenizer

COMPLETIONS = ["The quick brown fox.", "A lazy dog sleeps.", "", "Der Hund.", "Le renard brun."]


@pytest.fixture(scope="module")
def reward_model_dir(tmp_path_factory) -> Path:
    """A reward model whose tokenizer is not the policy's (trained on other texts) and whose
    pad token is <|assistant_end|>, the last token of every rendered conversation: pooling at
    "the last token that is not padding" would pick the wrong one."""
    root = tmp_path_factory.mktemp("rm_batches")
    make_tokenizer(root / "tokenizer", [t.upper() for t in TEXTS] + TEXTS[:2])
    folder = make_reward_model(root / "reward_model", root / "tokenizer")
    tok = AutoTokenizer.from_pretrained(folder)
    config = json.loads((folder / "config.json").read_text())
    config["pad_token_id"] = tok.convert_tokens_to_ids("<|assistant_end|>")
    (folder / "config.json").write_text(json.dumps(config))
    return folder


@torch.no_grad()
def direct_reward(folder: Path, completion: str) -> float:
    model = LlamaForSequenceClassification.from_pretrained(folder).eval()
    tok = AutoTokenizer.from_pretrained(folder)
    ids = tok.apply_chat_template([*MESSAGES, {"role": "assistant", "content": completion}])
    hidden = model.model(torch.tensor([ids["input_ids"]])).last_hidden_state[0, -1]
    return float(hidden @ model.score.weight[0])


def test_a_batched_reward_model_scores_each_conversation_at_its_last_token(reward_model_dir):
    config = {"kind": "reward_model", "model": str(reward_model_dir), "device": "cpu"}
    batched = build_reward({**config, "batch_size": 3}).score([exchange(c) for c in COMPLETIONS])
    single = build_reward({**config, "batch_size": 1}).score([exchange(c) for c in COMPLETIONS])
    for completion, b, s in zip(COMPLETIONS, batched, single, strict=True):
        direct = direct_reward(reward_model_dir, completion)
        assert b == pytest.approx(direct, abs=1e-5) and s == pytest.approx(direct, abs=1e-5)
    assert len(set(batched)) == len(COMPLETIONS)


def test_a_conversation_longer_than_the_reward_models_context_names_its_prompt(
    reward_model_dir, tmp_path
):
    folder = tmp_path / "short_rm"
    folder.mkdir()
    for f in reward_model_dir.iterdir():
        (folder / f.name).write_bytes(f.read_bytes())
    config = json.loads((folder / "config.json").read_text())
    config["max_position_embeddings"] = 40  # "Fox." fits (30 tokens), the long answer not
    (folder / "config.json").write_text(json.dumps(config))
    reward = build_reward({"kind": "reward_model", "model": str(folder), "device": "cpu"})
    long = exchange("The quick brown fox jumps over the lazy dog. " * 4, pid="long-1")
    with pytest.raises(ApertusError, match=r"prompt long-1: \d+ tokens for the reward model"):
        reward.score([exchange("Fox.", pid="short-1"), long])


@pytest.fixture(scope="module", params=["ten_is_one_token", "ten_is_two_tokens"])
def judge_dir(request, tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp(request.param)
    texts = TEXTS if request.param == "ten_is_one_token" else [t for t in TEXTS if "10" not in t]
    make_tokenizer(root / "tokenizer", texts)
    return make_causal_lm(root / "judge", root / "tokenizer", seed=4, scale=0.5, head_scale=0.1)


def test_a_batched_judge_gives_each_answer_its_expected_rating(judge_dir):
    config = {"kind": "judge", "model": str(judge_dir), "device": "cpu", "batch_size": 2}
    scores = build_reward(config).score([exchange(c) for c in COMPLETIONS])
    for completion, score in zip(COMPLETIONS, scores, strict=True):
        want = direct_expected_rating(judge_dir, DEFAULT_RUBRIC, completion)
        assert score == pytest.approx(want, abs=1e-5)


def test_the_judge_reads_its_prompt_template_from_a_file(judge_dir, tmp_path):
    template = "Rubric: {rubric}\nChat: {conversation}\nAnswer: {answer}\nScore 1-10."
    (tmp_path / "judge.txt").write_text(template)
    config = RewardConfig.from_dict(
        {
            "kind": "judge",
            "model": str(judge_dir),
            "device": "cpu",
            "template_file": str(tmp_path / "judge.txt"),
        }
    )
    reward = build_reward(config)
    text = AutoTokenizer.from_pretrained(judge_dir).decode(reward.prompt_ids(exchange("Fox.")))
    assert "Chat: System: Be brief." in text and "Answer: Fox." in text
    record = describe_reward(config)
    assert record["template_sha256"] == hashlib.sha256(template.encode()).hexdigest()
    assert rubric_files(config) == [tmp_path / "judge.txt"]
    # Without a file, the built-in template's text is what is hashed.
    builtin = describe_reward(RewardConfig.from_dict({"kind": "judge", "model": "j"}))
    assert builtin["template_sha256"] == hashlib.sha256(JUDGE_TEMPLATE.encode()).hexdigest()
    assert describe_reward(RewardConfig.from_dict({}))["template_sha256"] is None


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("{rubric} {answer}", "found {answer}, {rubric}"),
        ("{rubric} {conversation} {answer} {extra}", "{extra}"),
        ("{rubric} {conversation} {answer} {", "not a format string"),
    ],
)
def test_a_judge_template_without_its_fields_is_refused(tmp_path, text, fragment):
    (tmp_path / "judge.txt").write_text(text)
    config = RewardConfig.from_dict(
        {"kind": "judge", "model": "j", "template_file": str(tmp_path / "judge.txt")}
    )
    with pytest.raises(ApertusError, match="template_file") as error:
        load_judge_template(config, "posttrain.qrpo_data.reward")
    assert fragment in str(error.value)
    with pytest.raises(ApertusError, match="only used by the judge"):
        RewardConfig.from_dict({"template_file": "x.txt"}).check()


def test_the_presets_judge_template_is_the_built_in_one():
    config = RewardConfig.from_dict(
        {"kind": "judge", "model": "j", "template_file": "config/charter/judge-prompt.txt"}
    )
    assert load_judge_template(config, "x") == JUDGE_TEMPLATE
    assert (REPO_ROOT / "config/charter/judge-prompt.txt").is_file()
