"""Training across nodes on a real SLURM cluster: the two-node cluster of profiles/slurm-local
(`cluster.sh start 2`: nodes apertus-n1 and apertus-n2 on this machine, each slurmd in its own
UTS namespace). A 2-node job's tasks run one on each node; the pretraining stage with
`pretrain.nnodes: 2` meets at a c10d rendezvous on the first node and trains one rank on each;
requeued in the middle of training (`scontrol requeue`), it resumes from the checkpoint it
saved on SIGTERM and ends where the uninterrupted run ended.

The one-node cluster of the other SLURM tests is stopped for this module and started again
after it, if it was running."""

from __future__ import annotations

import json
import re
import subprocess
import time
from pathlib import Path

import pytest

from apertus.core.config import load_config
from apertus.core.resources import job_resources, sbatch_options
from apertus.tokenize.phases import PhaseSpec, build_phase_index
from apertus.train.metrics import read_metrics
from apertus.train.run_spec import checkpoint_steps
from tests.conftest import BIN, REPO, local_cluster
from tests.slurm.test_local_cluster import _start_when_pending
from tests.train.test_torchtitan import build_phase

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

NODES = ["apertus-n1", "apertus-n2"]
# Job states after which a job runs no more (squeue/scontrol keep them for MinJobAge s).
ENDED = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY")


@pytest.fixture(scope="module")
def two_node_cluster():
    """The two-node local cluster, for this module (`local_cluster`)."""
    with local_cluster(2):
        yield


def _sbatch(script: Path, output: Path, *options: str) -> str:
    """Submit `script` with sbatch `options`; its job id."""
    submitted = subprocess.run(
        [
            "sbatch",
            "--parsable",
            "--open-mode=append",
            f"--output={output}",
            *options,
            str(script),
        ],
        capture_output=True,
        text=True,
        check=True,
        cwd=REPO,
    )
    return submitted.stdout.strip().split(";")[0]


def _job_state(job_id: str) -> str:
    show = subprocess.run(["scontrol", "show", "job", job_id], capture_output=True, text=True)
    found = re.search(r"JobState=(\S+)", show.stdout)
    return found.group(1) if found else "UNKNOWN"


def _wait_for(job_id: str, timeout: float = 600) -> str:
    deadline = time.monotonic() + timeout
    while (state := _job_state(job_id)) not in ENDED:
        if time.monotonic() > deadline:
            subprocess.run(["scancel", job_id], check=False)
            pytest.fail(f"job {job_id} still {state} after {timeout} s")
        time.sleep(0.5)
    return state


def test_a_two_node_job_runs_one_task_on_each_node(two_node_cluster, tmp_path):
    script = tmp_path / "hostnames.sh"
    script.write_text(
        "#!/bin/bash\n"
        'echo "batch $(hostname) $SLURMD_NODENAME"\n'
        "srun bash -c 'echo \"task $SLURM_PROCID $(hostname) $SLURMD_NODENAME\"'\n"
    )
    output = tmp_path / "hostnames.out"
    job_id = _sbatch(script, output, "--nodes=2", "--ntasks-per-node=1")
    assert _wait_for(job_id, timeout=120) == "COMPLETED", output.read_text()
    lines = output.read_text().splitlines()
    print("\n" + "\n".join(lines))
    # `hostname` is the node's name on each node: one UTS namespace per slurmd.
    assert "batch apertus-n1 apertus-n1" in lines
    assert sorted(line for line in lines if line.startswith("task")) == [
        "task 0 apertus-n1 apertus-n1",
        "task 1 apertus-n2 apertus-n2",
    ]


@pytest.fixture(scope="module")
def phases(tmp_path_factory) -> Path:
    """One tokenized phase (`phase1`, 19 steps of 8 sequences of 128 tokens), where the stage
    looks for it."""
    root = tmp_path_factory.mktemp("two-node-phases")
    built = build_phase(root / "source", n_docs=300)
    spec = json.loads((built / "phase.json").read_text())
    build_phase_index(
        PhaseSpec("phase1", spec["budget"], spec["seed"], {"web": None}),
        {"web": root / "source" / "shards" / "web"},
        root / "phases" / "phase1",
    )
    return root / "phases"


def _stage_job(run_dir: Path, phases: Path) -> tuple[str, Path]:
    """Pretraining phase 1 on 2 nodes x 1 process, submitted with the resources Snakemake's
    SLURM executor asks for the rule's job (the default's, on `nnodes` nodes) and started as
    its jobstep starts the rule's command (one task, `srun -n1`); returns the job id and its
    output file."""
    defaults = load_config()
    config = defaults["pretrain"]
    config.update(
        phases=["phase1"],
        goldfish_control=None,
        long_context=[],
        nnodes=2,
        nproc=1,
        micro_batch=4,
        device="cpu",
    )
    run_dir.mkdir(parents=True)
    command = [
        str(BIN / "python"),
        "-m",
        "apertus.train.stage",
        "--config",
        json.dumps(config),
        "--manifest",
        str(run_dir / "phase1.manifest.json"),
        "--name",
        "phase1",
        "--phases-root",
        str(phases),
        "--output",
        str(run_dir / "phase1"),
        "--work-root",
        str(run_dir / "_work"),
    ]
    script = run_dir / "stage.sh"
    quoted = " ".join("'" + part.replace("'", "'\\''") + "'" for part in command)
    script.write_text(f"#!/bin/bash\nsrun --ntasks=1 --nodes=1 {quoted}\n")
    output = run_dir / "stage.log"
    entry = defaults["resources"]["pretrain"]
    options = sbatch_options("pretrain_stage", entry["threads"], job_resources(entry, nodes=2))
    return _sbatch(script, output, *options.split()), output


@pytest.fixture(scope="module")
def two_node_run(two_node_cluster, phases, tmp_path_factory) -> Path:
    run_dir = tmp_path_factory.mktemp("two-node-run") / "pretrain"
    job_id, log = _stage_job(run_dir, phases)
    assert _wait_for(job_id) == "COMPLETED", log.read_text()[-5000:]
    return run_dir


def test_pretraining_with_nnodes_2_trains_one_rank_on_each_node(two_node_run):
    log = (two_node_run / "stage.log").read_text()
    # One torchrun per node, started by srun in the job, meeting on the first node.
    launched = re.search(
        r"srun --overlap --jobid=\d+ --nodes=2 --ntasks=2 --ntasks-per-node=1 .*"
        r"torchrun --nnodes 2 --rdzv-backend c10d --rdzv-endpoint (\S+):\d+",
        log,
    )
    assert launched and launched.group(1) == "apertus-n1", log[:3000]
    assert "Applied FSDP to Apertus over 2 rank(s)" in log
    manifest = json.loads((two_node_run / "phase1.manifest.json").read_text())
    print(f"\nrank hosts: {manifest['summary']['rank_hosts']}, launcher on {manifest['host']}")
    assert manifest["summary"]["rank_hosts"] == NODES
    assert manifest["host"] == "apertus-n1"
    assert manifest["summary"]["final_step"] == 19


def test_requeued_two_node_training_resumes_to_the_uninterrupted_result(
    two_node_run, phases, tmp_path
):
    run_dir = tmp_path / "pretrain"
    job_id, log = _stage_job(run_dir, phases)
    requeued_after = None
    deadline = time.monotonic() + 300
    while _job_state(job_id) not in ENDED and time.monotonic() < deadline:
        logged = [read_metrics(f) for f in run_dir.glob("_work/phase1-*/out/metrics.jsonl")]
        step = max((max(m) for m in logged if m), default=0)
        if 5 <= step < 15:
            subprocess.run(["scontrol", "requeue", job_id], check=True)
            requeued_after, requeued_at = step, time.monotonic()
            break
        time.sleep(0.2)
    assert requeued_after, log.read_text()[-5000:]
    _start_when_pending(job_id, requeued_at)
    assert _wait_for(job_id) == "COMPLETED", log.read_text()[-5000:]

    show = subprocess.run(["scontrol", "show", "job", job_id], capture_output=True, text=True)
    assert "Restarts=1" in show.stdout  # the same job ran twice
    manifest = json.loads((run_dir / "phase1.manifest.json").read_text())
    resumed = manifest["summary"]["resumed_from_step"]
    (work,) = run_dir.glob("_work/phase1-*")
    steps = sorted(checkpoint_steps(work / "ckpt"))
    print(
        f"\nrequeued after step {requeued_after}, resumed from step {resumed}; checkpoints {steps}"
    )
    # The SIGTERM checkpoint of the first attempt, on both nodes again.
    assert requeued_after <= resumed < 19 and resumed in steps
    assert manifest["summary"]["rank_hosts"] == NODES
    ours = json.loads((run_dir / "phase1" / "run.json").read_text())
    theirs = json.loads((two_node_run / "phase1" / "run.json").read_text())
    assert (ours["final_step"], ours["final_loss"]) == (theirs["final_step"], theirs["final_loss"])
