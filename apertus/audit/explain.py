"""``apertus explain``: which jobs Snakemake would run with this config, and why.

Runs ``snakemake -n`` (the default ``--rerun-triggers``: missing outputs, params, input, code,
software environment, modification times) in the repository root with the same config sources
``apertus config`` takes, and reads the per-job blocks of its dry run::

    rule tokenize_shards:
        input: ...
        output: /r/e2e/tokenize/shards/web, /r/e2e/tokenize/shards/web.manifest.json
        ...
        reason: Input files updated by another job: /r/e2e/tokenize/tokenizer
        wildcards: source=web

A "Params have changed" reason carries the params before and now; every rule's ``config``
param is a subtree of the run configuration (``stage_config``/``stage_subconfig`` in
workflow/rules/common.smk), so the differing leaves, placed at that subtree in the configuration,
name the config keys that touch the rule.
"""

from __future__ import annotations

import ast
import contextlib
import json
import os
import re
import subprocess
import sys
import tempfile
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import yaml

from apertus.core import REPO_ROOT, ApertusError
from apertus.core.codedigest import CODE_PARAM_PREFIX, PINS_FILE, manifest_code_changes, read_pins
from apertus.core.config import load_config, merge_overrides
from apertus.core.resources import sbatch_options

# The reasons Snakemake joins with "; " (snakemake.jobs.Reason.__str__, 9.x); splitting only
# before one of them keeps a "; " inside a params value whole.
REASON_STARTS = (
    "Forced execution",
    "Rules with neither input nor output files",
    "Rules with a run or shell declaration but no output",
    "Missing output files",
    "Incomplete output files",
    "Updated input files",
    "Input files updated by another job",
    "Output file is a pipe",
    "Job provides a service",
    "Set of input files has changed since last execution",
    "Code has changed since last execution",
    "Params have changed since last execution",
    "Software environment definition has changed since last execution",
    "Finished (was:",
)
_REASON_SPLIT = re.compile("; (?=" + "|".join(re.escape(r) for r in REASON_STARTS) + ")")
# How `apertus explain --sbatch` runs Snakemake: the SLURM workflow profile (profiles/slurm).
SLURM_PROFILE = "slurm"
_JOB_HEADER = re.compile(r"^(?:local)?(?:rule|checkpoint) (\w+):\s*$")
_FIELD = re.compile(r"^\s{4}(\w+): ?(.*)$")
ABSENT = "<absent>"  # a key one side of a params change does not have
_PARAMS = re.compile(r"across all output: before: (.*) now: (.*?)\s*$", re.S)


@dataclass
class ConfigChange:
    key: str  # dotted, in the run configuration when it could be placed, else in the param
    before: Any
    now: Any


@dataclass
class PlannedJob:
    rule: str
    wildcards: dict[str, str]
    output: list[str]
    reasons: list[str]
    changes: list[ConfigChange] = field(default_factory=list)
    threads: int = 1
    log: list[str] = field(default_factory=list)
    code: list[str] = field(default_factory=list)
    """The files (and package versions) whose change changed the job's `code` param, from
    its manifest (apertus.core.codedigest); empty when its code did not change."""
    resources: dict[str, Any] = field(default_factory=dict)
    """What the job asks its executor for, as Snakemake printed it (sizes it prints twice,
    e.g. `mem` next to `mem_mb`, and `tmpdir` left out)."""
    sbatch: str | None = None
    """The sbatch options of the job under profiles/slurm (`apertus explain --sbatch`)."""

    @property
    def target(self) -> str:
        """What the job makes, for the table: its wildcards, else its first output."""
        if self.wildcards:
            return ", ".join(f"{k}={v}" for k, v in self.wildcards.items())
        return self.output[0] if self.output else ""


@dataclass
class Plan:
    run_dir: str
    jobs: list[PlannedJob]

    def counts(self) -> dict[str, int]:
        return dict(Counter(job.rule for job in self.jobs))

    def rules_by_key(self) -> dict[str, list[str]]:
        """Each changed config key -> the rules whose params it changes (directly)."""
        touched: dict[str, list[str]] = {}
        for job in self.jobs:
            for change in job.changes:
                rules = touched.setdefault(change.key, [])
                if job.rule not in rules:
                    rules.append(job.rule)
        return touched

    def rules_by_file(self) -> dict[str, list[str]]:
        """Each changed code file (or package version) -> the rules whose code it changes."""
        touched: dict[str, list[str]] = {}
        for job in self.jobs:
            for changed in job.code:
                rules = touched.setdefault(changed, [])
                if job.rule not in rules:
                    rules.append(job.rule)
        return touched

    def to_json(self) -> dict[str, Any]:
        return {
            "run_dir": self.run_dir,
            "jobs": [asdict(j) for j in self.jobs],
            "counts": self.counts(),
            "changed_keys": self.rules_by_key(),
            "changed_code": self.rules_by_file(),
        }


def split_reasons(reason: str) -> list[str]:
    return [r.strip() for r in _REASON_SPLIT.split(reason.strip()) if r.strip()]


# Resources Snakemake prints in a second unit or that say nothing about the job's needs.
_ECHOED_RESOURCES = {"tmpdir", "mem", "mem_mib", "disk", "disk_mib", "disk_mb"}


def _resources(text: str) -> dict[str, Any]:
    """A dry-run job's ``resources:`` line as a dict (integers as int)."""
    found: dict[str, Any] = {}
    for item in re.split(r", (?=\w+=)", text.strip()):
        name, _, value = item.partition("=")
        if name and name not in _ECHOED_RESOURCES:
            found[name] = int(value) if re.fullmatch(r"-?\d+", value) else value
    return found


def parse_dry_run(text: str) -> list[PlannedJob]:
    """The jobs of a ``snakemake -n`` printout; target rules without outputs (``all``) are left
    out: they run nothing."""
    jobs: list[PlannedJob] = []
    current: dict[str, str] | None = None
    rule = ""

    def finish() -> None:
        if current is not None and current.get("output"):
            wildcards = dict(
                item.split("=", 1)
                for item in re.split(r", (?=\w+=)", current.get("wildcards", ""))
                if "=" in item
            )
            jobs.append(
                PlannedJob(
                    rule=rule,
                    wildcards=wildcards,
                    output=[o for o in current["output"].split(", ") if o],
                    reasons=split_reasons(current.get("reason", "")),
                    threads=int(current.get("threads", 1)),
                    log=[p for p in current.get("log", "").split(", ") if p],
                    resources=_resources(current.get("resources", "")),
                )
            )

    for line in text.splitlines():
        header = _JOB_HEADER.match(line)
        if header:
            finish()
            rule, current = header.group(1), {}
            continue
        if current is None:
            continue
        match = _FIELD.match(line)
        if match:
            current[match.group(1)] = match.group(2)
        elif not line.startswith("    "):  # the block ends (blank line, "Shell command:")
            finish()
            current = None
    finish()
    return jobs


_PY_STRING = re.compile(r"'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"", re.S)


def _param_values(text: str) -> list[Any]:
    """The params in a "before: ..." or "now: ..." list: Snakemake prints each param's repr(),
    joined by ","; each of our `config` params is a string of canonical JSON, given back parsed.
    """
    values: list[Any] = []
    text, at = text.strip(), 0
    if text.startswith("<nothing exclusive>"):
        return []
    while at < len(text):
        match = _PY_STRING.match(text, at)
        if not match:
            values.append(text[at:])  # a param that is not a string: kept as its repr
            break
        value = ast.literal_eval(match.group(0))
        with contextlib.suppress(json.JSONDecodeError):  # a string param that is not JSON
            value = json.loads(value)
        values.append(value)
        at = match.end()
        while at < len(text) and text[at] in ", ":
            at += 1
    return values


def params_change(reason: str) -> tuple[list[Any], list[Any]] | None:
    """(params only before, params only now) of a "Params have changed" reason."""
    match = _PARAMS.search(reason)
    if not match:
        return None
    return _param_values(match.group(1)), _param_values(match.group(2))


def _leaves(value: Any, prefix: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Any]]:
    if isinstance(value, dict) and value:
        for key, sub in value.items():
            yield from _leaves(sub, (*prefix, str(key)))
    else:
        yield prefix, value


def changed_leaves(before: Any, now: Any) -> list[tuple[tuple[str, ...], Any, Any]]:
    """Keys (as paths) whose values differ between two config subtrees."""
    old, new = dict(_leaves(before)), dict(_leaves(now))
    return [
        (key, old.get(key, ABSENT), new.get(key, ABSENT))
        for key in sorted(set(old) | set(new))
        if key not in old or key not in new or old[key] != new[key]
    ]


def locate_subtree(config: dict[str, Any], param: Any) -> tuple[str, ...] | None:
    """Where a rule's `config` param sits in the run configuration: a section, a subtree of a
    section, or (``stage_config(stage, *keys)``) a section cut to some of its keys. Equal values
    are looked for first, then equal key sets (the config given may not be the one that ran)."""
    if not isinstance(param, dict) or not param:
        return None

    def same(a: Any, b: Any, by_value: bool) -> bool:
        if by_value:
            return a == b
        if isinstance(a, dict) and isinstance(b, dict):
            return set(a) == set(b)
        return type(a) is type(b)

    for by_value in (True, False):
        for stage, section in config.items():
            if not isinstance(section, dict):
                continue
            if same(param, section, by_value) or all(
                k in section and same(v, section[k], by_value) for k, v in param.items()
            ):
                return (stage,)
            for key, sub in section.items():
                if isinstance(sub, dict) and same(param, sub, by_value):
                    return (stage, key)
    return None


def attribute_changes(job: PlannedJob, config: dict[str, Any]) -> list[ConfigChange]:
    """The config keys behind a job's "Params have changed" reason."""
    changes: list[ConfigChange] = []
    for reason in job.reasons:
        parsed = params_change(reason)
        if parsed is None:
            continue
        before, now = (
            [v for v in side if not (isinstance(v, str) and v.startswith(CODE_PARAM_PREFIX))]
            for side in parsed
        )
        if not before and not now:  # only the code changed (`PlannedJob.code` says where)
            continue
        if len(before) == 1 and len(now) == 1:
            where = locate_subtree(config, now[0]) or ()
            for key, old, new in changed_leaves(before[0], now[0]):
                changes.append(ConfigChange(".".join((*where, *key)), old, new))
        else:
            changes.append(ConfigChange(f"params of rule {job.rule}", before, now))
    return changes


# Where `snakemake` looks for its workflow in its working directory (without --snakefile).
SNAKEFILES = ("Snakefile", "snakefile", "workflow/Snakefile", "workflow/snakefile")


def workflow_directory(directory: str | os.PathLike | None = None) -> Path:
    """The directory to run Snakemake in, absolute: `directory`, by default the current one (as
    `snakemake` itself). Snakemake runs the workflow found there (a checkout), else the one
    installed with this package (`workflow_arguments`)."""
    path = Path(directory if directory is not None else os.getcwd()).absolute()
    if not path.is_dir():
        raise ApertusError(f"{path}: no such directory")
    return path


def holds_workflow(directory: Path) -> bool:
    """Whether `snakemake` started in `directory` finds a Snakefile there by itself."""
    return any((directory / name).is_file() for name in SNAKEFILES)


def workflow_arguments(
    cwd: Path, extra: Sequence[str] = (), profile: str | None = None
) -> list[str]:
    """Snakemake's arguments in `cwd`, then the user's `extra`: in a checkout nothing more (it
    finds workflow/Snakefile and profiles/default itself), elsewhere the installed workflow
    (`--snakefile`) and its default workflow profile, as Snakemake looks for profiles only beside
    the working directory and the Snakefile. `profile` names a workflow profile of profiles/;
    a user's `--workflow-profile profiles/slurm` that is not in `cwd` is the installed one."""
    installed = not holds_workflow(cwd)
    root = REPO_ROOT if installed else cwd
    args = list(extra)
    for at, arg in enumerate(args[:-1]):
        given = Path(args[at + 1])
        shipped = installed and not (cwd / given).exists() and (REPO_ROOT / given).exists()
        if arg == "--workflow-profile" and shipped:
            args[at + 1] = str(REPO_ROOT / given)
    head = ["--snakefile", str(REPO_ROOT / "workflow" / "Snakefile")] if installed else []
    if profile:
        head += ["--workflow-profile", str(root / "profiles" / profile)]
    elif installed and "--workflow-profile" not in args:
        head += ["--workflow-profile", str(REPO_ROOT / "profiles" / "default")]
    return head + args


def _snakemake_command(
    mode: Sequence[str],
    configfiles: Sequence[str | os.PathLike],
    override_file: Path,
    settings: Sequence[str],
    extra: Sequence[str],
    cwd: Path,
    sbatch: bool = False,
) -> list[str]:
    command = [sys.executable, "-m", "snakemake", *mode]
    # Under profiles/slurm each job's threads are its own (its `cores` is above any node's);
    # locally one core is enough for a dry run.
    command += [] if sbatch else ["--cores", "1"]
    # The user's arguments (targets, --forcerun RULE ...) before the options that take lists:
    # after `--config K=V ...` a target would be read as one more K=V.
    command += workflow_arguments(cwd, extra, SLURM_PROFILE if sbatch else None)
    command += ["--configfile", *map(str, configfiles), str(override_file)]
    if settings:
        command += ["--config", *settings]
    return command


def run_snakemake(
    mode: Sequence[str],
    configfiles: Sequence[str | os.PathLike] = (),
    overrides: Sequence[str] = (),
    results_dir: str | None = None,
    run: str | None = None,
    extra: Sequence[str] = (),
    cwd: str | os.PathLike | None = None,
    sbatch: bool = False,
) -> tuple[dict[str, Any], str]:
    """Snakemake with `mode` (``-n``, ``--summary``...) in the checkout `cwd` (default: the
    current directory, `workflow_directory`) on these config sources, as `apertus config
    check` would resolve them: (the resolved config, stdout + stderr). Fails with the tail of
    Snakemake's output when it does."""
    cwd = workflow_directory(cwd)
    settings = [f"{k}={v}" for k, v in (("results_dir", results_dir), ("run", run)) if v]
    # Validates every source first: a bad key is named here, not deep in Snakemake's output.
    config = load_config(configfiles, [*overrides, *settings], directory=cwd)
    override = merge_overrides(overrides)
    with tempfile.TemporaryDirectory(prefix="apertus-explain-") as tmp:
        # Snakemake's own --config takes no dotted keys: overrides go in as one more file.
        override_file = Path(tmp) / "overrides.yaml"
        override_file.write_text(yaml.safe_dump(override), encoding="utf-8")
        command = _snakemake_command(mode, configfiles, override_file, settings, extra, cwd, sbatch)
        proc = subprocess.run(command, cwd=cwd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-15:])
        what = " ".join(mode)
        raise ApertusError(f"snakemake {what} failed (exit {proc.returncode}):\n{tail}")
    return config, proc.stdout + "\n" + proc.stderr


def explain_changes(
    configfiles: Sequence[str | os.PathLike] = (),
    overrides: Sequence[str] = (),
    results_dir: str | None = None,
    run: str | None = None,
    extra: Sequence[str] = (),
    cwd: str | os.PathLike | None = None,
    sbatch: bool = False,
) -> Plan:
    """Dry-run the workflow of the checkout `cwd` (default: the current directory) with these
    config sources and explain each job it would run; with `sbatch`, under profiles/slurm, with
    the sbatch options each job would be submitted with."""
    cwd = workflow_directory(cwd)
    config, output = run_snakemake(
        ["-n"], configfiles, overrides, results_dir, run, extra, cwd, sbatch
    )
    jobs = parse_dry_run(output)
    run_dir = cwd / config["results_dir"] / config["run"]
    pins = read_pins(run_dir / PINS_FILE)
    launches = pretrain_launches(config) if sbatch else {}
    for job in jobs:
        job.changes = attribute_changes(job, config)
        job.code = code_of_job(job, pins, cwd)
        if sbatch:
            job.sbatch = sbatch_options(job.rule, job.threads, job.resources)
            if job.rule == "pretrain_stage" and job.wildcards.get("stage") in launches:
                job.sbatch += f"  [{launches[job.wildcards['stage']]}]"
    return Plan(str(Path(config["results_dir"]) / config["run"]), jobs)


def pretrain_launches(config: Mapping[str, Any]) -> dict[str, str]:
    """The torchrun layout of each pretraining stage (`apertus.train.plan.launch_layout`)."""
    from apertus.train.config import PretrainConfig
    from apertus.train.plan import launch_layout, pretrain_stages

    cfg = PretrainConfig.from_dict(config["pretrain"])
    return {stage.name: launch_layout(cfg, stage) for stage in pretrain_stages(cfg)}


def code_of_job(job: PlannedJob, pins: dict[str, str], cwd: Path) -> list[str]:
    """The code files behind a job's changed `code` param: today's code against the code its
    manifest (its last output) recorded. Empty when the param did not change."""
    code_changed = any(
        isinstance(value, str) and value.startswith(CODE_PARAM_PREFIX)
        for reason in job.reasons
        for side in (params_change(reason) or ())
        for value in side
    )
    if not code_changed:
        return []
    manifests = [o for o in job.output if o.endswith("manifest.json")]
    changed = manifest_code_changes(cwd / manifests[-1], pins) if manifests else None
    return changed or ["(its manifest records no code to compare with)"]


def _relative(path: str, run_dir: str) -> str:
    prefix = run_dir.rstrip("/") + "/"
    return path[len(prefix) :] if path.startswith(prefix) else path


def describe_reason(reason: str, job: PlannedJob, run_dir: str) -> str:
    """One reason, short: file lists relative to the run dir, params as the keys that changed."""
    if reason.startswith("Params have changed"):
        keys = [f"{c.key}: {c.before!r} -> {c.now!r}" for c in job.changes]
        if job.code:
            keys.insert(0, f"code: {', '.join(job.code)}")
        return "params changed: " + ("; ".join(keys) if keys else reason)
    head, sep, files = reason.partition(": ")
    if sep and head in REASON_STARTS:
        shown = [_relative(f, run_dir) for f in files.split(", ")]
        more = f" (+{len(shown) - 3} more)" if len(shown) > 3 else ""
        return f"{head}: {', '.join(shown[:3])}{more}"
    return reason


def render_sbatch(plan: Plan) -> str:
    """Each job's sbatch options, one line per job, grouped by rule: what profiles/slurm would
    submit."""
    rows = [(job.rule, _relative(job.target, plan.run_dir), job.sbatch or "") for job in plan.jobs]
    rw = max([len("rule"), *(len(r[0]) for r in rows)])
    tw = max([len("wildcards/output"), *(len(r[1]) for r in rows)])
    lines = [f"sbatch options of each job of {plan.run_dir} (profiles/slurm):", ""]
    lines.append(f"{'rule':<{rw}}  {'wildcards/output':<{tw}}  sbatch")
    lines += [f"{rule:<{rw}}  {target:<{tw}}  {options}" for rule, target, options in rows]
    return "\n".join(lines)


def render_plan(plan: Plan) -> str:
    if not plan.jobs:
        return f"nothing to do: every output of {plan.run_dir} is up to date with this config"
    rows = [
        (job.rule, _relative(job.target, plan.run_dir), describe_reason(r, job, plan.run_dir))
        for job in plan.jobs
        for r in (job.reasons or ["(no reason given)"])
    ]
    rw = max(len("rule"), *(len(r[0]) for r in rows))
    tw = max(len("wildcards/output"), *(len(r[1]) for r in rows))
    lines = [f"jobs that would run for {plan.run_dir}:", ""]
    lines.append(f"{'rule':<{rw}}  {'wildcards/output':<{tw}}  reason")
    last = None
    for rule, target, reason in rows:
        same = (rule, target) == last
        lines.append(f"{'' if same else rule:<{rw}}  {'' if same else target:<{tw}}  {reason}")
        last = (rule, target)
    lines += ["", "jobs per rule:"]
    for rule, n in plan.counts().items():
        lines.append(f"  {rule:<{rw}}  {n:>4}")
    lines.append(f"  {'total':<{rw}}  {len(plan.jobs):>4}")
    touched = plan.rules_by_key()
    if touched:
        lines += ["", "changed config keys -> rules whose params they change (and what follows):"]
        for key, rules in touched.items():
            lines.append(f"  {key}: {', '.join(rules)}")
    code = plan.rules_by_file()
    if code:
        lines += ["", "changed code -> rules that run it (and what follows):"]
        for changed, rules in code.items():
            lines.append(f"  {changed}: {', '.join(rules)}")
    return "\n".join(lines)
