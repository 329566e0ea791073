"""The stage runner's last word on a failure the machine caused (apertus.core.stage): disk full,
permissions, memory each become one `error:` line saying where and what to do."""

import errno
import os
import time

import pytest

from apertus.core.stage import environment_error, failure_summary, run_main


@pytest.mark.parametrize(
    ("error", "said"),
    [
        (
            OSError(errno.ENOSPC, "No space left on device", "/results/x/ckpt"),
            "no space left on device: /results/x/ckpt: ",
        ),
        (OSError(errno.EDQUOT, "Disk quota exceeded"), "disk quota exceeded: "),
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
    assert " MiB free of " in message and "finished steps and checkpoints are kept" in message


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
