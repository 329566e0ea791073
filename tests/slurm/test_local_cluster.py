"""The pipeline on a real SLURM cluster: the one-node cluster of profiles/slurm-local, started
by the `slurm_cluster` fixture. The session's default run goes through it where it can run
(tests/conftest.py); here: that it did, and a 2-process training job requeued in the middle of
training (`scontrol requeue`) that resumes from the checkpoint it saved on SIGTERM and ends
with the same weights as an uninterrupted run."""

from __future__ import annotations

import json
import re
import subprocess
import time
from pathlib import Path

import pytest
import torch

from apertus.train.metrics import read_metrics
from apertus.train.run_spec import checkpoint_steps
from tests.conftest import (
    BIN,
    REPO,
    SLURM_JOBS,
    assert_slurm_jobs_but_local_rules,
    copy_upstream,
    default_run_executor,
)

pytestmark = [pytest.mark.slurm, pytest.mark.slow]


def test_every_step_of_the_default_run_but_the_local_rules_ran_as_a_slurm_job(
    default_run, slurm_cluster
):
    if default_run_executor() != "slurm":
        pytest.skip("the default run used the local executor (not APERTUS_TEST_EXECUTOR=slurm)")
    # Recorded by the fixture right after the run: later tests re-run some steps locally.
    jobs = json.loads((default_run.parent / SLURM_JOBS).read_text())
    assert len(jobs) > 40
    assert_slurm_jobs_but_local_rules(jobs, prefix="e2e/")
    # Training ran as an srun step of its job: torchrun with a c10d rendezvous.
    log = (default_run / "logs" / "pretrain" / "phase1.log").read_text()
    assert re.search(r"srun --overlap --jobid=\d+ --nodes=1 --ntasks=1", log)
    assert "--rdzv-backend c10d" in log


def _long_context(run_dir: Path, tmp_path: Path, *where: str) -> subprocess.Popen:
    """Snakemake making only the ctx256 stage of `run_dir`, on 2 training processes."""
    override = tmp_path / "two-processes.yaml"
    override.write_text("pretrain: {nproc: 2, micro_batch: 2}\n")  # ctx256: 4 sequences
    return subprocess.Popen(
        [
            str(BIN / "snakemake"),
            str(run_dir / "pretrain" / "ctx256.manifest.json"),
            *where,
            "--allowed-rules",
            "pretrain_stage",
            "--configfile",
            str(override),
            "--config",
            f"results_dir={run_dir.parent}",
            "run=e2e",
        ],
        cwd=REPO,
        stdout=open(tmp_path / f"{run_dir.parent.name}.log", "w"),
        stderr=subprocess.STDOUT,
    )


def _final_weights(run_dir: Path, tmp_path: Path) -> dict[str, torch.Tensor]:
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

    from apertus.train.stage import final_checkpoint

    record = json.loads((run_dir / "pretrain" / "ctx256" / "run.json").read_text())
    target = tmp_path / f"{run_dir.parent.name}.pt"
    checkpoint = final_checkpoint(record, run_dir / "pretrain" / "ctx256")  # recorded relative
    dcp_to_torch_save(str(checkpoint), str(target))
    state = torch.load(target, weights_only=False)
    return {k: v for k, v in state.items() if isinstance(v, torch.Tensor)}


def _submitted_job(snakemake_log: Path) -> str | None:
    """The SLURM job id Snakemake's SLURM executor reported for the (only) job it submitted."""
    found = re.findall(r"submitted with SLURM jobid (\d+)", snakemake_log.read_text())
    return found[-1] if found else None


def _start_when_pending(job_id: str, requeued_at: float) -> None:
    """Let the requeued job start again as soon as it is back in the queue. SLURM makes a
    requeued job wait for its credential lifetime (`cred_expire`, 120 s; about 3 minutes on
    the local cluster, with the scheduler's periodic pass) before it may start: what the job
    does when it starts again is the same whenever that is."""
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        show = subprocess.run(["scontrol", "show", "job", job_id], capture_output=True, text=True)
        if "JobState=PENDING" in show.stdout:
            break
        time.sleep(0.5)
    else:
        pytest.fail(f"job {job_id} did not return to the queue:\n{show.stdout}")
    # slurmd refuses a launch credential issued in the second its old one was revoked.
    time.sleep(max(0.0, requeued_at + 2 - time.monotonic()))
    subprocess.run(["scontrol", "update", f"JobId={job_id}", "StartTime=now"], check=True)


def test_requeued_two_process_training_resumes_to_the_uninterrupted_weights(
    default_run, slurm_cluster, tmp_path
):
    reference_dir = tmp_path / "reference" / "e2e"
    requeued_dir = tmp_path / "requeued" / "e2e"
    # Only the long-context stage (20 steps) runs.
    copy_upstream(default_run, reference_dir, pretrain=("phase1", "phase2"))
    copy_upstream(default_run, requeued_dir, pretrain=("phase1", "phase2"))

    # The uninterrupted run (local executor) runs while the SLURM one is requeued.
    reference = _long_context(reference_dir, tmp_path, "--cores", "2")
    requeued = _long_context(requeued_dir, tmp_path, "--workflow-profile", "profiles/slurm-local")
    metrics = requeued_dir / "pretrain" / "_work"
    job_id, requeued_after = None, None
    deadline = time.monotonic() + 600
    while requeued.poll() is None and time.monotonic() < deadline:
        logged = [read_metrics(f) for f in metrics.glob("ctx256-*/out/metrics.jsonl")]
        step = max((max(m) for m in logged if m), default=0)
        if 5 <= step < 18:
            job_id = _submitted_job(tmp_path / "requeued.log")
            if job_id:
                subprocess.run(["scontrol", "requeue", job_id], check=True)
                requeued_after, requeued_at = step, time.monotonic()
                break
        time.sleep(0.2)
    assert job_id, (tmp_path / "requeued.log").read_text()[-5000:]
    _start_when_pending(job_id, requeued_at)
    assert requeued.wait(timeout=900) == 0, (tmp_path / "requeued.log").read_text()[-5000:]
    assert reference.wait(timeout=900) == 0, (tmp_path / "reference.log").read_text()[-5000:]

    show = subprocess.run(["scontrol", "show", "job", job_id], capture_output=True, text=True)
    assert "Restarts=1" in show.stdout  # the same job ran twice
    (work,) = (requeued_dir / "pretrain" / "_work").glob("ctx256-*")
    steps = sorted(checkpoint_steps(work / "ckpt"))
    manifest = json.loads((requeued_dir / "pretrain" / "ctx256.manifest.json").read_text())
    resumed = manifest["summary"]["resumed_from_step"]
    # The SIGTERM checkpoint: the step training had reached, not a multiple of the interval.
    assert requeued_after <= resumed < 20 and resumed in steps and resumed % 25 != 0
    print(
        f"\nrequeued after step {requeued_after}, resumed from step {resumed}; checkpoints {steps}"
    )

    ours = json.loads((requeued_dir / "pretrain" / "ctx256" / "run.json").read_text())
    theirs = json.loads((reference_dir / "pretrain" / "ctx256" / "run.json").read_text())
    assert (ours["final_step"], ours["final_loss"]) == (theirs["final_step"], theirs["final_loss"])
    final, expected = (
        _final_weights(requeued_dir, tmp_path),
        _final_weights(reference_dir, tmp_path),
    )
    assert final.keys() == expected.keys() and len(final) > 10
    for key, value in expected.items():
        assert torch.equal(final[key], value), key
