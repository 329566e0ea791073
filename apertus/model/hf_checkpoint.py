"""A Hugging Face ``ApertusForCausalLM`` folder as the start of a stage: what is checked before
any rank starts, and what is recorded of it. No torch: the launcher and the plan-time checks read
it.

- `check_hf_checkpoint`: the folder's ``config.json`` is an Apertus causal LM (``model_type``
  apertus, ``ApertusForCausalLM``, xIELU, untied embeddings) of the flavor's shape (every field
  that differs is named with both values), and every weight file it lists is there: the single
  ``model.safetensors``, or the files of ``model.safetensors.index.json``.
- `weight_digests`: the sha256 and size of each of those files, for the manifests and the
  release's provenance.

torchtitan reads the weights themselves (``checkpoint.initial_load_in_hf``) through
`apertus.model.state_dict_adapter.ApertusStateDictAdapter`: each rank reads the parts of the
safetensors files that its shards need, so no rank holds the whole model. What such a checkpoint
lacks (the optimizer's state, the data position, the step) a stage started from it begins
afresh.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

from apertus.core import ApertusError
from apertus.core.files import sha256_file
from apertus.core.typed import Config
from apertus.model.shapes import FLAVOR_SHAPES, RopeScaling, Shape

__all__ = [
    "HF_SHAPE_FIELDS",
    "HUB_PATTERNS",
    "NOT_IN_HF_CHECKPOINT",
    "HFCheckpoint",
    "InitFrom",
    "PosttrainInitFrom",
    "check_hf_checkpoint",
    "config_problems",
    "resolve_hf_checkpoint",
    "rope_scaling_problems",
    "start_record",
    "weight_digests",
]

CONFIG_FILE = "config.json"
SINGLE_FILE = "model.safetensors"
INDEX_FILE = "model.safetensors.index.json"

# (our shape field, its transformers ApertusConfig field)
HF_SHAPE_FIELDS: tuple[tuple[str, str], ...] = (
    ("dim", "hidden_size"),
    ("n_layers", "num_hidden_layers"),
    ("n_heads", "num_attention_heads"),
    ("n_kv_heads", "num_key_value_heads"),
    ("head_dim", "head_dim"),
    ("ffn_hidden", "intermediate_size"),
    ("vocab_size", "vocab_size"),
)


# What a Hugging Face checkpoint does not hold, which a stage started from one begins afresh.
NOT_IN_HF_CHECKPOINT = (
    "optimizer state (AdEMAMix starts at zero)",
    "step count and LR schedule (the warmup is the config's)",
    "data position",
)


@dataclass(frozen=True)
class InitFrom(Config, key="pretrain.init_from"):
    """A released checkpoint a stage starts from (its weights only; `resolve_hf_checkpoint`
    finds it, `check_hf_checkpoint` checks it): ``pretrain.init_from``, the first stage's."""

    model: str
    """A Hub id or a local folder."""
    revision: str | None = None
    """The Hub revision (branch, tag or commit); None: main. Only for a Hub id."""


@dataclass(frozen=True)
class PosttrainInitFrom(InitFrom, key="posttrain.init_from"):
    """``posttrain.init_from``: the checkpoint a post-training-only run starts from
    (`apertus.posttrain.start`)."""


@dataclass(frozen=True)
class HFCheckpoint:
    """A checked Hugging Face checkpoint folder and the weight files it is made of."""

    folder: Path
    weight_files: tuple[str, ...]
    config: Mapping[str, Any]
    """Its ``config.json``, as read and checked."""

    @property
    def rope_theta(self) -> float | None:
        """The ``rope_theta`` it was trained at (transformers 5's ``rope_parameters``, else 4.x's
        top-level key; None: not stated); a stage trains at its own."""
        params = self.config.get("rope_parameters")
        theta = params.get("rope_theta") if isinstance(params, Mapping) else None
        theta = self.config.get("rope_theta") if theta is None else theta
        return float(theta) if isinstance(theta, int | float) else None


def _shape(flavor: str, overrides: Mapping[str, Any]) -> Shape:
    if flavor not in FLAVOR_SHAPES:
        raise ApertusError(
            f"unknown model flavor {flavor!r}; known flavors: {', '.join(FLAVOR_SHAPES)}"
        )
    names = {field.name for field in fields(Shape)}
    return replace(FLAVOR_SHAPES[flavor], **{k: v for k, v in overrides.items() if k in names})


def config_problems(
    config: Mapping[str, Any],
    flavor: str,
    overrides: Mapping[str, Any] | None = None,
    *,
    own_vocabulary: bool = False,
) -> list[str]:
    """What in a transformers ``config.json`` keeps it from being the start of a model of
    `flavor` (with its shape `overrides`): another architecture first (then nothing else is
    compared), else each shape field that differs, with both values. `own_vocabulary`: the run
    tokenizes with the checkpoint's tokenizer and its vocabulary is not known yet (plan time);
    the stage grows the embedding to it when the flavor's is smaller
    (`apertus.train.stage.vocabulary_cover`), so a vocabulary at least the flavor's fits."""
    model_type = config.get("model_type")
    architectures = config.get("architectures") or []
    if model_type != "apertus" or "ApertusForCausalLM" not in architectures:
        found = ", ".join(map(str, architectures)) or "no architectures"
        return [
            f"model_type {model_type!r} ({found}): not an Apertus causal LM; the pipeline "
            "trains model_type 'apertus' (ApertusForCausalLM)"
        ]
    problems = []
    if config.get("hidden_act", "xielu") != "xielu":
        problems.append(f"hidden_act is {config['hidden_act']!r}, the flavor's is 'xielu'")
    if config.get("tie_word_embeddings", False):
        problems.append("tie_word_embeddings is true; the flavor's lm_head is its own (untied)")
    for flag in ("attention_bias", "mlp_bias"):
        if config.get(flag, False):
            problems.append(f"{flag} is true; the flavor has no biases")
    shape = _shape(flavor, overrides or {})
    vocab = config.get("vocab_size")
    if own_vocabulary and isinstance(vocab, int) and vocab > shape.vocab_size:
        shape = replace(shape, vocab_size=vocab)
    problems += rope_scaling_problems(config)
    heads = config.get("num_attention_heads")
    for ours, theirs in HF_SHAPE_FIELDS:
        expected = shape.attention_head_dim if ours == "head_dim" else getattr(shape, ours)
        value = config.get(theirs)
        if ours == "head_dim" and value is None and heads and config.get("hidden_size"):
            value = config["hidden_size"] // heads  # transformers' default head_dim
        if value != expected:
            problems.append(f"{theirs} is {value!r}, flavor {flavor!r} has {ours} {expected}")
    return problems


def rope_scaling_problems(config: Mapping[str, Any]) -> list[str]:
    """Where the RoPE frequency scaling of a transformers ``config.json`` (transformers 5's
    ``rope_parameters``, else 4.x's ``rope_scaling``) is not the flavors' Llama-3.1 scaling
    (`RopeScaling`, RECIPE §1): its type, then each of its four numbers. Not ``rope_theta``: a
    stage trains at its own (a long-context stage raises it); the start's record holds the
    checkpoint's (`HFCheckpoint.rope_theta`)."""
    ours = RopeScaling()
    params = config.get("rope_parameters") or config.get("rope_scaling") or {}
    if not isinstance(params, Mapping):
        return [f"rope_scaling is {params!r}, not an object"]
    kind = params.get("rope_type", params.get("type", "default"))
    if kind != "llama3":
        return [
            f"rope_type is {kind!r}, the flavors' RoPE has the Llama-3.1 scaling ('llama3', "
            f"factor {ours.factor:g}, original_max_position_embeddings "
            f"{ours.original_max_position_embeddings})"
        ]
    problems = []
    for name in ("factor", "low_freq_factor", "high_freq_factor"):
        if params.get(name) != getattr(ours, name):
            problems.append(
                f"rope_scaling.{name} is {params.get(name)!r}, the flavors' is "
                f"{getattr(ours, name):g}"
            )
    original = params.get("original_max_position_embeddings")
    if original != ours.original_max_position_embeddings:
        problems.append(
            f"rope_scaling.original_max_position_embeddings is {original!r}, the flavors' is "
            f"{ours.original_max_position_embeddings}"
        )
    return problems


def _weight_files(folder: Path) -> tuple[str, ...]:
    index = folder / INDEX_FILE
    if index.is_file():
        try:
            weight_map = json.loads(index.read_text())["weight_map"]
            names = sorted(set(weight_map.values()))
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
            raise ApertusError(f"{index}: not a safetensors index ({e})") from None
    elif (folder / SINGLE_FILE).is_file():
        names = [SINGLE_FILE]
    else:
        raise ApertusError(
            f"{folder}: no {SINGLE_FILE} and no {INDEX_FILE}: not a Hugging Face checkpoint in "
            "safetensors (a .bin-only checkpoint: load and save it once with transformers)"
        )
    missing = [name for name in names if not (folder / name).is_file()]
    if missing:
        raise ApertusError(
            f"{folder}: {INDEX_FILE} lists {len(names)} weight file(s), {len(missing)} of them "
            f"missing: {', '.join(missing[:5])}"
        )
    return tuple(names)


def check_hf_checkpoint(
    folder: str | os.PathLike[str],
    flavor: str,
    overrides: Mapping[str, Any] | None = None,
    *,
    own_vocabulary: bool = False,
) -> HFCheckpoint:
    """The checkpoint in `folder`, or an ApertusError naming the folder and each problem
    (`config_problems`, a missing or unreadable ``config.json``, a missing weight file)."""
    path = Path(folder).absolute()
    if not path.is_dir():
        raise ApertusError(f"{path}: no such folder (a Hugging Face checkpoint to start from)")
    config_path = path / CONFIG_FILE
    try:
        config = json.loads(config_path.read_text())
    except FileNotFoundError:
        raise ApertusError(f"{path}: no {CONFIG_FILE}, so not a Hugging Face checkpoint") from None
    except (OSError, ValueError) as e:
        raise ApertusError(f"{config_path}: unreadable ({e})") from None
    if not isinstance(config, dict):
        raise ApertusError(f"{config_path}: not a JSON object")
    problems = config_problems(config, flavor, overrides, own_vocabulary=own_vocabulary)
    if problems:
        raise ApertusError(
            f"{config_path} does not match flavor {flavor!r}: " + "; ".join(problems)
        )
    return HFCheckpoint(path, _weight_files(path), config)


# What a start needs of a Hub repository (not its other files: .bin copies, GGUF, ...).
HUB_PATTERNS = (
    CONFIG_FILE,
    "generation_config.json",
    "*.safetensors",
    INDEX_FILE,
    "tokenizer*",
    "special_tokens_map.json",
    "chat_template*",
)


def resolve_hf_checkpoint(
    model: str, revision: str | None = None, *, offline: bool, cache_dir: str | None = None
) -> tuple[Path, str | None]:
    """The local folder of `model` (a folder, or a Hub id at `revision`, downloaded into the
    Hugging Face cache unless it is there; offline: the cache only) and the commit it is at
    (None for a local folder), or an ApertusError saying what to do."""
    path = Path(model)
    if path.is_dir():
        if revision is not None:
            raise ApertusError(
                f"init_from.revision {revision!r} is for a Hub id; {model!r} is a local folder"
            )
        return path.absolute(), None
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import HfHubHTTPError, LocalEntryNotFoundError

    where = f"{model}@{revision or 'main'}"
    try:
        folder = snapshot_download(
            model,
            revision=revision,
            allow_patterns=list(HUB_PATTERNS),
            local_files_only=offline,
            cache_dir=cache_dir,
        )
    except LocalEntryNotFoundError as e:
        fetch = (
            f"download it once with network access (`hf download {model}"
            + (f" --revision {revision}" if revision else "")
            + "`), or name a local copy"
        )
        if offline:
            raise ApertusError(
                f"{where} is not in the Hugging Face cache and the run is offline: {fetch}"
            ) from None
        raise ApertusError(  # online, but the Hub was not reached and the cache lacks it
            f"{where} is not in the Hugging Face cache and the Hub did not answer ({e}): {fetch}"
        ) from None
    except (HfHubHTTPError, OSError, ValueError) as e:
        raise ApertusError(
            f"{where}: could not be fetched from the Hugging Face Hub ({e})"
        ) from None
    folder = Path(folder)
    return folder, folder.name  # a snapshot folder is named by its commit


def start_record(start: InitFrom, commit: str | None, checkpoint: HFCheckpoint) -> dict[str, Any]:
    """What a manifest says of the released checkpoint a stage starts from (``init_from``): the
    model, its revision and Hub commit, the sha256 of every weight file (`weight_digests`), the
    RoPE theta it was trained at, and what such a checkpoint does not hold."""
    return {
        "model": start.model,
        "revision": start.revision,
        "commit": commit,
        "files": weight_digests(checkpoint),
        "rope_theta": checkpoint.rope_theta,
        "not_in_checkpoint": list(NOT_IN_HF_CHECKPOINT),
    }


def weight_digests(checkpoint: HFCheckpoint) -> dict[str, dict[str, Any]]:
    """The sha256 and size of each weight file (and of ``config.json``), by file name."""
    names = [CONFIG_FILE, *checkpoint.weight_files]
    if (checkpoint.folder / INDEX_FILE).is_file():
        names.append(INDEX_FILE)
    return {
        name: {
            "sha256": sha256_file(checkpoint.folder / name),
            "bytes": (checkpoint.folder / name).stat().st_size,
        }
        for name in sorted(names)
    }
