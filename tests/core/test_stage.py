"""The stage runner's last word on a failure the machine caused (apertus.core.stage): disk full,
permissions, memory each become one `error:` line saying where and what to do."""

import errno
import logging
import os
import re
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from apertus.core.stage import (
    StepLog,
    environment_error,
    failure_summary,
    fallback_log_name,
    run_main,
)


@pytest.mark.parametrize(
    ("error", "said"),
    [
        (
            OSError(errno.ENOSPC, "No space left on device", "/results/x/ckpt"),
            "no space left on device: /results/x/ckpt: ",
        ),
        (
            OSError(errno.EDQUOT, "Disk quota exceeded"),
            "disk quota exceeded (the fullest filesystem",
        ),
        (PermissionError(errno.EACCES, "Permission denied", "/data"), "permission denied: /data"),
        (OSError(errno.EROFS, "Read-only file system", "/ro"), "read-only filesystem: /ro"),
        (MemoryError(), "out of memory in this step"),
    ],
)
def test_a_machine_failure_is_one_error_line_naming_what_and_where(error, said, capsys):
    def main(argv):
        raise error

    with pytest.raises(SystemExit) as exit_:
        run_main(main, [])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {said}") and "re-run" in err
    assert "Traceback" not in err


def test_full_disk_says_how_much_is_free():
    message = environment_error(OSError(errno.ENOSPC, "No space left on device", os.getcwd()))
    assert re.search(r"\d (B|[KMGT]iB) free of \d+(\.\d)? (B|[KMGT]iB) there", message)
    assert "finished steps and checkpoints are kept" in message


def test_other_errors_are_not_taken_for_the_machines():
    assert environment_error(OSError(errno.ENOENT, "No such file or directory", "x")) is None
    assert environment_error(ValueError("bug")) is None

    def main(argv):
        raise FileNotFoundError(errno.ENOENT, "No such file or directory", "x")

    with pytest.raises(FileNotFoundError):  # a bug keeps its traceback
        run_main(main, [])


def test_failure_summary_gives_each_failed_logs_error_line(tmp_path):
    logs = tmp_path / "logs" / "pretrain"
    logs.mkdir(parents=True)
    old = logs / "phase1.log"
    old.write_text("error: from an earlier run\n")
    os.utime(old, (time.time() - 3600, time.time() - 3600))
    started = time.time() - 60
    (logs / "phase2.log").write_text("progress: ...\nerror: no space left on device: /x\n")
    (logs / "ctx256.log").write_text("all good\n")
    assert failure_summary(tmp_path, started) == [
        f"{logs / 'phase2.log'}: error: no space left on device: /x"
    ]


# Every write to /dev/full fails with ENOSPC: a full disk without root.
needs_dev_full = pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full")


@needs_dev_full
def test_a_full_log_continues_in_a_fallback_and_its_error_line_reaches_the_summary(
    tmp_path, monkeypatch
):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    log_path = tmp_path / "results" / "logs" / "data" / "filter.log"
    log_path.parent.mkdir(parents=True)
    log_path.write_text("2026-01-01 00:00:00 INFO apertus: data/filter started\n")
    since = time.time() - 1
    logger = logging.getLogger("tests.steplog")
    logger.propagate = False
    with open("/dev/full", "wb", buffering=0) as full:
        stream = StepLog(full.fileno(), path=log_path)
        handler = logging.StreamHandler(stream)
        logger.addHandler(handler)
        try:
            for i in range(100):
                logger.warning("line %d", i)
            print("error: no space left on device (resume point: ckpt/step-20)", file=stream)
        finally:
            logger.removeHandler(handler)
    fallback = tmp_path / "cache" / "apertus" / "logs" / fallback_log_name(log_path)
    text = fallback.read_text()
    assert f"continued from {log_path}, which it cannot write: no space left" in text
    assert "line 0\n" in text and "line 99\n" in text and "Logging error" not in text
    assert text.endswith("error: no space left on device (resume point: ckpt/step-20)\n")
    assert failure_summary(tmp_path / "results", since) == [
        f"{log_path}: error: no space left on device (resume point: ckpt/step-20) "
        f"[the disk was full: the log continues in {fallback}]"
    ]


# A step that logs, fills the filesystem of its output (argv[1]) and fails with ENOSPC there,
# after naming its resume point.
FILLING_STEP = textwrap.dedent(
    """
    import errno, logging, sys
    from apertus.core.stage import run_main, set_resume_point

    def main(argv):
        log = logging.getLogger("apertus.fill")
        for i in range(20):
            log.info("item %d %s", i, "." * 60)
        set_resume_point(f"{argv[0]}/ckpt/step-20 (step 20)")
        try:
            with open(f"{argv[0]}/output.bin", "wb") as f:
                while True:
                    f.write(bytes(65536))
        except OSError:
            pass
        for i in range(200):  # the ranks go on logging
            log.info("rank line %d %s", i, "." * 60)
        print("the trainer's output, forwarded to stdout")
        raise OSError(errno.ENOSPC, "No space left on device", f"{argv[0]}/ckpt/step-30")

    run_main(main, sys.argv[1:])
    """
)


def run_step(script: Path, out: Path, log, cache: Path) -> subprocess.CompletedProcess:
    """The step's stdout and stderr both to `log`, as a rule's `> {log} 2>&1`."""
    env = {**os.environ, "XDG_CACHE_HOME": str(cache)}
    return subprocess.run(
        [sys.executable, str(script), str(out)], stdout=log, stderr=log, env=env, timeout=60
    )


@needs_dev_full
def test_a_step_whose_stderr_is_full_leaves_its_error_line_in_the_fallback(tmp_path):
    script = tmp_path / "step.py"
    script.write_text(FILLING_STEP.replace("while True:", "for _ in range(1):"))
    with open("/dev/full", "wb") as full:
        done = run_step(script, tmp_path, full, tmp_path / "cache")
    assert done.returncode == 2
    (fallback,) = (tmp_path / "cache" / "apertus" / "logs").glob("*.log")
    last = fallback.read_text().splitlines()[-1]
    assert last.startswith(f"error: no space left on device: {tmp_path}/ckpt/step-30: ")
    assert last.endswith(f"(resume point: {tmp_path}/ckpt/step-20 (step 20))")


@pytest.fixture
def full_tmpfs(tmp_path):
    """A 2 MiB tmpfs (root only), unmounted after the test."""
    mount = tmp_path / "tmpfs"
    mount.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    made = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mount)])
    if made.returncode != 0:
        pytest.skip("cannot mount a tmpfs here")
    yield mount
    subprocess.run(["umount", str(mount)], check=True)


@pytest.mark.slow
def test_on_a_really_full_disk_the_log_ends_with_the_error_and_resume_point(
    tmp_path, full_tmpfs, monkeypatch
):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))  # for failure_summary
    script = tmp_path / "step.py"
    script.write_text(FILLING_STEP)
    log_path = full_tmpfs / "logs" / "step.log"
    log_path.parent.mkdir()
    since = time.time() - 1
    with open(log_path, "wb") as log:
        done = run_step(script, full_tmpfs, log, tmp_path / "cache")
    assert done.returncode == 2
    lines = log_path.read_text().splitlines()
    fallback = tmp_path / "cache" / "apertus" / "logs" / fallback_log_name(log_path)
    assert (
        "apertus: cannot write this log: no space left on device (0 B free of 2.0 MiB "
        in (lines[-2])
    )
    assert lines[-2].endswith(f"it continues in {fallback}")
    error = lines[-1]
    assert error.startswith(f"error: no space left on device: {full_tmpfs}/ckpt/step-30: ")
    assert error.endswith(f"(resume point: {full_tmpfs}/ckpt/step-20 (step 20))")
    assert fallback.read_text().splitlines()[-1] == error
    assert "rank line 199 " in fallback.read_text()
    assert "the trainer's output, forwarded to stdout\n" in fallback.read_text()
    summary = failure_summary(full_tmpfs, since)
    assert summary[0] == f"{log_path}: {error} [the disk was full: the log continues in {fallback}]"
