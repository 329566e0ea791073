"""The verification card of an export: our model and the reloaded Hugging Face model give the
same logits on a fixed batch of held-out text.

The batch is packed as the trainer packs (``PhaseDataset.packed_sequences``): documents
``<s> ... </s>`` concatenated into one stream, cut into consecutive windows of ``seq_len + 1``
tokens whose first ``seq_len`` are a row's input, with positions counting from 0 at the window
start and at every document start. Our model (from the DCP checkpoint, fp32, eval, SDPA) reads
the positions as a block-causal mask; transformers builds the same mask from ``position_ids``
(``masking_utils.find_packed_sequence_indices``: a new sequence wherever the position does not
grow by one) when no attention mask and no cache are given, hence ``use_cache=False``.

A bfloat16 export is compared against our model with its weights rounded to bfloat16, both run
in float32, so the same tolerance applies: what is checked is the export's mapping and config,
not the (expected) rounding of the weights.

The card, ``verification.json`` in the export folder::

    {"passed": true, "max_abs_diff": ..., "mean_abs_diff": ..., "tolerance": 1e-4,
     "batch": {"rows": 4, "seq_len": 256, "tokens_sha256": ..., "positions_sha256": ...,
               "segments": ..., "documents": [...]},
     "reference": "...", "export_dtype": "float32",
     "checkpoint": "../../pretrain/_work/phase1-<key>/ckpt/step-N",  # relative to the card
     ...}
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from apertus.core import ApertusError
from apertus.core.files import atomic_write_json, recorded_path
from apertus.export.hf import load_model_state
from apertus.model.model import ApertusModel
from apertus.model.state_dict_adapter import EXPORT_DTYPES

log = logging.getLogger(__name__)

CARD_FILE = "verification.json"
DEFAULT_TOLERANCE = 1e-4


# --------------------------------------------------------------------------------------------
# The batch
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class VerificationBatch:
    """Input rows [rows, seq_len] (int64), their positions, and the held-out documents
    ("<file stem>/<id>") the rows draw on, in stream order."""

    tokens: torch.Tensor
    positions: torch.Tensor
    documents: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.tokens.dim() != 2 or self.tokens.shape != self.positions.shape:
            raise ApertusError(
                f"verification batch: tokens {tuple(self.tokens.shape)} and positions "
                f"{tuple(self.positions.shape)} must both be [rows, seq_len]"
            )
        if self.tokens.dtype != torch.int64 or self.positions.dtype != torch.int64:
            raise ApertusError("verification batch: tokens and positions must be int64")

    def describe(self) -> dict[str, Any]:
        rows, seq_len = self.tokens.shape
        return {
            "rows": rows,
            "seq_len": seq_len,
            "tokens_sha256": tensor_sha256(self.tokens),
            "positions_sha256": tensor_sha256(self.positions),
            # Runs of positions counting from 0: document starts and row starts.
            "segments": int((self.positions == 0).sum()),
            "documents": list(self.documents),
        }


def tensor_sha256(tensor: torch.Tensor) -> str:
    """SHA-256 of an integer tensor's values as little-endian int64, row-major: the same
    values give the same digest on any machine."""
    array = tensor.detach().to(torch.int64).cpu().contiguous().numpy().astype("<i8")
    return hashlib.sha256(array.tobytes()).hexdigest()


def pack_documents(
    documents: Sequence[Sequence[int]], rows: int, seq_len: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """The first `rows` training inputs of a stream of documents: windows of ``seq_len + 1``
    tokens, inputs their first ``seq_len``, positions from 0 at each window and document start
    (the packing of ``PhaseDataset.packed_sequences`` and the trainer's loader)."""
    window = seq_len + 1
    needed = rows * window
    tokens = np.empty(needed, dtype=np.int64)
    positions = np.empty(needed, dtype=np.int64)
    filled = 0
    for document in documents:
        piece = np.asarray(document, dtype=np.int64)[: needed - filled]
        tokens[filled : filled + len(piece)] = piece
        positions[filled : filled + len(piece)] = np.arange(len(piece))
        filled += len(piece)
        if filled == needed:
            break
    if filled < needed:
        raise ApertusError(
            f"verification batch needs {rows} rows of {window} tokens ({needed} in all), "
            f"the documents give {filled}"
        )
    tokens, positions = tokens.reshape(rows, window), positions.reshape(rows, window)
    # Positions count from 0 at each window start too, as in training.
    for row in range(rows):
        first_start = np.flatnonzero(positions[row] == 0)
        head = first_start[0] if len(first_start) else window
        positions[row, :head] = np.arange(head)
    return (
        torch.from_numpy(tokens[:, :seq_len].copy()),
        torch.from_numpy(positions[:, :seq_len].copy()),
    )


def heldout_documents(heldout_dir: str | os.PathLike) -> Iterator[tuple[str, str]]:
    """("<file stem>/<id>", text) of the held-out documents, one from each ``*.jsonl`` file in
    turn (files sorted by name, documents in file order), so any prefix mixes the languages."""
    heldout_dir = Path(heldout_dir)
    if not heldout_dir.is_dir():
        raise ApertusError(f"held-out directory {heldout_dir} does not exist")
    files = sorted(heldout_dir.glob("*.jsonl"))
    if not files:
        raise ApertusError(f"held-out directory {heldout_dir} has no *.jsonl file")
    streams = [(path, _read_jsonl(path)) for path in files]
    while streams:
        remaining = []
        for path, stream in streams:
            item = next(stream, None)
            if item is not None:
                yield item
                remaining.append((path, stream))
        streams = remaining


def _read_jsonl(path: Path) -> Iterator[tuple[str, str]]:
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as e:
                raise ApertusError(f"{path}:{number}: not valid JSON ({e})") from None
            if not isinstance(record, dict) or not isinstance(record.get("text"), str):
                raise ApertusError(f"{path}:{number}: expected an object with a string 'text'")
            yield f"{path.stem}/{record.get('id', number)}", record["text"]


def verification_batch(
    tokenizer, heldout_dir: str | os.PathLike, rows: int, seq_len: int
) -> VerificationBatch:
    """The fixed batch: held-out documents (:func:`heldout_documents` order) encoded as
    ``<s> ... </s>`` with `tokenizer` (``encode_documents``) and packed (:func:`pack_documents`).
    Only as many documents are encoded as the batch needs. A document longer than a third of a
    row keeps its first tokens and its ``</s>``, so every row holds document boundaries and the
    comparison exercises the block-causal mask (held-out documents are often longer than a
    row). Too few documents for the batch repeat, in order; `names` are the distinct ones."""
    from apertus.tokenize.tokenizer import encode_documents

    for name, value in (("rows", rows), ("seq_len", seq_len)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ApertusError(f"verification {name} must be a positive integer, got {value!r}")
    needed = rows * (seq_len + 1)
    encoded: list[list[int]] = []
    names: list[str] = []
    total = 0
    for name, text in heldout_documents(heldout_dir):
        (ids,) = encode_documents(tokenizer, [text])
        cap = max(4, seq_len // 3)
        if len(ids) > cap:
            ids = [*ids[: cap - 1], ids[-1]]
        encoded.append(ids)
        names.append(name)
        total += len(ids)
        if total >= needed:
            break
    if not encoded:
        raise ApertusError(f"no held-out document in {heldout_dir} to verify the export on")
    # Fewer tokens than the batch (a post-training-only run's held-out prompts): the documents
    # again, in the same order, until the rows are full; the comparison is of the two models
    # on the same tokens, which a repeat does not weaken.
    first = len(encoded)
    while total < needed:
        ids = encoded[(len(encoded) - first) % first]
        encoded.append(ids)
        total += len(ids)
    tokens, positions = pack_documents(encoded, rows, seq_len)
    return VerificationBatch(tokens, positions, tuple(names))


# --------------------------------------------------------------------------------------------
# The comparison
# --------------------------------------------------------------------------------------------


def export_dtype(export_dir: Path) -> str:
    """The dtype config.json declares ("dtype", or the older "torch_dtype")."""
    path = export_dir / "config.json"
    try:
        config = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise ApertusError(f"cannot read {path} ({type(e).__name__}: {e})") from None
    dtype = config.get("dtype", config.get("torch_dtype"))
    if dtype not in EXPORT_DTYPES:
        raise ApertusError(f"{path}: dtype {dtype!r} is not one of {', '.join(EXPORT_DTYPES)}")
    return dtype


def reference_model(
    state: dict[str, torch.Tensor], model_config: ApertusModel.Config, dtype: str
) -> ApertusModel:
    """Our model with `state` (rounded to `dtype` and back to float32), fp32, eval, SDPA."""
    rounding = EXPORT_DTYPES[dtype]
    model = replace(model_config, attn_backend="sdpa").build()
    model.load_state_dict(
        {k: v.to(rounding).to(torch.float32) for k, v in state.items()}, strict=True
    )
    return model.eval()


def load_hf_model(export_dir: Path):
    """``AutoModelForCausalLM.from_pretrained(export_dir, dtype=float32)``, no custom code;
    ApertusError when any weight is missing, unexpected or misshapen (transformers would
    otherwise initialise it at random and only warn)."""
    from transformers import AutoModelForCausalLM

    try:
        model, info = AutoModelForCausalLM.from_pretrained(
            str(export_dir),
            dtype=torch.float32,
            trust_remote_code=False,
            output_loading_info=True,
        )
    except Exception as e:
        raise ApertusError(
            f"transformers cannot load the export {export_dir} ({type(e).__name__}: {e})"
        ) from e
    # missing_keys, unexpected_keys, mismatched_keys, error_msgs: all must be empty.
    problems = {k: sorted(map(str, v)) for k, v in info.items() if v}
    if problems:
        raise ApertusError(f"the export {export_dir} does not load cleanly: {problems}")
    if type(model).__name__ != "ApertusForCausalLM":
        raise ApertusError(
            f"the export {export_dir} loads as {type(model).__name__}, not ApertusForCausalLM"
        )
    return model.eval()


@torch.no_grad()
def compare_logits(ours: ApertusModel, theirs, batch: VerificationBatch) -> dict[str, float]:
    """Max and mean absolute difference of the two models' logits over the batch, one row at a
    time (a row's logits are seq_len x vocab floats per model); also the largest |logit|, so a
    reader sees the scale the difference is measured against."""
    max_diff, total_diff, max_logit, count = 0.0, 0.0, 0.0, 0
    for row in range(batch.tokens.shape[0]):
        tokens, positions = batch.tokens[row : row + 1], batch.positions[row : row + 1]
        a = ours(tokens, positions)
        b = theirs(input_ids=tokens, position_ids=positions, use_cache=False).logits
        if a.shape != b.shape:
            raise ApertusError(
                f"logits shapes differ: ours {tuple(a.shape)}, transformers {tuple(b.shape)}"
            )
        diff = (a.float() - b.float()).abs()
        # torch's max propagates NaN; Python's max() would drop it, so NaN is kept explicitly
        # and fails the card.
        row_max = float(diff.max())
        max_diff = row_max if row_max != row_max else max(max_diff, row_max)
        total_diff += float(diff.double().sum())
        max_logit = max(max_logit, float(a.abs().max()))
        count += diff.numel()
        if max_diff != max_diff:
            break
    return {
        "max_abs_diff": max_diff,
        "mean_abs_diff": total_diff / count,
        "max_abs_logit": max_logit,
    }


def verify_export(
    checkpoint: str | os.PathLike,
    model_config: ApertusModel.Config,
    export_dir: str | os.PathLike,
    batch: VerificationBatch,
    *,
    tolerance: float = DEFAULT_TOLERANCE,
) -> dict[str, Any]:
    """Compare the logits of the export in `export_dir` with our model loaded from `checkpoint`
    on `batch`; write the card to ``export_dir/verification.json`` (pass or fail) and return
    it. Raises ApertusError with the figures when the max abs difference exceeds `tolerance`
    (or is NaN)."""
    import transformers

    export_dir = Path(export_dir)
    if isinstance(tolerance, bool) or not isinstance(tolerance, int | float) or tolerance <= 0:
        raise ApertusError(f"verification tolerance must be a positive number, got {tolerance!r}")
    if not export_dir.is_dir():
        raise ApertusError(f"export directory {export_dir} does not exist")
    if int(batch.tokens.max()) >= model_config.vocab_size or int(batch.tokens.min()) < 0:
        raise ApertusError(
            f"verification batch has token ids up to {int(batch.tokens.max())}, outside the "
            f"model's vocabulary of {model_config.vocab_size}"
        )
    if batch.tokens.shape[1] > model_config.max_seq_len:
        raise ApertusError(
            f"verification seq_len {batch.tokens.shape[1]} exceeds the model's max_seq_len "
            f"{model_config.max_seq_len}"
        )
    dtype = export_dtype(export_dir)
    ours = reference_model(load_model_state(checkpoint, model_config), model_config, dtype)
    theirs = load_hf_model(export_dir)
    figures = compare_logits(ours, theirs, batch)
    passed = figures["max_abs_diff"] <= tolerance  # False for NaN
    card = {
        "passed": bool(passed),
        **figures,
        "tolerance": tolerance,
        "batch": batch.describe(),
        "export_dtype": dtype,
        "reference": (
            "apertus ApertusModel from the DCP checkpoint, float32, eval, attn_backend=sdpa"
            + (", weights rounded to bfloat16 (compute in float32)" if dtype == "bfloat16" else "")
        ),
        "candidate": (
            "transformers AutoModelForCausalLM.from_pretrained(export, dtype=float32) "
            f"({type(theirs).__name__}, attn_implementation="
            f"{theirs.config._attn_implementation}), position_ids given, use_cache=False"
        ),
        # Relative to the export folder (a sibling of the folder it is built in), as the paths
        # of every record in a results folder are, so the folder can move.
        "checkpoint": recorded_path(checkpoint, export_dir),
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__},
    }
    atomic_write_json(export_dir / CARD_FILE, card)
    log.info(
        "verification %s: max abs diff %.3e (tolerance %.1e), mean %.3e, max |logit| %.2f",
        "passed" if passed else "FAILED",
        figures["max_abs_diff"],
        tolerance,
        figures["mean_abs_diff"],
        figures["max_abs_logit"],
    )
    if not passed:
        rows, seq_len = batch.tokens.shape
        raise ApertusError(
            f"export {export_dir} does not reproduce checkpoint {checkpoint}: max abs logit "
            f"difference {figures['max_abs_diff']:.3e} > tolerance {tolerance:.1e} (mean "
            f"{figures['mean_abs_diff']:.3e}, max |logit| {figures['max_abs_logit']:.2f}) on "
            f"a [{rows}, {seq_len}] batch (tokens sha256 {card['batch']['tokens_sha256'][:16]})"
        )
    return card
