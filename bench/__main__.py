"""The benchmark suite: every benchmark, one after the other, each in a fresh process, then one
table of ratios (ours against a baseline measured in the same run).

    python -m bench [--quick] [--only NAME,...] [--skip NAME,...] [--json FILE] [--logs DIR]

Benchmarks (`python -m bench.<name>` runs one alone, with its own options):
  train_step    our training step against torchtitan's llama3 at matched size; Goldfish share
  activation    xIELU (fused and reference) against SwiGLU, elementwise and whole MLP
  optimizer     AdEMAMix against AdamW, step time and state memory
  bf16_cpu      a bf16 training step on a CPU without bf16 units: our products against torch's
  data_filter   the data stage's filter chain against datatrove's FineWeb-2-style chain
  tokenization  the tokenization stage against raw `encode_batch`
  verify_data   block-checked reads, checksum writing, sha256 checks, checkpoint seals
  phase_index   the data phase index: build peak memory, memory held open, size on disk
  pipeline      default pipeline wall time, a no-op re-run, the 70B preset's dry-run

The full suite takes about as long as the default pipeline plus a few minutes; `--quick` runs
each on small sizes (a smoke run: its ratios are not the numbers to quote). Exit status 1 when a
benchmark failed (its log's last lines are printed); missed goals are shown, not failures.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from bench.common import Ratio, format_table, machine, read_json, write_json

BENCHMARKS = (
    "train_step",
    "activation",
    "optimizer",
    "bf16_cpu",
    "data_filter",
    "tokenization",
    "verify_data",
    "phase_index",
    "memory_plan",
    "pipeline",
)
ROOT = Path(__file__).resolve().parent.parent


def names(value: str) -> list[str]:
    chosen = [n.strip() for n in value.split(",") if n.strip()]
    unknown = [n for n in chosen if n not in BENCHMARKS]
    if unknown:
        raise argparse.ArgumentTypeError(
            f"unknown benchmark(s) {', '.join(unknown)}; known: {', '.join(BENCHMARKS)}"
        )
    return chosen


def run_one(
    name: str,
    quick: bool,
    logs: Path,
    extra: Sequence[str] = (),
    label: str | None = None,
    timeout: float | None = None,
) -> tuple[list[Ratio], float, str | None]:
    """Run `python -m bench.<name> [extra...]`; its ratios, wall time, and an error text if it
    failed. `label` names its log and JSON in `logs` (default: `name`); `timeout` in seconds."""
    label = label or name
    result, log = logs / f"{label}.json", logs / f"{label}.log"
    command = [sys.executable, "-m", f"bench.{name}", "--json", str(result), *extra]
    if quick:
        command.append("--quick")
    start = time.perf_counter()
    with log.open("w") as out:
        try:
            done = subprocess.run(
                command, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, timeout=timeout
            )
            code = done.returncode
        except subprocess.TimeoutExpired:
            code = f"timed out after {timeout:.0f} s"
    seconds = time.perf_counter() - start
    if code != 0 or not result.exists():
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-20:])
        return [], seconds, f"{label} failed (exit {code}); the end of {log}:\n{tail}"
    return read_json(result), seconds, None


def main() -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench",
        description=__doc__.strip(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--quick", action="store_true", help="small sizes (a smoke run)")
    parser.add_argument("--only", type=names, help="comma-separated benchmarks to run")
    parser.add_argument("--skip", type=names, default=[], help="comma-separated ones to leave out")
    parser.add_argument("--json", type=Path, help="also write all ratios to this JSON file")
    parser.add_argument(
        "--logs", type=Path, help="keep each benchmark's output here (default: a temporary dir)"
    )
    args = parser.parse_args()
    chosen = [n for n in (args.only or BENCHMARKS) if n not in args.skip]

    with tempfile.TemporaryDirectory(prefix="apertus-bench-") as tmp:
        logs = args.logs or Path(tmp)
        logs.mkdir(parents=True, exist_ok=True)
        rows: list[Ratio] = []
        errors: list[str] = []
        for i, name in enumerate(chosen, 1):
            print(f"[{i}/{len(chosen)}] {name} ...", end=" ", flush=True)
            ratios, seconds, error = run_one(name, args.quick, logs)
            print(f"{'FAILED' if error else 'done'} in {seconds:.0f} s", flush=True)
            rows += ratios
            if error:
                errors.append(error)
        print(f"\n{machine()}{' (--quick: smoke sizes)' if args.quick else ''}\n")
        print(format_table(rows))
        if args.json:
            write_json(args.json, rows, quick=args.quick, benchmarks=chosen)
        for error in errors:
            print(f"\n{error}", file=sys.stderr)
        if errors and not args.logs:
            print("(the logs go with this run: --logs DIR keeps them)", file=sys.stderr)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
