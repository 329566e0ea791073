"""Token shards of the tokenization stage: the held-out split, datatrove token files, checksums.

The corpus of the data stage (``corpus/<source>/<language>/*.parquet`` or ``*.jsonl.gz``, columns
id, text, source, kind, url, language, language_score, quality_score, toxicity_score) becomes, per
source, one shard set written by datatrove's `DocumentTokenizer`
(datatrove/pipeline/tokens/tokenizer.py):

  <source>_<task>_<part>_doc_shuffled.ds           token ids, little-endian uint16 when the
                                                   vocabulary has <= 65536 entries, else uint32
  <source>_<task>_<part>_doc_shuffled.ds.index     uint64 cumulative document ends, in tokens
  <source>_<task>_<part>_doc_shuffled.ds.metadata  datatrove's note "<tokenizer>|<bytes per token>",
                                                   then the token count
  <source>_<task>_<part>_doc_shuffled.ds.languages.json
                                                   the language of each document of the .ds,
                                                   in its order: {"codes": [distinct codes,
                                                   sorted], "documents": [position in codes]}
  checksums.json                                   sha256 and size of every file above, dtype,
                                                   vocab size, documents, tokens, tokenizer sha256

Every document is stored as ``<s> ... </s>``, exactly the ids that
`apertus.tokenize.tokenizer.encode_documents` gives with
``transformers.AutoTokenizer.from_pretrained(tokenizer_dir)``, whatever the tokenizer's own
post-processor adds (Hub tokenizers for causal LMs add ``<s>`` only; some add both, some
nothing). datatrove's `eos_token` option would replace the post-processor by ``$A <EOS>`` and drop
the BOS, so the tokenizer datatrove loads gets `document_framing`'s ``<s> $A </s>`` instead, built
from the Hugging Face tokenizer's BOS and EOS (in memory; tokenizer.json is not changed), and
`write_token_shards` checks the two agree on every probe document before it starts.

Held-out documents (for perplexity evaluation) are chosen per language by `heldout_ids`, written
as JSONL by `write_heldout`, and left out of the shards by the reader, before tokenization, so no
token of them is trained on. `verify_shards` re-hashes a shard set before training starts;
`TokenShards` memory-maps a verified set for the phases index and the training loader.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import logging
import math
import re
from collections import defaultdict
from collections.abc import Iterable, Iterator, Sequence
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np
from datatrove.data import Document, DocumentsPipeline
from datatrove.pipeline.base import PipelineStep
from datatrove.pipeline.tokens import DocumentTokenizer
from datatrove.pipeline.tokens.tokenizer import get_output_filename
from tokenizers import processors

from apertus.core import ApertusError
from apertus.core.blocks import BLOCK_BYTES, SIDECAR_SUFFIX, write_block_checksums
from apertus.core.files import atomic_write_json, atomic_write_text, sha256_file
from apertus.core.progress import Progress, count_records

log = logging.getLogger(__name__)

CHECKSUMS_FILE = "checksums.json"
CORPUS_SUFFIXES = (".parquet", ".jsonl.gz")
# Suffixes of datatrove's token files; an unlisted file with one of them in a shard directory is
# an error, never silently ignored (a loader that globs *.ds would train on it).
SHARD_SUFFIXES = (".ds", ".ds.index", ".ds.metadata", ".ds.loss")
# The files the training loader reads, each with a block-checksum sidecar (apertus.core.blocks).
BLOCK_CHECKED_SUFFIXES = (".ds", ".ds.index")
# The sidecar naming the language of each document of a .ds file (`document_languages`).
LANGUAGES_SUFFIX = ".languages.json"
# Largest vocabulary whose ids fit in uint16 (ids 0..65535); datatrove's own rule
# (`PipelineStepWithTokenizer.token_size`).
UINT16_VOCAB_LIMIT = np.iinfo(np.uint16).max + 1
_INDEX_DTYPE = np.dtype("<u8")
_SAFE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
# Strings added to the tokenizer-agreement probe besides real documents: leading whitespace,
# non-ASCII, emoji, tabs and newlines are where the two tokenizer front ends could diverge.
_PROBE_TEXTS = (
    "Hello world.",
    "  leading spaces and trailing space ",
    "Zürich \u2013 naïve café, Ελληνικά, русский 🙂\n\nline two\tafter a tab",
)
_PROBE_DOCUMENTS = 32


# ---------------------------------------------------------------------------------------------
# Held-out split


def _heldout_rank(seed: int, doc_id: str) -> str:
    return hashlib.sha256(f"{seed}:{doc_id}".encode()).hexdigest()


def _heldout_count(n: int, *, fraction: float, min_documents: int, max_documents: int) -> int:
    """round(fraction * n) clamped to [min_documents, max_documents], keeping >= 1 for training."""
    count = min(max(round(fraction * n), min_documents), max_documents)
    return max(0, min(count, n - 1))


def heldout_ids(
    docs: Iterable[tuple[str, str]],
    *,
    fraction: float,
    min_documents: int,
    max_documents: int,
    seed: int,
) -> set[str]:
    """The ids of the held-out documents: a deterministic subset of each language.

    `docs` are ``(doc_id, language)`` pairs (repeats count once). Within a language, ids are
    ranked by ``sha256(f"{seed}:{doc_id}")`` and the first ``round(fraction * n)`` are taken
    (Python's round: halves go to the even number), clamped to ``[min_documents,
    max_documents]`` and never all documents of the language: at least one stays for training,
    so a language with a single document has none held out. The choice depends only on the set
    of pairs and the seed, not on their order, and a document's membership does not move when
    other documents are added unless the count changes.

    The shard writer excludes these ids, so held-out text is never trained on. Ids are the
    corpus ``id`` field; if two sources share an id, the id is held out from both.
    """
    if isinstance(fraction, bool) or not isinstance(fraction, int | float):
        raise ApertusError(f"held-out fraction must be a number, got {fraction!r}")
    if not (math.isfinite(fraction) and 0 <= fraction < 1):
        raise ApertusError(f"held-out fraction must be in [0, 1), got {fraction!r}")
    for name, value in (("min_documents", min_documents), ("max_documents", max_documents)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ApertusError(f"held-out {name} must be a non-negative integer, got {value!r}")
    if min_documents > max_documents:
        raise ApertusError(
            f"held-out min_documents ({min_documents}) exceeds max_documents ({max_documents})"
        )
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise ApertusError(f"held-out seed must be an integer, got {seed!r}")

    by_language: dict[str, set[str]] = defaultdict(set)
    for doc_id, language in docs:
        if not isinstance(doc_id, str) or not doc_id:
            raise ApertusError(f"document id must be a non-empty string, got {doc_id!r}")
        by_language[language].add(doc_id)

    chosen: set[str] = set()
    for ids in by_language.values():
        count = _heldout_count(
            len(ids), fraction=fraction, min_documents=min_documents, max_documents=max_documents
        )
        if count:
            # The id breaks (astronomically unlikely) hash ties, so the order never matters.
            chosen.update(sorted(ids, key=lambda i: (_heldout_rank(seed, i), i))[:count])
    return chosen


# ---------------------------------------------------------------------------------------------
# Reading the corpus


def _corpus_files(corpus_dir: Path, source: str | None = None) -> list[tuple[Path, str, str]]:
    """(path, source, language) of every corpus file, sorted by (source, language, file name).

    A Parquet or JSONL.gz file anywhere but ``<source>/<language>/`` is an error: it would
    otherwise be read by no one, silently.
    """
    corpus_dir = Path(corpus_dir)
    if not corpus_dir.is_dir():
        raise ApertusError(f"corpus directory {corpus_dir} does not exist")
    root = corpus_dir
    if source is not None:
        if not _SAFE_NAME.match(source):
            raise ApertusError(f"source name {source!r} is not a plain directory name")
        root = corpus_dir / source
        if not root.is_dir():
            raise ApertusError(f"no corpus directory for source {source!r}: {root} is missing")
    found: list[tuple[tuple[str, ...], Path]] = []
    for path in root.rglob("*"):
        if not path.is_file() or not path.name.endswith(CORPUS_SUFFIXES):
            continue
        parts = path.relative_to(corpus_dir).parts
        if len(parts) != 3:
            raise ApertusError(
                f"corpus file {path} is not at corpus/<source>/<language>/<file>; "
                "it would not be read"
            )
        found.append((parts, path))
    if source is not None and not found:
        raise ApertusError(
            f"no corpus files (*.parquet, *.jsonl.gz) for source {source!r} in {root}"
        )
    return [(path, parts[0], parts[1]) for parts, path in sorted(found)]


def _rows_of_file(path: Path, source: str, language: str) -> Iterator[dict]:
    """Rows of one corpus file, in file order, with `source` / `language` filled from the path
    where the row lacks them. A row without a string `id` and `text` is an error naming the file.
    """

    def checked(row: Any, where: str) -> dict:
        if not isinstance(row, dict):
            raise ApertusError(f"{where}: a corpus row must be an object, got {type(row).__name__}")
        doc_id, text = row.get("id"), row.get("text")
        if not isinstance(doc_id, str) or not doc_id:
            raise ApertusError(f"{where}: corpus row has no string 'id' (got {doc_id!r})")
        if not isinstance(text, str):
            raise ApertusError(f"{where}: corpus row {doc_id!r} has no string 'text'")
        if row.get("source") is None:
            row["source"] = source
        if row.get("language") is None:
            row["language"] = language
        return row

    if path.name.endswith(".parquet"):
        import pyarrow.parquet as pq

        try:
            parquet = pq.ParquetFile(path)
            number = 0
            for batch in parquet.iter_batches(batch_size=1024):
                for row in batch.to_pylist():
                    number += 1
                    yield checked(row, f"{path} row {number}")
        except ApertusError:
            raise
        except Exception as e:  # pyarrow raises several types for damaged files
            raise ApertusError(f"cannot read Parquet corpus file {path}: {e}") from e
        return

    try:
        with gzip.open(path, "rt", encoding="utf-8") as f:
            for number, line in enumerate(f, start=1):
                if not line.strip():
                    continue
                try:
                    row = json.loads(line)
                except json.JSONDecodeError as e:
                    raise ApertusError(f"{path} line {number}: not valid JSON ({e.msg})") from e
                yield checked(row, f"{path} line {number}")
    except (OSError, EOFError, UnicodeDecodeError) as e:
        raise ApertusError(f"cannot read JSONL.gz corpus file {path}: {e}") from e


def read_corpus(corpus_dir: Path, source: str | None = None) -> Iterator[dict]:
    """Rows of ``corpus_dir/<source>/<language>/*.parquet|*.jsonl.gz``, all sources or one.

    Files come sorted by (source, language, file name) and rows in file order, so the same
    corpus always reads in the same order whichever format the data stage wrote.
    """
    for path, src, language in _corpus_files(corpus_dir, source):
        yield from _rows_of_file(path, src, language)


# ---------------------------------------------------------------------------------------------
# Tokenizer


def token_dtype(vocab_size: int) -> np.dtype:
    """The on-disk token type: uint16 when every id fits (vocab <= 65536), else uint32.

    This is datatrove's rule (`PipelineStepWithTokenizer.token_size`); `write_token_shards`
    checks that the DocumentTokenizer it runs decided the same.
    """
    if isinstance(vocab_size, bool) or not isinstance(vocab_size, int) or vocab_size <= 0:
        raise ApertusError(f"vocabulary size must be a positive integer, got {vocab_size!r}")
    if vocab_size > np.iinfo(np.uint32).max + 1:
        raise ApertusError(f"vocabulary of {vocab_size} entries does not fit in uint32 token ids")
    return np.dtype("<u2") if vocab_size <= UINT16_VOCAB_LIMIT else np.dtype("<u4")


def _tokenizer_file(tokenizer_dir: Path) -> Path:
    path = Path(tokenizer_dir) / "tokenizer.json"
    if not path.is_file():
        raise ApertusError(f"no tokenizer.json in {tokenizer_dir}")
    return path


# ---------------------------------------------------------------------------------------------
# The language of each shard document


def languages_path(ds: Path) -> Path:
    """The sidecar of token file `ds` naming the language of each of its documents."""
    ds = Path(ds)
    return ds.with_name(ds.name + LANGUAGES_SUFFIX)


def write_document_languages(ds: Path, languages: Sequence[str]) -> None:
    """Write the sidecar of token file `ds`: the language of each of its documents, in order."""
    codes = sorted(set(languages))
    position = {code: i for i, code in enumerate(codes)}
    sidecar = {"codes": codes, "documents": [position[language] for language in languages]}
    atomic_write_text(
        languages_path(ds),
        json.dumps(sidecar, separators=(",", ":"), ensure_ascii=False) + "\n",
    )


def document_languages(
    ds: Path, documents: int, data: bytes | None = None
) -> tuple[list[str], np.ndarray]:
    """The language of each document of token file `ds`, in file order, from its sidecar:
    (distinct codes, each document's position in them).

    `documents` is the count its .ds.index holds; `data` the sidecar's bytes where the caller
    has read them already (to check their sha256). A sidecar that is missing, malformed or
    names another number of documents raises ApertusError naming it.
    """
    path = languages_path(ds)
    if data is None:
        if not path.is_file():
            raise ApertusError(f"{path}: missing; the languages of {Path(ds).name} are unknown")
        data = path.read_bytes()
    try:
        sidecar = json.loads(data)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ApertusError(f"{path}: malformed, not valid JSON ({e})") from e
    codes = sidecar.get("codes") if isinstance(sidecar, dict) else None
    positions = sidecar.get("documents") if isinstance(sidecar, dict) else None
    if not (
        isinstance(codes, list)
        and all(isinstance(code, str) and code for code in codes)
        and len(set(codes)) == len(codes)
    ):
        raise ApertusError(f"{path}: malformed, 'codes' is not a list of distinct language codes")
    if not (isinstance(positions, list) and all(type(p) is int for p in positions)):
        raise ApertusError(f"{path}: malformed, 'documents' is not a list of integers")
    array = np.array(positions, dtype=np.int64)
    if len(array) and (int(array.min()) < 0 or int(array.max()) >= len(codes)):
        raise ApertusError(f"{path}: malformed, a document's language is not one of 'codes'")
    if len(array) != documents:
        raise ApertusError(
            f"{path}: names the language of {len(array)} documents, but {Path(ds).name} "
            f"holds {documents}"
        )
    return codes, array


class _PermutationRecorder:
    """Stands in for DocumentTokenizer's shuffle generator (`rand`) during one task: passes
    `permutation` through to it unchanged, so the shards are the same, and keeps each result,
    the order in which the shuffled files hold the task's documents."""

    def __init__(self, rand: np.random.Generator):
        self.rand = rand
        self.drawn: list[np.ndarray] = []

    def permutation(self, x):
        result = self.rand.permutation(x)
        self.drawn.append(np.asarray(result))
        return result

    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        raise ApertusError(
            f"datatrove's DocumentTokenizer drew rand.{name}(); only permutation() is followed, "
            "so the languages of the shuffled documents would be unknown"
        )


class PlainTextDocumentTokenizer(DocumentTokenizer):
    """datatrove's DocumentTokenizer, framing each document with `framing` (a post-processor,
    `apertus.tokenize.tokenizer.document_framing`) in place of the tokenizer's own, and
    encoding text that looks like a special token (a page quoting ``</s>`` or
    ``<|user_start|>``) as plain text, like `encode_documents` does, so no document can end early
    or fake a chat turn. Neither is saved in tokenizer.json: both are set on the tokenizer
    datatrove loads (its `post_processor` option, which DocumentTokenizer does not pass on).

    It also writes, next to each shuffled part file, the language of each of its documents
    (`document_languages`): the languages in the order datatrove tokenizes the documents, put
    in the order of the permutation datatrove draws to shuffle them, then cut at the part
    files' document counts. The token files are datatrove's, untouched."""

    def __init__(self, *args: Any, framing: processors.TemplateProcessing, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.post_processor = framing

    @cached_property
    def tokenizer(self):
        tokenizer = DocumentTokenizer.tokenizer.func(self)
        tokenizer.encode_special_tokens = True
        return tokenizer

    def __getstate__(self):
        # A pickled tokenizers.Tokenizer comes back without the flag: reload it in the worker.
        state = dict(super().__getstate__() if hasattr(super(), "__getstate__") else self.__dict__)
        state.pop("tokenizer", None)
        return state

    def run(self, data: DocumentsPipeline, rank: int = 0, world_size: int = 1) -> None:
        if (
            not self.shuffle_documents
            or self.shuffle_chunk_size is not None
            or self.local_working_dir is not None
        ):
            raise ApertusError(
                "the language sidecars follow datatrove's document shuffle written straight to "
                "the shard folder only (no chunk shuffle, no local_working_dir)"
            )
        languages: list[str] = []

        def noting_languages(documents: DocumentsPipeline) -> DocumentsPipeline:
            for document in documents:
                language = document.metadata.get("language")
                if not isinstance(language, str) or not language:
                    raise ApertusError(f"document {document.id!r} has no language")
                languages.append(language)
                yield document

        rand = self.rand
        self.rand = recorder = _PermutationRecorder(rand)
        try:
            super().run(noting_languages(data), rank, world_size)
        finally:
            self.rand = rand
        if languages:  # a task without documents writes no shuffled file
            self._write_languages(languages, recorder.drawn, rank)

    def _write_languages(self, languages: list[str], drawn: list[np.ndarray], rank: int) -> None:
        if len(drawn) != 1 or len(drawn[0]) != len(languages):
            raise ApertusError(
                f"task {rank}: datatrove drew {len(drawn)} permutation(s) of "
                f"{[len(p) for p in drawn]} for {len(languages)} documents, not one of all of "
                "them; the order of the shuffled documents is unknown"
            )
        shuffled = [languages[i] for i in drawn[0]]
        if not self.output_folder.is_local():
            raise ApertusError(f"shard folder {self.output_folder.path} is not local")
        folder = Path(self.output_folder.path)
        start = part = 0
        # datatrove numbers the part files of a task from 0 and fills them in shuffled order.
        while True:
            ds = folder / get_output_filename(self.save_filename, rank, "doc_shuffled", part)
            if not ds.exists():
                break
            count = len(_read_index(ds.with_name(ds.name + ".index")))
            if start + count > len(shuffled):
                raise ApertusError(
                    f"{ds}: holds documents {start} to {start + count - 1} of task {rank}, "
                    f"which tokenized {len(shuffled)}; their languages cannot be aligned"
                )
            if count:  # an empty trailing part is removed by _remove_empty_shards
                write_document_languages(ds, shuffled[start : start + count])
            start, part = start + count, part + 1
        if start != len(shuffled):
            raise ApertusError(
                f"{folder}: the shuffled files of task {rank} hold {start} documents, but "
                f"{len(shuffled)} were tokenized; their languages cannot be aligned"
            )


def _hf_tokenizer(tokenizer_dir: Path):
    """The Hugging Face tokenizer of `tokenizer_dir`, as `transformers` loads it."""
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(str(tokenizer_dir))
    except Exception as e:
        raise ApertusError(f"transformers cannot load the tokenizer in {tokenizer_dir}: {e}") from e


def _document_tokenizer(
    out_dir: Path, tokenizer_file: Path, hf_tokenizer, **options: Any
) -> PlainTextDocumentTokenizer:
    from apertus.tokenize.tokenizer import document_framing

    return PlainTextDocumentTokenizer(
        output_folder=str(out_dir),
        tokenizer_name_or_path=str(tokenizer_file),
        framing=document_framing(hf_tokenizer),
        # datatrove's own option would replace the post-processor by "$A <EOS>" (no BOS).
        eos_token=None,
        save_index=True,
        save_loss_metadata=False,
        save_final_metadata=True,
        shuffle_documents=True,
        **options,
    )


def _check_tokenizer_agreement(
    tokenizer_dir: Path, hf_tokenizer, texts: Sequence[str]
) -> tuple[int, int]:
    """Encode `texts` with the tokenizer exactly as datatrove loads it (framed by
    `document_framing`) and with `encode_documents` on `hf_tokenizer` (``transformers``); raise
    unless the ids agree, each document ``<s> ... </s>``. Returns (bos id, eos id).
    """
    from apertus.tokenize.tokenizer import encode_documents

    tokenizer_file = _tokenizer_file(tokenizer_dir)
    datatrove_tokenizer = _document_tokenizer(
        tokenizer_file.parent, tokenizer_file, hf_tokenizer
    ).tokenizer
    if datatrove_tokenizer.truncation is not None or datatrove_tokenizer.padding is not None:
        # DocumentTokenizer calls encode_batch as is, so it would cut or pad every document,
        # while the Hugging Face tokenizer switches both off unless asked.
        raise ApertusError(
            f"{tokenizer_file} enables truncation or padding: datatrove would cut or pad "
            "documents; save the tokenizer with both disabled"
        )
    texts = list(texts)
    ours = [encoding.ids for encoding in datatrove_tokenizer.encode_batch(texts)]
    theirs = encode_documents(hf_tokenizer, texts)
    for text, a, b in zip(texts, ours, theirs, strict=True):
        if list(a) != list(b):
            raise ApertusError(
                f"datatrove and transformers tokenize {text[:60]!r} differently "
                f"({a[:8]}... vs {b[:8]}...): the shards would not match the exported tokenizer"
            )
    return int(hf_tokenizer.bos_token_id), int(hf_tokenizer.eos_token_id)


# ---------------------------------------------------------------------------------------------
# Writing shards


class CorpusReader(PipelineStep):
    """Reads the data stage's corpus files into Documents, leaving out held-out documents.

    Held-out ids are dropped here, before tokenization, so that no token of a document kept
    for evaluation reaches a training shard (`excluded_heldout`). Documents whose text is empty
    or only whitespace are dropped (`skipped_empty`): they would be a bare ``<s></s>``, no
    training signal. Files are dealt to tasks round-robin in sorted order, so a task's shard
    depends only on the file list and the number of tasks, never on the number of workers.

    Each task shows its progress as `what` in documents read, out of its files' rows
    (`apertus.core.progress.count_records`: Parquet footers, JSONL.gz lines).
    """

    name = "📚 Corpus reader"
    type = "📖 - READER"

    def __init__(
        self,
        files: Sequence[tuple[str, str, str]],
        exclude_ids: Iterable[str] = (),
        what: str = "tokenizing",
    ):
        super().__init__()
        self.files = [tuple(entry) for entry in files]
        self.exclude_ids = frozenset(exclude_ids)
        self.what = what

    def run(self, data: DocumentsPipeline = None, rank: int = 0, world_size: int = 1):
        files = self.files[rank::world_size]
        what = self.what if world_size == 1 else f"{self.what} (task {rank + 1} of {world_size})"
        total = count_records(path for path, _, _ in files)
        with Progress(total, what, unit="documents") as progress:
            yield from self._documents(files, progress)

    def _documents(self, files: Sequence[tuple[str, str, str]], progress: Progress):
        for path, source, language in files:
            for row in _rows_of_file(Path(path), source, language):
                self.stat_update("documents_read")
                progress.update()
                if row["id"] in self.exclude_ids:
                    self.stat_update("excluded_heldout")
                    continue
                if not row["text"].strip():
                    self.stat_update("skipped_empty")
                    continue
                self.stat_update("documents_forwarded")
                metadata = {k: v for k, v in row.items() if k not in ("id", "text")}
                yield Document(text=row["text"], id=row["id"], metadata=metadata)


def _is_shard_file(name: str) -> bool:
    return name.endswith(SHARD_SUFFIXES)


def _remove_empty_shards(out_dir: Path) -> list[str]:
    """Delete zero-document token files datatrove leaves behind: the unshuffled file of a task
    that got no documents, and the trailing file opened when the last document of a task
    crossed `max_tokens_per_file`. A non-empty leftover of an unshuffled file is an error.
    """
    removed = []
    for ds in sorted(out_dir.glob("*.ds")):
        index = ds.with_name(ds.name + ".index")
        if ds.stat().st_size == 0 and (not index.exists() or index.stat().st_size == 0):
            for path in (ds, index, ds.with_name(ds.name + ".metadata")):
                if path.exists():
                    path.unlink()
                    removed.append(path.name)
        elif ds.name.endswith("_unshuffled.ds"):
            raise ApertusError(f"{ds}: datatrove left an unshuffled token file with documents")
    return removed


def _read_index(index_path: Path) -> np.ndarray:
    size = index_path.stat().st_size
    if size % _INDEX_DTYPE.itemsize:
        raise ApertusError(
            f"{index_path}: index inconsistent: {size} bytes is not a whole number of uint64 "
            "document ends"
        )
    return np.fromfile(index_path, dtype=_INDEX_DTYPE)


def write_token_shards(
    corpus_dir: Path,
    source: str,
    tokenizer_dir: Path,
    out_dir: Path,
    *,
    exclude_ids: set[str],
    seed: int,
    max_tokens_per_file: int | None = None,
    workers: int = 1,
    tasks: int = 1,
    logging_dir: Path,
) -> dict:
    """Tokenize one source of the corpus into a datatrove shard set with checksums.

    Reads ``corpus_dir/<source>/<language>/*`` (minus `exclude_ids` and empty texts), tokenizes
    with datatrove's DocumentTokenizer under a LocalPipelineExecutor (`tasks` tasks, at most
    `workers` at once; each task writes its own shard files, with its documents shuffled by a
    generator seeded with `seed`) with the language sidecar of each, then writes
    ``out_dir/checksums.json`` atomically, last, so a shard set without it is known to be
    incomplete. With `max_tokens_per_file`, a task's output
    is split into parts; as in datatrove, a part closes after the document that crosses the
    limit. The same corpus, tokenizer, seed and `tasks` give byte-identical shards whatever
    `workers` is. `out_dir` must be empty or absent.

    Returns a summary: files, documents, tokens, documents read / excluded / skipped, dtype,
    and ``languages``: {language: {"documents", "tokens"}} of the shards.
    """
    from datatrove.executor import LocalPipelineExecutor

    out_dir, logging_dir = Path(out_dir), Path(logging_dir)
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ApertusError(f"shuffle seed must be a non-negative integer, got {seed!r}")
    for name, value in (("workers", workers), ("tasks", tasks)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ApertusError(f"{name} must be a positive integer, got {value!r}")
    if max_tokens_per_file is not None and (
        isinstance(max_tokens_per_file, bool)
        or not isinstance(max_tokens_per_file, int)
        or max_tokens_per_file < 1
    ):
        raise ApertusError(
            f"max_tokens_per_file must be a positive integer or None, got {max_tokens_per_file!r}"
        )
    if out_dir.exists() and any(out_dir.iterdir()):
        raise ApertusError(f"shard directory {out_dir} is not empty; remove it to re-tokenize")
    if logging_dir.resolve().is_relative_to(out_dir.resolve()):
        raise ApertusError(f"logging_dir {logging_dir} must not be inside the shard directory")

    tokenizer_file = _tokenizer_file(tokenizer_dir)
    files = _corpus_files(Path(corpus_dir), source)
    exclude = frozenset(exclude_ids)

    probe: list[str] = list(_PROBE_TEXTS)
    for row in read_corpus(Path(corpus_dir), source):
        if len(probe) >= len(_PROBE_TEXTS) + _PROBE_DOCUMENTS:
            break
        if row["id"] not in exclude and row["text"].strip():
            probe.append(row["text"])
    hf_tokenizer = _hf_tokenizer(Path(tokenizer_dir))
    bos, eos = _check_tokenizer_agreement(Path(tokenizer_dir), hf_tokenizer, probe)

    tokenizer_step = _document_tokenizer(
        out_dir,
        tokenizer_file,
        hf_tokenizer,
        save_filename=source,
        seed=seed,
        max_tokens_per_file=max_tokens_per_file,
    )
    vocab_size = tokenizer_step.tokenizer.get_vocab_size(with_added_tokens=True)
    dtype = token_dtype(vocab_size)
    if tokenizer_step.token_size != dtype.itemsize:
        raise ApertusError(
            f"datatrove stores {tokenizer_step.token_size}-byte tokens for a vocabulary of "
            f"{vocab_size}, expected {dtype.name}"
        )

    out_dir.mkdir(parents=True, exist_ok=True)
    reader = CorpusReader(
        [(str(p), s, lang) for p, s, lang in files], exclude, what=f"tokenizing {source}"
    )
    executor = LocalPipelineExecutor(
        pipeline=[reader, tokenizer_step],
        tasks=tasks,
        workers=min(workers, tasks),
        logging_dir=str(logging_dir),
        # A completion marker from an earlier run would skip a task and leave its shard missing.
        skip_completed=False,
    )
    stats = executor.run()
    reader_stats, tokenizer_stats = stats.stats[0], stats.stats[1]
    removed = _remove_empty_shards(out_dir)

    documents = tokens = 0
    languages: dict[str, dict[str, int]] = defaultdict(lambda: {"documents": 0, "tokens": 0})
    for ds in sorted(out_dir.glob("*.ds")):
        ends = _read_index(ds.with_name(ds.name + ".index"))
        if len(ends) == 0 or int(ends[-1]) * dtype.itemsize != ds.stat().st_size:
            raise ApertusError(f"{ds}: datatrove wrote an index that does not match the tokens")
        documents += len(ends)
        tokens += int(ends[-1])
        codes, positions = document_languages(ds, len(ends))
        lengths = np.diff(ends.astype(np.int64), prepend=0)
        for i, code in enumerate(codes):
            languages[code]["documents"] += int(np.count_nonzero(positions == i))
            languages[code]["tokens"] += int(lengths[positions == i].sum())
    forwarded = int(reader_stats["documents_forwarded"].total)
    if documents != forwarded or tokens != int(tokenizer_stats["tokens"].total):
        raise ApertusError(
            f"{out_dir}: the shards hold {documents} documents / {tokens} tokens but "
            f"{forwarded} documents / {int(tokenizer_stats['tokens'].total)} tokens were "
            "tokenized: documents were lost"
        )

    # The token files and their indexes get block checksums, which the training loader checks
    # on every read (apertus.core.blocks); the sha256 comes from the same read of each file.
    digests = {
        path.name: write_block_checksums(path)
        for path in sorted(out_dir.iterdir())
        if path.is_file() and path.name.endswith(BLOCK_CHECKED_SUFFIXES)
    }
    checksums = {
        "files": {
            path.name: {
                "sha256": digests.get(path.name) or sha256_file(path),
                "bytes": path.stat().st_size,
            }
            for path in sorted(out_dir.iterdir())
            if path.is_file() and path.name != CHECKSUMS_FILE
        },
        "block_checksums": {"algorithm": "crc32", "block_bytes": BLOCK_BYTES},
        "dtype": dtype.name,
        "vocab_size": vocab_size,
        "documents": documents,
        "tokens": tokens,
        "tokenizer_sha256": sha256_file(tokenizer_file),
        "bos_token_id": bos,
        "eos_token_id": eos,
        "source": source,
        "seed": seed,
        "tasks": tasks,
        "max_tokens_per_file": max_tokens_per_file,
    }
    atomic_write_json(out_dir / CHECKSUMS_FILE, checksums)
    return {
        "source": source,
        "files": sorted(name for name in checksums["files"] if name.endswith(".ds")),
        "documents": documents,
        "tokens": tokens,
        "documents_read": int(reader_stats["documents_read"].total),
        "excluded_heldout": int(reader_stats["excluded_heldout"].total),
        "skipped_empty": int(reader_stats["skipped_empty"].total),
        "empty_files_removed": removed,
        "languages": {code: languages[code] for code in sorted(languages)},
        "dtype": dtype.name,
        "vocab_size": vocab_size,
    }


# ---------------------------------------------------------------------------------------------
# Verifying and reading shards


def _load_checksums(shard_dir: Path) -> dict:
    path = Path(shard_dir) / CHECKSUMS_FILE
    if not path.is_file():
        raise ApertusError(f"{path}: missing; the shard set is incomplete or was never written")
    try:
        checksums = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ApertusError(f"{path}: malformed, not valid JSON ({e})") from e

    def malformed(why: str) -> ApertusError:
        return ApertusError(f"{path}: malformed, {why}")

    if not isinstance(checksums, dict):
        raise malformed("not a JSON object")
    files = checksums.get("files")
    if not isinstance(files, dict):
        raise malformed("'files' is not an object")
    for name, entry in files.items():
        if Path(name).is_absolute() or ".." in Path(name).parts or not name:
            raise malformed(f"file name {name!r} is not a path inside the shard directory")
        if not (
            isinstance(entry, dict)
            and isinstance(entry.get("sha256"), str)
            and isinstance(entry.get("bytes"), int)
        ):
            raise malformed(f"entry for {name!r} needs 'sha256' (string) and 'bytes' (integer)")
    if checksums.get("dtype") not in ("uint16", "uint32"):
        raise malformed(f"dtype {checksums.get('dtype')!r} is not uint16 or uint32")
    for key in ("vocab_size", "documents", "tokens", "bos_token_id", "eos_token_id"):
        value = checksums.get(key)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise malformed(f"{key!r} is not a non-negative integer")
    if not isinstance(checksums.get("tokenizer_sha256"), str):
        raise malformed("'tokenizer_sha256' is not a string")
    if token_dtype(checksums["vocab_size"]).name != checksums["dtype"]:
        raise malformed(
            f"dtype {checksums['dtype']} does not fit vocab_size {checksums['vocab_size']}"
        )
    return checksums


def _check_token_file(ds: Path, checksums: dict) -> tuple[int, int]:
    """Structure of one listed .ds file: whole tokens, index consistent, BOS/EOS framing, ids in
    the vocabulary, and datatrove's .metadata agreeing. Returns (documents, tokens)."""
    dtype = np.dtype(checksums["dtype"]).newbyteorder("<")
    size = ds.stat().st_size
    if size % dtype.itemsize:
        raise ApertusError(
            f"{ds}: truncated: {size} bytes is not a whole number of {dtype.name} tokens"
        )
    index = ds.with_name(ds.name + ".index")
    if index.name not in checksums["files"]:
        raise ApertusError(f"{ds}: its index {index.name} is not listed in {CHECKSUMS_FILE}")
    ends = _read_index(index).astype(np.int64)
    n_tokens = size // dtype.itemsize
    if len(ends) == 0:
        if n_tokens:
            raise ApertusError(f"{index}: index inconsistent: no documents for {n_tokens} tokens")
        return 0, 0
    if int(ends[-1]) != n_tokens:
        raise ApertusError(
            f"{index}: index inconsistent: last document ends at token {int(ends[-1])} but "
            f"{ds.name} holds {n_tokens} tokens"
        )
    starts = np.concatenate([[0], ends[:-1]])
    if np.any(ends - starts < 2):
        raise ApertusError(
            f"{index}: index inconsistent: document ends are not increasing by >= 2 tokens"
        )
    tokens = np.memmap(ds, dtype=dtype, mode="r")
    if int(tokens.max()) >= checksums["vocab_size"]:
        raise ApertusError(
            f"{ds}: token id {int(tokens.max())} is outside the vocabulary of "
            f"{checksums['vocab_size']}"
        )
    bad_bos = np.flatnonzero(tokens[starts] != checksums["bos_token_id"])
    bad_eos = np.flatnonzero(tokens[ends - 1] != checksums["eos_token_id"])
    if len(bad_bos) or len(bad_eos):
        doc = int(min([*bad_bos[:1], *bad_eos[:1]]))
        raise ApertusError(f"{ds}: document {doc} is not framed by BOS ... EOS")
    metadata = ds.with_name(ds.name + ".metadata")
    if metadata.name in checksums["files"]:
        lines = metadata.read_text(encoding="utf-8").splitlines()
        try:
            token_size = int(lines[0].rsplit("|", 1)[1])
            count = int(lines[1])
        except (IndexError, ValueError) as e:
            raise ApertusError(f"{metadata}: not datatrove's '<tokenizer>|<size>' format") from e
        if token_size != dtype.itemsize or count != n_tokens:
            raise ApertusError(
                f"{metadata}: says {count} tokens of {token_size} bytes, but {ds.name} holds "
                f"{n_tokens} {dtype.name} tokens"
            )
    return len(ends), n_tokens


def verify_shards(shard_dir: Path) -> dict:
    """Check a shard set against its checksums.json before training starts; return checksums.

    Every listed file must exist with its recorded size (smaller: truncated) and sha256; every
    file with a token-file suffix (.ds, .ds.index, ...) in the directory must be listed; each
    .ds must hold whole tokens, agree with the last entry of its .ds.index, frame each
    document as BOS ... EOS and use only ids of the vocabulary; the totals must match. A listed
    language sidecar must name one language per document of its .ds (shard sets written before
    sidecars existed have none; the phases refuse them, training does not need them). Raises
    ApertusError naming the first bad file (in sorted order) and what is wrong.
    """
    shard_dir = Path(shard_dir)
    checksums = _load_checksums(shard_dir)
    listed = checksums["files"]
    for name in sorted(listed):
        path, entry = shard_dir / name, listed[name]
        if not path.is_file():
            raise ApertusError(f"{path}: missing (listed in {CHECKSUMS_FILE})")
        size = path.stat().st_size
        if size < entry["bytes"]:
            raise ApertusError(f"{path}: truncated: {size} bytes, expected {entry['bytes']}")
        if size != entry["bytes"]:
            raise ApertusError(f"{path}: size mismatch: {size} bytes, expected {entry['bytes']}")
        if sha256_file(path) != entry["sha256"]:
            raise ApertusError(f"{path}: checksum mismatch (sha256 differs from {CHECKSUMS_FILE})")

    unlisted = sorted(
        str(path.relative_to(shard_dir))
        for path in shard_dir.rglob("*")
        if path.is_file()
        and path.name != CHECKSUMS_FILE
        and str(path.relative_to(shard_dir)) not in listed
    )
    for name in unlisted:
        if _is_shard_file(name):
            raise ApertusError(
                f"{shard_dir / name}: extra token file not listed in {CHECKSUMS_FILE}; "
                "a loader would read it unchecked"
            )
    if unlisted:
        log.warning("%s: files not in %s: %s", shard_dir, CHECKSUMS_FILE, ", ".join(unlisted))

    documents = tokens = 0
    for name in sorted(listed):
        if name.endswith(".ds"):
            d, t = _check_token_file(shard_dir / name, checksums)
            documents, tokens = documents + d, tokens + t
            if name + LANGUAGES_SUFFIX in listed:
                document_languages(shard_dir / name, d)
        elif name.endswith(
            (
                *SHARD_SUFFIXES[1:],
                ".ds" + LANGUAGES_SUFFIX,
                *(suffix + SIDECAR_SUFFIX for suffix in BLOCK_CHECKED_SUFFIXES),
            )
        ):
            base = name[: name.rindex(".ds") + 3]
            if base not in listed:
                raise ApertusError(f"{shard_dir / name}: its token file {base} is not listed")
    if (documents, tokens) != (checksums["documents"], checksums["tokens"]):
        raise ApertusError(
            f"{shard_dir / CHECKSUMS_FILE}: records {checksums['documents']} documents / "
            f"{checksums['tokens']} tokens but the shards hold {documents} / {tokens}"
        )
    return checksums


class TokenShards:
    """A verified shard set, memory-mapped: documents addressed by (file, document) index.

    Used by the phases index and the training loader. It trusts the set (run `verify_shards`
    first) and reads only what it needs: the .ds files are memory-mapped, the indexes loaded.
    """

    def __init__(self, shard_dir: Path):
        self.shard_dir = Path(shard_dir)
        self.checksums = _load_checksums(self.shard_dir)
        self.dtype = np.dtype(self.checksums["dtype"]).newbyteorder("<")
        self.files: list[str] = sorted(n for n in self.checksums["files"] if n.endswith(".ds"))
        self._tokens: list[np.ndarray] = []
        self._ends: list[np.ndarray] = []
        for name in self.files:
            path = self.shard_dir / name
            if path.stat().st_size == 0:  # numpy cannot memory-map an empty file
                self._tokens.append(np.empty(0, dtype=self.dtype))
            else:
                self._tokens.append(np.memmap(path, dtype=self.dtype, mode="r"))
            self._ends.append(_read_index(path.with_name(name + ".index")))

    def documents(self, file_index: int) -> int:
        return len(self._ends[file_index])

    def document(self, file_index: int, doc_index: int) -> np.ndarray:
        """The token ids of one document, ``<s> ... </s>`` (a read-only view of the file)."""
        ends = self._ends[file_index]
        if not 0 <= doc_index < len(ends):
            raise IndexError(
                f"document {doc_index} out of range for {self.files[file_index]} "
                f"({len(ends)} documents)"
            )
        start = int(ends[doc_index - 1]) if doc_index else 0
        return self._tokens[file_index][start : int(ends[doc_index])]

    def total_tokens(self) -> int:
        return sum(int(ends[-1]) for ends in self._ends if len(ends))

    def total_documents(self) -> int:
        return sum(len(ends) for ends in self._ends)


# ---------------------------------------------------------------------------------------------
# Held-out documents for evaluation


def write_heldout(corpus_dir: Path, ids: set[str], out_dir: Path, tokenizer_dir: Path) -> dict:
    """Write the held-out documents as ``out_dir/<language>.jsonl`` ({"id", "text", "source"}
    per line, in corpus order) for perplexity evaluation, and count them per language.

    Token counts are of each document framed ``<s> ... </s>``, as the shards would have held
    them. An id not found in the corpus is an error: the split and the corpus disagree. An id
    two sources share (FineWeb's ids are in both FineWeb-Edu and FineWeb-HQ) is held out of the
    shards in both, and written once, the first in corpus order: ids stay unique in the files
    evaluation reads, and the others are counted as ``repeated_ids``.
    Returns {"languages": {language: {"documents", "tokens"}}, "documents", "tokens",
    "repeated_ids"}.
    """
    tokenizer_file = _tokenizer_file(tokenizer_dir)
    tokenizer = _document_tokenizer(
        tokenizer_file.parent, tokenizer_file, _hf_tokenizer(Path(tokenizer_dir))
    ).tokenizer
    wanted = set(ids)
    by_language: dict[str, list[dict]] = defaultdict(list)
    found: set[str] = set()
    repeated = 0
    for row in read_corpus(Path(corpus_dir)):
        if row["id"] in found:
            repeated += 1
        elif row["id"] in wanted:
            found.add(row["id"])
            by_language[str(row["language"])].append(
                {"id": row["id"], "text": row["text"], "source": row["source"]}
            )
    if missing := sorted(wanted - found):
        raise ApertusError(
            f"{len(missing)} held-out ids are not in the corpus {corpus_dir}, e.g. {missing[:5]}"
        )
    summary: dict[str, Any] = {
        "languages": {},
        "documents": 0,
        "tokens": 0,
        "repeated_ids": repeated,
    }
    for language in sorted(by_language):
        if not _SAFE_NAME.match(language):
            raise ApertusError(f"language {language!r} cannot name a held-out file")
        rows = by_language[language]
        tokens = sum(len(e.ids) for e in tokenizer.encode_batch([r["text"] for r in rows]))
        atomic_write_text(
            Path(out_dir) / f"{language}.jsonl",
            "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows),
        )
        summary["languages"][language] = {"documents": len(rows), "tokens": tokens}
        summary["documents"] += len(rows)
        summary["tokens"] += tokens
    return summary
