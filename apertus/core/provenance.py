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

import json
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from apertus.core import ApertusError
from apertus.core.codedigest import PINS_VARIABLE
from apertus.core.manifest import find_step_manifests

__all__ = ["check_inputs", "run_dir_of_step"]

# Snakemake's own marker in directory outputs, touched after the manifest was written.
_SNAKEMAKE_MARKER = ".snakemake_timestamp"


def run_dir_of_step() -> Path | None:
    """The run folder of the step this process runs, or None outside the workflow."""
    pins = os.environ.get(PINS_VARIABLE)
    return Path(pins).parent if pins else None


def _resolved(recorded: str, manifest: Mapping[str, Any], manifest_path: Path, run_dir: Path):
    path = Path(recorded)
    if path.is_absolute():
        return path.resolve()
    bases = [Path(manifest.get("cwd") or "."), run_dir, manifest_path.parent]
    for base in bases:
        if (base / path).exists():
            return (base / path).resolve()
    return (bases[0] / path).resolve()


def _producers(run_dir: Path) -> dict[Path, tuple[Path, str, dict[str, Any]]]:
    """Every output recorded by a step manifest of the run: its resolved path -> (the manifest,
    "stage/step", the output's record)."""
    found: dict[Path, tuple[Path, str, dict[str, Any]]] = {}
    for manifest_path in find_step_manifests(run_dir):
        try:
            manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
            outputs = manifest["outputs"]
            step = f"{manifest['stage']}/{manifest['step']}"
        except (OSError, ValueError, KeyError, TypeError):
            continue  # `apertus audit` reports unreadable manifests; nothing to compare with
        for entry in outputs if isinstance(outputs, list) else []:
            if isinstance(entry, dict) and isinstance(entry.get("path"), str):
                path = _resolved(entry["path"], manifest, manifest_path, run_dir)
                found[path] = (manifest_path, step, entry)
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
        if Path(rel).name != _SNAKEMAKE_MARKER
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
    producers = _producers(run_dir)
    problems: list[str] = []
    writers: list[Path] = []
    for item in described:
        path = Path(item["path"]).resolve()
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
        if any(current.get(file) != sha for file, sha in recorded.items()):
            writers.append(root)
        for file, sha in sorted(recorded.items()):
            if file not in current:
                problems.append(f"{file}: missing, written by {step} ({manifest_path})")
            elif current[file] != sha:
                problems.append(
                    f"{file}: sha256 {current[file][:16]}..., but {step} wrote "
                    f"{sha[:16]}... ({manifest_path})"
                )
    if problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise ApertusError(
            f"input {problems[0]}{more}: it changed after the step that wrote it; nothing was "
            f"read from it. Re-run that step (snakemake --forcerun {writers[0]}) or restore the "
            "file."
        )
