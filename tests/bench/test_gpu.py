"""`python -m bench.gpu` on a machine without a GPU (issue 43): it runs the CPU-capable parts,
says which it skipped and why, and appends a dated section naming the machine; and the curve
comparison of `bench.precision`. Timings are never asserted."""

from __future__ import annotations

import argparse
import datetime
import importlib
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from bench import gpu, precision

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.skipif(torch.cuda.is_available(), reason="the CPU path of bench.gpu")
def test_bench_gpu_on_cpu_runs_what_it_can_and_names_what_it_skipped(tmp_path):
    results = tmp_path / "RESULTS.md"
    results.write_text("# Results\n")
    done = subprocess.run(
        [sys.executable, "-m", "bench.gpu", "--quick", "--results-md", str(results),
         "--only", "train_step,attention,optimizer,vllm_sampler"],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    text = results.read_text()
    assert text.startswith("# Results\n")  # appended, not replaced
    assert f"## bench.gpu, {datetime.date.today().isoformat()}: " in text
    assert "no GPU" in text and "CPU cores" in text
    # The optimizer part ran at CPU sizes; the GPU-only parts are named as skipped.
    assert "AdEMAMix / AdamW step time" in text
    for name in ("8B layers vs llama3", "70B layers vs llama3", "document-masked attention",
                 "vLLM sampler"):  # fmt: skip
        assert f"{name}" in text.split("Skipped: ")[1], name
    assert "Failed" not in text


def test_every_parts_options_parse_with_its_benchmarks_own_parser():
    for part in gpu.PARTS:
        module = importlib.import_module(f"bench.{part.module}")
        for args in (part.gpu_args, *([] if part.cpu_args is None else [part.cpu_args])):
            parser = argparse.ArgumentParser()
            parser.add_argument("--quick", action="store_true")
            module.add_arguments(parser)
            parsed = parser.parse_args([*args, "--quick"])
            assert parsed.quick, part


def test_curves_are_compared_on_window_means_of_the_second_half():
    steps = range(1, 41)
    base = {s: 5.0 - 0.05 * s for s in steps}
    # A constant offset of 0.1 in the second half only: the gap is 0.1, the first half ignored.
    shifted = {s: v + (0.1 if s > 20 else 3.0) for s, v in base.items()}
    assert precision.window_means(base)[0] == pytest.approx(sum(base[s] for s in range(1, 11)) / 10)
    mean_gap, final_gap = precision.curve_gap(shifted, base)
    assert mean_gap == pytest.approx(0.1) and final_gap == pytest.approx(0.1)
