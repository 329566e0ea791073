"""The release folder: models, evaluation, data funnel, model card and RELEASE-MANIFEST.json.

Layout (paths relative to the folder)::

    base/                   the last pretraining stage's Hugging Face export, with its model
                            card README.md (what its Hub repository shows); none in a
                            post-training-only run (`posttrain.init_from`)
    aligned/                the QRPO export (when post-training ran), with its model card
    evaluation/             scores.csv, scores.md, scores.png (every checkpoint),
                            memorization.json, memorization.png (the base model),
                            reward_report.json, reward_report.md (SFT vs aligned)
    data/                   funnel.json, funnel.png (a run with a data stage)
    README.md               the release's model card (apertus.release.card)
    SHA256SUMS              every file but itself and the manifest, for `sha256sum -c`
    RELEASE-MANIFEST.json   see `release_manifest`

Every file is readable by others (the permissions of a plain new file): a copied input keeps
its source's mode otherwise, which may be 0600.

The folder is built in a sibling temporary directory and moved into place
(`building_directory`), so a reader (or an upload) sees the previous release or the whole new one.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from apertus.core import ApertusError
from apertus.core.files import (
    atomic_write_json,
    atomic_write_text,
    building_directory,
    canonical_json,
    sha256_file,
)
from apertus.core.manifest import (
    CONTENT_DIGEST_KEY,
    code_version,
    content_digest,
    find_step_manifests,
    package_versions,
)
from apertus.export.hf import readable_by_all
from apertus.release.card import (
    CardFacts,
    ReleasedModel,
    read_scores,
    render_card,
    started_from,
)
from apertus.release.config import ReleaseConfig

RELEASE_MANIFEST = "RELEASE-MANIFEST.json"
CHECKSUMS = "SHA256SUMS"
RELEASE_MANIFEST_VERSION = 1
# Files every Hugging Face export of the export stage holds; a folder without them is refused.
EXPORT_REQUIRED = ("config.json", "verification.json", "tokenizer.json")
# Directories of a run that hold no step manifest of the run's outputs: training scratch
# (checkpoints), and the release itself (its manifests describe the release, not its inputs).
SKIPPED_DIRS = ("_work", "release", "logs", "benchmarks")
SKIPPED_MANIFESTS = ("release.manifest.json", "release-upload.manifest.json")


@dataclass(frozen=True)
class ReleaseInputs:
    """The files a release is made of (the rule's inputs)."""

    run_dir: Path
    base: Path | None
    base_checkpoint: str | None
    table: Path
    funnel_json: Path | None
    funnel_png: Path | None
    aligned: Path | None = None
    aligned_checkpoint: str | None = None
    memorization: Path | None = None
    memorization_control: Path | None = None
    reward_json: Path | None = None
    reward_md: Path | None = None


def _visible_files(folder: Path) -> list[Path]:
    """Files under `folder`, hidden ones (Snakemake's `.snakemake_timestamp`...) left out."""
    return sorted(
        p
        for p in folder.rglob("*")
        if p.is_file() and not any(part.startswith(".") for part in p.relative_to(folder).parts)
    )


def copy_export(source: Path, target: Path) -> None:
    """Copy a Hugging Face export folder (checked to be one) without hidden files."""
    missing = [name for name in EXPORT_REQUIRED if not (source / name).is_file()]
    if missing or not list(source.glob("*.safetensors")):
        raise ApertusError(
            f"{source}: not a Hugging Face export of the export stage "
            f"(missing {', '.join(missing) or '*.safetensors'})"
        )
    for file in _visible_files(source):
        dest = target / file.relative_to(source)
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(file, dest)


def _copy(source: Path, target: Path) -> None:
    if not source.is_file():
        raise ApertusError(f"release input {source} is missing")
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(source, target)


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ApertusError(f"{path}: not found") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ApertusError(f"{path}: not readable JSON ({e})") from None


def stage_manifests(run_dir: str | os.PathLike) -> dict[str, dict[str, Any]]:
    """Every step manifest of a run, keyed by its path relative to the run without the
    manifest suffix: `export/qrpo.manifest.json` -> "export/qrpo", `data/robots/manifest.json`
    -> "data/robots" (unique, where the manifests' own stage/step names repeat: five
    `export/hf`)."""
    run_dir = Path(run_dir)
    manifests: dict[str, dict[str, Any]] = {}
    for path in find_step_manifests(run_dir):
        rel = path.relative_to(run_dir)
        if (
            rel.parts[0] in SKIPPED_DIRS
            or "_work" in rel.parts
            or any(part.startswith(".") for part in rel.parts[:-1])
            or rel.as_posix() in SKIPPED_MANIFESTS
        ):
            continue
        if path.name == "manifest.json":
            key = rel.parent.as_posix()
        else:
            key = rel.with_name(path.name.removesuffix(".manifest.json")).as_posix()
        manifest = _read_json(path)
        if not isinstance(manifest, dict) or "manifest_version" not in manifest:
            raise ApertusError(f"{path}: not a step manifest")
        manifests[key] = manifest
    return dict(sorted(manifests.items()))


def release_manifest(
    folder: Path, stages: Mapping[str, Any], run_config: Mapping[str, Any]
) -> dict[str, Any]:
    """RELEASE-MANIFEST.json: every file of the folder but the manifest itself with its SHA-256
    and size, every step manifest of the run, the resolved config, the code and packages.
    Its keys are fixed (the audit reads `artifacts` and `content_sha256`, the digest of all the
    rest): add keys, never rename them."""
    artifacts = {}
    for file in sorted(p for p in folder.rglob("*") if p.is_file()):
        rel = file.relative_to(folder).as_posix()
        if rel == RELEASE_MANIFEST:
            continue
        artifacts[rel] = {"sha256": sha256_file(file), "size": file.stat().st_size}
    manifest = {
        "release_manifest_version": RELEASE_MANIFEST_VERSION,
        "artifacts": artifacts,
        # The released checkpoint the run started from (also in its first phase's manifest,
        # under `stages`), or None: trained from scratch.
        "started_from": started_from(stages),
        "stages": dict(stages),
        "config": dict(run_config),
        "code": code_version(),
        "packages": package_versions(),
    }
    # What is written is what is hashed: the digest covers the manifest as JSON reads it back.
    manifest = json.loads(canonical_json(manifest))
    manifest[CONTENT_DIGEST_KEY] = content_digest(manifest)
    return manifest


def write_checksums(folder: Path) -> Path:
    """``SHA256SUMS``: ``<sha256>  <path>`` per file of the folder (GNU coreutils' format), so
    ``sha256sum -c SHA256SUMS`` checks the release without our tools. RELEASE-MANIFEST.json,
    written after it, lists it with its SHA-256."""
    lines = [
        f"{sha256_file(file)}  {file.relative_to(folder).as_posix()}"
        for file in _visible_files(folder)
        if file.relative_to(folder).as_posix() not in (CHECKSUMS, RELEASE_MANIFEST)
    ]
    return atomic_write_text(folder / CHECKSUMS, "\n".join(lines) + "\n")


def build_release(
    inputs: ReleaseInputs,
    config: ReleaseConfig,
    run_config: Mapping[str, Any],
    output: str | os.PathLike,
) -> dict[str, Any]:
    """Write the release folder at `output` (atomically) and return a summary for the step
    manifest: the files, their bytes, the models and their checkpoints."""
    output = Path(output)
    with building_directory(output) as built:
        models = []
        if inputs.base is not None:
            if not inputs.base_checkpoint:
                raise ApertusError("a base model needs its checkpoint name")
            models.append(ReleasedModel("base", inputs.base_checkpoint, built / "base"))
            copy_export(inputs.base, built / "base")
        if inputs.aligned is not None:
            if not inputs.aligned_checkpoint:
                raise ApertusError("an aligned model needs its checkpoint name")
            models.append(ReleasedModel("aligned", inputs.aligned_checkpoint, built / "aligned"))
            copy_export(inputs.aligned, built / "aligned")
        if not models:
            raise ApertusError("a release needs a model: a base or an aligned one")
        evaluation = built / "evaluation"
        for name in ("scores.csv", "scores.md", "scores.png"):
            _copy(inputs.table / name, evaluation / name)
        memorization = None
        if inputs.memorization is not None:
            for name in ("memorization.json", "memorization.png"):
                _copy(inputs.memorization / name, evaluation / name)
            memorization = _read_json(evaluation / "memorization.json")
        control = None
        if inputs.memorization_control is not None:
            for name in ("memorization.json", "memorization.png"):
                target = evaluation / name.replace("memorization", "memorization-control")
                _copy(inputs.memorization_control / name, target)
            control = _read_json(evaluation / "memorization-control.json")
        reward_report = None
        if inputs.reward_json is not None:
            _copy(inputs.reward_json, evaluation / "reward_report.json")
            reward_report = _read_json(evaluation / "reward_report.json")
        if inputs.reward_md is not None:
            _copy(inputs.reward_md, evaluation / "reward_report.md")
        funnel = None
        if inputs.funnel_json is not None and inputs.funnel_png is not None:
            _copy(inputs.funnel_json, built / "data" / "funnel.json")
            _copy(inputs.funnel_png, built / "data" / "funnel.png")
            funnel = _read_json(built / "data" / "funnel.json")

        stages = stage_manifests(inputs.run_dir)
        facts = CardFacts(
            run_config=dict(run_config),
            models=models,
            scores=read_scores(evaluation / "scores.csv"),
            funnel=funnel,
            stages=stages,
            memorization=memorization,
            memorization_control=control,
            reward_report=reward_report,
        )
        for model in models:
            atomic_write_text(model.folder / "README.md", render_card(config, facts, model))
        atomic_write_text(built / "README.md", render_card(config, facts))
        write_checksums(built)
        manifest = release_manifest(built, stages, run_config)
        atomic_write_json(built / RELEASE_MANIFEST, manifest)
        readable_by_all(built)
    return {
        "files": len(manifest["artifacts"]) + 1,
        "bytes": sum(a["size"] for a in manifest["artifacts"].values()),
        "models": {m.subfolder: m.checkpoint for m in models},
        "stages": len(stages),
    }
