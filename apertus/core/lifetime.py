"""Process lifetimes and exclusive locks: nothing a step starts outlives it, and no two runs
write into one folder.

- `die_with_parent` asks the kernel to kill this process when its parent dies (Linux's
  ``PR_SET_PDEATHSIG``). torchrun puts each worker in a session of its own (``setsid``), so a
  ``kill -9`` of Snakemake's process group reaches neither the workers nor, when the launcher
  is killed alone, torchrun: the launcher starts torchrun with `child_dies_with_us` and every
  trainer rank calls `die_with_parent` first thing, so the chain launcher -> torchrun -> ranks
  dies together, at once (SIGKILL: a dying trainer must not start writing a checkpoint).
- `exclusive_lock` holds an advisory ``flock`` on a lock file while a block runs, and records
  who holds it (host, PID, start time, command). A second holder is refused with that record.
  The kernel drops the lock when the holding process exits, however it exits, so a lock is
  never left behind by a killed process; only a host that vanished from a network filesystem
  can leave one, and the message says how to clear it.
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import json
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from apertus.core import ApertusError

__all__ = [
    "WORKFLOW_ENV",
    "LockHeld",
    "child_dies_with_us",
    "die_with_parent",
    "exclusive_lock",
    "hold_lock",
    "mark_workflow_process",
    "stop_with_workflow",
]

WORKFLOW_ENV = "APERTUS_WORKFLOW_PROCESS"
"""Set by the workflow's main Snakemake process for its jobs: ``host:pid:start time``."""

_PR_SET_PDEATHSIG = 1
# Resolved at import, before any fork: the forked child only calls it (no dlopen after fork).
_prctl = ctypes.CDLL(None, use_errno=True).prctl if sys.platform == "linux" else None


def _set_pdeathsig(sig: int) -> bool:
    return _prctl is not None and _prctl(_PR_SET_PDEATHSIG, sig, 0, 0, 0) == 0


def child_dies_with_us(sig: int = signal.SIGKILL) -> Callable[[], None]:
    """A `subprocess.Popen(preexec_fn=...)` that makes the child die with this process (Linux;
    elsewhere it does nothing)."""
    parent = os.getpid()

    def preexec() -> None:
        # In the forked child: the signal is set, then a parent that died before that is seen.
        if _set_pdeathsig(sig) and os.getppid() != parent:
            os._exit(1)

    return preexec


def die_with_parent(*expected_parent: str, sig: int = signal.SIGKILL) -> None:
    """Be killed with `sig` when the parent process dies (Linux; elsewhere nothing). A parent
    already gone (re-parented to init, or to a subreaper whose command line contains none of
    `expected_parent`) ends this process at once."""
    if not _set_pdeathsig(sig):
        return
    try:
        cmdline = Path(f"/proc/{os.getppid()}/cmdline").read_bytes().replace(b"\0", b" ")
    except OSError:
        return
    if os.getppid() == 1 or not any(name.encode() in cmdline for name in expected_parent):
        print(f"error: the parent process ({expected_parent[0]}) is gone; exiting", file=sys.stderr)
        os._exit(1)


def _stat_fields(pid: int | str) -> list[str] | None:
    """The fields of ``/proc/<pid>/stat`` after the command name (state, ppid, pgrp, ...), or
    None when there is no such process (or no /proc)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def _start_time(pid: int) -> str | None:
    """When process `pid` started (clock ticks since boot), or None when there is no such
    process: with the PID, it names one process (a PID is reused, a start time is not)."""
    fields = _stat_fields(pid)
    return fields[19] if fields and len(fields) > 19 else None


def group_members(pgid: int) -> list[int]:
    """The processes of process group `pgid` (Linux /proc; elsewhere none)."""
    members = []
    for entry in Path("/proc").glob("[0-9]*"):
        fields = _stat_fields(entry.name)
        if fields and int(fields[2]) == pgid:
            members.append(int(entry.name))
    return members


def mark_workflow_process() -> None:
    """In Snakemake's main process: name it to the jobs it starts (`stop_with_workflow`)."""
    start = _start_time(os.getpid())
    if start is not None:
        os.environ[WORKFLOW_ENV] = f"{socket.gethostname()}:{os.getpid()}:{start}"


def stop_with_workflow(interval_s: float = 2.0) -> None:
    """In a step: stop (SIGTERM to this process) when the Snakemake that started it is gone.

    A `kill -9` of Snakemake's main process alone leaves its jobs running, and a re-run would
    start the same job beside the orphan. Each step watches the process named in
    `WORKFLOW_ENV` from a daemon thread, when it runs on the same host outside SLURM (a SLURM
    job has its own life: the scheduler ends it); a training stage then saves a checkpoint and
    stops (apertus.train.launch forwards SIGTERM to its ranks)."""
    value = os.environ.get(WORKFLOW_ENV, "")
    host, _, rest = value.partition(":")
    pid, _, start = rest.partition(":")
    if not start or host != socket.gethostname() or "SLURM_JOB_ID" in os.environ:
        return
    if _start_time(int(pid)) != start:
        return  # already gone before this step started: not ours to judge (e.g. audit --rerun)

    def watch() -> None:
        while _start_time(int(pid)) == start:
            time.sleep(interval_s)
        print(
            f"error: the Snakemake that started this step (PID {pid}) is gone; stopping",
            file=sys.stderr,
            flush=True,
        )
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=watch, name="stop-with-workflow", daemon=True).start()


class LockHeld(ApertusError):
    """Another process holds the lock."""


def _holder_text(path: Path) -> str:
    try:
        holder = json.loads(path.read_text(encoding="utf-8"))
        return (
            f"PID {holder['pid']} on {holder['host']} since {holder['started']} "
            f"({holder['command']})"
        )
    except (OSError, ValueError, KeyError, TypeError):
        return "another process (its record is unreadable)"


@contextmanager
def exclusive_lock(path: str | os.PathLike[str], what: str) -> Iterator[None]:
    """Hold an exclusive lock on `path` (created if missing) while the block runs, or raise
    `LockHeld` naming `what` and the holder. On a filesystem without ``flock`` the block runs
    unlocked after a warning."""
    fd = hold_lock(path, what)
    try:
        yield
    finally:
        if fd is not None:
            os.close(fd)


def hold_lock(path: str | os.PathLike[str], what: str) -> int | None:
    """Take the lock of `exclusive_lock` and return its file descriptor, held until it is
    closed or this process exits (None where the filesystem cannot lock)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise LockHeld(
            f"{what} is in use by {_holder_text(path)} (lock {path}). Wait for it to finish or "
            "stop it; the lock goes with the process. Only if that host is gone for good and "
            f"the lock stays, delete {path}."
        ) from None
    except OSError as e:
        os.close(fd)
        if e.errno in (errno.ENOLCK, errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
            print(
                f"warning: cannot lock {path} on this filesystem ({e.strerror}); {what} is not "
                "protected against a second writer",
                file=sys.stderr,
            )
            return None
        raise
    record = {
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "started": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "command": " ".join(sys.argv)[:300],
    }
    os.ftruncate(fd, 0)
    os.pwrite(fd, json.dumps(record).encode(), 0)
    return fd
