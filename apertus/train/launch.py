"""Start a pretraining run: ``python -m apertus.train.launch --spec run.json --nproc N``.

Runs torchtitan's trainer under torchrun with the run spec named in ``APERTUS_TRAIN_SPEC``::

    APERTUS_TRAIN_SPEC=/abs/run.json \\
    torchrun --standalone --nproc_per_node N -m torchtitan.train \\
        --module apertus.train.config_registry --config from_spec [torchtitan overrides...]

(torchrun is run as ``python -m torch.distributed.run`` with this interpreter, so the command
works without the virtual environment's bin/ on PATH.) One process outside SLURM (the tiny
default, ``--nproc 1``) is started without torchrun: ``python -m torchtitan.train ...`` with the
variables torchrun would give rank 0 of 1 (`single_process_environment`), which saves torchrun's
own start and exit, about 3 s per stage on 2 cores; the trainer, its checkpoints and its process
group (gloo, world size 1) are the same. Arguments after ``--`` are passed to
torchtitan, e.g. ``-- --training.steps 10``. The launcher writes no file; it checks the spec,
streams the trainer's output and returns torchrun's exit code. A rerun of the same command
resumes from the run's last checkpoint.

A diverged run stops: torchtitan raises on a non-finite loss, `ApertusMetrics` on a non-finite
gradient norm, and `FiniteCheckpointManager` refuses to write non-finite weights, all before the
step's checkpoint. The launcher recognises these failures in the output and judges the
checkpoints on disk by the losses in ``metrics.jsonl`` (`checkpoint_health`): finite weights can
still be diverged ones (a loss climbing for steps before it turns NaN). It says whether the last
checkpoint is sane, names the last sane one, and prints the config lines that restart the stage
from it with a lower LR (`pretrain.restart`; a new LR alone starts the stage afresh).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from apertus.core import ApertusError
from apertus.core.files import verify_checksums
from apertus.core.lifetime import child_dies_with_us
from apertus.core.stage import free_space, set_resume_point
from apertus.train.early_stop import STOP_AT_ENV, STOPPED_FILE
from apertus.train.run_spec import (
    SPEC_ENV,
    RunSpec,
    data_files,
    load_run_spec,
    preflight,
    sealed_steps,
    wandb_run_id,
)
from apertus.train.slurm import Rendezvous, SlurmJob, srun_command, srun_environment
from apertus.train.watchdog import HANG_FOLDER, HANG_TIMEOUT_ENV, hang_reports, hang_timeout

__all__ = [
    "DIVERGED",
    "STOPPED",
    "CheckpointHealth",
    "checkpoint_health",
    "main",
    "rank_hosts",
    "run",
    "sane_losses",
    "torchrun_command",
]

# Messages the trainer raises when training diverges (torchtitan's Trainer.train_step, then
# ours in apertus.train.metrics and apertus.train.checkpoint).
DIVERGENCE_MARKERS = (
    "Loss is not finite",
    "Gradient norm is not finite",
    "Weights are not finite",
    "Loss spike",
)


# Exit code of a run that stopped before its last step (a signal or the SLURM time limit) after
# saving a checkpoint: EX_TEMPFAIL, "try again"; a rerun resumes.
STOPPED = 75
# Exit code of a run that diverged (the launcher has said which checkpoint is sane and how to
# restart from it): a rerun would resume from the last checkpoint and diverge again.
DIVERGED = 3
STOP_BEFORE_ENV = "APERTUS_STOP_BEFORE_MINUTES"
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
        *_trainer_module(extra_args),
    ]


def _trainer_module(extra_args: Sequence[str]) -> list[str]:
    """torchtitan's trainer with the run spec's config: ``-m torchtitan.train ...``."""
    return [
        "-m",
        "torchtitan.train",
        "--module",
        "apertus.train.config_registry",
        "--config",
        "from_spec",
        *extra_args,
    ]


def single_process_command(extra_args: Sequence[str] = ()) -> list[str]:
    """The trainer as one process of its own, without torchrun (`single_process_environment`)."""
    return [sys.executable, *_trainer_module(extra_args)]


def single_process_environment(env: Mapping[str, str]) -> dict[str, str]:
    """`env` with what torchrun gives rank 0 of a one-process run. Port 0: the process group's
    store, which no other rank connects to, takes a free port itself (no race with a stage
    started beside it)."""
    rank = {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1", "LOCAL_WORLD_SIZE": "1"}
    return {**env, **rank, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "0"}


def sane_losses(losses: Mapping[int, float]) -> dict[int, tuple[bool, float | None]]:
    """Each logged loss (step -> loss) judged in step order: step -> (sane, the median it was
    held to) (`apertus.train.metrics.SaneLosses`)."""
    from apertus.train.metrics import SaneLosses

    judge = SaneLosses().judge
    return {step: judge(losses[step]) for step in sorted(losses)}


@dataclass(frozen=True)
class CheckpointHealth:
    """One checkpoint judged by the logged losses: `loss` is the loss its weights gave, which is
    the loss logged at the next step (step N's loss is computed before step N's update, on the
    weights of step N - 1); `median` the median of the sane losses logged up to its step."""

    step: int
    path: Path
    loss: float | None
    median: float | None
    sane: bool
    """`loss` is a sane loss (`sane_losses`); unknown (no next step logged) is not."""

    def describe(self) -> str:
        """Its evidence in words."""
        if self.loss is None:
            return f"no loss was logged on its weights (step {self.step + 1})"
        said = f"its weights gave a loss of {self.loss:.4g} at step {self.step + 1}"
        if self.median is None:
            return said + " (no loss logged before it to compare)"
        return f"{said}, the running median of the sane losses up to it was {self.median:.4g}"


def checkpoint_health(
    checkpoints: Mapping[int, Path], losses: Mapping[int, float]
) -> list[CheckpointHealth]:
    """Each checkpoint (step -> ``step-N``) judged by the logged `losses` (step -> loss), in
    step order (`CheckpointHealth`)."""
    judged = sane_losses(losses)
    health = []
    for step, path in sorted(checkpoints.items()):
        sane, median = judged.get(step + 1, (False, None))
        health.append(CheckpointHealth(step, path, losses.get(step + 1), median, sane))
    return health


def _diverged_step(divergence: str) -> int | None:
    """The step a divergence message names (``at step N``, ``checkpoint of step N``)."""
    found = re.search(r"(?:at|of) step (\d+)", divergence)
    return int(found.group(1)) if found else None


def _divergence_report(spec: RunSpec, divergence: str, checkpoints: Mapping[int, Path]) -> str:
    """What the launcher says when a run diverged: whether its last checkpoint is sane, the last
    sane one, and how to restart from it with a lower LR."""
    from apertus.train.metrics import SANE_MARGIN, read_metrics, run_name

    metrics_file = Path(spec.metrics_folder or ".").absolute() / "metrics.jsonl"
    records = read_metrics(metrics_file) if metrics_file.is_file() else {}
    # Only this run's losses before the failure: a resumed run's metrics.jsonl may still hold
    # later steps of an earlier attempt. The failed step's loss is logged when its weights
    # were refused at the checkpoint, not when the loss or the gradient was not finite.
    diverged_at = _diverged_step(divergence)
    if diverged_at is not None and not divergence.startswith("Weights are not finite"):
        diverged_at -= 1
    losses = {
        step: float(record["loss"])
        for step, record in records.items()
        if "loss" in record and (diverged_at is None or step <= diverged_at)
    }
    judged = checkpoint_health(checkpoints, losses)
    rule = f"a loss at most {SANE_MARGIN:.0%} above the running median of the sane ones"
    if not judged:
        said = "No checkpoint was written before it."
    else:
        last = judged[-1]
        state = "sane" if last.sane else "diverged"
        said = f"The last checkpoint, {last.path} (step {last.step}), is {state}: "
        said += f"{last.describe()}."
    sane = [health for health in judged if health.sane]
    if judged and not judged[-1].sane:
        if sane:
            said += (
                f" The last sane checkpoint ({rule}) is {sane[-1].path} (step {sane[-1].step}): "
                f"{sane[-1].describe()}."
            )
        else:
            said += f" No checkpoint on disk is sane ({rule})"
            if spec.checkpoint.keep_latest:
                said += f"; only the last {spec.checkpoint.keep_latest} are kept (keep_latest)"
            said += "."
    new_lr = f"{spec.lr.peak / 2:.2e}"
    if not sane:
        return f"{said} Start it over with a lower LR (e.g. {new_lr}, half of {spec.lr.peak:.2e})."
    start = sane[-1]
    work = Path(spec.checkpoint.folder or ".").absolute().parent
    name = run_name(work / "out")
    if spec.sft_data is None and name != work.name:
        # A pretraining stage's work directory (apertus.train.stage): its config switch.
        how = "\n".join(
            [
                "To restart the stage from it with a lower LR, add to your config file (a new "
                "lr.peak alone would start it over in a new work folder):",
                "  pretrain:",
                "    restart:",
                f"      stage: {name}",
                f"      checkpoint: {start.path}",
                f"      lr: {new_lr}  # half of this run's peak {spec.lr.peak:.2e}",
                f"and run again: it continues from step {start.step + 1} with that checkpoint's "
                "optimizer state and data position, in a new work folder (README: "
                'Troubleshooting, "training diverged").',
            ]
        )
    else:
        how = (
            f"To restart from it with a lower LR, write a run spec with a new checkpoint.folder, "
            f'checkpoint.initial "{start.path}", checkpoint.initial_mode "restart" and a lower '
            f"lr.peak (e.g. {new_lr}): it continues from step {start.step + 1} with that "
            "checkpoint's optimizer state and data position."
        )
    return f"{said}\n{how}"


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


def _rank_refusal(output: Sequence[str]) -> str | None:
    """The message of the project's own error a rank raised (e.g. the loader's `CorruptBlock`,
    naming file and block), from the last line of its traceback, or None."""
    for line in reversed(output):
        for marker in ("CorruptBlock: ", "ApertusError: "):
            if marker in line:
                return line.split(marker, 1)[1].strip()
    return None


# torchtitan's log of each rank (`debug.enable_structured_logging`, on by default), in the
# metrics folder: its records name the host the rank ran on, as the rank itself saw it.
STRUCTURED_LOGS = "structured_logs"


def rank_hosts(metrics_folder: str | os.PathLike[str], since: float = 0.0) -> list[str] | None:
    """The host each rank of a run ran on, by global rank, as the ranks' structured logs in
    `metrics_folder` say; only logs written since `since` (a ``time.time()``) count, so a
    resumed run names the hosts of its last attempt. None when the logs are not there (or
    not one for every rank 0..N-1)."""
    newest: dict[int, tuple[float, str]] = {}
    for path in (Path(metrics_folder) / STRUCTURED_LOGS).glob("*.jsonl"):
        try:
            mtime = path.stat().st_mtime
            with path.open(encoding="utf-8") as lines:
                first = json.loads(lines.readline())
            rank, host = int(first["global_rank"]), str(first["host_name"])
        except (OSError, ValueError, KeyError, TypeError):
            continue  # not a rank's log, or one cut short
        if mtime >= since and mtime >= newest.get(rank, (-1.0, ""))[0]:
            newest[rank] = (mtime, host)
    if not newest or sorted(newest) != list(range(len(newest))):
        return None
    return [newest[rank][1] for rank in range(len(newest))]


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
    code, `STOPPED` when training stopped early with a checkpoint or hung (then, in a SLURM
    job at its time limit or hung, the job is requeued), or `DIVERGED` when it diverged (after
    saying which checkpoint is sane and how to restart from it).

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
            "run the pipeline with --workflow-profile profiles/slurm"
        )
    spec_path = Path(spec_path).absolute()
    spec = load_run_spec(spec_path)
    checked = preflight(spec, world_size=nproc * nnodes)
    checkpoints = Path(spec.checkpoint.folder).absolute()
    work = checkpoints.parent
    # Every byte trained on is the one its record names. A phase's index and shard files are
    # checked block by block as the loader reads them (apertus.core.blocks: a flipped bit stops
    # the run before its batch is used, at any step, with nothing to re-hash on resume); SFT and
    # QRPO data, which every epoch reads whole, are hashed whole before the first step.
    if checked.sft is not None:
        verified = verify_checksums(data_files(checked), f"training data {checked.data_dir}")
        _say(
            f"verified the sha256 of {verified['files']} data file(s) "
            f"({verified['bytes_hashed'] / 2**20:.1f} MiB read)"
        )
    else:
        _say(
            f"training data {checked.data_dir}: each block of its index and shard files is "
            "checked against its crc32 as it is read"
        )
    metrics = Path(spec.metrics_folder).absolute()
    if spec.wandb.enabled:
        where = (
            f"offline in {metrics / 'wandb'}; upload with `wandb sync "
            f"{metrics / 'wandb'}/offline-run-*`"
            if spec.wandb.mode == "offline"
            else "online"
        )
        _say(f"W&B run {wandb_run_id(metrics)} of project {spec.wandb.project}, {where}")
    env = dict(os.environ)
    if job is None and nproc == 1:
        command = single_process_command(extra_args)
        env = single_process_environment(env)
    elif job is None:
        command = torchrun_command(nproc, extra_args)
    else:
        command = srun_command(
            job, nnodes, torchrun_command(nproc, extra_args, job.rendezvous(nnodes))
        )
        env = srun_environment(env)
    env[HANG_TIMEOUT_ENV] = f"{hang_timeout(env):g}"  # a bad value stops here, before a rank
    stop_at = _stop_at(job, env)
    if stop_at is not None:
        env[STOP_AT_ENV] = repr(stop_at)
    env[SPEC_ENV] = str(spec_path)
    # The trainer's log lines reach the stream as they are written.
    env["PYTHONUNBUFFERED"] = "1"
    shown = command[: command.index(sys.executable)] if job else []
    head = len(shown) + 1  # after the interpreter
    if command[head : head + 2] == ["-m", "torch.distributed.run"]:
        program, head = "torchrun", head + 2
    else:
        program = "python"
    _say(f"{SPEC_ENV}={spec_path} {' '.join([*shown, program, *command[head:]])}")
    if stop_at is not None:
        _say(f"will stop with a checkpoint at {time.ctime(stop_at)} (SLURM time limit ahead)")

    # The trainer writes this file when it stops early (apertus.train.trainer).
    stopped = metrics / STOPPED_FILE
    stopped.unlink(missing_ok=True)
    # And the hang watchdog these (apertus.train.watchdog), one per rank.
    hung = metrics / HANG_FOLDER
    shutil.rmtree(hung, ignore_errors=True)
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

    steps = sealed_steps(checkpoints)  # not hashed here: the resume checks the one it loads
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
            _requeue(job)
        return STOPPED
    reports = hang_reports(metrics)
    if reports and divergence is None:
        said = "\n".join(f"  {line}" for line in reports.values())
        _say(
            f"error: training hung: {len(reports)} rank(s) ended by the hang watchdog:\n{said}\n"
            f"Each rank's threads' stacks are in {hung}/rank-<R>.txt: the rank that hangs is "
            "the one not waiting in a collective. The last checkpoint is "
            f"{last}, and a rerun resumes from it."
        )
        set_resume_point(f"{last}, the last checkpoint" if steps else "none: a re-run starts over")
        if job is not None:
            _requeue(job)
        return STOPPED
    if returncode != 0:
        if divergence is not None:
            report = _divergence_report(spec, divergence, steps)
            _say(f"training stopped because it diverged: {divergence} {report}")
            returncode = DIVERGED
        else:
            # The step's final error line names it (apertus.core.stage.run_main).
            set_resume_point(
                f"{last}, the last checkpoint"
                if steps
                else "none: no checkpoint was written, a re-run starts training over"
            )
            failure = _machine_failure(tail, work, last)
            refused = _rank_refusal(tail)
            if failure is not None:
                _say(f"error: {failure}")
            elif refused is not None:
                _say(f"error: {refused} (last checkpoint: {last})")
            else:
                _say(
                    f"training failed (exit code {returncode}); see the output above. "
                    f"Last checkpoint: {last}."
                )
    if unwritten is not None:
        raise unwritten  # the step fails with it (apertus.core.stage.run_main names it)
    return returncode


def _requeue(job: SlurmJob) -> None:
    """Ask SLURM to requeue `job` and say whether it did."""
    why_not = job.requeue()
    _say(
        f"requeued SLURM job {job.job_id}"
        if why_not is None
        else f"could not requeue SLURM job {job.job_id}: {why_not}"
    )


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
