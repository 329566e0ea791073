"""A rank that stops stepping ends the run with every rank's stack written, instead of holding
the allocation until its time limit (apertus.train.watchdog, issue 46)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from apertus.core import ApertusError
from apertus.train.launch import STOPPED
from apertus.train.metrics import read_metrics
from apertus.train.watchdog import (
    DEFAULT_TIMEOUT_S,
    HANG_AT_ENV,
    HANG_TIMEOUT_ENV,
    HUNG,
    collective_timeout,
    hang_reports,
    hang_timeout,
)
from tests.train.test_torchtitan import launch, write_spec


def test_the_timeout_comes_from_the_environment_and_a_bad_one_is_named():
    assert hang_timeout({}) == DEFAULT_TIMEOUT_S == 1800
    assert hang_timeout({HANG_TIMEOUT_ENV: "2.5"}) == 2.5
    for bad in ("0", "-3", "soon", "nan"):
        with pytest.raises(ApertusError, match=rf"{HANG_TIMEOUT_ENV}='{bad}'"):
            hang_timeout({HANG_TIMEOUT_ENV: bad})
    # a collective waits past the watchdog, never under torchtitan's 100 s
    assert collective_timeout(1800) == 1860 and collective_timeout(5) == 100


WATCHED = r"""
import sys, time
from pathlib import Path
from apertus.train.watchdog import StepWatchdog
dog = StepWatchdog(0.4, Path(sys.argv[1]), rank=3)
time.sleep(1.0)  # no step yet (compiling, loading): not armed
dog.beat(1)
dog.beat(2)
def stuck_reading_data():
    time.sleep(30)
stuck_reading_data()
"""


def test_no_step_for_the_timeout_writes_the_ranks_stacks_and_ends_it(tmp_path):
    """Not armed before the first step; then a rank quiet for longer than the timeout writes
    its host, PID, last step and each thread's stack, and exits with HUNG."""
    proc = subprocess.run(
        [sys.executable, "-c", WATCHED, str(tmp_path / "hang")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == HUNG, proc.stderr
    text = (tmp_path / "hang" / "rank-3.txt").read_text()
    assert "no step ended for" in text and "the last one was step 2." in text
    assert "stuck_reading_data" in text
    assert list(hang_reports(tmp_path)) == [3]


@pytest.mark.slow
def test_a_rank_that_stops_stepping_ends_the_run_and_a_rerun_resumes(phase, tmp_path, monkeypatch):
    """Two gloo ranks; rank 1 stops stepping after step 3 (sleeping in the loop). With a 6 s
    timeout both ranks' watchdogs fire (rank 0 waits in a collective, no longer than that: the
    process group's timeout is set past the watchdog's), each writes its stack, and the
    launcher names them and returns STOPPED, as a preempted run: the last checkpoint (step 2)
    is kept and a rerun, without the fault, resumes from it to the end."""
    monkeypatch.setenv(HANG_TIMEOUT_ENV, "6")
    monkeypatch.setenv(HANG_AT_ENV, "1:3")
    directory = tmp_path / "run"
    spec = write_spec(
        directory,
        phase,
        steps=5,
        lr={"kind": "constant", "peak": 1e-3},
        checkpoint={"folder": str(directory / "ckpt"), "interval": 2},
    )
    proc = launch(spec, 2)
    assert proc.returncode == STOPPED, proc.stdout[-4000:] + proc.stderr
    reports = hang_reports(directory / "out")
    assert sorted(reports) == [0, 1]
    assert all("the last one was step 3." in line for line in reports.values())
    assert "training hung: 2 rank(s) ended by the hang watchdog" in proc.stderr
    assert f"{directory / 'ckpt' / 'step-2'} (step 2), and a rerun resumes from it" in proc.stderr
    stacks = {
        rank: (directory / "out" / "hang" / f"rank-{rank}.txt").read_text() for rank in (0, 1)
    }
    assert "in beat" in stacks[1] and "in beat" not in stacks[0]  # the injected fault
    monkeypatch.delenv(HANG_AT_ENV)
    again = launch(spec, 2)
    assert again.returncode == 0, again.stdout[-4000:]
    assert "Training starts at step 3" in again.stdout
    assert max(read_metrics(directory / "out" / "metrics.jsonl")) == 5
    assert not (directory / "out" / "hang").exists()  # the rerun's own, none
