"""The model card (`README.md` of the release): Hugging Face metadata and a body that says how
the model was made, from the run's own files.

The metadata (license, language, datasets, base_model, tags, pipeline_tag, library_name) is
rendered by huggingface_hub's `ModelCardData`; `model-index` has one entry per released model
(`<name>/base`, `<name>/aligned`), each built by huggingface_hub's `eval_results_to_model_index`
from `EvalResult`s of the evaluation table (`scores.csv`). The card is parsed back with
`ModelCard` before it is written, so an invalid card never leaves this module.

Every number in the body is read from the release's files, the step manifests or the config;
none is written here.
"""

from __future__ import annotations

import csv
import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from huggingface_hub import EvalResult, ModelCard, ModelCardData
from huggingface_hub.repocard_data import eval_results_to_model_index

from apertus.core import ApertusError
from apertus.evaluate.tasks import MC_GROUP, PPL_GROUP
from apertus.release.config import ReleaseConfig

# The memorization task of the evaluation table is a probe experiment, not a benchmark: it is
# reported in its own section, not in the Hub's model-index.
MEMORIZATION_TASK = "memorization"
# The card's evaluation table shows the group scores (means over languages) of these tasks.
GROUP_TASKS = (MC_GROUP, PPL_GROUP)
# `hf://datasets/<owner>/<name>/...` paths of data sources name a Hub dataset.
HF_DATASET_PATH = re.compile(r"^hf://datasets/([^/]+/[^/@]+)")
HUB_ID = re.compile(r"([A-Za-z0-9][A-Za-z0-9._-]*/)?[A-Za-z0-9][A-Za-z0-9._-]*")


@dataclass(frozen=True)
class ReleasedModel:
    """One model of the release: its subfolder and the checkpoint (training stage) it is."""

    subfolder: str  # "base" or "aligned"
    checkpoint: str  # e.g. the last pretraining stage, or "qrpo"
    folder: Path  # the Hugging Face folder inside the release


@dataclass(frozen=True)
class CardFacts:
    """What the card reports, read from files (see `apertus.release.bundle.collect_facts`)."""

    run_config: dict[str, Any]
    models: list[ReleasedModel]
    scores: dict[str, dict[str, float | None]]  # checkpoint -> "task/metric" -> value
    funnel: dict[str, Any] | None
    """The data funnel; None in a post-training-only run (no data stage)."""
    stages: dict[str, dict[str, Any]]  # "<stage>/<step>" -> step manifest
    memorization: dict[str, Any] | None = None
    memorization_control: dict[str, Any] | None = None
    """The Goldfish control's memorization.json (its phase's curve under ``compared``)."""
    reward_report: dict[str, Any] | None = None


def read_scores(path: str | Path) -> dict[str, dict[str, float | None]]:
    """The evaluation table (`scores.csv` of apertus.evaluate.table): checkpoint -> column ->
    value (None where the cell is empty)."""
    path = Path(path)
    try:
        with path.open(newline="", encoding="utf-8") as f:
            rows = list(csv.DictReader(f))
    except OSError as e:
        raise ApertusError(f"{path}: cannot read the evaluation table ({e})") from None
    if not rows or "checkpoint" not in rows[0]:
        raise ApertusError(f"{path}: not an evaluation table (no 'checkpoint' column or no rows)")
    scores: dict[str, dict[str, float | None]] = {}
    for line, row in enumerate(rows, start=2):
        name = row.pop("checkpoint")
        try:
            scores[name] = {k: float(v) if v not in ("", None) else None for k, v in row.items()}
        except ValueError as e:
            raise ApertusError(f"{path}, line {line}: not a number ({e})") from None
    return scores


# The steps whose manifest records the released checkpoint a run started from, by the stage
# that started from it: the first pretraining phase, or a post-training-only run's start.
START_STEPS = {"pretrain": "pretrain/", "posttrain": "posttrain/start"}


def started_from(stages: Mapping[str, Mapping[str, Any]]) -> dict[str, Any] | None:
    """The released checkpoint the run started from (the manifest's ``summary.init_from``:
    model, revision, commit, each weight file's sha256) with ``stage``, the stage that started
    from it ("pretrain" or "posttrain", `START_STEPS`); None for a run trained from scratch."""
    for stage, prefix in START_STEPS.items():
        for key in sorted(stages):
            record = stages[key].get("summary", {}).get("init_from")
            if key.startswith(prefix) and record:
                return {**record, "stage": stage}
    return None


def _started_from(record: Mapping[str, Any]) -> str:
    revision = record.get("revision") or "main"
    commit = f", commit `{record['commit']}`" if record.get("commit") else ""
    rows = [(name, entry["sha256"], entry["bytes"]) for name, entry in record["files"].items()]
    lacking = "; ".join(record.get("not_in_checkpoint", []))
    what = "Pretraining" if record.get("stage", "pretrain") == "pretrain" else "Post-training (SFT)"
    return (
        f"{what} started from the weights of `{record['model']}` (revision "
        f"`{revision}`{commit}), not from random ones. Its files:\n\n"
        + _table(["file", "sha256", "bytes"], rows)
        + f"\n\nWhat such a checkpoint does not hold began afresh: {lacking}."
    )


def model_name(config: ReleaseConfig, run_config: Mapping[str, Any]) -> str:
    return (
        config.card.model_name or f"apertus-{run_config['pretrain']['flavor']}-{run_config['run']}"
    )


def card_languages(
    config: ReleaseConfig, funnel: Mapping[str, Any] | None, run_config: Mapping[str, Any]
) -> list[str]:
    """The configured languages, else those with documents left at the funnel's last step;
    without a data stage, those of the generated instruction set (none for user data)."""
    if config.card.languages is not None:
        return list(config.card.languages)
    if funnel is None:
        instructions = run_config["posttrain"]["instructions"]
        return [] if instructions["source"] is not None else sorted(instructions["languages"])
    return sorted(
        lang
        for lang, rows in funnel.get("languages", {}).items()
        if rows and rows[-1].get("documents", 0) > 0 and re.fullmatch(r"[a-z]{2,3}", lang)
    )


def card_datasets(config: ReleaseConfig, run_config: Mapping[str, Any]) -> list[str]:
    """The configured datasets, else the Hub dataset id of each data source read from the Hub;
    a local source has no Hub id and is not listed (the Hub links every entry as a dataset)."""
    if config.card.datasets is not None:
        return list(config.card.datasets)
    names: list[str] = []
    for source in run_config["data"]["sources"]:
        path = str(source.get("path", ""))
        if source.get("reader") == "huggingface" and HUB_ID.fullmatch(path):
            name = path
        elif match := HF_DATASET_PATH.match(path):
            name = match.group(1)
        else:
            continue
        if name not in names:
            names.append(name)
    return names


def eval_results(row: Mapping[str, float | None]) -> list[EvalResult]:
    """One `EvalResult` per finite score of a checkpoint's table row, memorization left out."""
    results = []
    for column, value in row.items():
        task, _, metric = column.partition("/")
        if task == MEMORIZATION_TASK or value is None or not math.isfinite(value):
            continue
        results.append(
            EvalResult(
                task_type="text-generation",
                dataset_type=task,
                dataset_name=task,
                metric_type=metric,
                metric_value=value,
            )
        )
    return results


def model_index(
    name: str, models: Sequence[ReleasedModel], scores: Mapping[str, Mapping[str, float | None]]
) -> list[dict[str, Any]]:
    """The `model-index`: one entry `<name>/<subfolder>` per released model with its scores."""
    index = []
    for model in models:
        if model.checkpoint not in scores:
            raise ApertusError(
                f"the evaluation table has no row for checkpoint {model.checkpoint!r} "
                f"(the {model.subfolder} model); rows: {', '.join(scores)}"
            )
        results = eval_results(scores[model.checkpoint])
        if results:
            index.extend(eval_results_to_model_index(f"{name}/{model.subfolder}", results))
    return index


def card_base_model(
    config: ReleaseConfig, model: ReleasedModel | None, start: Mapping[str, Any] | None = None
) -> str | None:
    """`base_model` of a card: the aligned model's is the base model's repository (where the
    release has one); the base model's (and the release's, and a post-training-only run's
    aligned model's) the Hub model the run started from, if any: never itself
    (`release.card.base_model`, else the Hub id of `pretrain.init_from` or
    `posttrain.init_from`, `start`; a local folder has no Hub id, and no commit)."""
    own_base = start is None or start.get("stage", "pretrain") == "pretrain"
    if model is not None and model.subfolder == "aligned" and own_base:
        return config.hub.repo_for("base")
    if config.card.base_model is None and start is not None and start.get("commit"):
        return start["model"]
    return config.card.base_model


def card_metadata(
    config: ReleaseConfig, facts: CardFacts, model: ReleasedModel | None = None
) -> dict[str, Any]:
    """The card's Hub metadata: of the release (`model` None, every model's scores), or of one
    released model's repository."""
    name = model_name(config, facts.run_config)
    data = ModelCardData(
        license=config.license,
        language=card_languages(config, facts.funnel, facts.run_config),
        datasets=card_datasets(config, facts.run_config) or None,
        base_model=card_base_model(config, model, started_from(facts.stages)),
        tags=list(config.card.tags),
        pipeline_tag="text-generation",
        library_name="transformers",
    ).to_dict()
    index = model_index(name, facts.models if model is None else [model], facts.scores)
    if index:
        data["model-index"] = index
    return data


def _fmt(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def _table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(_fmt(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


def parameter_count(folder: Path) -> int:
    """Parameters of a Hugging Face folder, from the safetensors headers (no weights loaded)."""
    from safetensors import safe_open

    total = 0
    files = sorted(folder.glob("*.safetensors"))
    if not files:
        raise ApertusError(f"{folder}: no *.safetensors weights")
    for file in files:
        with safe_open(str(file), framework="numpy") as f:
            for key in f.keys():  # noqa: SIM118 (safe_open is not a mapping)
                shape = f.get_slice(key).get_shape()
                total += math.prod(shape)
    return total


def _architecture(facts: CardFacts) -> str:
    base = facts.models[0]
    cfg = json.loads((base.folder / "config.json").read_text(encoding="utf-8"))
    flavor = facts.run_config["pretrain"]["flavor"]
    rows = [
        ("flavor", flavor),
        ("parameters", parameter_count(base.folder)),
        ("layers", cfg.get("num_hidden_layers")),
        ("hidden size", cfg.get("hidden_size")),
        ("FFN size", cfg.get("intermediate_size")),
        (
            "attention heads / KV heads",
            f"{cfg.get('num_attention_heads')} / {cfg.get('num_key_value_heads')}",
        ),
        ("activation", cfg.get("hidden_act")),
        ("vocabulary", cfg.get("vocab_size")),
        ("context length", cfg.get("max_position_embeddings")),
        ("RoPE", json.dumps(cfg.get("rope_parameters"), sort_keys=True)),
        ("weights dtype", cfg.get("dtype")),
    ]
    return _table(["", base.subfolder], rows)


def _training_stages(facts: CardFacts) -> str:
    pretrain = facts.run_config["pretrain"]
    order = [("pretrain", s) for s in pretrain["phases"]]
    order += [("pretrain", s["name"]) for s in pretrain.get("long_context", [])]
    order += [("posttrain", s) for s in ("sft", "qrpo")]
    rows = []
    for stage, name in order:
        manifest = facts.stages.get(f"{stage}/{name}")
        if manifest is None:
            continue
        s = manifest.get("summary", {})
        rows.append(
            (
                name,
                stage,
                s.get("final_step"),
                s.get("tokens_seen"),
                s.get("completions"),
                s.get("seq_len"),
                s.get("final_loss"),
            )
        )
    return _table(
        ["stage", "kind", "steps", "tokens", "completions", "sequence length", "final loss"], rows
    )


def _compute(facts: CardFacts) -> str:
    """What the run's training cost: per training stage, its layout and the peak memory per GPU
    and GPU-hours `apertus plan` gives for the run's config, beside the wall-clock its step
    manifest measured."""
    from apertus.sizing.jobs import run_plan

    plan = run_plan(facts.run_config)
    rows = []
    for job in plan.jobs:
        if job.manifest_key is None:  # not a training job
            continue
        manifest = facts.stages.get(job.manifest_key) or {}
        seconds = manifest.get("seconds")
        rows.append(
            (
                job.stage,
                job.layout,
                f"{job.memory.total / 1e9:.2f}",
                None if job.gpu_hours is None else f"{job.gpu_hours:,.1f}",
                None if seconds is None else f"{seconds / 3600:.2f}",
            )
        )
    table = _table(
        [
            "stage",
            "layout (nodes x GPUs)",
            "planned peak GB per GPU",
            "planned GPU-hours",
            "measured hours",
        ],
        rows,
    )
    total = (
        f"Planned for the whole run: {plan.gpu_hours:,.1f} GPU-hours"
        if plan.gpu_hours
        else "No GPU-hours are planned for this run (no `mfu` and `gpu_peak_tflops` in its "
        "`resources`)"
    )
    return (
        f"{table}\n\n{total}; every checkpoint kept: "
        f"{plan.checkpoint_bytes / 1e9:,.1f} GB. The plan is `apertus plan` on the run's config "
        "(memory formulas in `apertus/sizing/memory.py`)."
    )


def _recipe(facts: CardFacts) -> str:
    p = facts.run_config["pretrain"]
    ad, lr, gf = p["ademamix"], p["lr"], p["goldfish"]
    ramp = p.get("batch_ramp")
    lines = [
        f"- Optimizer: AdEMAMix (betas {ad['betas']}, alpha {ad['alpha']}, alpha/beta3 warmup "
        f"{ad['t_alpha']}/{ad['t_beta3']} steps, weight decay {ad['weight_decay']}), gradient "
        f"clipping {p['grad_clip']}.",
        f"- Schedule: Warmup-Stable-Decay, peak LR {lr['peak']}, {lr['warmup_steps']} warmup "
        f"steps, 1-sqrt cooldown over the last {lr['decay_fraction']} of the training tokens "
        f"to {lr['min_lr_ratio']} x peak (the last steps that together train on at most that "
        "share of the sequences"
        + (
            "; fewer steps than that share of the steps once the batch has doubled)."
            if ramp
            else ")."
        ),
        f"- Batch: {p['global_batch']} sequences of {p['seq_len']} tokens"
        + (f", ramped to {ramp['global_batch']} at {ramp['at_tokens']:,} tokens." if ramp else "."),
        "- Goldfish loss: " + (f"k = {gf['k']}, h = {gf['h']}." if gf["enabled"] else "off."),
    ]
    return "\n".join(lines)


def _data_compliance(facts: CardFacts) -> str:
    if facts.funnel is None:
        start = started_from(facts.stages) or {}
        return (
            f"This run has no data stage: it post-trained `{start.get('model')}`, whose "
            "pretraining data (and its compliance) is that model's; see its card. "
            "Post-training read the conversations of `posttrain.instructions`."
        )
    total = facts.funnel.get("total", [])
    rows = [
        (r["step"], r.get("documents"), r.get("removed_documents"), r.get("characters"))
        for r in total
    ]
    parts = [
        "Documents through each filter of the data stage, all languages (`data/funnel.json`, "
        "`data/funnel.png`):",
        "",
        _table(["step", "documents", "removed", "characters"], rows),
    ]
    robots = next((r for r in total if r["step"] == "robots"), None)
    if robots is not None:
        parts += [
            "",
            f"robots.txt opt-out: {_fmt(robots.get('removed_documents'))} documents removed "
            "because their site disallows at least one AI crawler.",
        ]
    agents = _robots_agents(facts.stages)
    if agents:
        parts += ["", _table(["user agent", "documents disallowed"], sorted(agents.items()))]
    heads = _classifier_heads(facts.stages)
    if heads:
        parts += [
            "",
            "Classifiers the pipeline trained for the filters (data classifiers step), accuracy "
            "on their held-out labelled examples (one head per language for XLM-R heads):",
            "",
            _table(["classifier", "language", "held-out examples", "accuracy"], heads),
        ]
    pii = _pii_counts(facts.stages)
    if pii:
        parts += [
            "",
            "PII replaced with placeholders in the corpus (data select step):",
            "",
            _table(["kind", "count"], sorted(pii.items())),
        ]
    return "\n".join(parts)


def _step_stats(manifest: Mapping[str, Any], block: str) -> dict[str, Any]:
    """A datatrove block's stats in a step manifest's summary, found by its name's ending."""
    for name, stats in manifest.get("summary", {}).get("stats", {}).items():
        if name.endswith(block) and isinstance(stats, Mapping):
            return dict(stats)
    return {}


def _robots_agents(stages: Mapping[str, Mapping[str, Any]]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for key, manifest in stages.items():
        if not key.startswith("data/filtered/"):
            continue
        for stat, value in _step_stats(manifest, "robots.txt opt-out").items():
            if stat.startswith("disallowed_") and isinstance(value, int):
                agent = stat.removeprefix("disallowed_")
                counts[agent] = counts.get(agent, 0) + value
    return counts


def _classifier_heads(stages: Mapping[str, Mapping[str, Any]]) -> list[tuple]:
    """(task, language, held-out examples, accuracy) of each classifier the data classifiers
    step trained: an n-gram model (language "all"), or XLM-R heads, one per language."""
    step = next(
        (m for m in stages.values() if m.get("stage") == "data" and m.get("step") == "classifiers"),
        None,
    )
    rows = []
    for task, trained in sorted((step or {}).get("summary", {}).items()):
        if not isinstance(trained, Mapping):
            continue
        heads = trained.get("heads")
        if isinstance(heads, Mapping):
            for language, head in sorted(heads.items()):
                rows.append((task, language, head.get("val_documents"), head.get("val_accuracy")))
        elif "val_accuracy" in trained:
            rows.append((task, "all", trained.get("val_examples"), trained["val_accuracy"]))
    return rows


def _pii_counts(stages: Mapping[str, Mapping[str, Any]]) -> dict[str, int]:
    select = next(
        (m for m in stages.values() if m.get("stage") == "data" and m.get("step") == "select"),
        None,
    )
    if select is None:
        return {}
    stats = _step_stats(select, "PII")
    return {
        k: v
        for k, v in stats.items()
        if isinstance(v, int) and (k.startswith("replaced_") or k == "documents_with_pii")
    }


def _evaluation(facts: CardFacts) -> str:
    """The group scores (tasks without a language suffix) of every checkpoint."""
    checkpoints = list(facts.scores)
    columns = [c for c in next(iter(facts.scores.values())) if c.split("/")[0] in GROUP_TASKS]
    released = {m.checkpoint: m.subfolder for m in facts.models}
    rows = [
        [f"{c} ({released[c]})" if c in released else c, *(facts.scores[c].get(k) for k in columns)]
        for c in checkpoints
    ]
    return "\n".join(
        [
            "Every checkpoint of the run on the project's held-out tasks (lm-eval); the released "
            "ones are marked. Per-language scores: `evaluation/scores.md`, `scores.csv`, "
            "`scores.png`.",
            "",
            _table(["checkpoint", *columns], rows),
        ]
    )


def _memorization(facts: CardFacts) -> str:
    m = facts.memorization
    assert m is not None
    rows = [
        (
            r["exposures"],
            r.get("probes"),
            r.get("rouge_l_mean"),
            r.get("exact_match_prefix_mean"),
            r.get("verbatim"),
        )
        for r in m.get("curve", [])
    ]
    return "\n".join(
        [
            f"Memorization probes planted in the pretraining data, measured on the base model "
            f"({facts.models[0].checkpoint}): {m.get('prefix_tokens')} prompt tokens, "
            f"{m.get('suffix_tokens')} greedy tokens compared with the true continuation "
            "(`evaluation/memorization.json`, `memorization.png`). Exposures 0 are never-seen "
            "controls.",
            "",
            _table(["exposures", "probes", "Rouge-L mean", "exact prefix mean", "verbatim"], rows),
        ]
    )


def _goldfish_comparison(control: dict[str, Any]) -> str:
    """The control run's curve next to its phase's (the same run with Goldfish on)."""
    compared = control.get("compared", {})
    label = next(iter(compared), None)
    with_goldfish = compared.get(label, {}) if label else {}
    on = with_goldfish.get("goldfish") or {}
    by_exposure = {
        name: {r["exposures"]: r for r in result.get("curve", [])}
        for name, result in (("on", with_goldfish), ("off", control))
    }
    exposures = sorted(set(by_exposure["on"]) | set(by_exposure["off"]))
    rows = [
        (
            e,
            *(by_exposure[name].get(e, {}).get("rouge_l_mean") for name in ("on", "off")),
            *(
                by_exposure[name].get(e, {}).get("exact_match_prefix_mean")
                for name in ("on", "off")
            ),
        )
        for e in exposures
    ]
    fraction = on.get("dropped_fraction")
    return "\n".join(
        [
            f"The same phase trained twice from the same start on the same data: with Goldfish "
            f"(run `{on.get('run')}`, k = {on.get('k')}, h = {on.get('h')}, "
            f"{_fmt(100 * fraction if fraction is not None else None)}% of its labels dropped) "
            f"and without (run `{(control.get('goldfish') or {}).get('run')}`), each measured on "
            "the probes planted in it; exposures 0 are the never-seen controls "
            "(`evaluation/memorization-control.json`, `memorization-control.png`).",
            "",
            _table(
                [
                    "exposures",
                    "Rouge-L with Goldfish",
                    "Rouge-L without",
                    "exact prefix with",
                    "exact prefix without",
                ],
                rows,
            ),
        ]
    )


def _reward(facts: CardFacts) -> str:
    r = facts.reward_report
    assert r is not None
    order = r.get("order", list(r.get("models", {})))
    parts = [
        f"Reward (`{r.get('reward', {}).get('kind')}`) on {_fmt(r.get('prompt_count'))} held-out "
        f"prompts, before (`{r.get('baseline')}`) and after QRPO "
        "(`evaluation/reward_report.md`, `.json`):",
        "",
    ]
    rows = []
    for mode, section in (("greedy", r), ("sampled", r.get("sampled") or {})):
        for name in order:
            model = section.get("models", {}).get(name)
            if model is None:
                continue
            comp = section.get("comparison", {}).get(name, {})
            rows.append(
                (mode, name, model.get("mean"), comp.get("mean_delta"), comp.get("win_rate"))
            )
    parts.append(_table(["answers", "model", "mean reward", "delta vs baseline", "win rate"], rows))
    return "\n".join(parts)


def usage_code(model: ReleasedModel, repo: str) -> str:
    """Python that loads `repo` and generates from it; for the aligned (chat) model also a chat
    turn, which ends at ``<|assistant_end|>`` (its generation_config.json)."""
    lines = [
        "from transformers import AutoModelForCausalLM, AutoTokenizer",
        "",
        f'repo = "{repo}"',
        "tokenizer = AutoTokenizer.from_pretrained(repo)",
        "model = AutoModelForCausalLM.from_pretrained(repo)",
        "",
        'inputs = tokenizer("Der Fluss trägt", return_tensors="pt")',
        "output = model.generate(**inputs, max_new_tokens=32)",
        "print(tokenizer.decode(output[0], skip_special_tokens=True))",
    ]
    if model.subfolder == "aligned":
        lines += [
            "",
            'messages = [{"role": "user", "content": "Grüezi! Was ist ein Fluss?"}]',
            "inputs = tokenizer.apply_chat_template(",
            '    messages, add_generation_prompt=True, return_dict=True, return_tensors="pt"',
            ")",
            "output = model.generate(**inputs, max_new_tokens=128)",
            'reply = output[0, inputs["input_ids"].shape[1]:]',
            "print(tokenizer.decode(reply, skip_special_tokens=True))",
        ]
    return "\n".join(lines)


def _how_to_use(config: ReleaseConfig, facts: CardFacts, model: ReleasedModel | None) -> str:
    shown = model or facts.models[-1]
    repo = config.hub.repo_for(shown.subfolder)
    where = (
        "this repository"
        if model is not None
        else f"the `{shown.subfolder}/` folder of this release"
        + (f" (on the Hub: `{repo}`)" if repo else "")
    )
    if model is None or repo is None:
        repo = shown.subfolder if model is None else "."
    parts = [
        f"With `transformers` (no custom code), {where}:",
        "",
        "```python",
        usage_code(shown, repo),
        "```",
        "",
        "Generation ends at `</s>`"
        + (
            ", and at `<|assistant_end|>`, the end of the assistant's turn"
            if shown.subfolder == "aligned"
            else ""
        )
        + ' (`generation_config.json`); `pipeline("text-generation")` takes chat messages too.',
    ]
    if model is None:
        parts += [
            "",
            "Models: "
            + ", ".join(
                f"`{m.subfolder}/` ({m.checkpoint}"
                + (
                    f", `{config.hub.repo_for(m.subfolder)}`"
                    if config.hub.repo_for(m.subfolder)
                    else ""
                )
                + ")"
                for m in facts.models
            )
            + ". Each holds a `verification.json`: the logits of the trained checkpoint and of "
            "this export compared on a fixed batch.",
        ]
    return "\n".join(parts)


def _limitations(facts: CardFacts) -> str:
    rc = facts.run_config
    sample_sources = (
        [s["name"] for s in rc["data"]["sources"] if s.get("path") == "sample"]
        if facts.funnel is not None
        else []
    )
    params = parameter_count(facts.models[0].folder)
    lines = []
    if rc["pretrain"]["flavor"] == "tiny":
        lines.append(
            f"- A tiny model ({params:,} parameters, flavor `tiny`) made to test the pipeline "
            "end to end; it does not produce useful text."
        )
    if sample_sources:
        lines.append(
            "- Trained on the project's generated sample corpus (sources "
            + ", ".join(f"`{s}`" for s in sample_sources)
            + "), not on real web data."
        )
    lines.append(
        "- Evaluated only on the project's held-out tasks listed above; no safety evaluation."
    )
    if facts.funnel is not None:
        lines.append(
            "- The data filters (robots.txt, PII, toxicity, quality) reduce but do not remove "
            "personal, copyrighted or harmful content."
        )
    return "\n".join(lines)


def card_body(config: ReleaseConfig, facts: CardFacts, model: ReleasedModel | None = None) -> str:
    name = model_name(config, facts.run_config)
    models = ", ".join(f"`{m.subfolder}/` ({m.checkpoint})" for m in facts.models)
    if model is None:
        intro = (
            f"This release holds {models}, the evaluation"
            + (" and data funnel" if facts.funnel is not None else "")
            + " it reports, "
            "`RELEASE-MANIFEST.json` (the SHA-256 of every file, every step's manifest, the "
            "resolved config, the code and package versions) and `SHA256SUMS` (for "
            "`sha256sum -c`)."
        )
    else:
        kind = "aligned (QRPO) chat" if model.subfolder == "aligned" else "base (pretrained)"
        base = config.hub.repo_for("base") if facts.models[0].subfolder == "base" else None
        intro = (
            f"This repository holds the {kind} model, checkpoint `{model.checkpoint}`"
            + (f"; its base model is `{base}`." if model.subfolder == "aligned" and base else ".")
            + " The files named below are those of the release folder the run wrote."
        )
    title = name if model is None else f"{name} ({model.subfolder})"
    start = started_from(facts.stages)
    if start is None:
        how = "trained from scratch"
    elif start["stage"] == "pretrain":
        how = f"continued from `{start['model']}`"
    else:
        how = f"post-trained from `{start['model']}`"
    sections = [
        f"# {title}",
        "",
        f"A model {how} with the open `apertus` pipeline, following the Apertus "
        f"recipe (https://arxiv.org/abs/2509.14233), run `{facts.run_config['run']}`. {intro}",
        "",
        "## Architecture",
        "",
        _architecture(facts),
        "",
        "## Training",
        "",
        *([_started_from(start), ""] if start is not None else []),
        _training_stages(facts),
        "",
        # The pretraining recipe, of a run that pretrained (not one that post-trained a start).
        *([_recipe(facts), ""] if start is None or start["stage"] == "pretrain" else []),
        "### Compute",
        "",
        _compute(facts),
        "",
        "## Data compliance",
        "",
        _data_compliance(facts),
        "",
        "## Evaluation",
        "",
        _evaluation(facts),
    ]
    if facts.memorization is not None:
        sections += ["", "## Memorization", "", _memorization(facts)]
    if facts.memorization_control is not None:
        sections += [
            "",
            "### Goldfish against memorization",
            "",
            _goldfish_comparison(facts.memorization_control),
        ]
    if facts.reward_report is not None:
        sections += ["", "## Alignment (QRPO reward)", "", _reward(facts)]
    sections += [
        "",
        "## How to use",
        "",
        _how_to_use(config, facts, model),
        "",
        "## Limitations",
        "",
        _limitations(facts),
        "",
    ]
    return "\n".join(sections)


def render_card(config: ReleaseConfig, facts: CardFacts, model: ReleasedModel | None = None) -> str:
    """The whole README.md of the release (`model` None) or of one released model's folder
    (its Hub repository); parsed back with huggingface_hub (an invalid card raises)."""
    metadata = card_metadata(config, facts, model)
    front = yaml.safe_dump(metadata, sort_keys=False, allow_unicode=True)
    text = f"---\n{front}---\n\n{card_body(config, facts, model)}"
    try:
        ModelCard(text)
    except ValueError as e:
        raise ApertusError(f"the model card's metadata does not parse: {e}") from None
    return text
