"""The stage manifest: what a step was told, what it read, what it wrote, and with which code.

Every step of every stage writes one ``manifest.json`` beside its outputs through
:func:`write_manifest`. Auditors re-hash the files it lists; ``apertus audit`` (release stage)
builds on this format, so its keys are stable: add keys, never rename them.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from apertus import __version__
from apertus.core import REPO_ROOT, ApertusError
from apertus.core.codedigest import pins_of_run, step_code
from apertus.core.files import atomic_write_json, canonical_json, sha256_file, sha256_text

MANIFEST_VERSION = 1

# Snakemake touches this empty marker in every directory output after its step wrote the
# manifest: Snakemake's bookkeeping, not an output.
SNAKEMAKE_MARKER = ".snakemake_timestamp"

# Distributions whose versions decide what a stage produces.
KEY_PACKAGES = (
    "torch",
    "torchtitan",
    "snakemake",
    "datatrove",
    "lm-eval",
    "transformers",
    "tokenizers",
    "datasets",
    "huggingface-hub",
    "numpy",
)


def config_hash(subtree: Any) -> str:
    """SHA-256 of the canonical JSON of a config subtree: equal subtrees, equal hashes."""
    return sha256_text(canonical_json(subtree))


def is_step_manifest_name(path: Path) -> bool:
    """A step manifest sits beside its outputs as `<name>.manifest.json`, or inside an output
    directory as `manifest.json`."""
    return path.name == "manifest.json" or path.name.endswith(".manifest.json")


def find_step_manifests(run_dir: str | os.PathLike) -> list[Path]:
    """Every step manifest under a run directory (`results/<run>`), in path order; Snakemake's
    `logs/` and `benchmarks/` hold none and are not searched."""
    run_dir = Path(run_dir)
    return sorted(
        p
        for p in run_dir.rglob("*manifest.json")
        if p.is_file()
        and is_step_manifest_name(p)
        and p.relative_to(run_dir).parts[0] not in ("logs", "benchmarks")
    )


# The key of a release manifest that holds the SHA-256 of everything else in it.
CONTENT_DIGEST_KEY = "content_sha256"


def content_digest(manifest: dict[str, Any]) -> str:
    """SHA-256 of the canonical JSON of a manifest without its `content_sha256` key: written
    into RELEASE-MANIFEST.json, so that a changed byte anywhere in it (the recorded configs and
    step manifests too, not only the artifacts' checksums) is caught by `apertus audit`."""
    return config_hash({k: v for k, v in manifest.items() if k != CONTENT_DIGEST_KEY})


def describe_path(
    path: str | os.PathLike, exclude: Iterable[str | os.PathLike] = ()
) -> dict[str, Any]:
    """Size and SHA-256 of a file; for a directory, of every file in it plus one digest of the tree.

    The tree digest covers relative paths and file digests in sorted order, so renaming, adding,
    removing or changing any file changes it. Symlinks are followed. Files in `exclude` (the
    manifest itself, when it sits inside an output directory) are left out.
    """
    path = Path(path)
    if path.is_file():
        return {"path": str(path), "size": path.stat().st_size, "sha256": sha256_file(path)}
    if path.is_dir():
        skip = {Path(p).resolve() for p in exclude}
        files = {}
        for f in sorted(p for p in path.rglob("*") if p.is_file() and p.resolve() not in skip):
            rel = f.relative_to(path).as_posix()
            files[rel] = {"size": f.stat().st_size, "sha256": sha256_file(f)}
        tree = canonical_json({rel: info["sha256"] for rel, info in files.items()})
        return {
            "path": str(path),
            "size": sum(info["size"] for info in files.values()),
            "sha256": sha256_text(tree),
            "files": files,
        }
    raise FileNotFoundError(f"cannot describe {path}: no such file or directory")


# A recorded path and where it is now. A step records its inputs and outputs with the paths it
# was given (absolute, or relative to the directory it ran in, ``cwd``). A run directory can be
# moved or copied after the run, so a recorded path is mapped onto the run directory by its place
# under the recorded run root (``<results_dir>/<run>``): the root is the part of the outputs'
# common directory before the stage's own folder (``<root>/<stage>/...``, `stage_path`'s layout).

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


def _git(*args: str, cwd: Path) -> str | None:
    try:
        out = subprocess.run(
            ["git", *args], cwd=cwd, capture_output=True, text=True, timeout=30, check=True
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout


def code_version(repo: str | os.PathLike = REPO_ROOT) -> dict[str, Any]:
    """The code that ran: package version, git commit, and whether the checkout had local changes.

    ``dirty`` is true when ``git status --porcelain`` lists anything (modified, staged or untracked
    files that are not ignored); results and virtual environments are git-ignored, so they do not
    count. Outside a git checkout, ``commit`` and ``dirty`` are None.
    """
    repo = Path(repo)
    commit = _git("rev-parse", "HEAD", cwd=repo)
    status = _git("status", "--porcelain", cwd=repo) if commit is not None else None
    return {
        "package": __version__,
        "commit": commit.strip() if commit is not None else None,
        "dirty": bool(status.strip()) if status is not None else None,
    }


def package_versions(names: Iterable[str] = KEY_PACKAGES) -> dict[str, str | None]:
    """Installed versions, read from package metadata (nothing is imported); None if absent."""
    versions: dict[str, str | None] = {}
    for name in names:
        try:
            versions[name] = version(name)
        except PackageNotFoundError:
            versions[name] = None
    return versions


def step_command(argv: Iterable[str] | None = None) -> list[str] | None:
    """The step's command line as run, without the interpreter: ``["-m", "apertus.<module>",
    ...]``, so ``apertus audit --rerun`` can start it again with any Python. None when the
    process was not started as ``python [options] -m apertus...`` (a test calling ``main()``,
    an interactive session): there is no command to replay then.
    """
    argv = list(sys.orig_argv if argv is None else argv)
    i = 1
    while i < len(argv):
        arg = argv[i]
        if arg == "-m":
            module = argv[i + 1] if i + 1 < len(argv) else ""
            if module == "apertus" or module.startswith("apertus."):
                return argv[i:]
            return None
        if arg == "-c" or not arg.startswith("-"):  # `python -c ...` or a script path
            return None
        i += 2 if arg in ("-X", "-W") else 1  # interpreter options that take a value
    return None


def build_manifest(
    *,
    stage: str,
    step: str,
    config: Any,
    inputs: Iterable[str | os.PathLike | dict[str, Any]],
    outputs: Iterable[str | os.PathLike],
    seed: int | None,
    started: dt.datetime,
    ended: dt.datetime,
    summary: dict[str, Any] | None = None,
    exclude: Iterable[str | os.PathLike] = (),
) -> dict[str, Any]:
    """The manifest of one finished step, with every input and output hashed now."""
    exclude = list(exclude)
    command = step_command()
    return {
        "manifest_version": MANIFEST_VERSION,
        "stage": stage,
        "step": step,
        "config": config,
        "config_sha256": config_hash(config),
        # An input may come described already (hashed when the step started: StepRun).
        "inputs": [p if isinstance(p, dict) else describe_path(p) for p in inputs],
        "outputs": [describe_path(p, exclude) for p in outputs],
        "code": code_version(),
        # The code the step ran, by file (apertus.core.codedigest): what `apertus status` and
        # `apertus explain` compare with the code of today.
        "step_code": step_code(command[1], pins_of_run()) if command else None,
        "packages": package_versions(),
        "seed": seed,
        "started": started.isoformat(timespec="seconds"),
        "ended": ended.isoformat(timespec="seconds"),
        "seconds": round((ended - started).total_seconds(), 3),
        "host": socket.gethostname(),
        # The SLURM job the step ran in (profiles/slurm), null outside SLURM.
        "slurm_job_id": os.environ.get("SLURM_JOB_ID"),
        "summary": summary or {},
        # How to start the step again (`apertus audit --rerun`); relative paths in it are
        # relative to `cwd`.
        "command": command,
        "cwd": os.getcwd(),
    }


def write_manifest(path: str | os.PathLike, **fields: Any) -> dict[str, Any]:
    """Build the manifest (see :func:`build_manifest` for the fields) and write it atomically."""
    manifest = build_manifest(**fields, exclude=[path])
    atomic_write_json(path, manifest)
    return manifest
