"""`apertus status`: where a run stands, stage by stage.

Each step (job) of the run is
  done         its outputs exist and nothing it depends on changed;
  running      a Snakemake process is making it now (Snakemake's incomplete marker on an
               output that a live Snakemake lock holds);
  interrupted  its outputs are marked incomplete but no Snakemake holds them (a killed run);
               the next `snakemake` re-runs it;
  stale        its outputs exist but its config subtree, code or inputs changed since (or an
               input will be re-made), so the next `snakemake` re-runs it;
  missing      not made yet.
The states come from `snakemake --summary` (Snakemake's own bookkeeping in .snakemake/) on the
same config sources as `snakemake` takes; running steps show the last progress line of their
log. Training stages also show their last step, loss and ETA from their metrics.jsonl.
"""

from __future__ import annotations

import base64
import json
import os
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from apertus.audit.explain import parse_dry_run, run_snakemake, workflow_directory
from apertus.core import ApertusError
from apertus.core.codedigest import PINS_FILE, manifest_code_changes, read_pins
from apertus.core.progress import ProgressState, format_duration, last_progress

STATES = ("done", "running", "interrupted", "stale", "missing")
# `snakemake --summary` status column -> why a step with outputs is stale.
STALE_REASONS = {
    "updated input files": "an input was or will be re-made",
    "rule implementation changed": "its rule changed",
    "set of input files changed": "its set of inputs changed",
    "params changed": "its config changed",
    "version changed": "its version changed",
}
# Training metrics of the last ETA_WINDOW steps give the rate.
ETA_WINDOW = 50


@dataclass
class StepStatus:
    rule: str
    stage: str
    outputs: list[str]
    log: str | None
    state: str
    why: str = ""
    progress: ProgressState | None = None


@dataclass
class TrainingStatus:
    stage: str
    step: int
    steps: int | None
    loss: float | None
    seconds_since_update: float
    eta_s: float | None
    metrics: str


@dataclass
class RunStatus:
    run_dir: str
    steps: list[StepStatus]
    training: list[TrainingStatus] = field(default_factory=list)

    def stages(self) -> dict[str, dict[str, int]]:
        """{stage: {state: number of steps}}, stages in pipeline order."""
        out: dict[str, dict[str, int]] = {}
        for step in self.steps:
            counts = out.setdefault(step.stage, dict.fromkeys(STATES, 0))
            counts[step.state] += 1
        return out

    def to_json(self) -> dict[str, Any]:
        return {
            "run_dir": self.run_dir,
            "stages": {
                stage: {"state": stage_state(counts), **counts}
                for stage, counts in self.stages().items()
            },
            "steps": [asdict(s) for s in self.steps],
            "training": [asdict(t) for t in self.training],
        }


def stage_state(counts: dict[str, int]) -> str:
    """A stage is running if any step runs, else the first of interrupted, stale, missing
    that any step is, else done; partly made stages say so."""
    for state in ("running", "interrupted", "stale"):
        if counts[state]:
            return state
    if counts["missing"]:
        return "partial" if counts["done"] else "missing"
    return "done"


def _marked_paths(directory: Path) -> set[str]:
    """Paths Snakemake marked incomplete: .snakemake/incomplete/<urlsafe base64 of the path>."""
    paths = set()
    if directory.is_dir():
        for marker in directory.iterdir():
            try:
                paths.add(base64.urlsafe_b64decode(marker.name).decode())
            except (ValueError, UnicodeDecodeError):
                continue
    return paths


def _locked_outputs(directory: Path) -> set[str]:
    """Outputs a running Snakemake holds: the lines of .snakemake/locks/*.output.lock."""
    paths: set[str] = set()
    if directory.is_dir():
        for lock in directory.glob("*.output.lock"):
            try:
                paths |= set(lock.read_text(encoding="utf-8").splitlines())
            except OSError:
                continue
    return paths


def _resolve(path: str, workdir: Path) -> str:
    return str((workdir / path).resolve())


def _stage_of(output: str, rule: str, run_dir: Path) -> str:
    """The stage a step belongs to: the first directory of its (absolute) output under the run
    dir (results/<run>/<stage>/...), else its rule's prefix (release.manifest.json)."""
    try:
        parts = Path(output).relative_to(run_dir).parts
    except ValueError:
        parts = ()
    return parts[0] if len(parts) > 1 else rule.split("_")[0]


def parse_summary(text: str) -> list[tuple[str, str, str, str, str]]:
    """Rows (output, rule, log, status, plan) of `snakemake --summary`'s table."""
    rows, started = [], False
    for line in text.splitlines():
        cells = line.split("\t")
        if cells[:3] == ["output_file", "date", "rule"]:
            started = True
            continue
        if started and len(cells) == 6:
            output, _date, rule, log, status, plan = cells
            rows.append((output, rule, log, status, plan))
    if not started:
        raise ApertusError("snakemake --summary printed no table:\n" + text[-2000:])
    return rows


def group_steps(rows: Sequence[tuple[str, str, str, str, str]]) -> list[list[tuple]]:
    """The summary lists each job's outputs together, in order; every step of the stage
    contract ends with its manifest, so a manifest closes a step."""
    steps: list[list[tuple]] = []
    current: list[tuple] = []
    for row in rows:
        if current and row[1] != current[-1][1]:
            steps.append(current)
            current = []
        current.append(row)
        if row[0].endswith("manifest.json"):
            steps.append(current)
            current = []
    if current:
        steps.append(current)
    return steps


def step_status(
    rows: Sequence[tuple[str, str, str, str, str]],
    run_dir: Path,
    marked: set[str],
    locked: set[str],
    workdir: Path,
) -> StepStatus:
    # Snakemake prints paths relative to its working directory, which need not be ours.
    outputs = [_resolve(r[0], workdir) for r in rows]
    rule = rows[0][1]
    logs = [r[2] for r in rows if r[2] != "-"]
    log = _resolve(logs[0].split(",")[0], workdir) if logs else None
    resolved = set(outputs)
    statuses = {r[3] for r in rows}
    why = ""
    if resolved & marked:
        state = "running" if resolved & locked else "interrupted"
    elif "missing" in statuses:
        state, why = "missing", ""
    elif any(r[4] == "update pending" for r in rows):
        state = "stale"
        reasons = {STALE_REASONS.get(s, s) for s in statuses if s != "ok"}
        why = ", ".join(sorted(reasons)) or STALE_REASONS["updated input files"]
    else:
        state = "done"
    return StepStatus(rule, _stage_of(outputs[-1], rule, run_dir), outputs, log, state, why)


def training_status(
    stage: str, metrics: Path, spec: Path, now: float | None = None
) -> TrainingStatus | None:
    """Last step, loss and ETA of a training run from its metrics.jsonl and the final step in
    its spec.json (steps count on across phases): the rate over the last ETA_WINDOW steps."""
    records = []
    try:
        with metrics.open(encoding="utf-8") as f:
            for line in f:
                try:
                    records.append(json.loads(line))
                except json.JSONDecodeError:
                    continue  # the line being written
    except OSError:
        return None
    by_step = {
        r["step"]: r for r in records if isinstance(r, dict) and isinstance(r.get("step"), int)
    }
    if not by_step:
        return None
    try:
        steps = int(json.loads(spec.read_text(encoding="utf-8"))["steps"])
    except (OSError, ValueError, KeyError, TypeError):
        steps = None  # QRPO writes no spec; its log's progress line has the total
    last = by_step[max(by_step)]
    recent = [by_step[s] for s in sorted(by_step)[-ETA_WINDOW:]]
    eta = None
    if steps is not None and len(recent) > 1 and "time" in recent[0] and "time" in last:
        seconds = last["time"] - recent[0]["time"]
        rate = (last["step"] - recent[0]["step"]) / seconds if seconds > 0 else 0.0
        eta = max(steps - last["step"], 0) / rate if rate > 0 else None
    now = time.time() if now is None else now
    return TrainingStatus(
        stage=stage,
        step=last["step"],
        steps=steps,
        loss=last.get("loss"),
        seconds_since_update=max(now - metrics.stat().st_mtime, 0.0),
        eta_s=eta,
        metrics=str(metrics),
    )


def _work_dir(metrics: Path) -> Path:
    """The work dir (`<stage>-<key>/`) of a metrics file: torchtitan writes it under `out/`."""
    return metrics.parent.parent if metrics.parent.name == "out" else metrics.parent


def _training(run_dir: Path) -> list[TrainingStatus]:
    """Each training stage's latest work dir (pretrain/_work/<stage>-<key>/, posttrain/_work/)
    with metrics: the one written last, i.e. the current or the last attempt."""
    latest: dict[str, Path] = {}
    found = [*run_dir.glob("*/_work/*/out/metrics.jsonl"), *run_dir.glob("*/_work/*/metrics.jsonl")]
    for metrics in sorted(found):
        stage = _work_dir(metrics).name.rsplit("-", 1)[0]
        if stage not in latest or metrics.stat().st_mtime > latest[stage].stat().st_mtime:
            latest[stage] = metrics
    out = []
    # Oldest first: the stages in the order they trained.
    for stage, metrics in sorted(latest.items(), key=lambda item: item[1].stat().st_mtime):
        status = training_status(stage, metrics, _work_dir(metrics) / "spec.json")
        if status:
            out.append(status)
    return out


def run_status(
    configfiles: Sequence[str | os.PathLike] = (),
    overrides: Sequence[str] = (),
    results_dir: str | None = None,
    run: str | None = None,
    cwd: str | os.PathLike | None = None,
) -> RunStatus:
    """Where the run of these config sources stands, from Snakemake's records in the checkout
    `cwd` (default: the current directory)."""
    cwd = workflow_directory(cwd)
    config, output = run_snakemake(
        ["--summary", "--nolock"], configfiles, overrides, results_dir, run, cwd=cwd
    )
    run_dir = (cwd / config["results_dir"] / config["run"]).resolve()
    if not run_dir.is_dir():
        raise ApertusError(f"{run_dir}: no such run (nothing has run with this config yet)")
    marked = {_resolve(p, cwd) for p in _marked_paths(cwd / ".snakemake" / "incomplete")}
    locked = {_resolve(p, cwd) for p in _locked_outputs(cwd / ".snakemake" / "locks")}
    steps = [
        step_status(rows, run_dir, marked, locked, cwd)
        for rows in group_steps(parse_summary(output))
    ]
    running = [s for s in steps if s.state == "running"]
    if any(s.log is None for s in running):
        # Snakemake records a job's log in its metadata only when the job ends; a dry run
        # names the log of every job it would (re-)run.
        dry_run = ["-n", "--nolock", "--rerun-incomplete"]
        _, planned = run_snakemake(dry_run, configfiles, overrides, results_dir, run, cwd=cwd)
        logs = {
            _resolve(out, cwd): job.log[0]
            for job in parse_dry_run(planned)
            if job.log
            for out in job.output
        }
        for step in running:
            found = [logs[o] for o in step.outputs if o in logs]
            step.log = step.log or (_resolve(found[0], cwd) if found else None)
    for step in running:
        if step.log:
            step.progress = last_progress(step.log)
    pins = read_pins(run_dir / PINS_FILE)
    for step in steps:
        if step.state == "stale":
            _name_code_changes(step, pins)
    return RunStatus(str(run_dir), steps, _training(run_dir))


def _name_code_changes(step: StepStatus, pins: dict[str, str]) -> None:
    """A stale step whose code changed since its manifest says which files (and package
    versions) did: Snakemake's summary only says its params changed."""
    if not step.outputs[-1].endswith("manifest.json"):
        return
    changed = manifest_code_changes(step.outputs[-1], pins)
    if changed:
        reasons = [r for r in step.why.split(", ") if r and r != STALE_REASONS["params changed"]]
        step.why = ", ".join([f"code changed: {', '.join(changed)}", *reasons])


def _ago(seconds: float) -> str:
    return f"{format_duration(seconds)} ago"


def render_status(status: RunStatus) -> str:
    lines = [f"run {status.run_dir}", ""]
    stages = status.stages()
    width = max([len(s) for s in stages] + [5])
    lines.append(f"  {'stage':<{width}}  {'state':<11}  " + "  ".join(STATES))
    for stage, counts in stages.items():
        cells = "  ".join(f"{counts[s]:>{len(s)}}" for s in STATES)
        lines.append(f"  {stage:<{width}}  {stage_state(counts):<11}  {cells}")
    pending = [s for s in status.steps if s.state != "done"]
    if pending:
        lines += ["", "steps not done:"]
        for step in pending:
            name = os.path.relpath(step.outputs[-1], status.run_dir)
            why = f" ({step.why})" if step.why else ""
            lines.append(f"  {step.state:<11}  {step.rule:<22}  {name}{why}")
            if step.progress:
                p = step.progress
                total = f"/{p.total}" if p.total is not None else ""
                eta = f", ETA {format_duration(p.eta_s)}" if p.eta_s is not None else ""
                lines.append(f"{'':15}{p.what}: {p.done}{total} {p.unit}{eta}")
    if status.training:
        lines += ["", "training (latest attempt of each stage):"]
        for t in status.training:
            total = f"/{t.steps}" if t.steps else ""
            loss = f"loss {t.loss:.4f}" if isinstance(t.loss, int | float) else "loss -"
            eta = ""
            if t.steps and t.step < t.steps:
                eta = f", ETA {format_duration(t.eta_s)}" if t.eta_s is not None else ", ETA -"
            lines.append(
                f"  {t.stage:<10} step {t.step}{total}, {loss}{eta}, "
                f"last logged {_ago(t.seconds_since_update)}"
            )
    return "\n".join(lines)
