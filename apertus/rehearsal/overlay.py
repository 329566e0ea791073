"""The rehearsal overlay may change sizes and locations only: `drift` names every other change.

A rehearsal (config/rehearsal/<preset>.yaml, merged after config/presets/<preset>.yaml) runs the
preset's recipe at toy size on local stand-ins. It may change

* sizes (`SIZE_KEYS`): model flavor and shapes, token budgets, step counts, batch sizes, sequence
  and long-context lengths, nodes and processes, device, job resources, shard counts, sample
  counts and limits;
* locations (`LOCATION_KEYS`): where the run writes and whether it may download, and where each
  input comes from (`INPUT_KEYS`: Hub data, tokenizer, GlotLID, XLM-R, heads, reward model,
  judge, instruction data, lm-eval data), each input then a stand-in under ``rehearsal-inputs/``.

Anything else (a filter threshold, a mixture weight, Goldfish's k, AdEMAMix's betas, a source or
phase added or dropped, a dtype or torch.compile turned off) would rehearse another recipe. The
device is a size: what a CPU device changes in the code, with no key of its own, is
`DEVICE_DIFFERENCES`. The two configurations are compared
merged as Snakemake merges them (`apertus.core.config.load_config`: config/config.yaml, the
preset, the overlay; defaults filled), mappings key by key and lists of named entries (sources,
phases, long-context stages, evaluation tasks) entry by entry, by name.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

from apertus.core.config import load_config

# Where the stand-ins are, relative to the working directory (`python -m apertus.rehearsal DIR`).
STANDIN_ROOT = "rehearsal-inputs/"

# Patterns of dotted keys: `*` is any one mapping key, `[]` any named list entry, and a trailing
# `**` anything below.
SIZE_KEYS = (
    "resources.**",
    # what `apertus plan` assumes of the Hub data's size (read by no job but the report's cost page)
    "plan.**",
    # data: filter jobs and sample sizes
    "data.sources[].shards",
    "data.sources[].limit",
    "data.probes.per_count",
    "data.probes.controls",
    "data.probes.words",
    "data.quality.hub_labels.limit",
    "data.toxicity.hub_labels.limit",
    # tokenize: token budgets, file sizes, the long documents' length
    "tokenize.shards.max_tokens_per_file",
    "tokenize.phases[].tokens",
    "tokenize.phases[].select.*.min_tokens",
    "tokenize.heldout.max_documents",
    # pretrain: shape, lengths, batches, steps, layout, device
    "pretrain.flavor",
    "pretrain.seq_len",
    "pretrain.micro_batch",
    "pretrain.global_batch",
    "pretrain.batch_ramp.global_batch",
    "pretrain.batch_ramp.at_tokens",
    "pretrain.lr.warmup_steps",
    "pretrain.ademamix.t_alpha",
    "pretrain.ademamix.t_beta3",
    "pretrain.checkpoint_interval",
    "pretrain.nproc",
    "pretrain.nnodes",
    "pretrain.tensor_parallel",
    "pretrain.device",
    "pretrain.long_context[].seq_len",
    "pretrain.long_context[].global_batch",
    "pretrain.long_context[].steps",
    "pretrain.long_context[].warmup_steps",
    "pretrain.long_context[].nnodes",
    "pretrain.long_context[].context_parallel",
    # export
    "export.max_shard_size",
    # posttrain: conversation counts, lengths, batches, samples, layout, device
    "posttrain.instructions.qrpo",
    "posttrain.instructions.heldout",
    "posttrain.sft_data.max_len",
    "posttrain.sft_data.replay.documents",
    "posttrain.sft.global_batch",
    "posttrain.sft.micro_batch",
    "posttrain.sft.nproc",
    "posttrain.sft.nnodes",
    "posttrain.sft.checkpoint_interval",
    "posttrain.qrpo_data.max_new_tokens",
    "posttrain.qrpo_data.shards",
    "posttrain.qrpo_data.device",
    "posttrain.qrpo_data.reward.device",
    "posttrain.qrpo_data.rewards_by_category.*.device",
    "posttrain.qrpo.batch_size",
    "posttrain.qrpo.micro_batch",
    "posttrain.qrpo.nproc",
    "posttrain.qrpo.nnodes",
    "posttrain.qrpo.device",
    "posttrain.qrpo.checkpoint_interval",
    # evaluate: batches, sample limits, lengths, device
    "evaluate.*.batch_size",
    "evaluate.*.limit",
    "evaluate.*.tasks[].limit",
    "evaluate.*.device",
    "evaluate.*.model_args.parallelize",  # the model over the job's GPUs (layout)
    "evaluate.instruct.metadata.max_seq_lengths",
    "evaluate.*.gen_kwargs.max_gen_toks",
    "evaluate.memorization.suffix_tokens",
)
# What the code does otherwise on a CPU than on the preset's GPUs, for the same keys (the
# rehearsal overlays name them too).
DEVICE_DIFFERENCES = {
    "attention": "SDPA with a dense document mask, not FlexAttention: FlexAttention has no "
    "backward on CPU (apertus.train.config_registry picks the backend by device)",
    "kernels": "torch.compile's Inductor writes C++ kernels, not Triton ones",
    "collectives": "gloo, not NCCL (no PREMUL_SUM: FSDP2 reduces with a plain sum)",
    "bf16": "emulated: this CPU has no bf16 units; a bf16 product is computed from exact fp32 "
    "copies and rounded once, as a GPU's bf16 GEMM accumulates in fp32 "
    "(apertus.core.device.bf16_matmuls_in_fp32)",
}
# Where the run writes and whether it downloads.
LOCATION_KEYS = ("run", "results_dir", "offline", "evaluate.*.offline")
# Where an input comes from: a changed one must be a stand-in under STANDIN_ROOT.
INPUT_KEYS = (
    "data.sources[].path",
    "data.robots.directory",
    "data.language.model_path",
    "data.quality.encoder",
    "data.quality.head",
    "data.quality.labels",
    "data.toxicity.encoder",
    "data.toxicity.head",
    "data.toxicity.labels",
    "tokenize.tokenizer.source",
    "pretrain.init_from.model",
    "posttrain.init_from.model",
    "posttrain.instructions.source.**",
    "posttrain.qrpo_data.reward.model",
    "posttrain.qrpo_data.rewards_by_category.*.model",
    "evaluate.*.include_path",
    "evaluate.*.data_home",
)
# The fields that name the entries of a list of mappings, first found first.
ENTRY_NAMES = ("name", "task")
ABSENT = "<absent>"

Key = tuple[str, ...]


def drift(preset: Mapping[str, Any], rehearsal: Mapping[str, Any]) -> list[str]:
    """One message per key where the merged `rehearsal` configuration differs from the merged
    `preset` by more than a size or a location, naming the dotted key and both values; also a
    location input that is not a stand-in under ``rehearsal-inputs/``. Empty: no drift."""
    problems = []
    for key, before, now in changes(preset, rehearsal):
        dotted = dotted_key(key)
        if matches(key, SIZE_KEYS) or matches(key, LOCATION_KEYS):
            continue
        if matches(key, INPUT_KEYS):
            if isinstance(now, str) and not now.startswith(STANDIN_ROOT):
                problems.append(
                    f"{dotted}: {before!r} -> {now!r}: an input of the rehearsal must be a "
                    f"stand-in under {STANDIN_ROOT}"
                )
            continue
        problems.append(
            f"{dotted}: {before!r} -> {now!r}: neither a size nor a location (the rehearsal "
            "would rehearse another recipe)"
        )
    return problems


def overlay_drift(
    preset_file: str | os.PathLike | Sequence[str | os.PathLike],
    overlay_file: str | os.PathLike | Sequence[str | os.PathLike],
    directory: str | os.PathLike | None = None,
) -> list[str]:
    """`drift` of the preset merged with the overlay against the preset alone, both merged as
    Snakemake merges `--configfile PRESET... [OVERLAY...]` in the checkout `directory`. A
    preset made of several files (a preset and its addendum, e.g. apertus-8b.yaml then
    apertus-8b-posttrain.yaml) comes with its overlays in the same order."""
    presets = [preset_file] if isinstance(preset_file, str | os.PathLike) else list(preset_file)
    overlays = [overlay_file] if isinstance(overlay_file, str | os.PathLike) else list(overlay_file)
    preset = load_config(presets, directory=directory)
    rehearsal = load_config([*presets, *overlays], directory=directory)
    return drift(preset, rehearsal)


def changes(before: Any, now: Any, key: Key = ()) -> list[tuple[Key, Any, Any]]:
    """(key, value before, value now) of every leaf that differs: mappings by key, lists of
    named mappings by entry name (`[name]` in the key), other lists as whole values."""
    if isinstance(before, Mapping) and isinstance(now, Mapping):
        found = []
        for k in [*before, *(k for k in now if k not in before)]:
            found += changes(before.get(k, ABSENT), now.get(k, ABSENT), (*key, str(k)))
        return found
    names_before, names_now = _entry_names(before), _entry_names(now)
    if names_before is not None and names_now is not None:
        found = []
        for name in [*names_before, *(n for n in names_now if n not in names_before)]:
            found += changes(
                names_before.get(name, ABSENT), names_now.get(name, ABSENT), (*key, f"[{name}]")
            )
        return found
    return [] if before == now else [(key, before, now)]


def _entry_names(value: Any) -> dict[str, Any] | None:
    """A list of mappings as {entry name: entry}, or None when it is no such list."""
    if not isinstance(value, list) or not value or not all(isinstance(v, Mapping) for v in value):
        return None
    for field in ENTRY_NAMES:
        names = [v.get(field) for v in value]
        if all(isinstance(n, str) for n in names) and len(set(names)) == len(names):
            return dict(zip(names, value, strict=True))
    return None


def dotted_key(key: Key) -> str:
    """`("data", "sources", "[web]", "path")` -> `data.sources[web].path`."""
    out = ""
    for part in key:
        out += part if part.startswith("[") or not out else f".{part}"
    return out


def matches(key: Key, patterns: Sequence[str]) -> bool:
    """Whether `key` matches one of the dotted `patterns` (module constants' syntax)."""
    return any(_match(key, _pattern_parts(pattern)) for pattern in patterns)


def _pattern_parts(pattern: str) -> list[str]:
    return [part for part in pattern.replace("[]", ".[]").split(".") if part]


def _match(key: Key, parts: list[str]) -> bool:
    if parts == ["**"]:
        return True
    if not parts or not key:
        return not parts and not key
    part, head = parts[0], key[0]
    if part == "[]":
        ok = head.startswith("[")
    elif part == "*":
        ok = not head.startswith("[")
    else:
        ok = part == head
    return ok and _match(key[1:], parts[1:])
