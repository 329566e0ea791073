"""The benchmark suite's plumbing: the Ratio arithmetic, its table, and `python -m bench` running
real benchmarks in fresh processes and gathering their ratios. Timings are never asserted."""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
from pathlib import Path

import pytest

from bench.common import Ratio, format_table, interleaved_best, read_json, write_json

ROOT = Path(__file__).resolve().parents[2]


def test_ratio_direction_and_goal():
    slower = Ratio("step", 13.5, 10.0, "ms", "AdamW", goal=1.35)
    assert slower.ratio == pytest.approx(1.35)
    assert slower.met is True
    assert Ratio("step", 14.0, 10.0, "ms", "AdamW", goal=1.35).met is False
    faster = Ratio("rate", 90.0, 100.0, "tokens/s", "raw", lower_is_better=False, goal=0.8)
    assert faster.met is True
    slow = Ratio("rate", 70.0, 100.0, "tokens/s", "raw", lower_is_better=False, goal=0.8)
    assert slow.met is False
    assert Ratio("x", 1.0, 2.0, "s", "y").met is None
    assert math.isinf(Ratio("x", 1.0, 0.0, "s", "y").ratio)


def test_table_names_every_row_its_baseline_goal_and_verdict():
    rows = [
        Ratio("AdEMAMix / AdamW", 11.0, 10.0, "ms", "AdamW", goal=1.35, note="20M params"),
        Ratio("tokens", 50.0, 100.0, "tokens/s", "raw", lower_is_better=False, goal=0.8),
        Ratio("dry-run", 3.0, 3.0, "s", "default"),
    ]
    table = format_table(rows)
    lines = table.splitlines()
    assert lines[0].split()[:6] == ["measure", "ours", "baseline", "unit", "ratio", "goal"]
    assert "1.100" in lines[2] and "<= 1.35" in lines[2] and lines[2].endswith("ok")
    assert "0.500" in lines[3] and ">= 0.8" in lines[3] and lines[3].endswith("MISSED")
    assert "(default)" in lines[4] and lines[4].endswith("1.000")
    assert "AdEMAMix / AdamW: 20M params" in table


def test_json_round_trip(tmp_path):
    rows = [Ratio("a", 1.5, 3.0, "s", "b", lower_is_better=False, goal=0.4, note="n")]
    write_json(tmp_path / "r.json", rows, quick=True)
    assert read_json(tmp_path / "r.json") == rows
    data = json.loads((tmp_path / "r.json").read_text())
    assert data["quick"] is True and "CPU cores" in data["machine"]
    assert data["ratios"][0]["ratio"] == 0.5 and data["ratios"][0]["met"] is True


def test_interleaved_best_takes_turns_after_the_warmup():
    order: list[str] = []
    calls = {name: (lambda name=name: order.append(name)) for name in ("ours", "baseline")}
    best = interleaved_best(calls, repeat=2, warmup=1)
    assert order == ["ours", "baseline"] * 3
    assert set(best) == {"ours", "baseline"} and all(0 <= s < 1 for s in best.values())


def test_unknown_benchmark_is_named():
    done = subprocess.run(
        [sys.executable, "-m", "bench", "--only", "optimizer,nonsense"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 2
    assert "unknown benchmark(s) nonsense" in done.stderr


@pytest.mark.slow
def test_suite_runs_benchmarks_and_gathers_their_ratios(tmp_path):
    """The optimizer, data verification and pipeline benchmarks, quick: the pipeline one runs
    real Snakemake (the data sample and robots.txt jobs, then the same command as a checked
    no-op, then dry runs of the default and of the 70B preset)."""
    done = subprocess.run(
        [
            sys.executable, "-m", "bench", "--quick", "--only", "optimizer,verify_data,pipeline",
            "--json", str(tmp_path / "all.json"), "--logs", str(tmp_path / "logs"),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    rows = read_json(tmp_path / "all.json")
    assert [r.name for r in rows] == [
        "AdEMAMix / AdamW step time",
        "AdEMAMix / AdamW optimizer state",
        "document reads, block-checked / plain pread",
        "shard checksums written: crc32 blocks + sha256 / sha256 alone",
        "SFT data sha256 check / sha256sum",
        "checkpoint seal (sha256 of its files) / DCP save",
        "pipeline up to the data sample wall time",
        "no-op re-run / full run",
        "70B preset dry-run / default dry-run",
    ]
    for row in rows:
        assert row.ours > 0 and row.baseline > 0, row
        assert row.name in done.stdout
    # AdEMAMix keeps three moments where AdamW keeps two: exactly 1.5x the state.
    assert rows[1].ratio == pytest.approx(1.5)
    # The dry runs really planned the DAGs: hundreds of jobs for the 70B preset. (That the
    # re-run was a no-op is checked by the benchmark itself, which fails otherwise.)
    planned = re.search(r"(\d+) jobs planned for the 70B preset, (\d+) for the", rows[8].note)
    assert planned, rows[8].note
    assert int(planned.group(1)) > 5 * int(planned.group(2)) > 0
