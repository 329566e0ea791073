"""``apertus audit PATH``: re-hash every file a release folder or a run directory lists.

A release folder carries ``RELEASE-MANIFEST.json`` with ``artifacts``: ``{relative path: {sha256,
size}}`` for every file but the manifest itself. A run directory carries one step manifest per
step (``*.manifest.json`` or ``<dir>/manifest.json``, :mod:`apertus.core.manifest`), each listing
its outputs (a directory output with every file in it). Each file is checked for presence, size
(without reading it) and SHA-256; a file that is there but listed nowhere is "unlisted" (in a
release folder, and inside a run's directory outputs).
"""

from __future__ import annotations

import hashlib
import json
import sys
import time
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import IO, Any

from apertus.audit.steps import StepRecord
from apertus.core import ApertusError
from apertus.core.manifest import (
    CONTENT_DIGEST_KEY,
    SNAKEMAKE_MARKER,
    content_digest,
    find_step_manifests,
    is_step_manifest_name,
)

RELEASE_MANIFEST = "RELEASE-MANIFEST.json"


def is_snakemake_marker(path: Path) -> bool:
    return path.name == SNAKEMAKE_MARKER and path.stat().st_size == 0


_CHUNK = 1 << 20

# Problems, in the order the summary lists them.
MISSING, SIZE, SHA256, UNLISTED, UNREADABLE, CONTENT = (
    "missing",
    "size mismatch",
    "sha256 mismatch",
    "unlisted",
    "unreadable manifest",
    "manifest content changed",
)
PROBLEMS = (MISSING, SIZE, SHA256, UNLISTED, UNREADABLE, CONTENT)


@dataclass
class Finding:
    """One file that is not what its manifest says."""

    path: str  # relative to the audited folder
    problem: str
    expected: str | None
    actual: str | None
    group: str  # the step manifest (run) or top-level entry (release) it belongs to


@dataclass
class Group:
    name: str
    files: int = 0
    bytes: int = 0
    problems: int = 0


@dataclass
class AuditReport:
    kind: str  # "release" or "run"
    root: str
    files: int = 0
    bytes: int = 0
    groups: dict[str, Group] = field(default_factory=dict)
    findings: list[Finding] = field(default_factory=list)
    started_from: dict[str, Any] | None = None
    """A release's starting checkpoint as its manifest records it (None: from scratch)."""

    @property
    def ok(self) -> bool:
        return not self.findings

    def group(self, name: str) -> Group:
        return self.groups.setdefault(name, Group(name))

    def add(self, finding: Finding) -> None:
        self.findings.append(finding)
        self.group(finding.group).problems += 1

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "root": self.root,
            "files": self.files,
            "bytes": self.bytes,
            "ok": self.ok,
            "counts": {p: sum(f.problem == p for f in self.findings) for p in PROBLEMS},
            "groups": [asdict(g) for g in self.groups.values()],
            "findings": [asdict(f) for f in self.findings],
            "started_from": self.started_from,
        }


class HashProgress:
    """Bytes hashed so far, with a rate and an ETA, redrawn on one stderr line at most twice a
    second; silent when stderr is not a terminal (logs and pipes get the final report only)."""

    def __init__(
        self, total_bytes: int, stream: IO[str] | None = None, enabled: bool | None = None
    ):
        self.total = max(total_bytes, 1)
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = self.stream.isatty() if enabled is None else enabled
        self.done = 0
        self.files = 0
        self.started = time.monotonic()
        self._drawn = 0.0

    def advance(self, nbytes: int) -> None:
        self.done += nbytes
        now = time.monotonic()
        if self.enabled and now - self._drawn >= 0.5:
            self._drawn = now
            self._draw(now)

    def file_done(self) -> None:
        self.files += 1

    def _draw(self, now: float) -> None:
        elapsed = max(now - self.started, 1e-9)
        rate = self.done / elapsed
        eta = (self.total - self.done) / rate if rate > 0 else float("inf")
        self.stream.write(
            f"\rhashed {human_bytes(self.done)} of {human_bytes(self.total)} "
            f"({100 * self.done / self.total:.0f}%, {self.files} files, "
            f"{human_bytes(rate)}/s, ETA {eta:.0f} s)   "
        )
        self.stream.flush()

    def close(self) -> None:
        if self.enabled:
            self.stream.write("\r" + " " * 79 + "\r")
            self.stream.flush()


def human_bytes(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1000:
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} TB"


def sha256_with_progress(path: Path, progress: HashProgress | None) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            digest.update(chunk)
            if progress is not None:
                progress.advance(len(chunk))
    if progress is not None:
        progress.file_done()
    return digest.hexdigest()


def check_file(
    report: AuditReport,
    path: Path,
    shown: str,
    expected_size: int,
    expected_sha: str,
    group: str,
    progress: HashProgress | None,
) -> None:
    """Compare one file with its recorded size and SHA-256; a size mismatch is reported without
    reading the file (a truncated multi-GB shard costs nothing to detect)."""
    report.files += 1
    report.group(group).files += 1
    report.group(group).bytes += expected_size
    report.bytes += expected_size
    if not path.is_file():
        report.add(Finding(shown, MISSING, expected_sha, None, group))
        if progress is not None:
            progress.advance(expected_size)
        return
    size = path.stat().st_size
    if size != expected_size:
        report.add(Finding(shown, SIZE, f"{expected_size} bytes", f"{size} bytes", group))
        if progress is not None:
            progress.advance(expected_size)
        return
    actual = sha256_with_progress(path, progress)
    if actual != expected_sha:
        report.add(Finding(shown, SHA256, expected_sha, actual, group))


def _load_release_manifest(folder: Path) -> dict[str, Any]:
    path = folder / RELEASE_MANIFEST
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ApertusError(f"{path}: not a readable release manifest ({e})") from None
    artifacts = manifest.get("artifacts") if isinstance(manifest, dict) else None
    if not isinstance(artifacts, dict):
        raise ApertusError(f"{path}: no `artifacts` mapping (relative path -> sha256, size)")
    for rel, info in artifacts.items():
        parts = Path(rel).parts
        if Path(rel).is_absolute() or ".." in parts or not parts:
            raise ApertusError(f"{path}: artifact {rel!r} is not a path inside the release folder")
        if (
            not isinstance(info, dict)
            or not isinstance(info.get("sha256"), str)
            or not isinstance(info.get("size"), int)
        ):
            raise ApertusError(f"{path}: artifact {rel!r} needs `sha256` (text) and `size` (int)")
    return manifest


def audit_release(folder: Path, progress_stream: IO[str] | None = None) -> AuditReport:
    """Check every artifact of a release folder, that nothing else is in it, and that the
    manifest itself is unchanged (its `content_sha256`, the digest of the rest of it; a
    manifest without one, from before the key existed, is checked by its artifacts only)."""
    manifest = _load_release_manifest(folder)
    artifacts = manifest["artifacts"]
    report = AuditReport("release", str(folder), started_from=manifest.get("started_from"))
    recorded = manifest.get(CONTENT_DIGEST_KEY)
    if recorded is not None and recorded != (actual := content_digest(manifest)):
        report.add(Finding(RELEASE_MANIFEST, CONTENT, recorded, actual, RELEASE_MANIFEST))
    progress = HashProgress(sum(a["size"] for a in artifacts.values()), progress_stream)
    for rel in sorted(artifacts):
        info = artifacts[rel]
        group = Path(rel).parts[0]
        check_file(report, folder / rel, rel, info["size"], info["sha256"], group, progress)
    present = {
        p.relative_to(folder).as_posix()
        for p in folder.rglob("*")
        if p.is_file() and not is_snakemake_marker(p)
    }
    for rel in sorted(present - set(artifacts) - {RELEASE_MANIFEST}):
        report.add(Finding(rel, UNLISTED, None, "present", Path(rel).parts[0]))
    progress.close()
    return report


def _unlisted_in_directory(directory: Path, listed: Iterable[str], skip: set[Path]) -> list[str]:
    listed = set(listed)
    return sorted(
        rel
        for p in directory.rglob("*")
        if p.is_file()
        and p.resolve() not in skip
        and not is_snakemake_marker(p)
        and (rel := p.relative_to(directory).as_posix()) not in listed
    )


def audit_run(run_dir: Path, progress_stream: IO[str] | None = None) -> AuditReport:
    """Check every output of every step manifest of a run directory."""
    report = AuditReport("run", str(run_dir))
    records: list[StepRecord] = []
    for path in find_step_manifests(run_dir):
        try:
            records.append(StepRecord.load(path, run_dir))
        except ApertusError as e:
            rel = path.relative_to(run_dir).as_posix()
            report.add(Finding(rel, UNREADABLE, "a step manifest", str(e), rel))
    if not records and not report.findings:
        raise ApertusError(
            f"{run_dir}: neither a release folder ({RELEASE_MANIFEST}) nor a run directory "
            "(no step manifests *.manifest.json found)"
        )
    manifests = {r.manifest_path.resolve() for r in records}
    total = sum(int(o.get("size") or 0) for r in records for o in r.manifest["outputs"])
    progress = HashProgress(total, progress_stream)
    for record in records:
        for output in record.manifest["outputs"]:
            local = record.local(output["path"])
            shown = record.shown(output["path"])
            if "files" in output:
                files = output["files"]
                for rel in sorted(files):
                    info = files[rel]
                    check_file(
                        report,
                        local / rel,
                        f"{shown}/{rel}",
                        info["size"],
                        info["sha256"],
                        record.rel,
                        progress,
                    )
                if local.is_dir():
                    for rel in _unlisted_in_directory(local, files, manifests):
                        report.add(Finding(f"{shown}/{rel}", UNLISTED, None, "present", record.rel))
                elif not files:  # an empty directory output that is gone
                    report.add(Finding(shown, MISSING, "a directory", None, record.rel))
            else:
                check_file(
                    report,
                    local,
                    shown,
                    output["size"],
                    output["sha256"],
                    record.rel,
                    progress,
                )
    progress.close()
    return report


def audit_path(path: Path, progress_stream: IO[str] | None = None) -> AuditReport:
    """A release folder if it has RELEASE-MANIFEST.json, else a run directory."""
    if not path.exists():
        raise ApertusError(f"{path}: no such directory")
    if not path.is_dir():
        hint = " (give the folder that holds it)" if is_step_manifest_name(path) else ""
        raise ApertusError(f"{path}: not a directory{hint}")
    if (path / RELEASE_MANIFEST).exists():
        return audit_release(path, progress_stream)
    return audit_run(path, progress_stream)


def _short(value: str | None) -> str:
    if value is None:
        return "-"
    return (
        value[:16] + "…"
        if len(value) == 64 and all(c in "0123456789abcdef" for c in value)
        else value
    )


def render_report(report: AuditReport) -> str:
    """The summary table (one row per step or top-level entry), then every problem by path."""
    what = "release folder" if report.kind == "release" else "run directory"
    head = "entry" if report.kind == "release" else "step manifest"
    lines = [
        f"audit of {what} {report.root}: {report.files} files, {human_bytes(report.bytes)}",
        "",
    ]
    start = report.started_from
    if start:
        commit = f", commit {start['commit']}" if start.get("commit") else ""
        what = "post-training started from" if start.get("stage") == "posttrain" else "started from"
        lines.insert(
            1,
            f"{what} {start['model']} (revision {start.get('revision') or 'main'}"
            f"{commit}), as recorded: "
            + ", ".join(f"{name} sha256 {e['sha256']}" for name, e in start["files"].items()),
        )
    width = max([len(head), *(len(g.name) for g in report.groups.values())])
    lines.append(f"{head:<{width}}  {'files':>6}  {'size':>9}  {'ok':>6}  {'problems':>8}")
    for g in report.groups.values():
        ok = g.files - sum(
            f.group == g.name and f.problem in (MISSING, SIZE, SHA256) for f in report.findings
        )
        lines.append(
            f"{g.name:<{width}}  {g.files:>6}  {human_bytes(g.bytes):>9}  {ok:>6}  {g.problems:>8}"
        )
    if report.findings:
        lines += ["", "problems:"]
        pw = max(len(f.path) for f in report.findings)
        lines.append(f"  {'file':<{pw}}  {'problem':<19}  {'expected':<18}  actual")
        for f in report.findings:
            lines.append(
                f"  {f.path:<{pw}}  {f.problem:<19}  {_short(f.expected):<18}  {_short(f.actual)}"
            )
        counts = ", ".join(
            f"{n} {p}" for p in PROBLEMS if (n := sum(f.problem == p for f in report.findings))
        )
        lines += ["", f"FAILED: {counts}"]
    else:
        lines += ["", f"OK: all {report.files} files match their recorded size and SHA-256"]
    return "\n".join(lines)
