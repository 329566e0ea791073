"""SFT data: chat conversations -> token rows with a completion-only loss mask (RECIPE.md §7).

Each conversation is rendered and tokenized with the tokenizer's chat template
(`apertus.tokenize.tokenizer.CHAT_TEMPLATE`)::

    <s><|system_start|>...<|system_end|><|user_start|>...<|user_end|><|assistant_start|>...<|assistant_end|>...

The loss mask is the template's ``{% generation %}`` span, which ``apply_chat_template(...,
return_assistant_tokens_mask=True)`` reports: the content of every assistant turn and its
``<|assistant_end|>`` (so the model learns to close its turn), nothing of the system, user or
developer turns, the chat markers before a completion or ``<s>`` (RECIPE.md §7, "loss on
completions only"). No packing (§7): every conversation is one row of its own. A conversation
longer than ``max_len + 1`` tokens is cut to that length (counted); one whose cut leaves no
completion token is dropped (counted, ids listed), since it would teach nothing. Rows are
``max_len + 1`` tokens wide, like a pretraining window: the model reads ``max_len`` inputs and
predicts the next token at each; shorter rows are padded with ``<pad>`` (id 3), whose labels
are ignored (`SFTData.padded`).

Replay (``replay.documents``; not in the recipe, 0 in the presets): the first documents of a
pretraining phase's training order are added as rows of their own, each its first
``max_len + 1`` tokens with a label on every token after ``<s>``. The SFT loader shuffles them
in among the conversations. A few-million-parameter model fine-tuned on a few thousand
conversations forgets its pretraining (held-out bits per byte ~1.5x); replaying documents it
trained on keeps it near its base, as a much larger model's SFT on millions of examples does
without help.

Output directory (what `apertus.train.sft_loader.SFTDataLoader` reads; no padding on disk)::

    sft.json        the record below
    tokens.npy      int32 [T]   all rows' tokens, concatenated in input order
    loss_mask.npy   uint8 [T]   1 on completion tokens
    lengths.npy     int32 [N]   tokens of each row (row i starts at sum(lengths[:i]))

``sft.json``: ``format`` ("apertus-sft-v1"), ``max_len``, ``row_tokens`` (max_len + 1),
``vocab_size`` (the tokenizer's, ids are below it), ``bos_id``, ``eos_id``, ``pad_id``,
``examples`` (rows), ``conversations`` (read), ``tokens``, ``completion_tokens``, ``truncated``,
``dropped_no_completion`` with ``dropped_ids``, ``languages`` (rows per language),
``files`` (sha256 and bytes of the three arrays), ``data_sha256`` (one digest of the three),
``conversations_sha256`` and ``replay`` (``phase``, its ``index_sha256``, ``documents`` and
their labelled ``tokens``); ``completion_tokens`` counts the conversations' only. The arrays
are plain ``.npy`` so every rank memory-maps them.

Entry point (StepRun stage "posttrain", step "sft_data")::

    python -m apertus.posttrain.sft_data --config JSON --manifest M \\
        --conversations FILE --tokenizer DIR --output DIR [--replay-phase DIR]

Config: ``{"max_len": 4096, "replay": {"documents": 0, "phase": "phase1"}}`` (the run spec's
``seq_len`` must be the same as max_len).
"""

from __future__ import annotations

import hashlib
import json
import os
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from apertus.core import ApertusError
from apertus.core.files import atomic_open, atomic_write_json, sha256_file
from apertus.core.stage import StepRun, run_main, stage_parser
from apertus.core.typed import Config, is_integer

__all__ = [
    "ARRAYS",
    "FORMAT",
    "SFT_FILE",
    "SFTConfig",
    "SFTData",
    "TokenizedConversation",
    "build_sft_data",
    "main",
    "read_sft_record",
    "tokenize_conversation",
]

SFT_FILE = "sft.json"
FORMAT = "apertus-sft-v1"
ARRAYS = {"tokens.npy": np.int32, "loss_mask.npy": np.uint8, "lengths.npy": np.int32}
_DROPPED_IDS_LISTED = 100  # sft.json names at most this many dropped conversations


@dataclass(frozen=True)
class ReplayConfig(Config, key="posttrain.sft_data.replay"):
    """Pretraining documents mixed into the SFT rows (not in the recipe; 0 in the presets)."""

    documents: int
    """How many: the first `documents` of `phase`'s training order, each cut to a row."""
    phase: str
    """The tokenize phase they come from (a phase the base model trained on)."""


@dataclass(frozen=True)
class SFTConfig(Config, key="posttrain.sft_data"):
    """The `posttrain.sft_data` config subtree."""

    max_len: int
    """Model input length: rows hold at most max_len + 1 tokens (RECIPE.md §7: 4096)."""
    replay: ReplayConfig

    def __post_init__(self) -> None:
        if self.max_len < 1:
            raise ApertusError(
                f"{self.config_key}.max_len must be a positive integer, got {self.max_len!r}"
            )


@dataclass(frozen=True)
class TokenizedConversation:
    """One conversation as a row: tokens, loss mask (1 on completion tokens), and whether it
    was cut to fit (`length` is its length before the cut)."""

    tokens: np.ndarray
    loss_mask: np.ndarray
    length: int

    @property
    def truncated(self) -> bool:
        return self.length > len(self.tokens)


def tokenize_conversation(
    tokenizer: Any, messages: list[dict[str, str]], *, max_len: int, where: str = "conversation"
) -> TokenizedConversation:
    """Render `messages` with the tokenizer's chat template and tokenize them; the loss mask
    is the template's assistant (generation) mask; at most ``max_len + 1`` tokens are kept.

    A tokenizer without a chat template, or whose template marks no token of a conversation
    that has assistant turns (no ``{% generation %}`` tag), is an ApertusError: the loss
    would silently cover nothing."""
    if not getattr(tokenizer, "chat_template", None):
        raise ApertusError("the tokenizer has no chat template (RECIPE.md §7 chat format)")
    try:
        encoded = tokenizer.apply_chat_template(
            messages,
            tokenize=True,
            return_dict=True,
            return_assistant_tokens_mask=True,
        )
    except Exception as e:  # jinja2 raises its own errors for a bad role or content
        raise ApertusError(f"{where}: the chat template refused it: {e}") from None
    ids = np.asarray(encoded["input_ids"], dtype=np.int64)
    mask = np.asarray(encoded["assistant_masks"], dtype=np.uint8)
    if mask.shape != ids.shape:
        raise ApertusError(f"{where}: assistant mask and tokens differ in length")
    if any(m["role"] == "assistant" for m in messages) and not mask.any():
        raise ApertusError(
            f"{where}: the tokenizer's chat template marks no assistant tokens; it needs a "
            "{% generation %} ... {% endgeneration %} span around each assistant completion "
            "(apertus.tokenize.tokenizer.CHAT_TEMPLATE has one)"
        )
    keep = max_len + 1
    return TokenizedConversation(ids[:keep].copy(), mask[:keep].copy(), len(ids))


def save_arrays(directory: Path, arrays: Mapping[str, np.ndarray]) -> dict[str, dict[str, Any]]:
    """Each array as the file `name` in `directory` (written atomically), and its listing for
    the record: ``{name: {"sha256", "bytes"}}``."""
    files = {}
    for name, array in arrays.items():
        path = directory / name
        with atomic_open(path, "wb") as f:
            np.save(f, array, allow_pickle=False)
        files[name] = {"sha256": sha256_file(path), "bytes": path.stat().st_size}
    return files


def build_sft_data(
    conversations: list[dict[str, Any]],
    tokenizer: Any,
    out_dir: str | os.PathLike[str],
    *,
    max_len: int,
    conversations_sha256: str | None = None,
    replay: Sequence[np.ndarray] = (),
    replay_source: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Tokenize `conversations` (checked ``{"id", "language", "messages"}`` dicts) into
    `out_dir` (see the module doc); returns the sft.json record.

    `replay`: pretraining documents (token arrays, ``<s> ... </s>``) appended as rows of
    their own, cut to ``max_len + 1`` tokens, with a label on every token (module doc);
    `replay_source` describes where they came from (kept in the record's ``replay``)."""
    if not is_integer(max_len) or max_len < 1:
        raise ApertusError(f"max_len must be a positive integer, got {max_len!r}")
    vocab_size = len(tokenizer)
    special = {
        "bos_id": tokenizer.bos_token_id,
        "eos_id": tokenizer.eos_token_id,
        "pad_id": tokenizer.pad_token_id,
    }
    missing = [name for name, value in special.items() if value is None]
    if missing:
        raise ApertusError(f"the tokenizer has no {', '.join(missing)} token")
    rows_tokens, rows_mask, lengths = [], [], []
    truncated, dropped, languages = 0, [], Counter()
    for index, conversation in enumerate(conversations):
        where = f"conversation {index} ({conversation['id']!r})"
        row = tokenize_conversation(
            tokenizer, conversation["messages"], max_len=max_len, where=where
        )
        if row.truncated:
            truncated += 1
        if not row.loss_mask.any():
            dropped.append(conversation["id"])
            continue
        if int(row.tokens.max()) >= vocab_size:  # a tokenizer whose len() is off
            raise ApertusError(f"{where}: token id {int(row.tokens.max())} >= vocab {vocab_size}")
        rows_tokens.append(row.tokens.astype(np.int32))
        rows_mask.append(row.loss_mask)
        lengths.append(len(row.tokens))
        languages[conversation["language"]] += 1
    if not lengths:
        raise ApertusError(
            f"no conversation has a completion token within max_len + 1 = {max_len + 1} tokens "
            f"({len(conversations)} read)"
        )
    completion_tokens = int(sum(int(m.sum()) for m in rows_mask))
    replay_tokens = 0
    for index, document in enumerate(replay):
        tokens = np.asarray(document[: max_len + 1], dtype=np.int64)
        if len(tokens) < 2:  # no label to learn
            raise ApertusError(f"replay document {index}: {len(tokens)} token(s), need 2")
        if int(tokens.max()) >= vocab_size or int(tokens.min()) < 0:
            raise ApertusError(f"replay document {index}: a token id outside 0..{vocab_size - 1}")
        mask = np.ones(len(tokens), dtype=np.uint8)
        mask[0] = 0  # <s> is never a label
        rows_tokens.append(tokens.astype(np.int32))
        rows_mask.append(mask)
        lengths.append(len(tokens))
        replay_tokens += len(tokens) - 1
    arrays = {
        "tokens.npy": np.concatenate(rows_tokens).astype(np.int32),
        "loss_mask.npy": np.concatenate(rows_mask).astype(np.uint8),
        "lengths.npy": np.asarray(lengths, dtype=np.int32),
    }
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    files = save_arrays(out_dir, arrays)
    record = {
        "format": FORMAT,
        "max_len": max_len,
        "row_tokens": max_len + 1,
        "vocab_size": int(vocab_size),
        **{name: int(value) for name, value in special.items()},
        "examples": len(lengths),
        "conversations": len(conversations),
        "tokens": int(arrays["tokens.npy"].size),
        "completion_tokens": completion_tokens,
        "truncated": truncated,
        "dropped_no_completion": len(dropped),
        "dropped_ids": dropped[:_DROPPED_IDS_LISTED],
        "languages": dict(sorted(languages.items())),
        "files": files,
        "data_sha256": hashlib.sha256(
            "".join(files[name]["sha256"] for name in ARRAYS).encode()
        ).hexdigest(),
        "conversations_sha256": conversations_sha256,
        "replay": {**(replay_source or {}), "documents": len(replay), "tokens": replay_tokens},
    }
    atomic_write_json(out_dir / SFT_FILE, record)  # last: its presence means the data is whole
    return record


def read_sft_record(sft_dir: str | os.PathLike[str]) -> dict[str, Any]:
    """The sft.json of an SFT data directory, with its format and integer fields checked
    (ApertusError naming the file otherwise). Reads no array."""
    path = Path(sft_dir) / SFT_FILE
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ApertusError(
            f"{path}: not found (is {sft_dir} written by apertus.posttrain.sft_data?)"
        ) from None
    except (OSError, ValueError) as e:
        raise ApertusError(f"{path}: unreadable: {e}") from None
    if not isinstance(record, dict) or record.get("format") != FORMAT:
        raise ApertusError(f"{path}: not an {FORMAT} record")
    for key in ("max_len", "row_tokens", "vocab_size", "pad_id", "eos_id", "bos_id", "examples"):
        if not is_integer(record.get(key)) or record[key] < 0:
            raise ApertusError(f"{path}: no integer {key}")
    if record["row_tokens"] != record["max_len"] + 1 or record["examples"] < 1:
        raise ApertusError(f"{path}: row_tokens must be max_len + 1 and examples >= 1")
    if not isinstance(record.get("data_sha256"), str):
        raise ApertusError(f"{path}: no data_sha256")
    return record


class SFTData:
    """An SFT data directory opened for reading: the arrays memory-mapped, their shapes and
    dtypes checked against sft.json. Row ``i`` is `row(i)`; `padded` gives batches."""

    def __init__(self, sft_dir: str | os.PathLike[str]) -> None:
        self.directory = Path(sft_dir)
        self.record = read_sft_record(self.directory)
        arrays = {}
        for name, dtype in ARRAYS.items():
            path = self.directory / name
            try:
                array = np.load(path, mmap_mode="r", allow_pickle=False)
            except FileNotFoundError:
                raise ApertusError(f"{path}: not found") from None
            except (OSError, ValueError) as e:
                raise ApertusError(f"{path}: unreadable: {e}") from None
            if array.dtype != dtype or array.ndim != 1:
                raise ApertusError(f"{path}: expected a 1-D {np.dtype(dtype)} array")
            arrays[name] = array
        self.tokens = arrays["tokens.npy"]
        self.loss_mask = arrays["loss_mask.npy"]
        self.lengths = arrays["lengths.npy"]
        n = self.record["examples"]
        if len(self.lengths) != n or len(self.tokens) != len(self.loss_mask):
            raise ApertusError(f"{self.directory}: arrays disagree with {SFT_FILE} ({n} examples)")
        if int(self.lengths.min()) < 1 or int(self.lengths.max()) > self.record["row_tokens"]:
            raise ApertusError(f"{self.directory}: a row length is outside 1..row_tokens")
        self.offsets = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(self.lengths, out=self.offsets[1:])
        if int(self.offsets[-1]) != len(self.tokens):
            raise ApertusError(f"{self.directory}: lengths do not add up to the tokens")

    def __len__(self) -> int:
        return int(self.record["examples"])

    @property
    def row_tokens(self) -> int:
        return int(self.record["row_tokens"])

    def row(self, index: int) -> tuple[np.ndarray, np.ndarray]:
        """Tokens and loss mask of row `index` (unpadded)."""
        start, end = int(self.offsets[index]), int(self.offsets[index + 1])
        return np.asarray(self.tokens[start:end]), np.asarray(self.loss_mask[start:end])

    def padded(
        self, indices: list[int] | np.ndarray, multiple: int | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """Rows `indices` as ``[B, W]`` int64 tokens padded with ``pad_id`` and a bool loss
        mask that is False on the padding. ``W = row_tokens``, or with `multiple` the longest
        of the rows rounded up to a multiple of `multiple`, plus one (at most ``row_tokens``):
        a batch of short conversations is not computed at the full ``max_len``."""
        width = self.row_tokens
        if multiple is not None:
            longest = max(int(self.lengths[int(i)]) for i in indices)
            width = min(width, -(-longest // multiple) * multiple + 1)
        tokens = np.full((len(indices), width), self.record["pad_id"], dtype=np.int64)
        mask = np.zeros((len(indices), width), dtype=bool)
        for out, index in enumerate(indices):
            row_tokens, row_mask = self.row(int(index))
            tokens[out, : len(row_tokens)] = row_tokens
            mask[out, : len(row_mask)] = row_mask.astype(bool)
        return tokens, mask


def read_replay(
    config: ReplayConfig, phase_dir: Path | None = None
) -> tuple[list[np.ndarray], dict[str, Any]]:
    """The first ``config.documents`` documents of the phase at `phase_dir` in its training
    order (a prefix has the phase's mixture), and a record of where they came from."""
    if not config.documents:
        return [], {"phase": None}
    from apertus.tokenize.phases import PhaseDataset

    phase = PhaseDataset(phase_dir)
    if phase.meta["name"] != config.phase:
        raise ApertusError(
            f"{phase_dir}: phase {phase.meta['name']!r}, "
            f"posttrain.sft_data.replay.phase names {config.phase!r}"
        )
    if config.documents > len(phase):
        raise ApertusError(
            f"posttrain.sft_data.replay.documents is {config.documents}, phase "
            f"{config.phase!r} plans {len(phase)}"
        )
    # Each block read is checked against its crc32 (apertus.core.blocks).
    documents = [np.asarray(phase.document(i)) for i in range(config.documents)]
    return documents, {"phase": config.phase, "index_sha256": phase.index_sha256}


def main(argv: list[str] | None = None) -> None:
    from apertus.posttrain.instructions import read_conversations
    from apertus.tokenize.tokenizer import load_tokenizer

    parser = stage_parser("posttrain", "Tokenize SFT conversations with a completion-only mask.")
    parser.add_argument("--conversations", type=Path, required=True, help="conversations JSONL")
    parser.add_argument("--tokenizer", type=Path, required=True, help="tokenizer directory")
    parser.add_argument("--output", type=Path, required=True, help="SFT data directory")
    parser.add_argument(
        "--replay-phase",
        type=Path,
        help="the built tokenize phase named by replay.phase (needed when replay.documents > 0)",
    )
    args = parser.parse_args(argv)
    config = SFTConfig.from_dict(args.config)
    if config.replay.documents and args.replay_phase is None:
        raise ApertusError(
            f"posttrain.sft_data.replay.documents is {config.replay.documents}: "
            "give the phase's directory with --replay-phase"
        )
    phase_dirs = [args.replay_phase] if config.replay.documents else []
    outputs = [args.output / name for name in (*ARRAYS, SFT_FILE)]
    with StepRun(
        "posttrain",
        "sft_data",
        args.config,
        inputs=[args.conversations, args.tokenizer, *phase_dirs],
        outputs=outputs,
        manifest=args.manifest,
    ) as step:
        replay, replay_source = read_replay(config.replay, *phase_dirs)
        conversations = read_conversations(args.conversations)
        tokenizer = load_tokenizer(str(args.tokenizer))
        record = build_sft_data(
            conversations,
            tokenizer,
            args.output,
            max_len=config.max_len,
            conversations_sha256=sha256_file(args.conversations),
            replay=replay,
            replay_source=replay_source,
        )
        step.summary.update(
            {k: v for k, v in record.items() if k not in ("files", "dropped_ids", "format")}
        )


if __name__ == "__main__":
    run_main(main)
