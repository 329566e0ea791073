"""QRPO's data in shards (RECIPE.md §7 at scale): prompts assigned to shards by a hash of their
id, one sample and one score job per shard, a merge into the completions one job would write;
a killed shard job resumes from its finished prompts; bad input is named, never dropped.

The tiny random SFT model and tokenizer are those of test_sampling.py.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from pathlib import Path

import pytest

from apertus.core import ApertusError
from apertus.posttrain import sampling
from apertus.posttrain.rewards import ChrfReward, Exchange, RewardsByCategory, render_chat
from apertus.posttrain.sampling import (
    PolicySampler,
    load_prompts,
    main,
    prompt_shard,
    shard_prompts,
)
from tests.posttrain.test_sampling import (
    PROMPTS,
    make_causal_lm,
    make_tokenizer,
    prompt,
    read_jsonl,
    write_jsonl,
)

SHARD_PROMPTS = [
    *PROMPTS,
    prompt("en-3", "en", "Is the fox brown?", "Yes, the fox is brown."),
    prompt("de-2", "de", "Ist der Hund faul?", "Ja, der Hund ist faul."),
]
CONFIG = {"n_samples": 3, "max_new_tokens": 8, "seed": 5, "batch_size": 4, "device": "cpu"}


@pytest.fixture(scope="module")
def workspace(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("qrpo_shards")
    make_tokenizer(root / "tokenizer")
    make_causal_lm(root / "sft", root / "tokenizer", seed=1)
    write_jsonl(root / "prompts.jsonl", SHARD_PROMPTS)
    return root


def run(*args) -> None:
    main([str(a) for a in args])


def sample_shard(workspace: Path, root: Path, shard: int, config: dict) -> Path:
    out = root / "samples" / f"shard-{shard}"
    run(
        "sample",
        "--config",
        json.dumps(config),
        "--manifest",
        root / f"sample-{shard}.json",
        "--model",
        workspace / "sft",
        "--prompts",
        workspace / "prompts.jsonl",
        "--shard",
        shard,
        "--work-dir",
        root / "_work" / "samples" / f"shard-{shard}",
        "--output",
        out,
    )
    return out


def score_shard(workspace: Path, root: Path, shard: int, config: dict) -> Path:
    out = root / "scored_shards" / f"shard-{shard}"
    run(
        "score",
        "--config",
        json.dumps(config),
        "--manifest",
        root / f"score-{shard}.json",
        "--model",
        workspace / "sft",
        "--samples",
        root / "samples" / f"shard-{shard}",
        "--prompts",
        workspace / "prompts.jsonl",
        "--shard",
        shard,
        "--work-dir",
        root / "_work" / "scored" / f"shard-{shard}",
        "--output",
        out,
    )
    return out


def merge(workspace: Path, root: Path, config: dict, folders=None) -> Path:
    folders = folders or [root / "scored_shards" / f"shard-{k}" for k in range(config["shards"])]
    run(
        "merge",
        "--config",
        json.dumps(config),
        "--manifest",
        root / "merge.json",
        "--prompts",
        workspace / "prompts.jsonl",
        *[arg for folder in folders for arg in ("--scored", folder)],
        "--output",
        root / "scored",
    )
    return root / "scored"


def sharded_run(workspace: Path, root: Path, shards: int) -> Path:
    config = {**CONFIG, "shards": shards}
    for k in range(shards):
        sample_shard(workspace, root, k, config)
        score_shard(workspace, root, k, config)
    return merge(workspace, root, config)


@pytest.fixture(scope="module")
def one_shard(workspace) -> Path:
    return sharded_run(workspace, workspace / "one", 1)


def manifest(path: Path) -> dict:
    return json.loads(path.read_text())


# --- shards ----------------------------------------------------------------------------------


def test_a_prompts_shard_is_a_hash_of_its_id_alone():
    ids = [f"p{i}" for i in range(400)]
    shards = [prompt_shard(pid, 4) for pid in ids]
    assert shards == [prompt_shard(pid, 4) for pid in reversed(ids)][::-1]
    assert set(Counter(shards).values()) and min(Counter(shards).values()) > 60  # spread
    assert all(prompt_shard(pid, 1) == 0 for pid in ids)


def test_the_shards_partition_the_prompts(workspace):
    prompts = load_prompts(workspace / "prompts.jsonl")
    parts = [shard_prompts(prompts, k, 3) for k in range(3)]
    assert sorted(p.id for part in parts for p in part) == sorted(p.id for p in prompts)
    assert all(parts)  # this file's prompts fall in every one of 3 shards
    with pytest.raises(ApertusError, match="shard 3 does not exist"):
        shard_prompts(prompts, 3, 3)


@pytest.mark.parametrize("shards", [3, 8])
def test_samples_and_rewards_do_not_depend_on_the_number_of_shards(
    workspace, one_shard, tmp_path, shards
):
    """8 shards of 6 prompts: some shards are empty, their jobs write empty files."""
    many = sharded_run(workspace, tmp_path, shards)
    single, split = (read_jsonl(d / "completions.jsonl") for d in (one_shard, many))
    assert [r["completion_id"] for r in split] == [r["completion_id"] for r in single]
    for a, b in zip(single, split, strict=True):
        assert a["input_ids"] == b["input_ids"]  # the samples
        assert a["reward"] == b["reward"] and a["reference_rewards"] == b["reference_rewards"]
        # Other batches for the reference log-probs: float32 rounding only.
        assert a["reference_logp"] == pytest.approx(b["reference_logp"], abs=1e-4)
    # rewards.json holds no log-prob: it is the same to the byte.
    assert (many / "rewards.json").read_bytes() == (one_shard / "rewards.json").read_bytes()
    sizes = [manifest(tmp_path / f"sample-{k}.json")["summary"]["prompts"] for k in range(shards)]
    assert sum(sizes) == len(SHARD_PROMPTS)
    if shards == 8:
        assert 0 in sizes
    merged = manifest(tmp_path / "merge.json")
    assert merged["step"] == "qrpo_merge" and merged["summary"]["shards"] == shards


def test_one_shard_merged_is_what_one_score_job_writes(workspace, one_shard):
    shard = workspace / "one" / "scored_shards" / "shard-0"
    for name in ("completions.jsonl", "rewards.json"):
        assert (one_shard / name).read_bytes() == (shard / name).read_bytes()
    # Finished shards leave no resume logs behind.
    assert not any((workspace / "one" / "_work").rglob("*.jsonl"))


# --- resume ----------------------------------------------------------------------------------


class Killed(Exception):
    """Stands for SIGKILL: the resume log is synced line by line, so a kill between two
    prompts leaves what this leaves (a kill inside a line is the truncation test's case)."""


def kill_after(monkeypatch, cls, method: str, calls: int) -> list:
    """Make `cls.method` raise Killed after `calls` calls; record the arguments of each call."""
    original = getattr(cls, method)
    seen: list = []

    def wrapper(self, *args, **kwargs):
        if len(seen) == calls:
            raise Killed
        seen.append(args)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(cls, method, wrapper)
    return seen


def samples_config() -> dict:
    # One prompt per batch (3 samples, batch 3): the log gains a line per batch.
    return {**CONFIG, "batch_size": 3, "shards": 1}


def partial_lines(root: Path, name: str = "samples") -> list[str]:
    (log,) = (root / "_work").rglob(f"{name}.partial.jsonl")
    return log.read_text().splitlines()


def test_a_killed_sample_job_resumes_from_its_finished_prompts(
    workspace, one_shard, tmp_path, monkeypatch
):
    config = samples_config()
    with monkeypatch.context() as m:
        kill_after(m, PolicySampler, "answers", 2)
        with pytest.raises(Killed):
            sample_shard(workspace, tmp_path, 0, config)
    assert len(partial_lines(tmp_path)) == 1 + 2  # the header and 2 finished prompts
    with monkeypatch.context() as m:
        calls = kill_after(m, PolicySampler, "answers", 99)
        sample_shard(workspace, tmp_path, 0, config)
    redone = [p.id for (chunk,) in calls for p in chunk]
    assert redone == [p["id"] for p in SHARD_PROMPTS[2:]]  # only the unfinished prompts
    assert manifest(tmp_path / "sample-0.json")["summary"]["resumed_prompts"] == 2
    # The same samples as an uninterrupted run (there with batches of 4 sequences).
    resumed = read_jsonl(tmp_path / "samples" / "shard-0" / "samples.jsonl")
    whole = read_jsonl(workspace / "one" / "samples" / "shard-0" / "samples.jsonl")
    assert resumed == whole


def test_a_truncated_last_line_is_dropped_and_its_prompt_redone(
    workspace, one_shard, tmp_path, monkeypatch
):
    config = samples_config()
    with monkeypatch.context() as m:
        kill_after(m, PolicySampler, "answers", 3)
        with pytest.raises(Killed):
            sample_shard(workspace, tmp_path, 0, config)
    (log,) = (tmp_path / "_work").rglob("samples.partial.jsonl")
    text = log.read_text()
    log.write_text(text[: len(text) - 40])  # killed while writing the third prompt's line
    with monkeypatch.context() as m:
        calls = kill_after(m, PolicySampler, "answers", 99)
        sample_shard(workspace, tmp_path, 0, config)
    assert calls[0][0][0].id == SHARD_PROMPTS[2]["id"]
    summary = manifest(tmp_path / "sample-0.json")["summary"]
    assert summary["resumed_prompts"] == 2 and summary["dropped_resume_lines"] == 1
    resumed = read_jsonl(tmp_path / "samples" / "shard-0" / "samples.jsonl")
    assert resumed == read_jsonl(workspace / "one" / "samples" / "shard-0" / "samples.jsonl")


def test_a_resume_log_is_verified_before_it_is_trusted(workspace, tmp_path, monkeypatch):
    config = samples_config()
    with monkeypatch.context() as m:
        kill_after(m, PolicySampler, "answers", 2)
        with pytest.raises(Killed):
            sample_shard(workspace, tmp_path, 0, config)
    (log,) = (tmp_path / "_work").rglob("samples.partial.jsonl")
    header, first, second = log.read_text().splitlines()
    record = json.loads(second)
    record["samples"][0]["prompt_ids"][0] += 1  # not this prompt's rendering
    log.write_text("\n".join([header, first, json.dumps(record)]) + "\n")
    with monkeypatch.context() as m:
        calls = kill_after(m, PolicySampler, "answers", 99)
        sample_shard(workspace, tmp_path, 0, config)
    assert len(calls) == len(SHARD_PROMPTS) - 1  # the bad line's prompt is sampled again
    assert manifest(tmp_path / "sample-0.json")["summary"]["dropped_resume_lines"] == 1
    # Another config: the log is not this job's, and the shard starts afresh.
    with monkeypatch.context() as m:
        kill_after(m, PolicySampler, "answers", 1)
        with pytest.raises(Killed):
            sample_shard(workspace, tmp_path, 0, config)
    with monkeypatch.context() as m:
        calls = kill_after(m, PolicySampler, "answers", 99)
        sample_shard(workspace, tmp_path, 0, {**config, "seed": 6})
    assert len(calls) == len(SHARD_PROMPTS)
    assert manifest(tmp_path / "sample-0.json")["summary"]["resumed_prompts"] == 0


@pytest.mark.parametrize("phase", ["rewards", "reference_logp"])
def test_a_killed_score_job_resumes_from_its_finished_prompts(
    workspace, one_shard, tmp_path, monkeypatch, phase
):
    # One prompt (3 samples) per batch of rewards and of log-probs.
    config = {**CONFIG, "shards": 1, "batch_size": 3, "reward": {"batch_size": 3}}
    sample_shard(workspace, tmp_path, 0, config)
    with monkeypatch.context() as m:
        if phase == "rewards":
            kill_after(m, RewardsByCategory, "score", 2)
        else:
            original, done = sampling.completion_logprobs, []

            def killed(*args, **kwargs):
                if len(done) == 2:
                    raise Killed
                done.append(1)
                return original(*args, **kwargs)

            m.setattr(sampling, "completion_logprobs", killed)
        with pytest.raises(Killed):
            score_shard(workspace, tmp_path, 0, config)
    score_shard(workspace, tmp_path, 0, config)
    resumed = manifest(tmp_path / "score-0.json")["summary"]["resumed_prompts"]
    if phase == "rewards":
        assert resumed == {"rewards": 2, "reference_logp": 0}
    else:  # the rewards were all done before the kill
        assert resumed == {"rewards": len(SHARD_PROMPTS), "reference_logp": 2}
    got = read_jsonl(tmp_path / "scored_shards" / "shard-0" / "completions.jsonl")
    want = read_jsonl(one_shard / "completions.jsonl")
    for a, b in zip(got, want, strict=True):
        assert a["input_ids"] == b["input_ids"] and a["reward"] == b["reward"]
        assert a["reference_logp"] == pytest.approx(b["reference_logp"], abs=1e-4)


# --- bad input -------------------------------------------------------------------------------


def test_merge_names_a_prompt_without_its_reference_samples(workspace, one_shard, tmp_path):
    config = {**CONFIG, "shards": 1}
    shard = tmp_path / "shard-0"
    shard.mkdir()
    rows = read_jsonl(one_shard / "completions.jsonl")
    write_jsonl(shard / "completions.jsonl", [r for r in rows if r["prompt_id"] != "fr-1"])
    with pytest.raises(ApertusError, match=r"prompt fr-1 has 0 of its 3 reference samples"):
        merge(workspace, tmp_path, config, [shard])
    assert not (tmp_path / "scored" / "completions.jsonl").exists()  # nothing half-written
    write_jsonl(shard / "completions.jsonl", rows[:-1])
    with pytest.raises(ApertusError, match=r"prompt de-2 has 2 of its 3"):
        merge(workspace, tmp_path, config, [shard])


def test_merge_refuses_a_shard_given_out_of_order(workspace, tmp_path):
    config = {**CONFIG, "shards": 3}
    for k in range(3):
        sample_shard(workspace, tmp_path, k, config)
        score_shard(workspace, tmp_path, k, config)
    folders = [tmp_path / "scored_shards" / f"shard-{k}" for k in (1, 0, 2)]
    with pytest.raises(ApertusError, match=r"is in shard 1, not 0"):
        merge(workspace, tmp_path, config, folders)
    with pytest.raises(ApertusError, match="2 scored folder"):
        merge(workspace, tmp_path, config, folders[:2])


def test_score_names_a_prompt_whose_samples_are_missing(workspace, one_shard, tmp_path):
    rows = read_jsonl(workspace / "one" / "samples" / "shard-0" / "samples.jsonl")
    (tmp_path / "samples" / "shard-0").mkdir(parents=True)
    write_jsonl(
        tmp_path / "samples" / "shard-0" / "samples.jsonl",
        [r for r in rows if r["prompt_id"] != "en-3"],
    )
    with pytest.raises(ApertusError, match=r"'en-3' has 0"):
        score_shard(workspace, tmp_path, 0, {**CONFIG, "shards": 1})


def test_a_nan_reward_is_an_error_naming_the_prompt(workspace, monkeypatch):
    prompts = load_prompts(workspace / "prompts.jsonl")
    monkeypatch.setattr(
        ChrfReward, "score", lambda self, exchanges, progress=None: [math.nan] * len(exchanges)
    )
    exchanges = [Exchange(p.id, p.messages, "an answer", p.reference) for p in prompts[1:2]]
    with pytest.raises(ApertusError, match=r"prompt de-1: the reward posttrain.qrpo_data.reward"):
        RewardsByCategory().score(exchanges)


def test_a_prompt_too_long_for_the_context_is_named_before_sampling(workspace, tmp_path):
    prompts = load_prompts(workspace / "prompts.jsonl")
    sampler = PolicySampler(workspace / "sft", max_new_tokens=8, batch_size=2, device="cpu")
    lengths = {p.id: len(rendered(sampler, p)) for p in prompts}
    longest = max(lengths, key=lengths.get)
    # A copy of the model whose context is one token too short for the longest prompt.
    folder = tmp_path / "short"
    folder.mkdir()
    for f in (workspace / "sft").iterdir():
        (folder / f.name).write_bytes(f.read_bytes())
    config = json.loads((folder / "config.json").read_text())
    config["max_position_embeddings"] = lengths[longest] + 8 - 1
    (folder / "config.json").write_text(json.dumps(config))
    sampler = PolicySampler(folder, max_new_tokens=8, batch_size=2, device="cpu")
    with pytest.raises(ApertusError, match=rf"prompt {longest}: \d+ tokens \+ max_new_tokens 8"):
        sampler.answers(prompts, n=1, temperature=1.0, seed=0)
    assert sampler._model is None  # refused before the model was loaded


def rendered(sampler: PolicySampler, p) -> list[int]:
    return render_chat(sampler.tokenizer, p.messages, add_generation_prompt=True, where=p.id)
