"""What SLURM jobs ask for and how training starts inside one, without a cluster: the config's
resources as the executor plugin's sbatch options (no one-task-per-GPU trap), the presets'
dry-run plan, the srun + torchrun command and the early-stop rule."""

from __future__ import annotations

import signal
import time

import pytest

from apertus.audit.explain import explain_changes
from apertus.core import ApertusError
from apertus.core.config import load_config
from apertus.core.resources import job_resources, sbatch_options, stage_resources
from apertus.train.early_stop import TIME_LIMIT, StopRequest
from apertus.train.launch import run as launch_run
from apertus.train.launch import torchrun_command
from apertus.train.slurm import SlurmJob, parse_time_left, srun_command, srun_environment
from tests.conftest import REPO

CPU = {"threads": 16, "mem_mb": 64000, "runtime": 720, "slurm_partition": "cpu"}
# Rules of GPU stages that do CPU work and take `resources.default`.
CPU_RULES = {
    "posttrain_instructions",
    "posttrain_sft_data",
    "posttrain_report",
    "posttrain_qrpo_score",  # the merge of the scored shards
    "evaluate_tasks",
    "evaluate_table",
}
GPU = {"threads": 72, "mem_mb": 400000, "runtime": 720, "gpus": 4, "slurm_partition": "gpu"}


def test_gpus_are_asked_per_node_as_gres_and_never_as_one_task_per_gpu():
    assert job_resources(GPU, nodes=64) == {
        "mem_mb": 400000,
        "runtime": 720,
        "slurm_partition": "gpu",
        "gres": "gpu:4",
        "nodes": 64,
    }
    options = sbatch_options("pretrain_stage", 72, job_resources(GPU, nodes=64)).split()
    assert {"--nodes=64", "--gres=gpu:4", "--cpus-per-task=72", "--mem", "400000"} <= set(options)
    assert options[options.index("-t") + 1] == "720" and options[options.index("-p") + 1] == "gpu"
    # The plugin's `gpu`/`tasks` resources would give --gpus / --ntasks-per-gpu.
    assert not any(o.startswith(("--gpus", "--ntasks-per-gpu", "--ntasks=")) for o in options)
    # One task per node by SLURM's default for --nodes without --ntasks.


def test_cpu_jobs_have_one_task_per_node_and_pass_slurm_settings_through():
    assert job_resources({"mem_mb": 1000, "runtime": 5}) == {
        "mem_mb": 1000,
        "runtime": 5,
        "nodes": 1,
        "tasks": 1,
    }
    entry = {**CPU, "slurm_account": "a-project", "constraint": "mc", "slurm_extra": "--qos=high"}
    options = sbatch_options("data_filter", 16, job_resources(entry, nodes=2))
    for expected in ("-A a-project", "-p cpu", "--nodes=2", "--ntasks=2", "-C mc", "--qos=high"):
        assert expected in options
    assert "--gres" not in options


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("59:30", 3570.0),
        ("1:00:00", 3600.0),
        ("2-03:04:05", ((2 * 24 + 3) * 60 + 4) * 60 + 5.0),
        ("0:07", 7.0),
        ("UNLIMITED", None),
        ("NOT_SET", None),
        ("INVALID", None),
    ],
)
def test_squeue_time_left_is_read_in_seconds(text, seconds):
    assert parse_time_left(text) == seconds


def test_training_is_one_srun_task_per_node_meeting_at_the_first_node():
    job = SlurmJob("4711", ("nid001", "nid002"), cpus_per_node=72, time_left=3600.0)
    rendezvous = job.rendezvous(2)
    assert rendezvous.endpoint == f"nid001:{29400 + 4711}" and rendezvous.nnodes == 2
    command = srun_command(job, 2, torchrun_command(4, [], rendezvous))
    split = command.index("--export=ALL") + 1
    srun, torchrun = command[:split], command[split:]
    assert srun[0] == "srun" and "--overlap" in srun and "--jobid=4711" in srun
    assert {"--nodes=2", "--ntasks=2", "--ntasks-per-node=1", "--cpus-per-task=72"} <= set(srun)
    assert torchrun[1:4] == ["-m", "torch.distributed.run", "--nnodes"]
    text = " ".join(command)
    endpoint = f"nid001:{29400 + 4711}"
    assert f"--rdzv-backend c10d --rdzv-endpoint {endpoint} --rdzv-id apertus-4711" in text
    assert "--nproc_per_node 4 -m torchtitan.train" in text and "--standalone" not in text
    with pytest.raises(ApertusError, match=r"training on 3 nodes, but SLURM job 4711 has 2"):
        job.rendezvous(3)


def test_srun_gets_the_allocation_not_the_launchers_own_step():
    env = {
        "SLURM_JOB_ID": "7",
        "SLURM_NTASKS": "1",
        "SLURM_CPUS_PER_TASK": "1",
        "SLURM_STEP_ID": "0",
        "SRUN_CPUS_PER_TASK": "1",
        "SBATCH_GRES": "gpu:1",
        "PATH": "/bin",
    }
    assert srun_environment(env) == {"SLURM_JOB_ID": "7", "PATH": "/bin"}


def test_several_nodes_outside_slurm_is_an_error_before_anything_starts(monkeypatch, tmp_path):
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    with pytest.raises(ApertusError, match=r"training on 2 nodes needs a SLURM allocation"):
        launch_run(tmp_path / "absent.json", 4, nnodes=2)


def test_time_limit_stops_only_after_a_step_signals_at_once():
    past = StopRequest(stop_at=time.time() - 1)
    assert past.reason(trained=False) is None  # every attempt makes progress
    assert past.reason(trained=True) == TIME_LIMIT
    assert StopRequest(stop_at=time.time() + 3600).reason(trained=True) is None
    signalled = StopRequest(stop_at=None)
    assert signalled.reason(trained=False) is None
    signalled._on_signal(signal.SIGTERM, None)
    assert signalled.reason(trained=False) == "received SIGTERM"


@pytest.mark.slow
@pytest.mark.parametrize("preset", ["apertus-8b", "apertus-70b"])
def test_preset_dry_run_submits_what_the_preset_says(preset, tmp_path):
    """`apertus explain --sbatch` (snakemake -n under profiles/slurm): every pretraining stage
    on its `nnodes` nodes with `resources.pretrain` (GPUs per node, time, partition); data and
    tokenization on CPU nodes; evaluation on one GPU."""
    path = REPO / "config" / "presets" / f"{preset}.yaml"
    config = load_config([path])
    start = time.monotonic()
    plan = explain_changes([path], results_dir=str(tmp_path), run="r", sbatch=True)
    print(f"\n{preset}: {len(plan.jobs)} jobs planned in {time.monotonic() - start:.1f} s")
    pretrain, res = config["pretrain"], config["resources"]
    nodes = {phase: pretrain["nnodes"] for phase in pretrain["phases"]}
    nodes |= {s["name"]: s.get("nnodes", pretrain["nnodes"]) for s in pretrain["long_context"]}
    seen = set()
    for job in plan.jobs:
        options = job.sbatch.split()
        seen.add(job.rule)
        stage = "default" if job.rule in CPU_RULES else job.rule.split("_")[0]
        # The held-out reward evaluation takes the evaluation resources, exports theirs (else the
        # evaluation's: RESOURCE_FALLBACK).
        if job.rule == "posttrain_heldout":
            stage = "evaluate"
        # QRPO's sampling and scoring take resources of their own (one GPU per shard job).
        sample_or_score = {
            "posttrain_qrpo_sample": "posttrain_sample",
            "posttrain_qrpo_score_shard": "posttrain_score",
        }
        stage = sample_or_score.get(job.rule, stage)
        entry = stage_resources(res, stage)
        assert options[options.index("-t") + 1] == str(entry["runtime"]), job.rule
        assert options[options.index("-p") + 1] == entry["slurm_partition"], job.rule
        if job.rule == "pretrain_stage":
            stage_name = job.wildcards["stage"]
            assert f"--nodes={nodes[stage_name]}" in options
            assert f"--gres=gpu:{res['pretrain']['gpus']}" in options
            assert f"--cpus-per-task={res['pretrain']['threads']}" in options
            # The torchrun layout, with the stage's context parallelism (RECIPE §6: 64k CP 4).
            cp = {s["name"]: s["context_parallel"] for s in pretrain["long_context"]}
            ranks = nodes[stage_name] * pretrain["nproc"]
            data_parallel = ranks // cp.get(stage_name, 1) // pretrain["tensor_parallel"]
            assert job.sbatch.endswith(
                f"[torchrun {nodes[stage_name]} node(s) x {pretrain['nproc']} = {ranks} "
                f"rank(s): context_parallel {cp.get(stage_name, 1)} x tensor_parallel "
                f"{pretrain['tensor_parallel']} x data_parallel {data_parallel}]"
            ), job.sbatch
        elif stage in ("data", "tokenize"):
            assert not any("gpu" in o for o in options) and "--nodes=1" in options, job.rule
        elif job.rule in ("evaluate_checkpoint", "evaluate_instruct"):
            # One GPU (8B), one node's four with the model spread over them (70B).
            assert f"--gres=gpu:{entry['gpus']}" in options and "--nodes=1" in options
        elif job.rule in CPU_RULES:
            assert not any("gpu" in o for o in options), job.rule
    assert {"pretrain_stage", "data_filter", "tokenize_shards", "evaluate_checkpoint"} <= seen
    # Both evaluation suites: the base suite on every checkpoint, the instruct suite on the chat
    # models.
    instruct = {job.wildcards["stage"] for job in plan.jobs if job.rule == "evaluate_instruct"}
    assert instruct == {"sft", "qrpo"}
    assert seen >= CPU_RULES
    assert nodes["ctx64k"] < pretrain["nnodes"]  # its 128-sequence batch needs fewer ranks
