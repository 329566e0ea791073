"""What a job asks its scheduler for: the config's `resources` entry of a stage, as Snakemake
resources that the SLURM executor plugin turns into sbatch options; and the sbatch options a
dry-run's jobs would be submitted with (`apertus explain --sbatch`).

GPUs are asked per node as GRES (``--gres=gpu:N``), never as the plugin's `gpu` resource:
with `gpu` (and `tasks`) the plugin submits ``--gpus=N`` / ``--ntasks-per-gpu``, i.e. one task
per GPU, while a training job is one task per node that starts its own processes (torchrun).
A job on several nodes without GPUs asks for one task per node explicitly (the plugin would
submit ``--ntasks=1``).
"""

from __future__ import annotations

from collections.abc import Mapping
from types import SimpleNamespace
from typing import Any

__all__ = ["RESOURCE_FALLBACK", "SLURM_KEYS", "job_resources", "sbatch_options", "stage_resources"]

# Config keys passed to the SLURM executor plugin unchanged when set.
SLURM_KEYS = ("slurm_partition", "slurm_account", "constraint", "slurm_extra")
# Resource entries that fall back to another stage's before `default`.
RESOURCE_FALLBACK = {
    "posttrain_sample": "posttrain",
    "posttrain_score": "posttrain",
    "export": "evaluate",
}


def stage_resources(resources: Mapping[str, Any], stage: str) -> Mapping[str, Any]:
    """Resources of one job of `stage` from the config's `resources` section: its entry, else
    the entry it falls back to (RESOURCE_FALLBACK), else `default`."""
    return (
        resources.get(stage)
        or resources.get(RESOURCE_FALLBACK.get(stage, ""))
        or resources["default"]
    )


def job_resources(entry: Mapping[str, Any], *, nodes: int = 1) -> dict[str, Any]:
    """A rule's Snakemake `resources` (everything but threads) from a config `resources`
    entry, for a job on `nodes` nodes."""
    out: dict[str, Any] = {"mem_mb": entry["mem_mb"], "runtime": entry["runtime"]}
    out.update({key: entry[key] for key in SLURM_KEYS if entry.get(key) is not None})
    gpus = entry.get("gpus") or 0
    if gpus:
        out["gres"] = f"gpu:{gpus}"
    out["nodes"] = nodes
    if not gpus:
        out["tasks"] = nodes
    return out


class _Resources(dict):
    """A job's resources as the plugin reads them (`.get(key)` and attributes)."""

    def __getattr__(self, name: str) -> Any:
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None


def sbatch_options(rule: str, threads: int, resources: Mapping[str, Any]) -> str:
    """The resource options of the sbatch command the SLURM executor plugin would submit for a
    job of `rule` with these `threads` and `resources` (the plugin's own code; job name, log
    and account checks left out)."""
    from snakemake_executor_plugin_slurm.submit_string import get_submit_command
    from snakemake_executor_plugin_slurm.utils import set_gres_string

    job = SimpleNamespace(
        name=rule, threads=threads, resources=_Resources(resources), is_group=lambda: False
    )
    partition = resources.get("slurm_partition")
    account = resources.get("slurm_account")
    params = {
        "run_uuid": "<uuid>",
        "slurm_logfile": "<log>",
        "comment_str": rule,
        "account": f"-A {account}" if account else "",
        "partition": f"-p {partition}" if partition else "",
        "workdir": None,
    }
    call = get_submit_command(job, params) + set_gres_string(job)
    options = call.split(" --comment ", 1)[1].split(" ", 1)[1]
    return " ".join(options.split())
