"""QRPO's data (RECIPE.md §7): reference samples, their rewards and reference log-probs; and
the reward report that compares the SFT policy with the aligned one on held-out prompts.

QRPO is offline: for every prompt x the SFT model (the reference policy) writes n = 10 answers
at temperature 1; each answer y is scored with a pointwise reward R(x, y)
(:mod:`apertus.posttrain.rewards`); its quantile reward is its empirical CDF among the n reference
rewards of the same prompt, and its log-probability under the reference model is computed once
here so training never runs the reference model. Every sampled answer is both a training
completion and one of its prompt's reference samples.

Entry points (stage ``posttrain``)::

    python -m apertus.posttrain.sampling sample --config JSON --manifest M --model DIR \
        --prompts FILE [--shard K] [--work-dir W] --output DIR
                                           # DIR/samples.jsonl of shard K    (step qrpo_sample)
    python -m apertus.posttrain.sampling score --config JSON --manifest M --model DIR \
        --samples DIR --prompts FILE [--shard K] [--work-dir W] --output DIR
                                           # DIR/completions.jsonl, DIR/rewards.json of shard K
                                           #                                 (step qrpo_score)
    python -m apertus.posttrain.sampling merge --config JSON --manifest M --prompts FILE \
        --scored DIR [--scored DIR ...] --output DIR
                                           # the shards' completions.jsonl, rewards.json joined
                                           #                                 (step qrpo_merge)
    python -m apertus.posttrain.sampling heldout --config JSON --manifest M --model DIR \
        --prompts FILE --output DIR        # DIR/rewards.json of one policy (step heldout)
    python -m apertus.posttrain.sampling report --config JSON --manifest M \
        --policy NAME=DIR [--policy NAME=DIR ...] --output FILE.json [--markdown MD]
                                           # the policies side by side (step qrpo_report)

Shards: config ``shards`` splits the prompts by a hash of their id (:func:`prompt_shard`); each
shard is sampled and scored by its own job, and ``merge`` writes completions.jsonl and
rewards.json exactly as one job scoring every prompt would (same lines, same order). A shard job
keeps each finished prompt in an append-only resume log under ``--work-dir``
(:class:`ResumeLog`), so a killed job re-run does only the rest; its manifest counts the prompts
it resumed and the log lines it dropped. Rewards are computed before the reference log-probs,
one model at a time, each phase with its own log.

``--model`` is an exported Hugging Face folder (the SFT model for sample/score, any policy for
heldout), with our tokenizer and its chat template. ``heldout`` loads one policy; ``report``
loads no model, so the SFT policy's held-out answers need not wait for QRPO training. Files:

prompts (JSONL)
    ``{"id", "language", "messages": [{"role", "content"}, ...], "reference"}`` and optionally
    ``"category"`` (default ``"standard"``): the messages end before the assistant's turn;
    ``reference`` is a reference answer (used by the chrF reward); the category picks the
    reward (config ``rewards_by_category``, else ``reward``; :class:`RewardsByCategory`).
samples.jsonl
    ``{"prompt_id", "sample_index", "language", "prompt_ids", "completion_ids", "text",
    "finish_reason"}``; ``completion_ids`` are the generated ids, ending with the stop token
    (``<|assistant_end|>``, or ``</s>``) unless ``finish_reason`` is ``"length"``; ``text`` is
    their decoding without special tokens.
completions.jsonl (what QRPO training reads)
    ``{"prompt_id", "completion_id", "input_ids", "completion_mask", "reward",
    "reference_rewards", "reference_logp"}``: ``input_ids`` = prompt + completion ids,
    ``completion_mask`` 1 exactly on the completion ids, ``reference_rewards`` the rewards of all
    n samples of the prompt (this one included), ``reference_logp`` = sum over completion tokens
    of log p_ref (float32 forward, float64 sum). ``completion_id`` is ``"<prompt_id>:<index>"``.
rewards.json of a score step (of its shard's prompts; ``mean`` null for an empty shard) and
of the merge (of every prompt)
    ``count``, ``mean``, ``per_language``, ``per_category`` of the samples' rewards, ``reward``
    (the default reward's config), ``categories`` (per prompt category: its prompt count and
    the key of the reward that scored it), ``rewards`` (each configured reward's config with
    ``rubric_sha256``), ``prompts`` and ``samples``.
rewards.json of a heldout step (what the report reads)
    ``{"model", "config", "rewards", "greedy", "sampled"}``: the policy's folder, the
    ``qrpo_data`` config it was made with, the categories and rewards (as in a score step's),
    and :func:`mean_reward` of its greedy answers and of its ``n_samples``
    samples per prompt at ``temperature`` (the policy's expected reward, what QRPO maximises;
    seeded with ``seed + 1``, apart from the QRPO samples): ``count``, ``mean``,
    ``per_language``, ``per_category``, ``prompts`` (each prompt's reward and first answer)
    and ``ended_turn``.
reward_report.json, .md (the report)
    each policy's greedy results (with its ``folder``) under ``models`` and its sampled ones
    under ``sampled.models``, each policy against the first (the baseline) under
    ``comparison``: difference of means ± paired standard error, win and tie rates.
    ``ended_turn`` is the fraction of answers that ended their turn with ``<|assistant_end|>``
    (they follow the chat format) rather than being cut at ``max_new_tokens`` or closed with
    ``</s>``.

Sampling is reproducible sample by sample: each (seed, prompt id, sample index) has its own
random stream, so a sample does not depend on the batch size, on the other prompts or on their
order. With transformers, a row of a batch is sampled by the Gumbel-max trick from its own
generator (:class:`SeededGumbelSampling`), which draws exactly from softmax(logits / T).
Identical samples across batch sizes hold up to floating-point differences of batched vs
single forward passes, which can flip a draw only at a near-tie. When ``vllm`` is importable and
a GPU is present (config ``engine: auto``), vLLM samples instead, one request per sample with
its own ``seed`` (:class:`VllmSampler`). vLLM is not installed in this project's environment:
its request construction and output parsing are tested with a stand-in engine on CPU, its GPU
run is untested.

Bad input stops the step with an error naming the prompt: a prompt longer than the policy's
context with ``max_new_tokens`` (before anything is sampled), a sample longer than the
reference model's context, a prompt without its n samples (score, merge), a reward that is not
a finite number, a conversation longer than the reward model's or judge's context.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import heapq
import importlib.util
import json
import logging
import math
import os
import sys
from collections import Counter
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

import torch
from transformers import AutoConfig, LogitsProcessor

from apertus.core import ApertusError
from apertus.core.device import load_pretrained, resolve_device
from apertus.core.files import atomic_open, atomic_write_json, atomic_write_text
from apertus.core.progress import Progress
from apertus.core.stage import StepRun, run_main, stage_parser
from apertus.core.typed import Config
from apertus.posttrain.reward_config import (
    DEVICES,
    DTYPE_NAMES,
    STANDARD,
    RewardConfig,
    check_choice,
    check_positive_int,
    describe_reward,
    rubric_files,
)
from apertus.posttrain.rewards import (
    DTYPES,
    Exchange,
    Reward,
    RewardsByCategory,
    build_reward,
    check_hf_folder,
    chunks,
    left_padded,
    load_hf_tokenizer,
    render_chat,
    summarize_rewards,
)
from apertus.tokenize.tokenizer import CHAT_ROLES

log = logging.getLogger(__name__)

STAGE = "posttrain"
ASSISTANT_END = "<|assistant_end|>"
ENGINES = ("auto", "transformers", "vllm")
HELDOUT_REWARDS = "rewards.json"  # what a heldout step writes and the report reads


# --- configuration ---------------------------------------------------------------------------


@dataclass(frozen=True)
class SamplingConfig(Config, key="posttrain.qrpo_data"):
    """The QRPO data config, ``posttrain.qrpo_data`` (what ``--config`` carries).

    n_samples       reference samples per prompt (RECIPE.md §7: 10)
    temperature     sampling temperature of the reference samples (RECIPE.md §7: 1.0)
    max_new_tokens  longest completion; a longer one is cut (finish_reason "length")
    seed            the root of every sample's random stream
    batch_size      sequences per forward pass (generation, log-probs)
    dtype           float32 | bfloat16: the SFT model's dtype for sampling and log-probs
    device          auto | cpu | cuda
    engine          auto | transformers | vllm (auto: vLLM when importable and a GPU is present)
    shards          shards of the prompts, each sampled and scored by its own job
                    (:func:`prompt_shard`); a merge step joins them
    reward          the reward (:class:`apertus.posttrain.reward_config.RewardConfig`, default chrF)
                    of every prompt whose category has no reward of its own
    rewards_by_category   category -> its reward (RECIPE.md §7: ``controversial`` -> a judge
                    with the Swiss AI Charter); empty by default: one reward for every prompt
    """

    n_samples: int
    temperature: float
    max_new_tokens: int
    seed: int
    batch_size: int
    dtype: str
    device: str
    engine: str
    shards: int
    reward: RewardConfig
    rewards_by_category: dict[str, RewardConfig]

    def __post_init__(self) -> None:
        where = self.config_key
        self.reward.check(f"{where}.reward")
        for category, reward in self.rewards_by_category.items():
            if not category:
                raise ApertusError(f"{where}.rewards_by_category: a category is a non-empty name")
            reward.check(f"{where}.rewards_by_category.{category}")
        for name in ("n_samples", "max_new_tokens", "batch_size", "shards"):
            check_positive_int(f"{where}.{name}", getattr(self, name))
        if self.seed < 0:
            raise ApertusError(f"{where}.seed must be an integer >= 0")
        t = self.temperature
        if not 0 < t < math.inf:
            raise ApertusError(f"{where}.temperature must be a positive number, not {t!r}")
        check_choice(f"{where}.dtype", self.dtype, DTYPE_NAMES)
        check_choice(f"{where}.device", self.device, DEVICES)
        check_choice(f"{where}.engine", self.engine, ENGINES)

    def rewards(self) -> RewardsByCategory:
        """The rewards, by prompt category (no model is loaded until a prompt needs it)."""
        return RewardsByCategory(self.reward, self.rewards_by_category, where=self.config_key)


# --- prompts ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class QrpoPrompt:
    id: str
    language: str
    messages: tuple[Mapping[str, str], ...]
    reference: str
    category: str = STANDARD


def _parse_prompt(obj: Any, where: str) -> QrpoPrompt:
    if not isinstance(obj, dict):
        raise ApertusError(f"{where}: a prompt is a JSON object")
    for key in ("id", "language"):
        if not isinstance(obj.get(key), str) or not obj[key]:
            raise ApertusError(f"{where}: '{key}' must be a non-empty string")
    if not isinstance(obj.get("reference"), str):
        raise ApertusError(f"{where}: 'reference' must be a string (the reference answer)")
    messages = obj.get("messages")
    if not isinstance(messages, list) or not messages:
        raise ApertusError(f"{where}: 'messages' must be a non-empty list")
    for i, m in enumerate(messages):
        if (
            not isinstance(m, dict)
            or set(m) != {"role", "content"}
            or not isinstance(m["content"], str)
        ):
            raise ApertusError(
                f"{where}: message {i} must be {{'role': ..., 'content': <string>}}, not {m!r}"
            )
        if m["role"] not in CHAT_ROLES:
            raise ApertusError(
                f"{where}: message {i} has role {m['role']!r} "
                f"(expected one of {', '.join(CHAT_ROLES)})"
            )
    if messages[-1]["role"] == "assistant":
        raise ApertusError(f"{where}: the last message is the assistant's; a prompt ends before it")
    category = obj.get("category")
    category = STANDARD if category is None else category  # null: a table's missing value
    if not isinstance(category, str) or not category:
        raise ApertusError(
            f"{where}: prompt {obj['id']!r}: 'category' must be a non-empty string (it picks "
            f"the reward), not {category!r}"
        )
    return QrpoPrompt(
        id=obj["id"],
        language=obj["language"],
        messages=tuple(dict(m) for m in messages),
        reference=obj["reference"],
        category=category,
    )


def _json_lines(path: Path) -> Iterator[tuple[int, Any]]:
    """(line number, parsed object) of each non-blank line, or an error naming the line."""
    if not path.is_file():
        raise ApertusError(f"{path} does not exist")
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                yield lineno, json.loads(line)
            except json.JSONDecodeError as e:
                raise ApertusError(f"{path} line {lineno}: not valid JSON ({e.msg})") from None


def load_prompts(path: str | os.PathLike) -> list[QrpoPrompt]:
    """The QRPO prompts of a JSONL file, checked line by line (errors name the file and line)."""
    path = Path(path)
    prompts: list[QrpoPrompt] = []
    seen: dict[str, int] = {}
    for lineno, obj in _json_lines(path):
        where = f"{path} line {lineno}"
        prompt = _parse_prompt(obj, where)
        if prompt.id in seen:
            raise ApertusError(
                f"{where}: prompt id {prompt.id!r} already used on line {seen[prompt.id]}"
            )
        seen[prompt.id] = lineno
        prompts.append(prompt)
    if not prompts:
        raise ApertusError(f"{path}: no prompts")
    return prompts


def prompt_shard(prompt_id: str, shards: int) -> int:
    """The shard (0 .. shards-1) of a prompt: a hash of its id, so a prompt's shard depends on
    nothing else (not on the file's order or the other prompts)."""
    digest = hashlib.sha256(f"shard\0{prompt_id}".encode()).digest()
    return int.from_bytes(digest[:8], "little") % shards


def shard_prompts(prompts: Sequence[QrpoPrompt], shard: int, shards: int) -> list[QrpoPrompt]:
    """The prompts of one shard, in file order."""
    if not 0 <= shard < shards:
        raise ApertusError(f"shard {shard} does not exist: posttrain.qrpo_data.shards is {shards}")
    return [p for p in prompts if prompt_shard(p.id, shards) == shard]


class ResumeLog:
    """The prompts a shard job has finished, so that a killed job re-run keeps them.

    An append-only JSONL file: a header ``{"fingerprint": ...}`` (a hash of the step, its
    config, its shard and the size and time of its inputs: :func:`resume_fingerprint`), then
    one line per finished prompt, written whole, flushed and synced before the next prompt
    starts. On reading, a file of another fingerprint is started afresh, a last line without
    its newline (the job died while writing it) is dropped, and each record is verified by
    `check`; the file is cut before the first line that fails, whose prompt is done again.
    """

    def __init__(self, path: Path, fingerprint: str) -> None:
        self.path, self.fingerprint = path, fingerprint
        self.dropped = 0  # lines dropped on reading (truncated or failing `check`)
        self.restarted: str | None = None  # why an existing file was started afresh

    def read(self, check: Callable[[dict[str, Any]], None]) -> dict[str, dict[str, Any]]:
        """The finished prompts' records by prompt id; `check(record)` raises ApertusError
        for a record that does not fit this job."""
        records: dict[str, dict[str, Any]] = {}
        if not self.path.is_file():
            self._start()
            return records
        data = self.path.read_bytes()
        lines = data.split(b"\n")
        try:
            header = json.loads(lines[0]) if len(lines) > 1 else None
        except json.JSONDecodeError:
            header = None
        if not isinstance(header, dict) or header.get("fingerprint") != self.fingerprint:
            self.restarted = "another config, shard or inputs" if header else "no header"
            log.warning("%s: %s; starting the shard afresh", self.path, self.restarted)
            self._start()
            return records
        keep = len(lines[0]) + 1
        complete = lines[1:-1]  # the text after the last newline is an unfinished line
        self.dropped = int(bool(lines[-1]))
        for i, line in enumerate(complete):
            try:
                record = json.loads(line)
                if not isinstance(record, dict) or record.get("prompt_id") in records:
                    raise ApertusError("not a new prompt's record")
                check(record)
            except (json.JSONDecodeError, ApertusError) as e:
                log.warning("%s line %d: %s; redoing it and what follows", self.path, i + 2, e)
                self.dropped += len(complete) - i
                break
            records[record["prompt_id"]] = record
            keep += len(line) + 1
        if keep < len(data):
            os.truncate(self.path, keep)
        return records

    def _start(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.write_text("", encoding="utf-8")
        self.append({"fingerprint": self.fingerprint})

    def append(self, record: Mapping[str, Any]) -> None:
        """One line, on disk before this returns (a prompt's work is worth an fsync)."""
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(json.dumps(record, ensure_ascii=False) + "\n")
            f.flush()
            os.fsync(f.fileno())

    def add_prompts(
        self,
        done: dict[str, dict[str, Any]],
        prompts: Sequence[QrpoPrompt],
        key: str,
        values: Sequence[Any],
        n: int,
    ) -> None:
        """Each of `prompts` finished with its `n` of `values` (prompt-major) under `key`: into
        `done` (the records `read` returned) and onto the log."""
        for i, p in enumerate(prompts):
            done[p.id] = {"prompt_id": p.id, key: list(values[i * n : (i + 1) * n])}
            self.append(done[p.id])

    def finish(self) -> None:
        """The shard's output is written: the log is no longer needed."""
        self.path.unlink()
        with contextlib.suppress(OSError):  # the job's other logs are still there
            self.path.parent.rmdir()


def resume_fingerprint(
    step: str, config: Mapping[str, Any], shard: int, inputs: Sequence[Path]
) -> str:
    """What a shard's resume log must have been made with: the step, its config, its shard and
    each input's files by size and modification time (cheap for a model of many GB; a
    re-exported model or a rewritten prompts file has new times)."""

    def stat(path: Path) -> list[Any]:
        files = sorted(path.rglob("*")) if path.is_dir() else [path]
        return [
            [str(f.relative_to(path)) if f != path else "", f.stat().st_size, f.stat().st_mtime_ns]
            for f in files
            if f.is_file()
        ]

    described = [[str(p), stat(Path(p))] for p in inputs]
    text = json.dumps([step, config, shard, described], sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()


# --- the policy model ------------------------------------------------------------------------


@dataclass(frozen=True)
class Sample:
    """One generated answer to one prompt."""

    prompt_id: str
    sample_index: int
    language: str
    prompt_ids: list[int]
    completion_ids: list[int]
    text: str
    finish_reason: str  # "assistant_end", "eos" or "length"


def stop_token_ids(tokenizer: Any, folder: Path) -> dict[int, str]:
    """The ids that end an answer: ``<|assistant_end|>`` (the chat format's end of turn,
    RECIPE.md §7) and ``</s>`` (a model may close the document instead)."""
    vocab = tokenizer.get_vocab()
    if ASSISTANT_END not in vocab:
        raise ApertusError(f"{folder}: the tokenizer has no {ASSISTANT_END} token")
    stops = {vocab[ASSISTANT_END]: "assistant_end"}
    if tokenizer.eos_token_id is not None:
        stops.setdefault(tokenizer.eos_token_id, "eos")
    return stops


def load_causal_lm(folder: Path, *, dtype: str, device: str) -> Any:
    """The causal LM of an exported Hugging Face folder, in eval mode on `device` (spread over
    the job's GPUs where it has several: `apertus.core.device.load_pretrained`)."""
    from transformers import AutoModelForCausalLM

    return load_pretrained(
        AutoModelForCausalLM, str(folder), dtype=DTYPES[dtype], device=resolve_device(device)
    )


def sample_seed(seed: int, prompt_id: str, sample_index: int) -> int:
    """The seed of one sample's random stream: a hash of (seed, prompt id, sample index), so a
    sample is the same whatever else is sampled with it."""
    digest = hashlib.sha256(f"{seed}\0{prompt_id}\0{sample_index}".encode()).digest()
    return int.from_bytes(digest[:8], "little") >> 1


def gumbel_noise(size: int, generator: torch.Generator) -> torch.Tensor:
    """Standard Gumbel draws -log(-log U): argmax(logits / T + G) is a draw from
    softmax(logits / T) (the Gumbel-max trick, Gumbel 1954; Maddison et al. 2014)."""
    u = torch.rand(size, generator=generator, dtype=torch.float64)
    return -torch.log(-torch.log(u.clamp_min(torch.finfo(torch.float64).tiny)))


class SeededGumbelSampling(LogitsProcessor):
    """Temperature sampling inside greedy ``generate``, each row from its own generator.

    transformers' ``do_sample`` draws every row from the one global RNG, so a row's tokens
    depend on which rows share its batch. Adding each row's own Gumbel noise to logits / T and
    letting greedy decoding take the argmax samples from exactly the same distribution (pure
    temperature sampling: no top-k or top-p) with one stream per row. Generators live on the
    CPU so the draws are the same on any device.
    """

    def __init__(self, generators: Sequence[torch.Generator], temperature: float) -> None:
        self.generators = list(generators)
        self.temperature = temperature

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.Tensor:
        if scores.shape[0] != len(self.generators):
            raise RuntimeError(f"{scores.shape[0]} rows for {len(self.generators)} generators")
        noise = torch.stack([gumbel_noise(scores.shape[-1], g) for g in self.generators])
        return scores / self.temperature + noise.to(device=scores.device, dtype=scores.dtype)


def _cut_at_stop(ids: Sequence[int], stops: Mapping[int, str]) -> tuple[list[int], str]:
    """The ids up to and including the first stop token, and why the answer ended."""
    for i, t in enumerate(ids):
        if t in stops:
            return list(ids[: i + 1]), stops[t]
    return list(ids), "length"


@torch.no_grad()
def generate_ids(
    model: Any,
    prompt_ids: Sequence[Sequence[int]],
    seeds: Sequence[int],
    *,
    temperature: float,
    max_new_tokens: int,
    batch_size: int,
    stops: Mapping[int, str],
    pad_id: int,
    progress: Progress | None = None,
) -> list[tuple[list[int], str]]:
    """(completion ids, finish reason) of each prompt with transformers ``generate``: rows of
    `batch_size` left-padded prompts; temperature 0 is greedy, otherwise row i samples from
    its own generator seeded with ``seeds[i]``. `progress` counts the completions."""
    from transformers import GenerationConfig, LogitsProcessorList

    generation = GenerationConfig(
        do_sample=False,
        max_new_tokens=max_new_tokens,
        eos_token_id=list(stops),
        pad_token_id=pad_id,
    )
    # generate() would fill unset options from the folder's generation_config.json (e.g. a
    # repetition penalty); this sampler applies nothing but the temperature.
    model.generation_config = generation
    device = next(model.parameters()).device
    results: list[tuple[list[int], str]] = []
    for start in range(0, len(prompt_ids), batch_size):
        batch = prompt_ids[start : start + batch_size]
        ids, mask, _ = left_padded(batch, pad_id)
        width = ids.shape[1]
        processors = LogitsProcessorList()
        if temperature > 0:
            generators = [
                torch.Generator().manual_seed(s) for s in seeds[start : start + batch_size]
            ]
            processors.append(SeededGumbelSampling(generators, temperature))
        out = model.generate(
            input_ids=ids.to(device),
            attention_mask=mask.to(device),
            generation_config=generation,
            logits_processor=processors,
        )
        for row in out[:, width:].tolist():
            results.append(_cut_at_stop(row[:max_new_tokens], stops))
        if progress is not None:
            progress.update(len(batch))
    return results


class VllmSampler:
    """The same sampling with vLLM: one request per sample, its prompt as token ids and its own
    ``seed`` in its SamplingParams (n = 1, pure temperature sampling, the stop tokens of
    :func:`stop_token_ids` and nothing else: the model's generation_config.json and its eos
    are ignored, as in the transformers path), so samples do not depend on batching.

    Its request construction and output parsing are tested on CPU with a stand-in engine (vLLM
    is not installed in this project's environment); its GPU run is untested. vLLM's samples
    are not the transformers path's: each engine has its own random streams.
    """

    def __init__(self, llm: Any, sampling_params: Any) -> None:
        self.llm, self.sampling_params = llm, sampling_params

    @classmethod
    def from_folder(cls, folder: Path, dtype: str) -> VllmSampler:
        from vllm import LLM, SamplingParams

        # generation_config="vllm": vLLM's neutral defaults, not the folder's (e.g. a
        # repetition penalty), as the transformers path does.
        # Tensor parallelism over every GPU the job was given (resources.posttrain_sample.gpus).
        llm = LLM(
            model=str(folder),
            dtype=dtype,
            seed=0,
            generation_config="vllm",
            tensor_parallel_size=max(torch.cuda.device_count(), 1),
        )
        return cls(llm, SamplingParams)

    def requests(
        self,
        prompt_ids: Sequence[Sequence[int]],
        seeds: Sequence[int],
        *,
        temperature: float,
        max_new_tokens: int,
        stops: Mapping[int, str],
    ) -> tuple[list[dict[str, list[int]]], list[Any]]:
        """The prompts (token ids) and one SamplingParams per sample; greedy (temperature 0)
        takes no seed."""
        prompts = [{"prompt_token_ids": list(p)} for p in prompt_ids]
        params = [
            self.sampling_params(
                n=1,
                temperature=temperature,
                top_p=1.0,
                max_tokens=max_new_tokens,
                seed=s if temperature > 0 else None,
                stop_token_ids=list(stops),
                ignore_eos=True,
            )
            for s in seeds
        ]
        return prompts, params

    def generate(
        self,
        prompt_ids: Sequence[Sequence[int]],
        seeds: Sequence[int],
        *,
        temperature: float,
        max_new_tokens: int,
        stops: Mapping[int, str],
    ) -> list[tuple[list[int], str]]:
        prompts, params = self.requests(
            prompt_ids, seeds, temperature=temperature, max_new_tokens=max_new_tokens, stops=stops
        )
        outputs = list(self.llm.generate(prompts, params))
        if len(outputs) != len(prompts):
            raise ApertusError(f"vLLM answered {len(outputs)} of {len(prompts)} requests")
        return [
            parse_vllm_output(out, ids, stops, max_new_tokens)
            for out, ids in zip(outputs, prompt_ids, strict=True)
        ]


def parse_vllm_output(
    out: Any, prompt_ids: Sequence[int], stops: Mapping[int, str], max_new_tokens: int
) -> tuple[list[int], str]:
    """(completion ids, finish reason) of one vLLM RequestOutput (its first completion's
    ``token_ids`` and ``stop_reason``), as :func:`generate_ids` gives them."""
    sent = getattr(out, "prompt_token_ids", None)
    if sent is not None and list(sent) != list(prompt_ids):
        raise ApertusError(f"vLLM request {out.request_id}: answered another prompt")
    if not out.outputs:
        raise ApertusError(f"vLLM request {out.request_id}: no completion")
    completion = out.outputs[0]
    ids = list(completion.token_ids)
    # vLLM v1 keeps the stop token in token_ids; older versions report it only here.
    stop = completion.stop_reason
    if isinstance(stop, int) and (not ids or ids[-1] != stop):
        ids.append(stop)
    return _cut_at_stop(ids[:max_new_tokens], stops)


def use_vllm(engine: str) -> bool:
    available = importlib.util.find_spec("vllm") is not None and torch.cuda.is_available()
    if engine == "vllm" and not available:
        raise ApertusError("engine vllm asked for, but vllm is not installed or no GPU is present")
    return engine == "vllm" or (engine == "auto" and available)


class PolicySampler:
    """A policy of an exported folder answering prompts: its tokenizer and stop tokens at once,
    its model (transformers, or vLLM: :class:`VllmSampler`) when it first answers, once.

    A prompt whose rendering and `max_new_tokens` exceed the model's context
    (``max_position_embeddings``) is refused naming its id, before anything is sampled."""

    def __init__(
        self,
        model_dir: str | os.PathLike,
        *,
        max_new_tokens: int,
        batch_size: int,
        dtype: str = "float32",
        device: str = "auto",
        engine: str = "transformers",
    ) -> None:
        self.folder = check_hf_folder(model_dir, "model")
        self.tokenizer = load_hf_tokenizer(self.folder, "model")
        self.stops = stop_token_ids(self.tokenizer, self.folder)
        text_config = AutoConfig.from_pretrained(str(self.folder)).get_text_config()
        self.context = getattr(text_config, "max_position_embeddings", None)
        self.max_new_tokens, self.batch_size = max_new_tokens, batch_size
        self.dtype, self.device = dtype, device
        self.vllm = use_vllm(engine)
        self.engine = "vllm" if self.vllm else "transformers"
        self._model: Any = None

    def render(self, prompt: QrpoPrompt) -> list[int]:
        ids = render_chat(
            self.tokenizer, prompt.messages, add_generation_prompt=True, where=f"prompt {prompt.id}"
        )
        if self.context is not None and len(ids) + self.max_new_tokens > self.context:
            raise ApertusError(
                f"prompt {prompt.id}: {len(ids)} tokens + max_new_tokens {self.max_new_tokens} "
                f"exceed the context of {self.folder} ({self.context} tokens)"
            )
        return ids

    def _engine(self) -> Any:
        if self._model is None:
            if self.vllm:
                self._model = VllmSampler.from_folder(self.folder, self.dtype)
            else:
                self._model = load_causal_lm(self.folder, dtype=self.dtype, device=self.device)
        return self._model

    def answers(
        self,
        prompts: Sequence[QrpoPrompt],
        *,
        n: int,
        temperature: float,
        seed: int,
        progress: Progress | None = None,
    ) -> list[Sample]:
        """`n` answers per prompt (prompt-major order); temperature 0 is greedy."""
        rendered = [self.render(p) for p in prompts]
        jobs = [(i, j) for i in range(len(prompts)) for j in range(n)]
        prompt_ids = [rendered[i] for i, _ in jobs]
        seeds = [sample_seed(seed, prompts[i].id, j) for i, j in jobs]
        options = {
            "temperature": temperature,
            "max_new_tokens": self.max_new_tokens,
            "stops": self.stops,
        }
        engine = self._engine()
        if self.vllm:
            outputs = engine.generate(prompt_ids, seeds, **options)
            if progress is not None:
                progress.update(len(jobs))
        else:
            pad = self.tokenizer.pad_token_id
            outputs = generate_ids(
                engine,
                prompt_ids,
                seeds,
                batch_size=self.batch_size,
                pad_id=pad if pad is not None else next(iter(self.stops)),
                progress=progress,
                **options,
            )
        samples = []
        for (i, j), ids, (completion, reason) in zip(jobs, prompt_ids, outputs, strict=True):
            body = completion[:-1] if reason != "length" else completion
            samples.append(
                Sample(
                    prompt_id=prompts[i].id,
                    sample_index=j,
                    language=prompts[i].language,
                    prompt_ids=list(ids),
                    completion_ids=completion,
                    text=self.tokenizer.decode(body, skip_special_tokens=True),
                    finish_reason=reason,
                )
            )
        return samples


def generate_answers(
    model_dir: str | os.PathLike,
    prompts: Sequence[QrpoPrompt],
    *,
    n: int = 1,
    temperature: float,
    max_new_tokens: int,
    seed: int,
    batch_size: int,
    dtype: str = "float32",
    device: str = "auto",
    engine: str = "transformers",
) -> list[Sample]:
    """`n` answers per prompt (prompt-major order) from the model in `model_dir`, the prompts
    rendered with its chat template and ``add_generation_prompt=True``; temperature 0 is
    greedy. An answer stops at ``<|assistant_end|>`` or ``</s>`` (kept) or after
    `max_new_tokens`."""
    sampler = PolicySampler(
        model_dir,
        max_new_tokens=max_new_tokens,
        batch_size=batch_size,
        dtype=dtype,
        device=device,
        engine=engine,
    )
    log.info(
        "%d answer(s) to %d prompt(s) from %s with %s at temperature %s",
        n * len(prompts),
        len(prompts),
        sampler.folder,
        sampler.engine,
        temperature,
    )
    how = "greedy" if temperature == 0 else f"T={temperature:g}"
    what = f"sampling {sampler.folder.name} ({how})"
    with Progress(n * len(prompts), what, unit="completions") as progress:
        return sampler.answers(prompts, n=n, temperature=temperature, seed=seed, progress=progress)


def mean_reward(
    model_dir: str | os.PathLike,
    prompts: Sequence[QrpoPrompt],
    reward: Reward | RewardConfig | Mapping[str, Any] | None,
    *,
    max_new_tokens: int,
    batch_size: int = 8,
    dtype: str = "float32",
    device: str = "auto",
    n: int = 1,
    temperature: float = 0.0,
    seed: int = 0,
) -> dict[str, Any]:
    """Answers of the model in `model_dir` to `prompts`, scored with `reward`: the mean reward
    overall and per language, each prompt's reward and first answer (to pair models), and
    ``ended_turn``, the fraction of answers that ended with ``<|assistant_end|>`` (the chat
    format's end of turn, not cut at `max_new_tokens` nor closed with ``</s>``). Greedy by
    default; with ``temperature > 0``, `n` seeded samples per prompt, a prompt's reward being
    the mean over its samples (the policy's expected reward, what QRPO optimises). Each answer
    carries its prompt's category, so a :class:`RewardsByCategory` scores it with that
    category's reward; means are also given per category (``per_category``)."""
    if not hasattr(reward, "score"):
        reward = build_reward(reward)
    answers = generate_answers(
        model_dir,
        prompts,
        n=n,
        temperature=temperature,
        max_new_tokens=max_new_tokens,
        seed=seed,
        batch_size=batch_size,
        dtype=dtype,
        device=device,
    )
    exchanges = [
        Exchange(p.id, p.messages, answers[i * n + j].text, p.reference, p.category)
        for i, p in enumerate(prompts)
        for j in range(n)
    ]
    scores = reward.score(exchanges)
    rewards = [sum(scores[i * n : (i + 1) * n]) / n for i in range(len(prompts))]
    summary = summarize_rewards(
        [p.language for p in prompts], rewards, [p.category for p in prompts]
    ).as_dict()
    summary["prompts"] = {
        p.id: {"reward": r, "answer": answers[i * n].text}
        for i, (p, r) in enumerate(zip(prompts, rewards, strict=True))
    }
    summary["ended_turn"] = sum(a.finish_reason == "assistant_end" for a in answers) / len(answers)
    return summary


def sample_references(
    model_dir: str | os.PathLike,
    prompts: Sequence[QrpoPrompt],
    *,
    n: int,
    temperature: float = 1.0,
    max_new_tokens: int,
    seed: int,
    batch_size: int,
    dtype: str = "float32",
    device: str = "auto",
    engine: str = "auto",
) -> list[Sample]:
    """QRPO's reference samples (RECIPE.md §7): `n` answers per prompt from the SFT model at
    `temperature` (1 in the recipe), each reproducible from (seed, prompt id, sample index)."""
    if temperature <= 0:
        raise ApertusError("reference samples need a temperature > 0 (they are samples)")
    return generate_answers(
        model_dir,
        prompts,
        n=n,
        temperature=temperature,
        max_new_tokens=max_new_tokens,
        seed=seed,
        batch_size=batch_size,
        dtype=dtype,
        device=device,
        engine=engine,
    )


# --- reference log-probs ---------------------------------------------------------------------


@torch.no_grad()
def completion_logprobs(
    model: Any,
    sequences: Sequence[tuple[Sequence[int], Sequence[int]]],
    *,
    batch_size: int,
    pad_id: int,
    progress: Progress | None = None,
) -> list[float]:
    """log pi(y | x) = sum over the completion's tokens of log p(y_t | x, y_<t) for each
    (prompt ids, completion ids) pair (the log-probs QRPO's loss uses, RECIPE.md §7);
    `progress` counts the completions.

    Batches are left-padded with explicit positions, so every completion ends at the last
    column and only the last (longest completion) columns of logits are computed. Log-softmax
    in float32, sums in float64."""
    device = next(model.parameters()).device
    out: list[float] = []
    for start in range(0, len(sequences), batch_size):
        batch = sequences[start : start + batch_size]
        if any(not c for _, c in batch):
            raise ApertusError("a completion without tokens has no log-probability")
        keep = max(len(c) for _, c in batch) + 1
        ids, mask, positions = left_padded([[*p, *c] for p, c in batch], pad_id)
        width = ids.shape[1]
        logits = model(
            input_ids=ids.to(device),
            attention_mask=mask.to(device),
            position_ids=positions.to(device),
            logits_to_keep=keep,
        ).logits
        # logits[:, k] predicts the token at column width - keep + k + 1.
        logp = torch.log_softmax(logits[:, :-1].float(), dim=-1)
        targets = ids[:, width - keep + 1 :].to(device)
        token_logp = logp.gather(-1, targets[..., None])[..., 0].double().cpu()
        for i, (_, c) in enumerate(batch):
            out.append(float(token_logp[i, keep - 1 - len(c) :].sum()))
        if progress is not None:
            progress.update(len(batch))
    return out


def reference_logprobs(
    model_dir: str | os.PathLike,
    samples: Sequence[Sample],
    *,
    batch_size: int = 8,
    dtype: str = "float32",
    device: str = "auto",
) -> list[float]:
    """log pi_ref(y | x) of every sample under the model in `model_dir` (the SFT model, which
    is QRPO's reference), computed once so training never runs the reference model."""
    folder = check_hf_folder(model_dir, "model")
    tokenizer = load_hf_tokenizer(folder, "model", chat=False)
    model = load_causal_lm(folder, dtype=dtype, device=device)
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    what = f"reference log-probs {folder.name}"
    with Progress(len(samples), what, unit="completions") as progress:
        return completion_logprobs(
            model,
            [(s.prompt_ids, s.completion_ids) for s in samples],
            batch_size=batch_size,
            pad_id=pad_id,
            progress=progress,
        )


# --- files -----------------------------------------------------------------------------------


def write_samples(path: Path, samples: Sequence[Sample]) -> None:
    with atomic_open(path) as f:
        for s in samples:
            f.write(json.dumps(asdict(s), ensure_ascii=False) + "\n")


def _int_list(value: Any) -> bool:
    return isinstance(value, list) and all(
        isinstance(t, int) and not isinstance(t, bool) and t >= 0 for t in value
    )


def parse_sample(obj: Any, where: str, prompt_ids: Mapping[str, Any], n: int) -> Sample:
    """One sample of a samples file (or of a resume log), checked: its prompt is one of
    `prompt_ids`, its index in 0..n-1, its ids lists of ids and its completion not empty."""
    names = [f.name for f in fields(Sample)]
    if not isinstance(obj, dict) or set(obj) != set(names):
        raise ApertusError(f"{where}: a sample has exactly the keys {', '.join(names)}")
    if obj["prompt_id"] not in prompt_ids:
        raise ApertusError(f"{where}: prompt {obj['prompt_id']!r} is not in the prompts file")
    if not isinstance(obj["sample_index"], int) or not 0 <= obj["sample_index"] < n:
        raise ApertusError(f"{where}: sample_index must be in 0..{n - 1}")
    if not _int_list(obj["prompt_ids"]) or not _int_list(obj["completion_ids"]):
        raise ApertusError(f"{where}: prompt_ids and completion_ids must be lists of ids")
    if not obj["completion_ids"]:
        raise ApertusError(f"{where}: empty completion")
    if obj["finish_reason"] not in ("assistant_end", "eos", "length"):
        raise ApertusError(f"{where}: unknown finish_reason {obj['finish_reason']!r}")
    return Sample(**obj)


def read_samples(path: str | os.PathLike, prompts: Sequence[QrpoPrompt], n: int) -> list[Sample]:
    """The samples of `samples.jsonl`, checked against the prompts: every prompt has exactly
    the samples 0..n-1, each once (the reference set of a prompt must be complete)."""
    path = Path(path)
    by_id = {p.id: p for p in prompts}
    samples: list[Sample] = []
    seen: dict[tuple[str, int], int] = {}
    for lineno, obj in _json_lines(path):
        where = f"{path} line {lineno}"
        sample = parse_sample(obj, where, by_id, n)
        key = (sample.prompt_id, sample.sample_index)
        if key in seen:
            raise ApertusError(f"{where}: sample {key} already on line {seen[key]}")
        seen[key] = lineno
        samples.append(sample)
    counts = Counter(s.prompt_id for s in samples)
    incomplete = [p.id for p in prompts if counts[p.id] != n]
    if incomplete:
        raise ApertusError(
            f"{path}: {len(incomplete)} prompt(s) without their {n} samples "
            f"(e.g. {incomplete[0]!r} has {counts[incomplete[0]]})"
        )
    order = {p.id: i for i, p in enumerate(prompts)}
    return sorted(samples, key=lambda s: (order[s.prompt_id], s.sample_index))


def completion_records(
    samples: Sequence[Sample], rewards: Sequence[float], reference_logps: Sequence[float]
) -> list[dict[str, Any]]:
    """The lines of completions.jsonl. Every sample is a training completion and one of its
    prompt's reference samples, so a prompt's ``reference_rewards`` are the rewards of all its
    samples (in sample order); QRPO's quantile reward of a completion is the fraction of them
    at most its own reward (RECIPE.md §7)."""
    if not len(samples) == len(rewards) == len(reference_logps):
        raise ValueError("one reward and one reference log-prob per sample")
    for s, r, lp in zip(samples, rewards, reference_logps, strict=True):
        if not math.isfinite(r) or not math.isfinite(lp):
            raise ApertusError(
                f"sample {s.prompt_id}:{s.sample_index}: reward {r} / reference log-prob {lp} "
                "is not finite"
            )
    per_prompt: dict[str, list[tuple[int, float]]] = {}
    for s, r in zip(samples, rewards, strict=True):
        per_prompt.setdefault(s.prompt_id, []).append((s.sample_index, r))
    reference = {pid: [r for _, r in sorted(rs)] for pid, rs in per_prompt.items()}
    return [
        {
            "prompt_id": s.prompt_id,
            "completion_id": f"{s.prompt_id}:{s.sample_index}",
            "input_ids": list(s.prompt_ids) + list(s.completion_ids),
            "completion_mask": [0] * len(s.prompt_ids) + [1] * len(s.completion_ids),
            "reward": float(r),
            "reference_rewards": reference[s.prompt_id],
            "reference_logp": float(lp),
        }
        for s, r, lp in zip(samples, rewards, reference_logps, strict=True)
    ]


def _exchanges(samples: Sequence[Sample], prompts: Sequence[QrpoPrompt]) -> list[Exchange]:
    by_id = {p.id: p for p in prompts}
    return [
        Exchange(
            s.prompt_id,
            by_id[s.prompt_id].messages,
            s.text,
            by_id[s.prompt_id].reference,
            by_id[s.prompt_id].category,
        )
        for s in samples
    ]


# --- entry points ----------------------------------------------------------------------------


def _shard_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--shard",
        type=int,
        default=0,
        help="this job's shard of the prompts, 0 .. posttrain.qrpo_data.shards - 1",
    )
    parser.add_argument(
        "--work-dir",
        type=Path,
        help="where a killed job's finished prompts wait for its re-run "
        "(default: _work/<output folder name> beside the output folder)",
    )


def _work_dir(args: argparse.Namespace) -> Path:
    return (
        args.work_dir
        if args.work_dir is not None
        else args.output.parent / "_work" / (args.output.name)
    )


def _prompt_chunk(batch_size: int, n: int) -> int:
    """Prompts per piece of a shard's work: the fewest whose `n` samples each fill whole batches
    of `batch_size` sequences (as many forward passes as without pieces); a shard's resume log
    gains their lines after each piece."""
    return batch_size // math.gcd(batch_size, n)


def _sample(argv: list[str]) -> None:
    parser = stage_parser(STAGE, "Sample QRPO's reference answers from the SFT model.")
    parser.add_argument("--model", type=Path, required=True, help="the SFT model's HF folder")
    parser.add_argument("--prompts", type=Path, required=True, help="QRPO prompts (JSONL)")
    parser.add_argument("--output", type=Path, required=True, help="folder for samples.jsonl")
    _shard_arguments(parser)
    args = parser.parse_args(argv)
    cfg = SamplingConfig.from_dict(args.config)
    out = args.output / "samples.jsonl"
    with StepRun(
        STAGE,
        "qrpo_sample",
        args.config,
        inputs=[args.model, args.prompts],
        outputs=[out],
        manifest=args.manifest,
        seed=cfg.seed,
    ) as step:
        prompts = shard_prompts(load_prompts(args.prompts), args.shard, cfg.shards)
        n = cfg.n_samples
        sampler = PolicySampler(
            args.model,
            max_new_tokens=cfg.max_new_tokens,
            batch_size=cfg.batch_size,
            dtype=cfg.dtype,
            device=cfg.device,
            engine=cfg.engine,
        )
        by_id = {p.id: p for p in prompts}

        def check(record: dict[str, Any]) -> None:
            prompt = by_id.get(record.get("prompt_id"))
            if prompt is None or not isinstance(record.get("samples"), list):
                raise ApertusError("not the samples of a prompt of this shard")
            parsed = [
                parse_sample(obj, f"prompt {prompt.id}", by_id, n) for obj in record["samples"]
            ]
            if [(s.prompt_id, s.sample_index) for s in parsed] != [
                (prompt.id, j) for j in range(n)
            ]:
                raise ApertusError(f"prompt {prompt.id}: not its samples 0..{n - 1}")
            if any(s.prompt_ids != sampler.render(prompt) for s in parsed):
                raise ApertusError(f"prompt {prompt.id}: sampled from another rendering")

        fingerprint = resume_fingerprint(
            "qrpo_sample", args.config, args.shard, [args.model, args.prompts]
        )
        resume = ResumeLog(_work_dir(args) / "samples.partial.jsonl", fingerprint)
        done = resume.read(check)
        resumed = len(done)
        remaining = [p for p in prompts if p.id not in done]
        for p in remaining:  # a prompt too long for the context fails before any sampling
            sampler.render(p)
        what = f"QRPO samples, shard {args.shard} of {cfg.shards}"
        with Progress(n * len(prompts), what, unit="completions", initial=n * resumed) as progress:
            for chunk in chunks(remaining, _prompt_chunk(cfg.batch_size, n)):
                answers = sampler.answers(
                    chunk, n=n, temperature=cfg.temperature, seed=cfg.seed, progress=progress
                )
                resume.add_prompts(done, chunk, "samples", [asdict(a) for a in answers], n)
        samples = [Sample(**obj) for p in prompts for obj in done[p.id]["samples"]]
        args.output.mkdir(parents=True, exist_ok=True)
        write_samples(out, samples)
        resume.finish()
        step.summary.update(
            shard=args.shard,
            shards=cfg.shards,
            prompts=len(prompts),
            resumed_prompts=resumed,
            dropped_resume_lines=resume.dropped,
            samples=len(samples),
            engine=sampler.engine,
            finish_reasons=dict(Counter(s.finish_reason for s in samples)),
            mean_completion_tokens=(
                sum(len(s.completion_ids) for s in samples) / len(samples) if samples else None
            ),
        )


def _finite_numbers(key: str, prompt_ids: Collection[str], n: int) -> Callable[[dict], None]:
    """A resume log's check: the record of a prompt of this shard with `n` finite `key`s."""

    def check(record: dict[str, Any]) -> None:
        values = record.get(key)
        if (
            record.get("prompt_id") not in prompt_ids
            or not isinstance(values, list)
            or len(values) != n
            or not all(
                isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)
                for v in values
            )
        ):
            raise ApertusError(f"not the {n} finite {key} of a prompt of this shard")

    return check


def scored_summary(
    prompts: Sequence[QrpoPrompt],
    rewards: Sequence[float],
    n: int,
    cfg: SamplingConfig,
    reward_record: Mapping[str, Any],
) -> dict[str, Any]:
    """The rewards.json of scored prompts (module doc), their rewards in prompt-major order;
    an empty shard has ``count`` 0 and ``mean`` null."""
    languages = [p.language for p in prompts for _ in range(n)]
    categories = [p.category for p in prompts for _ in range(n)]
    if rewards:
        summary = summarize_rewards(languages, rewards, categories).as_dict()
    else:
        summary = {"count": 0, "mean": None, "per_language": {}, "per_category": {}}
    summary.update(
        reward=describe_reward(cfg.reward),
        **reward_record,
        prompts=len(prompts),
        samples=len(rewards),
    )
    return summary


def _score(argv: list[str]) -> None:
    parser = stage_parser(STAGE, "Score QRPO's samples and compute their reference log-probs.")
    parser.add_argument("--model", type=Path, required=True, help="the SFT model's HF folder")
    parser.add_argument("--samples", type=Path, required=True, help="folder with samples.jsonl")
    parser.add_argument("--prompts", type=Path, required=True, help="QRPO prompts (JSONL)")
    parser.add_argument("--output", type=Path, required=True, help="folder for completions.jsonl")
    _shard_arguments(parser)
    args = parser.parse_args(argv)
    cfg = SamplingConfig.from_dict(args.config)
    completions, summary_path = args.output / "completions.jsonl", args.output / "rewards.json"
    samples_path = args.samples / "samples.jsonl"
    rewards_by_category = cfg.rewards()  # checks rubric files; loads no model yet
    inputs = [
        args.model,
        samples_path,
        args.prompts,
        *rubric_files(cfg.reward, cfg.rewards_by_category),
    ]
    with StepRun(
        STAGE,
        "qrpo_score",
        args.config,
        inputs=inputs,
        outputs=[completions, summary_path],
        manifest=args.manifest,
        seed=cfg.seed,
    ) as step:
        prompts = shard_prompts(load_prompts(args.prompts), args.shard, cfg.shards)
        n = cfg.n_samples
        samples = read_samples(samples_path, prompts, n)
        folder = check_hf_folder(args.model, "model")
        tokenizer = load_hf_tokenizer(folder, "model")
        # The model's vocabulary, not the tokenizer's: an export may pad the embedding beyond
        # the tokenizer, and a sampler can draw those ids (decoding skips them).
        text_config = AutoConfig.from_pretrained(str(folder)).get_text_config()
        vocab, context = text_config.vocab_size, text_config.max_position_embeddings
        by_id = {p.id: p for p in prompts}
        rendered: dict[str, list[int]] = {}
        for s in samples:
            if s.prompt_id not in rendered:
                p = by_id[s.prompt_id]
                rendered[p.id] = render_chat(
                    tokenizer, p.messages, add_generation_prompt=True, where=f"prompt {p.id}"
                )
            if s.prompt_ids != rendered[s.prompt_id]:
                raise ApertusError(
                    f"{samples_path}: sample {s.prompt_id}:{s.sample_index} was not sampled from "
                    f"this prompt in {args.prompts} with the tokenizer of {folder}"
                )
            if max(s.completion_ids) >= vocab:
                raise ApertusError(
                    f"{samples_path}: sample {s.prompt_id}:{s.sample_index} has token ids "
                    f"outside the vocabulary of {folder} ({vocab})"
                )
            if context and len(s.prompt_ids) + len(s.completion_ids) > context:
                raise ApertusError(
                    f"prompt {s.prompt_id}: sample {s.sample_index} has "
                    f"{len(s.prompt_ids) + len(s.completion_ids)} tokens, longer than the "
                    f"context of {folder} ({context})"
                )
        # samples are in prompt order, n per prompt (read_samples)
        of_prompt = {p.id: samples[i * n : (i + 1) * n] for i, p in enumerate(prompts)}
        work = _work_dir(args)
        shard = f"shard {args.shard} of {cfg.shards}"
        reward_log = ResumeLog(
            work / "rewards.partial.jsonl",
            resume_fingerprint("qrpo_score.rewards", args.config, args.shard, inputs),
        )
        logp_log = ResumeLog(
            work / "logps.partial.jsonl",
            resume_fingerprint("qrpo_score.logps", args.config, args.shard, inputs),
        )
        # Every sample of a prompt, its reference samples included, is scored by the reward
        # of the prompt's category: the quantile reward compares like with like. One reward
        # model at a time: the prompts grouped by the reward that scores them.
        rewards_done = reward_log.read(_finite_numbers("rewards", by_id, n))
        resumed_rewards = len(rewards_done)
        routes: dict[str, list[QrpoPrompt]] = {}
        for p in prompts:
            if p.id not in rewards_done:
                routes.setdefault(rewards_by_category.route(p.category), []).append(p)
        with Progress(
            n * len(prompts),
            f"QRPO rewards, {shard}",
            "completions",
            initial=n * len(rewards_done),
        ) as progress:
            for route, group in routes.items():
                size = _prompt_chunk(rewards_by_category.configs[route].batch_size, n)
                for chunk in chunks(group, size):
                    chunk_samples = [s for p in chunk for s in of_prompt[p.id]]
                    scores = rewards_by_category.score(
                        _exchanges(chunk_samples, prompts), progress=progress
                    )
                    reward_log.add_prompts(rewards_done, chunk, "rewards", scores, n)
        category = {p.id: p.category for p in prompts}
        reward_record = rewards_by_category.record(category)
        del rewards_by_category  # its model, before the reference model is loaded

        logps_done = logp_log.read(_finite_numbers("reference_logp", by_id, n))
        resumed_logps = len(logps_done)
        remaining = [p for p in prompts if p.id not in logps_done]
        model = load_causal_lm(folder, dtype=cfg.dtype, device=cfg.device) if remaining else None
        pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
        with Progress(
            n * len(prompts),
            f"QRPO reference log-probs, {shard}",
            "completions",
            initial=n * len(logps_done),
        ) as progress:
            for chunk in chunks(remaining, _prompt_chunk(cfg.batch_size, n)):
                values = completion_logprobs(
                    model,
                    [(s.prompt_ids, s.completion_ids) for p in chunk for s in of_prompt[p.id]],
                    batch_size=cfg.batch_size,
                    pad_id=pad_id,
                    progress=progress,
                )
                logp_log.add_prompts(logps_done, chunk, "reference_logp", values, n)
        del model
        rewards = [float(r) for p in prompts for r in rewards_done[p.id]["rewards"]]
        logps = [float(v) for p in prompts for v in logps_done[p.id]["reference_logp"]]
        records = completion_records(samples, rewards, logps)
        args.output.mkdir(parents=True, exist_ok=True)
        with atomic_open(completions) as f:
            for record in records:
                f.write(json.dumps(record) + "\n")
        summary = scored_summary(prompts, rewards, n, cfg, reward_record)
        atomic_write_json(summary_path, summary)
        reward_log.finish()
        logp_log.finish()
        step.summary.update(
            shard=args.shard,
            shards=cfg.shards,
            prompts=len(prompts),
            resumed_prompts={"rewards": resumed_rewards, "reference_logp": resumed_logps},
            dropped_resume_lines=reward_log.dropped + logp_log.dropped,
            completions=len(records),
            mean_reward=summary["mean"],
            mean_reference_logp=math.fsum(logps) / len(logps) if logps else None,
            **_reward_summary(reward_record),
        )


def _merge(argv: list[str]) -> None:
    parser = stage_parser(STAGE, "Join the scored shards of QRPO's completions.")
    parser.add_argument(
        "--scored",
        type=Path,
        action="append",
        required=True,
        help="a score step's output folder; one per shard, in shard order",
    )
    parser.add_argument("--prompts", type=Path, required=True, help="QRPO prompts (JSONL)")
    parser.add_argument("--output", type=Path, required=True, help="folder for completions.jsonl")
    args = parser.parse_args(argv)
    cfg = SamplingConfig.from_dict(args.config)
    if len(args.scored) != cfg.shards:
        raise ApertusError(
            f"{len(args.scored)} scored folder(s) for posttrain.qrpo_data.shards {cfg.shards}"
        )
    completions, summary_path = args.output / "completions.jsonl", args.output / "rewards.json"
    rewards_by_category = cfg.rewards()  # loads no model: only its record is written
    with StepRun(
        STAGE,
        "qrpo_merge",
        args.config,
        inputs=[args.prompts, *(folder / "completions.jsonl" for folder in args.scored)],
        outputs=[completions, summary_path],
        manifest=args.manifest,
        seed=cfg.seed,
    ) as step:
        prompts = load_prompts(args.prompts)
        order = {p.id: i for i, p in enumerate(prompts)}
        n = cfg.n_samples

        def shard_lines(shard: int, folder: Path) -> Iterator[tuple[tuple[int, int], str, dict]]:
            """A shard's completions in order, each checked to belong to the shard."""
            path = folder / "completions.jsonl"
            last = None
            for lineno, record in _json_lines(path):
                where = f"{path} line {lineno}"
                pid = record.get("prompt_id") if isinstance(record, dict) else None
                if pid not in order:
                    raise ApertusError(f"{where}: prompt {pid!r} is not in {args.prompts}")
                if prompt_shard(pid, cfg.shards) != shard:
                    raise ApertusError(
                        f"{where}: prompt {pid} is in shard {prompt_shard(pid, cfg.shards)}, "
                        f"not {shard} (folders are given in shard order)"
                    )
                index = str(record.get("completion_id", "")).rpartition(":")[2]
                key = (order[pid], int(index) if index.isdigit() else -1)
                if last is not None and key <= last:
                    raise ApertusError(f"{where}: not in prompt and sample order")
                last = key
                yield key, json.dumps(record) + "\n", record

        counts: Counter[str] = Counter()
        rewards: list[float] = []
        logps: list[float] = []
        args.output.mkdir(parents=True, exist_ok=True)
        with atomic_open(completions) as f:
            streams = [shard_lines(k, folder) for k, folder in enumerate(args.scored)]
            for _, line, record in heapq.merge(*streams, key=lambda t: t[0]):
                pid = record["prompt_id"]
                if not (
                    math.isfinite(record["reward"]) and math.isfinite(record["reference_logp"])
                ):
                    raise ApertusError(
                        f"prompt {pid}: a reward or reference log-prob is not finite"
                    )
                counts[pid] += 1
                rewards.append(record["reward"])
                logps.append(record["reference_logp"])
                f.write(line)
            # Checked before the file replaces its old version: a prompt must keep its samples.
            incomplete = [p.id for p in prompts if counts[p.id] != n]
            if incomplete:
                raise ApertusError(
                    f"prompt {incomplete[0]} has {counts[incomplete[0]]} of its {n} reference "
                    f"samples in the scored shards ({len(incomplete)} prompt(s) incomplete)"
                )
        reward_record = rewards_by_category.record({p.id: p.category for p in prompts})
        atomic_write_json(summary_path, scored_summary(prompts, rewards, n, cfg, reward_record))
        step.summary.update(
            shards=cfg.shards,
            prompts=len(prompts),
            completions=len(rewards),
            mean_reward=math.fsum(rewards) / len(rewards),
            mean_reference_logp=math.fsum(logps) / len(logps),
            **_reward_summary(reward_record),
        )


def _heldout(argv: list[str]) -> None:
    parser = stage_parser(STAGE, "Answer the held-out prompts with one policy and score them.")
    parser.add_argument("--model", type=Path, required=True, help="the policy's HF folder")
    parser.add_argument("--prompts", type=Path, required=True, help="held-out prompts (JSONL)")
    parser.add_argument("--output", type=Path, required=True, help="folder for rewards.json")
    args = parser.parse_args(argv)
    cfg = SamplingConfig.from_dict(args.config)
    out = args.output / HELDOUT_REWARDS
    reward = cfg.rewards()  # checks rubric files; loads no model yet
    with StepRun(
        STAGE,
        "heldout",
        args.config,
        inputs=[args.model, args.prompts, *rubric_files(cfg.reward, cfg.rewards_by_category)],
        outputs=[out],
        manifest=args.manifest,
        seed=cfg.seed,
    ) as step:
        prompts = load_prompts(args.prompts)
        options = {
            "max_new_tokens": cfg.max_new_tokens,
            "batch_size": cfg.batch_size,
            "dtype": cfg.dtype,
            "device": cfg.device,
        }
        greedy = mean_reward(args.model, prompts, reward, **options)
        # The policy's expected reward: n samples per prompt at the sampling temperature
        # (seeded apart from the QRPO samples).
        sampled = mean_reward(
            args.model,
            prompts,
            reward,
            n=cfg.n_samples,
            temperature=cfg.temperature,
            seed=cfg.seed + 1,
            **options,
        )
        record = reward.record({p.id: p.category for p in prompts})
        args.output.mkdir(parents=True, exist_ok=True)
        result = {"model": str(args.model), "config": args.config, "rewards": record}
        atomic_write_json(out, {**result, "greedy": greedy, "sampled": sampled})
        step.summary.update(
            prompts=len(prompts),
            mean_reward=greedy["mean"],
            mean_sampled_reward=sampled["mean"],
            ended_turn=greedy["ended_turn"],
            sampled_ended_turn=sampled["ended_turn"],
            **_reward_summary(record),
        )


def _reward_summary(record: Mapping[str, Any]) -> dict[str, Any]:
    """A manifest's view of :meth:`RewardsByCategory.record`: prompts per category with the
    reward that scored them, and the SHA-256 of each rubric file read and of each judge's
    template (its file, or the built-in one)."""
    return {
        "categories": record["categories"],
        **{
            name: {key: r[name] for key, r in record["rewards"].items() if r[name] is not None}
            for name in ("rubric_sha256", "template_sha256")
        },
    }


def read_heldout(folder: str | os.PathLike, config: Mapping[str, Any]) -> dict[str, Any]:
    """The rewards.json of a heldout step's `folder`, refused unless it was made with
    `config` (the report's ``posttrain.qrpo_data``): policies compare only under one reward,
    one sampling temperature and one number of samples."""
    path = Path(folder) / HELDOUT_REWARDS
    if not path.is_file():
        raise ApertusError(f"{path} does not exist (the heldout step writes it)")
    try:
        result = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise ApertusError(f"{path}: not valid JSON ({e.msg})") from None
    keys = {"model", "config", "rewards", "greedy", "sampled"}
    if not isinstance(result, dict) or set(result) != keys:
        raise ApertusError(f"{path}: expected an object with the keys {', '.join(sorted(keys))}")
    if result["config"] != config:
        raise ApertusError(
            f"{path} was made with another posttrain.qrpo_data config than the report's "
            "(run its heldout step again)"
        )
    return result


def _policy_argument(text: str) -> tuple[str, Path]:
    name, sep, folder = text.partition("=")
    if not sep or not name or not folder:
        raise argparse.ArgumentTypeError(f"--policy takes NAME=FOLDER, not {text!r}")
    return name, Path(folder)


def reward_comparison(results: Mapping[str, Mapping[str, Any]]) -> dict[str, dict[str, float]]:
    """Each model against the first (the baseline, e.g. the SFT model): the difference of mean
    rewards with the standard error of the paired per-prompt differences (sample standard
    deviation / sqrt(prompts); 0 for a single prompt), and the fraction of prompts where its
    reward is higher (win) or equal (tie)."""
    names = list(results)
    base = results[names[0]]["prompts"]
    comparison = {}
    for name in names[1:]:
        own = results[name]["prompts"]
        diffs = [own[pid]["reward"] - base[pid]["reward"] for pid in base]
        mean = math.fsum(diffs) / len(diffs)
        variance = (
            math.fsum((d - mean) ** 2 for d in diffs) / (len(diffs) - 1) if len(diffs) > 1 else 0.0
        )
        comparison[name] = {
            "mean_delta": results[name]["mean"] - results[names[0]]["mean"],
            "delta_stderr": math.sqrt(variance / len(diffs)),
            "win_rate": sum(d > 0 for d in diffs) / len(diffs),
            "tie_rate": sum(d == 0 for d in diffs) / len(diffs),
        }
    return comparison


def reward_report(policies: Mapping[str, Mapping[str, Any]], cfg: SamplingConfig) -> dict[str, Any]:
    """The report of the heldout results of each policy (:func:`read_heldout`), the first being
    the baseline: greedy results under ``models``, sampled ones under ``sampled``, each with
    its comparison to the baseline. Every policy must have answered the same prompts."""
    names = list(policies)
    prompt_ids = set(policies[names[0]]["greedy"]["prompts"])
    for name, result in policies.items():
        for part in ("greedy", "sampled"):
            if set(result[part]["prompts"]) != prompt_ids:
                raise ApertusError(
                    f"policy {name} ({part}) answered other held-out prompts than "
                    f"{names[0]}: compare policies on one prompts file"
                )
    results = {name: {"folder": r["model"], **r["greedy"]} for name, r in policies.items()}
    sampled = {name: r["sampled"] for name, r in policies.items()}
    return {
        "reward": asdict(cfg.reward),
        "rewards_by_category": {c: asdict(r) for c, r in cfg.rewards_by_category.items()},
        "rewards": policies[names[0]]["rewards"],
        "prompt_count": len(prompt_ids),
        "baseline": names[0],
        "order": names,  # the JSON's keys are sorted; this is the order given
        "models": results,
        "comparison": reward_comparison(results),
        "sampled": {
            "n": cfg.n_samples,
            "temperature": cfg.temperature,
            "models": sampled,
            "comparison": reward_comparison(sampled),
        },
    }


def report_markdown(report: Mapping[str, Any]) -> str:
    """The policy's expected reward first (what QRPO maximises), then greedy answers."""
    sampled = report["sampled"]
    kinds = ", ".join(
        [report["reward"]["kind"]]
        + [f"{c}: {r['kind']}" for c, r in sorted(report["rewards_by_category"].items())]
    )
    text = _reward_table(
        report,
        sampled["models"],
        sampled["comparison"],
        f"# Expected reward ({kinds}) of each policy on "
        f"{report['prompt_count']} held-out prompts: mean of {sampled['n']} samples per "
        f"prompt at temperature {sampled['temperature']}",
    )
    return (
        text
        + "\n"
        + _reward_table(
            report,
            report["models"],
            report["comparison"],
            f"# Reward of greedy answers, {report['prompt_count']} held-out prompts",
        )
        + "\nended turn: the fraction of answers that ended with <|assistant_end|> (the chat "
        "format's end of turn) rather than at max_new_tokens or with </s>.\n"
    )


def _reward_table(report, models, comparison, title: str) -> str:
    languages = sorted({lang for r in models.values() for lang in r["per_language"]})
    # Categories may be scored by rewards on different scales: each gets its own column.
    categories = sorted({c for r in models.values() for c in r["per_category"]})
    categories = categories if len(categories) > 1 else []
    head = [
        "model",
        "mean reward",
        *languages,
        *categories,
        "Δ mean vs " + report["baseline"] + " (± s.e.)",
        "win rate",
        "ended turn",
    ]
    lines = [title, "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name in report["order"]:
        r, cmp = models[name], comparison.get(name)
        cells = [
            name,
            f"{r['mean']:.4f}",
            *(
                f"{r['per_language'][lang]['mean']:.4f}" if lang in r["per_language"] else "-"
                for lang in languages
            ),
            *(
                f"{r['per_category'][c]['mean']:.4f}" if c in r["per_category"] else "-"
                for c in categories
            ),
            f"{cmp['mean_delta']:+.4f} ± {cmp['delta_stderr']:.4f}" if cmp else "-",
            f"{cmp['win_rate']:.2f}" if cmp else "-",
            f"{r['ended_turn']:.2f}",
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def _report(argv: list[str]) -> None:
    parser = stage_parser(STAGE, "Compare the held-out rewards of policies (SFT vs aligned).")
    parser.add_argument(
        "--policy",
        type=_policy_argument,
        action="append",
        required=True,
        help="NAME=FOLDER of a heldout step's output; the first is the baseline",
    )
    parser.add_argument("--output", type=Path, required=True, help="the report (JSON)")
    parser.add_argument("--markdown", type=Path, help="also write the table as Markdown")
    args = parser.parse_args(argv)
    cfg = SamplingConfig.from_dict(args.config)
    names = [name for name, _ in args.policy]
    if len(set(names)) != len(names):
        raise ApertusError(f"--policy names must differ: {', '.join(names)}")
    outputs = [args.output] + ([args.markdown] if args.markdown else [])
    with StepRun(
        STAGE,
        "qrpo_report",
        args.config,
        inputs=[folder / HELDOUT_REWARDS for _, folder in args.policy],
        outputs=outputs,
        manifest=args.manifest,
        seed=cfg.seed,
    ) as step:
        policies = {name: read_heldout(folder, args.config) for name, folder in args.policy}
        report = reward_report(policies, cfg)
        args.output.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_json(args.output, report)
        if args.markdown:
            args.markdown.parent.mkdir(parents=True, exist_ok=True)
            atomic_write_text(args.markdown, report_markdown(report))
        step.summary.update(
            prompts=report["prompt_count"],
            mean_reward={n: r["mean"] for n, r in report["models"].items()},
            mean_sampled_reward={n: r["mean"] for n, r in report["sampled"]["models"].items()},
            ended_turn={n: r["ended_turn"] for n, r in report["models"].items()},
            sampled_ended_turn={n: r["ended_turn"] for n, r in report["sampled"]["models"].items()},
        )


COMMANDS = {
    "sample": _sample,
    "score": _score,
    "merge": _merge,
    "heldout": _heldout,
    "report": _report,
}


def main(argv: list[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] not in COMMANDS:
        raise ApertusError(
            f"usage: python -m apertus.posttrain.sampling {{{','.join(COMMANDS)}}} ... "
            f"(got {argv[0] if argv else 'nothing'!r})"
        )
    COMMANDS[argv[0]](argv[1:])


if __name__ == "__main__":
    run_main(main)
