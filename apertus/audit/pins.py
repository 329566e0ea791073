"""`apertus code pin|unpin RUN_DIR FILE ...`: count a file as a run's steps last ran it, so an
edit made on purpose (a typo in a log message) re-runs nothing (apertus.core.codedigest)."""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from pathlib import Path

from apertus.core import ApertusError
from apertus.core.codedigest import PINS_FILE, REPO_ROOT, read_pins
from apertus.core.files import atomic_write_json
from apertus.core.manifest import find_step_manifests

__all__ = ["set_pins"]


def _repo_relative(file: str) -> str:
    path = Path(file)
    absolute = path.resolve() if path.is_absolute() or path.exists() else REPO_ROOT / path
    try:
        return absolute.resolve().relative_to(REPO_ROOT).as_posix()
    except ValueError:
        raise ApertusError(f"{file}: not a file of this repository ({REPO_ROOT})") from None


def set_pins(run_dir: str | os.PathLike[str], files: Iterable[str], pin: bool) -> dict[str, str]:
    """Pin `files` in the run at `run_dir` to the digest its step manifests recorded for them
    (`pin`), or unpin them; writes ``code-pins.json`` and returns the pins now in force.

    Refused: a file no step of the run recorded (nothing to pin it to), or one its steps
    recorded in different versions (re-run them first: which one would be meant?)."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise ApertusError(f"{run_dir}: no such run directory")
    path = run_dir / PINS_FILE
    pins = read_pins(path)
    wanted = [_repo_relative(f) for f in files]
    if pin:
        recorded: dict[str, set[str]] = {}
        for manifest_path in find_step_manifests(run_dir):
            try:
                manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                continue
            code = manifest.get("step_code") if isinstance(manifest, dict) else None
            for relative, digest in ((code or {}).get("files") or {}).items():
                recorded.setdefault(relative, set()).add(digest)
        for relative in wanted:
            digests = recorded.get(relative, set())
            if not digests:
                raise ApertusError(f"{relative}: no step of {run_dir} recorded this file")
            if len(digests) > 1:
                raise ApertusError(
                    f"{relative}: the steps of {run_dir} ran {len(digests)} versions of it; "
                    "re-run them (snakemake) before pinning"
                )
            pins[relative] = digests.pop()
    else:
        for relative in wanted:
            if pins.pop(relative, None) is None:
                raise ApertusError(f"{relative}: not pinned in {run_dir}")
    atomic_write_json(path, {"files": dict(sorted(pins.items()))})
    return pins
