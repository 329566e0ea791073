"""Start a pretraining run: ``python -m apertus.train.launch --spec run.json --nproc N``.

Runs torchtitan's trainer under torchrun with the run spec named in ``APERTUS_TRAIN_SPEC``::

    APERTUS_TRAIN_SPEC=/abs/run.json \\
    torchrun --standalone --nproc_per_node N -m torchtitan.train \\
        --module apertus.train.config_registry --config from_spec [torchtitan overrides...]

(torchrun is run as ``python -m torch.distributed.run`` with this interpreter, so the command
works without the virtual environment's bin/ on PATH.) Arguments after ``--`` are passed to
torchtitan, e.g. ``-- --training.steps 10``. The launcher writes no file; it checks the spec,
streams the trainer's output and returns torchrun's exit code. A rerun of the same command
resumes from the run's last checkpoint.

A diverged run stops: torchtitan raises on a non-finite loss, `ApertusMetrics` on a non-finite
gradient norm, and `FiniteCheckpointManager` refuses to write non-finite weights, all before the
step's checkpoint. The launcher recognises these failures in the output and names the last
checkpoint on disk, which is intact and holds the weights of a finite step.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from collections import deque
from collections.abc import Mapping, Sequence
from pathlib import Path

from apertus.core import ApertusError
from apertus.core.files import verify_checksums
from apertus.core.lifetime import child_dies_with_us
from apertus.core.stage import free_space
from apertus.train.early_stop import STOP_AT_ENV, STOPPED_FILE
from apertus.train.run_spec import (
    SPEC_ENV,
    checkpoint_steps,
    data_files,
    load_run_spec,
    preflight,
)
from apertus.train.slurm import Rendezvous, SlurmJob, srun_command, srun_environment

__all__ = ["STOPPED", "main", "run", "torchrun_command"]

# Messages the trainer raises when training diverges (torchtitan's Trainer.train_step, then
# ours in apertus.train.metrics and apertus.train.checkpoint).
DIVERGENCE_MARKERS = (
    "Loss is not finite",
    "Gradient norm is not finite",
    "Weights are not finite",
)


# Exit code of a run that stopped before its last step (a signal or the SLURM time limit) after
# saving a checkpoint: EX_TEMPFAIL, "try again"; a rerun resumes.
STOPPED = 75
STOP_BEFORE_ENV = "APERTUS_STOP_BEFORE_MINUTES"
VERIFIED_FILE = "verified-data.json"
"""Beside a run's checkpoint folder: the data files found good, by size, mtime, ctime, inode."""
"""Minutes before a SLURM job's time limit at which training stops (default 10)."""


def torchrun_command(
    nproc: int, extra_args: Sequence[str] = (), rendezvous: Rendezvous | None = None
) -> list[str]:
    """The torchrun command line (argv): `nproc` processes on this machine, or with a
    `rendezvous`, `nproc` processes on each of its nodes meeting at its endpoint (c10d)."""
    if rendezvous is None:
        where = ["--standalone"]
    else:
        where = [
            "--nnodes",
            str(rendezvous.nnodes),
            "--rdzv-backend",
            "c10d",
            "--rdzv-endpoint",
            rendezvous.endpoint,
            "--rdzv-id",
            rendezvous.run_id,
        ]
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        *where,
        "--nproc_per_node",
        str(nproc),
        "-m",
        "torchtitan.train",
        "--module",
        "apertus.train.config_registry",
        "--config",
        "from_spec",
        *extra_args,
    ]


def _divergence_message(line: str) -> str | None:
    """The divergence error in a line of trainer output (the raised message, not a traceback's
    source line), from its marker on."""
    if "Error" not in line:
        return None
    for marker in DIVERGENCE_MARKERS:
        if marker in line:
            return line[line.index(marker) :].strip()
    return None


# What the machine did to a rank, as torchrun's failure report or the rank's traceback says it.
MACHINE_FAILURES = (
    (
        ("No space left on device", "Disk quota exceeded"),
        "a rank ran out of disk space writing under {work} ({free}); free space or move "
        "results_dir, then rerun: it resumes from the last checkpoint, {last} (a half-written "
        "checkpoint is never taken for one)",
    ),
    (
        ("exitcode  : -9", "Signal 9 (SIGKILL)"),
        "a rank was killed by SIGKILL, most likely by the kernel's out-of-memory killer (see "
        "`dmesg` or the SLURM job's record); give the job more memory or lower micro_batch, "
        "then rerun: it resumes from the last checkpoint, {last}",
    ),
    (
        ("Permission denied", "Read-only file system"),
        "a rank was refused access to a file (permission denied or a read-only filesystem, "
        "see above); check the owner and mode of {work} and the data, then rerun",
    ),
)


def _machine_failure(output: Sequence[str], work: Path, last: str) -> str | None:
    """What the machine did (disk full, the OOM killer, permissions) to a failed run, from its
    output, or None."""
    for markers, message in MACHINE_FAILURES:
        if any(marker in line for line in output for marker in markers):
            return message.format(work=work, free=free_space(work), last=last)
    return None


def _say(message: str) -> None:
    print(f"apertus.train.launch: {message}", file=sys.stderr, flush=True)


def _stop_at(job: SlurmJob | None, environ: Mapping[str, str]) -> float | None:
    """When the trainer should save and stop: `STOP_BEFORE_ENV` minutes (default 10) before
    the SLURM job's time limit; None outside SLURM or without a limit."""
    if job is None or job.time_left is None:
        return None
    raw = environ.get(STOP_BEFORE_ENV, "10")
    try:
        minutes = float(raw)
    except ValueError:
        raise ApertusError(f"{STOP_BEFORE_ENV}={raw!r} is not a number of minutes") from None
    return time.time() + job.time_left - 60 * minutes


def run(
    spec_path: str | os.PathLike[str],
    nproc: int,
    extra_args: Sequence[str] = (),
    *,
    nnodes: int = 1,
) -> int:
    """Run the trainer on `nproc` processes on each of `nnodes` nodes; returns torchrun's exit
    code, or `STOPPED` when training stopped early with a checkpoint (then, in a SLURM job,
    the job is requeued).

    Outside SLURM, torchrun runs standalone on this machine (`nnodes` must be 1). Inside a
    SLURM job, one srun task per node runs torchrun (apertus.train.slurm), and the trainer
    stops `APERTUS_STOP_BEFORE_MINUTES` before the job's time limit. On SIGTERM (preemption,
    `scontrol requeue`, `scancel`) or SIGUSR1, the trainer saves a checkpoint at the end of the
    step and stops, so the next attempt resumes there.
    """
    if nproc < 1 or nnodes < 1:
        raise ApertusError(f"--nproc and --nnodes must be >= 1, got {nproc} and {nnodes}")
    job = SlurmJob.current()
    if job is None and nnodes > 1:
        raise ApertusError(
            f"training on {nnodes} nodes needs a SLURM allocation (no SLURM_JOB_ID here); "
            "run the pipeline with --profile profiles/slurm"
        )
    spec_path = Path(spec_path).absolute()
    spec = load_run_spec(spec_path)
    checked = preflight(spec, world_size=nproc * nnodes)
    # Every byte trained on is the one its record names (and the work directory's key hashes
    # that record): a flipped byte stops the run here, before its first step.
    verified = verify_checksums(
        data_files(checked),
        f"training data {checked.data_dir}",
        cache=Path(spec.checkpoint.folder).absolute().parent / VERIFIED_FILE,
    )
    _say(
        f"verified the sha256 of {verified['files']} data file(s) "
        f"({verified['bytes_hashed'] / 2**20:.1f} MiB read, {verified['files_cached']} "
        "unchanged since last verified)"
    )
    env = dict(os.environ)
    if job is None:
        command = torchrun_command(nproc, extra_args)
    else:
        command = srun_command(
            job, nnodes, torchrun_command(nproc, extra_args, job.rendezvous(nnodes))
        )
        env = srun_environment(env)
    stop_at = _stop_at(job, env)
    if stop_at is not None:
        env[STOP_AT_ENV] = repr(stop_at)
    env[SPEC_ENV] = str(spec_path)
    # The trainer's log lines reach the stream as they are written.
    env["PYTHONUNBUFFERED"] = "1"
    shown = command[: command.index(sys.executable)] if job else []
    _say(f"{SPEC_ENV}={spec_path} {' '.join(shown)} torchrun {' '.join(command[len(shown) + 3 :])}")
    if stop_at is not None:
        _say(f"will stop with a checkpoint at {time.ctime(stop_at)} (SLURM time limit ahead)")

    # The trainer writes this file when it stops early (apertus.train.trainer).
    stopped = Path(spec.metrics_folder).absolute() / STOPPED_FILE
    stopped.unlink(missing_ok=True)
    divergence: str | None = None
    # torchrun dies with this process, and each rank with torchrun (apertus.core.lifetime): a
    # killed step leaves no trainer writing into its work directory.
    process = subprocess.Popen(
        command,
        env=env,
        preexec_fn=child_dies_with_us(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        errors="replace",
        bufsize=1,
    )

    def forward(signum: int, frame: object) -> None:
        # torchrun (or srun, which passes it to its tasks) forwards it to the trainer's ranks,
        # which save a checkpoint and stop; the launcher waits for them.
        process.send_signal(signum)

    signals = (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1)
    previous = {s: signal.signal(s, forward) for s in signals}
    # The end of the output, where torchrun's failure report and the ranks' errors are.
    tail: deque[str] = deque(maxlen=400)
    unwritten: OSError | None = None
    try:
        assert process.stdout is not None
        for line in process.stdout:
            tail.append(line)
            if unwritten is None:
                try:
                    sys.stdout.write(line)
                except OSError as e:  # the log's disk is full: keep draining the ranks' pipe
                    unwritten = e
            if divergence is None:
                divergence = _divergence_message(line)
        returncode = process.wait()
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
    sys.stdout.flush()

    work = Path(spec.checkpoint.folder).absolute().parent
    steps = checkpoint_steps(Path(spec.checkpoint.folder).absolute())
    last = f"{steps[max(steps)]} (step {max(steps)})" if steps else "none"
    if stopped.is_file() and divergence is None:
        note = json.loads(stopped.read_text())
        _say(
            f"training stopped early at step {note['step']} ({note['reason']}); the last "
            f"checkpoint is {last}, and a rerun resumes from it."
        )
        # A signal came from SLURM (preemption, requeue, scancel), which decides what follows;
        # at the time limit the job asks to be requeued itself.
        if job is not None and note["time_limit"]:
            why_not = job.requeue()
            _say(
                f"requeued SLURM job {job.job_id}"
                if why_not is None
                else f"could not requeue SLURM job {job.job_id}: {why_not}"
            )
        return STOPPED
    if returncode != 0:
        if divergence is not None:
            _say(
                f"training stopped because it diverged: {divergence} "
                f"The last checkpoint, {last}, is intact; fix the cause (e.g. a lower LR) and "
                "rerun to resume from it."
            )
        elif (failure := _machine_failure(tail, work, last)) is not None:
            _say(f"error: {failure}")
        else:
            _say(
                f"training failed (exit code {returncode}); see the output above. "
                f"Last checkpoint: {last}."
            )
    if unwritten is not None:
        raise unwritten  # the step fails with it (apertus.core.stage.run_main names it)
    return returncode


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m apertus.train.launch",
        description="Run Apertus pretraining with torchtitan under torchrun.",
    )
    parser.add_argument("--spec", required=True, help="run spec (JSON)")
    parser.add_argument("--nproc", type=int, default=1, help="processes on each node")
    parser.add_argument("--nnodes", type=int, default=1, help="nodes (inside a SLURM job)")
    parser.add_argument("extra", nargs=argparse.REMAINDER, help="after --: torchtitan overrides")
    args = parser.parse_args(argv)
    extra = args.extra[1:] if args.extra[:1] == ["--"] else args.extra
    try:
        return run(args.spec, args.nproc, extra, nnodes=args.nnodes)
    except ApertusError as e:
        _say(f"error: {e}")
        return 2


if __name__ == "__main__":
    sys.exit(main())
