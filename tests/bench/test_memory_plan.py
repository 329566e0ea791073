"""The memory-plan benchmark's quick mode: real training steps of the debug flavor on one gloo
process, measured by MemTracker against `training_memory`; one table row per case. The measured
peaks and their ratios to the plan are never asserted."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from bench.memory_plan import QUICK_CASES

ROOT = Path(__file__).resolve().parents[2]


def test_quick_mode_prints_a_row_per_case():
    done = subprocess.run(
        [sys.executable, "-W", "ignore", "-m", "bench.memory_plan", "--quick"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert lines.count(next(line for line in lines if line.startswith("case "))) == 1
    for case in QUICK_CASES:
        rows = [line for line in lines if line.split("  ")[0].strip() == case.name]
        assert rows, (case.name, done.stdout)
        row = rows[0].split()
        assert len(row) == len(case.name.split()) + 5
        assert f"{case.name} tracked peak / plan" in done.stdout
