"""File helpers with the guarantees every stage needs: atomic writes and streaming SHA-256."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import tempfile
import uuid
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from apertus.core import ApertusError
from apertus.core.progress import Progress

_CHUNK = 1 << 20


def canonical_json(obj: Any) -> str:
    """One text per value: sorted keys, no spaces, so equal configs hash equally."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def sha256_file(path: str | os.PathLike) -> str:
    """SHA-256 of a file's bytes, read in 1 MiB chunks so multi-GB shards never sit in memory."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


@dataclass(frozen=True)
class Checksummed:
    """A file with the sha256 and size a record (checksums.json, phase.json, sft.json) gives it."""

    path: Path
    sha256: str
    bytes: int


def verify_checksums(files: Sequence[Checksummed], what: str) -> dict[str, int]:
    """Check that every file holds the bytes its record names (size, then SHA-256 of the whole
    file, streamed, a few files at a time), or raise ApertusError naming each file that
    differs. Nothing is trusted from an earlier check: bit rot changes neither a file's size
    nor its times (large data that is read in parts is checked per block instead,
    apertus.core.blocks). Returns ``{"files", "bytes_hashed"}``."""
    bad: list[str] = []
    todo: list[Checksummed] = []
    for f in files:
        try:
            size = f.path.stat().st_size
        except OSError as e:
            bad.append(f"{f.path}: {e.strerror or e}")
            continue
        if size != f.bytes:
            bad.append(f"{f.path}: {size} bytes, its record says {f.bytes}")
        else:
            todo.append(f)
    total = sum(f.bytes for f in todo)
    with (
        # Counted as it is updated, each file in whole MiB rounded up (a total rounded once
        # would be passed by many small files: "7/1 MiB").
        Progress(
            sum(-(-f.bytes // _CHUNK) for f in todo), f"verifying {what}", unit="MiB"
        ) as progress,
        ThreadPoolExecutor(max_workers=min(4, os.cpu_count() or 1)) as pool,
    ):
        # hashlib releases the GIL on large updates: a few files hash in parallel.
        def check(f: Checksummed) -> str | None:
            actual = sha256_file(f.path)
            if actual != f.sha256:
                return f"{f.path}: sha256 {actual}, its record says {f.sha256}"
            return None

        for f, problem in zip(todo, pool.map(check, todo), strict=True):
            progress.update(-(-f.bytes // _CHUNK))  # whole MiB, rounded up
            if problem:
                bad.append(problem)
    if bad:
        more = f" (and {len(bad) - 1} more)" if len(bad) > 1 else ""
        raise ApertusError(
            f"{what}: {bad[0]}{more}: the file is corrupt or was rewritten after it was "
            "recorded; nothing was trained on it. Rebuild it (re-run the step that wrote it)."
        )
    return {"files": len(files), "bytes_hashed": total}


# The permissions `open()` gives a new file (0666 less the umask): mkstemp's 0600 is too strict
# for outputs that others read. The umask can only be read by setting it, so it is read once, at
# import, and set meanwhile to the usual 022 rather than to 0 in case another thread is writing.
_UMASK = os.umask(0o022)
os.umask(_UMASK)
NEW_FILE_MODE = 0o666 & ~_UMASK


@contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """A temporary file name beside `path`, for writers that want a name rather than a file
    object (safetensors' ``save_file``, matplotlib's ``savefig``).

    The file (created empty, so the name is ours) replaces `path` only once the block exits
    cleanly: it is then flushed to disk, given the permissions of a plain new file, and renamed
    over `path`, so readers see the old file or the whole new one, never a part. On any error
    it is removed and `path` is left as it was.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    tmp = Path(name)
    try:
        yield tmp
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        os.chmod(tmp, NEW_FILE_MODE)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


@contextmanager
def atomic_open(path: str | os.PathLike, mode: str = "w") -> Iterator[IO]:
    """Open a file that replaces `path` only once it is completely written (see `atomic_path`:
    same filesystem, flushed to disk, plain permissions; on any error `path` is left as it
    was). Text modes are UTF-8."""
    with (
        atomic_path(path) as tmp,
        open(tmp, mode, **({} if "b" in mode else {"encoding": "utf-8"})) as f,
    ):
        yield f


def atomic_write_text(path: str | os.PathLike, text: str) -> Path:
    """Write `text` to `path` atomically (see `atomic_open`)."""
    with atomic_open(path, "w") as f:
        f.write(text)
    return Path(path)


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> Path:
    """Write `data` to `path` atomically (see `atomic_open`)."""
    with atomic_open(path, "wb") as f:
        f.write(data)
    return Path(path)


def atomic_write_json(path: str | os.PathLike, obj: Any) -> Path:
    """Serialise first, then write atomically: an unserialisable value never touches disk."""
    return atomic_write_text(
        path, json.dumps(obj, indent=2, sort_keys=True, ensure_ascii=False) + "\n"
    )


def recorded_path(path: str | os.PathLike, base: str | os.PathLike) -> str:
    """`path` as a record in folder `base` stores it: relative to `base` (POSIX separators),
    so a results folder moved or copied whole keeps its records' paths right. Both are taken
    from the working directory when relative; the path is computed on names (symlinks are not
    followed), as `resolve_recorded` reads it back."""
    relative = os.path.relpath(os.path.abspath(path), os.path.abspath(base))
    return Path(relative).as_posix()


def resolve_recorded(recorded: str | os.PathLike, base: str | os.PathLike) -> Path:
    """The path a record in folder `base` names: a relative one is joined to `base` (as
    `recorded_path` wrote it), an absolute one (records written before paths were relative)
    is read as is."""
    recorded = Path(recorded)
    if recorded.is_absolute():
        return recorded
    return Path(os.path.normpath(Path(base) / recorded))


def replace_directory(built: str | os.PathLike, target: str | os.PathLike) -> None:
    """Put the fully written directory `built` at `target`, replacing what is there with two
    renames, so readers see the old or the new directory, never a half-written one. `built`
    must be on the same filesystem (a sibling)."""
    built, target = Path(built), Path(target)
    if target.exists():
        old = target.with_name(f".{target.name}.{uuid.uuid4().hex}.old")
        os.replace(target, old)
        os.replace(built, target)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.replace(built, target)


@contextmanager
def building_directory(target: str | os.PathLike) -> Iterator[Path]:
    """A fresh empty directory beside `target` to build in, which replaces `target` (see
    `replace_directory`) when the block exits cleanly. On an error it is removed and `target`
    is left as it was. What may be replaced (e.g. only a directory of our own outputs) is the
    caller's check, before the block.

    A build killed outright (SIGKILL, a lost node) cannot clean up after itself; its leftovers
    beside `target` are removed when `target` is next built, so a checkpoint-sized directory
    does not stay behind per attempt. One target is built by one process at a time (Snakemake
    runs one job per output).
    """
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    leftover = re.compile(rf"\.{re.escape(target.name)}\.[0-9a-f]{{32}}\.(tmp|old)")
    for path in target.parent.iterdir():
        if leftover.fullmatch(path.name) and path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
    built = target.with_name(f".{target.name}.{uuid.uuid4().hex}.tmp")
    built.mkdir()
    try:
        yield built
        replace_directory(built, target)
    finally:
        if built.exists():
            shutil.rmtree(built, ignore_errors=True)


def read_jsonl(
    path: str | os.PathLike, max_line_bytes: int | None = None
) -> Iterator[tuple[str, dict[str, Any]]]:
    """The objects of a JSON Lines file with where each comes from (``"PATH, line N"``), blank
    lines skipped. A missing or unreadable file, a line that is not UTF-8, not JSON or not an
    object is an ApertusError naming the file and line, as is a line over `max_line_bytes`
    (default `MAX_LINE_BYTES`), which is read past without being kept; what an object must hold
    is the caller's check."""
    path = Path(path)
    limit = MAX_LINE_BYTES if max_line_bytes is None else max_line_bytes
    try:
        f = path.open("rb")
    except FileNotFoundError:
        raise ApertusError(f"{path}: not found") from None
    except OSError as e:
        raise ApertusError(f"{path}: unreadable: {e}") from None
    with f:
        try:
            for number, raw in bounded_lines(f, limit):
                where = f"{path}, line {number}"
                if isinstance(raw, LongLine):
                    raise ApertusError(
                        f"{where}: {format_bytes(raw.size)} long, over the limit of "
                        f"{format_bytes(limit)} a line may have; split the record, or check "
                        "that the file is JSON Lines (one object per line)"
                    )
                try:
                    line = raw.decode("utf-8")
                except UnicodeDecodeError as e:
                    raise ApertusError(
                        f"{where}: not UTF-8 ({e.reason} at byte {e.start})"
                    ) from None
                if not line.strip():
                    continue
                try:
                    row = json.loads(line)
                except json.JSONDecodeError as e:
                    raise ApertusError(f"{where}: not valid JSON ({e.msg})") from None
                if not isinstance(row, dict):
                    raise ApertusError(f"{where}: expected a JSON object, got {type(row).__name__}")
                yield where, row
        except OSError as e:
            raise ApertusError(f"{path}: unreadable: {e}") from None


def format_bytes(n: float) -> str:
    """A size in the binary unit that keeps it short: ``512 B``, ``40.0 MiB``, ``1.5 TiB``."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024:
            return f"{n:.0f} B" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"


# The longest line a JSON Lines file of hand-made records (SFT conversations, prompts, probes,
# evaluation items) may have: 16 MiB is a few million tokens, longer than any context window,
# so a longer line is a broken file (a JSON array on one line, a binary blob), not a record.
# The corpus readers have their own setting (data.sources[].max_line_bytes).
MAX_LINE_BYTES = 16 * 2**20

# How much of an over-long line is read at a time while it is skipped.
_DRAIN_BYTES = 1 << 20


@dataclass(frozen=True)
class LongLine:
    """A line over the limit, read past without being kept: its length in bytes."""

    size: int


def bounded_lines(stream: IO[bytes], max_bytes: int) -> Iterator[tuple[int, bytes | LongLine]]:
    """(line number from 1, line with its line end) of each line of a binary stream, or
    (number, `LongLine`) for a line whose bytes before the line end are more than `max_bytes`:
    at most ``max_bytes + 1`` bytes of a line are held at once (the rest of a long line is read
    in 1 MiB pieces and dropped), so one pathological line costs time, never memory."""
    if max_bytes < 1:
        raise ValueError(f"max_bytes must be at least 1, got {max_bytes}")
    number = 0
    while line := stream.readline(max_bytes + 1):
        number += 1
        if len(line) <= max_bytes or line.endswith(b"\n"):
            yield number, line
            continue
        size = len(line)
        del line
        while piece := stream.readline(min(max_bytes, _DRAIN_BYTES)):
            size += len(piece)
            if piece.endswith(b"\n"):
                break
        yield number, LongLine(size)
