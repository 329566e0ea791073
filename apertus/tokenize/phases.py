"""Pretraining data phases: which documents a phase trains on, and in which order (RECIPE.md §5).

Pretraining runs in phases, each with its own source mixture and token budget; the data seed
changes at phases 3, 4 and 5. A phase is an *index* over the token shards that datatrove's
DocumentTokenizer wrote (one directory per source), never a copy of them.
:func:`build_phase_index` plans the phase and writes two files:

- the index, one row per planned document in training order, as two ``.npy`` columns:
  ``index.source.npy`` (uint8, the source's position in phase.json's source list) and
  ``index.document.npy`` (the document's number in its source: its files' documents counted in
  path order, empty ones included; uint32, or uint64 when a source holds 2**32 documents or
  more), 5 bytes per document; and ``index.blocks.npy`` (uint64), the tokens before every
  ``block_rows``-th row (1024) and the total, to find a token offset without a table per
  document. A document's file, place and length come from its shard's ``.ds.index``. Format 2
  (``index.npz``: 13 bytes per document, read whole into memory) is refused with the advice to
  rebuild; both formats give the same rows in the same order.
- ``phase.json``: the spec, what each source holds and contributes (tokens, documents, epochs),
  its shard files with the sha256 from the source's ``checksums.json`` (of each ``.ds`` file and
  its ``.ds.index``; ``planned`` when the plan reads it), and the index files' sha256. Each
  source's shard directory (``dir``) is recorded relative to the phase's own folder
  (``../../shards/web``), so a results folder moved or copied whole still reads. Every index
  file and every shard file (``.ds``, ``.ds.index``) has a block-checksum sidecar
  (``<file>.crc32``, apertus.core.blocks, written with it): a reader checks each block it reads
  against it, so a flipped bit is refused before it is used, at any step, without re-hashing the
  phase on resume; the sha256 stay for audits.
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
only on the seed, its name and its shards, not on which other sources share the phase. The same
spec and shards give byte-identical index files.

Scale. Memory does not grow with the corpus, building or reading. The planner streams each
source's shard indexes into memory-mapped columns in a work folder (``.build``, removed after),
sorts permutations larger than `_CHUNK` out of core (a counting sort into buckets on the raw
values' top bits, then each bucket alone: exactly the stable argsort), and merges the sources
block by block in progress order; a reader maps the index and touches only the pages of the rows
it reads. Disk: about 5 bytes per document for the index, and while building ~46 bytes per
document of the largest source in the work folder.

Packing. :meth:`PhaseDataset.packed_sequences` cuts the concatenated plan into windows of
``seq_len + 1`` tokens (input = ``w[:-1]``, labels = ``w[1:]``) that do not overlap, as
torchtitan's text loader does: the windows concatenated are exactly the token stream, and the
last ``< seq_len + 1`` tokens of the phase are not used. Positions restart at 0 at each document
start and at the window start (reset-position-ids as Megatron computes it: a document cut by a
window boundary continues at position 0, matching the attention mask that resets there too).
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import operator
import os
import shutil
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from numbers import Real
from pathlib import Path
from types import MappingProxyType
from typing import Any

import numpy as np

from apertus.core import ApertusError
from apertus.core.blocks import BlockReader, VerifiedNpy, sidecar_path, write_block_checksums
from apertus.core.files import (
    atomic_write_json,
    recorded_path,
    resolve_recorded,
)
from apertus.core.typed import is_integer

# 3: the index as memory-mapped .npy columns (2: index.npz, read whole; sources' ``dir``
# relative to the phase folder since 2).
PHASE_FORMAT_VERSION = 3
# The weight that takes every document of a source exactly once (module docstring).
ALL = "all"
SOURCE_FILE = "index.source.npy"
DOCUMENT_FILE = "index.document.npy"
BLOCKS_FILE = "index.blocks.npy"
INDEX_FILES = (SOURCE_FILE, DOCUMENT_FILE, BLOCKS_FILE)
LEGACY_INDEX_FILE = "index.npz"  # format 2
BLOCK_ROWS = 1 << 10  # rows between two entries of the block table
PHASE_FILE = "phase.json"
CHECKSUMS_FILE = "checksums.json"

# Token files are little-endian, as datatrove writes them on every platform it runs on.
_TOKEN_DTYPES = {"uint16": np.dtype("<u2"), "uint32": np.dtype("<u4")}
_INDEX_DTYPE = np.dtype("<u8")
_SOURCE_DTYPE = np.dtype("u1")
_DOCUMENT_DTYPES = {False: np.dtype("<u4"), True: np.dtype("<u8")}  # key: 2**32 documents or more
_UINT32_LIMIT = 1 << 32
_MAX_SOURCES = 256  # the source column is uint8
_MAX_LANGUAGES = 1 << 16  # a source's languages are numbered in uint16 while planning
# Rows handled at once while planning and merging (and the largest permutation sorted in memory):
# bounds the planner's memory at a few hundred MB whatever the corpus.
_CHUNK = 1 << 21
_OPEN_FILES = 64  # shard files a PhaseDataset keeps open for reading
_MAP_BYTES = 64 << 20  # the most of a file mapped at once while gathering from it
# The planner's document table of a source, one file per column in its work folder.
_TABLE_COLUMNS = {"doc": "<u8", "length": "<u4", "language": "<u2"}


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
    # name -> {"source": tokenized source, "min_tokens": n}: a source's long documents only.
    select: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)

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
        select: dict[str, MappingProxyType] = {}
        for alias, selection in dict(self.select or {}).items():
            source = selection.get("source") if isinstance(selection, Mapping) else None
            minimum = selection.get("min_tokens") if isinstance(selection, Mapping) else None
            if not isinstance(source, str) or not is_integer(minimum) or minimum < 1:
                raise ApertusError(
                    f"{where}: select.{alias} must be {{source: <name>, min_tokens: <n >= 1>}}, "
                    f"got {selection!r}"
                )
            if source in self.select:
                raise ApertusError(f"{where}: select.{alias} selects from another selection")
            select[alias] = MappingProxyType({"source": source, "min_tokens": int(minimum)})
        object.__setattr__(self, "tokens", int(self.tokens))
        object.__setattr__(self, "seed", int(self.seed))
        object.__setattr__(self, "weights", MappingProxyType(weights))
        object.__setattr__(self, "select", MappingProxyType(select))

    def shard_source(self, name: str) -> str:
        """The tokenized source whose shards `name` (a source or a selection) reads."""
        return self.select[name]["source"] if name in self.select else name


def _gather(path: Path, dtype: str, count: int, index) -> np.ndarray:
    """`index` of the `count` items of `dtype` in file `path`, through maps of at most
    `_MAP_BYTES` that are closed again: at most that much of the file is ever resident in the
    process, however large the file (the pages read stay in the page cache only)."""
    index = np.asarray(index, dtype=np.int64)
    item = np.dtype(dtype).itemsize
    span = max(_MAP_BYTES // item, 1)
    if count == 0 or index.size == 0:
        return np.zeros(index.shape, dtype=dtype)
    if count <= span:
        windows = [(0, count, np.arange(index.size), index.ravel())]
    else:
        order = np.argsort(index, axis=None, kind="stable")
        ordered = index.ravel()[order]
        cuts = np.searchsorted(ordered, np.arange(0, count + span, span))
        windows = [
            (w * span, min(span, count - w * span), order[lo:hi], ordered[lo:hi] - w * span)
            for w, (lo, hi) in enumerate(itertools.pairwise(cuts))
            if hi > lo
        ]
    out = np.empty(index.size, dtype=dtype)
    for first, size, where, offsets in windows:
        mapped = np.memmap(path, dtype=dtype, mode="r", offset=first * item, shape=(size,))
        try:
            out[where] = mapped[offsets]
        finally:
            del mapped
    return out.reshape(index.shape)


def _read_slice(path: Path, dtype: str, start: int, stop: int) -> np.ndarray:
    """Items `start` to `stop` of a file of `dtype`, read (not mapped)."""
    item = np.dtype(dtype).itemsize
    return np.fromfile(path, dtype=dtype, count=max(stop - start, 0), offset=start * item)


@dataclass
class _ShardFile:
    path: Path
    relpath: str
    sha256: str
    size: int
    documents: int
    index_sha256: str | None  # of the .ds.index file, when checksums.json lists it


class _SourceShards:
    """A DocumentTokenizer output directory: its .ds files in path order, checked, and its
    document table written to `work` as memory-mapped columns, one row per non-empty document in
    (file, document) order: ``doc`` (the document's number in the source, counting every file's
    documents in path order, empty ones too), ``length`` (tokens) and ``language`` (position in
    the sorted `languages`).

    Everything is streamed one shard file (or one chunk of a large one) at a time, so memory does
    not grow with the source. Checked against ``checksums.json`` and the files' sizes (never the
    token files' contents, which can be terabytes): a shard missing, unlisted, truncated, or
    whose index does not end at the file's length raises ApertusError naming it.
    """

    def __init__(self, name: str, directory: Path, work: Path, min_tokens: int = 1):
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
        work.mkdir(parents=True, exist_ok=True)
        columns = {k: (work / f"{name}.{k}").open("wb") for k in ("doc", "length", "language")}
        codes: dict[str, int] = {}  # language -> position, in order of first sight
        self.tokens = self.documents = self.rows = self.empty_documents = 0
        self.short_documents = 0  # non-empty, but below `min_tokens`
        self.file_tokens = 0  # every document's, for the check against checksums.json
        try:
            for relpath, path in on_disk:
                shard = self._check_file(relpath, path, listed, itemsize)
                file_codes, languages = self._file_languages(shard, listed)
                mapping = np.array([codes.setdefault(c, len(codes)) for c in file_codes], np.int64)
                if len(codes) > _MAX_LANGUAGES:
                    raise ApertusError(f"{where}: more than {_MAX_LANGUAGES} languages")
                index_path = path.with_name(path.name + ".index")
                previous = np.uint64(0)
                for start in range(0, shard.documents, _CHUNK):
                    chunk = _read_slice(index_path, "<u8", start, start + _CHUNK)
                    if np.any(chunk[1:] < chunk[:-1]) or chunk[0] < previous:
                        raise ApertusError(f"{path}.index: document ends are not non-decreasing")
                    lengths = np.diff(chunk, prepend=previous).astype(np.int64)
                    previous = chunk[-1]
                    keep = np.flatnonzero(lengths >= max(min_tokens, 1))
                    if len(keep) and int(lengths[keep].max()) >= _UINT32_LIMIT:
                        raise ApertusError(
                            f"{where}: a document longer than {_UINT32_LIMIT - 1} tokens"
                        )
                    empty = int(np.count_nonzero(lengths == 0))
                    self.empty_documents += empty
                    self.short_documents += len(lengths) - len(keep) - empty
                    columns["doc"].write((keep + (self.documents + start)).astype("<u8").tobytes())
                    columns["length"].write(lengths[keep].astype("<u4").tobytes())
                    chunk_languages = mapping[languages[start : start + _CHUNK][keep]]
                    columns["language"].write(chunk_languages.astype("<u2").tobytes())
                    self.rows += len(keep)
                    self.tokens += int(lengths[keep].sum())
                    self.file_tokens += int(lengths.sum())
                self.documents += shard.documents
                self.files.append(shard)
        finally:
            for f in columns.values():
                f.close()
        if len(self.files) >= _UINT32_LIMIT:
            raise ApertusError(
                f"{where}: {len(self.files)} shard files, more than uint32 can index"
            )
        for key, value in (("documents", self.documents), ("tokens", self.file_tokens)):
            if key in checksums and checksums[key] != value:
                raise ApertusError(
                    f"{checksums_path}: records {key}={checksums[key]}, the shards hold {value}"
                )
        # Language positions renumbered from order of first sight to sorted order.
        self.languages = sorted(codes)
        self._renumber = np.zeros(max(len(codes), 1), dtype=np.int64)
        for code, seen in codes.items():
            self._renumber[seen] = self.languages.index(code)
        self._work = work
        # Where each file's documents start in the source's numbering, and the total.
        self.file_starts = np.cumsum([0] + [f.documents for f in self.files], dtype=np.int64)

    def column(self, key: str, rows: np.ndarray) -> np.ndarray:
        """Column `key` (``doc``, ``length``, ``language``) of the table rows `rows`."""
        return _gather(self._work / f"{self.name}.{key}", _TABLE_COLUMNS[key], self.rows, rows)

    def _check_file(self, relpath: str, path: Path, listed: Mapping, itemsize: int) -> _ShardFile:
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
            raise ApertusError(f"{path}: {size} bytes is not a whole number of {self.dtype_name}")
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
        for checked in (path, index_path):
            if not sidecar_path(checked).is_file():
                raise ApertusError(
                    f"{checked}: no block checksums ({sidecar_path(checked).name}): the shards "
                    "were written before training checked them per block; re-run tokenize_shards"
                )
        documents = index_size // _INDEX_DTYPE.itemsize
        if documents >= _UINT32_LIMIT:
            raise ApertusError(f"{path}: {documents} documents, more than uint32 can index")
        tokens = size // itemsize
        last = 0
        if documents:
            last = int(np.memmap(index_path, dtype=_INDEX_DTYPE, mode="r")[-1])
        if last != tokens:
            raise ApertusError(
                f"{index_path}: last document ends at token {last}, "
                f"but {path.name} holds {tokens} tokens"
            )
        index_sha = index_entry.get("sha256") if isinstance(index_entry, dict) else None
        return _ShardFile(path, relpath, str(entry["sha256"]), size, documents, index_sha)

    def _file_languages(self, shard: _ShardFile, listed: Mapping) -> tuple[list[str], np.ndarray]:
        """One file's sidecar (small: a few bytes per document), its sha256 checked against
        checksums.json: the codes and each document's position in them."""
        from apertus.tokenize.shards import LANGUAGES_SUFFIX, document_languages

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
        return document_languages(shard.path, shard.documents, data)

    def languages_of(self, rows: np.ndarray) -> np.ndarray:
        """Positions in the sorted `languages` of the table rows `rows`."""
        return self._renumber[self.column("language", rows).astype(np.int64)]


def _permutation(n: int, seed: int, source: str, epoch: int, work: Path) -> Iterator[np.ndarray]:
    """A seeded permutation of range(n), equal on all numpy versions, in pieces: the stable
    argsort of ``n`` raw PCG64 outputs (numpy guarantees that stream across versions), in
    bounded memory.

    Up to `_CHUNK` elements it is sorted at once. Beyond, a counting sort on the top bits of the
    raw values splits them into buckets of about `_CHUNK` (the values are generated twice: to
    count, then to write each with its position into its bucket's region of two files in
    `work`), and each bucket is then read back and sorted alone. Positions enter a bucket in
    increasing order, so a stable sort of each bucket gives exactly the whole stable argsort.
    """

    def generator() -> np.random.PCG64:
        return np.random.PCG64(np.random.SeedSequence([seed, _name_key(source), epoch]))

    if n <= _CHUNK:
        yield np.argsort(generator().random_raw(n), kind="stable")
        return
    bits = max(1, math.ceil(math.log2(n / _CHUNK)))
    shift = np.uint64(64 - bits)
    counts = np.zeros(1 << bits, dtype=np.int64)
    bit_generator = generator()
    for start in range(0, n, _CHUNK):
        raw = bit_generator.random_raw(min(_CHUNK, n - start))
        counts += np.bincount((raw >> shift).astype(np.int64), minlength=1 << bits)
    offsets = np.concatenate([[0], np.cumsum(counts)])
    work.mkdir(parents=True, exist_ok=True)
    paths = {"values": work / "permutation.values", "positions": work / "permutation.positions"}
    filled = offsets[:-1].copy()
    bit_generator = generator()
    with paths["values"].open("wb") as values, paths["positions"].open("wb") as positions:
        for start in range(0, n, _CHUNK):
            raw = bit_generator.random_raw(min(_CHUNK, n - start))
            bucket = (raw >> shift).astype(np.int64)
            order = np.argsort(bucket, kind="stable")
            sizes = np.bincount(bucket, minlength=1 << bits)
            cuts = np.concatenate([[0], np.cumsum(sizes)])
            for b in np.flatnonzero(sizes):  # written, not mapped: nothing stays resident
                take = order[cuts[b] : cuts[b + 1]]
                os.pwrite(values.fileno(), raw[take].astype("<u8").tobytes(), int(filled[b]) * 8)
                os.pwrite(
                    positions.fileno(), (take + start).astype("<i8").tobytes(), int(filled[b]) * 8
                )
                filled[b] += sizes[b]
    try:
        for b in range(1 << bits):
            lo, hi = int(offsets[b]), int(offsets[b + 1])
            if hi > lo:
                bucket_values = _read_slice(paths["values"], "<u8", lo, hi)
                bucket_positions = _read_slice(paths["positions"], "<i8", lo, hi)
                yield bucket_positions[np.argsort(bucket_values, kind="stable")]
    finally:
        for path in paths.values():
            path.unlink(missing_ok=True)


@dataclass
class _SourcePlan:
    """One source's document stream in `work`: table rows in training order (``rows``) and each
    one's midpoint in the stream's tokens (``midpoints``), read a slice at a time."""

    path: Path  # <path>.plan and <path>.midpoints
    count: int
    tokens: int
    epochs: int

    def __len__(self) -> int:
        return self.count

    def _file(self, what: str) -> Path:
        return self.path.with_name(f"{self.path.name}.{what}")

    def read(self, what: str, start: int, stop: int) -> np.ndarray:
        """Items `start` to `stop` of ``rows`` or ``midpoints``."""
        dtype = "<i8" if what == "rows" else "<f8"
        return _read_slice(self._file(what), dtype, start, min(stop, self.count))

    def progress_at(self, position: int) -> float:
        return float(_gather(self._file("midpoints"), "<f8", self.count, position)) / self.tokens


def _plan_source(shards: _SourceShards, seed: int, target: int, work: Path) -> _SourcePlan:
    """Rows of `shards`' document table, in training order, until `target` tokens are reached
    (module docstring: epochs of fresh permutations, the last document taken whole), written
    chunk by chunk to `work`."""
    rows_path, mid_path = (
        work / f"{shards.name}.rows",
        work / f"{shards.name}.midpoints",
    )
    planned = epochs = 0
    with rows_path.open("wb") as rows_file, mid_path.open("wb") as mid_file:
        while planned < target and shards.rows:
            for order in _permutation(shards.rows, seed, shards.name, epochs, work / "sort"):
                lengths = shards.column("length", order).astype(np.int64)
                reached = np.cumsum(lengths) + planned
                if int(reached[-1]) >= target:
                    cut = int(np.searchsorted(reached, target, side="left")) + 1
                    order, lengths, reached = order[:cut], lengths[:cut], reached[:cut]
                rows_file.write(order.astype("<i8").tobytes())
                # As the in-memory planner computed them: cumulative tokens less half a length.
                mid_file.write((reached - lengths / 2).astype("<f8").tobytes())
                planned = int(reached[-1])
                if planned >= target:
                    break
            epochs += 1
    return _SourcePlan(work / shards.name, rows_path.stat().st_size // 8, planned, epochs)


def _progress_position(plan: _SourcePlan, threshold: float) -> int:
    """The first position of `plan` whose progress (midpoint / planned tokens) is at least
    `threshold`, exactly as the division rounds: a binary search reading ~log2(n) values."""
    lo, hi = 0, len(plan)
    while lo < hi:
        mid = (lo + hi) // 2
        if plan.progress_at(mid) < threshold:
            lo = mid + 1
        else:
            hi = mid
    return lo


class _NpyWriter:
    """A ``.npy`` file of `count` items of `dtype` written front to back (the bytes
    ``numpy.save`` writes for the same array), never mapped."""

    def __init__(self, path: Path, dtype: np.dtype, count: int):
        self.file = path.open("wb")
        self.dtype, self.count, self.written = np.dtype(dtype), count, 0
        header = {"descr": np.lib.format.dtype_to_descr(self.dtype), "fortran_order": False}
        np.lib.format.write_array_header_1_0(self.file, {**header, "shape": (count,)})

    def write(self, items: np.ndarray) -> None:
        self.file.write(np.ascontiguousarray(items, dtype=self.dtype).tobytes())
        self.written += len(items)

    def close(self) -> None:
        self.file.close()
        if self.written != self.count:
            raise ApertusError(f"{self.file.name}: {self.written} items of {self.count} (a bug)")


def _merge(
    sources: list[_SourceShards],
    plans: list[_SourcePlan],
    out_dir: Path,
    document_dtype: np.dtype,
) -> dict[str, np.ndarray | int]:
    """The progress-balanced merge of the sources' streams (module docstring), written as the
    index columns, block by block.

    Each block takes from every source the documents whose progress lies in
    ``[k / blocks, (k + 1) / blocks)`` and sorts them by (progress, source): as each stream's
    progress increases, the blocks in order are the whole sorted merge. The block table (tokens
    before every `BLOCK_ROWS`-th row, and the total, last) is written as it goes too. Returns
    the row count and the total tokens.
    """
    total = sum(len(p) for p in plans)
    source_out = _NpyWriter(out_dir / f"{SOURCE_FILE}.tmp", _SOURCE_DTYPE, total)
    doc_out = _NpyWriter(out_dir / f"{DOCUMENT_FILE}.tmp", document_dtype, total)
    marks = _NpyWriter(out_dir / f"{BLOCKS_FILE}.tmp", _INDEX_DTYPE, -(-total // BLOCK_ROWS) + 1)
    blocks = max(1, math.ceil(total / _CHUNK))
    starts = [0] * len(plans)
    written = 0
    carried = 0  # tokens before row `written`
    for k in range(1, blocks + 1):
        parts = []
        for i, plan in enumerate(plans):
            stop = len(plan) if k == blocks else _progress_position(plan, k / blocks)
            if stop > starts[i]:
                progress = plan.read("midpoints", starts[i], stop) / plan.tokens
                parts.append((i, plan.read("rows", starts[i], stop), progress))
            starts[i] = stop
        if not parts:
            continue
        source = np.concatenate([np.full(len(r), i, dtype=np.uint8) for i, r, _ in parts])
        progress = np.concatenate([p for _, _, p in parts])
        order = np.lexsort((source, progress))
        rows = np.concatenate([r for _, r, _ in parts])[order]
        source = source[order]
        docs = np.empty(len(rows), dtype=np.int64)
        lengths = np.empty(len(rows), dtype=np.int64)
        for i, shards in enumerate(sources):
            mine = source == i
            if mine.any():
                docs[mine] = shards.column("doc", rows[mine])
                lengths[mine] = shards.column("length", rows[mine])
        source_out.write(source)
        doc_out.write(docs)
        # Tokens before each row j * BLOCK_ROWS that falls in this piece (row 0 included).
        before = np.concatenate([[carried], np.cumsum(lengths) + carried])
        block_starts = np.arange(
            -(-written // BLOCK_ROWS) * BLOCK_ROWS, written + len(rows), BLOCK_ROWS
        )
        marks.write(before[block_starts - written])
        written += len(rows)
        carried = int(before[-1])
    marks.write(np.array([carried]))
    for writer in (source_out, doc_out, marks):
        writer.close()
    if written != total:
        raise ApertusError(f"merged {written} rows of {total} (a bug)")
    return {"rows": total, "tokens": carried}


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


def _return_large_blocks() -> None:
    """Make glibc give every block of 1 MB or more straight back to the system when freed.

    Its default threshold rises after each large block is freed, so later chunk-sized numpy
    arrays come from the heap, which it keeps: the planner's resident memory then crept up
    with the corpus (327 MB at 64M documents) while what it used stayed flat (about 200 MB);
    with the threshold fixed it stays flat (239 MB). Not glibc: nothing to do."""
    import contextlib
    import ctypes

    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None).mallopt(-3, 1 << 20)  # M_MMAP_THRESHOLD


def build_phase_index(spec: PhaseSpec, shard_dirs: Mapping[str, Path], out_dir: Path) -> dict:
    """Plan the documents of one phase and write its index files and ``phase.json`` to `out_dir`.

    `shard_dirs` maps source names to DocumentTokenizer output directories; sources it names that
    `spec.weights` does not are ignored. Returns the content of phase.json. Raises ApertusError
    naming the source or file for a source without a shard directory, a weighted source with no
    tokens, shards inconsistent with their checksums.json, sources tokenized with different
    vocabularies, and values that do not fit the index's integer columns. Each source's ``dir``
    is recorded relative to `out_dir` (module docstring). Memory stays bounded whatever the
    corpus: tables, permutations and plans go through memory-mapped files in a work folder
    (``out_dir/.build``, removed at the end).
    """
    out_dir = Path(out_dir)
    where = f"phase {spec.name!r}"
    names = sorted(spec.weights)
    missing = [spec.shard_source(s) for s in names if spec.shard_source(s) not in shard_dirs]
    if missing:
        raise ApertusError(
            f"{where}: source {missing[0]!r} has no shard directory (have: {sorted(shard_dirs)})"
        )
    _return_large_blocks()
    out_dir.mkdir(parents=True, exist_ok=True)
    # phase.json is written last and names the index files' sha256: a reader never pairs a new
    # index with an old phase.json, and an interrupted rebuild leaves no phase.json at all.
    (out_dir / PHASE_FILE).unlink(missing_ok=True)
    work = out_dir / ".build"
    shutil.rmtree(work, ignore_errors=True)
    try:
        record = _build(spec, shard_dirs, out_dir, work, names, where)
    finally:
        shutil.rmtree(work, ignore_errors=True)
        for name in INDEX_FILES:
            (out_dir / f"{name}.tmp").unlink(missing_ok=True)
    atomic_write_json(out_dir / PHASE_FILE, record)
    return record


def _build(
    spec: PhaseSpec, shard_dirs: Mapping[str, Path], out_dir: Path, work: Path, names, where
) -> dict:
    sources = [
        _SourceShards(
            s,
            Path(shard_dirs[spec.shard_source(s)]),
            work,
            min_tokens=spec.select[s]["min_tokens"] if s in spec.select else 1,
        )
        for s in names
    ]
    vocab = {(s.dtype_name, s.vocab_size) for s in sources}
    if len(vocab) > 1:
        described = ", ".join(f"{s.name}: {s.dtype_name}/{s.vocab_size}" for s in sources)
        raise ApertusError(
            f"{where}: sources were tokenized with different vocabularies: {described}"
        )
    dtype_name, vocab_size = vocab.pop()

    available = {s.name: s.tokens for s in sources}
    for s in sources:
        if spec.weights[s.name] != 0 and s.tokens == 0:
            raise ApertusError(
                f"{where}: source {s.name!r} has weight {spec.weights[s.name]} but no tokens in "
                f"{s.directory} ({len(s.files)} shard files)"
            )
    targets, shares = _targets(spec, available, names)

    # Each source's own document stream, then the progress-balanced merge (module docstring).
    plans = [_plan_source(s, spec.seed, targets[s.name], work) for s in sources]
    wide = any(s.documents >= _UINT32_LIMIT for s in sources)
    merged = _merge(sources, plans, out_dir, _DOCUMENT_DTYPES[wide])
    index_files = {}
    for name in INDEX_FILES:
        final = out_dir / name
        os.replace(out_dir / f"{name}.tmp", final)
        index_files[name] = {"sha256": write_block_checksums(final), "bytes": final.stat().st_size}
    (out_dir / LEGACY_INDEX_FILE).unlink(missing_ok=True)

    source_records = []
    for shard, plan in zip(sources, plans, strict=True):
        languages, referenced = _planned_by_language(shard, plan)
        source_records.append(
            {
                "name": shard.name,
                "dir": recorded_path(shard_dirs[spec.shard_source(shard.name)], out_dir),
                **({"select": dict(spec.select[shard.name])} if shard.name in spec.select else {}),
                "weight": spec.weights[shard.name],
                "share": float(shares[shard.name]),
                "tokens_available": shard.tokens,
                "documents_available": shard.rows,
                "empty_documents_skipped": shard.empty_documents,
                "short_documents_skipped": shard.short_documents,
                "tokens_target": targets[shard.name],
                "tokens_planned": plan.tokens,
                "documents_planned": len(plan),
                "languages": languages,
                "epochs": plan.epochs,
                "files": [
                    {
                        "path": f.relpath,
                        "sha256": f.sha256,
                        "bytes": f.size,
                        "documents": f.documents,
                        "planned": bool(referenced[i]),
                        **({"index_sha256": f.index_sha256} if f.index_sha256 else {}),
                    }
                    for i, f in enumerate(shard.files)
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
        "tokens_planned": merged["tokens"],
        "documents_planned": int(merged["rows"]),
        "languages": {language: languages[language] for language in sorted(languages)},
        "dtype": dtype_name,
        "vocab_size": vocab_size,
        "sources": source_records,
        "index": {"block_rows": BLOCK_ROWS, "files": index_files},
    }
    _check_language_sums(record["languages"], record, where)
    if record["tokens_planned"] != sum(p.tokens for p in plans):
        raise ApertusError(f"{where}: the merge lost tokens (a bug)")
    return record


def _planned_by_language(
    shards: _SourceShards, plan: _SourcePlan
) -> tuple[dict[str, dict[str, int]], np.ndarray]:
    """Planned documents and tokens of each language a source holds (0 where none is planned;
    a document planned in two epochs counts twice, as in the source's totals), and which of its
    files the plan reads; in chunks of the plan."""
    documents = np.zeros(len(shards.languages), dtype=np.int64)
    tokens = np.zeros(len(shards.languages), dtype=np.int64)
    referenced = np.zeros(len(shards.files), dtype=bool)
    for start in range(0, len(plan), _CHUNK):
        rows = plan.read("rows", start, start + _CHUNK)
        languages = shards.languages_of(rows)
        documents += np.bincount(languages, minlength=len(documents))
        np.add.at(tokens, languages, shards.column("length", rows).astype(np.int64))
        files = np.searchsorted(shards.file_starts, shards.column("doc", rows), side="right")
        referenced[np.unique(files - 1)] = True
    return (
        {
            language: {"documents_planned": int(documents[i]), "tokens_planned": int(tokens[i])}
            for i, language in enumerate(shards.languages)
        },
        referenced,
    )


def _check_language_sums(languages: Mapping[str, Mapping[str, int]], totals: dict, where: str):
    for key in ("documents_planned", "tokens_planned"):
        counted = sum(counts[key] for counts in languages.values())
        if counted != totals[key]:
            raise ApertusError(
                f"{where}: {key} per language sum to {counted}, not {totals[key]} (a bug)"
            )


class PhaseDataset:
    """The documents of a built phase, in plan order, read through memory maps of the index and
    the shards: opening it reads phase.json and maps files, nothing proportional to the phase.

    Opening checks what is cheap: the format, every index file's and every planned ``.ds`` /
    ``.ds.index`` file's size against phase.json, and that each has its block checksums. Every
    read is then checked block by block against them (`apertus.core.blocks.BlockReader`; the
    index through `VerifiedNpy`), so what a reader gets is what was written, whoever reads it
    (training, the memorization count, the SFT replay). Reading a document checks that its row
    names a document its file holds. Each
    mismatch raises ApertusError naming the file. `shard_dirs` replaces the recorded directory
    of the sources it names (shards moved since planning); other sources use phase.json's
    ``dir``.
    """

    def __init__(self, phase_dir: Path, shard_dirs: Mapping[str, Path] | None = None):
        self.phase_dir = Path(phase_dir)
        self.meta = read_phase_record(self.phase_dir)
        version = self.meta.get("format_version", 1)
        if version < PHASE_FORMAT_VERSION:
            raise ApertusError(
                f"{self.phase_dir / PHASE_FILE}: a phase of format {version} ({LEGACY_INDEX_FILE}, "
                f"read whole into memory); this code reads format {PHASE_FORMAT_VERSION}: "
                "rebuild the phase (snakemake re-runs tokenize_phase)"
            )
        try:
            self._dtype = _TOKEN_DTYPES[self.meta["dtype"]]
            index = self.meta["index"]
            self._index_files: dict[str, dict] = dict(index["files"])
            block_rows = int(index["block_rows"])
            sources = self.meta["sources"]
            self._files: list[list[dict]] = [src["files"] for src in sources]
            source_dirs = [resolve_recorded(src["dir"], self.phase_dir) for src in sources]
            names = [src["name"] for src in sources]
            tokens_planned = int(self.meta["tokens_planned"])
            documents_planned = int(self.meta["documents_planned"])
        except (KeyError, TypeError, ValueError) as e:
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
        self._block_rows = block_rows
        arrays = {}
        for name in INDEX_FILES:
            path = self.phase_dir / name
            recorded = self._index_files.get(name)
            if recorded is None:
                raise ApertusError(f"{self.phase_dir / PHASE_FILE}: no record of {name}")
            if not path.is_file():
                raise ApertusError(f"{path}: phase index file missing")
            if path.stat().st_size != recorded["bytes"]:
                raise ApertusError(
                    f"{path}: {path.stat().st_size} bytes, phase.json records "
                    f"{recorded['bytes']} (modified, or from another build)"
                )
            # Every read checked against its block checksums, written for the recorded bytes.
            arrays[name] = VerifiedNpy(path, recorded["sha256"])
        self._source = arrays[SOURCE_FILE]
        self._document = arrays[DOCUMENT_FILE]
        self._blocks = arrays[BLOCKS_FILE]
        rows = len(self._source)
        if (
            self._source.dtype != _SOURCE_DTYPE
            or self._document.dtype not in _DOCUMENT_DTYPES.values()
            or len(self._document) != rows
            or rows != documents_planned
            or len(self._blocks) != -(-rows // block_rows) + 1
            or int(self._blocks[-1]) != tokens_planned
        ):
            raise ApertusError(
                f"{self.phase_dir}: index files disagree with phase.json (rows, dtypes, tokens)"
            )
        # Where each file's documents start in its source's numbering.
        self._file_starts = [
            np.cumsum([0] + [f["documents"] for f in files], dtype=np.int64)
            for files in self._files
        ]
        for source, files in enumerate(self._files):
            for file, record in enumerate(files):
                if record.get("planned", True):
                    self._check_size(source, file)
        # Open shard files, least recent first.
        self._readers: dict[tuple[int, int, bool], BlockReader] = {}

    @property
    def index_sha256(self) -> str:
        """One digest for the whole index: the sha256 of its files' names and sha256 as
        phase.json records them (what a checkpoint's loader state names)."""
        listing = "".join(f"{n} {r['sha256']}\n" for n, r in sorted(self._index_files.items()))
        return hashlib.sha256(listing.encode()).hexdigest()

    def _check_size(self, source: int, file: int) -> None:
        record = self._files[source][file]
        path = self._path(source, file)
        index = path.with_name(path.name + ".index")
        for p, size in ((path, record["bytes"]), (index, record["documents"] * 8)):
            if not p.is_file():
                raise ApertusError(f"{p}: shard file of source {self.sources[source]!r} missing")
            if p.stat().st_size != size:
                raise ApertusError(
                    f"{p}: {p.stat().st_size} bytes, the phase was planned with {size} "
                    "(truncated or rewritten since planning)"
                )
            if not sidecar_path(p).is_file():
                raise ApertusError(
                    f"{p}: no block checksums ({sidecar_path(p).name}); re-run tokenize_shards"
                )

    def _locate(self, sources: np.ndarray, documents: np.ndarray) -> np.ndarray:
        """The file of each (source, document number in the source)."""
        files = np.empty(len(sources), dtype=np.int64)
        for source in np.unique(sources):
            mine = sources == source
            starts = self._file_starts[int(source)]
            files[mine] = np.searchsorted(starts, documents[mine], side="right") - 1
        return files

    def __len__(self) -> int:
        return len(self._source)

    @property
    def total_tokens(self) -> int:
        return int(self._blocks[-1])

    def _path(self, source: int, file: int) -> Path:
        return self._dirs[source] / self._files[source][file]["path"]

    def _reader(self, source: int, file: int, index: bool) -> BlockReader:
        """The open reader of a shard's token file (or, `index`, its .ds.index); at most
        `_OPEN_FILES` stay open."""
        key = (source, file, index)
        reader = self._readers.pop(key, None)  # re-inserted last: least-recent order
        if reader is None:
            path, record = self._path(source, file), self._files[source][file]
            reader = (
                BlockReader(path.with_name(path.name + ".index"), record.get("index_sha256"))
                if index
                else BlockReader(path, record["sha256"])
            )
            if len(self._readers) >= _OPEN_FILES:
                self._readers.pop(next(iter(self._readers))).close()
        self._readers[key] = reader
        return reader

    def _read(self, source: int, file: int, index: bool, first: int, count: int) -> np.ndarray:
        """`count` items from item `first` of a shard's token file (or, `index`, its .ds.index),
        read with pread and checked block by block (`apertus.core.blocks`): nothing of the
        shard stays mapped in the process, and no byte is returned unverified."""
        dtype = _INDEX_DTYPE if index else self._dtype
        return self._reader(source, file, index).items(dtype, first, count)

    def __del__(self) -> None:
        for reader in getattr(self, "_readers", {}).values():
            reader.close()

    def _span(self, i: int) -> tuple[int, int, int, int]:
        """(source, file, first token, end token) of the i-th planned document in its file."""
        source, number = int(self._source[i]), int(self._document[i])
        files = self._files[source] if source < len(self._files) else None
        starts = self._file_starts[source] if files is not None else None
        if files is None or not 0 <= number < int(starts[-1]):
            raise ApertusError(
                f"{self.phase_dir}: row {i} names document {number} of source {source}, "
                "which the phase's sources do not hold (a corrupted index)"
            )
        file = int(np.searchsorted(starts, number, side="right")) - 1
        doc = number - int(starts[file])
        ends = self._read(source, file, True, max(doc - 1, 0), 2 if doc else 1)
        start, end = (int(ends[0]), int(ends[1])) if doc else (0, int(ends[0]))
        if end <= start:
            raise ApertusError(
                f"{self._path(source, file)}: document {doc} is empty, but the phase planned it "
                "(the shard changed since planning)"
            )
        return source, file, start, end

    def document(self, i: int) -> np.ndarray:
        """Tokens of the i-th planned document, read from its shard (read-only array)."""
        i = operator.index(i)
        if not 0 <= i < len(self):
            raise IndexError(f"document {i} out of range for a phase of {len(self)} documents")
        source, file, start, end = self._span(i)
        return self._read(source, file, False, start, end - start)

    def rows(self, start: int = 0, stop: int | None = None) -> dict[str, np.ndarray]:
        """The plan's rows `start` to `stop` (a slice; bound it, the plan can be billions of rows)
        as arrays: ``source`` (position in `sources`), ``file`` (position in the source's
        files), ``document`` (in the file) and ``tokens`` (its length, from the shard's index)."""
        sources = np.asarray(self._source[start:stop], dtype=np.int64)
        numbers = np.asarray(self._document[start:stop], dtype=np.int64)
        files = self._locate(sources, numbers)
        documents = np.empty(len(sources), dtype=np.int64)
        tokens = np.empty(len(sources), dtype=np.int64)
        for source, file in set(zip(sources.tolist(), files.tolist(), strict=True)):
            mine = (sources == source) & (files == file)
            doc = numbers[mine] - int(self._file_starts[source][file])
            ends = self._reader(source, file, True).take(
                _INDEX_DTYPE, np.stack([np.maximum(doc - 1, 0), doc])
            )
            documents[mine] = doc
            tokens[mine] = ends[1].astype(np.int64) - np.where(doc > 0, ends[0], 0).astype(np.int64)
        return {"source": sources, "file": files, "document": documents, "tokens": tokens}

    def iter_documents(self, start: int = 0) -> Iterator[np.ndarray]:
        """Planned documents from position `start` on; the caller checkpoints the position."""
        start = operator.index(start)
        if not 0 <= start <= len(self):
            raise ApertusError(f"start {start} out of range for a phase of {len(self)} documents")
        for i in range(start, len(self)):
            yield self.document(i)

    def _seek(self, position: int) -> tuple[int, int]:
        """(document, offset in it) of token `position` of the stream: from the block table
        to the block, then through the block's document lengths."""
        block = int(np.searchsorted(self._blocks[:-1], position, side="right")) - 1
        row = block * self._block_rows
        before = int(self._blocks[block])
        lengths = self.rows(row, min(row + self._block_rows, len(self)))["tokens"]
        ends = np.cumsum(lengths) + before
        inside = int(np.searchsorted(ends, position, side="right"))
        return row + inside, position - (int(ends[inside - 1]) if inside else before)

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
        if position + window > self.total_tokens:
            return
        doc, offset = self._seek(position)
        current = self.document(doc)
        while position + window <= self.total_tokens:
            tokens = np.empty(window, dtype=self._dtype)
            positions = np.empty(window, dtype=np.int64)
            filled = 0
            while filled < window:
                if offset == len(current):
                    doc, offset = doc + 1, 0
                    current = self.document(doc)
                piece = current[offset : offset + window - filled]
                tokens[filled : filled + len(piece)] = piece
                positions[filled : filled + len(piece)] = np.arange(len(piece))
                filled += len(piece)
                offset += len(piece)
            position += window
            yield tokens, positions, position
