"""The step manifests of a run directory, and where the paths they recorded are now.

A step records its inputs and outputs with the paths it was given (absolute, or relative to the
directory it ran in, ``cwd``). A run directory can be moved or copied after the run, so a
recorded path is mapped onto the run directory by its place under the recorded run root
(``<results_dir>/<run>``): the root is the part of the outputs' common directory before the
stage's own folder (``<root>/<stage>/...``, the layout of ``stage_path``).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from apertus.core import REPO_ROOT, ApertusError
from apertus.core.manifest import find_step_manifests

# Keys every step manifest has had since manifest_version 1 (apertus.core.manifest).
REQUIRED_KEYS = ("manifest_version", "stage", "step", "inputs", "outputs")


def _absolute(path: str, cwd: str) -> str:
    return os.path.normpath(os.path.join(cwd, path))


def _recorded_root(stage: str, outputs: list[str]) -> str | None:
    """``<results_dir>/<run>`` as the step saw it, from its (absolute) output paths."""
    if not outputs:
        return None
    common = Path(os.path.commonpath([os.path.dirname(p) for p in outputs]))
    parts = common.parts
    for i in range(len(parts) - 1, 0, -1):  # the last `stage` folder: a run may be named `data`
        if parts[i] == stage:
            return str(Path(*parts[:i]))
    return None


@dataclass
class StepRecord:
    """One step manifest of a run directory, with its recorded paths made absolute."""

    manifest_path: Path
    rel: str  # the manifest's path relative to the run directory
    manifest: dict[str, Any]
    run_dir: Path
    cwd: str  # where the step ran: relative recorded paths are relative to it
    recorded_root: str | None

    @classmethod
    def load(cls, manifest_path: Path, run_dir: Path) -> StepRecord:
        rel = manifest_path.relative_to(run_dir).as_posix()
        try:
            manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
            raise ApertusError(f"{rel}: not a readable step manifest ({e})") from None
        if not isinstance(manifest, dict) or any(k not in manifest for k in REQUIRED_KEYS):
            raise ApertusError(
                f"{rel}: not a step manifest (needs the keys {', '.join(REQUIRED_KEYS)})"
            )
        for key in ("inputs", "outputs"):
            entries = manifest[key]
            if not isinstance(entries, list) or not all(
                isinstance(e, dict) and isinstance(e.get("path"), str) for e in entries
            ):
                raise ApertusError(f"{rel}: `{key}` must be a list of {{path, size, sha256}}")
        # Manifests older than the `cwd` key were written by steps Snakemake started in the
        # repository root (the Snakefile's directory).
        cwd = manifest.get("cwd") or str(REPO_ROOT)
        outputs = [_absolute(o["path"], cwd) for o in manifest["outputs"]]
        root = _recorded_root(str(manifest["stage"]), outputs)
        return cls(manifest_path, rel, manifest, run_dir, cwd, root)

    @property
    def name(self) -> str:
        return f"{self.manifest['stage']}/{self.manifest['step']}"

    def absolute(self, recorded: str) -> str:
        return _absolute(recorded, self.cwd)

    def relative(self, recorded: str) -> str | None:
        """The recorded path relative to the recorded run root; None when outside it."""
        if self.recorded_root is None:
            return None
        path = self.absolute(recorded)
        try:
            return Path(path).relative_to(self.recorded_root).as_posix()
        except ValueError:
            return None

    def local(self, recorded: str) -> Path:
        """Where a recorded path is now: under the run directory if it was under the run root,
        else where it was (an input outside the run, such as ``config/robots``)."""
        rel = self.relative(recorded)
        return self.run_dir / rel if rel is not None else Path(self.absolute(recorded))

    def shown(self, recorded: str) -> str:
        """A recorded path as reports show it: relative to the run directory when inside it."""
        rel = self.relative(recorded)
        return rel if rel is not None else self.absolute(recorded)


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
