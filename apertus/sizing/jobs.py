"""Every GPU job of a run's DAG, sized from its config alone: `apertus plan`'s rows.

One `PlannedJob` per job: each pretraining phase, the Goldfish control, each long-context
stage, SFT, QRPO, QRPO's sampling and scoring shards, and per trained checkpoint its export
and evaluations. For each: the ranks and how they divide, the tokens of one micro-batch on one
rank, the peak memory per GPU by part (`apertus.sizing.memory`) against the GPU's memory
(``resources.<stage>.gpu_memory_gb``), the FLOPs per token as torchtitan counts them, and
with the stage's assumed MFU (``resources.<stage>.mfu``) of the GPU's peak
(``resources.<stage>.gpu_peak_tflops``) its throughput, wall-clock and GPU-hours; the
checkpoints it writes. `run_plan` adds the token shards on disk and the totals.

No torch: `apertus config check` refuses a job that does not fit (`fit_problems`) before
any job runs, and the Snakefile's config check calls it.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from apertus.core.resources import stage_resources
from apertus.model.shapes import FLAVOR_SHAPES, Shape, num_params
from apertus.sizing.memory import (
    InferenceLayout,
    Memory,
    TrainingLayout,
    inference_memory,
    training_memory,
)

__all__ = ["PlannedJob", "RunPlan", "fit_problems", "flops_per_token", "run_plan"]

TRAINING_RULES = ("pretrain_stage", "posttrain_sft", "posttrain_qrpo")
# A full DCP checkpoint: the fp32 weights and AdEMAMix's three fp32 states per parameter.
CHECKPOINT_BYTES_PER_PARAM = 16


def flops_per_token(shape: Shape, seq_len: int) -> int:
    """Training FLOPs per token as torchtitan counts them (`get_dense_model_nparams_and_flops`,
    `ApertusModel.Config.get_nparams_and_flops`): 6 x the parameters outside the embedding,
    plus attention's 6 x layers x heads x (q/k + v head dims) x sequence length."""
    matmul = num_params(shape) - shape.vocab_size * shape.dim
    attention = 6 * shape.n_layers * shape.n_heads * 2 * shape.attention_head_dim * seq_len
    return 6 * matmul + attention


@dataclass(frozen=True)
class PlannedJob:
    """One job of the DAG, sized."""

    name: str
    rule: str
    resources: str
    """The `resources` entry it runs on (after the fallbacks of `stage_resources`)."""
    nodes: int
    gpus_per_node: int
    layout: str
    memory: Memory
    memory_limit_gb: float | None
    """What its memory is checked against (None: not checked, no `gpu_memory_gb` set)."""
    host_memory: bool = False
    """The memory is host RAM (checked against the entry's mem_mb), not a GPU's."""
    tokens_per_rank: int | None = None
    flops_per_token: int | None = None
    steps: int | None = None
    tokens: int | None = None
    tokens_per_second_per_gpu: float | None = None
    mfu: float | None = None
    wall_seconds: float | None = None
    checkpoints: int = 0
    checkpoint_bytes: int = 0
    fixes: tuple[str, ...] = ()
    """Config keys that would make it fit."""
    note: str = ""
    stage: str | None = None
    """The training stage it trains (a training job), or the checkpoint it reads."""

    @property
    def manifest_key(self) -> str | None:
        """A training job's step manifest in its run, without the ``.manifest.json`` suffix
        (``pretrain/phase1``, ``posttrain/sft``); None for the other jobs."""
        if self.rule not in TRAINING_RULES:
            return None
        return f"{'pretrain' if self.rule == 'pretrain_stage' else 'posttrain'}/{self.stage}"

    @property
    def gpus(self) -> int:
        return self.nodes * self.gpus_per_node

    @property
    def gpu_hours(self) -> float | None:
        if self.wall_seconds is None:
            return None
        return self.wall_seconds * max(self.gpus, 1) / 3600

    @property
    def fits(self) -> bool | None:
        if self.memory_limit_gb is None:
            return None
        return self.memory.total <= self.memory_limit_gb * 1e9

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "stage": self.stage,
            "rule": self.rule,
            "resources": self.resources,
            "nodes": self.nodes,
            "gpus_per_node": self.gpus_per_node,
            "gpus": self.gpus,
            "layout": self.layout,
            "tokens_per_rank": self.tokens_per_rank,
            "memory": {
                "peak_bytes": self.memory.total,
                "counted_bytes": self.memory.counted,
                "moment": self.memory.moment,
                "parts": self.memory.parts,
                "host": self.host_memory,
                "limit_gb": self.memory_limit_gb,
                "fits": self.fits,
            },
            "flops_per_token": self.flops_per_token,
            "steps": self.steps,
            "tokens": self.tokens,
            "tokens_per_second_per_gpu": self.tokens_per_second_per_gpu,
            "mfu": self.mfu,
            "wall_seconds": self.wall_seconds,
            "gpu_hours": self.gpu_hours,
            "checkpoints": self.checkpoints,
            "checkpoint_bytes": self.checkpoint_bytes,
            "fixes": list(self.fixes),
            "note": self.note,
        }


@dataclass(frozen=True)
class RunPlan:
    jobs: list[PlannedJob]
    token_shard_bytes: int
    notes: list[str] = field(default_factory=list)

    @property
    def wall_seconds(self) -> float:
        """The jobs one after another (the DAG's GPU jobs run in sequence, but the shards)."""
        return sum(j.wall_seconds or 0.0 for j in self.jobs)

    @property
    def gpu_hours(self) -> float:
        return sum(j.gpu_hours or 0.0 for j in self.jobs)

    @property
    def checkpoint_bytes(self) -> int:
        return sum(j.checkpoints * j.checkpoint_bytes for j in self.jobs)

    def as_dict(self) -> dict[str, Any]:
        return {
            "jobs": [j.as_dict() for j in self.jobs],
            "total": {
                "wall_seconds": self.wall_seconds,
                "gpu_hours": self.gpu_hours,
                "checkpoint_bytes": self.checkpoint_bytes,
                "token_shard_bytes": self.token_shard_bytes,
            },
            "notes": self.notes,
        }


def _shape(name: str, seq_len: int) -> Shape:
    base = FLAVOR_SHAPES[name]
    return dataclasses.replace(base, max_seq_len=max(seq_len, base.max_seq_len))


def _throughput(entry: Mapping[str, Any], flops: int) -> tuple[float | None, float | None]:
    """Tokens/s per GPU at the entry's MFU of its peak, and the MFU (None: not set)."""
    mfu, peak = entry.get("mfu"), entry.get("gpu_peak_tflops")
    if mfu is None or peak is None:
        return None, mfu
    return mfu * peak * 1e12 / flops, mfu


def _limit(entry: Mapping[str, Any], host: bool = False) -> float | None:
    if entry.get("gpu_memory_gb") is None:
        return None
    return entry["mem_mb"] / 1000 if host else entry["gpu_memory_gb"]


def _accelerator(entry: Mapping[str, Any], device: str) -> bool:
    return device == "cuda" or (device == "auto" and (entry.get("gpus") or 0) > 0)


def _training_job(
    config: Mapping[str, Any],
    *,
    stage: str,
    name: str,
    rule: str,
    resources: str,
    shape: Shape,
    nodes: int,
    nproc: int,
    seq_len: int,
    micro_batch: int,
    tensor_parallel: int,
    context_parallel: int,
    dtype: str,
    device: str,
    activation_checkpoint: str,
    steps: int | None,
    tokens: int | None,
    checkpoint_interval: int,
    keys: Mapping[str, str],
) -> PlannedJob:
    entry = stage_resources(config["resources"], resources)
    accelerator = _accelerator(entry, device)
    layout = TrainingLayout(
        shape=shape,
        seq_len=seq_len,
        micro_batch=micro_batch,
        ranks=nodes * nproc,
        tensor_parallel=tensor_parallel,
        context_parallel=context_parallel,
        dtype=dtype,
        activation_checkpoint=activation_checkpoint,
        attention="flex" if accelerator else "sdpa",
        accelerator=accelerator,
    )
    flops = flops_per_token(shape, seq_len)
    # A CPU job (the default run, the rehearsal) has no GPU to fit or to time.
    rate, mfu = _throughput(entry, flops) if accelerator else (None, None)
    wall = None
    if rate is not None and tokens is not None:
        wall = tokens / (rate * layout.ranks)
    fixes = [keys["micro_batch"]] if micro_batch > 1 else []
    if activation_checkpoint != "full":
        fixes.append(f"{keys['activation_checkpoint']}: full")
    # The keys that lower the peak per GPU, where the stage has them (None: it has not).
    fixes += [
        key
        for key in (keys["context_parallel"], keys["tensor_parallel"], keys["nnodes"], keys["seq"])
        if key is not None
    ]
    return PlannedJob(
        name=name,
        rule=rule,
        resources=resources,
        nodes=nodes,
        gpus_per_node=nproc,
        layout=(
            f"{nodes} x {nproc}: dp {layout.data_parallel} x tp {tensor_parallel} x "
            f"cp {context_parallel}"
        ),
        memory=training_memory(layout),
        memory_limit_gb=_limit(entry) if accelerator else None,
        tokens_per_rank=layout.tokens_per_rank,
        flops_per_token=flops,
        steps=steps,
        tokens=tokens,
        tokens_per_second_per_gpu=rate,
        mfu=mfu,
        wall_seconds=wall,
        checkpoints=math.ceil(steps / checkpoint_interval) if steps else 0,
        checkpoint_bytes=CHECKPOINT_BYTES_PER_PARAM * num_params(shape),
        fixes=tuple(fixes),
        stage=stage,
    )


def _pretrain_jobs(config: Mapping[str, Any]) -> list[PlannedJob]:
    from apertus.train.config import PretrainConfig
    from apertus.train.plan import CONTROL_SUFFIX, planned_phases, pretrain_stages
    from apertus.train.run_spec import batch_ramp

    cfg = PretrainConfig.from_dict(config["pretrain"])
    budgets = {phase["name"]: phase["tokens"] for phase in config["tokenize"]["phases"]}
    ramp = batch_ramp(cfg.batch_ramp, seq_len=cfg.seq_len, global_batch=cfg.global_batch)
    phases = {phase.name: phase for phase in planned_phases(cfg, budgets)}
    long = {stage.name: (i, stage) for i, stage in enumerate(cfg.long_context)}
    jobs = []
    for stage in pretrain_stages(cfg):
        if stage.kind == "long_context":
            i, spec = long[stage.name]
            where = f"pretrain.long_context[{i}]"
            seq_len, steps = spec.seq_len, spec.steps
            tokens = steps * spec.global_batch * seq_len
            micro_batch = math.gcd(cfg.micro_batch, spec.global_batch)
            ac = spec.activation_checkpoint or cfg.activation_checkpoint
            nnodes_key = f"{where}.nnodes"
            ac_key, cp_key = f"{where}.activation_checkpoint", f"{where}.context_parallel"
        else:
            # The Goldfish control repeats its phase, from the same step on the same data.
            phase = phases[stage.name.removesuffix(CONTROL_SUFFIX)]
            steps = phase.steps
            tokens = ramp.sequences(phase.first_step, phase.first_step + steps) * cfg.seq_len
            seq_len, micro_batch, ac = cfg.seq_len, cfg.micro_batch, cfg.activation_checkpoint
            nnodes_key, ac_key = "pretrain.nnodes", "pretrain.activation_checkpoint"
            cp_key = "pretrain.long_context[].context_parallel"
        jobs.append(
            _training_job(
                config,
                stage=stage.name,
                name=f"pretrain {stage.name}",
                rule="pretrain_stage",
                resources="pretrain",
                shape=_shape(cfg.flavor, seq_len),
                nodes=stage.nnodes,
                nproc=cfg.nproc,
                seq_len=seq_len,
                micro_batch=micro_batch,
                tensor_parallel=cfg.tensor_parallel,
                context_parallel=stage.context_parallel,
                dtype=cfg.dtype,
                device=cfg.device,
                activation_checkpoint=ac,
                steps=steps,
                tokens=tokens,
                checkpoint_interval=cfg.checkpoint_interval,
                keys={
                    "micro_batch": "pretrain.micro_batch",
                    "activation_checkpoint": ac_key,
                    "context_parallel": cp_key,
                    "tensor_parallel": "pretrain.tensor_parallel",
                    "nnodes": nnodes_key,
                    "seq": None,
                },
            )
        )
    return jobs


def _posttrain_jobs(config: Mapping[str, Any]) -> list[PlannedJob]:
    post, pretrain = config["posttrain"], config["pretrain"]
    if not post["enabled"]:
        return []
    seq_len = post["sft_data"]["max_len"]
    shape = _shape(pretrain["flavor"], seq_len)
    instructions = post["instructions"]
    hub = instructions["source"] is not None
    plan = config.get("plan") or {}
    conversations = plan.get("sft_conversations") if hub else instructions["train"]
    prompts = plan.get("qrpo_prompts") if hub else instructions["qrpo"]
    jobs = []
    sft = post["sft"]
    sft_steps = conversations * sft["epochs"] // sft["global_batch"] if conversations else None
    jobs.append(
        _training_job(
            config,
            stage="sft",
            name="sft",
            rule="posttrain_sft",
            resources="posttrain",
            shape=shape,
            nodes=sft["nnodes"],
            nproc=sft["nproc"],
            seq_len=seq_len,
            micro_batch=math.gcd(sft["micro_batch"], sft["global_batch"]),
            tensor_parallel=1,
            context_parallel=1,
            dtype=sft["dtype"],
            device=pretrain["device"],
            activation_checkpoint=sft["activation_checkpoint"],
            steps=sft_steps,
            # Conversations are not packed: every sequence is padded to max_len.
            tokens=sft_steps * sft["global_batch"] * seq_len if sft_steps else None,
            checkpoint_interval=sft["checkpoint_interval"],
            keys=_post_keys("sft"),
        )
    )
    sample = post["qrpo_data"]
    qrpo = post["qrpo"]
    completions = prompts * sample["n_samples"] if prompts else None
    ranks = qrpo["nnodes"] * qrpo["nproc"]
    data_parallel = ranks // qrpo["tensor_parallel"]
    qrpo_steps = completions * qrpo["epochs"] // qrpo["batch_size"] if completions else None
    jobs.append(
        _training_job(
            config,
            stage="qrpo",
            name="qrpo",
            rule="posttrain_qrpo",
            resources="posttrain",
            shape=shape,
            nodes=qrpo["nnodes"],
            nproc=qrpo["nproc"],
            seq_len=seq_len,
            micro_batch=qrpo["micro_batch"] or max(qrpo["batch_size"] // data_parallel, 1),
            tensor_parallel=qrpo["tensor_parallel"],
            context_parallel=1,
            dtype=qrpo["dtype"],
            device=qrpo["device"],
            activation_checkpoint=qrpo["activation_checkpoint"],
            steps=qrpo_steps,
            tokens=qrpo_steps * qrpo["batch_size"] * seq_len if qrpo_steps else None,
            checkpoint_interval=qrpo["checkpoint_interval"],
            keys=_post_keys("qrpo"),
        )
    )
    # Reference sampling: the SFT model on the GPUs of a shard's job (spread over them:
    # apertus.core.device.load_pretrained, vLLM's tensor parallelism), `batch_size` sequences
    # at once of up to max_len tokens (prompt + completion) in the KV cache.
    entry = stage_resources(config["resources"], "posttrain_sample")
    shards = sample["shards"]
    generated = completions * sample["max_new_tokens"] if completions else None
    jobs.append(
        _inference_job(
            name=f"qrpo sample (x{shards} shards)",
            rule="posttrain_qrpo_sample",
            resources="posttrain_sample",
            entry=entry,
            layout=InferenceLayout(
                params=num_params(shape),
                dtype=sample["dtype"],
                batch=sample["batch_size"],
                context=seq_len,
                n_layers=shape.n_layers,
                kv_width=shape.n_kv_heads * shape.attention_head_dim,
                vocab_size=shape.vocab_size,
                gpus=entry.get("gpus") or 1,
            ),
            shards=shards,
            tokens=generated,
            flops=2 * num_params(shape),
            keys=("posttrain.qrpo_data.batch_size", "posttrain.qrpo_data.dtype"),
            device=sample["device"],
        )
    )
    # Scoring: each reward model of the config, one at a time on the GPUs of a shard's job.
    scorers = [("reward", sample["reward"])] + [
        (f"reward of {category}", reward)
        for category, reward in sample["rewards_by_category"].items()
    ]
    entry = stage_resources(config["resources"], "posttrain_score")
    for label, reward in scorers:
        if not reward or reward.get("kind") not in ("reward_model", "judge"):
            continue
        hf = _hf_config(reward["model"])
        if hf is None:
            jobs.append(
                PlannedJob(
                    name=f"qrpo score: {label}",
                    rule="posttrain_qrpo_score_shard",
                    resources="posttrain_score",
                    nodes=shards,
                    gpus_per_node=entry.get("gpus") or 0,
                    layout=f"{shards} shard(s) x {entry.get('gpus') or 1} GPU",
                    memory=Memory({}, "unknown"),
                    memory_limit_gb=None,
                    note=f"{reward['model']}: no config.json here (the Hub is not asked); "
                    "its memory is planned once the model is downloaded",
                )
            )
            continue
        params, hf_shape = hf
        jobs.append(
            _inference_job(
                name=f"qrpo score: {label} ({Path(reward['model']).name})",
                rule="posttrain_qrpo_score_shard",
                resources="posttrain_score",
                entry=entry,
                layout=InferenceLayout(
                    params=params,
                    dtype=reward.get("dtype") or "float32",
                    batch=sample["batch_size"],
                    context=seq_len * (2 if reward["kind"] == "judge" else 1),
                    n_layers=hf_shape["layers"],
                    kv_width=hf_shape["kv_width"],
                    vocab_size=hf_shape["vocab"],
                    gpus=entry.get("gpus") or 1,
                ),
                shards=shards,
                tokens=completions * seq_len if completions else None,
                flops=2 * params,
                keys=(
                    "posttrain.qrpo_data.batch_size",
                    f"posttrain.qrpo_data ({label}) dtype",
                    "resources.posttrain_score.gpus",
                ),
                device=reward.get("device") or "auto",
            )
        )
    return jobs


def _post_keys(stage: str) -> dict[str, str | None]:
    """The keys that would make an SFT or QRPO job fit (no context parallelism; QRPO alone has
    tensor parallelism)."""
    return {
        "micro_batch": f"posttrain.{stage}.micro_batch",
        "activation_checkpoint": f"posttrain.{stage}.activation_checkpoint",
        "context_parallel": None,
        "tensor_parallel": "posttrain.qrpo.tensor_parallel" if stage == "qrpo" else None,
        "nnodes": f"posttrain.{stage}.nnodes",
        "seq": "posttrain.sft_data.max_len",
    }


def _inference_job(
    *,
    name: str,
    rule: str,
    resources: str,
    entry: Mapping[str, Any],
    layout: InferenceLayout,
    shards: int,
    tokens: int | None,
    flops: int,
    keys: tuple[str, ...],
    device: str,
) -> PlannedJob:
    accelerator = _accelerator(entry, device)
    rate, mfu = _throughput(entry, flops) if accelerator else (None, None)
    gpus = layout.gpus
    wall = tokens / (rate * gpus * shards) if rate and tokens else None
    return PlannedJob(
        name=name,
        rule=rule,
        resources=resources,
        nodes=shards,
        gpus_per_node=gpus,
        layout=f"{shards} job(s) x {gpus} GPU" if shards > 1 else f"1 job x {gpus} GPU",
        memory=inference_memory(layout, accelerator=accelerator),
        memory_limit_gb=_limit(entry) if accelerator else None,
        tokens_per_rank=layout.batch * layout.context,
        flops_per_token=flops,
        tokens=tokens,
        tokens_per_second_per_gpu=rate,
        mfu=mfu,
        wall_seconds=wall,
        fixes=keys,
    )


def _hf_config(model: str) -> tuple[int, dict[str, int]] | None:
    """The parameter count and cache shape of a Hugging Face causal LM from its config.json:
    a local folder, or the Hub cache (never the network). None: no config.json here."""
    path = Path(model) / "config.json"
    if not path.is_file():
        try:
            from huggingface_hub import try_to_load_from_cache
        except ImportError:
            return None
        try:
            cached = try_to_load_from_cache(model, "config.json")
        except ValueError:  # not a Hub id (HFValidationError): a folder not made yet
            return None
        if not isinstance(cached, str):
            return None
        path = Path(cached)
    hf = json.loads(path.read_text())
    hf = hf.get("text_config", hf)
    d, layers = hf["hidden_size"], hf["num_hidden_layers"]
    heads = hf["num_attention_heads"]
    kv = hf.get("num_key_value_heads", heads)
    hd = hf.get("head_dim") or d // heads
    ffn, vocab = hf["intermediate_size"], hf["vocab_size"]
    # Gated MLPs (Llama, Qwen) have three matrices; Apertus' non-gated xIELU two.
    mlp = (2 if hf.get("model_type") == "apertus" else 3) * d * ffn
    block = d * heads * hd * 2 + 2 * d * kv * hd + mlp + 2 * d
    embeddings = vocab * d * (1 if hf.get("tie_word_embeddings") else 2)
    # A reward model's head is one row, not a vocabulary: counted as an lm_head (an upper bound).
    return embeddings + layers * block + d, {"layers": layers, "kv_width": kv * hd, "vocab": vocab}


def _checkpoint_jobs(config: Mapping[str, Any], trained: list[PlannedJob]) -> list[PlannedJob]:
    """Per trained checkpoint: its export (host memory: the fp32 model rebuilt from the DCP
    checkpoint, its bf16 copy written, and the fp32 reference of the verification) and its
    evaluation (one GPU: the model in the evaluation's dtype at batch 1 over the longest
    context, with the fp32 log-softmax of every position lm-eval scores)."""
    pretrain = config["pretrain"]
    base = FLAVOR_SHAPES[pretrain["flavor"]]
    evaluate = config["evaluate"]
    export_entry = stage_resources(config["resources"], "export")
    evaluate_entry = stage_resources(config["resources"], "evaluate")
    jobs = []
    for job in trained:
        stage = job.stage
        n = num_params(base)
        jobs.append(
            PlannedJob(
                name=f"export {stage}",
                rule="export_checkpoint",
                resources="export",
                nodes=1,
                gpus_per_node=export_entry.get("gpus") or 0,
                layout="1 job (host)",
                # The state read from the DCP checkpoint, our model built from it and the
                # reloaded export, all fp32, at the verification (apertus.export.verify).
                memory=Memory(
                    {"parameters": 4 * n, "verification model": 4 * n, "reloaded export": 4 * n},
                    "verification",
                ),
                memory_limit_gb=_limit(export_entry, host=True),
                host_memory=True,
                fixes=("resources.export.mem_mb",),
            )
        )
        suites = [("suite", evaluate["suite"])]
        if stage in ("sft", "qrpo") and evaluate["instruct"]["tasks"]:
            suites.append(("instruct", evaluate["instruct"]))
        for suite_name, suite in suites:
            lengths = suite.get("metadata", {}).get("max_seq_lengths") or []
            context = max([job.tokens_per_rank or 0, *lengths]) if lengths else base.max_seq_len
            parallel = bool(suite.get("model_args", {}).get("parallelize"))
            gpus = (evaluate_entry.get("gpus") or 1) if parallel else 1
            jobs.append(
                _inference_job(
                    name=f"evaluate {stage} ({suite_name})",
                    rule="evaluate_checkpoint" if suite_name == "suite" else "evaluate_instruct",
                    resources="evaluate",
                    entry=evaluate_entry,
                    layout=InferenceLayout(
                        params=n,
                        dtype=suite["dtype"],
                        batch=1,
                        context=context,
                        n_layers=base.n_layers,
                        kv_width=base.n_kv_heads * base.attention_head_dim,
                        vocab_size=base.vocab_size,
                        gpus=gpus,
                        # lm-eval scores every position of a log-likelihood request; a
                        # generation keeps the last position's logits only.
                        logits_tokens=2 * context if suite_name == "suite" else 1,
                    ),
                    shards=1,
                    tokens=None,
                    flops=2 * n,
                    keys=(
                        f"evaluate.{suite_name}.model_args.parallelize: true",
                        f"evaluate.{suite_name}.dtype",
                        "resources.evaluate.gpus",
                    ),
                    device=suite["device"],
                )
            )
    return jobs


def run_plan(config: Mapping[str, Any]) -> RunPlan:
    """Every GPU job of the validated `config` (defaults filled), sized (the module doc). A
    post-training-only run (``posttrain.init_from``) has no pretraining job and no shards."""
    only_posttrain = config["posttrain"].get("init_from") is not None
    pretrain = [] if only_posttrain else _pretrain_jobs(config)
    post = _posttrain_jobs(config)
    trained = [j for j in pretrain + post if j.rule in TRAINING_RULES]
    jobs = pretrain + post + _checkpoint_jobs(config, trained)
    vocab = FLAVOR_SHAPES[config["pretrain"]["flavor"]].vocab_size
    token_bytes = 2 if vocab <= 1 << 16 else 4
    tokens = 0 if only_posttrain else sum(p["tokens"] for p in config["tokenize"]["phases"])
    shard_bytes = tokens * token_bytes
    notes = []
    if any(j.memory_limit_gb is None for j in jobs if j.memory.parts):
        notes.append(
            "jobs without resources.<stage>.gpu_memory_gb are not checked against a GPU's memory"
        )
    # Jobs left unchecked that would not fit the GPUs (or host memory) the config names.
    limits = [j.memory_limit_gb for j in jobs if j.memory_limit_gb and not j.host_memory]
    unfit: dict[tuple[str, bool], list[PlannedJob]] = {}
    for job in jobs:
        if not limits or job.memory_limit_gb is not None or not job.memory.parts:
            continue
        entry = stage_resources(config["resources"], job.resources)
        limit = entry["mem_mb"] / 1000 if job.host_memory else max(limits)
        if job.memory.total > limit * 1e9:
            unfit.setdefault((job.rule, job.host_memory), []).append(job)
    for (rule, host), group in unfit.items():
        peak = max(j.memory.total for j in group)
        where = (
            f"of host memory, more than resources.{group[0].resources}.mem_mb"
            if host
            else f"per GPU, more than the {max(limits):g} GB GPUs of this config"
        )
        notes.append(
            f"WARNING: {rule} ({len(group)} job(s): {', '.join(j.name for j in group[:3])}"
            f"{', ...' if len(group) > 3 else ''}) is planned at up to {peak / 1e9:.0f} GB "
            f"{where}; resources.{group[0].resources} sets no gpu_memory_gb, so it is not refused"
        )
    if any(j.mfu is None for j in jobs):
        notes.append("jobs without resources.<stage>.mfu and gpu_peak_tflops have no time estimate")
    return RunPlan(jobs, shard_bytes, notes)


def fit_problems(config: Mapping[str, Any]) -> list[str]:
    """A message for every job whose planned peak exceeds its memory limit, naming the job, the
    figure, the limit and the keys that would make it fit."""
    if not any((entry or {}).get("gpu_memory_gb") for entry in config["resources"].values()):
        # No limit to check against: nothing to refuse, and no plan made at every snakemake
        # start (the default run and the tests' runs set none).
        return []
    problems = []
    for job in run_plan(config).jobs:
        if job.fits is False:
            what = "host memory" if job.host_memory else "peak memory per GPU"
            largest = sorted(job.memory.parts.items(), key=lambda kv: -kv[1])[:3]
            parts = ", ".join(f"{k} {v / 1e9:.1f} GB" for k, v in largest)
            limit_key = (
                f"resources.{job.resources}.mem_mb"
                if job.host_memory
                else f"resources.{job.resources}.gpu_memory_gb"
            )
            problems.append(
                f"{job.name} ({job.rule}, {job.layout}): planned {what} "
                f"{job.memory.total / 1e9:.1f} GB exceeds {limit_key} "
                f"{job.memory_limit_gb:g} GB (largest: {parts}); to fit, change "
                + ", ".join(job.fixes)
                + " (apertus plan shows every part)"
            )
    return problems
