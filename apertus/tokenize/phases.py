"""Pretraining data phases: which documents a phase trains on, and in which order (RECIPE.md §5).

Pretraining runs in phases, each with its own source mixture and token budget; the data seed
changes at phases 3, 4 and 5. A phase is an *index* over the token shards that datatrove's
DocumentTokenizer wrote (one directory per source), never a copy of them.
:func:`build_phase_index` plans the phase and writes two files:

- ``index.npz``: one row per planned document, in training order, as four compact arrays:
  ``source`` (uint8, position in phase.json's source list), ``file`` (uint32, position in that
  source's file list), ``document`` (uint32, document number inside the file) and ``tokens``
  (uint32, the document's length; kept so a shard rewritten since planning is noticed on read).
  11 bytes per document, whatever the document's length.
- ``phase.json``: the spec, what each source holds and contributes (tokens, documents, epochs),
  its shard files with the sha256 from the source's ``checksums.json`` (of each ``.ds`` file and
  its ``.ds.index``), and the index's sha256. Each source's shard directory (``dir``) is
  recorded relative to the phase's own folder (``../../shards/web``), so a results folder moved
  or copied whole still reads; phase.json of format 1 recorded it as given to the planner (an
  absolute path, or one relative to the working directory), and is read that way. Training
  verifies the files it reads against these before its first step
  (`PhaseDataset.checksummed_files`).
  ``languages`` counts the planned documents and tokens per language, exactly, from the
  language sidecar of each shard file: per source (every language it holds, 0 where nothing
  is planned) and for the phase, each summing to the corresponding ``documents_planned`` and
  ``tokens_planned``. Shards without sidecars are refused: re-run tokenize_shards.

:class:`PhaseDataset` reads a phase back: documents in plan order as memory-mapped slices of the
original shards, and packed training windows with a resumable position.

Planning rules
--------------
Weights. Each source has a weight, ``None``, meaning its natural share (proportional to the
tokens it holds), or ``"all"``. All numbers: the weights are relative and normalised to sum to 1.
All ``None``: every source gets its natural share. Mixed: the numbers are explicit fractions of
the budget (their sum must be below 1) and the ``None`` sources share the rest in proportion to
their size, e.g. ``{"code": 0.1, "web": None, "edu": None}`` gives code 10% and web/edu 90% by
size. A weight of 0 keeps a source in the record without drawing from it. The budget is split
into integer per-source targets by largest remainder, so the targets sum to the budget exactly.

``"all"`` means every (non-empty) document of the source exactly once: one epoch, target = the
tokens it holds, taken out of the budget first. The other sources then share the rest of the
budget by the rules above, as if the budget were that rest, e.g. a budget of 300k with
``{"probes": "all", "web": None, "code": None}`` and 20k probe tokens gives web and code their
natural shares of 280k. It is an error when the ``"all"`` sources hold more tokens than the
budget, or as many when another source has a non-zero weight (it would get nothing), or fewer
when no other source has a non-zero weight (nothing would fill the rest). Its documents are
interleaved like any source's, so they are spread evenly over the phase. Planted documents whose
exposure count must be exact (the memorization probes of apertus.data.probes) use it.

Within a source. Documents (empty ones skipped and counted) are taken in a seeded random
permutation; when the target exceeds what the source holds, further epochs follow, each a fresh
permutation of all its documents, so no document repeats within an epoch. A source stops at the
first document that reaches its target: that last document is taken whole, so a source can
overshoot its target by less than one document, and the phase its budget by less than one
document per source. ``epochs`` in phase.json counts the epochs started (2 = one full pass and
part of a second).

Interleaving. The sources' document streams are merged so that every source advances through its
own plan at the same rate: each document is placed at the fraction of its source's planned tokens
reached at its midpoint, and the merged order sorts by that fraction (ties by source order).
The merge uses no randomness. Any prefix therefore has the planned mixture up to half a document
per source: for a prefix of L tokens, source s with planned share w_s and longest document d_s
holds within ``d_s / 2 + w_s * sum(d) / 2`` tokens of ``w_s * L``.

Determinism. Permutations come from the raw output of a PCG64 generator seeded by
``SeedSequence([seed, key(source name), epoch])`` sorted stably; numpy guarantees those raw
streams across versions (unlike ``Generator.permutation``). A source's order therefore depends
only on the seed, its name and its shards, not on which other sources share the phase. index.npz
is written with fixed zip timestamps, so the same spec and shards give byte-identical files.

Packing. :meth:`PhaseDataset.packed_sequences` cuts the concatenated plan into windows of
``seq_len + 1`` tokens (input = ``w[:-1]``, labels = ``w[1:]``) that do not overlap, as
torchtitan's text loader does: the windows concatenated are exactly the token stream, and the
last ``< seq_len + 1`` tokens of the phase are not used. Positions restart at 0 at each document
start and at the window start (reset-position-ids as Megatron computes it: a document cut by a
window boundary continues at position 0, matching the attention mask that resets there too).
"""

from __future__ import annotations

import hashlib
import json
import math
import operator
import os
import zipfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from fractions import Fraction
from numbers import Real
from pathlib import Path
from types import MappingProxyType
from typing import Any

import numpy as np

from apertus.core import ApertusError
from apertus.core.files import (
    Checksummed,
    atomic_open,
    atomic_write_json,
    recorded_path,
    resolve_recorded,
    sha256_file,
)
from apertus.core.typed import is_integer

# 2: sources' ``dir`` relative to the phase folder (1: as given, relative to the working directory).
PHASE_FORMAT_VERSION = 2
# The weight that takes every document of a source exactly once (module docstring).
ALL = "all"
INDEX_FILE = "index.npz"
PHASE_FILE = "phase.json"
CHECKSUMS_FILE = "checksums.json"

# Token files are little-endian, as datatrove writes them on every platform it runs on.
_TOKEN_DTYPES = {"uint16": np.dtype("<u2"), "uint32": np.dtype("<u4")}
_INDEX_DTYPE = np.dtype("<u8")
_INDEX_ARRAYS = {
    "source": np.dtype("u1"),
    "file": np.dtype("<u4"),
    "document": np.dtype("<u4"),
    "tokens": np.dtype("<u4"),
}
_UINT32_LIMIT = 1 << 32
_MAX_SOURCES = 256  # the source column is uint8
_MAX_LANGUAGES = 1 << 16  # a source's languages are numbered in uint16 while planning
# The earliest date a zip entry can carry: fixed so that rebuilding gives identical bytes.
_ZIP_DATE = (1980, 1, 1, 0, 0, 0)


@dataclass(frozen=True)
class PhaseSpec:
    """One pretraining phase: its name, token budget, data seed and source weights.

    `weights` maps source names to a weight, ``None`` (natural share) or ``"all"`` (every
    document once, out of the budget first); see the module docstring for how they combine.
    Invalid specs raise ApertusError here; an ``"all"`` source larger than the budget is only
    known when planning (:func:`build_phase_index`).
    """

    name: str
    tokens: int
    seed: int
    weights: Mapping[str, float | str | None]

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name.strip():
            raise ApertusError(f"phase name must be a non-empty string, got {self.name!r}")
        where = f"phase {self.name!r}"
        if not is_integer(self.tokens) or self.tokens <= 0:
            raise ApertusError(f"{where}: tokens must be a positive integer, got {self.tokens!r}")
        if not is_integer(self.seed) or self.seed < 0:
            raise ApertusError(f"{where}: seed must be an integer >= 0, got {self.seed!r}")
        if not isinstance(self.weights, Mapping) or not self.weights:
            raise ApertusError(f"{where}: weights must name at least one source")
        if len(self.weights) > _MAX_SOURCES:
            raise ApertusError(f"{where}: {len(self.weights)} sources, at most {_MAX_SOURCES}")
        weights: dict[str, float | str | None] = {}
        for source, weight in self.weights.items():
            if not isinstance(source, str) or not source:
                raise ApertusError(f"{where}: source names must be non-empty strings: {source!r}")
            if weight is not None and weight != ALL:
                if isinstance(weight, bool) or not isinstance(weight, Real):
                    raise ApertusError(
                        f"{where}: source {source!r} has weight {weight!r}; "
                        f"expected a number, null (natural share) or {ALL!r} (every document once)"
                    )
                weight = float(weight)
                if not math.isfinite(weight) or weight < 0:
                    raise ApertusError(
                        f"{where}: source {source!r} has weight {weight}; "
                        "weights must be finite and >= 0 (or null for the natural share)"
                    )
            weights[source] = weight
        # The rules for numbers and None apply among the sources that share the budget left
        # after the "all" sources.
        shared = {s: w for s, w in weights.items() if w != ALL}
        numbers = [w for w in shared.values() if w is not None]
        if len(numbers) == len(weights) and sum(numbers) == 0:
            raise ApertusError(f"{where}: all weights are zero, nothing to train on")
        if numbers and len(numbers) < len(shared) and math.fsum(numbers) >= 1:
            natural = sorted(s for s, w in shared.items() if w is None)
            raise ApertusError(
                f"{where}: with natural-share sources {natural}, the numeric weights are "
                f"fractions of the budget and must sum below 1 (they sum to {math.fsum(numbers)})"
            )
        object.__setattr__(self, "tokens", int(self.tokens))
        object.__setattr__(self, "seed", int(self.seed))
        object.__setattr__(self, "weights", MappingProxyType(weights))


@dataclass
class _ShardFile:
    path: Path
    relpath: str
    sha256: str
    size: int
    ends: np.ndarray  # cumulative document ends, in tokens
    index_sha256: str | None  # of the .ds.index file, when checksums.json lists it


class _SourceShards:
    """A DocumentTokenizer output directory: its .ds files in path order and their document ends.

    Everything the planner relies on is checked against ``checksums.json`` and the files' sizes
    (never their contents, which can be terabytes): a shard missing, unlisted, truncated, or whose
    index does not end at the file's length raises ApertusError naming it.
    """

    def __init__(self, name: str, directory: Path):
        self.name = name
        self.directory = Path(directory)
        where = f"source {name!r} ({self.directory})"
        if not self.directory.is_dir():
            raise ApertusError(f"{where}: shard directory does not exist")
        checksums_path = self.directory / CHECKSUMS_FILE
        checksums = _read_json(checksums_path, f"{where}: {CHECKSUMS_FILE}")
        listed = checksums.get("files")
        if not isinstance(listed, dict):
            raise ApertusError(f"{checksums_path}: 'files' must map paths to sha256 and bytes")
        dtype_name = checksums.get("dtype")
        if dtype_name not in _TOKEN_DTYPES:
            raise ApertusError(
                f"{checksums_path}: dtype {dtype_name!r}, expected one of {sorted(_TOKEN_DTYPES)}"
            )
        vocab_size = checksums.get("vocab_size")
        if not is_integer(vocab_size) or vocab_size <= 0:
            raise ApertusError(f"{checksums_path}: vocab_size must be a positive integer")
        if dtype_name == "uint16" and vocab_size > 1 << 16:
            raise ApertusError(f"{checksums_path}: vocab_size {vocab_size} does not fit uint16")
        self.dtype_name: str = dtype_name
        self.vocab_size: int = int(vocab_size)
        itemsize = _TOKEN_DTYPES[dtype_name].itemsize

        on_disk = sorted(
            (p.relative_to(self.directory).as_posix(), p)
            for p in self.directory.rglob("*.ds")
            if p.is_file()
        )
        missing = sorted(set(k for k in listed if k.endswith(".ds")) - {r for r, _ in on_disk})
        if missing:
            raise ApertusError(f"{where}: shard {missing[0]} is in {CHECKSUMS_FILE} but missing")
        self.files: list[_ShardFile] = []
        for relpath, path in on_disk:
            entry = listed.get(relpath)
            if not isinstance(entry, dict) or "sha256" not in entry or "bytes" not in entry:
                raise ApertusError(f"{path}: not listed with sha256 and bytes in {CHECKSUMS_FILE}")
            size = path.stat().st_size
            if size != entry["bytes"]:
                raise ApertusError(
                    f"{path}: {size} bytes, {CHECKSUMS_FILE} records {entry['bytes']} "
                    "(truncated or rewritten after tokenization)"
                )
            if size % itemsize:
                raise ApertusError(f"{path}: {size} bytes is not a whole number of {dtype_name}")
            index_path = path.with_name(path.name + ".index")
            if not index_path.is_file():
                raise ApertusError(f"{index_path}: document index missing")
            index_size = index_path.stat().st_size
            index_entry = listed.get(f"{relpath}.index")
            if isinstance(index_entry, dict) and index_entry.get("bytes", index_size) != index_size:
                raise ApertusError(
                    f"{index_path}: {index_size} bytes, {CHECKSUMS_FILE} records "
                    f"{index_entry['bytes']} (truncated or rewritten after tokenization)"
                )
            if index_size % _INDEX_DTYPE.itemsize:
                raise ApertusError(f"{index_path}: size is not a whole number of uint64")
            ends = np.fromfile(index_path, dtype=_INDEX_DTYPE)
            if len(ends) and np.any(ends[1:] < ends[:-1]):
                raise ApertusError(f"{index_path}: document ends are not non-decreasing")
            tokens = size // itemsize
            last = int(ends[-1]) if len(ends) else 0
            if last != tokens:
                raise ApertusError(
                    f"{index_path}: last document ends at token {last}, "
                    f"but {path.name} holds {tokens} tokens"
                )
            if len(ends) >= _UINT32_LIMIT:
                raise ApertusError(f"{path}: {len(ends)} documents, more than uint32 can index")
            index_sha = index_entry.get("sha256") if isinstance(index_entry, dict) else None
            self.files.append(
                _ShardFile(path, relpath, str(entry["sha256"]), size, ends, index_sha)
            )
        if len(self.files) >= _UINT32_LIMIT:
            raise ApertusError(
                f"{where}: {len(self.files)} shard files, more than uint32 can index"
            )

        # One row per non-empty document, in (file, document) order.
        file_ids, doc_ids, lengths = [], [], []
        self.empty_documents = 0
        for f, shard in enumerate(self.files):
            doc_len = np.diff(shard.ends, prepend=np.uint64(0)).astype(np.int64)
            keep = np.flatnonzero(doc_len > 0)
            self.empty_documents += len(doc_len) - len(keep)
            file_ids.append(np.full(len(keep), f, dtype=np.uint32))
            doc_ids.append(keep.astype(np.uint32))
            lengths.append(doc_len[keep])
        self.doc_file = np.concatenate(file_ids) if file_ids else np.zeros(0, np.uint32)
        self.doc_id = np.concatenate(doc_ids) if doc_ids else np.zeros(0, np.uint32)
        self.doc_len = np.concatenate(lengths) if lengths else np.zeros(0, np.int64)
        if len(self.doc_len) and int(self.doc_len.max()) >= _UINT32_LIMIT:
            raise ApertusError(f"{where}: a document longer than {_UINT32_LIMIT - 1} tokens")
        self.tokens = int(self.doc_len.sum())
        self.documents = sum(len(s.ends) for s in self.files)
        for key, value in (("documents", self.documents), ("tokens", self.tokens)):
            if key in checksums and checksums[key] != value:
                raise ApertusError(
                    f"{checksums_path}: records {key}={checksums[key]}, the shards hold {value}"
                )
        self.languages, self.doc_language = self._document_languages(listed)

    def _document_languages(self, listed: Mapping[str, Any]) -> tuple[list[str], np.ndarray]:
        """The languages the source holds (sorted) and, per row of the document table, the
        position of its language among them, from each file's sidecar.

        Sidecars are small (a few bytes per document), so unlike the token files they are read
        whole and their sha256 checked against checksums.json.
        """
        from apertus.tokenize.shards import LANGUAGES_SUFFIX, document_languages

        per_file: list[tuple[list[str], np.ndarray]] = []
        for shard in self.files:
            relpath = shard.relpath + LANGUAGES_SUFFIX
            path = self.directory / relpath
            entry = listed.get(relpath)
            if not isinstance(entry, dict) or not isinstance(entry.get("sha256"), str):
                raise ApertusError(
                    f"{path}: not in {CHECKSUMS_FILE}: the shards of source {self.name!r} were "
                    "written without the language of each document (before sidecars existed); "
                    f"remove {self.directory} and re-run tokenize_shards for {self.name!r}"
                )
            if not path.is_file():
                raise ApertusError(f"{path}: language sidecar missing (listed in {CHECKSUMS_FILE})")
            data = path.read_bytes()
            if hashlib.sha256(data).hexdigest() != entry["sha256"]:
                raise ApertusError(
                    f"{path}: sha256 differs from {CHECKSUMS_FILE} "
                    "(corrupted or rewritten after tokenization)"
                )
            per_file.append(document_languages(shard.path, len(shard.ends), data))
        codes = sorted({code for file_codes, _ in per_file for code in file_codes})
        if len(codes) > _MAX_LANGUAGES:
            raise ApertusError(
                f"source {self.name!r}: {len(codes)} languages, at most {_MAX_LANGUAGES}"
            )
        position = {code: i for i, code in enumerate(codes)}
        # Every document of every file, in (file, document) order, then the table's rows of it.
        every = [
            np.array([position[c] for c in file_codes], dtype=np.uint16)[positions]
            for file_codes, positions in per_file
        ]
        every_language = np.concatenate(every) if every else np.zeros(0, np.uint16)
        file_start = np.cumsum([0] + [len(shard.ends) for shard in self.files], dtype=np.int64)
        return codes, every_language[file_start[self.doc_file] + self.doc_id]


def _read_json(path: Path, what: str) -> dict:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ApertusError(f"{what}: {path} not found") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ApertusError(f"{what}: cannot read {path}: {e}") from None
    if not isinstance(data, dict):
        raise ApertusError(f"{what}: {path} does not hold a JSON object")
    return data


def read_phase_record(phase_dir: str | os.PathLike[str]) -> dict[str, Any]:
    """A built phase's phase.json, with its integer vocab_size and tokens_planned checked
    (ApertusError naming the file otherwise). Reads no index or shard."""
    path = Path(phase_dir) / PHASE_FILE
    record = _read_json(path, f"phase {phase_dir} (is it a built data phase?)")
    for key in ("vocab_size", "tokens_planned"):
        if not is_integer(record.get(key)):
            raise ApertusError(f"{path}: no integer {key}")
    return record


def _resolve_shares(
    weights: Mapping[str, float | None], available: Mapping[str, int]
) -> dict[str, Fraction]:
    """Each source's fraction of the budget it shares, exactly (the module docstring's weight
    rule for numbers and ``None``; the ``"all"`` sources are not among `weights`)."""
    numbers = {s: Fraction(w) for s, w in weights.items() if w is not None}
    natural = [s for s, w in weights.items() if w is None]
    if not natural:
        total = sum(numbers.values())
        return {s: numbers[s] / total if total else Fraction(0) for s in weights}
    rest = 1 - sum(numbers.values(), Fraction(0))
    natural_tokens = sum(available[s] for s in natural)
    shares = dict(numbers)
    for s in natural:
        shares[s] = rest * Fraction(available[s], natural_tokens) if natural_tokens else Fraction(0)
    return {s: shares[s] for s in weights}


def _targets(
    spec: PhaseSpec, available: Mapping[str, int], order: list[str]
) -> tuple[dict[str, int], dict[str, Fraction]]:
    """Integer token targets (summing to the budget) and shares of the budget per source.

    The ``"all"`` sources take what they hold, first; the others split the rest by their
    weights (module docstring). Without ``"all"`` sources the rest is the whole budget.
    """
    where = f"phase {spec.name!r}"
    whole = [s for s in order if spec.weights[s] == ALL]
    shared = [s for s in order if spec.weights[s] != ALL]
    rest = spec.tokens - sum(available[s] for s in whole)
    drawing = [s for s in shared if spec.weights[s] != 0]
    if whole and rest < 0:
        raise ApertusError(
            f"{where}: the sources with weight {ALL!r} ({', '.join(whole)}) hold "
            f"{spec.tokens - rest} tokens, more than the budget of {spec.tokens}; "
            "raise the phase's tokens or plant fewer documents"
        )
    if whole and drawing and rest == 0:
        raise ApertusError(
            f"{where}: the sources with weight {ALL!r} ({', '.join(whole)}) fill the whole "
            f"budget of {spec.tokens} tokens, leaving nothing for {', '.join(drawing)}"
        )
    if whole and not drawing and rest > 0:
        raise ApertusError(
            f"{where}: the sources with weight {ALL!r} ({', '.join(whole)}) hold "
            f"{spec.tokens - rest} tokens and no other source draws from the budget of "
            f"{spec.tokens}; set the phase's tokens to {spec.tokens - rest} or add a source"
        )
    within = _resolve_shares({s: spec.weights[s] for s in shared}, available) if shared else {}
    targets = _split_budget(rest, within, shared) if shared else {}
    targets.update({s: available[s] for s in whole})
    shares = {s: within[s] * Fraction(rest, spec.tokens) for s in shared}
    shares.update({s: Fraction(available[s], spec.tokens) for s in whole})
    return {s: targets[s] for s in order}, {s: shares[s] for s in order}


def _split_budget(budget: int, shares: Mapping[str, Fraction], order: list[str]) -> dict[str, int]:
    """Integer targets summing to `budget`: floors, then leftover tokens by largest remainder."""
    raw = {s: shares[s] * budget for s in order}
    targets = {s: math.floor(raw[s]) for s in order}
    leftover = budget - sum(targets.values())
    by_remainder = sorted(order, key=lambda s: (-(raw[s] - targets[s]), order.index(s)))
    for s in by_remainder[:leftover]:
        targets[s] += 1
    return targets


def _name_key(name: str) -> int:
    return int.from_bytes(hashlib.sha256(name.encode("utf-8")).digest()[:8], "little")


def _permutation(n: int, seed: int, source: str, epoch: int) -> np.ndarray:
    """A seeded permutation of range(n), equal on all numpy versions (raw PCG64, stable sort)."""
    bit_generator = np.random.PCG64(np.random.SeedSequence([seed, _name_key(source), epoch]))
    return np.argsort(bit_generator.random_raw(n), kind="stable")


def _plan_source(shards: _SourceShards, seed: int, target: int) -> tuple[np.ndarray, int]:
    """Rows of `shards`' document table, in training order, until `target` tokens are reached."""
    parts: list[np.ndarray] = []
    remaining, epochs = target, 0
    while remaining > 0:
        order = _permutation(len(shards.doc_len), seed, shards.name, epochs)
        reached = np.cumsum(shards.doc_len[order])
        epochs += 1
        if int(reached[-1]) >= remaining:
            parts.append(order[: int(np.searchsorted(reached, remaining, side="left")) + 1])
            remaining = 0
        else:
            parts.append(order)
            remaining -= int(reached[-1])
    rows = np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)
    return rows, epochs


def _write_index(path: Path, arrays: Mapping[str, np.ndarray]) -> None:
    """Write an .npz atomically and reproducibly: no compression, fixed entry dates.

    ``numpy.savez`` stamps each entry with the current time, so two builds of the same phase would
    differ.
    """
    with (
        atomic_open(path, "w+b") as f,
        zipfile.ZipFile(f, "w", compression=zipfile.ZIP_STORED, allowZip64=True) as zf,
    ):
        for name, array in arrays.items():
            info = zipfile.ZipInfo(f"{name}.npy", date_time=_ZIP_DATE)
            with zf.open(info, "w", force_zip64=True) as member:
                np.lib.format.write_array(member, np.ascontiguousarray(array), allow_pickle=False)


def build_phase_index(spec: PhaseSpec, shard_dirs: Mapping[str, Path], out_dir: Path) -> dict:
    """Plan the documents of one phase and write ``index.npz`` and ``phase.json`` to `out_dir`.

    `shard_dirs` maps source names to DocumentTokenizer output directories; sources it names that
    `spec.weights` does not are ignored. Returns the content of phase.json. Raises ApertusError
    naming the source or file for a source without a shard directory, a weighted source with no
    tokens, shards inconsistent with their checksums.json, sources tokenized with different
    vocabularies, and values that do not fit the index's integer columns. Each source's ``dir``
    is recorded relative to `out_dir` (module docstring).
    """
    out_dir = Path(out_dir)
    where = f"phase {spec.name!r}"
    names = sorted(spec.weights)
    missing = [s for s in names if s not in shard_dirs]
    if missing:
        raise ApertusError(
            f"{where}: source {missing[0]!r} has no shard directory (have: {sorted(shard_dirs)})"
        )
    sources = {s: _SourceShards(s, Path(shard_dirs[s])) for s in names}
    vocab = {(sources[s].dtype_name, sources[s].vocab_size) for s in names}
    if len(vocab) > 1:
        described = ", ".join(
            f"{s}: {sources[s].dtype_name}/{sources[s].vocab_size}" for s in names
        )
        raise ApertusError(
            f"{where}: sources were tokenized with different vocabularies: {described}"
        )
    dtype_name, vocab_size = vocab.pop()

    available = {s: sources[s].tokens for s in names}
    for s in names:
        if spec.weights[s] != 0 and available[s] == 0:
            raise ApertusError(
                f"{where}: source {s!r} has weight {spec.weights[s]} but no tokens in "
                f"{sources[s].directory} ({len(sources[s].files)} shard files)"
            )
    targets, shares = _targets(spec, available, names)

    # Each source's own document stream, then the progress-balanced merge (module docstring).
    plans = {s: _plan_source(sources[s], spec.seed, targets[s]) for s in names}
    columns: dict[str, list[np.ndarray]] = {k: [] for k in (*_INDEX_ARRAYS, "progress")}
    for i, s in enumerate(names):
        rows, _ = plans[s]
        lengths = sources[s].doc_len[rows]
        planned = int(lengths.sum())
        midpoints = np.cumsum(lengths) - lengths / 2
        columns["progress"].append(midpoints / planned if planned else midpoints)
        columns["source"].append(np.full(len(rows), i, dtype=np.uint8))
        columns["file"].append(sources[s].doc_file[rows])
        columns["document"].append(sources[s].doc_id[rows])
        columns["tokens"].append(lengths)
    merged = {k: np.concatenate(v) for k, v in columns.items()}
    order = np.lexsort((merged["source"], merged["progress"]))
    arrays = {k: merged[k][order].astype(dt) for k, dt in _INDEX_ARRAYS.items()}

    out_dir.mkdir(parents=True, exist_ok=True)
    # phase.json is written last and names the index's sha256: a reader never pairs a new index
    # with an old phase.json, and an interrupted rebuild leaves no phase.json at all.
    (out_dir / PHASE_FILE).unlink(missing_ok=True)
    index_path = out_dir / INDEX_FILE
    _write_index(index_path, arrays)

    source_records = []
    for s in names:
        rows, epochs = plans[s]
        shard = sources[s]
        source_records.append(
            {
                "name": s,
                "dir": recorded_path(shard_dirs[s], out_dir),
                "weight": spec.weights[s],
                "share": float(shares[s]),
                "tokens_available": shard.tokens,
                "documents_available": len(shard.doc_len),
                "empty_documents_skipped": shard.empty_documents,
                "tokens_target": targets[s],
                "tokens_planned": int(shard.doc_len[rows].sum()),
                "documents_planned": len(rows),
                "languages": _planned_by_language(shard, rows),
                "epochs": epochs,
                "files": [
                    {
                        "path": f.relpath,
                        "sha256": f.sha256,
                        "bytes": f.size,
                        "documents": len(f.ends),
                        **({"index_sha256": f.index_sha256} if f.index_sha256 else {}),
                    }
                    for f in shard.files
                ],
            }
        )
    languages: dict[str, dict[str, int]] = {}
    for source_record in source_records:
        for language, counts in source_record["languages"].items():
            total = languages.setdefault(language, dict.fromkeys(counts, 0))
            for key, value in counts.items():
                total[key] += value
        _check_language_sums(
            source_record["languages"], source_record, f"{where}, source {source_record['name']!r}"
        )
    record = {
        "format_version": PHASE_FORMAT_VERSION,
        "name": spec.name,
        "seed": spec.seed,
        "budget": spec.tokens,
        "tokens_planned": int(arrays["tokens"].sum(dtype=np.uint64)),
        "documents_planned": len(arrays["tokens"]),
        "languages": {language: languages[language] for language in sorted(languages)},
        "dtype": dtype_name,
        "vocab_size": vocab_size,
        "sources": source_records,
        "index": {
            "path": INDEX_FILE,
            "sha256": sha256_file(index_path),
            "bytes": index_path.stat().st_size,
        },
    }
    _check_language_sums(record["languages"], record, where)
    atomic_write_json(out_dir / PHASE_FILE, record)
    return record


def _planned_by_language(shards: _SourceShards, rows: np.ndarray) -> dict[str, dict[str, int]]:
    """Planned documents and tokens of each language a source holds (0 where none is planned);
    a document planned in two epochs counts twice, as in the source's totals."""
    languages = shards.doc_language[rows]
    documents = np.bincount(languages, minlength=len(shards.languages))
    tokens = np.zeros(len(shards.languages), dtype=np.int64)
    np.add.at(tokens, languages, shards.doc_len[rows])
    return {
        language: {"documents_planned": int(documents[i]), "tokens_planned": int(tokens[i])}
        for i, language in enumerate(shards.languages)
    }


def _check_language_sums(languages: Mapping[str, Mapping[str, int]], totals: dict, where: str):
    for key in ("documents_planned", "tokens_planned"):
        counted = sum(counts[key] for counts in languages.values())
        if counted != totals[key]:
            raise ApertusError(
                f"{where}: {key} per language sum to {counted}, not {totals[key]} (a bug)"
            )


class PhaseDataset:
    """The documents of a built phase, in plan order, read through memory maps of the shards.

    Opening checks what is cheap: the index's sha256 against phase.json, every referenced
    ``.ds`` / ``.ds.index`` file's size against the plan, and that every row points at an existing
    file and document. Reading a document checks its length against the plan. Each mismatch
    raises ApertusError naming the file. `shard_dirs` replaces the recorded directory of the
    sources it names (shards moved since planning); other sources use phase.json's ``dir``.
    """

    def __init__(self, phase_dir: Path, shard_dirs: Mapping[str, Path] | None = None):
        self.phase_dir = Path(phase_dir)
        self.meta = read_phase_record(self.phase_dir)
        try:
            self._dtype = _TOKEN_DTYPES[self.meta["dtype"]]
            index_path = self.phase_dir / self.meta["index"]["path"]
            expected_sha = self.meta["index"]["sha256"]
            sources = self.meta["sources"]
            self._files: list[list[dict]] = [src["files"] for src in sources]
            source_dirs = [self._source_dir(src["dir"]) for src in sources]
            names = [src["name"] for src in sources]
            tokens_planned = int(self.meta["tokens_planned"])
        except (KeyError, TypeError) as e:
            raise ApertusError(f"{self.phase_dir / PHASE_FILE}: malformed, missing {e}") from None
        if shard_dirs:
            unknown = sorted(set(shard_dirs) - set(names))
            if unknown:
                raise ApertusError(f"{self.phase_dir}: no source {unknown[0]!r} in this phase")
            source_dirs = [
                Path(shard_dirs.get(n, d)) for n, d in zip(names, source_dirs, strict=True)
            ]
        self.sources: list[str] = names
        self._dirs = source_dirs

        if not index_path.is_file():
            raise ApertusError(f"{index_path}: phase index missing")
        actual_sha = sha256_file(index_path)
        if actual_sha != expected_sha:
            raise ApertusError(
                f"{index_path}: sha256 {actual_sha} does not match phase.json ({expected_sha}); "
                "the index was modified or belongs to another build"
            )
        try:
            with np.load(index_path, allow_pickle=False) as npz:
                arrays = {k: npz[k] for k in _INDEX_ARRAYS}
        except (KeyError, ValueError, OSError, zipfile.BadZipFile) as e:
            raise ApertusError(f"{index_path}: unreadable phase index: {e}") from None
        lengths = {len(a) for a in arrays.values()}
        bad_dtype = [k for k, dt in _INDEX_ARRAYS.items() if arrays[k].dtype != dt]
        if len(lengths) != 1 or bad_dtype:
            raise ApertusError(f"{index_path}: index columns have wrong lengths or dtypes")
        self._source = arrays["source"]
        self._file = arrays["file"]
        self._document = arrays["document"]
        self._tokens = arrays["tokens"]
        self._check_rows(index_path)
        # Token offset where each planned document ends in the phase's stream.
        self._stream_ends = np.cumsum(self._tokens, dtype=np.uint64)
        if self.total_tokens != tokens_planned:
            raise ApertusError(
                f"{index_path}: plans {self.total_tokens} tokens, phase.json {tokens_planned}"
            )
        self._token_maps: dict[tuple[int, int], np.memmap] = {}
        self._end_maps: dict[tuple[int, int], np.memmap] = {}

    def _source_dir(self, recorded: str) -> Path:
        """A source's shard directory as phase.json records it: relative to the phase folder,
        or, in a phase.json of format 1, as the planner was given it."""
        if self.meta.get("format_version", 1) < 2:
            return Path(recorded)
        return resolve_recorded(recorded, self.phase_dir)

    def _check_rows(self, index_path: Path) -> None:
        """Rows name listed files and documents they hold; referenced files have their sizes."""
        n_files = np.array([len(files) for files in self._files], dtype=np.int64)
        if len(self._source) and int(self._source.max()) >= len(n_files):
            raise ApertusError(f"{index_path}: a row names a source the phase does not list")
        if len(self._source) and np.any(self._file >= n_files[self._source]):
            raise ApertusError(f"{index_path}: a row names a file its source does not list")
        first_file = np.concatenate([[0], np.cumsum(n_files)[:-1]]).astype(np.int64)
        documents = np.array(
            [f["documents"] for files in self._files for f in files], dtype=np.int64
        )
        flat_file = first_file[self._source] + self._file
        if len(flat_file) and np.any(self._document >= documents[flat_file]):
            raise ApertusError(f"{index_path}: a row names a document past its file's end")
        for source, file in self._referenced_files():
            record = self._files[source][file]
            path = self._path(source, file)
            index = path.with_name(path.name + ".index")
            for p, size in ((path, record["bytes"]), (index, record["documents"] * 8)):
                if not p.is_file():
                    raise ApertusError(
                        f"{p}: shard file of source {self.sources[source]!r} missing"
                    )
                if p.stat().st_size != size:
                    raise ApertusError(
                        f"{p}: {p.stat().st_size} bytes, the phase was planned with {size} "
                        "(truncated or rewritten since planning)"
                    )

    def _referenced_files(self, documents: int | None = None) -> list[tuple[int, int]]:
        """(source, file) of every shard file the plan's rows (its first `documents`) read."""
        rows = slice(None) if documents is None else slice(0, documents)
        pairs = np.unique(
            self._source[rows].astype(np.uint64) << np.uint64(32)
            | self._file[rows].astype(np.uint64)
        )
        return [(pair >> 32, pair & 0xFFFFFFFF) for pair in pairs.tolist()]

    def checksummed_files(self, documents: int | None = None) -> list[Checksummed]:
        """The shard files (``.ds`` and their ``.ds.index``) the plan reads (its first
        `documents` only, when given), with the sha256 and size phase.json records, for
        `apertus.core.files.verify_checksums`: training checks them before its first step
        (apertus.train.launch), as does every other reader of a phase's documents."""
        files = []
        for source, file in self._referenced_files(documents):
            record = self._files[source][file]
            path = self._path(source, file)
            files.append(Checksummed(path, record["sha256"], record["bytes"]))
            if "index_sha256" in record:
                index = path.with_name(path.name + ".index")
                files.append(Checksummed(index, record["index_sha256"], record["documents"] * 8))
        return files

    def __len__(self) -> int:
        return len(self._tokens)

    @property
    def total_tokens(self) -> int:
        return int(self._stream_ends[-1]) if len(self._stream_ends) else 0

    def _path(self, source: int, file: int) -> Path:
        return self._dirs[source] / self._files[source][file]["path"]

    def _maps(self, source: int, file: int) -> tuple[np.memmap, np.memmap]:
        key = (source, file)
        if key not in self._token_maps:
            path = self._path(source, file)
            self._token_maps[key] = np.memmap(path, dtype=self._dtype, mode="r")
            index = path.with_name(path.name + ".index")
            self._end_maps[key] = np.memmap(index, dtype=_INDEX_DTYPE, mode="r")
        return self._token_maps[key], self._end_maps[key]

    def document(self, i: int) -> np.ndarray:
        """Tokens of the i-th planned document: a read-only memmap slice of its shard."""
        i = operator.index(i)
        if not 0 <= i < len(self):
            raise IndexError(f"document {i} out of range for a phase of {len(self)} documents")
        source, file, doc = int(self._source[i]), int(self._file[i]), int(self._document[i])
        tokens, ends = self._maps(source, file)
        start = int(ends[doc - 1]) if doc else 0
        end = int(ends[doc])
        if end - start != int(self._tokens[i]):
            raise ApertusError(
                f"{self._path(source, file)}: document {doc} has {end - start} tokens, the phase "
                f"planned {int(self._tokens[i])} (the shard changed since planning)"
            )
        return tokens[start:end]

    def iter_documents(self, start: int = 0) -> Iterator[np.ndarray]:
        """Planned documents from position `start` on; the caller checkpoints the position."""
        start = operator.index(start)
        if not 0 <= start <= len(self):
            raise ApertusError(f"start {start} out of range for a phase of {len(self)} documents")
        for i in range(start, len(self)):
            yield self.document(i)

    def packed_sequences(
        self, seq_len: int, start: int = 0
    ) -> Iterator[tuple[np.ndarray, np.ndarray, int]]:
        """Windows of ``seq_len + 1`` tokens, their positions, and the stream offset after them.

        `start` and the yielded state are token offsets in the phase's stream (the planned
        documents concatenated); passing a yielded state as `start` continues with exactly the
        windows that would have followed. Windows do not overlap; the tail shorter than a window
        is not yielded. Positions (same length as the window) count from 0 at the window start
        and at each document start inside it. Tokens keep the shards' dtype.
        """
        if not is_integer(seq_len) or seq_len < 1:
            raise ApertusError(f"seq_len must be a positive integer, got {seq_len!r}")
        if not is_integer(start) or not 0 <= start <= self.total_tokens:
            raise ApertusError(
                f"start {start!r} out of range for a phase of {self.total_tokens} tokens"
            )
        window = int(seq_len) + 1
        position = int(start)
        while position + window <= self.total_tokens:
            tokens = np.empty(window, dtype=self._dtype)
            positions = np.empty(window, dtype=np.int64)
            doc = int(np.searchsorted(self._stream_ends, position, side="right"))
            offset = position - (int(self._stream_ends[doc - 1]) if doc else 0)
            filled = 0
            while filled < window:
                piece = self.document(doc)[offset : offset + window - filled]
                tokens[filled : filled + len(piece)] = piece
                positions[filled : filled + len(piece)] = np.arange(len(piece))
                filled += len(piece)
                doc += 1
                offset = 0
            position += window
            yield tokens, positions, position
