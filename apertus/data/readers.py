"""Readers for the configured sources: JSONL, Parquet, WARC, ParaDocs and Hugging Face datasets.

Every reader maps the source's fields onto the document contract of `apertus.data` (text, id,
and metadata `source`, `kind`, `url`, `language_hint`). Bad input never crashes the stage and
is never dropped silently: malformed JSON lines, lines over `max_line_bytes`, missing or
non-text text fields, non-UTF-8 bytes, empty files, truncated or corrupt files and compressed
files whose codec is not installed are skipped and counted per reason in the step's stats, with
the first few examples of each reason logged with file and line (file and row for Parquet).

A document's text is the record's `text_field`, or, for sources whose records split it over
several fields (Flan's `inputs` and `targets`, Wikipedia's `title` and `text`, EuroParl's
`translation` pairs), the source's `text_template` filled from the record; a record without a
field the template names is skipped and counted (`skipped_missing_field`). For chat data
(EuroBlocks' `conversations`), the text is the source's `conversation_field` written out turn by
turn (`conversation_text`).

ParaDocs (`ParaDocsReader`) keeps one sentence pair per line; consecutive lines of one document
become one document, its English side and then the other, as EuroParl's pairs are written.

The language hint is, first found first, what `language_from_path` captures in the file's path
(one source over many language folders, such as all of FineWeb-2), the record's
`language_field`, or the source's `language`. With `language_from_path`, a file whose path
names no language is not read, and counted (`skipped_no_language_in_path`).
"""

from __future__ import annotations

import glob
import gzip
import importlib.util
import logging
import lzma
import re
import zlib
from collections import Counter
from functools import cached_property
from pathlib import PurePosixPath
from typing import Any, ClassVar

from datatrove.io import has_magic
from datatrove.pipeline.readers import HuggingFaceDatasetReader, ParquetReader
from datatrove.pipeline.readers.base import BaseDiskReader

from apertus.core import ApertusError
from apertus.core.files import LongLine, bounded_lines, format_bytes
from apertus.data.config import Source, TemplatePieces, parse_text_template

log = logging.getLogger("apertus.data.readers")

# Examples of each skip reason written to the log (the counts are complete in the stats).
_SAMPLES_PER_REASON = 3

_UTF8_BOM = b"\xef\xbb\xbf"

# Compressed JSONL by suffix: (fsspec codec, the Python module it needs, the package to install).
# Chosen by suffix rather than fsspec's "infer", which silently reads a file raw (one long
# "bad UTF-8 line") when the codec's module is not installed.
_CODECS = {
    ".gz": ("gzip", "gzip", None),
    ".bz2": ("bz2", "bz2", None),
    ".xz": ("xz", "lzma", None),
    ".zst": ("zstd", "zstandard", "zstandard"),
}

# What a truncated or corrupt compressed stream raises, by codec.
_STREAM_ERRORS: tuple[type[BaseException], ...] = (EOFError, zlib.error, OSError, lzma.LZMAError)


class SourceMapping:
    """Mixin: maps one raw record of `self.source` onto the fields of a datatrove Document.

    It replaces the reader's default adapter (a bound method, so the step stays picklable for
    datatrove's worker processes).
    """

    source: Source

    def _default_adapter(self, data: dict, path: str, id_in_file: int | str) -> dict:
        source = self.source
        text = self.record_text(data)[0]
        doc_id = data.get(source.id_field)
        if doc_id in (None, ""):
            doc_id = f"{source.name}/{PurePosixPath(str(path)).name}/{id_in_file}"
        metadata: dict[str, Any] = {"source": source.name, "kind": source.kind}
        url = data.get(source.url_field) if source.url_field else None
        if url:
            metadata["url"] = str(url)
        # The hint, first found first: the file's path, the record's field, the whole source.
        hint = self.path_language(path)
        if not hint and source.language_field:
            hint = data.get(source.language_field)
        if hint or source.language:
            metadata["language_hint"] = str(hint or source.language)
        return {"text": text, "id": str(doc_id), "metadata": metadata}

    def record_text(self, data: Any) -> tuple[str | None, str, str]:
        """(the record's document text, "", "") or (None, why it has none, detail): the skip
        reason counted as `skipped_<reason>` and the field it concerns."""
        if not isinstance(data, dict):
            return None, "not_an_object", ""
        if self.source.conversation_field is not None:
            return conversation_text(data, self.source.conversation_field)
        template = self.source.text_template
        if template is None:
            field = self.source.text_field
            text = data.get(field)
            if text is None or text == "":
                return None, "missing_text", f"field {field!r}"
            if not isinstance(text, str):
                return None, "text_not_string", f"field {field!r}"
            if not text.strip():
                return None, "blank_text", f"field {field!r}"
            return text, "", ""
        parts = []
        for literal, keys in self._template:
            parts.append(literal)
            if keys is None:
                continue
            value = _text_value(_lookup(data, keys))
            if value is None or not isinstance(value, str):
                # The detail is only made for a record that is skipped (the reader's hot path).
                reason = "missing_field" if value is None else "field_not_string"
                return None, reason, f"field {_field_name(keys)} of text_template {template!r}"
            parts.append(value)
        text = "".join(parts)
        if not text.strip():
            return None, "blank_text", f"text_template {template!r}"
        return text, "", ""

    @cached_property
    def _template(self) -> TemplatePieces:
        return parse_text_template(self.source.text_template)

    def path_language(self, path: str) -> str | None:
        """The language `source.language_from_path` captures in a file's path (relative to the
        folder read, as datatrove names it: `deu_Latn/train/000_00000.parquet`), or None."""
        pattern = self.source.language_from_path
        if pattern is None:
            return None
        match = re.search(pattern, str(path))
        return (match.group(1) or None) if match else None


def _lookup(data: dict, keys: tuple[str | int, ...]) -> Any:
    """The value at `keys` in a record (dicts by key, lists by index), or None where it has none.
    A numeric key reads a list's item, or a dict's key of those digits (`{scores[0]}`)."""
    value: Any = data
    for key in keys:
        if isinstance(value, dict):
            value = value.get(key, value.get(str(key)) if isinstance(key, int) else None)
        elif isinstance(value, list) and isinstance(key, int) and -len(value) <= key < len(value):
            value = value[key]
        else:
            return None
    return value


def _text_value(value: Any) -> Any:
    """A templated field's text: a string as it is; a list of strings and nulls (interleaved
    text, None where an image was: InfiMM-WebMath's `text_list`) its strings joined by a blank
    line, or None when it holds none; anything else unchanged (refused by the caller)."""
    if isinstance(value, list) and all(item is None or isinstance(item, str) for item in value):
        texts = [item for item in value if item is not None]
        return "\n\n".join(texts) if texts else None
    return value


def _field_name(keys: tuple[str | int, ...]) -> str:
    return "{" + str(keys[0]) + "".join(f"[{key}]" for key in keys[1:]) + "}"


# How a conversation turn names its speaker, in the two record shapes chat data comes in:
# {role, content} (OpenAI-style messages) and ShareGPT's {from, value} (EuroBlocks, The Tome).
_TURN_KEYS = (("role", "content"), ("from", "value"))
_ROLE_NAMES = {
    "system": "System",
    "user": "User",
    "human": "User",
    "assistant": "Assistant",
    "gpt": "Assistant",
}


def conversation_text(data: dict, field: str) -> tuple[str | None, str, str]:
    """A record's conversation (the list of turns in `field`) as one document text, or None
    with the skip reason and its detail, as `SourceMapping.record_text` returns them.

    Each turn is written `<Role>: <content>` (roles as `_ROLE_NAMES` names them, others
    capitalized: `Tool`), the turns separated by a blank line, so a conversation reads as
    the dialogue it is, whatever chat template post-training uses later.
    """
    turns = data.get(field)
    if turns is None:
        return None, "missing_field", f"field {field!r}"
    if not isinstance(turns, list) or not turns:
        return None, "conversation_not_list", f"field {field!r}: {type(turns).__name__}"
    parts, contents = [], []
    for i, turn in enumerate(turns):
        pair = next(
            (
                (turn[role], turn[content])
                for role, content in _TURN_KEYS
                if isinstance(turn, dict) and role in turn and content in turn
            ),
            None,
        )
        if pair is None or not all(isinstance(value, str) for value in pair) or not pair[0]:
            return None, "malformed_turn", f"field {field!r}, turn {i}: {turn!r:.80}"
        role, content = pair
        parts.append(f"{_ROLE_NAMES.get(role.lower(), role.capitalize())}: {content}")
        contents.append(content)
    if not any(content.strip() for content in contents):
        return None, "blank_text", f"field {field!r}"
    return "\n\n".join(parts), "", ""


def _refuse_bad_source(source: Source) -> None:
    """The source problems the config check names, for a reader built without it."""
    for key, problem in source.problems():
        raise ApertusError(
            f"data source {source.name!r}: {key} {getattr(source, key)!r}: {problem}"
        )


class DiskSource(SourceMapping):
    """Mixin: the constructor shared by the readers of files (one source, its field names)."""

    # Keyword arguments the datatrove base reader takes besides the common ones.
    _base_options: ClassVar[dict[str, Any]] = {"add_file_path": False}

    def __init__(
        self, data_folder, source: Source, paths_file=None, limit: int = -1, glob_pattern=None
    ):
        super().__init__(
            data_folder,
            paths_file=paths_file,
            limit=limit,
            text_key=source.text_field,
            id_key=source.id_field,
            glob_pattern=glob_pattern,
            **self._base_options,
        )
        self.source = source
        _refuse_bad_source(source)

    def read_files_shard(self, shard: list[str]):
        # With `language_from_path`, a file whose path names no language is refused whole (its
        # documents would be read with no hint, or another source's), logged every time.
        if self.source.language_from_path is not None:
            shard = [filepath for filepath in shard if self._names_language(filepath)]
        yield from super().read_files_shard(shard)

    def _names_language(self, filepath: str) -> bool:
        if self.path_language(filepath):
            return True
        self.stat_update("skipped_no_language_in_path")
        log.error(
            "error: source %s: %s not read: its path does not match language_from_path %r",
            self.source.name,
            filepath,
            self.source.language_from_path,
        )
        return False


class _Skips:
    """Counts and samples skipped records for one file (create one per file read)."""

    def __init__(self, step):
        self.step = step
        self.samples: Counter = Counter()

    def __call__(self, reason: str, where: str, detail: str = "") -> None:
        self.step.stat_update(f"skipped_{reason}")
        if self.samples[reason] < _SAMPLES_PER_REASON:
            self.samples[reason] += 1
            log.warning("skipped (%s) %s%s", reason, where, f": {detail}" if detail else "")


class LineFiles:
    """Mixin for readers of line-based files (plain, .gz, .bz2, .xz, .zst): `text_lines`."""

    source: Source

    def text_lines(self, filepath: str, skip: _Skips):
        """(line number from 1, decoded line) of each line with content, read in binary so one
        bad line costs one line: a line over the source's `max_line_bytes` is read past without
        being kept (`line_too_long`), non-UTF-8 lines are skipped (`bad_utf8`), a byte-order mark
        is dropped, a truncated or corrupt stream ends the file with what was read
        (`truncated_file`), a file without content is counted (`empty_file`), and a file whose
        codec is not installed is not read (`unsupported_compression`, logged as an error)."""
        compression, refusal = _compression(filepath)
        if refusal:
            # Every refused file is logged (a whole file is lost), not only the first few.
            self.stat_update("skipped_unsupported_compression")
            log.error("error: source %s: %s not read: %s", self.source.name, filepath, refusal)
            return
        lines = 0
        limit = self.source.max_line_bytes
        try:
            with self.data_folder.open(filepath, "rb", compression=compression) as f:
                for lineno, raw in bounded_lines(f, limit):
                    if isinstance(raw, LongLine):
                        lines += 1
                        detail = (
                            f"{format_bytes(raw.size)}, over max_line_bytes ({format_bytes(limit)})"
                        )
                        skip("line_too_long", f"{filepath}:{lineno}", detail)
                        continue
                    # Editors on Windows start a file (and tools that concatenate files, a line)
                    # with a byte-order mark.
                    raw = raw.removeprefix(_UTF8_BOM)
                    if not raw.strip():
                        continue
                    lines += 1
                    try:
                        line = raw.decode("utf-8")
                    except UnicodeDecodeError as e:
                        skip("bad_utf8", f"{filepath}:{lineno}", str(e))
                        continue
                    yield lineno, line
        except _STREAM_ERRORS as e:
            # A truncated or corrupt compressed file: keep what was read, count the file.
            skip("truncated_file", filepath, f"after {lines} lines: {e}")
            return
        if lines == 0:  # no line with content (blank lines only, or no bytes)
            skip("empty_file", filepath)


class RobustJsonlReader(DiskSource, LineFiles, BaseDiskReader):
    """JSONL (plain, .gz, .zst) read line by line in binary, so one bad line costs one document.

    datatrove's JsonlReader stops a whole file at the first non-UTF-8 byte and crashes on a
    truncated gzip or a line that is not a JSON object; this reader skips and counts instead.
    """

    name = "🐿 JSONL"
    _requires_dependencies = ("orjson",)

    def read_file(self, filepath: str):
        import orjson

        skip = _Skips(self)
        for lineno, line in self.text_lines(filepath, skip):
            where = f"{filepath}:{lineno}"
            try:
                data = orjson.loads(line)
            except orjson.JSONDecodeError as e:
                skip("bad_json", where, str(e))
                continue
            _, problem, detail = self.record_text(data)
            if problem:
                skip(problem, where, detail)
                continue
            with self.track_time():
                document = self.get_document_from_dict(data, filepath, lineno)
            if document:
                yield document


# ParaDocs' columns, in file order (rewicks/ParaDocs `paradocs/paradocs-hf`, the Hub loader's
# fields): the English sentence, the other language's, then alignment metadata, the two
# documents' ids last. Tab-separated, unquoted (csv.QUOTE_NONE), one sentence pair per line.
PARADOCS_COLUMNS = (
    "src",
    "tgt",
    "sim_score_one",
    "sim_score_two",
    "collection",
    "src_paragraph_id",
    "tgt_paragraph_id",
    "src_sentence_id",
    "tgt_sentence_id",
    "src_start_id",
    "src_end_id",
    "tgt_start_id",
    "tgt_end_id",
    "src_lid_prob",
    "tgt_lid_prob",
    "duplication_count",
    "src_docid",
    "tgt_docid",
)
_SRC, _TGT = PARADOCS_COLUMNS.index("src"), PARADOCS_COLUMNS.index("tgt")
_SRC_DOC, _TGT_DOC = PARADOCS_COLUMNS.index("src_docid"), PARADOCS_COLUMNS.index("tgt_docid")


class ParaDocsReader(DiskSource, LineFiles, BaseDiskReader):
    """ParaDocs (jhu-clsp/paradocs): sentence pairs from ParaCrawl, News Commentary and
    EuroParl with the ids of the documents they came from, one pair per line of
    `data/en-<xx>/<subset>/NNN.gz`, in `PARADOCS_COLUMNS` order.

    Consecutive lines with the same (English, other) document ids are one document: its
    English sentences one per line, a blank line, then the other side's sentences, the same
    layout as the EuroParl sources' `{en}\\n\\n{other}` (the language hint, the non-English side,
    comes from `language` or `language_from_path`). Its id is `<source>/<file>/<first line>`.
    A line without exactly 18 columns is skipped (`malformed_line`), one with an empty
    sentence on either side too (`blank_sentence`); the document goes on without it. Files are
    chunks of one stream, so a document can run over the end of one file into the next: each
    part is read as a document of its own (the files are split between tasks, and a part is
    never lost or read twice).
    """

    name = "📑 ParaDocs"

    def read_file(self, filepath: str):
        skip = _Skips(self)
        document: tuple[str, str] | None = None
        first = 0
        english: list[str] = []
        other: list[str] = []
        for lineno, line in self.text_lines(filepath, skip):
            columns = line.rstrip("\r\n").split("\t")
            if len(columns) != len(PARADOCS_COLUMNS):
                detail = f"{len(columns)} tab-separated columns, not {len(PARADOCS_COLUMNS)}"
                skip("malformed_line", f"{filepath}:{lineno}", detail)
                continue
            src, tgt = columns[_SRC].strip(), columns[_TGT].strip()
            if not src or not tgt:
                skip("blank_sentence", f"{filepath}:{lineno}", "src" if not src else "tgt")
                continue
            ids = (columns[_SRC_DOC], columns[_TGT_DOC])
            if ids != document:
                if english:
                    yield from self._document(english, other, filepath, first)
                document, first, english, other = ids, lineno, [], []
            english.append(src)
            other.append(tgt)
        if english:
            yield from self._document(english, other, filepath, first)

    def _document(self, english: list[str], other: list[str], filepath: str, first: int):
        data = {self.source.text_field: "\n".join(english) + "\n\n" + "\n".join(other)}
        with self.track_time():
            document = self.get_document_from_dict(data, filepath, first)
        if document:
            yield document


def _compression(filepath: str) -> tuple[str | None, str | None]:
    """(fsspec codec for `filepath`, or why the file cannot be read here)."""
    for suffix, (codec, module, package) in _CODECS.items():
        if filepath.endswith(suffix):
            if importlib.util.find_spec(module) is None:
                return None, f"reading {suffix} needs the {package or module} package"
            return codec, None
    return None, None


class GuardedParquetReader(DiskSource, ParquetReader):
    """Parquet read batch by batch, with corrupt files, empty files and bad rows counted.

    Rows are named by their row number in the file (from 0, as pyarrow counts), in the log and in
    generated ids; datatrove's reader numbers only the rows it kept.
    """

    name = "📒 Parquet"
    _base_options: ClassVar[dict[str, Any]] = {}  # ParquetReader has no add_file_path

    def read_file(self, filepath: str):
        import pyarrow.parquet as pq

        skip = _Skips(self)
        row = 0
        try:
            with self.data_folder.open(filepath, "rb") as f, pq.ParquetFile(f) as pqf:
                columns = None if self.read_metadata else [self.text_key, self.id_key]
                for batch in pqf.iter_batches(batch_size=self.batch_size, columns=columns):
                    documents = []
                    with self.track_time("batch"):
                        for data in batch.to_pylist():
                            _, problem, detail = self.record_text(data)
                            if problem:
                                skip(problem, f"{filepath}:row {row}", detail)
                            else:
                                document = self.get_document_from_dict(data, filepath, row)
                                if document:
                                    documents.append(document)
                            row += 1
                    yield from documents
        except Exception as e:  # pyarrow raises several types for a corrupt or truncated file
            skip("corrupt_file", filepath, f"after {row} rows: {type(e).__name__}: {e}")
            return
        if row == 0:
            skip("empty_file", filepath)


class WarcHtmlReader(DiskSource, BaseDiskReader):
    """WARC response records with HTML, reduced to their main text with trafilatura.

    datatrove's WarcReader needs libmagic and cchardet; HTTP headers give the content type and
    charset we need, and undecodable bytes are replaced (counted) rather than dropping a page.
    """

    name = "🕷 WARC"
    _requires_dependencies = ("warcio", "trafilatura")

    def read_file(self, filepath: str):
        import trafilatura
        from warcio.archiveiterator import ArchiveIterator
        from warcio.exceptions import ArchiveLoadFailed

        skip = _Skips(self)
        if filepath.endswith(".gz"):
            # warcio reads a cut gzip member as a shorter file without complaint; check the
            # stream first so a truncated download is counted, then keep what is readable.
            try:
                with self.data_folder.open(filepath, "rb") as raw, gzip.GzipFile(fileobj=raw) as g:
                    while g.read(1 << 20):
                        pass
            except (EOFError, zlib.error, OSError) as e:
                skip("truncated_file", filepath, str(e))
        n = 0
        try:
            with self.data_folder.open(filepath, "rb") as f:
                for n, record in enumerate(ArchiveIterator(f), start=1):
                    if record.rec_type != "response" or record.http_headers is None:
                        continue
                    content_type = record.http_headers.get_header("Content-Type") or ""
                    if "html" not in content_type.lower():
                        self.stat_update("not_html")
                        continue
                    charset = "utf-8"
                    if "charset=" in content_type.lower():
                        charset = content_type.lower().split("charset=")[1].split(";")[0].strip()
                    payload = record.content_stream().read()
                    try:
                        html = payload.decode(charset)
                    except (UnicodeDecodeError, LookupError):
                        self.stat_update("decoded_with_replacement")
                        html = payload.decode("utf-8", errors="replace")
                    text = trafilatura.extract(html, favor_precision=True) or ""
                    url = record.rec_headers.get_header("WARC-Target-URI")
                    data = {
                        self.source.text_field: text,
                        self.source.id_field: record.rec_headers.get_header("WARC-Record-ID"),
                        **({self.source.url_field: url} if self.source.url_field else {}),
                    }
                    if not text.strip():
                        skip("no_main_text", f"{filepath} record {n}", url or "")
                        continue
                    document = self.get_document_from_dict(data, filepath, n)
                    if document:
                        yield document
        except (ArchiveLoadFailed, EOFError, zlib.error, OSError) as e:
            skip("truncated_file", filepath, f"after {n} records: {e}")


class HubDatasetReader(SourceMapping, HuggingFaceDatasetReader):
    """A Hugging Face Hub dataset, streamed (real runs; e.g. FineWeb-2 by config and split)."""

    def __init__(self, source: Source, limit: int = -1):
        options = {"split": source.hf_split}
        if source.hf_config:
            options["name"] = source.hf_config
        super().__init__(
            source.path,
            dataset_options=options,
            streaming=True,
            limit=limit,
            text_key=source.text_field,
            id_key=source.id_field,
        )
        self.source = source
        _refuse_bad_source(source)

    def get_document_from_dict(self, data: dict, source_file: str, id_in_file: int | str):
        # Records without text are counted per reason, as the file readers count them.
        _, problem, detail = self.record_text(data)
        if problem:
            if "_skip" not in self.__dict__:
                self._skip = _Skips(self)
            self._skip(problem, f"{source_file} row {id_in_file}", detail)
            return None
        return super().get_document_from_dict(data, source_file, id_in_file)


def make_reader(source: Source, *, paths_file: str | None = None, limit: int = -1):
    """The datatrove reader step for `source` (its path already resolved to a folder or file)."""
    if source.reader == "huggingface":
        return HubDatasetReader(source, limit=limit)
    readers = {
        "jsonl": RobustJsonlReader,
        "parquet": GuardedParquetReader,
        "warc": WarcHtmlReader,
        "paradocs": ParaDocsReader,
    }
    folder, glob = resolve_folder(source)
    return readers[source.reader](
        folder,
        source,
        paths_file=paths_file,
        limit=limit,
        glob_pattern=None if paths_file else glob,
    )


def resolve_folder(source: Source) -> tuple[str, str | None]:
    """(folder, glob) for a path that may name a single file or a directory."""
    path = source.path
    if path.startswith("hf://") or not _is_file(path):
        return path, source.glob
    parent, name = path.rsplit("/", 1) if "/" in path else (".", path)
    return parent, _exact_glob(name)


def _exact_glob(name: str) -> str:
    """A glob matching the file `name` only.

    datatrove's `list_files` turns a pattern without wildcards into `*pattern` (so `.jsonl`
    means every JSONL file): `crlf.jsonl` would also read `bom_crlf.jsonl`. A one-character
    class (`[c]rlf.jsonl`) is a wildcard that matches the name itself and nothing else.
    """
    pattern = glob.escape(name)
    if has_magic(pattern):
        return pattern
    i = next((i for i, ch in enumerate(pattern) if ch not in "!^-]"), None)
    if i is None:
        raise ValueError(f"cannot read a file named {name!r} on its own; name its folder")
    return f"{pattern[:i]}[{pattern[i]}]{pattern[i + 1 :]}"


def _is_file(path: str) -> bool:
    from pathlib import Path

    return Path(path).is_file()
