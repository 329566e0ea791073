"""Process lifetimes and locks (apertus.core.lifetime): children die with their parent, even
in a session of their own; a lock is refused to a second holder with the first one named, and
freed when its holder dies however it dies."""

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from apertus.core.lifetime import LockHeld, exclusive_lock, hold_lock
from tests.conftest import running

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="PR_SET_PDEATHSIG is Linux's")

REPO = Path(__file__).resolve().parents[2]


def wait_dead(pid: int, seconds: float = 10) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not running(pid):
            return True
        time.sleep(0.05)
    return False


def start(code: str, tmp_path: Path) -> tuple[subprocess.Popen, int]:
    """Run `code` (which prints its child's PID) in a process group of its own; returns the
    process and the child PID it printed."""
    pid_file = tmp_path / "child.pid"
    parent = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(code), str(pid_file)],
        cwd=REPO,
        start_new_session=True,
    )
    deadline = time.monotonic() + 30
    while not pid_file.is_file() or not pid_file.read_text().strip():
        assert time.monotonic() < deadline and parent.poll() is None
        time.sleep(0.05)
    return parent, int(pid_file.read_text())


def test_a_child_started_with_child_dies_with_us_dies_with_its_parent(tmp_path):
    parent, child = start(
        """
        import subprocess, sys, time
        from pathlib import Path
        from apertus.core.lifetime import child_dies_with_us
        # In a session of its own, as torchrun starts its workers: a group kill misses it.
        p = subprocess.Popen(["sleep", "300"], preexec_fn=child_dies_with_us(),
                             start_new_session=True)
        Path(sys.argv[1]).write_text(str(p.pid))
        time.sleep(300)
        """,
        tmp_path,
    )
    assert running(child)
    os.killpg(parent.pid, signal.SIGKILL)
    parent.wait()
    assert wait_dead(child)


def test_die_with_parent_kills_a_rank_whose_launcher_was_killed(tmp_path):
    parent, child = start(
        """
        import subprocess, sys, time
        from pathlib import Path
        code = ("from apertus.core.lifetime import die_with_parent; import time; "
                "die_with_parent('python'); time.sleep(300)")
        p = subprocess.Popen([sys.executable, "-c", code], start_new_session=True)
        Path(sys.argv[1]).write_text(str(p.pid))
        time.sleep(300)
        """,
        tmp_path,
    )
    time.sleep(1.5)  # the child has imported and asked for the signal
    assert running(child)
    os.killpg(parent.pid, signal.SIGKILL)
    parent.wait()
    assert wait_dead(child)


def test_die_with_parent_exits_when_the_parent_is_not_the_expected_one(tmp_path):
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            "from apertus.core.lifetime import die_with_parent; die_with_parent('torchrun'); "
            "print('still here')",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 1 and "still here" not in proc.stdout
    assert "error: the parent process (torchrun) is gone" in proc.stderr


def test_a_held_lock_is_refused_naming_its_holder_and_freed_when_the_holder_dies(tmp_path):
    lock = tmp_path / "run" / "LOCK"
    holder, _ = start(
        f"""
        import os, sys, time
        from pathlib import Path
        from apertus.core.lifetime import hold_lock
        hold_lock({str(lock)!r}, "the run")
        Path(sys.argv[1]).write_text(str(os.getpid()))
        time.sleep(300)
        """,
        tmp_path,
    )
    with pytest.raises(LockHeld) as refused:
        hold_lock(lock, "the run")
    message = str(refused.value)
    assert f"the run is in use by PID {holder.pid} on {os.uname().nodename}" in message
    assert str(lock) in message and "delete" in message
    os.killpg(holder.pid, signal.SIGKILL)  # however it dies, the kernel drops its lock
    holder.wait()
    with exclusive_lock(lock, "the run"), pytest.raises(LockHeld, match=f"PID {os.getpid()}"):
        hold_lock(lock, "the run")  # a second open file of the same process is refused too
    fd = hold_lock(lock, "the run")  # released when the block ended
    os.close(fd)


def test_a_step_stops_when_the_snakemake_that_started_it_is_killed_alone(tmp_path):
    """`kill -9` of Snakemake's main process only (not its group): the job it started, in the
    same group but not killed, sees it gone and stops itself (SIGTERM) within seconds."""
    parent, child = start(
        """
        import subprocess, sys, time
        from pathlib import Path
        from apertus.core.lifetime import mark_workflow_process
        mark_workflow_process()  # what the workflow's main process does
        code = ("from apertus.core.lifetime import stop_with_workflow; import time; "
                "stop_with_workflow(0.1); time.sleep(300)")
        p = subprocess.Popen([sys.executable, "-c", code])
        Path(sys.argv[1]).write_text(str(p.pid))
        time.sleep(300)
        """,
        tmp_path,
    )
    time.sleep(1.5)  # the step has started watching
    assert running(child)
    os.kill(parent.pid, signal.SIGKILL)  # the main process alone
    parent.wait()
    assert wait_dead(child)


def test_a_step_outside_the_workflow_or_on_slurm_watches_nothing(monkeypatch):
    import threading

    from apertus.core.lifetime import WORKFLOW_ENV, mark_workflow_process, stop_with_workflow

    before = threading.active_count()
    monkeypatch.delenv(WORKFLOW_ENV, raising=False)
    stop_with_workflow()
    mark_workflow_process()  # this process: alive, so watching would start...
    monkeypatch.setenv("SLURM_JOB_ID", "7")  # ...but a SLURM job lives by the scheduler
    stop_with_workflow()
    assert threading.active_count() == before
