"""Progress with an ETA for the long steps (filtering, tokenization, training, evaluation,
sampling), in their logs and, when run by hand, on the terminal.

A step runs as ``python -m apertus.<stage>.<module> ... > LOG 2>&1``, so its stderr is a file.
There `Progress` writes one self-contained line at most every ``APERTUS_PROGRESS_EVERY`` seconds
(default 30), and always on the first update and at the end::

  progress: training phase1 120/290 steps (41.4%) 1.83 steps/s elapsed 0:01:05 ETA 0:01:33 loss=6.12

With no known total there is no percentage and no ETA::

  progress: filtering web-0 5120 documents 85.3 documents/s elapsed 0:01:00

The rate is the units done since the `Progress` was made divided by the time since then (a
mean over the whole run, not a moving window: it is steady for the pipelines' documents and
the trainer's steps, but lags a change of speed, such as the global batch doubling in the
middle of pretraining), and the ETA is what remains of the total at that rate. On a terminal
the same line is redrawn in place (``\\r``) at most five times a second, and ends with a
newline at the end.

`parse_progress` reads such a line back into a `ProgressState`, and `last_progress` finds the
last one in a step's log (what a status view shows for a running step). `count_records` gives
the pipelines a cheap total for their input files.
"""

from __future__ import annotations

import bz2
import gzip
import lzma
import math
import os
import re
import shutil
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

__all__ = [
    "DEFAULT_EVERY_S",
    "PROGRESS_EVERY_ENV",
    "Progress",
    "ProgressState",
    "count_records",
    "format_duration",
    "format_progress",
    "last_progress",
    "parse_progress",
]

PROGRESS_EVERY_ENV = "APERTUS_PROGRESS_EVERY"
DEFAULT_EVERY_S = 30.0
# A terminal line is redrawn at most this often: a few times a second reads as live.
REDRAW_EVERY_S = 0.2

FieldValue = int | float | str


@dataclass(frozen=True)
class ProgressState:
    """Where a long step stands: `done` of `total` `unit` (None: not known) of `what`, at
    `rate` units per second since its start, `elapsed_s` after it, `eta_s` seconds left (None
    without a total or before the first unit), and the step's own `fields` (e.g. loss)."""

    what: str
    done: int
    total: int | None
    unit: str
    rate: float
    elapsed_s: float
    eta_s: float | None
    fields: dict[str, FieldValue] = field(default_factory=dict)

    @property
    def percent(self) -> float | None:
        if self.total is None:
            return None
        return 100.0 * self.done / self.total if self.total else 100.0


# ---------------------------------------------------------------------------------------------
# The line


def format_duration(seconds: float) -> str:
    """``H:MM:SS`` (hours not bounded, rounded to the second, negatives as 0:00:00)."""
    if not math.isfinite(seconds):
        raise ValueError(f"a duration must be finite, got {seconds!r}")
    hours, rest = divmod(max(0, round(seconds)), 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}"


def _parse_duration(text: str) -> float:
    hours, minutes, secs = (int(part) for part in text.split(":"))
    return float(hours * 3600 + minutes * 60 + secs)


def _format_rate(rate: float) -> str:
    if rate >= 100:
        return f"{rate:.0f}"
    if rate >= 1:
        return f"{rate:.2f}"
    return f"{rate:.3g}"


def _format_value(value: FieldValue) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            return str(value)
        return f"{value:.1f}" if abs(value) >= 1000 else f"{value:.4g}"
    # One token per field: the line is split on spaces.
    return re.sub(r"\s+", "_", str(value)) or "_"


def _parse_value(text: str) -> FieldValue:
    if re.fullmatch(r"-?\d+", text):
        return int(text)
    try:
        return float(text)
    except ValueError:
        return text


def format_progress(state: ProgressState) -> str:
    """The log line of `state` (module doc), without a newline."""
    count = f"{state.done}" if state.total is None else f"{state.done}/{state.total}"
    parts = [f"progress: {state.what} {count} {state.unit}"]
    if state.percent is not None:
        parts.append(f"({state.percent:.1f}%)")
    parts.append(f"{_format_rate(state.rate)} {state.unit}/s")
    parts.append(f"elapsed {format_duration(state.elapsed_s)}")
    if state.eta_s is not None:
        parts.append(f"ETA {format_duration(state.eta_s)}")
    parts += [f"{key}={_format_value(value)}" for key, value in state.fields.items()]
    return " ".join(parts)


_DURATION = r"\d+:\d\d:\d\d"
# `what` may hold spaces and digits; the unit repeated in "<unit>/s" anchors the count.
_LINE = re.compile(
    r"progress: (?P<what>.+?) (?P<done>\d+)(?:/(?P<total>\d+))? (?P<unit>[^\s/=()]+)"
    r"(?: \((?P<percent>\d+(?:\.\d+)?)%\))? (?P<rate>\S+) (?P=unit)/s"
    rf" elapsed (?P<elapsed>{_DURATION})(?: ETA (?P<eta>{_DURATION}))?"
    r"(?P<fields>(?: [^\s=]+=\S+)*)\s*$"
)
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def parse_progress(line: str) -> ProgressState | None:
    """The state a progress line gives, or None if `line` holds none. Text before
    ``progress:`` (a logging prefix) and terminal control sequences are ignored."""
    match = _LINE.search(_ANSI.sub("", line))
    if match is None:
        return None
    try:
        rate = float(match["rate"])
    except ValueError:
        return None
    fields: dict[str, FieldValue] = {}
    for item in match["fields"].split():
        key, _, value = item.partition("=")
        fields[key] = _parse_value(value)
    return ProgressState(
        what=match["what"],
        done=int(match["done"]),
        total=None if match["total"] is None else int(match["total"]),
        unit=match["unit"],
        rate=rate,
        elapsed_s=_parse_duration(match["elapsed"]),
        eta_s=None if match["eta"] is None else _parse_duration(match["eta"]),
        fields=fields,
    )


def last_progress(
    log_path: str | os.PathLike[str], *, max_bytes: int = 8 << 20
) -> ProgressState | None:
    """The last progress state in a log file, or None (no file, empty, no progress line in its
    last `max_bytes`). Reads backwards from the end in blocks; terminal redraws (lines
    separated by ``\\r``) count as lines."""
    try:
        f = open(log_path, "rb")  # noqa: SIM115 (closed below; the size is needed first)
    except (FileNotFoundError, IsADirectoryError):
        return None
    with f:
        end = f.seek(0, os.SEEK_END)
        position, carried = end, b""
        block = 1 << 16
        while position > 0 and end - position < max_bytes:
            start = max(0, position - block)
            f.seek(start)
            data = f.read(position - start) + carried
            position = start
            lines = re.split(rb"[\r\n]", data)
            # The first piece may be the tail of a line that starts in an earlier block.
            carried = lines.pop(0) if position > 0 else b""
            for raw in reversed(lines):
                if b"progress: " in raw:
                    state = parse_progress(raw.decode("utf-8", errors="replace"))
                    if state is not None:
                        return state
        if carried and b"progress: " in carried:
            return parse_progress(carried.decode("utf-8", errors="replace"))
    return None


# ---------------------------------------------------------------------------------------------
# The writer


def _interval_from_env() -> float:
    raw = os.environ.get(PROGRESS_EVERY_ENV)
    if raw is None or raw.strip() == "":
        return DEFAULT_EVERY_S
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"{PROGRESS_EVERY_ENV} must be a number of seconds >= 0, got {raw!r}")
    return value


def _is_terminal(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError, OSError):
        return False


class Progress:
    """Progress of one long loop, with an ETA: a log line every `every_s` seconds when
    `stream` (default stderr) is a file or a pipe, a line redrawn in place on a terminal.

    ``with Progress(total, "training phase1", unit="steps") as progress:`` then
    ``progress.update(1, loss=6.12)`` per step. `total` None: count and rate, no ETA.
    `every_s` None reads ``APERTUS_PROGRESS_EVERY`` (default 30 s); 0 writes every update.
    `initial` starts the count (a resumed run: the rate counts only this run's units).
    `clock` is a monotonic clock in seconds (tests inject their own). An update costs a
    counter and a clock read; nothing is written between intervals. A stream that fails is
    left alone: progress never stops the step it reports on.
    """

    def __init__(
        self,
        total: int | None,
        what: str,
        unit: str = "items",
        stream: IO[str] | None = None,
        every_s: float | None = None,
        *,
        initial: int = 0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if total is not None and (isinstance(total, bool) or not isinstance(total, int)):
            raise TypeError(f"total must be an int or None, got {total!r}")
        if total is not None and total < 0:
            raise ValueError(f"total must be >= 0, got {total}")
        if not re.fullmatch(r"[^\s/=()]+", unit):
            raise ValueError(f"unit must be one word without '/', '=' or parentheses: {unit!r}")
        what = " ".join(str(what).split())
        if not what:
            raise ValueError("what must name the work")
        if every_s is not None and not (math.isfinite(every_s) and every_s >= 0):
            raise ValueError(f"every_s must be a number of seconds >= 0, got {every_s!r}")
        self.total, self.what, self.unit = total, what, unit
        self.stream = stream if stream is not None else sys.stderr
        self.terminal = _is_terminal(self.stream)
        interval = _interval_from_env() if every_s is None else float(every_s)
        self.every_s = REDRAW_EVERY_S if self.terminal else interval
        self.initial = self.done = initial
        self.fields: dict[str, FieldValue] = {}
        self._clock = clock
        self._start = clock()
        self._last_write: float | None = None
        self._closed = False

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def update(self, n: int = 1, **fields: FieldValue | None) -> None:
        """`n` more units done; `fields` (None drops one) are shown from now on."""
        self.done += n
        if fields:
            for key, value in fields.items():
                if value is None:
                    self.fields.pop(key, None)
                else:
                    self.fields[key] = value
        now = self._clock()
        if self._last_write is None or now - self._last_write >= self.every_s:
            self._write(now)

    def state(self, now: float | None = None) -> ProgressState:
        """The state now (or at clock time `now`)."""
        elapsed = max(0.0, (self._clock() if now is None else now) - self._start)
        since = self.done - self.initial
        rate = since / elapsed if since > 0 and elapsed > 0 else 0.0
        eta = None
        if self.total is not None:
            left = max(self.total - self.done, 0)
            if left == 0:
                eta = 0.0
            elif rate > 0:
                eta = left / rate
        return ProgressState(
            what=self.what,
            done=self.done,
            total=self.total,
            unit=self.unit,
            rate=rate,
            elapsed_s=elapsed,
            eta_s=eta,
            fields=dict(self.fields),
        )

    @property
    def eta_s(self) -> float | None:
        return self.state().eta_s

    def close(self) -> None:
        """Write the final state (and end the terminal line); later calls do nothing."""
        if self._closed:
            return
        self._write(self._clock(), final=True)
        self._closed = True

    def _write(self, now: float, final: bool = False) -> None:
        if self._closed:
            return
        self._last_write = now
        line = format_progress(self.state(now))
        try:
            if self.terminal:
                width = shutil.get_terminal_size((120, 24)).columns - 1
                self.stream.write("\r" + line[:width] + "\x1b[K" + ("\n" if final else ""))
            else:
                self.stream.write(line + "\n")
            self.stream.flush()
        except (OSError, ValueError):
            self._closed = True


# ---------------------------------------------------------------------------------------------
# Totals for the pipelines

# Compressed input read line by line for an exact count; past it, the count is extrapolated
# from the lines per compressed byte so far (a few seconds of decompression at most).
COUNT_BUDGET_BYTES = 64 << 20
_JSON_LINES = re.compile(r"\.(jsonl|json|ndjson)(\.(gz|bz2|xz|zst|zstd))?$")


def _open_decompressed(raw: IO[bytes], name: str) -> IO[bytes]:
    if name.endswith(".gz"):
        return gzip.GzipFile(fileobj=raw)
    if name.endswith(".bz2"):
        return bz2.BZ2File(raw)
    if name.endswith(".xz"):
        return lzma.LZMAFile(raw)
    if name.endswith((".zst", ".zstd")):
        import zstandard  # ImportError: no cheap count

        return zstandard.ZstdDecompressor().stream_reader(raw)
    return raw


def _count_lines(path: Path, max_bytes: int) -> tuple[int, int, bool]:
    """(lines, file bytes read, whole file read) of a JSON Lines file, stopping once
    `max_bytes` of the (compressed) file are read."""
    lines, last = 0, b""
    with open(path, "rb") as raw:
        reader = _open_decompressed(raw, path.name.lower())
        while True:
            chunk = reader.read(1 << 20)
            if not chunk:
                complete = True
                break
            lines += chunk.count(b"\n")
            last = chunk
            if raw.tell() >= max_bytes:
                complete = False
                break
        used = raw.tell()
    if complete and last and not last.endswith(b"\n"):
        lines += 1
    return lines, used, complete


def count_records(
    paths: Iterable[str | os.PathLike[str]], *, budget_bytes: int = COUNT_BUDGET_BYTES
) -> int | None:
    """Records in local input files, cheaply, for a progress total; None when not known.

    Parquet: the row counts in the footers (exact). JSON Lines (``.jsonl``/``.json``/
    ``.ndjson``, plain or ``.gz``/``.bz2``/``.xz``/``.zst``): newlines, counted without
    parsing in the first `budget_bytes` of input and extrapolated by file size past them;
    blank and malformed lines count, so it is an upper bound of what a reader yields. Any
    other format (WARC), an unreadable file or a missing decompressor: None.
    """
    parquet_rows = lines = 0
    counted_bytes = uncounted_bytes = 0
    for path in map(Path, paths):
        name = path.name.lower()
        try:
            if name.endswith(".parquet"):
                import pyarrow.parquet as pq

                parquet_rows += pq.ParquetFile(path).metadata.num_rows
            elif _JSON_LINES.search(name):
                size = path.stat().st_size
                if counted_bytes >= budget_bytes:
                    uncounted_bytes += size
                    continue
                n, used, complete = _count_lines(path, budget_bytes - counted_bytes)
                lines += n
                counted_bytes += used
                if not complete:
                    uncounted_bytes += max(size - used, 0)
            else:
                return None
        except Exception:  # a damaged file is the reader's to report, not the progress line's
            return None
    if uncounted_bytes:
        if not counted_bytes:
            return None
        lines += round(lines * uncounted_bytes / counted_bytes)
    return parquet_rows + lines
