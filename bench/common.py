"""What every benchmark shares: a measured pair (ours next to its baseline) as a `Ratio`, the
common command-line options, the printed table and the JSON file the suite collects.

A benchmark module defines `add_arguments(parser)` (its own options) and
`measure(args) -> list[Ratio]`, and ends with `main(add_arguments, measure, __doc__)`, so it runs
on its own (`python -m bench.<name>`) and under the suite (`python -m bench`), which starts
each one in a fresh process with `--json FILE` and reads the ratios back.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import torch


@dataclass(frozen=True)
class Ratio:
    """One comparison: `ours` and `baseline` in the same `unit`, measured in the same run.

    `ratio` is ours / baseline. `lower_is_better` says which way is good for the unit (time,
    memory: lower; throughput: higher). `goal` is the bound the ratio should meet (<= goal when
    lower is better, >= goal otherwise), None when there is none.
    """

    name: str
    ours: float
    baseline: float
    unit: str
    baseline_name: str
    lower_is_better: bool = True
    goal: float | None = None
    note: str = ""

    @property
    def ratio(self) -> float:
        return self.ours / self.baseline if self.baseline else math.inf

    @property
    def met(self) -> bool | None:
        if self.goal is None:
            return None
        return self.ratio <= self.goal if self.lower_is_better else self.ratio >= self.goal

    def to_json(self) -> dict:
        return {**asdict(self), "ratio": self.ratio, "met": self.met}

    @classmethod
    def from_json(cls, data: dict) -> Ratio:
        data = {k: v for k, v in data.items() if k not in ("ratio", "met")}
        return cls(**data)


def interleaved_best(
    calls: dict[str, Callable[[], object]], repeat: int, warmup: int = 1
) -> dict[str, float]:
    """The fastest of `repeat` timed calls of each function (seconds), after `warmup` untimed
    rounds (compilation, allocator). The functions take turns call by call, so a load that comes
    and goes on a shared machine hits all of them alike."""
    for _ in range(warmup):
        for fn in calls.values():
            fn()
    best = dict.fromkeys(calls, math.inf)
    for _ in range(repeat):
        for name, fn in calls.items():
            start = time.perf_counter()
            fn()
            best[name] = min(best[name], time.perf_counter() - start)
    return best


def _number(value: float) -> str:
    if value == 0 or 0.01 <= abs(value) < 1e6:
        return f"{value:,.3g}" if abs(value) < 100 else f"{value:,.0f}"
    return f"{value:.3g}"


def format_table(rows: Sequence[Ratio]) -> str:
    """The rows as an aligned text table: what, ours, baseline, ratio, goal."""
    header = ("measure", "ours", "baseline", "unit", "ratio", "goal", "")
    lines = [header]
    for row in rows:
        goal = "" if row.goal is None else ("<= " if row.lower_is_better else ">= ") + f"{row.goal}"
        verdict = {True: "ok", False: "MISSED", None: ""}[row.met]
        lines.append(
            (
                row.name,
                _number(row.ours),
                f"{_number(row.baseline)} ({row.baseline_name})",
                row.unit,
                f"{row.ratio:.3f}" if row.ratio >= 0.1 else f"{row.ratio:.3g}",
                goal,
                verdict,
            )
        )
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    right = {1, 4}
    out = []
    for n, line in enumerate(lines):
        cells = [
            cell.rjust(w) if i in right else cell.ljust(w)
            for i, (cell, w) in enumerate(zip(line, widths, strict=True))
        ]
        out.append("  ".join(cells).rstrip())
        if n == 0:
            out.append("  ".join("-" * w for w in widths))
    notes = [f"  {row.name}: {row.note}" for row in rows if row.note]
    if notes:
        out += ["", "notes:", *notes]
    return "\n".join(out)


def machine() -> str:
    """One line naming where the numbers were taken."""
    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no GPU"
    cpu = platform.processor() or platform.machine()
    return (
        f"{platform.node()}: {os.cpu_count()} CPU cores ({cpu}), {gpu},"
        f" torch {torch.__version__}, Python {platform.python_version()}"
    )


def write_json(path: Path, rows: Sequence[Ratio], **extra: object) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = {"machine": machine(), **extra, "ratios": [row.to_json() for row in rows]}
    path.write_text(json.dumps(payload, indent=2) + "\n")


def read_json(path: Path) -> list[Ratio]:
    return [Ratio.from_json(row) for row in json.loads(path.read_text())["ratios"]]


def main(
    add_arguments: Callable[[argparse.ArgumentParser], None],
    measure: Callable[[argparse.Namespace], list[Ratio]],
    doc: str | None,
) -> None:
    """Parse the module's options plus the common ones, measure, print the table, write JSON."""
    parser = argparse.ArgumentParser(
        description=(doc or "").strip(), formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--quick", action="store_true", help="small sizes and few repeats (a smoke run)"
    )
    parser.add_argument("--json", type=Path, help="also write the ratios to this JSON file")
    add_arguments(parser)
    args = parser.parse_args()
    rows = measure(args)
    print(format_table(rows), flush=True)
    if args.json:
        write_json(args.json, rows)
