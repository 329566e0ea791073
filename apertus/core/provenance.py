"""Integrity at every read: a step's inputs hold the bytes the step that wrote them recorded.

Every step hashes its inputs for its manifest (`apertus.core.manifest`). `check_inputs` does it
when the step starts instead of when it ends, and compares each input that another step of the
run wrote with that step's manifest (its ``outputs``: a file's sha256, or every file of a
directory). A flipped byte in a tokenizer, a phase index, SFT data, an exported model or any
other artifact between the step that wrote it and the step that reads it is refused, naming the
file and the step that wrote it, before any work. Inputs from outside the run (the user's data,
config files) have no producer and are only hashed.

The run's step manifests are found under the run folder, which the workflow names through the
code-pins file's variable (``APERTUS_CODE_PINS`` = ``<run>/code-pins.json``); outside the
workflow (a step started by hand without it) nothing is compared.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from apertus.core import ApertusError
from apertus.core.codedigest import PINS_VARIABLE
from apertus.core.manifest import (
    SNAKEMAKE_MARKER,
    StepRecord,
    find_step_manifests,
    is_step_manifest_name,
)

__all__ = ["check_inputs", "run_dir_of_step"]


def run_dir_of_step() -> Path | None:
    """The run folder of the step this process runs, or None outside the workflow."""
    pins = os.environ.get(PINS_VARIABLE)
    return Path(pins).parent if pins else None


def _producers(
    run_dir: Path, inputs: Iterable[Path]
) -> dict[Path, tuple[Path, str, dict[str, Any]]]:
    """The outputs recorded by the step manifests that can have written `inputs`, where they
    are now (`StepRecord`): resolved path -> (the manifest, "stage/step", the output's record).
    A step writes under its stage's folder and keeps its manifest there (or in the run folder
    itself), so only the manifests of the stages the inputs lie in are read."""
    root = run_dir.resolve()
    stages = set()
    for path in inputs:
        if path.is_relative_to(root) and path != root:
            stages.add(path.relative_to(root).parts[0])
    manifests = sorted(p for p in run_dir.glob("*manifest.json") if is_step_manifest_name(p))
    for stage in sorted(stages):
        if (run_dir / stage).is_dir():
            manifests += find_step_manifests(run_dir / stage)
    found: dict[Path, tuple[Path, str, dict[str, Any]]] = {}
    for manifest_path in manifests:
        try:
            record = StepRecord.load(manifest_path, run_dir)
        except ApertusError:
            continue  # `apertus audit` reports unreadable manifests; nothing to compare with
        for entry in record.manifest["outputs"]:
            found[record.local(entry["path"]).resolve()] = (manifest_path, record.name, entry)
    return found


def _recorded_files(entry: Mapping[str, Any], path: Path, root: Path) -> dict[str, str]:
    """{file path: recorded sha256} of `path` (the output `root` itself or a file in it)."""
    if "files" not in entry:
        return {str(path): entry["sha256"]} if path == root else {}
    files = entry["files"]
    if path == root:
        return {str(root / rel): info["sha256"] for rel, info in files.items()}
    rel = path.relative_to(root).as_posix()
    if path.is_dir() or rel not in files:
        prefix = rel + "/"
        return {str(root / r): info["sha256"] for r, info in files.items() if r.startswith(prefix)}
    return {str(path): files[rel]["sha256"]}


def _current_files(described: Mapping[str, Any]) -> dict[str, str]:
    path = Path(described["path"]).resolve()
    if "files" not in described:
        return {str(path): described["sha256"]}
    return {
        str(path / rel): info["sha256"]
        for rel, info in described["files"].items()
        if Path(rel).name != SNAKEMAKE_MARKER
    }


def check_inputs(described: Iterable[Mapping[str, Any]], run_dir: Path | None) -> None:
    """Compare inputs (as `apertus.core.manifest.describe_path` describes them, hashed now)
    with the records of the run's steps that wrote them; ApertusError naming each file that
    differs or is missing, and its producer."""
    if run_dir is None or not run_dir.is_dir():
        return
    described = list(described)
    if not described:
        return
    paths = [Path(item["path"]).resolve() for item in described]
    producers = _producers(run_dir, paths)
    problems: list[str] = []
    writers: list[Path] = []
    for item, path in zip(described, paths, strict=True):
        producer = next(
            ((root, *producers[root]) for root in (path, *path.parents) if root in producers),
            None,
        )
        if producer is None:
            continue  # not written by a step of this run
        root, manifest_path, step, entry = producer
        try:
            recorded = _recorded_files(entry, path, root)
        except (KeyError, TypeError):
            continue
        current = _current_files(item)
        before = len(problems)
        for file, sha in sorted(recorded.items()):
            if file not in current:
                problems.append(f"{file}: missing, written by {step} ({manifest_path})")
            elif current[file] != sha:
                problems.append(
                    f"{file}: sha256 {current[file][:16]}..., but {step} wrote "
                    f"{sha[:16]}... ({manifest_path})"
                )
        if len(problems) > before:
            writers.append(root)
    if problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise ApertusError(
            f"input {problems[0]}{more}: it changed after the step that wrote it; nothing was "
            f"read from it. Re-run that step (snakemake --forcerun {writers[0]}) or restore the "
            "file."
        )
