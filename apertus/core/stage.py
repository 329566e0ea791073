"""The stage runner: how one step of a stage is started by its rule and leaves its manifest.

A rule calls one module entry point::

    python -m apertus.<stage>.<step> --config {params.config:q} --manifest {output.manifest} ...

and the entry point is written as::

    def main(argv=None):
        parser = stage_parser("tokenize", "Tokenize the filtered corpus into shards.")
        parser.add_argument("--input", ...)
        args = parser.parse_args(argv)
        cfg = ShardsConfig.from_dict(args.config)   # a Config dataclass (apertus.core.typed)
        with StepRun("tokenize", "shards", args.config, inputs=[...], outputs=[...],
                     manifest=args.manifest, seed=cfg.seed) as step:
            ...                       # the real work
            step.summary["documents"] = n

    if __name__ == "__main__":
        run_main(main)

The manifest is written only when the work finished without error; a failed step leaves none,
and Snakemake removes its partial outputs.
"""

from __future__ import annotations

import argparse
import datetime as dt
import errno
import json
import logging
import os
import shutil
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from apertus.core import ApertusError
from apertus.core.lifetime import stop_with_workflow
from apertus.core.manifest import describe_path, write_manifest
from apertus.core.provenance import check_inputs, run_dir_of_step

log = logging.getLogger("apertus")


def setup_logging(level: str = "INFO") -> None:
    """Timestamped lines on stderr, which the rule sends to its `log:` file."""
    logging.basicConfig(
        level=level,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        datefmt="%Y-%m-%d %H:%M:%S",
        stream=sys.stderr,
        force=True,
    )


def parse_config_argument(text: str) -> dict[str, Any]:
    """The `--config` argument: a stage's config subtree as JSON (what `stage_config()` gives)."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as e:
        raise argparse.ArgumentTypeError(f"--config is not valid JSON ({e})") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError("--config must be a JSON object (a config subtree)")
    return value


def stage_parser(stage: str, description: str) -> argparse.ArgumentParser:
    """An argument parser with the arguments every step takes: --config and --manifest."""
    parser = argparse.ArgumentParser(prog=f"apertus {stage}", description=description)
    parser.add_argument(
        "--config",
        type=parse_config_argument,
        required=True,
        help="the stage's config subtree as JSON (the rule passes its params)",
    )
    parser.add_argument(
        "--manifest", type=Path, required=True, help="where to write this step's manifest.json"
    )
    return parser


class StepRun:
    """Context of one step: times it, and on success writes its manifest (atomically)."""

    def __init__(
        self,
        stage: str,
        step: str,
        config: dict[str, Any],
        *,
        inputs: Sequence[str | os.PathLike],
        outputs: Sequence[str | os.PathLike],
        manifest: str | os.PathLike,
        seed: int | None = None,
    ) -> None:
        self.stage, self.step, self.config = stage, step, config
        self.inputs, self.outputs = list(inputs), list(outputs)
        self.manifest_path = Path(manifest)
        self.seed = seed
        self.summary: dict[str, Any] = {}
        self.manifest: dict[str, Any] | None = None

    def __enter__(self) -> StepRun:
        missing = [str(p) for p in self.inputs if not Path(p).exists()]
        if missing:
            raise ApertusError(f"{self.stage}/{self.step}: missing input(s): {', '.join(missing)}")
        self.started = dt.datetime.now(dt.UTC)
        log.info("%s/%s started", self.stage, self.step)
        # Hashed for the manifest now, before they are read: an input another step of the run
        # wrote must hold the bytes that step recorded (apertus.core.provenance).
        self.described_inputs = [describe_path(p) for p in self.inputs]
        check_inputs(self.described_inputs, run_dir_of_step())
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is not None:
            log.error("%s/%s failed: no manifest written", self.stage, self.step)
            return
        missing = [str(p) for p in self.outputs if not Path(p).exists()]
        if missing:
            raise ApertusError(
                f"{self.stage}/{self.step}: finished without writing: {', '.join(missing)}"
            )
        ended = dt.datetime.now(dt.UTC)
        self.manifest = write_manifest(
            self.manifest_path,
            stage=self.stage,
            step=self.step,
            config=self.config,
            inputs=self.described_inputs,
            outputs=self.outputs,
            seed=self.seed,
            started=self.started,
            ended=ended,
            summary=self.summary,
        )
        log.info(
            "%s/%s done in %.1f s; manifest %s",
            self.stage,
            self.step,
            (ended - self.started).total_seconds(),
            self.manifest_path,
        )


# What the machine refused, and what to do (the step's outputs are atomic: nothing it left
# half-written looks complete, and a re-run starts or resumes the step).
_ENVIRONMENT_ERRORS = {
    errno.ENOSPC: "no space left on device",
    errno.EDQUOT: "disk quota exceeded",
    errno.EACCES: "permission denied",
    errno.EPERM: "operation not permitted",
    errno.EROFS: "read-only filesystem",
    errno.ENOMEM: "out of memory",
}


def free_space(path: str | os.PathLike[str]) -> str:
    """Free and total space of the filesystem holding `path` (or its nearest existing parent)."""
    for candidate in (Path(path), *Path(path).absolute().parents):
        try:
            usage = shutil.disk_usage(candidate)
        except OSError:
            continue
        return f"{usage.free / 2**20:.0f} MiB free of {usage.total / 2**30:.1f} GiB there"
    return "free space unknown"


def environment_error(error: BaseException) -> str | None:
    """One line for a failure the machine caused (disk full, quota, permissions, read-only
    filesystem, memory): what, where, and what to do; None for any other error."""
    if isinstance(error, MemoryError):
        return (
            "out of memory in this step: give its rule more memory (resources in the config "
            "or the profile) or lower its batch size, then re-run"
        )
    if not isinstance(error, OSError) or error.errno not in _ENVIRONMENT_ERRORS:
        return None
    what = _ENVIRONMENT_ERRORS[error.errno]
    where = error.filename if error.filename is not None else os.getcwd()
    if error.errno in (errno.ENOSPC, errno.EDQUOT):
        advice = (
            f"{free_space(where)}; free space (or move results_dir to a larger filesystem) "
            "and re-run: finished steps and checkpoints are kept, and nothing half-written "
            "is taken for complete"
        )
    elif error.errno == errno.ENOMEM:
        advice = "give the step more memory or lower its batch size, then re-run"
    else:
        advice = "check the owner and mode of the path (ls -l), then re-run"
    target = f": {where}" if error.filename is not None else ""
    said = f" ({error.strerror})" if str(error.strerror).lower() != what else ""
    return f"{what}{target}{said}: {advice}"


def failure_summary(run_dir: str | os.PathLike[str], since: float) -> list[str]:
    """After a failed Snakemake run: the last `error:` line of every step log written since
    `since` (a time.time()), and a warning when the results folder's filesystem is (nearly)
    full, since a full disk may have cut the logs themselves. For the workflow's `onerror`,
    whose output reaches the terminal even when the logs' disk cannot take a line more."""
    run_dir = Path(run_dir)
    lines = []
    for log in sorted((run_dir / "logs").rglob("*.log")):
        try:
            if log.stat().st_mtime < since:
                continue
            with open(log, "rb") as f:
                f.seek(max(0, log.stat().st_size - 65536))
                tail = f.read().decode("utf-8", "replace").splitlines()
        except OSError:
            continue
        errors = [line.strip() for line in tail if "error: " in line]
        if errors:
            lines.append(f"{log}: {errors[-1]}")
    try:
        usage = shutil.disk_usage(run_dir if run_dir.exists() else run_dir.parent)
    except OSError:
        return lines
    if usage.free < min(2**30, usage.total // 100):
        lines.append(
            f"error: the filesystem of {run_dir} is full ({free_space(run_dir)}): steps fail "
            "with 'No space left on device' and their logs may be cut; free space or move "
            "results_dir, then re-run (finished steps and checkpoints are kept)"
        )
    return lines


def run_main(main: Callable[[list[str] | None], Any], argv: list[str] | None = None) -> None:
    """Run a step's `main`; a user-fixable error becomes one 'error:' line and exit code 2, as
    does a failure the machine caused (`environment_error`: disk full, permissions, memory).

    Log verbosity comes from APERTUS_LOG_LEVEL (default INFO).
    """
    setup_logging(os.environ.get("APERTUS_LOG_LEVEL", "INFO"))
    stop_with_workflow()  # no job outlives the Snakemake that started it
    try:
        main(argv)
    except ApertusError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
    except KeyboardInterrupt:
        sys.exit(130)
    except (OSError, MemoryError) as e:
        message = environment_error(e)
        if message is None:
            raise
        print(f"error: {message}", file=sys.stderr)
        sys.exit(2)
