"""`apertus plan`'s text: one row per GPU job, each job's memory by part, the totals."""

from __future__ import annotations

from apertus.sizing.jobs import RunPlan

__all__ = ["HEADER", "job_rows", "memory_rows", "render_plan", "total_line"]

SHORT = {
    "master weights": "master",
    "optimizer states": "optim",
    "gradients": "grads",
    "parameters": "params",
    "activations": "activ",
    "logits and loss": "logits",
    "communication buffers": "comm",
    "allocator margin": "margin",
    "kv cache": "kv",
    "exported copy": "export",
    "verification model": "verify",
}


def _gb(n: float | None) -> str:
    return "-" if n is None else f"{n / 1e9:.1f}"


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds >= 2 * 86400:
        return f"{seconds / 86400:.1f} d"
    if seconds >= 3600:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 60:.1f} min"


def _count(n: float | None, digits: int = 0) -> str:
    if n is None:
        return "-"
    for unit, size in (("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(n) >= size:
            return f"{n / size:.{max(digits, 1)}f}{unit}"
    return f"{n:.{digits}f}"


HEADER = (
    "job",
    "layout",
    "tok/rank",
    "peak GB",
    "limit",
    "fits",
    "GFLOP/tok",
    "tok/s/GPU",
    "MFU",
    "steps",
    "wall",
    "GPU-h",
    "ckpts",
)


def job_rows(plan: RunPlan) -> list[tuple[str, ...]]:
    """One row of HEADER's cells per job: the terminal table's and the report's."""
    rows = []
    for job in plan.jobs:
        fits = {True: "yes", False: "NO", None: "-"}[job.fits]
        if not job.memory.parts:
            fits = "?"
        rows.append(
            (
                job.name,
                job.layout,
                _count(job.tokens_per_rank),
                _gb(job.memory.total) + (" host" if job.host_memory else ""),
                "-" if job.memory_limit_gb is None else f"{job.memory_limit_gb:g}",
                fits,
                "-" if job.flops_per_token is None else f"{job.flops_per_token / 1e9:.1f}",
                "-"
                if job.tokens_per_second_per_gpu is None
                else f"{job.tokens_per_second_per_gpu:,.0f}",
                "-" if job.mfu is None else f"{job.mfu:.1%}",
                _count(job.steps),
                _duration(job.wall_seconds),
                _count(job.gpu_hours, 1),
                f"{job.checkpoints} x {_gb(job.checkpoint_bytes)} GB" if job.checkpoints else "-",
            )
        )
    return rows


def memory_rows(plan: RunPlan) -> list[tuple[str, str | None, str]]:
    """(job, moment of the peak, its parts in GB) per job; a job whose parts are those of one
    listed above is left out, one the plan cannot size has no moment and its note instead of
    parts."""
    rows = []
    seen: set[tuple] = set()
    for job in plan.jobs:
        if not job.memory.parts:
            rows.append((job.name, None, job.note))
            continue
        key = (job.memory.moment, tuple(job.memory.parts.items()))
        if key in seen:
            continue
        seen.add(key)
        parts = ", ".join(
            f"{SHORT.get(name, name)} {value / 1e9:.2f}" for name, value in job.memory.parts.items()
        )
        rows.append((job.name, job.memory.moment, parts))
    return rows


def total_line(plan: RunPlan) -> str:
    return (
        f"total: {_duration(plan.wall_seconds)} of jobs one after another, "
        f"{_count(plan.gpu_hours, 2)} GPU-hours; checkpoints {_gb(plan.checkpoint_bytes)} GB "
        f"(every one kept); token shards {_gb(plan.token_shard_bytes)} GB"
    )


def render_plan(plan: RunPlan) -> str:
    rows = [HEADER, *job_rows(plan)]
    widths = [max(len(row[i]) for row in rows) for i in range(len(HEADER))]
    lines = [
        "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
        for row in rows
    ]
    lines.insert(1, "  ".join("-" * w for w in widths))
    lines += ["", "memory per GPU at the peak, GB (moment: parts)"]
    for name, moment, parts in memory_rows(plan):
        lines.append(f"  {name}: {parts}" if moment is None else f"  {name} [{moment}]: {parts}")
    lines += ["", total_line(plan)]
    lines += [f"note: {note}" for note in plan.notes]
    return "\n".join(lines) + "\n"
