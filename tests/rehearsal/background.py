"""The 8B rehearsal's whole run (tests/rehearsal/test_rehearsal.py), started in a thread when the
test session starts (`rehearsal_run` in tests/conftest.py), so that its SLURM jobs, which spend
much of their time waiting on the scheduler and on their own workflow parse, overlap the tests
that need no cluster. The two-node cluster is the rehearsal's alone until it ends: the session
runs the tests that use a cluster after it (`pytest_collection_modifyitems`)."""

from __future__ import annotations

import signal
import subprocess
import threading
from pathlib import Path

import pytest
import yaml

from tests.conftest import BIN, REPO, local_cluster, run_tool

PRESET = REPO / "config" / "presets" / "apertus-8b.yaml"
OVERLAY = REPO / "config" / "rehearsal" / "apertus-8b.yaml"
TIMEOUT = 3600  # seconds for the whole pipeline (about 28 min alone on a slow CI machine)


class Rehearsal:
    def __init__(self, results: Path):
        self.results = results
        self.log = results / "snakemake.log"
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._proc: subprocess.Popen | None = None
        self._stopping = False
        self._error: BaseException | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="rehearsal", daemon=True)
        self._thread.start()

    def wait(self) -> Path:
        """The rehearsal's run directory once the whole pipeline ran (started now if it was
        not); fails with the tail of Snakemake's log if it did not."""
        if self._thread is None:
            self.start()
        while self._thread.is_alive():  # a join without a timeout would not see Ctrl-C
            self._thread.join(timeout=1)
        if self._error is not None:
            raise self._error
        if self._proc.returncode != 0:
            tail = self.log.read_text(errors="replace")[-8000:]
            pytest.fail(f"the rehearsal failed ({self._proc.returncode}), {self.log}:\n{tail}")
        return self.results / yaml.safe_load(OVERLAY.read_text())["run"]

    def stop(self) -> None:
        """A rehearsal still running is interrupted (`_interrupt`); the thread then stops the
        cluster."""
        with self._lock:
            self._stopping = True
            proc = self._proc
        if proc is not None and proc.poll() is None:
            _interrupt(proc)
        if self._thread is not None:
            self._thread.join(timeout=300)

    def _run(self) -> None:
        try:
            # The overlay reads its stand-ins from rehearsal-inputs/ in the working directory.
            run_tool("python", "-m", "apertus.rehearsal", "rehearsal-inputs", check=True,
                     timeout=600)  # fmt: skip
            if self._stopping:  # the session ended meanwhile: no cluster to start
                return
            with local_cluster(2), open(self.log, "w") as log:
                with self._lock:
                    if self._stopping:
                        raise RuntimeError("the session ended before the rehearsal started")
                    self._proc = subprocess.Popen(
                        [
                            str(BIN / "snakemake"),
                            "--workflow-profile",
                            "profiles/slurm-local",
                            "--configfile",
                            str(PRESET),
                            str(OVERLAY),
                            "--config",
                            f"results_dir={self.results}",
                        ],
                        cwd=REPO,
                        stdout=log,
                        stderr=subprocess.STDOUT,
                    )
                try:
                    self._proc.wait(timeout=TIMEOUT)
                except subprocess.TimeoutExpired as late:
                    _interrupt(self._proc)
                    raise RuntimeError(f"the rehearsal ran past {TIMEOUT} s ({self.log})") from late
        except BaseException as error:  # pytest's skip and fail too: wait() raises them
            self._error = error


def _interrupt(proc: subprocess.Popen) -> None:
    """Ctrl-C to Snakemake (it cancels its SLURM jobs), SIGKILL if it has not ended in a
    minute: stopping the cluster after it cancels what is left."""
    proc.send_signal(signal.SIGINT)
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
