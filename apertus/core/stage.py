"""The stage runner: how one step of a stage is started by its rule and leaves its manifest.

A rule calls one module entry point::

    python -m apertus.<stage>.<step> --config {params.config:q} --manifest {output.manifest} ...

and the entry point is written as::

    def main(argv=None):
        parser = stage_parser("tokenize", "Tokenize the filtered corpus into shards.")
        parser.add_argument("--input", ...)
        args = parser.parse_args(argv)
        cfg = ShardsConfig.from_dict(args.config)   # a Config dataclass (apertus.core.typed)
        with StepRun("tokenize", "shards", args.config, inputs=[...], outputs=[...],
                     manifest=args.manifest, seed=cfg.seed) as step:
            ...                       # the real work
            step.summary["documents"] = n

    if __name__ == "__main__":
        run_main(main)

The manifest is written only when the work finished without error; a failed step leaves none,
and Snakemake removes its partial outputs.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import errno
import hashlib
import io
import json
import logging
import os
import shutil
import sys
import tempfile
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO, Any

from apertus.core import ApertusError
from apertus.core.files import format_bytes
from apertus.core.lifetime import stop_with_workflow
from apertus.core.manifest import describe_path, write_manifest
from apertus.core.provenance import check_inputs, run_dir_of_step

log = logging.getLogger("apertus")


def setup_logging(level: str = "INFO") -> None:
    """Timestamped lines on stderr, which the rule sends to its `log:` file."""
    logging.basicConfig(
        level=level,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        datefmt="%Y-%m-%d %H:%M:%S",
        stream=sys.stderr,
        force=True,
    )


# Kept free on the filesystem of a step's log, for its last lines when that filesystem fills up.
LOG_RESERVE_BYTES = 256 * 1024


def is_error_line(line: str) -> bool:
    """Whether a log line is an error line: ``error: ...`` as `run_main` ends a failed step,
    or ``<who>: error: ...`` (the launcher's diagnosis, an error logged by the step)."""
    return line.lstrip().startswith("error: ") or ": error: " in line


def fallback_log_dirs() -> list[Path]:
    """Where a step's log continues when its own filesystem is full, first choice first: the
    user's cache (on a cluster, shared by the nodes and the login node), the session's runtime
    folder, the temporary folder. `failure_summary` looks in the same places."""
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    dirs = [Path(cache) / "apertus" / "logs"]
    if os.environ.get("XDG_RUNTIME_DIR"):
        dirs.append(Path(os.environ["XDG_RUNTIME_DIR"]) / "apertus" / "logs")
    dirs.append(Path(tempfile.gettempdir()) / f"apertus-{os.getuid()}" / "logs")
    return dirs


def fallback_log_name(log: str | os.PathLike[str]) -> str:
    """The fallback log's file name for the log at `log`: its name and a hash of its path."""
    resolved = os.path.realpath(log)
    digest = hashlib.sha256(resolved.encode("utf-8", "surrogateescape")).hexdigest()[:12]
    return f"{Path(resolved).stem}-{digest}.log"


def _regular_file(fd: int) -> Path | None:
    """The path of the regular file open as `fd` (a step's `log:`); None for a terminal, a pipe."""
    try:
        if not os.path.isfile(f"/proc/self/fd/{fd}"):
            return None
        return Path(os.readlink(f"/proc/self/fd/{fd}"))
    except OSError:
        return None


def _same_file(fd: int, other: int) -> bool:
    try:
        one, two = os.fstat(fd), os.fstat(other)
    except OSError:
        return False
    return (one.st_dev, one.st_ino) == (two.st_dev, two.st_ino)


def _reserve(directory: Path, size: int) -> IO[bytes] | None:
    """An unnamed file of `size` bytes on the filesystem of `directory` (freed when closed, or
    when the process ends however it ends), or None where there is no room or no permission."""
    if size <= 0:
        return None
    try:
        reserve = tempfile.TemporaryFile(dir=directory)  # noqa: SIM115 (held open: the reserve)
    except OSError:
        return None
    try:
        try:
            os.posix_fallocate(reserve.fileno(), 0, size)
        except OSError as e:
            if e.errno in (errno.ENOSPC, errno.EDQUOT):
                raise
            reserve.write(bytes(size))  # a filesystem without fallocate
            reserve.flush()
            os.fsync(reserve.fileno())
    except OSError:
        reserve.close()
        return None
    return reserve


class StepLog(io.TextIOBase):
    """A step's stderr, its `log:` file, that a full disk cannot silence.

    Written straight to the file descriptor, unbuffered, so nothing is left in a buffer to
    be flushed out of order later. When a write fails (no space left, quota), the log
    continues in a fallback log on another filesystem (`fallback_log_dirs`), where the failed
    write goes too; the step's own log gets a line naming the fallback and, from then on, every
    error line (`is_error_line`: the launcher's diagnosis, the step's last word with its
    resume point), written into the space reserved at the start (`LOG_RESERVE_BYTES`, freed
    only for those writes). A write never raises: a failed log must not fail the step, nor
    print `--- Logging error ---` into the log it cannot write.
    """

    def __init__(
        self, fd: int = 2, path: str | os.PathLike[str] | None = None, reserve: bool = True
    ) -> None:
        self.fd = fd
        self.path = Path(path) if path is not None else _regular_file(fd)
        self._reserve_size = LOG_RESERVE_BYTES if reserve and self.path else 0
        self._reserve = _reserve(self.path.parent, self._reserve_size) if self.path else None
        self.fallback_path: Path | None = None
        self._fallback: IO[str] | None = None
        self.spilled = False
        self.dropped = 0  # characters neither log could take
        self._line = ""  # the unfinished line since the spill, for `is_error_line`
        self._lock = threading.RLock()

    @property
    def encoding(self) -> str:
        return "utf-8"

    @property
    def errors(self) -> str:
        return "backslashreplace"

    @property
    def buffer(self) -> _BinaryLog:
        return _BinaryLog(self)

    def writable(self) -> bool:
        return True

    def fileno(self) -> int:
        return self.fd

    def isatty(self) -> bool:
        try:
            return os.isatty(self.fd)
        except OSError:
            return False

    def flush(self) -> None:
        if self._fallback is not None:
            with contextlib.suppress(OSError):
                self._fallback.flush()

    def write(self, text: str) -> int:
        with self._lock:
            return self._write(text)

    def _write(self, text: str) -> int:
        if not self.spilled:
            try:
                self._write_fd(text)
                return len(text)
            except OSError as e:
                self._spill(e)
        self._to_fallback(text)
        self._line += text
        if "\n" in self._line:
            *lines, self._line = self._line.split("\n")
            for line in lines:
                if is_error_line(line):
                    self._to_log(line + "\n")
        self._line = self._line[-65536:]
        return len(text)

    def _write_fd(self, text: str) -> None:
        data = memoryview(text.encode("utf-8", "backslashreplace"))
        while data:
            data = data[os.write(self.fd, data) :]

    def _to_log(self, text: str) -> None:
        """Write `text` into the log in the reserved space: freed for this write, then taken
        again less what the write used (and a block's slack), so that neither another process
        nor a `free_space` report sees it."""
        if self._reserve is not None:
            self._reserve.close()
            self._reserve = None
        with contextlib.suppress(OSError):  # the fallback has it
            self._write_fd(text)
        self._reserve_size = max(0, self._reserve_size - len(text.encode()) - 8192)
        if self._reserve_size >= 4096 and self.path is not None:
            self._reserve = _reserve(self.path.parent, self._reserve_size)

    def _to_fallback(self, text: str) -> None:
        try:
            if self._fallback is None:
                raise OSError(errno.ENOENT, "no fallback log")
            self._fallback.write(text)
            self._fallback.flush()
        except OSError:
            self.dropped += len(text)

    def _spill(self, error: OSError) -> None:
        self.spilled = True
        here = f" ({free_space(self.path)})" if self.path else ""
        name = fallback_log_name(self.path) if self.path else f"step-{os.getpid()}.log"
        self.fallback_path, self._fallback = _open_fallback(name, self.path)
        what = _ENVIRONMENT_ERRORS.get(error.errno, error.strerror or str(error))
        where = self.fallback_path or "nowhere (no fallback log could be opened)"
        stamp = dt.datetime.now().strftime("%Y-%m-%d %H:%M:%S")
        self._to_log(
            f"\n{stamp} apertus: cannot write this log: {what}{here}; it continues in {where}\n"
        )
        self._to_fallback(
            f"{stamp} apertus: continued from {self.path or f'fd {self.fd}'}, which it cannot "
            f"write: {what}{here}\n"
        )


class _BinaryLog:
    """`StepLog.buffer`: bytes written through the same log."""

    def __init__(self, log: StepLog) -> None:
        self.log = log

    def write(self, data: bytes) -> int:
        self.log.write(bytes(data).decode("utf-8", "backslashreplace"))
        return len(data)

    def flush(self) -> None:
        self.log.flush()


def _open_fallback(name: str, log: Path | None) -> tuple[Path | None, IO[str] | None]:
    """The first fallback log that opens, one on another filesystem than `log` first."""
    try:
        device = os.stat(log.parent).st_dev if log else None
    except OSError:
        device = None
    candidates = fallback_log_dirs()

    def elsewhere(directory: Path) -> bool:
        for parent in (directory, *directory.parents):
            try:
                return os.stat(parent).st_dev != device
            except OSError:
                continue
        return True

    for directory in sorted(candidates, key=lambda d: not elsewhere(d)):
        try:
            directory.mkdir(parents=True, exist_ok=True, mode=0o700)
            path = directory / name
            return path, open(path, "a", encoding="utf-8", errors="backslashreplace")
        except OSError:
            continue
    return None, None


def parse_config_argument(text: str) -> dict[str, Any]:
    """The `--config` argument: a stage's config subtree as JSON (what `stage_config()` gives)."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as e:
        raise argparse.ArgumentTypeError(f"--config is not valid JSON ({e})") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError("--config must be a JSON object (a config subtree)")
    return value


def stage_parser(stage: str, description: str) -> argparse.ArgumentParser:
    """An argument parser with the arguments every step takes: --config and --manifest."""
    parser = argparse.ArgumentParser(prog=f"apertus {stage}", description=description)
    parser.add_argument(
        "--config",
        type=parse_config_argument,
        required=True,
        help="the stage's config subtree as JSON (the rule passes its params)",
    )
    parser.add_argument(
        "--manifest", type=Path, required=True, help="where to write this step's manifest.json"
    )
    return parser


class StepRun:
    """Context of one step: times it, and on success writes its manifest (atomically)."""

    def __init__(
        self,
        stage: str,
        step: str,
        config: dict[str, Any],
        *,
        inputs: Sequence[str | os.PathLike],
        outputs: Sequence[str | os.PathLike],
        manifest: str | os.PathLike,
        seed: int | None = None,
    ) -> None:
        self.stage, self.step, self.config = stage, step, config
        self.inputs, self.outputs = list(inputs), list(outputs)
        self.manifest_path = Path(manifest)
        self.seed = seed
        self.summary: dict[str, Any] = {}
        self.manifest: dict[str, Any] | None = None

    def __enter__(self) -> StepRun:
        missing = [str(p) for p in self.inputs if not Path(p).exists()]
        if missing:
            raise ApertusError(f"{self.stage}/{self.step}: missing input(s): {', '.join(missing)}")
        self.started = dt.datetime.now(dt.UTC)
        log.info("%s/%s started", self.stage, self.step)
        # Hashed for the manifest now, before they are read: an input another step of the run
        # wrote must hold the bytes that step recorded (apertus.core.provenance).
        self.described_inputs = [describe_path(p) for p in self.inputs]
        check_inputs(self.described_inputs, run_dir_of_step())
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is not None:
            log.error("%s/%s failed: no manifest written", self.stage, self.step)
            return
        missing = [str(p) for p in self.outputs if not Path(p).exists()]
        if missing:
            raise ApertusError(
                f"{self.stage}/{self.step}: finished without writing: {', '.join(missing)}"
            )
        ended = dt.datetime.now(dt.UTC)
        self.manifest = write_manifest(
            self.manifest_path,
            stage=self.stage,
            step=self.step,
            config=self.config,
            inputs=self.described_inputs,
            outputs=self.outputs,
            seed=self.seed,
            started=self.started,
            ended=ended,
            summary=self.summary,
        )
        log.info(
            "%s/%s done in %.1f s; manifest %s",
            self.stage,
            self.step,
            (ended - self.started).total_seconds(),
            self.manifest_path,
        )


# What the machine refused, and what to do (the step's outputs are atomic: nothing it left
# half-written looks complete, and a re-run starts or resumes the step).
_ENVIRONMENT_ERRORS = {
    errno.ENOSPC: "no space left on device",
    errno.EDQUOT: "disk quota exceeded",
    errno.EACCES: "permission denied",
    errno.EPERM: "operation not permitted",
    errno.EROFS: "read-only filesystem",
    errno.ENOMEM: "out of memory",
}


def free_space(path: str | os.PathLike[str]) -> str:
    """Free and total space of the filesystem holding `path` (or its nearest existing parent)."""
    for candidate in (Path(path), *Path(path).absolute().parents):
        try:
            usage = shutil.disk_usage(candidate)
        except OSError:
            continue
        return f"{format_bytes(usage.free)} free of {format_bytes(usage.total)} there"
    return "free space unknown"


def _fullest_place() -> str:
    """Of the places a step writes to (its run folder, its log's folder, the working folder),
    the one whose filesystem has the least space free: where an ENOSPC without a file name
    (a write to an open file) most likely came from."""
    places = [run_dir_of_step(), Path.cwd()]
    if isinstance(sys.stderr, StepLog) and sys.stderr.path is not None:
        places.insert(0, sys.stderr.path.parent)
    free = []
    for place in places:
        if place is None:
            continue
        try:
            free.append((shutil.disk_usage(place).free, str(place)))
        except OSError:
            continue
    return min(free)[1] if free else os.getcwd()


def environment_error(error: BaseException) -> str | None:
    """One line for a failure the machine caused (disk full, quota, permissions, read-only
    filesystem, memory): what, where, and what to do; None for any other error."""
    if isinstance(error, MemoryError):
        return (
            "out of memory in this step: give its rule more memory (resources in the config "
            "or the profile) or lower its batch size, then re-run"
        )
    if not isinstance(error, OSError) or error.errno not in _ENVIRONMENT_ERRORS:
        return None
    what = _ENVIRONMENT_ERRORS[error.errno]
    where = error.filename if error.filename is not None else _fullest_place()
    if error.errno in (errno.ENOSPC, errno.EDQUOT):
        advice = (
            f"{free_space(where)}; free space (or move results_dir to a larger filesystem) "
            "and re-run: finished steps and checkpoints are kept, and nothing half-written "
            "is taken for complete"
        )
    elif error.errno == errno.ENOMEM:
        advice = "give the step more memory or lower its batch size, then re-run"
    else:
        advice = "check the owner and mode of the path (ls -l), then re-run"
    target = f": {where}" if error.filename is not None else ""
    if error.filename is None and error.errno in (errno.ENOSPC, errno.EDQUOT):
        target = f" (the fullest filesystem this step writes to holds {where})"
    said = f" ({error.strerror})" if str(error.strerror).lower() != what else ""
    return f"{what}{target}{said}: {advice}"


# What a re-run of the running step resumes from (`set_resume_point`).
_resume_point: list[str] = []


def set_resume_point(where: str) -> None:
    """Name what a re-run of this step resumes from (a training step's last checkpoint, or
    that there is none): the step's final `error:` line ends with it."""
    _resume_point[:] = [where]


def _tail(path: Path, size: int = 65536) -> list[str]:
    with open(path, "rb") as f:
        f.seek(max(0, os.fstat(f.fileno()).st_size - size))
        return f.read().decode("utf-8", "replace").splitlines()


def _fallback_of(log: Path, since: float) -> Path | None:
    """The newest fallback log of `log` (`StepLog`) written since `since`, or None."""
    found = []
    for directory in fallback_log_dirs():
        path = directory / fallback_log_name(log)
        try:
            mtime = path.stat().st_mtime
        except OSError:
            continue
        if mtime >= since:
            found.append((mtime, path))
    return max(found)[1] if found else None


def failure_summary(run_dir: str | os.PathLike[str], since: float) -> list[str]:
    """After a failed Snakemake run: the last two `error:` lines of every step log written
    since `since` (a time.time()), read from its fallback log too when its disk was full
    (`StepLog`, whose path is then named), and a warning when the results folder's filesystem
    is (nearly) full, since a full disk may have cut the logs themselves. For the workflow's
    `onerror`, whose output reaches the terminal even when the logs' disk cannot take a line
    more."""
    run_dir = Path(run_dir)
    lines = []
    for log in sorted((run_dir / "logs").rglob("*.log")):
        try:
            if log.stat().st_mtime < since:
                continue
            tail = _tail(log)
        except OSError:
            continue
        fallback = _fallback_of(log, since)
        if fallback is not None:
            with contextlib.suppress(OSError):
                tail += _tail(fallback)
        found = [line.strip() for line in tail if is_error_line(line)]
        errors = list(dict.fromkeys(reversed(found)))[:2][::-1]  # the last two, distinct
        for i, error in enumerate(errors):
            continued = (
                f" [the disk was full: the log continues in {fallback}]"
                if fallback is not None and i == len(errors) - 1
                else ""
            )
            lines.append(f"{log}: {error}{continued}")
        if not errors and fallback is not None:
            lines.append(f"{log}: cut short (the disk was full); it continues in {fallback}")
    try:
        usage = shutil.disk_usage(run_dir if run_dir.exists() else run_dir.parent)
    except OSError:
        return lines
    if usage.free < min(2**30, usage.total // 100):
        lines.append(
            f"error: the filesystem of {run_dir} is full ({free_space(run_dir)}): steps fail "
            "with 'No space left on device' and their logs may be cut; free space or move "
            "results_dir, then re-run (finished steps and checkpoints are kept)"
        )
    return lines


def _final_error(message: str) -> None:
    """The step's last word, one line on stderr (a `StepLog` keeps it when the disk is full)."""
    if _resume_point:
        message += f" (resume point: {_resume_point[0]})"
    sys.stderr.write(f"error: {message}\n")
    sys.stderr.flush()


def run_main(main: Callable[[list[str] | None], Any], argv: list[str] | None = None) -> None:
    """Run a step's `main`; a user-fixable error becomes one 'error:' line and exit code 2, as
    does a failure the machine caused (`environment_error`: disk full, permissions, memory).
    The line ends with the resume point a training step named (`set_resume_point`). The
    step's stderr becomes a `StepLog`, which a full disk cannot silence, and so does its
    stdout when both go to the same file (a rule's `> {log} 2>&1`).

    Log verbosity comes from APERTUS_LOG_LEVEL (default INFO).
    """
    if sys.stderr is sys.__stderr__ and sys.stderr is not None:
        sys.stderr.flush()
        sys.stderr = StepLog(sys.stderr.fileno())
        if sys.stdout is sys.__stdout__ and sys.stdout is not None and _same_file(1, 2):
            # `> {log} 2>&1`: what the step prints (the trainer's output, forwarded by the
            # launcher) goes on into the same fallback log, in order.
            sys.stdout.flush()
            sys.stdout = sys.stderr
    setup_logging(os.environ.get("APERTUS_LOG_LEVEL", "INFO"))
    stop_with_workflow()  # no job outlives the Snakemake that started it
    try:
        main(argv)
    except ApertusError as e:
        _final_error(str(e))
        sys.exit(2)
    except KeyboardInterrupt:
        sys.exit(130)
    except (OSError, MemoryError) as e:
        message = environment_error(e)
        if message is None:
            raise
        _final_error(message)
        sys.exit(2)
