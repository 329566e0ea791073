"""The `apertus` command: configuration checks and the project's own facts.

    apertus config check [--configfile FILE ...] [KEY=VALUE ...]   validate a run's configuration
    apertus config show  [--configfile FILE ...] [KEY=VALUE ...]   print it, every default filled
    apertus config docs  [--write | --check]     print (write, check) the config reference
    apertus run [--configfile FILE ...] [KEY=VALUE ...] [-- SNAKEMAKE ARGS]
                                                 snakemake on these config sources, checked first
    apertus plan [--configfile FILE ...] [KEY=VALUE ...] [--json]
                                 every GPU job sized: layout, memory per GPU by part, FLOPs,
                                 throughput, wall-clock, GPU-hours, checkpoints
    apertus version                                             code and package versions
    apertus audit PATH [--json]                  re-hash a release folder or a run directory
    apertus audit RUN_DIR --rerun STEP [--scratch DIR]   re-run one step, compare its outputs
    apertus explain [--configfile FILE ...] [KEY=VALUE ...] [--results-dir DIR --run NAME]
                    [-- ARGS]                    which jobs a change re-runs, and why
    apertus status [--configfile FILE ...] [KEY=VALUE ...] [--results-dir DIR --run NAME]
                   [--json]                      each stage of a run: done, running, stale...
    apertus export RUN_DIR STAGE --output DIR [--step N] [--configfile FILE ...] [KEY=VALUE ...]
                                 a training stage's checkpoint (any kept step) as a verified
                                 Hugging Face folder
    apertus code show MODULE      the files and package versions a step's code digest covers
    apertus code pin|unpin RUN_DIR FILE ...   count FILE as the run last ran it (no re-run)
    apertus rulegraph [--check]   regenerate the DAG diagram in README.md

`run`, `explain` and `status` run Snakemake in the current directory (its .snakemake/ and
results/), or in `--directory DIR`: the workflow of the checkout there (workflow/Snakefile), as
`snakemake` does, else the workflow installed with this package, from any directory.
`--configfile` has no short form: `-c` is Snakemake's number of cores.
Stages are run by Snakemake (`snakemake`, see README.md), not by this command.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import yaml

from apertus.audit.checksums import audit_path, render_report
from apertus.audit.explain import (
    explain_changes,
    render_plan,
    render_sbatch,
    workflow_arguments,
    workflow_directory,
)
from apertus.audit.pins import set_pins
from apertus.audit.rerun import render_rerun, rerun_step
from apertus.audit.status import render_status, run_status
from apertus.core import REPO_ROOT, ApertusError
from apertus.core.codedigest import step_code
from apertus.core.config import (
    config_sources,
    dotted_config_args,
    load_config,
    merge_overrides,
    render_reference,
)
from apertus.core.files import atomic_write_text
from apertus.core.lifetime import child_dies_with_us, group_members
from apertus.core.manifest import code_version, package_versions
from apertus.plan_check import check_plan, is_dry_run
from apertus.report.rulegraph import update_readme

CONFIG_REFERENCE = REPO_ROOT / "config" / "README.md"


def _add_config_sources(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--configfile",
        action="append",
        default=[],
        metavar="FILE",
        help="config file merged over config/config.yaml, like snakemake --configfile (repeatable)",
    )
    parser.add_argument(
        "overrides", nargs="*", metavar="KEY=VALUE", help="single keys, dotted for nesting"
    )


def _add_directory(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--directory",
        type=Path,
        metavar="DIR",
        help="where Snakemake runs (its .snakemake/, relative results_dir): a checkout runs "
        "its own workflow, any other directory the installed one (default: the current "
        "directory, as for snakemake)",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="apertus", description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)

    config = commands.add_parser("config", help="check, show or document the run configuration")
    config_commands = config.add_subparsers(dest="action", required=True)
    check = config_commands.add_parser("check", help="validate config/config.yaml plus overrides")
    _add_config_sources(check)
    show = config_commands.add_parser("show", help="print the resolved config with defaults")
    _add_config_sources(show)
    docs = config_commands.add_parser(
        "docs", help="print the config reference from the schema (config/README.md's text)"
    )
    how = docs.add_mutually_exclusive_group()
    how.add_argument("--write", action="store_true", help="write it to config/README.md")
    how.add_argument(
        "--check", action="store_true", help="only report whether config/README.md is current"
    )

    run = commands.add_parser(
        "run",
        help="run the pipeline with Snakemake on these config sources, overrides checked first",
        description="Validates the config files and dotted KEY=VALUE overrides as `apertus "
        "config check` does (a bad key is named before anything runs), then runs `snakemake` "
        "with them; arguments after `--` go to snakemake (targets, --cores, --profile, -n...). "
        "Snakemake's own --config takes no dotted keys; this does.",
    )
    _add_config_sources(run)
    _add_directory(run)

    plan = commands.add_parser(
        "plan",
        help="size every GPU job of the run: ranks and layout, peak memory per GPU by part, "
        "FLOPs per token, throughput, wall-clock, GPU-hours, checkpoints (nothing runs)",
        description="Computed from the config alone (apertus.sizing); the MFU, GPU peak and "
        "GPU memory come from each stage's `resources` entry. Exit 1 when a job does not fit.",
    )
    _add_config_sources(plan)
    plan.add_argument("--json", action="store_true", help="print the plan as JSON")

    commands.add_parser("version", help="print the code version and key package versions")

    audit = commands.add_parser(
        "audit",
        help="verify every checksum of a release folder or run directory, or re-run one step",
        description="Exit 0: everything matches; 1: a mismatch; 2: unusable input.",
    )
    audit.add_argument("path", type=Path, help="a release folder or a run dir (results/<run>)")
    audit.add_argument("--json", action="store_true", help="print the report as JSON")
    audit.add_argument(
        "--rerun",
        metavar="STEP",
        help="re-execute one recorded step (its manifest path in the run dir, e.g. "
        "evaluate/lm_eval/phase1, or STAGE/STEP when unique) and compare its outputs",
    )
    audit.add_argument(
        "--scratch",
        type=Path,
        help="empty directory for the re-run's outputs (default: a new temporary directory)",
    )

    explain = commands.add_parser(
        "explain",
        help="which jobs `snakemake` would re-run with this config, and why (a dry run)",
        description="Arguments after `--` go to snakemake.",
    )
    _add_config_sources(explain)
    _add_directory(explain)
    explain.add_argument("--results-dir", help="results_dir of the run to compare with")
    explain.add_argument("--run", help="name of the run to compare with")
    explain.add_argument("--json", action="store_true", help="print the plan as JSON")
    explain.add_argument(
        "--sbatch",
        action="store_true",
        help="dry-run under profiles/slurm and print the sbatch options of every job",
    )

    status = commands.add_parser(
        "status",
        help="where a run stands: each stage done, running, interrupted, stale or missing, "
        "running steps' progress, training's last step, loss and ETA",
        description="The run is the one `snakemake` would make with the same config sources.",
    )
    _add_config_sources(status)
    _add_directory(status)
    status.add_argument("--results-dir", help="results_dir of the run")
    status.add_argument("--run", help="name of the run")
    status.add_argument("--json", action="store_true", help="print the status as JSON")

    export = commands.add_parser(
        "export",
        help="export a training stage's final or intermediate checkpoint as a verified Hugging "
        "Face folder (what the pipeline's export step does, for any step the run kept)",
        description="Reads RUN_DIR/{pretrain,posttrain}/STAGE/run.json, the run's tokenizer "
        "(RUN_DIR/tokenize/tokenizer) and held-out documents (RUN_DIR/tokenize/heldout); the "
        "`export:` section comes from the config sources. Writes DIR and DIR.manifest.json.",
    )
    export.add_argument("run_dir", type=Path, metavar="RUN_DIR", help="results/<run>")
    export.add_argument("stage", metavar="STAGE", help="a training stage: phase1, sft, qrpo...")
    export.add_argument("--output", type=Path, required=True, metavar="DIR", help="a new folder")
    export.add_argument("--step", type=int, help="the step-N checkpoint (default: the final one)")
    _add_config_sources(export)

    code = commands.add_parser(
        "code",
        help="the code a step runs (its digest and files), and pinning code on purpose",
        description="A step re-runs when the code it runs changes (README: what counts as a "
        "change). `pin` keeps a run's steps from re-running for an edit to FILE (e.g. a typo "
        "in a log message): FILE counts with the digest the run's manifests recorded.",
    )
    code_commands = code.add_subparsers(dest="action", required=True)
    show_code = code_commands.add_parser("show", help="the files and packages a step's code is")
    show_code.add_argument("module", help="the step's entry module, e.g. apertus.data.select")
    for action, text in (("pin", "pin FILE in RUN_DIR"), ("unpin", "end the pin of FILE")):
        pin = code_commands.add_parser(action, help=text)
        pin.add_argument("run_dir", type=Path, metavar="RUN_DIR", help="results/<run>")
        pin.add_argument("files", nargs="+", metavar="FILE", help="repository-relative path")

    rulegraph = commands.add_parser(
        "rulegraph", help="write the DAG of rules as a Mermaid diagram into README.md"
    )
    rulegraph.add_argument(
        "--check", action="store_true", help="only report whether README.md's diagram is current"
    )
    return parser


def _audit(args: argparse.Namespace) -> int:
    if args.rerun:
        report = rerun_step(args.path, args.rerun, args.scratch)
        print(json.dumps(report.to_json(), indent=2) if args.json else render_rerun(report))
    else:
        if args.scratch:
            raise ApertusError("--scratch goes with --rerun")
        report = audit_path(args.path)
        print(json.dumps(report.to_json(), indent=2) if args.json else render_report(report))
    return 0 if report.ok else 1


def _explain(args: argparse.Namespace, snakemake_args: list[str]) -> int:
    plan = explain_changes(
        args.configfile,
        args.overrides,
        args.results_dir,
        args.run,
        snakemake_args,
        args.directory,
        sbatch=args.sbatch,
    )
    text = render_sbatch(plan) if args.sbatch else render_plan(plan)
    print(json.dumps(plan.to_json(), indent=2) if args.json else text)
    return 0


def _code(args: argparse.Namespace) -> int:
    if args.action == "show":
        print(json.dumps(step_code(args.module), indent=2))
        return 0
    pins = set_pins(args.run_dir, args.files, pin=args.action == "pin")
    print(json.dumps({"pins": pins}, indent=2))
    return 0


def _export(args: argparse.Namespace) -> int:
    """`python -m apertus.export.stage` on a finished run's files, as the export rule calls it
    (chat end tokens for post-training stages)."""
    kinds = [
        kind for kind in ("pretrain", "posttrain") if (args.run_dir / kind / args.stage).is_dir()
    ]
    if not kinds:
        raise ApertusError(
            f"{args.run_dir} has no training stage {args.stage!r} (neither pretrain/{args.stage} "
            f"nor posttrain/{args.stage})"
        )
    if args.output.exists():
        raise ApertusError(f"{args.output} exists: name a new folder for the export")
    training = args.run_dir / kinds[0] / args.stage
    config = load_config(args.configfile, args.overrides)["export"]
    command = [
        sys.executable, "-m", "apertus.export.stage",
        "--config", json.dumps(config, sort_keys=True),
        "--manifest", f"{args.output}.manifest.json",
        "--run", str(training),
        "--tokenizer", str(args.run_dir / "tokenize" / "tokenizer"),
        "--heldout", str(args.run_dir / "tokenize" / "heldout"),
        "--output", str(args.output),
    ]  # fmt: skip
    if args.step is not None:
        command += ["--step", str(args.step)]
    if kinds[0] == "posttrain":
        command.append("--chat")
    preexec = child_dies_with_us(signal.SIGTERM)
    return subprocess.run(command, check=False, preexec_fn=preexec).returncode


def _plan(args: argparse.Namespace) -> int:
    from apertus.sizing.jobs import run_plan
    from apertus.sizing.render import render_plan

    config = load_config(args.configfile, args.overrides)
    plan = run_plan(config)
    print(json.dumps(plan.as_dict(), indent=2) if args.json else render_plan(plan), end="")
    if args.json:
        print()
    return 1 if any(job.fits is False for job in plan.jobs) else 0


def _config_docs(check: bool, write: bool) -> int:
    text = render_reference()
    current = CONFIG_REFERENCE.read_text(encoding="utf-8") if CONFIG_REFERENCE.exists() else ""
    if check:
        if current != text:
            print(
                f"{CONFIG_REFERENCE} is out of date: run `apertus config docs --write`",
                file=sys.stderr,
            )
            return 1
        print(f"{CONFIG_REFERENCE} is current")
        return 0
    if not write:
        print(text, end="")
        return 0
    atomic_write_text(CONFIG_REFERENCE, text)
    print(f"wrote {CONFIG_REFERENCE}")
    return 0


def _run(args: argparse.Namespace, snakemake_args: list[str]) -> int:
    """Snakemake on the config files and overrides, checked first. The overrides go in as one
    more config file (content-addressed under .snakemake/, kept: jobs Snakemake submits to a
    cluster read the same files)."""
    dotted_config_args(snakemake_args)
    directory = workflow_directory(args.directory)
    # Names a bad key before anything runs.
    config = load_config(args.configfile, args.overrides, directory=directory)
    check_plan(
        config,
        sources=config_sources(args.configfile, args.overrides, directory),
        directory=directory,
        dry_run=is_dry_run(snakemake_args),  # Snakemake prints what a run would be refused for
    )
    arguments = workflow_arguments(directory, snakemake_args)
    files = [str(Path(f).resolve()) for f in args.configfile]
    if args.overrides:
        text = yaml.safe_dump(merge_overrides(args.overrides), sort_keys=True)
        digest = hashlib.sha256(text.encode()).hexdigest()[:16]
        path = directory / ".snakemake" / "apertus-run" / f"overrides-{digest}.yaml"
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(path, text)
        files.append(str(path))
    if files:
        # `--configfile` takes every word up to the next option: after the user's arguments,
        # or before their own `--`, after which every word is a target.
        at = arguments.index("--") if "--" in arguments else len(arguments)
        arguments[at:at] = ["--configfile", *files]
    command = [sys.executable, "-m", "snakemake", *arguments]
    print("apertus run: " + " ".join(command[2:]), file=sys.stderr, flush=True)
    return run_until_stopped(command, directory)


def run_until_stopped(command: list[str], cwd: Path) -> int:
    """Run Snakemake `command` in a session of its own; a SIGTERM, SIGHUP or Ctrl-C of this
    command stops it once: its local jobs get SIGTERM, as SLURM signals a preempted job (a
    training run saves a checkpoint and stops, `apertus.train.launch`; others end at once),
    Snakemake gets SIGINT (it cancels its SLURM jobs, waits for the local ones, releases the
    results folder's lock and exits; a SIGTERM would let its jobs run on). Returns once every
    process of the group has ended. Snakemake gets SIGTERM if this process is killed
    outright."""
    proc = subprocess.Popen(
        command, cwd=cwd, preexec_fn=child_dies_with_us(signal.SIGTERM), start_new_session=True
    )
    sent = []

    def forward(signum, frame) -> None:
        del frame
        if sent:
            return
        sent.append(signum)
        print(f"apertus run: {signal.Signals(signum).name}: stopping Snakemake and its jobs "
              "(training saves a checkpoint first)", file=sys.stderr, flush=True)  # fmt: skip
        # Snakemake gets SIGINT (a SIGTERM would make it wait for its jobs; SIGINT cancels
        # SLURM jobs, which SLURM then signals as on a preemption), its local jobs SIGTERM.
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signal.SIGINT)
        for pid in group_members(proc.pid):
            if pid != proc.pid:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGTERM)

    stops = (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)
    previous = {sig: signal.signal(sig, forward) for sig in stops}
    try:
        code = proc.wait()
        # A job's step may outlive its shell by a checkpoint's write.
        deadline = time.monotonic() + 600
        while sent and time.monotonic() < deadline:
            try:
                os.killpg(proc.pid, 0)
            except ProcessLookupError:
                break
            time.sleep(0.2)
        return code
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def run(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    extra: list[str] = []
    if "--" in argv:  # `apertus explain ... -- --forcerun rule`: the rest goes to snakemake
        at = argv.index("--")
        argv, extra = argv[:at], argv[at + 1 :]
    args = build_parser().parse_args(argv)
    if extra and args.command not in ("explain", "run"):
        raise ApertusError("arguments after `--` are for `apertus explain` and `apertus run`")
    if args.command == "run":
        return _run(args, extra)
    if args.command == "audit":
        return _audit(args)
    if args.command == "explain":
        return _explain(args, extra)
    if args.command == "status":
        status = run_status(
            args.configfile, args.overrides, args.results_dir, args.run, args.directory
        )
        print(json.dumps(status.to_json(), indent=2) if args.json else render_status(status))
        return 0
    if args.command == "code":
        return _code(args)
    if args.command == "export":
        return _export(args)
    if args.command == "plan":
        return _plan(args)
    if args.command == "rulegraph":
        return update_readme(check=args.check)
    if args.command == "version":
        print(json.dumps({"code": code_version(), "packages": package_versions()}, indent=2))
        return 0
    if args.action == "docs":
        return _config_docs(args.check, args.write)
    config = load_config(args.configfile, args.overrides)
    if args.action == "check":
        check_plan(config, sources=config_sources(args.configfile, args.overrides))
    if args.action == "show":
        print(yaml.safe_dump(config, sort_keys=False), end="")
    else:
        print("configuration is valid")
    return 0


def main(argv: list[str] | None = None) -> None:
    try:
        sys.exit(run(argv))
    except ApertusError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
