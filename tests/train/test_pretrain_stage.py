"""The pretraining stage end to end through Snakemake on the embedded default (the shared
`default_run`): phase 1, phase 2 continuing it, one long-context stage; the loss ends well
below the unigram entropy of the training data, and re-runs stop at the right stage."""

import contextlib
import dataclasses
import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from apertus.tokenize.phases import PHASE_FILE
from apertus.train.metrics import read_metrics
from apertus.train.run_spec import CHECKPOINT_CHECKSUMS, checkpoint_steps, load_run_spec
from apertus.train.stage import work_directory
from tests.conftest import BIN, REPO, copy_upstream, planned_jobs, process_tree, run_tool

pytestmark = pytest.mark.slow

POSTTRAIN_JOBS = {
    "posttrain_sft": 1,
    "posttrain_qrpo_sample": 1,
    "posttrain_qrpo_score": 1,
    "posttrain_qrpo_score_shard": 1,
    "posttrain_qrpo": 1,
    "posttrain_heldout": 2,
    "posttrain_report": 1,
}


def record(run_dir, stage):
    return json.loads((run_dir / "pretrain" / stage / "run.json").read_text())


def test_loss_ends_well_below_the_unigram_entropy(default_run):
    last = record(default_run, "phase2")
    assert last["final_loss"] < last["unigram_entropy"] - 2.0, last
    first = read_metrics(default_run / "pretrain" / "phase1" / "metrics.jsonl")
    assert first[min(first)]["loss"] > last["final_loss"] + 3.0


def test_phase2_continues_phase1_and_long_context_starts_from_phase2(default_run):
    p1, p2, ctx = (record(default_run, s) for s in ("phase1", "phase2", "ctx256"))
    assert p2["final_step"] > p1["final_step"]  # one step count over the phases
    metrics = read_metrics(default_run / "pretrain" / "phase2" / "metrics.jsonl")
    assert min(metrics) == p1["final_step"] + 1
    assert ctx["final_step"] == 20 and ctx["seq_len"] == 256
    assert ctx["model_overrides"]["rope_theta"] == 1_000_000
    for stage, r in (("phase1", p1), ("phase2", p2), ("ctx256", ctx)):
        # Relative to the run.json's folder, so the results folder can move.
        assert r["final_checkpoint"].startswith(f"../_work/{stage}-")
        step_dir = default_run / "pretrain" / stage / r["final_checkpoint"]
        assert r["final_step"] in checkpoint_steps(step_dir.parent)
    manifest = json.loads((default_run / "pretrain" / "ctx256.manifest.json").read_text())
    assert manifest["inputs"][1]["path"].endswith("pretrain/phase2")
    final = os.path.normpath(default_run / "pretrain" / "ctx256" / ctx["final_checkpoint"])
    recorded = [
        os.path.normpath(os.path.join(manifest["cwd"], o["path"])) for o in manifest["outputs"]
    ]
    assert final in recorded


def test_changing_a_long_context_stage_reruns_only_it(default_run, tmp_path):
    text = (
        "pretrain:\n  long_context:\n    - {name: ctx256, phase: phase2, seq_len: 256,"
        " rope_theta: 2000000, global_batch: 4, steps: 20, lr: 0.001, warmup_steps: 5}\n"
    )
    # ... and what was made from its checkpoint: its export and evaluation, and the
    # post-training that starts from it (SFT, QRPO, their exports and evaluations)
    assert planned_jobs(default_run, tmp_path, text) == {
        "pretrain_stage": 1,
        "export_checkpoint": 3,
        "evaluate_checkpoint": 3,
        "evaluate_memorization": 3,
        "evaluate_table": 1,
        "release": 1,
        "report_training": 3,  # the curves of ctx256, SFT and QRPO
        "report_summary": 1,
        **POSTTRAIN_JOBS,
    }


def test_changing_the_lr_reruns_pretraining_not_tokenization(default_run, tmp_path):
    jobs = planned_jobs(default_run, tmp_path, "pretrain:\n  lr:\n    peak: 0.002\n")
    assert jobs == {  # the Goldfish control (phase2-no-goldfish) trains with the same LR
        "pretrain_stage": 4,
        "export_checkpoint": 6,
        "evaluate_checkpoint": 6,
        "evaluate_memorization": 6,
        "evaluate_table": 1,
        "release": 1,
        "report_training": 6,
        "report_summary": 1,
        **POSTTRAIN_JOBS,
    }


def test_interrupted_pipeline_resumes_training_from_the_last_checkpoint(
    default_run_phase2, tmp_path
):
    """Ctrl-C in the middle of phase 1, then the same snakemake command again: training starts
    from the last checkpoint, not from step 0, and ends with the uninterrupted run's loss
    (CPU training is deterministic). The data and tokenization outputs are copied from the
    default run so that only pretraining runs, and so is one of its phase-1 checkpoints, as a
    run of the same command stopped there earlier would have left it: the run resumes from it
    and writes the next one before Ctrl-C, so that only the end of phase 1 trains (from two
    intervals before its last checkpoint) and the re-run has two checkpoints to choose from
    (it must take the later)."""
    run_dir = tmp_path / "results" / "e2e"
    copy_upstream(default_run_phase2, run_dir)
    uninterrupted = record(default_run_phase2, "phase1")
    final = uninterrupted["final_step"]
    checkpoint = json.loads((default_run_phase2 / "pretrain" / "phase1" / "spec.json").read_text())[
        "checkpoint"
    ]
    # spec.json in the output holds its paths relative to its folder (RunSpec.relative_to).
    interval = checkpoint["interval"]
    default_ckpt = default_run_phase2 / "pretrain" / "phase1" / checkpoint["folder"]
    # Ctrl-C after the checkpoint before the last one.
    last_interval = (final - 1) // interval * interval
    stop_after = max(last_interval - interval, 2 * interval)
    start = stop_after - interval
    work = phase1_work_dir(default_run_phase2, run_dir)
    shutil.copytree(default_ckpt / f"step-{start}", work / "ckpt" / f"step-{start}")
    target = run_dir / "pretrain" / "phase1.manifest.json"
    command = [
        str(BIN / "snakemake"),
        str(target),  # before --config, which takes every argument after it
        "--cores",
        "2",
        "--config",
        f"results_dir={run_dir.parent}",
        "run=e2e",
    ]
    proc = subprocess.Popen(
        command,
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    deadline = time.monotonic() + 600
    while not (work / "ckpt" / f"step-{stop_after}" / CHECKPOINT_CHECKSUMS).exists():
        elsewhere = [p.parent for p in run_dir.glob("pretrain/_work/*/spec.json")]
        if elsewhere and elsewhere != [work]:
            os.killpg(proc.pid, signal.SIGINT)
            pytest.fail(f"phase 1 trains in {elsewhere}, not {work}: see phase1_work_dir")
        assert proc.poll() is None, f"snakemake ended before the checkpoint of step {stop_after}"
        assert time.monotonic() < deadline, f"no checkpoint at step {stop_after} within 10 minutes"
        time.sleep(0.5)
    assert min(read_metrics(work / "out" / "metrics.jsonl")) == start + 1  # resumed
    # `apertus status` on the half-finished run, while phase 1 trains: the run is frozen
    # for the status call, so phase 1 cannot finish before the Ctrl-C that follows it,
    # however slow the machine. SIGSTOP to its process group first (no new process then),
    # then to the rest of its tree: torchrun's workers run in sessions of their own.
    os.killpg(proc.pid, signal.SIGSTOP)
    frozen = process_tree(proc.pid)
    for pid in frozen:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGSTOP)
    try:
        where = ["--results-dir", str(run_dir.parent), "--run", "e2e"]
        running = _status(*where)
    finally:
        # Ctrl-C, delivered as the run continues: what the terminal sends its process group.
        os.killpg(proc.pid, signal.SIGINT)
        for pid in frozen:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
    assert running["stages"]["data"]["state"] == "done"
    assert running["stages"]["pretrain"]["state"] == "running"
    assert running["stages"]["posttrain"]["state"] == "missing"
    (phase1,) = [t for t in running["training"] if t["stage"] == "phase1"]
    assert stop_after <= phase1["step"] < phase1["steps"] == final
    assert phase1["loss"] > 0 and phase1["eta_s"] > 0
    (step,) = [s for s in running["steps"] if s["state"] == "running"]
    assert step["rule"] == "pretrain_stage" and step["log"].endswith("phase1.log")
    assert step["progress"]["what"] == "training phase1"  # the log's last progress line
    assert step["progress"]["total"] == phase1["steps"]
    assert proc.wait(timeout=300) != 0
    stopped = _status(*where)
    assert stopped["stages"]["pretrain"]["running"] == 0
    assert not target.exists()  # the interrupted job left no manifest
    assert stop_after in checkpoint_steps(work / "ckpt")
    assert final not in checkpoint_steps(work / "ckpt")

    run_tool("snakemake", *command[1:], check=True, timeout=900)
    manifest = json.loads(target.read_text())
    assert manifest["summary"]["resumed_from_step"] >= stop_after
    resumed = record(run_dir, "phase1")
    assert resumed["final_step"] == final
    assert resumed["final_loss"] == uninterrupted["final_loss"]
    # (What a config change makes stale: tests/report/test_report_stage.py.)


def phase1_work_dir(default_run: Path, run_dir: Path) -> Path:
    """Where phase 1 of `run_dir` (a copy of the default run's upstream stages) trains: the
    stage names its work directory after the run spec, which holds the phase's path, and the
    phase's phase.json (apertus.train.stage.train_and_record)."""
    output = default_run / "pretrain" / "phase1"
    spec = load_run_spec(output / "spec.json").resolved(output)
    phase_dir = run_dir / "tokenize" / "phases" / "phase1"
    moved = dataclasses.replace(spec, phase_dir=str(phase_dir))
    key_material = [(phase_dir / PHASE_FILE).read_text(), None]  # no previous stage
    return work_directory(run_dir / "pretrain" / "_work", "phase1", moved, key_material)


def _status(*args: str) -> dict:
    proc = run_tool("apertus", "status", "--json", *args, check=True, timeout=300)
    return json.loads(proc.stdout)
