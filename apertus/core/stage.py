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
import json
import logging
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from apertus.core import ApertusError
from apertus.core.manifest import write_manifest

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
            inputs=self.inputs,
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


def run_main(main: Callable[[list[str] | None], Any], argv: list[str] | None = None) -> None:
    """Run a step's `main`; a user-fixable error becomes one 'error:' line and exit code 2.

    Log verbosity comes from APERTUS_LOG_LEVEL (default INFO).
    """
    setup_logging(os.environ.get("APERTUS_LOG_LEVEL", "INFO"))
    try:
        main(argv)
    except ApertusError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
    except KeyboardInterrupt:
        sys.exit(130)
