"""Training inside a SLURM job: one ``srun`` task per node, each running torchrun, meeting at a
c10d rendezvous on the allocation's first node; the job's time left; requeueing the job.

The launcher (apertus.train.launch) uses this when it runs inside a SLURM allocation
(``SLURM_JOB_ID`` is set and ``srun`` is on PATH): the training command becomes::

    srun --overlap --nodes N --ntasks N --ntasks-per-node 1 --cpus-per-task C \\
        python -m torch.distributed.run --nnodes N --nproc_per_node P \\
            --rdzv-backend c10d --rdzv-endpoint <first node>:<port> --rdzv-id <job id> ...

``--overlap`` because the launcher itself already runs in a job step (Snakemake's SLURM
jobstep starts each job's command with ``srun -n1``). Every fact about the job is asked of
SLURM (``squeue``), not read from the environment, which Snakemake's jobstep strips.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from apertus.core import ApertusError

__all__ = [
    "Rendezvous",
    "SlurmJob",
    "parse_time_left",
    "srun_command",
    "srun_environment",
]

# c10d's default port is 29400; each job takes its own so that two jobs on a node never meet.
_PORT_BASE, _PORT_SPAN = 29400, 20000
# Environment that describes the job allocation, kept for srun; the rest of SLURM_*, SRUN_*
# and SBATCH_* describe the launcher's own step (1 task, its CPUs) and would shape srun's.
_KEEP = {"SLURM_JOB_ID", "SLURM_JOBID", "SLURM_CONF"}


@dataclass(frozen=True)
class Rendezvous:
    """Where torchrun's agents on `nnodes` nodes meet (c10d backend)."""

    nnodes: int
    endpoint: str
    run_id: str


def parse_time_left(text: str) -> float | None:
    """squeue's time left (``%L``: ``[days-][hours:]minutes:seconds``) in seconds; None for a
    job without a limit (``UNLIMITED``, ``NOT_SET``, ``INVALID``)."""
    text = text.strip()
    match = re.fullmatch(r"(?:(\d+)-)?(?:(\d+):)?(\d+):(\d+)", text)
    if not match:
        return None
    days, hours, minutes, seconds = (int(g) if g else 0 for g in match.groups())
    return float(((days * 24 + hours) * 60 + minutes) * 60 + seconds)


def _run(args: Sequence[str]) -> str:
    try:
        proc = subprocess.run(args, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise ApertusError(f"`{' '.join(args)}` failed: {e}") from None
    if proc.returncode != 0:
        raise ApertusError(
            f"`{' '.join(args)}` failed (exit {proc.returncode}): {proc.stderr.strip()}"
        )
    return proc.stdout


@dataclass(frozen=True)
class SlurmJob:
    """The SLURM job this process runs in."""

    job_id: str
    nodes: tuple[str, ...]
    cpus_per_node: int
    time_left: float | None
    """Seconds until the job's time limit when it was queried; None without a limit."""

    @staticmethod
    def current(environ: Mapping[str, str] = os.environ) -> SlurmJob | None:
        """The job named by ``SLURM_JOB_ID``, asked of squeue; None outside SLURM (no job id,
        or no ``srun`` to start tasks with)."""
        job_id = environ.get("SLURM_JOB_ID")
        if not job_id or shutil.which("srun") is None:
            return None
        line = _run(["squeue", "--noheader", "--jobs", job_id, "--format", "%N|%D|%C|%L"])
        fields = line.strip().split("|")
        if len(fields) != 4 or not fields[1].isdigit() or not fields[2].isdigit():
            raise ApertusError(f"squeue does not know SLURM job {job_id} (said {line!r})")
        nodelist, nnodes, cpus, left = fields
        nodes = tuple(_run(["scontrol", "show", "hostnames", nodelist]).split())
        if len(nodes) != int(nnodes):
            raise ApertusError(f"SLURM job {job_id}: node list {nodelist!r} is not {nnodes} nodes")
        return SlurmJob(job_id, nodes, int(cpus) // int(nnodes), parse_time_left(left))

    def rendezvous(self, nnodes: int) -> Rendezvous:
        """The c10d rendezvous of a run on the first `nnodes` nodes of the job."""
        if nnodes > len(self.nodes):
            raise ApertusError(
                f"training on {nnodes} nodes, but SLURM job {self.job_id} has "
                f"{len(self.nodes)} ({', '.join(self.nodes)}); ask for `nodes` = the "
                "stage's `nnodes` (config `resources`)"
            )
        digits = re.sub(r"\D", "", self.job_id) or "0"
        port = _PORT_BASE + int(digits) % _PORT_SPAN
        return Rendezvous(nnodes, f"{self.nodes[0]}:{port}", f"apertus-{self.job_id}")

    def requeue(self) -> str | None:
        """Ask SLURM to requeue this job (it is stopped and started again); None when done,
        else why not (e.g. a job submitted with ``--no-requeue``)."""
        try:
            _run(["scontrol", "requeue", self.job_id])
        except ApertusError as e:
            return str(e)
        return None


def srun_command(job: SlurmJob, nnodes: int, argv: Sequence[str]) -> list[str]:
    """`argv` as one srun task on each of `nnodes` nodes of `job`, each with all the CPUs the
    job has on its node. A failing task stops the others (``--kill-on-bad-exit``)."""
    return [
        "srun",
        "--overlap",
        f"--jobid={job.job_id}",
        f"--nodes={nnodes}",
        f"--ntasks={nnodes}",
        "--ntasks-per-node=1",
        f"--cpus-per-task={job.cpus_per_node}",
        "--kill-on-bad-exit=1",
        "--export=ALL",
        *argv,
    ]


def srun_environment(environ: Mapping[str, str]) -> dict[str, str]:
    """`environ` without the launcher's own step settings (SLURM_* but the job id and config,
    SRUN_*, SBATCH_*), which srun would otherwise take as options for the new step."""
    return {
        key: value
        for key, value in environ.items()
        if key in _KEEP or not key.startswith(("SLURM_", "SRUN_", "SBATCH_"))
    }
