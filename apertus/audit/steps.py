"""The step a user names among the step manifests of a run directory (`find_step`); each is
read as an `apertus.core.manifest.StepRecord`, with its recorded paths mapped onto the run
directory wherever it is now."""

from __future__ import annotations

from pathlib import Path

from apertus.core import ApertusError
from apertus.core.manifest import StepRecord, find_step_manifests

__all__ = ["StepRecord", "find_step"]


def find_step(run_dir: Path, selector: str) -> StepRecord:
    """The step a user names: its manifest's path in the run directory (``evaluate/lm_eval/
    phase1``, with or without ``.manifest.json``), or ``STAGE/STEP`` when only one manifest
    records that step (``posttrain/instructions``)."""
    manifests = find_step_manifests(run_dir)
    if not manifests:
        raise ApertusError(f"{run_dir}: no step manifests (*.manifest.json) found")
    want = selector.strip("/").removesuffix(".manifest.json").removesuffix("/manifest.json")
    by_path = [
        m
        for m in manifests
        if m.relative_to(run_dir).as_posix().removesuffix(".manifest.json") == want
        or m.relative_to(run_dir).as_posix().removesuffix("/manifest.json") == want
    ]
    if by_path:
        return StepRecord.load(by_path[0], run_dir)
    records = [StepRecord.load(m, run_dir) for m in manifests]
    by_name = [r for r in records if r.name == want]
    if len(by_name) == 1:
        return by_name[0]
    if by_name:
        raise ApertusError(
            f"{selector!r} names {len(by_name)} steps; pick one by its manifest path: "
            + ", ".join(r.rel.removesuffix(".manifest.json") for r in by_name)
        )
    raise ApertusError(
        f"no step {selector!r} in {run_dir}; steps (manifest path: stage/step): "
        + ", ".join(f"{r.rel.removesuffix('.manifest.json')}: {r.name}" for r in records)
    )
