"""Export of a trained checkpoint to a Hugging Face folder that ``transformers`` loads as is.

A torchtitan DCP checkpoint (a ``step-N`` directory written by our trainer) holds the model's
state dict flattened at the top level (``tok_embeddings.weight``, ``layers.0....``) beside the
trainer's own states under ``optimizer.``, ``lr_scheduler.``, ``dataloader.`` and
``train_state.`` (torchtitan ``components/checkpointer/base.py``). The export reads only the
model keys, maps them with :func:`apertus.model.state_dict_adapter.hf_key` and writes::

    config.json               ApertusConfig (model_type apertus, ApertusForCausalLM), with the
                              transformers-4 RoPE keys beside the transformers-5 ones
    generation_config.json    bos 1, eos 2 (chat models: also <|assistant_end|>), pad 3, greedy
    model.safetensors         (or model-0000k-of-0000n.safetensors + model.safetensors.index.json)
    tokenizer.json, tokenizer_config.json, ...   copied from the tokenizer directory

so that ``AutoModelForCausalLM.from_pretrained(folder)`` gives ``ApertusForCausalLM`` without
custom code.

Why not torch's ``dcp_to_torch_save``: it writes 0-dim tensors as 0.0 (PLATFORM.md, "Export"),
which would silently zero the xIELU ``beta`` / ``eps`` buffers. The model keys are instead loaded
with ``torch.distributed.checkpoint.load`` into tensors of the shapes the checkpoint's metadata
declares, after checking them against the model built on the meta device.

The ``config.json`` fields and the key map are `apertus.model.state_dict_adapter`'s.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch

from apertus.core import ApertusError
from apertus.core.files import NEW_FILE_MODE, atomic_write_json, sha256_file
from apertus.core.files import building_directory as core_building_directory
from apertus.model.flavors import num_params
from apertus.model.model import ApertusModel
from apertus.model.state_dict_adapter import (
    export_dtype,
    hf_config,
    hf_state_dict,
    rope_parameters,
)
from apertus.tokenize.tokenizer import TOKENIZER_FILES

# The token that closes an assistant turn (RECIPE §7, the chat template): a chat model's
# generation must stop there, as it stops at </s>.
ASSISTANT_END = "<|assistant_end|>"

log = logging.getLogger(__name__)

# The trainer's non-model states in a torchtitan checkpoint (torchtitan
# components/checkpointer/base.py: OPTIMIZER, LR_SCHEDULER, DATALOADER, TRAIN_STATE); the model
# state is flattened to the top level, so every other key must be a model key.
TRAINER_STATES = ("optimizer", "lr_scheduler", "dataloader", "train_state")

# What an export folder holds besides weight shards and tokenizer files: an existing folder
# with anything else in it is not ours to replace.
EXPORT_FILES = frozenset(
    {"config.json", "generation_config.json", "model.safetensors.index.json", "verification.json"}
)

# Hugging Face Hub's customary shard size (huggingface_hub.split_torch_state_dict_into_shards).
DEFAULT_MAX_SHARD_SIZE = "5GB"

# Texts whose encodings must be the same with the source and the exported tokenizer.
_PROBE_TEXTS = (
    "Hello world, this is a check.",
    "Grüezi mitenand! Ça va? ¿Qué tal? Привет, как дела? Καλημέρα.",
    "def f(x):\n    return x ** 2  # 100 %",
)


# --------------------------------------------------------------------------------------------
# Reading the checkpoint
# --------------------------------------------------------------------------------------------


def _checkpoint_metadata(checkpoint: Path):
    from torch.distributed.checkpoint import FileSystemReader

    if not checkpoint.is_dir():
        raise ApertusError(f"checkpoint {checkpoint} does not exist or is not a directory")
    if not (checkpoint / ".metadata").is_file():
        raise ApertusError(
            f"checkpoint {checkpoint} is not a complete DCP checkpoint (no .metadata file)"
        )
    try:
        return FileSystemReader(str(checkpoint)).read_metadata()
    except Exception as e:
        raise ApertusError(
            f"cannot read the DCP metadata of checkpoint {checkpoint} ({type(e).__name__}: {e})"
        ) from e


def _listed(keys: list[str], limit: int = 8) -> str:
    shown = ", ".join(keys[:limit])
    return shown + (f" and {len(keys) - limit} more" if len(keys) > limit else "")


def expected_model_shapes(model_config: ApertusModel.Config) -> dict[str, torch.Size]:
    """The persistent state dict of a model of this shape: key -> shape (built on meta)."""
    with torch.device("meta"):
        model = model_config.build()
    return {k: v.shape for k, v in model.state_dict().items()}


def load_model_state(
    checkpoint: str | os.PathLike, model_config: ApertusModel.Config
) -> dict[str, torch.Tensor]:
    """The model weights of a trainer checkpoint, float32, under our state-dict keys.

    The checkpoint's model keys (every key outside the trainer states) must be exactly those
    of a model built from `model_config`, with the same shapes; otherwise ApertusError naming
    the missing / unexpected / misshapen keys and the checkpoint. Tensors are read with
    ``torch.distributed.checkpoint.load`` (one process, no process group), which keeps 0-dim
    tensors such as the xIELU ``beta`` / ``eps`` exact, unlike ``dcp_to_torch_save``.
    """
    from torch.distributed.checkpoint import FileSystemReader
    from torch.distributed.checkpoint import load as dcp_load
    from torch.distributed.checkpoint.metadata import TensorStorageMetadata

    checkpoint = Path(checkpoint)
    metadata = _checkpoint_metadata(checkpoint)
    entries = {
        key: value
        for key, value in metadata.state_dict_metadata.items()
        if key.split(".", 1)[0] not in TRAINER_STATES
    }
    expected = expected_model_shapes(model_config)
    missing = sorted(set(expected) - set(entries))
    unexpected = sorted(set(entries) - set(expected))
    if missing or unexpected:
        parts = []
        if missing:
            parts.append(f"missing model key(s) {_listed(missing)}")
        if unexpected:
            parts.append(f"unexpected key(s) {_listed(unexpected)}")
        raise ApertusError(
            f"checkpoint {checkpoint} does not hold the model's state dict: "
            + "; ".join(parts)
            + " (is it a checkpoint of this flavor, written by our trainer?)"
        )
    problems = []
    for key, shape in expected.items():
        entry = entries[key]
        if not isinstance(entry, TensorStorageMetadata):
            problems.append(f"{key} is not a tensor")
        elif tuple(entry.size) != tuple(shape):
            problems.append(f"{key} has shape {list(entry.size)}, the model {list(shape)}")
        elif not entry.properties.dtype.is_floating_point:
            problems.append(f"{key} has dtype {entry.properties.dtype}")
    if problems:
        raise ApertusError(
            f"checkpoint {checkpoint} does not fit the model config: {_listed(problems)} "
            "(wrong flavor or model_overrides?)"
        )
    state = {
        key: torch.empty(tuple(entries[key].size), dtype=entries[key].properties.dtype)
        for key in expected
    }
    with warnings.catch_warnings():
        # "torch.distributed is disabled ... assuming the intent is to load in a single process":
        # exactly the intent here.
        warnings.filterwarnings("ignore", message="torch.distributed is disabled")
        try:
            dcp_load(state, storage_reader=FileSystemReader(str(checkpoint)))
        except Exception as e:
            raise ApertusError(
                f"cannot read the model tensors of checkpoint {checkpoint} "
                f"({type(e).__name__}: {e})"
            ) from e
    return {key: value.to(torch.float32) for key, value in state.items()}


# --------------------------------------------------------------------------------------------
# The Hugging Face side
# --------------------------------------------------------------------------------------------


def generation_config(
    *, bos_token_id: int = 1, eos_token_id: int | list[int] = 2, pad_token_id: int = 3
):
    """Greedy decoding by default (``do_sample=False``), with the tokenizer's special ids; a
    list `eos_token_id` gives every token that ends generation (``generate``, vLLM and TGI
    read it from ``generation_config.json``)."""
    from transformers import GenerationConfig

    return GenerationConfig(
        bos_token_id=bos_token_id,
        eos_token_id=eos_token_id,
        pad_token_id=pad_token_id,
        do_sample=False,
    )


def write_weights(
    tensors: dict[str, torch.Tensor], folder: Path, max_shard_size: int | str
) -> list[str]:
    """``model.safetensors``, or shards with an index when the weights exceed `max_shard_size`
    (the layout ``from_pretrained`` reads). Returns the file names written."""
    from huggingface_hub import split_torch_state_dict_into_shards
    from safetensors.torch import save_file

    try:
        split = split_torch_state_dict_into_shards(tensors, max_shard_size=max_shard_size)
    except ValueError as e:
        raise ApertusError(f"export max_shard_size {max_shard_size!r} is not a size ({e})") from e
    written = []
    for filename, keys in split.filename_to_tensors.items():
        save_file({k: tensors[k] for k in keys}, str(folder / filename), metadata={"format": "pt"})
        written.append(filename)
    if split.is_sharded:
        index = {"metadata": {**split.metadata}, "weight_map": split.tensor_to_filename}
        atomic_write_json(folder / "model.safetensors.index.json", index)
        written.append("model.safetensors.index.json")
    return written


def copy_tokenizer(tokenizer_dir: str | os.PathLike, folder: Path, vocab_size: int) -> dict:
    """Copy a tokenizer directory's tokenizer files into `folder`, and check the copy.

    The tokenizer must load and pass ``check_special_tokens`` (bos 1, eos 2, pad 3), and its
    vocabulary (added tokens included) must fit the model's `vocab_size`; the copy must load
    from `folder` and encode probe texts and render the chat template as the source does.
    Returns the special-token facts of the tokenizer.
    """
    from apertus.tokenize.tokenizer import check_special_tokens, load_tokenizer

    tokenizer_dir = Path(tokenizer_dir)
    if not tokenizer_dir.is_dir():
        raise ApertusError(f"tokenizer directory {tokenizer_dir} does not exist")
    source = load_tokenizer(str(tokenizer_dir))
    facts = check_special_tokens(source)
    if facts["vocab_size"] > vocab_size:
        raise ApertusError(
            f"tokenizer {tokenizer_dir} has {facts['vocab_size']} tokens, more than the model's "
            f"vocab_size {vocab_size}: ids beyond the embedding would have no row"
        )
    skipped = []
    for entry in sorted(tokenizer_dir.iterdir()):
        if entry.name.startswith("."):
            continue  # tool bookkeeping such as .snakemake_timestamp
        if entry.name not in TOKENIZER_FILES:
            skipped.append(entry.name)
        elif entry.is_dir():
            shutil.copytree(entry, folder / entry.name)
        else:
            shutil.copyfile(entry, folder / entry.name)
    if skipped:
        log.warning("not copied from %s (not tokenizer files): %s", tokenizer_dir, skipped)
    copy = load_tokenizer(str(folder))
    for text in _PROBE_TEXTS:
        if copy(text)["input_ids"] != source(text)["input_ids"]:
            raise ApertusError(
                f"the tokenizer copied from {tokenizer_dir} encodes {text!r} differently"
            )
    if getattr(copy, "chat_template", None) != getattr(source, "chat_template", None):
        raise ApertusError(f"the tokenizer copied from {tokenizer_dir} lost its chat template")
    return facts


def context_length(model_config: ApertusModel.Config) -> int:
    """``max_position_embeddings`` of the export: the context the RoPE is made for. With the
    Llama-3.1 scaling that is ``original_max_position_embeddings x factor`` (8192 x 8 = 64k,
    RECIPE §1 and §6; also what transformers requires: more than the original length, else
    every load warns), or the stage's ``max_seq_len`` when longer; without scaling the stage's
    ``max_seq_len``."""
    scaling = model_config.rope_scaling
    if scaling is None:
        return model_config.max_seq_len
    scaled = int(scaling.original_max_position_embeddings * scaling.factor)
    return max(model_config.max_seq_len, scaled)


def write_hf_config(model_config: ApertusModel.Config, folder: Path, dtype: str, **special) -> dict:
    """``config.json``: the ``ApertusConfig`` of the model with ``max_position_embeddings`` =
    :func:`context_length`, and beside transformers-5's ``rope_parameters`` the legacy
    ``rope_theta`` / ``rope_scaling`` with the same values, so transformers 4.x (which reads only
    those) builds the same RoPE instead of its defaults (theta 10000, no scaling). Returns the
    JSON written."""
    # hf_config writes max_seq_len as max_position_embeddings; built with the context length
    # instead, transformers' RoPE check (original length < max_position_embeddings) passes.
    context = replace(model_config, max_seq_len=context_length(model_config))
    hf_config(context, dtype=dtype, **special).save_pretrained(str(folder))
    path = folder / "config.json"
    written = json.loads(path.read_text(encoding="utf-8"))
    rope = dict(written["rope_parameters"])
    written["rope_theta"] = rope.pop("rope_theta")
    written["rope_scaling"] = rope if rope["rope_type"] != "default" else None
    atomic_write_json(path, written)
    return written


def set_model_max_length(folder: Path, length: int) -> None:
    """The exported tokenizer's ``model_max_length`` = the model's context, so transformers'
    truncation and "sequence too long" warnings follow the model, not the tokenizer's source."""
    path = folder / "tokenizer_config.json"
    if not path.is_file():
        return
    config = json.loads(path.read_text(encoding="utf-8"))
    if config.get("model_max_length") != length:
        atomic_write_json(path, {**config, "model_max_length": length})


def end_token_ids(folder: Path, eos_id: int, chat: bool) -> int | list[int]:
    """The ids that end generation: ``</s>``; for a chat model (SFT, QRPO) also
    ``<|assistant_end|>``, the id the exported tokenizer gives it."""
    if not chat:
        return eos_id
    from apertus.tokenize.tokenizer import load_tokenizer

    end = load_tokenizer(str(folder)).get_vocab().get(ASSISTANT_END)
    if end is None:
        raise ApertusError(f"the exported tokenizer has no {ASSISTANT_END} token")
    return [eos_id, end]


def write_export(
    state: dict[str, torch.Tensor],
    model_config: ApertusModel.Config,
    folder: str | os.PathLike,
    tokenizer_dir: str | os.PathLike,
    *,
    dtype: str = "float32",
    max_shard_size: int | str = DEFAULT_MAX_SHARD_SIZE,
    chat: bool = False,
) -> dict[str, Any]:
    """Write the Hugging Face folder for `state` into `folder` (an existing directory; not
    atomic by itself: :func:`export_checkpoint` builds it beside its destination). `chat`: the
    model is a chat model (SFT, QRPO), whose generation also ends at ``<|assistant_end|>``.
    Returns a summary: dtype, parameter count, files and their sha256."""
    folder = Path(folder)
    export_dtype(dtype)
    parameters = num_params(model_config)
    facts = copy_tokenizer(tokenizer_dir, folder, model_config.vocab_size)
    special = {
        "bos_token_id": facts["bos_id"],
        "eos_token_id": facts["eos_id"],
        "pad_token_id": facts["pad_id"],
    }
    written = write_hf_config(model_config, folder, dtype, **special)
    set_model_max_length(folder, written["max_position_embeddings"])
    end_ids = end_token_ids(folder, facts["eos_id"], chat)
    generation_config(**{**special, "eos_token_id": end_ids}).save_pretrained(str(folder))
    tensors = hf_state_dict(state, dtype)
    counted = sum(t.numel() for k, t in tensors.items() if not k.endswith(("beta", "eps")))
    if counted != parameters:  # a key map that dropped or duplicated a tensor
        raise ApertusError(
            f"export holds {counted} parameters, the model config {parameters}: key map broken"
        )
    weights = write_weights(tensors, folder, max_shard_size)
    return {
        "dtype": dtype,
        "parameters": parameters,
        "weight_files": weights,
        "vocab_size": model_config.vocab_size,
        "tokenizer_vocab_size": facts["vocab_size"],
        "max_position_embeddings": written["max_position_embeddings"],
        "rope_parameters": rope_parameters(model_config),
        "eos_token_id": end_ids,
        "files": {
            str(p.relative_to(folder)): sha256_file(p)
            for p in sorted(folder.rglob("*"))
            if p.is_file()
        },
    }


@contextmanager
def building_directory(output_dir: str | os.PathLike) -> Iterator[Path]:
    """A fresh directory beside `output_dir` that replaces it when the block succeeds.

    Readers see the old directory or the whole new one; on an error the new one is removed and
    `output_dir` is left as it was. An existing `output_dir` is replaced only if it holds
    nothing but export files (weights, configs, tokenizer files, the verification card).
    """
    output_dir = Path(output_dir)
    if output_dir.exists():
        if not output_dir.is_dir():
            raise ApertusError(f"export output {output_dir} exists and is not a directory")
        foreign = sorted(
            p.name
            for p in output_dir.iterdir()
            if not p.name.startswith(".")
            and p.name not in EXPORT_FILES | TOKENIZER_FILES
            and not (p.name.startswith("model") and p.name.endswith(".safetensors"))
        )
        if foreign:
            raise ApertusError(
                f"export output {output_dir} holds files that are not export files "
                f"({', '.join(foreign[:5])}); refusing to replace it"
            )
    with core_building_directory(output_dir) as built:
        yield built
        readable_by_all(built)


def readable_by_all(folder: Path) -> None:
    """Give files the permissions of a plain new file (`NEW_FILE_MODE`): a copied tokenizer file
    keeps its source's mode, which may be 0600, too strict for a release folder."""
    for path in folder.rglob("*"):
        if path.is_file():
            path.chmod(NEW_FILE_MODE)


def export_checkpoint(
    checkpoint: str | os.PathLike,
    model_config: ApertusModel.Config,
    output_dir: str | os.PathLike,
    tokenizer_dir: str | os.PathLike,
    *,
    dtype: str = "float32",
    max_shard_size: int | str = DEFAULT_MAX_SHARD_SIZE,
    chat: bool = False,
) -> dict[str, Any]:
    """Export the model of a trainer checkpoint (a ``step-N`` DCP directory) to a Hugging Face
    folder `output_dir`, written as a whole or not at all. `model_config` is the model the
    checkpoint was trained as (flavor and the stage's overrides: its ``rope_theta`` and
    ``max_seq_len`` go into config.json); `dtype` is "float32" or "bfloat16". Returns the
    summary of :func:`write_export` plus the checkpoint path."""
    export_dtype(dtype)
    state = load_model_state(checkpoint, model_config)
    with building_directory(output_dir) as tmp:
        summary = write_export(
            state,
            model_config,
            tmp,
            tokenizer_dir,
            dtype=dtype,
            max_shard_size=max_shard_size,
            chat=chat,
        )
    return {"checkpoint": str(Path(checkpoint).absolute()), **summary}
