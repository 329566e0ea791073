"""QRPO's rewards by prompt category (RECIPE.md §7): a reward model for standard prompts and an
LLM judge with the Swiss AI Charter for controversial ones.

Each prompt's samples are checked against the reward its category names, computed directly with
the same tiny local stand-ins as tests/posttrain/test_rewards.py (a random sequence-classification
reward model and a random causal-LM judge); the score and heldout steps are run end to end on a
tiny SFT model to check the records (prompts per category, the reward each used, the rubric's
SHA-256) and that a reward is loaded only when some prompt needs it.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
import yaml

from apertus.core import REPO_ROOT, ApertusError
from apertus.core.config import shipped_path
from apertus.core.stage import run_main
from apertus.posttrain import rewards as rewards_module
from apertus.posttrain.instructions import (
    InstructionConfig,
    check_prompt,
    read_conversations,
    split_conversations,
)
from apertus.posttrain.reward_config import describe_reward
from apertus.posttrain.rewards import Exchange, RewardsByCategory, build_reward
from apertus.posttrain.sampling import SamplingConfig, load_prompts, main
from tests.posttrain.test_rewards import make_reward_model
from tests.posttrain.test_sampling import (
    PROMPTS,
    make_causal_lm,
    make_tokenizer,
    read_jsonl,
    write_jsonl,
)

CHARTER = "config/charter/swiss-ai-charter.md"
# PROMPTS with categories: two standard (one implicitly), one controversial, one of a category
# without a reward of its own (scored by `reward`).
CATEGORIES = {"en-1": None, "de-1": "standard", "en-2": "controversial", "fr-1": "trivia"}


def categorized(rows=PROMPTS, categories=CATEGORIES):
    return [
        {**row, **({"category": categories[row["id"]]} if categories[row["id"]] else {})}
        for row in rows
    ]


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict[str, Path]:
    """A tiny SFT policy, reward model and judge on one tokenizer, a rubric file and the
    categorized prompts."""
    root = tmp_path_factory.mktemp("by_category")
    make_tokenizer(root / "tokenizer")
    rubric = root / "charter.md"
    rubric.write_text("Balanced answers about foxes are best.\n")
    return {
        "root": root,
        "sft": make_causal_lm(root / "sft", root / "tokenizer", seed=1),
        "reward_model": make_reward_model(root / "reward_model", root / "tokenizer"),
        "judge": make_causal_lm(root / "judge", root / "tokenizer", seed=4, head_scale=0.1),
        "rubric": rubric,
        "prompts": write_jsonl(root / "prompts.jsonl", categorized()),
    }


def qrpo_config(models, **extra) -> dict:
    """Standard prompts by the reward model, controversial ones by the judge with the rubric."""
    return {
        "n_samples": 3,
        "max_new_tokens": 8,
        "seed": 11,
        "batch_size": 4,
        "device": "cpu",
        "reward": {"kind": "reward_model", "model": str(models["reward_model"]), "device": "cpu"},
        "rewards_by_category": {
            "controversial": {
                "kind": "judge",
                "model": str(models["judge"]),
                "rubric_file": str(models["rubric"]),
                "device": "cpu",
            }
        },
        **extra,
    }


def direct_rewards(models) -> dict[str, object]:
    cfg = qrpo_config(models)
    return {
        "reward_model": build_reward(cfg["reward"]),
        "judge": build_reward(cfg["rewards_by_category"]["controversial"]),
    }


def exchanges(prompts, completions=("The quick brown fox.", "Der Hund.")) -> list[Exchange]:
    return [
        Exchange(p.id, p.messages, c, p.reference, p.category) for p in prompts for c in completions
    ]


# --- routing -----------------------------------------------------------------------------------


def test_prompt_category_is_read_with_standard_as_default(models):
    prompts = {p.id: p.category for p in load_prompts(models["prompts"])}
    assert prompts == {
        "en-1": "standard",
        "de-1": "standard",
        "en-2": "controversial",
        "fr-1": "trivia",
    }


def test_each_prompt_is_scored_by_its_categorys_reward(models):
    prompts = load_prompts(models["prompts"])
    cfg = SamplingConfig.from_dict(qrpo_config(models))
    rewards = cfg.rewards()
    exs = exchanges(prompts)
    scores = rewards.score(exs)
    direct = direct_rewards(models)
    for ex, score in zip(exs, scores, strict=True):
        kind = "judge" if ex.category == "controversial" else "reward_model"
        (want,) = direct[kind].score([ex])
        # Scored in a padded batch vs alone: float32 rounding of other matrix shapes.
        assert score == pytest.approx(want, abs=1e-5), (ex.prompt_id, kind)
        if kind == "judge":
            assert 1 <= score <= 10
    # The judge is not the reward model: scoring the controversial prompt with the reward
    # model would give other numbers.
    controversial = [ex for ex in exs if ex.category == "controversial"]
    assert direct["reward_model"].score(controversial) != pytest.approx(
        [s for ex, s in zip(exs, scores, strict=True) if ex.category == "controversial"]
    )
    assert rewards.built == ["reward", "rewards_by_category.controversial"]
    assert list(rewards.loaded) == ["rewards_by_category.controversial"]  # one held at a time


def test_a_reward_is_loaded_only_when_some_prompt_needs_it(models, monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("the judge was loaded")

    monkeypatch.setattr(rewards_module, "JudgeReward", refuse)
    prompts = [p for p in load_prompts(models["prompts"]) if p.category != "controversial"]
    rewards = SamplingConfig.from_dict(qrpo_config(models)).rewards()
    assert rewards.built == []  # making the rewards loads nothing
    scores = rewards.score(exchanges(prompts))
    assert len(scores) == 2 * len(prompts) and rewards.built == ["reward"]


def test_record_counts_prompts_per_category_and_hashes_the_rubric(models):
    rewards = SamplingConfig.from_dict(qrpo_config(models)).rewards()
    record = rewards.record({p.id: p.category for p in load_prompts(models["prompts"])})
    assert record["categories"] == {
        "controversial": {"prompts": 1, "reward": "rewards_by_category.controversial"},
        "standard": {"prompts": 2, "reward": "reward"},
        "trivia": {"prompts": 1, "reward": "reward"},
    }
    sha = hashlib.sha256(models["rubric"].read_bytes()).hexdigest()
    assert record["rewards"]["rewards_by_category.controversial"]["rubric_sha256"] == sha
    assert record["rewards"]["reward"]["rubric_sha256"] is None
    assert record["rewards"]["reward"]["kind"] == "reward_model"


# --- the steps ---------------------------------------------------------------------------------


def run_step(*args) -> None:
    main([str(a) for a in args])


@pytest.fixture(scope="module")
def scored(models) -> Path:
    """The sample and score steps on the categorized prompts."""
    out = models["root"] / "steps"
    config = json.dumps(qrpo_config(models))
    common = ["--config", config, "--model", models["sft"], "--prompts", models["prompts"]]
    run_step("sample", *common, "--manifest", out / "sample.json", "--output", out / "samples")
    run_step(
        "score",
        *common,
        "--manifest",
        out / "score.json",
        "--samples",
        out / "samples",
        "--output",
        out / "scored",
    )
    return out


def test_score_step_scores_every_sample_of_a_prompt_with_its_categorys_reward(scored, models):
    prompts = {p.id: p for p in load_prompts(models["prompts"])}
    samples = read_jsonl(scored / "samples" / "samples.jsonl")
    records = read_jsonl(scored / "scored" / "completions.jsonl")
    direct = direct_rewards(models)
    for sample, record in zip(samples, records, strict=True):
        p = prompts[sample["prompt_id"]]
        kind = "judge" if p.category == "controversial" else "reward_model"
        ex = Exchange(p.id, p.messages, sample["text"], p.reference, p.category)
        assert record["reward"] == pytest.approx(direct[kind].score([ex])[0], abs=1e-5)
        # Its reference rewards are those of its prompt's samples, all by the same reward.
        siblings = [r["reward"] for r in records if r["prompt_id"] == p.id]
        assert record["reference_rewards"] == siblings
    summary = json.loads((scored / "scored" / "rewards.json").read_text())
    assert summary["categories"]["controversial"] == {
        "prompts": 1,
        "reward": "rewards_by_category.controversial",
    }
    assert summary["per_category"]["controversial"]["count"] == 3  # its 3 samples
    sha = hashlib.sha256(models["rubric"].read_bytes()).hexdigest()
    assert summary["rewards"]["rewards_by_category.controversial"]["rubric_sha256"] == sha
    manifest = json.loads((scored / "score.json").read_text())
    assert manifest["summary"]["categories"] == summary["categories"]
    assert manifest["summary"]["rubric_sha256"] == {"rewards_by_category.controversial": sha}
    assert {i["path"]: i["sha256"] for i in manifest["inputs"]}[str(models["rubric"])] == sha


def test_heldout_and_report_route_the_same_way(scored, models):
    config = json.dumps(qrpo_config(models, max_new_tokens=6))
    heldout = {}
    for name in ("sft", "again"):
        heldout[name] = scored / "heldout" / name
        run_step(
            "heldout",
            "--config",
            config,
            "--manifest",
            scored / "heldout" / f"{name}.manifest.json",
            "--model",
            models["sft"],
            "--prompts",
            models["prompts"],
            "--output",
            heldout[name],
        )
    result = json.loads((heldout["sft"] / "rewards.json").read_text())
    prompts = {p.id: p for p in load_prompts(models["prompts"])}
    direct = direct_rewards(models)
    for pid, entry in result["greedy"]["prompts"].items():
        p = prompts[pid]
        kind = "judge" if p.category == "controversial" else "reward_model"
        ex = Exchange(p.id, p.messages, entry["answer"], p.reference, p.category)
        assert entry["reward"] == pytest.approx(direct[kind].score([ex])[0], abs=1e-5)
    assert set(result["greedy"]["per_category"]) == {"standard", "controversial", "trivia"}
    assert result["rewards"]["categories"]["trivia"] == {"prompts": 1, "reward": "reward"}
    run_step(
        "report",
        "--config",
        config,
        "--manifest",
        scored / "report.manifest.json",
        *(a for name, folder in heldout.items() for a in ("--policy", f"{name}={folder}")),
        "--output",
        scored / "report.json",
        "--markdown",
        scored / "report.md",
    )
    report = json.loads((scored / "report.json").read_text())
    assert report["rewards_by_category"]["controversial"]["kind"] == "judge"
    markdown = (scored / "report.md").read_text()
    assert "(reward_model, controversial: judge)" in markdown
    assert "| controversial | standard | trivia |" in markdown


# --- configuration and bad input ---------------------------------------------------------------


def test_default_config_routes_nothing():
    cfg = SamplingConfig.from_dict({})
    assert cfg.rewards_by_category == {} and cfg.reward.kind == "chrf"
    assert cfg.rewards().record({"a": "standard"})["categories"] == {
        "standard": {"prompts": 1, "reward": "reward"}
    }


@pytest.mark.parametrize(
    ("route", "fragment"),
    [
        (
            {"kind": "bleu"},
            "posttrain.qrpo_data.rewards_by_category.controversial.kind must be one of chrf, "
            "reward_model, judge, not 'bleu'",
        ),
        (
            {"kind": "judge"},
            "posttrain.qrpo_data.rewards_by_category.controversial.model: the judge reward needs",
        ),
        (
            {"kind": "reward_model", "model": "x", "rubric": "r"},
            "posttrain.qrpo_data.rewards_by_category.controversial: a rubric is only used",
        ),
    ],
)
def test_bad_route_is_refused_naming_its_key(route, fragment):
    with pytest.raises(ApertusError, match=fragment):
        SamplingConfig.from_dict({"rewards_by_category": {"controversial": route}})


def test_missing_rubric_file_is_an_error_naming_the_key_before_any_model(
    models, tmp_path, capsys, monkeypatch
):
    def refuse(*args, **kwargs):
        raise AssertionError("a model was loaded")

    monkeypatch.setattr(rewards_module, "RewardModelReward", refuse)
    config = qrpo_config(models)
    config["rewards_by_category"]["controversial"]["rubric_file"] = str(tmp_path / "absent.md")
    with pytest.raises(SystemExit) as exit_info:
        run_main(
            main,
            [
                "score",
                "--config",
                json.dumps(config),
                "--manifest",
                str(tmp_path / "m.json"),
                "--model",
                str(models["sft"]),
                "--samples",
                str(tmp_path),
                "--prompts",
                str(models["prompts"]),
                "--output",
                str(tmp_path / "out"),
            ],
        )
    assert exit_info.value.code == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        "error: posttrain.qrpo_data.rewards_by_category.controversial.rubric_file "
        f"{tmp_path / 'absent.md'} does not exist"
    )
    assert not (tmp_path / "m.json").exists()


def test_a_null_category_is_the_standard_one(tmp_path):
    """A Hub table's missing value (null) is the standard category, not an error."""
    path = write_jsonl(tmp_path / "p.jsonl", [{**PROMPTS[0], "category": None}])
    assert load_prompts(path)[0].category == "standard"
    assert "category" not in check_prompt({**PROMPTS[0], "category": None}, "here")


@pytest.mark.parametrize("category", [3, "", ["controversial"]])
def test_a_category_that_is_not_a_name_is_refused_naming_the_prompt(tmp_path, category):
    path = write_jsonl(tmp_path / "p.jsonl", [{**PROMPTS[0], "category": category}])
    with pytest.raises(ApertusError, match=r"line 1: prompt 'en-1': 'category' must be"):
        load_prompts(path)
    with pytest.raises(ApertusError, match=r"'en-1': category must be a non-empty string"):
        check_prompt({**PROMPTS[0], "category": category}, "here")


def test_a_conversations_category_passes_to_its_prompt(tmp_path):
    conversations = [
        {
            "id": f"c{i}",
            "language": "en",
            "messages": [
                {"role": "user", "content": f"Question {i}?"},
                {"role": "assistant", "content": f"Answer {i}."},
            ],
            **({"category": "controversial"} if i % 2 else {}),
        }
        for i in range(6)
    ]
    path = write_jsonl(tmp_path / "conversations.jsonl", conversations)
    read = read_conversations(path)
    config = InstructionConfig.from_dict(
        {"source": {"jsonl": str(path)}, "train": None, "qrpo": 2, "heldout": 2}
    )
    split = split_conversations(read, config)
    for item in split.qrpo + split.heldout + split.train:
        number = int(item["id"][1:])
        assert item.get("category") == ("controversial" if number % 2 else None)


# --- the presets -------------------------------------------------------------------------------


@pytest.mark.parametrize("size", ["8b", "70b"])
def test_presets_route_controversial_prompts_to_a_judge_with_the_charter(size):
    preset = yaml.safe_load((REPO_ROOT / "config" / "presets" / f"apertus-{size}.yaml").read_text())
    cfg = SamplingConfig.from_dict(preset["posttrain"]["qrpo_data"])
    assert (cfg.reward.kind, cfg.reward.model) == (
        "reward_model",
        "Skywork/Skywork-Reward-V2-Llama-3.1-8B",
    )
    judge = cfg.rewards_by_category["controversial"]
    assert judge.kind == "judge" and judge.model and judge.rubric_file == CHARTER
    charter = shipped_path(judge.rubric_file)
    assert charter.is_file()
    text = charter.read_text()
    assert "paraphrase" in text.split("-->")[0] and "Swiss AI Charter" in text
    assert "from 1 to 10" in text
    assert (
        describe_reward(judge)["rubric_sha256"] == hashlib.sha256(charter.read_bytes()).hexdigest()
    )
    # The rubric loads as the judge's (no model is loaded to check it).
    assert RewardsByCategory(cfg.reward, cfg.rewards_by_category).built == []
