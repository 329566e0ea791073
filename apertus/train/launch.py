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
import os
import signal
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from apertus.core import ApertusError
from apertus.train.config_registry import SPEC_ENV, checkpoint_steps, load_run_spec, preflight

__all__ = ["main", "run", "torchrun_command"]

# Messages the trainer raises when training diverges (torchtitan's Trainer.train_step, then
# ours in torchtitan_spec).
DIVERGENCE_MARKERS = (
    "Loss is not finite",
    "Gradient norm is not finite",
    "Weights are not finite",
)


def torchrun_command(nproc: int, extra_args: Sequence[str] = ()) -> list[str]:
    """The torchrun command line (argv) of a run on `nproc` local processes."""
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
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


def _say(message: str) -> None:
    print(f"apertus.train.launch: {message}", file=sys.stderr, flush=True)


def run(spec_path: str | os.PathLike[str], nproc: int, extra_args: Sequence[str] = ()) -> int:
    """Run the trainer on `nproc` processes; returns torchrun's exit code."""
    if nproc < 1:
        raise ApertusError(f"--nproc must be >= 1, got {nproc}")
    spec_path = Path(spec_path).absolute()
    spec = load_run_spec(spec_path)
    preflight(spec, world_size=nproc)
    env = dict(os.environ)
    env[SPEC_ENV] = str(spec_path)
    # The trainer's log lines reach the stream as they are written.
    env["PYTHONUNBUFFERED"] = "1"
    command = torchrun_command(nproc, extra_args)
    _say(f"{SPEC_ENV}={spec_path} torchrun {' '.join(command[3:])}")

    divergence: str | None = None
    process = subprocess.Popen(
        command,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        errors="replace",
        bufsize=1,
    )

    def forward(signum: int, frame: object) -> None:
        # torchrun stops its workers on SIGTERM/SIGINT; the launcher waits for it.
        process.send_signal(signum)

    previous = {s: signal.signal(s, forward) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        assert process.stdout is not None
        for line in process.stdout:
            sys.stdout.write(line)
            if divergence is None:
                divergence = _divergence_message(line)
        returncode = process.wait()
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
    sys.stdout.flush()

    if returncode != 0:
        steps = checkpoint_steps(Path(spec.checkpoint.folder).absolute())
        last = f"{steps[max(steps)]} (step {max(steps)})" if steps else "none"
        if divergence is not None:
            _say(
                f"training stopped because it diverged: {divergence} "
                f"The last checkpoint, {last}, is intact; fix the cause (e.g. a lower LR) and "
                "rerun to resume from it."
            )
        else:
            _say(
                f"training failed (exit code {returncode}); see the output above. "
                f"Last checkpoint: {last}."
            )
    return returncode


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m apertus.train.launch",
        description="Run Apertus pretraining with torchtitan under torchrun.",
    )
    parser.add_argument("--spec", required=True, help="run spec (JSON)")
    parser.add_argument("--nproc", type=int, default=1, help="processes on this node")
    parser.add_argument("extra", nargs=argparse.REMAINDER, help="after --: torchtitan overrides")
    args = parser.parse_args(argv)
    extra = args.extra[1:] if args.extra[:1] == ["--"] else args.extra
    try:
        return run(args.spec, args.nproc, extra)
    except ApertusError as e:
        _say(f"error: {e}")
        return 2


if __name__ == "__main__":
    sys.exit(main())
