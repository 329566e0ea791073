"""A rank that stops stepping ends the run instead of holding the allocation (issue 46).

Every rank runs a `StepWatchdog` thread beside its training loop. The loop beats it at the end
of each step (`beat`); from the first step on (the first includes compilation and the
checkpoint's load), no beat for `HANG_TIMEOUT_ENV` seconds means the rank hangs, or waits for
one that does: in a collective whose peer never arrives, in a data read that never returns, in
a deadlock. The watchdog then writes what the user needs to find the cause,
``<metrics folder>/hang/rank-<R>.txt`` (its host and PID, the last step it finished, how long
ago, and the stack of every thread of the process: the hung rank's shows where it is, the
others' show the collective they wait in), and ends the process with `HUNG`. Every rank's
watchdog fires about together, since the ranks step together; torchrun ends the rest. The
launcher (`apertus.train.launch`) then names the files and stops like a preempted run: a SLURM
job is requeued and resumes from its last checkpoint, instead of waiting for its time limit.

The process group's own timeout of a collective (torchtitan's ``comm.train_timeout_seconds``,
100 s by default) would end a waiting rank first, with no stack of the one it waited for:
`apertus.train.config_registry` sets it above the watchdog's (`collective_timeout`).

`HANG_AT_ENV` ("<rank>:<step>") makes that rank stop stepping after that step, sleeping inside
the loop, as a hung rank does: the fault the tests inject (tests/train/test_watchdog.py).
"""

from __future__ import annotations

import faulthandler
import os
import socket
import threading
import time
from pathlib import Path

from apertus.core import ApertusError

HANG_TIMEOUT_ENV = "APERTUS_HANG_TIMEOUT_S"
"""Seconds without a finished step before a rank counts as hung (default `DEFAULT_TIMEOUT_S`)."""
DEFAULT_TIMEOUT_S = 1800.0
"""30 minutes: an 8B or 70B step takes seconds, a synchronous checkpoint of 70B a few minutes."""
HANG_AT_ENV = "APERTUS_TEST_HANG_AT"
HANG_FOLDER = "hang"
"""Under the metrics folder: one ``rank-<R>.txt`` per rank that timed out."""
HUNG = 76
"""The exit code of a rank whose watchdog fired."""


def hang_timeout(env: dict[str, str] | None = None) -> float:
    """The watchdog's timeout from `HANG_TIMEOUT_ENV` (an ApertusError names a bad value)."""
    raw = (os.environ if env is None else env).get(HANG_TIMEOUT_ENV)
    if raw is None or raw == "":
        return DEFAULT_TIMEOUT_S
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not value > 0:
        raise ApertusError(f"{HANG_TIMEOUT_ENV}={raw!r}: give a number of seconds > 0")
    return value


def collective_timeout(timeout: float) -> int:
    """The process group's timeout of a collective in training: past the watchdog's, so that
    the watchdog speaks first, and never under torchtitan's default of 100 s."""
    return max(100, int(timeout) + 60)


class StepWatchdog:
    """The watchdog of one rank (see the module docstring). Armed by the first `beat`."""

    def __init__(self, timeout: float, folder: Path, rank: int) -> None:
        self.timeout, self.folder, self.rank = timeout, Path(folder), rank
        self.step: int | None = None
        self.last_beat = time.monotonic()
        hang_at = os.environ.get(HANG_AT_ENV, "")
        rank_text, _, step_text = hang_at.partition(":")
        self._hang_at = int(step_text) if hang_at and int(rank_text) == rank else None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="step-watchdog", daemon=True)
        self._thread.start()

    def beat(self, step: int) -> None:
        """Step `step` has ended on this rank."""
        # The time first: the watch thread reads `step` as "armed" and must never pair it with
        # the time before a long first step.
        self.last_beat = time.monotonic()
        self.step = step
        if self._hang_at is not None and step >= self._hang_at:
            while True:  # the injected fault: this rank never steps again
                time.sleep(3600)

    def close(self) -> None:
        self._stop.set()

    def _watch(self) -> None:
        tick = min(self.timeout / 4, 10.0)
        while not self._stop.wait(tick):
            if self.step is None:
                continue
            quiet = time.monotonic() - self.last_beat
            if quiet > self.timeout:
                self._report(quiet)
                os._exit(HUNG)

    def _report(self, quiet: float) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        path = self.folder / f"rank-{self.rank}.txt"
        with open(path, "w") as f:
            f.write(
                f"rank {self.rank} on {socket.gethostname()} (pid {os.getpid()}): no step "
                f"ended for {quiet:.0f} s (timeout {self.timeout:g} s, {HANG_TIMEOUT_ENV}); "
                f"the last one was step {self.step}.\nThe stacks of its threads, the most "
                "recent call first:\n"
            )
            f.flush()
            faulthandler.dump_traceback(f, all_threads=True)


def hang_reports(metrics_folder: Path) -> dict[int, str]:
    """The ranks whose watchdog fired in a run -> the first line of their report."""
    reports = {}
    for path in sorted((Path(metrics_folder) / HANG_FOLDER).glob("rank-*.txt")):
        try:
            rank = int(path.stem.removeprefix("rank-"))
            reports[rank] = path.read_text(errors="replace").split("\n", 1)[0]
        except (OSError, ValueError):
            continue
    return reports
