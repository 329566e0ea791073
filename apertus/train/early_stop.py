"""Early stop: a training run saves a checkpoint and stops at the end of the current step when
SLURM signals it (SIGTERM on preemption, `scontrol requeue` and `scancel`, then SIGKILL after
its KillWait; or SIGUSR1) or when the job's time limit is near. `apertus.train.launch` sets the
deadline in ``APERTUS_STOP_AT`` and reads the note rank 0 writes (`STOPPED_FILE`), then requeues
the job at the time limit; `apertus.train.trainer.ApertusTrainer` asks `StopRequest` before each
step. No torch here: the launcher imports this module.
"""

from __future__ import annotations

import os
import signal
import time

__all__ = ["STOPPED_FILE", "STOP_AT_ENV", "TIME_LIMIT", "StopRequest"]

# Epoch seconds after which training saves a checkpoint and stops (the launcher sets it in a
# SLURM job), and the file rank 0 then writes into the dump folder for the launcher to read.
STOP_AT_ENV = "APERTUS_STOP_AT"
STOPPED_FILE = "stopped.txt"
TIME_LIMIT = "the SLURM time limit is near"


class StopRequest:
    """Why this rank should stop after the current step: a SIGTERM / SIGUSR1 it received
    (SLURM sends SIGTERM on preemption, `scontrol requeue` and `scancel`, then SIGKILL after
    its KillWait), or the deadline in `APERTUS_STOP_AT` (the SLURM time limit minus a margin)."""

    def __init__(self, stop_at: float | None) -> None:
        self.stop_at = stop_at
        self.signal_name: str | None = None

    @classmethod
    def install(cls) -> StopRequest:
        raw = os.environ.get(STOP_AT_ENV)
        request = cls(float(raw) if raw else None)
        for signum in (signal.SIGTERM, signal.SIGUSR1):
            signal.signal(signum, request._on_signal)
        return request

    def _on_signal(self, signum: int, frame: object) -> None:
        self.signal_name = signal.Signals(signum).name

    def reason(self, *, trained: bool) -> str | None:
        """Why to stop now, or None. The deadline counts only once this process `trained` a
        step, so that every attempt makes progress however late it starts."""
        if self.signal_name is not None:
            return f"received {self.signal_name}"
        if trained and self.stop_at is not None and time.time() >= self.stop_at:
            return TIME_LIMIT
        return None
