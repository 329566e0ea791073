"""``apertus audit RUN_DIR --rerun STEP``: start one recorded step again, compare its outputs.

The step manifest records the command the step ran (``command``: ``["-m", "apertus...", ...]``)
and where (``cwd``). The re-run:

1. checks that every recorded input still has its recorded SHA-256 (else: "inputs changed", and
   nothing runs: a different result would prove nothing);
2. rewrites the command so that everything it writes goes under a scratch directory: each
   argument that is a recorded output, a directory holding outputs, the manifest, a
   ``--work-dir``/``--work-root``, or any other path under the run directory that is not an
   input (log folders) becomes the same relative path under the scratch directory; inputs are
   read where they are;
3. runs it with the current interpreter and compares each output with the file in the run
   directory: byte-identical first; else, for JSON and JSON Lines, every number within
   ``RTOL`` (relative) or ``ATOL`` (absolute), paths mapped back from the scratch directory,
   and the keys in ``VOLATILE_KEYS`` (wall-clock facts) ignored; anything else is DIFFERENT.
   Records hold paths relative to their own folder (a re-run's output, written in the scratch
   directory, names an input of the run directory by another relative path): two strings that
   name the same place from their files' folders, the scratch mapped onto the run directory,
   are the same.
"""

from __future__ import annotations

import gzip
import json
import math
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from apertus.audit.steps import StepRecord, find_step
from apertus.core import ApertusError
from apertus.core.codedigest import PINS_FILE, code_changes, read_pins
from apertus.core.manifest import describe_path

RTOL = 1e-6
ATOL = 1e-12
# Keys whose values are facts about the moment or machine of a run, not about its result:
# wall-clock times and speeds (lm-eval's results, training metrics), dates, hosts.
VOLATILE_KEYS = frozenset(
    {
        "date",
        "created",
        "start_time",
        "end_time",
        "total_evaluation_time_seconds",
        "seconds",
        "elapsed",
        "elapsed_seconds",
        "wall_seconds",
        "tokens_per_second",
        "tokens_per_s",
        "tps",
        "time",
        "timestamp",
        "started",
        "ended",
        "host",
        "hostname",
        "slurm_job_id",
    }
)
# Arguments whose value is a folder the step writes scratch state to.
WORK_ARGUMENTS = ("--work-dir", "--work-root")
IDENTICAL, WITHIN, DIFFERENT = "identical", "within tolerance", "DIFFERENT"


@dataclass
class InputCheck:
    path: str
    recorded_sha256: str
    current_sha256: str | None  # None: missing

    @property
    def changed(self) -> bool:
        return self.current_sha256 != self.recorded_sha256


@dataclass
class OutputVerdict:
    path: str  # relative to the run directory
    recorded_sha256: str | None  # of the file in the run directory now (None: missing)
    rerun_sha256: str | None
    verdict: str  # identical / within tolerance / DIFFERENT
    detail: str = ""


@dataclass
class RerunReport:
    step: str  # stage/step
    manifest: str  # relative to the run directory
    scratch: str
    status: str  # "rerun", "inputs changed", "rerun failed"
    command: list[str] = field(default_factory=list)
    inputs: list[InputCheck] = field(default_factory=list)
    outputs: list[OutputVerdict] = field(default_factory=list)
    returncode: int | None = None
    log: str | None = None
    code_changed: list[str] = field(default_factory=list)
    """Files (and package versions) whose code differs from what the step ran: outputs may
    then differ for that reason (apertus.core.codedigest)."""

    @property
    def ok(self) -> bool:
        return self.status == "rerun" and all(o.verdict != DIFFERENT for o in self.outputs)

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["ok"] = self.ok
        data["tolerance"] = {"rtol": RTOL, "atol": ATOL, "volatile_keys": sorted(VOLATILE_KEYS)}
        return data


def check_inputs(record: StepRecord) -> list[InputCheck]:
    """Every recorded input, hashed again where it is now."""
    checks = []
    for entry in record.manifest["inputs"]:
        local = record.local(entry["path"])
        current = describe_path(local)["sha256"] if local.exists() else None
        checks.append(InputCheck(record.shown(entry["path"]), entry.get("sha256", ""), current))
    return checks


def _is_within(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip(os.sep) + os.sep)


def rewrite_command(record: StepRecord, scratch: Path) -> tuple[list[str], dict[str, str]]:
    """The recorded command with every written path moved under `scratch` and every read path
    moved to where the run directory is now. Returns it and the replacements (new -> old text),
    which map paths embedded in the re-run's outputs back for comparison."""
    command = record.manifest.get("command", "absent")
    if command == "absent":
        raise ApertusError(
            f"{record.rel}: recorded by an older version; cannot re-run (its manifest has no "
            "`command`)"
        )
    if not command:
        raise ApertusError(
            f"{record.rel}: the step was not started as `python -m apertus...` (its manifest "
            "records no command); cannot re-run"
        )
    if record.recorded_root is None:
        raise ApertusError(f"{record.rel}: cannot tell the run directory from its output paths")
    outputs = [record.absolute(o["path"]) for o in record.manifest["outputs"]]
    inputs = [record.absolute(i["path"]) for i in record.manifest["inputs"]]
    root = record.recorded_root
    replacements: dict[str, str] = {}

    def written(path: str) -> str:
        return str(scratch / Path(path).relative_to(root))

    def moved(token: str, previous: str) -> str:
        path = record.absolute(token)
        if not _is_within(path, root):
            return token  # outside the run (config/robots, a Hub cache): read where it is
        writes = (
            previous == "--manifest"
            or previous in WORK_ARGUMENTS
            or any(_is_within(out, path) or _is_within(path, out) for out in outputs)
        )
        reads = any(_is_within(inp, path) or _is_within(path, inp) for inp in inputs)
        if writes and reads and previous not in WORK_ARGUMENTS and previous != "--manifest":
            raise ApertusError(
                f"{record.rel}: the argument {token!r} holds both inputs and outputs of the "
                "step; cannot tell where a re-run may write"
            )
        # Outputs, and folders the step writes besides them (log folders), go to the scratch.
        new = written(path) if writes or not reads else str(record.local(token))
        if new != token:
            replacements[new] = token
        return new

    argv: list[str] = []
    previous = ""
    for i, token in enumerate(command):
        if i < 2 or previous == "--config" or (token.startswith("-") and "=" not in token):
            argv.append(token)  # -m, the module, flags and the config JSON
        elif token.startswith("--"):
            option, _, value = token.partition("=")
            argv.append(f"{option}={moved(value, option)}")
        else:
            argv.append(moved(token, previous))
        previous = token
    return argv, replacements


def _unmap(value: Any, replacements: dict[str, str]) -> Any:
    """Put back the recorded paths into a re-run's JSON value (longest replacement first)."""
    if isinstance(value, str):
        for new in sorted(replacements, key=len, reverse=True):
            value = value.replace(new, replacements[new])
        return value
    if isinstance(value, list):
        return [_unmap(v, replacements) for v in value]
    if isinstance(value, dict):
        return {k: _unmap(v, replacements) for k, v in value.items()}
    return value


def _content(path: Path) -> tuple[bytes, str]:
    """A file's bytes and the suffix that says what they are, through gzip: gzip writes the
    time of compression into its header, so two runs' ``.jsonl.gz`` differ even when the text
    inside is the same."""
    data = path.read_bytes()
    if path.suffix == ".gz":
        return gzip.decompress(data), Path(path.stem).suffix
    return data, path.suffix


def _json_values(data: bytes, suffix: str) -> list[Any]:
    text = data.decode("utf-8")
    if suffix == ".jsonl":
        return [json.loads(line) for line in text.splitlines() if line.strip()]
    return [json.loads(text)]


def compare_json(
    recorded: Any,
    rerun: Any,
    where: str = "",
    ignored: set[str] | None = None,
    same_path: Callable[[str, str], bool] | None = None,
) -> tuple[float, str | None]:
    """(largest relative difference among numbers, first difference beyond tolerance or None).
    Keys in VOLATILE_KEYS are skipped at any depth; those whose values differed are added to
    `ignored`. Two different strings for which `same_path` holds (`_same_place`) are equal."""
    ignored = set() if ignored is None else ignored
    if isinstance(recorded, bool) or isinstance(rerun, bool):
        same = type(recorded) is type(rerun) and recorded == rerun
        return 0.0, None if same else f"{where or 'value'}: {recorded!r} vs {rerun!r}"
    if isinstance(recorded, int | float) and isinstance(rerun, int | float):
        if recorded == rerun:
            return 0.0, None
        if isinstance(recorded, float) and math.isnan(recorded) and math.isnan(rerun):
            return 0.0, None
        rel = abs(recorded - rerun) / max(abs(recorded), abs(rerun))
        if math.isclose(recorded, rerun, rel_tol=RTOL, abs_tol=ATOL):
            return rel, None
        return rel, f"{where or 'value'}: {recorded!r} vs {rerun!r}"
    if isinstance(recorded, dict) and isinstance(rerun, dict):
        keys = (set(recorded) | set(rerun)) - VOLATILE_KEYS
        ignored.update(
            k
            for k in VOLATILE_KEYS & (set(recorded) | set(rerun))
            if recorded.get(k) != rerun.get(k)
        )
        worst = 0.0
        for key in sorted(keys, key=str):
            at = f"{where}.{key}" if where else str(key)
            if key not in recorded or key not in rerun:
                return worst, f"{at}: only in the {'re-run' if key in rerun else 'recorded file'}"
            diff, problem = compare_json(recorded[key], rerun[key], at, ignored, same_path)
            worst = max(worst, diff)
            if problem:
                return worst, problem
        return worst, None
    if isinstance(recorded, list) and isinstance(rerun, list):
        if len(recorded) != len(rerun):
            return 0.0, f"{where or 'list'}: {len(recorded)} items vs {len(rerun)}"
        worst = 0.0
        for i, (a, b) in enumerate(zip(recorded, rerun, strict=True)):
            diff, problem = compare_json(a, b, f"{where}[{i}]", ignored, same_path)
            worst = max(worst, diff)
            if problem:
                return worst, problem
        return worst, None
    if recorded == rerun:
        return 0.0, None
    strings = isinstance(recorded, str) and isinstance(rerun, str)
    if strings and same_path is not None and same_path(recorded, rerun):
        return 0.0, None
    return 0.0, f"{where or 'value'}: {str(recorded)[:60]!r} vs {str(rerun)[:60]!r}"


def _same_place(recorded_dir: Path, rerun_dir: Path, scratch: Path, run_dir: Path):
    """Whether a relative path in a file of `recorded_dir` and one in the re-run's file of
    `rerun_dir` name the same place, the scratch directory standing for the run directory."""

    def place(path: str, folder: Path) -> str:
        absolute = os.path.normpath(folder.absolute() / path)
        if _is_within(absolute, str(scratch)):
            absolute = os.path.normpath(run_dir.absolute() / os.path.relpath(absolute, scratch))
        return absolute

    def same(recorded: str, rerun: str) -> bool:
        if not recorded or not rerun or os.path.isabs(recorded) or os.path.isabs(rerun):
            return False
        return place(recorded, recorded_dir) == place(rerun, rerun_dir)

    return same


def compare_output(
    recorded: Path,
    manifest_sha: str | None,
    rerun: Path,
    shown: str,
    replacements: dict[str, str],
    same_path: Callable[[str, str], bool] | None = None,
) -> OutputVerdict:
    """One output file: the run directory's copy against the re-run's (`same_path`: see
    `compare_json`)."""
    ours = describe_path(recorded)["sha256"] if recorded.is_file() else None
    theirs = describe_path(rerun)["sha256"] if rerun.is_file() else None
    if ours is None:
        return OutputVerdict(shown, None, theirs, DIFFERENT, "recorded file missing")
    if theirs is None:
        return OutputVerdict(shown, ours, None, DIFFERENT, "not written by the re-run")
    if manifest_sha is not None and ours != manifest_sha:
        # The file in the run directory is not what the step wrote: whatever the re-run gives,
        # the record does not hold.
        detail = "recorded file does not match its manifest"
        if theirs == manifest_sha:
            detail += " (the re-run does)"
        return OutputVerdict(shown, ours, theirs, DIFFERENT, detail)
    if ours == theirs:
        return OutputVerdict(shown, ours, theirs, IDENTICAL)
    try:
        (a, suffix), (b, _) = _content(recorded), _content(rerun)
    except (OSError, EOFError, gzip.BadGzipFile) as e:
        return OutputVerdict(shown, ours, theirs, DIFFERENT, f"unreadable ({e})")
    if a == b:
        return OutputVerdict(shown, ours, theirs, WITHIN, "gzip header only; same content")
    if suffix in (".json", ".jsonl"):
        ignored: set[str] = set()
        try:
            worst, problem = compare_json(
                _json_values(a, suffix),
                _unmap(_json_values(b, suffix), replacements),
                "",
                ignored,
                same_path,
            )
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            return OutputVerdict(shown, ours, theirs, DIFFERENT, f"not comparable as JSON ({e})")
        if problem is None:
            detail = f"max rel diff {worst:.1e}" + (
                f"; ignored {', '.join(sorted(ignored))}" if ignored else ""
            )
            return OutputVerdict(shown, ours, theirs, WITHIN, detail)
        return OutputVerdict(shown, ours, theirs, DIFFERENT, problem)
    if recorded.name == DCP_METADATA:
        if _same_checkpoint_layout(recorded, rerun):
            return OutputVerdict(
                shown, ours, theirs, WITHIN, "checkpoint metadata; its path and save id ignored"
            )
        return OutputVerdict(shown, ours, theirs, DIFFERENT, "checkpoint layouts differ")
    return OutputVerdict(shown, ours, theirs, DIFFERENT, "bytes differ")


# A torch.distributed.checkpoint folder's index: the tensors' names, shapes and places in the
# data files, plus `storage_meta`, which holds the folder's path and a random id per save.
DCP_METADATA = ".metadata"


def _same_checkpoint_layout(a: Path, b: Path) -> bool:
    """Whether two DCP `.metadata` files describe the same tensors stored the same way, apart
    from `storage_meta` (the checkpoint's path and a random save id). The data files beside
    them are compared byte for byte on their own."""
    from torch.distributed.checkpoint import FileSystemReader

    try:
        ma, mb = (FileSystemReader(str(p.parent)).read_metadata() for p in (a, b))
    except Exception:  # not a DCP index after all: no claim of sameness
        return False
    keys = ("state_dict_metadata", "planner_data", "storage_data", "version")
    return all(getattr(ma, k, None) == getattr(mb, k, None) for k in keys)


def _output_files(record: StepRecord, scratch: Path) -> list[tuple[Path, str | None, Path, str]]:
    """(run directory file, its manifest SHA-256, re-run file, shown path) for every output file,
    including files only the re-run wrote inside a directory output."""
    pairs = []
    for output in record.manifest["outputs"]:
        local = record.local(output["path"])
        rel = record.relative(output["path"])
        assert rel is not None  # rewrite_command refused runs without a run root
        redone = scratch / rel
        if "files" not in output:
            pairs.append((local, output.get("sha256"), redone, rel))
            continue
        names = set(output["files"])
        if redone.is_dir():
            names |= {
                p.relative_to(redone).as_posix()
                for p in redone.rglob("*")
                if p.is_file() and p.resolve() != (scratch / record.rel).resolve()
            }
        for name in sorted(names):
            sha = output["files"].get(name, {}).get("sha256")
            pairs.append((local / name, sha, redone / name, f"{rel}/{name}"))
    return pairs


def rerun_step(run_dir: Path, selector: str, scratch: Path | None = None) -> RerunReport:
    """Re-execute one recorded step of `run_dir` into `scratch` and compare its outputs."""
    record = find_step(run_dir, selector)
    if scratch is not None:
        return _rerun_into(record, run_dir, scratch)
    scratch = Path(tempfile.mkdtemp(prefix="apertus-rerun-"))
    try:
        return _rerun_into(record, run_dir, scratch)
    finally:
        if not any(scratch.iterdir()):  # nothing ran (inputs changed, an error): no litter
            scratch.rmdir()


def _rerun_into(record: StepRecord, run_dir: Path, scratch: Path) -> RerunReport:
    if scratch.exists() and any(scratch.iterdir()):
        raise ApertusError(f"--scratch {scratch}: not empty; give an empty or new directory")
    scratch = scratch.resolve()
    if _is_within(str(scratch), str(run_dir.resolve())):
        raise ApertusError(f"--scratch {scratch}: must not be inside the run directory")
    argv, replacements = rewrite_command(record, scratch)
    report = RerunReport(record.name, record.rel, str(scratch), "rerun", argv)
    report.code_changed = code_changes(record.manifest, read_pins(run_dir / PINS_FILE))
    report.inputs = check_inputs(record)
    if any(i.changed for i in report.inputs):
        report.status = "inputs changed"
        return report
    scratch.mkdir(parents=True, exist_ok=True)
    log = scratch / "rerun.log"
    cwd = record.cwd if Path(record.cwd).is_dir() else str(run_dir)
    with open(log, "w", encoding="utf-8") as out:
        proc = subprocess.run(
            [sys.executable, *argv], cwd=cwd, stdout=out, stderr=subprocess.STDOUT, check=False
        )
    report.returncode, report.log = proc.returncode, str(log)
    if proc.returncode != 0:
        report.status = "rerun failed"
        return report
    report.outputs = [
        compare_output(
            local,
            sha,
            redone,
            shown,
            replacements,
            _same_place(local.parent, redone.parent, scratch, run_dir),
        )
        for local, sha, redone, shown in _output_files(record, scratch)
    ]
    return report


def _short(sha: str | None) -> str:
    return sha[:16] if sha else "-"


def render_rerun(report: RerunReport) -> str:
    lines = [f"re-run of {report.step} ({report.manifest}) into {report.scratch}"]
    if report.code_changed:
        lines.append(
            "warning: the code differs from the code the step ran: "
            + ", ".join(report.code_changed)
        )
    if report.status == "inputs changed":
        lines += ["", "inputs changed since the step ran; not re-run:"]
        width = max(len(i.path) for i in report.inputs)
        lines.append(f"  {'input':<{width}}  {'recorded sha':<16}  current sha")
        for i in report.inputs:
            mark = "" if not i.changed else "  CHANGED"
            lines.append(
                f"  {i.path:<{width}}  {_short(i.recorded_sha256):<16}  "
                f"{_short(i.current_sha256) if i.current_sha256 else 'missing'}{mark}"
            )
        lines += ["", "verdict: inputs changed"]
        return "\n".join(lines)
    if report.status == "rerun failed":
        tail = Path(report.log).read_text(encoding="utf-8", errors="replace")[-2000:]
        lines += [
            f"the re-run failed (exit {report.returncode}); log {report.log}:",
            tail,
            "verdict: rerun failed",
        ]
        return "\n".join(lines)
    lines.append(f"inputs: all {len(report.inputs)} unchanged since the step ran")
    lines.append(
        f"tolerance: bitwise first; JSON/JSONL numbers within rtol {RTOL:g} or atol {ATOL:g}, "
        "paths mapped back from the scratch dir, wall-clock keys ignored "
        f"({', '.join(sorted(VOLATILE_KEYS))}); .gz compared decompressed"
    )
    lines.append("")
    width = max([len("output file"), *(len(o.path) for o in report.outputs)])
    lines.append(f"{'output file':<{width}}  {'recorded sha':<16}  {'rerun sha':<16}  verdict")
    for o in report.outputs:
        verdict = o.verdict + (f" ({o.detail})" if o.detail else "")
        lines.append(
            f"{o.path:<{width}}  {_short(o.recorded_sha256):<16}  "
            f"{_short(o.rerun_sha256):<16}  {verdict}"
        )
    counts = {
        v: sum(o.verdict == v for o in report.outputs) for v in (IDENTICAL, WITHIN, DIFFERENT)
    }
    lines += [
        "",
        f"verdict: {'OK' if report.ok else 'DIFFERENT'}: "
        + ", ".join(f"{n} {v}" for v, n in counts.items()),
    ]
    return "\n".join(lines)
