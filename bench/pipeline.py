"""The workflow as a user meets it: the whole default pipeline's wall time, a no-op re-run of it,
and the dry-run of the 70B preset's DAG, each through the `snakemake` command line.

    python -m bench.pipeline [--keep DIR] [--repeat N] [--quick] [--json FILE]

Ratios (each pair measured in this run, except the fixed budget):
- default pipeline wall time (the median of `--repeat` full runs, each in a fresh results
  directory; default 3) against the 8-minute budget of issue 19;
- a no-op re-run (everything up to date; checked: Snakemake must report nothing to do) against
  the full run it follows;
- `snakemake -n` of the 70B preset (hundreds of jobs) against `snakemake -n` of the default.

`--quick` runs the pipeline only up to the data sample and robots.txt snapshot (a smoke run of
the measurement, not of the pipeline).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.common import Ratio, main

ROOT = Path(__file__).resolve().parent.parent
BUDGET_S = 480.0  # the default pipeline should stay under 8 minutes on 2 cores (issue 19)
QUICK_TARGETS = ("data_sample", "data_robots")  # rules without wildcards: targets by name


def snakemake(args: list[str], log: Path) -> float:
    """Run `snakemake ARGS` in the repository root, output to `log`; the wall time in seconds.
    A failure ends the benchmark with the log's last lines (the measurement would be wrong)."""
    command = [sys.executable, "-m", "snakemake", *args]
    # The jobs run `python -m apertus...`: this interpreter's environment comes first.
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    start = time.perf_counter()
    with log.open("w") as out:
        done = subprocess.run(command, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-30:])
        raise SystemExit(f"{' '.join(command)} failed (exit {done.returncode}):\n{tail}")
    return seconds


def planned_jobs(log: Path) -> int:
    """The job count of a dry run's summary table ('total  N')."""
    match = re.search(r"^total\s+(\d+)", log.read_text(), re.MULTILINE)
    if not match:
        raise SystemExit(f"no job count in the dry run's output {log}")
    return int(match.group(1))


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--keep", type=Path, help="run in this directory and keep it (default: a temporary one)"
    )
    parser.add_argument(
        "--repeat", type=int, default=3, help="full runs whose median is the wall time (3)"
    )


def measure(args: argparse.Namespace) -> list[Ratio]:
    work = args.keep or Path(tempfile.mkdtemp(prefix="apertus-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        return _measure(work, args.quick, 1 if args.quick else max(1, args.repeat))
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


def _measure(work: Path, quick: bool, repeat: int) -> list[Ratio]:
    targets = list(QUICK_TARGETS) if quick else []
    what = "pipeline up to the data sample" if quick else "default pipeline"

    runs = []
    for i in range(repeat):  # each in a fresh results directory: every job runs
        default = ["--config", f"results_dir={work / f'results-{i}'}", "run=bench"]
        runs.append(snakemake([*targets, *default], work / f"full-{i}.log"))
    full = statistics.median(runs)
    noop = snakemake([*targets, *default], work / "noop.log")
    if "Nothing to be done" not in (work / "noop.log").read_text():
        raise SystemExit(f"the re-run was not a no-op: see {work / 'noop.log'} (use --keep)")

    # Dry runs plan into fresh results directories, so that they plan every job.
    dry_default = snakemake(
        ["-n", "--config", f"results_dir={work / 'results-dry'}", "run=bench"],
        work / "dry-default.log",
    )
    preset = ROOT / "config" / "presets" / "apertus-70b.yaml"
    dry_70b = snakemake(
        ["-n", "--configfile", str(preset), "--config", f"results_dir={work / 'results-70b'}"],
        work / "dry-70b.log",
    )
    jobs_default, jobs_70b = (planned_jobs(work / f"dry-{n}.log") for n in ("default", "70b"))
    return [
        Ratio(
            f"{what} wall time",
            full,
            BUDGET_S,
            "s",
            "8-minute budget",
            goal=None if quick else 1.0,
            note="snakemake with the repository's default profile (all cores), local executor; "
            f"median of {repeat} run(s): " + ", ".join(f"{t:.0f}" for t in runs) + " s",
        ),
        Ratio(
            "no-op re-run / full run",
            noop,
            full,
            "s",
            f"the {what} run",
            note="same command again; Snakemake reports nothing to be done",
        ),
        Ratio(
            "70B preset dry-run / default dry-run",
            dry_70b,
            dry_default,
            "s",
            "default dry-run",
            note=f"snakemake -n: {jobs_70b} jobs planned for the 70B preset, {jobs_default} "
            "for the default",
        ),
    ]


if __name__ == "__main__":
    main(add_arguments, measure, __doc__)
