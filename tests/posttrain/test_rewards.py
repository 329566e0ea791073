"""QRPO's pointwise rewards: chrF against the reference answer, a reward model, an LLM judge.

chrF is checked against sacrebleu's corpus-level score of the same single sentence and against
hand-computed values; the reward model against a direct forward pass of a tiny random
LlamaForSequenceClassification; the judge against the expectation computed by hand from a tiny
random causal LM's next-token distributions, for a tokenizer where "10" is one token and one
where it is "1" "0".
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from sacrebleu.metrics import CHRF
from transformers import (
    AutoModelForCausalLM,
    AutoTokenizer,
    LlamaConfig,
    LlamaForSequenceClassification,
)

from apertus.core import ApertusError
from apertus.posttrain.reward_config import DEFAULT_RUBRIC, RewardConfig
from apertus.posttrain.rewards import (
    ChrfReward,
    Exchange,
    build_reward,
    chrf_reward,
    expected_rating,
    judge_prompt,
    rating_probabilities,
    summarize_rewards,
)
from tests.posttrain.test_sampling import TEXTS, make_causal_lm, make_tokenizer

MESSAGES = ({"role": "system", "content": "Be brief."}, {"role": "user", "content": "Who jumps?"})


def exchange(completion: str, reference: str = "The quick brown fox.", pid: str = "p") -> Exchange:
    return Exchange(pid, MESSAGES, completion, reference)


# --- chrF --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("hypothesis", "reference"),
    [
        ("The quick brown fox jumps.", "The quick brown fox jumps over the dog."),
        ("Der schnelle Fuchs", "Der schnelle braune Fuchs springt."),
        ("le chien", "Le renard brun rapide."),
        ("Привет, мир", "Привет мир!"),
        ("", "Something."),
        ("zzz", "aaa"),
    ],
)
def test_chrf_reward_is_sacrebleus_chrf_over_100(hypothesis, reference):
    corpus = CHRF().corpus_score([hypothesis], [[reference]]).score / 100
    assert chrf_reward(hypothesis, reference, CHRF()) == pytest.approx(corpus, abs=1e-12)
    assert ChrfReward().score([exchange(hypothesis, reference)]) == [pytest.approx(corpus)]


def test_chrf_hand_cases():
    metric = CHRF()
    # "abc" vs "abd": unigram P = R = 2/3, bigram 1/2, trigram 0; orders 4-6 are absent from
    # both and left out, so P = R = (2/3 + 1/2 + 0) / 3 = 7/18 and F2 = 7/18.
    assert chrf_reward("abc", "abd", metric) == pytest.approx(7 / 18)
    # "ab" vs "abcd": P = (1 + 1) / 2 = 1, R = (1/2 + 1/3) / 2 = 5/12 (orders with no
    # hypothesis n-gram are left out); F2 = 5PR / (4P + R) = 25/53. Swapped: 25/32 (beta = 2
    # weighs recall more).
    assert chrf_reward("ab", "abcd", metric) == pytest.approx(25 / 53)
    assert chrf_reward("abcd", "ab", metric) == pytest.approx(25 / 32)
    assert chrf_reward("same words", "same words", metric) == 1.0
    assert chrf_reward("same  wo rds", "same words", metric) == 1.0  # whitespace is ignored
    assert chrf_reward("xyz", "abc", metric) == 0.0


def test_chrf_orders_completions_by_closeness_to_the_reference():
    reward = ChrfReward()
    scores = reward.score(
        [exchange(t) for t in ("The quick brown fox.", "The quick fox.", "A dog.", "")]
    )
    assert scores[0] == 1.0 and scores[0] > scores[1] > scores[2] > scores[3] == 0.0


def test_chrf_needs_a_reference_answer():
    with pytest.raises(
        ApertusError, match="prompt q7: the chrf reward needs a non-empty reference"
    ):
        ChrfReward().score([exchange("x", "  ", pid="q7")])


# --- reward model ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory) -> Path:
    return make_tokenizer(tmp_path_factory.mktemp("tok") / "tokenizer")


@pytest.fixture(scope="module")
def reward_model_dir(tmp_path_factory, tokenizer_dir) -> Path:
    return make_reward_model(tmp_path_factory.mktemp("rm") / "reward_model", tokenizer_dir)


def make_reward_model(folder: Path, tokenizer_dir: Path) -> Path:
    """A tiny random LlamaForSequenceClassification with one label, saved with the tokenizer."""
    tok = AutoTokenizer.from_pretrained(tokenizer_dir)
    config = LlamaConfig(
        vocab_size=len(tok),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        num_labels=1,
        pad_token_id=tok.pad_token_id,
    )
    torch.manual_seed(0)
    model = LlamaForSequenceClassification(config)
    with torch.no_grad():
        model.score.weight.normal_(0, 1.0)
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


def test_reward_model_score_is_the_logit_at_the_end_of_the_rendered_chat(reward_model_dir):
    reward = build_reward({"kind": "reward_model", "model": str(reward_model_dir), "device": "cpu"})
    completions = ["The quick brown fox.", "A lazy dog sleeps.", ""]
    scores = reward.score([exchange(c) for c in completions])
    model = LlamaForSequenceClassification.from_pretrained(reward_model_dir).eval()
    tok = AutoTokenizer.from_pretrained(reward_model_dir)
    for completion, score in zip(completions, scores, strict=True):
        conv = [*MESSAGES, {"role": "assistant", "content": completion}]
        ids = tok.apply_chat_template(conv)["input_ids"]
        assert tok.decode(ids).endswith(f"<|assistant_start|>{completion}<|assistant_end|>")
        with torch.no_grad():
            hidden = model.model(torch.tensor([ids])).last_hidden_state[0, -1]
            direct = float(hidden @ model.score.weight[0])
        assert score == pytest.approx(direct, abs=1e-5)
    assert len(set(scores)) == 3


def test_reward_model_must_have_one_label(tmp_path, tokenizer_dir):
    tok = AutoTokenizer.from_pretrained(tokenizer_dir)
    config = LlamaConfig(
        vocab_size=len(tok),
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        num_labels=2,
    )
    LlamaForSequenceClassification(config).save_pretrained(tmp_path / "two")
    tok.save_pretrained(tmp_path / "two")
    with pytest.raises(ApertusError, match="has 2 labels"):
        build_reward({"kind": "reward_model", "model": str(tmp_path / "two"), "device": "cpu"})


# --- judge -------------------------------------------------------------------------------------


def test_rating_probabilities_of_nested_multi_token_ratings():
    # Token 0 = "1", 2 = "0", 1 = "2". Ratings 1 = [0], 2 = [1], 10 = [0, 2], 100 = [0, 2, 2].
    dists = {
        (): torch.tensor([0.5, 0.3, 0.1, 0.1]),
        (0,): torch.tensor([0.1, 0.1, 0.4, 0.4]),
        (0, 2): torch.tensor([0.25, 0.25, 0.25, 0.25]),
    }
    probs = rating_probabilities(
        {1: [0], 2: [1], 10: [0, 2], 100: [0, 2, 2]}, lambda prefix: dists[prefix].log()
    )
    assert probs[2] == pytest.approx(0.3)
    assert probs[100] == pytest.approx(0.5 * 0.4 * 0.25)
    assert probs[10] == pytest.approx(0.5 * 0.4 - 0.5 * 0.4 * 0.25)  # "10" not followed by "0"
    assert probs[1] == pytest.approx(0.5 - 0.5 * 0.4)  # "1" not followed by "0"
    assert sum(probs.values()) == pytest.approx(0.8)
    assert expected_rating(probs) == pytest.approx(
        (1 * 0.3 + 2 * 0.3 + 10 * 0.15 + 100 * 0.05) / 0.8
    )


@pytest.fixture(scope="module", params=["ten_is_one_token", "ten_is_two_tokens"])
def judge_dir(request, tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp(request.param)
    texts = TEXTS if request.param == "ten_is_one_token" else [t for t in TEXTS if "10" not in t]
    make_tokenizer(root / "tokenizer", texts)
    # A flat output layer: the ratings and a "0" after "1" get non-negligible probability.
    folder = make_causal_lm(root / "judge", root / "tokenizer", seed=4, scale=0.5, head_scale=0.1)
    tok = AutoTokenizer.from_pretrained(folder)
    assert len(tok.encode("10", add_special_tokens=False)) == (
        1 if request.param == "ten_is_one_token" else 2
    )
    return folder


@torch.no_grad()
def direct_expected_rating(
    folder: Path, rubric: str, completion: str, split_ten: bool = True
) -> float:
    """The expectation by hand; with `split_ten` False a tokenizer's "1" "0" is (wrongly) not
    told apart from a 1, to show that the difference matters in this test."""
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    tok = AutoTokenizer.from_pretrained(folder)
    message = {"role": "user", "content": judge_prompt(rubric, MESSAGES, completion)}
    ids = tok.apply_chat_template([message], add_generation_prompt=True)["input_ids"]

    def next_probs(extra):
        return torch.softmax(model(torch.tensor([ids + extra])).logits[0, -1].double(), dim=-1)

    p = next_probs([])
    probs = {}
    for k in range(1, 10):
        (token,) = tok.encode(str(k), add_special_tokens=False)
        probs[k] = float(p[token])
    ten = tok.encode("10", add_special_tokens=False)
    if len(ten) == 1:
        probs[10] = float(p[ten[0]])
    else:  # "1" "0": a 1 is "1" not followed by "0"
        one, zero = ten
        q = next_probs([one])
        probs[10] = float(p[one] * q[zero])
        probs[1] = float(p[one] * (1 - q[zero])) if split_ten else float(p[one])
    return sum(k * v for k, v in probs.items()) / sum(probs.values())


def test_judge_score_is_the_expected_rating_of_its_next_token_distribution(judge_dir):
    reward = build_reward({"kind": "judge", "model": str(judge_dir), "device": "cpu"})
    completions = ["The quick brown fox.", "Der Hund."]
    scores = reward.score([exchange(c) for c in completions])
    for completion, score in zip(completions, scores, strict=True):
        assert 1 <= score <= 10
        assert score == pytest.approx(
            direct_expected_rating(judge_dir, DEFAULT_RUBRIC, completion), abs=1e-6
        )
    assert scores[0] != pytest.approx(scores[1], abs=1e-6)
    if len(AutoTokenizer.from_pretrained(judge_dir).encode("10", add_special_tokens=False)) == 2:
        wrong = direct_expected_rating(judge_dir, DEFAULT_RUBRIC, completions[0], split_ten=False)
        assert abs(wrong - scores[0]) > 1e-4


def test_judge_reads_its_rubric_from_a_file(judge_dir, tmp_path):
    rubric = "Answers about foxes are best. Rate them high."
    (tmp_path / "charter.txt").write_text(rubric + "\n")
    reward = build_reward(
        {
            "kind": "judge",
            "model": str(judge_dir),
            "rubric_file": str(tmp_path / "charter.txt"),
            "device": "cpu",
        }
    )
    prompt_text = AutoTokenizer.from_pretrained(judge_dir).decode(
        reward.prompt_ids(exchange("The fox."))
    )
    assert rubric in prompt_text and "The fox." in prompt_text and "Who jumps?" in prompt_text
    assert DEFAULT_RUBRIC not in prompt_text
    (score,) = reward.score([exchange("The fox.")])
    assert score == pytest.approx(direct_expected_rating(judge_dir, rubric, "The fox."), abs=1e-6)


# --- configuration and summaries ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("config", "fragment"),
    [
        ({"kind": "bleu"}, "reward.kind must be one of chrf, reward_model, judge, not 'bleu'"),
        ({"kind": "judge"}, "reward.model: the judge reward needs a model folder"),
        ({"kind": "chrf", "model": "x"}, "not used by the chrf reward"),
        ({"kind": "chrf", "rubric": "x"}, "only used by the judge"),
        ({"kind": "chrf", "beta": 0}, "reward.beta must be a positive integer"),
        ({"kind": "chrf", "colour": 1}, "unknown key.*colour"),
        ({"kind": "reward_model", "model": "/nowhere/rm"}, "reward model folder /nowhere/rm does"),
        ({"kind": "judge", "model": "/nowhere/j"}, "judge folder /nowhere/j does not exist"),
    ],
)
def test_bad_reward_config_is_refused(config, fragment):
    with pytest.raises(ApertusError, match=fragment):
        build_reward(config)


def test_missing_rubric_file_is_refused(judge_dir, tmp_path):
    with pytest.raises(ApertusError, match=r"rubric_file .*absent\.txt does not exist"):
        build_reward(
            {"kind": "judge", "model": str(judge_dir), "rubric_file": str(tmp_path / "absent.txt")}
        )


def test_default_reward_is_chrf():
    assert RewardConfig.from_dict(None).kind == "chrf"
    assert isinstance(build_reward(None), ChrfReward)


def test_summarize_rewards_per_language():
    summary = summarize_rewards(["en", "de", "en", "fr"], [0.5, 0.25, 1.0, 0.0]).as_dict()
    assert summary["count"] == 4 and summary["mean"] == pytest.approx(1.75 / 4)
    assert summary["per_language"] == {
        "de": {"count": 1, "mean": 0.25},
        "en": {"count": 2, "mean": 0.75},
        "fr": {"count": 1, "mean": 0.0},
    }
    assert math.isclose(
        sum(v["count"] * v["mean"] for v in summary["per_language"].values()) / 4,
        summary["mean"],
    )
