# Shared by every stage: config loading and validation, path helpers, the stage contract.
# Nothing else lives here; a stage's rules live in workflow/rules/<stage>.smk.

import os
import re
import sys
import time
from pathlib import Path

from snakemake.exceptions import WorkflowError

try:
    from apertus.core import ApertusError
    from apertus.core.codedigest import (
        CODE_PARAM_PREFIX,
        PINS_FILE,
        PINS_VARIABLE,
        read_pins,
    )
    from apertus.core.codedigest import step_code as code_of
    from apertus.core.config import load_schema, load_yaml, validate_config
    from apertus.core.files import canonical_json
    from apertus.core.lifetime import LockHeld, hold_lock, mark_workflow_process
    from apertus.core.resources import job_resources
    from apertus.core.resources import stage_resources as core_stage_resources
    from apertus.core.stage import failure_summary
    from apertus.plan_check import check_plan, dry_run_warnings, is_dry_run
except ImportError as e:
    raise WorkflowError(
        f"cannot import the apertus package ({e}); set up the environment with "
        "`bash workflow/quickstart.sh` (see README.md) or `pip install -e .`"
    ) from None


# The default config beside the workflow (the checkout's, or the installed package's copy),
# whatever the working directory.
DEFAULT_CONFIGFILE = os.path.normpath(
    os.path.join(workflow.basedir, "..", "config", "config.yaml")
)


configfile: DEFAULT_CONFIGFILE


envvars:
    "PATH",


def config_sources():
    """Where the config came from, in merge order, for error messages."""
    cli = workflow.config_settings
    files = [DEFAULT_CONFIGFILE, *map(str, cli.configfiles)]
    return files + [f"--config {arg}" for arg in cli.config_args or []]


# Fails before any job runs, naming every bad key; fills the schema's defaults. Then the
# cross-field checks (apertus.plan_check: unique names, references, batch arithmetic, filter
# options), the ones `apertus config check` makes.
# A job on a cluster node parses the workflow again: it only fills the defaults (its config was
# checked by the Snakemake that submitted it).
def repeated_configfile_flag(argv):
    """An error when `--configfile` is given more than once: Snakemake keeps the files of the
    last one only and drops the others without a word (`--configfile A --configfile B` runs
    without A); `apertus` commands take it repeated, so the slip is easy to make."""
    flags = [a for a in argv if a.split("=", 1)[0] in ("--configfile", "--configfiles")]
    if len(flags) > 1:
        return (
            f"--configfile is given {len(flags)} times: Snakemake would use the files of the "
            "last one only; list every file after one flag, e.g. `--configfile "
            "config/presets/apertus-8b.yaml my-8b.yaml`"
        )
    return None


try:
    if workflow.is_main_process:
        repeated = repeated_configfile_flag(sys.argv[1:])
        if repeated:
            raise ApertusError(repeated)
        # Snakemake read the files already; read again, a key given twice in one is refused.
        for path in [DEFAULT_CONFIGFILE, *workflow.config_settings.configfiles]:
            load_yaml(path)
    validate_config(
        config,
        load_schema(workflow.source_path("../schemas/config.schema.yaml")),
        sources=config_sources(),
    )
    if workflow.is_main_process:
        missing = check_plan(
            config, sources=config_sources(), dry_run=is_dry_run(sys.argv[1:])
        )
        for line in dry_run_warnings(missing):
            print(line, file=sys.stderr)
except ApertusError as e:
    raise WorkflowError(str(e)) from None

if config["offline"]:
    # Inherited by every job the workflow starts: nothing may reach the Hugging Face Hub.
    os.environ.update(
        HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", TRANSFORMERS_OFFLINE="1"
    )

RUN_DIR = Path(config["results_dir"]) / config["run"]

# One Snakemake runs jobs in a results folder at a time (two clones sharing a `results_dir` would
# train into the same checkpoints): the process that runs jobs holds this lock until it exits.
# Dry runs, `apertus status` and jobs (started with --no-hooks) do not take it.
RESULTS_LOCK = RUN_DIR / ".snakemake.lock"
_HELD_LOCKS = []


_STARTED = time.time()
if workflow.is_main_process:
    # Its jobs stop when it is gone (a `kill -9` of this process alone): apertus.core.lifetime.
    mark_workflow_process()


onstart:
    try:
        _HELD_LOCKS.append(hold_lock(RESULTS_LOCK, f"the results folder {RUN_DIR}"))
    except LockHeld as e:
        raise WorkflowError(str(e)) from None


# What went wrong, on the terminal: each failed step's error line (its log may be on a full disk).
onerror:
    for line in failure_summary(RUN_DIR, _STARTED):
        print(line, file=sys.stderr)


# Code pinned on purpose (`apertus code pin`): the workflow and its jobs read the same file.
CODE_PINS = RUN_DIR / PINS_FILE
os.environ[PINS_VARIABLE] = os.path.abspath(CODE_PINS)
try:
    _CODE_PINS = read_pins(CODE_PINS)
except ApertusError as e:
    raise WorkflowError(str(e)) from None
_STEP_CODES = {}

# Jobs run `python` from the environment that runs Snakemake (the project's), whatever PATH says.
os.environ["PATH"] = os.pathsep.join(
    [os.path.dirname(sys.executable), os.environ["PATH"]]
)

# Final outputs of each stage; stages append theirs, `rule all` asks for all of them.
TARGETS = []

# A post-training-only run (`posttrain.init_from`: a released checkpoint): the data,
# tokenization and pretraining stages add no target, and post-training starts from the
# checkpoint (workflow/rules/posttrain.smk, `posttrain_start`).
POSTTRAIN_ONLY = config["posttrain"]["init_from"] is not None


def stage_path(stage, *parts):
    """Output path of a stage: <results_dir>/<run>/<stage>/<parts...>."""
    return str(RUN_DIR.joinpath(stage, *parts))


def log_path(stage, step):
    """Log of one step: <results_dir>/<run>/logs/<stage>/<step>.log (may contain wildcards)."""
    return str(RUN_DIR / "logs" / stage / f"{step}.log")


def benchmark_path(stage, step):
    """Snakemake benchmark of one step: <results_dir>/<run>/benchmarks/<stage>/<step>.tsv."""
    return str(RUN_DIR / "benchmarks" / stage / f"{step}.tsv")


def report_file(path, caption, category, **labels):
    """An output shown by `snakemake --report` under `category`, captioned by
    workflow/report/<caption>.rst, with `labels` (the same keys across a category)."""
    return report(
        path, caption=f"../report/{caption}.rst", category=category, labels=labels
    )


def config_text(stage, *keys):
    """Exactly the config subtree a step depends on, as canonical JSON (`stage_config`)."""
    section = config[stage]
    return canonical_json({k: section[k] for k in keys} if keys else section)


def stage_config(stage, *keys):
    """A rule's `params`: exactly the config subtree its step depends on, as canonical JSON.

    `stage_config("data")` is the whole `data` section; `stage_config("data", "dedup")` only
    `{"dedup": ...}`, for a step that reads nothing else. Snakemake re-runs a job when its params
    change, so changing this subtree, and only this subtree, re-runs the step and everything
    downstream. The step receives the same text with `--config {params.config:q}` and records
    it, with its hash, in its manifest. Given as a function, so Snakemake never reads a `{3}`
    in a value (a regular expression, a template) as a wildcard.
    """
    text = config_text(stage, *keys)
    return lambda wildcards: text


def evaluate_run_dir(stage):
    """The training stage's output (run.json) a checkpoint is exported from: a pretraining
    stage's, or post-training's (`sft`, `qrpo`; POSTTRAIN_STAGES of posttrain.smk)."""
    return stage_path("posttrain" if stage in POSTTRAIN_STAGES else "pretrain", stage)


def stage_subconfig(stage, key):
    """A rule's `params` for a step that reads one subtree of its stage's section: that subtree
    itself (not wrapped in its key), as canonical JSON; same re-run rule as `stage_config`.
    """
    text = canonical_json(config[stage][key])
    return lambda wildcards: text


def stage_resources(stage):
    """Resources of one job of `stage` (apertus.core.resources.stage_resources)."""
    return core_stage_resources(config["resources"], stage)


def stage_threads(stage):
    return stage_resources(stage)["threads"]


def step_code(module):
    """A rule's `params: code=`: the digest of the code its step runs, the entry module
    `module` and every apertus module it uses, by their syntax trees, with the versions of the
    key packages they import (apertus.core.codedigest). Snakemake re-runs a job when it changes,
    like a config change; comments, docstrings and formatting do not change it."""
    if module not in _STEP_CODES:
        try:
            _STEP_CODES[module] = (
                CODE_PARAM_PREFIX + code_of(module, _CODE_PINS)["digest"]
            )
        except ApertusError as e:
            raise WorkflowError(str(e)) from None
    return _STEP_CODES[module]


def stage_job_resources(stage, nodes=1):
    """Scheduler resources (everything but threads) for a rule's `resources:`, on `nodes`
    nodes: memory, time, GPUs per node as GRES, SLURM partition/account/... (apertus.core.resources).
    """
    return job_resources(stage_resources(stage), nodes=nodes)


def check_stage_contract():
    """Refuse a workflow whose job rules lack the contract's log, benchmark, config params or
    code params (a rule running `python -m apertus.X` has `code=step_code("apertus.X")`).

    Called by the Snakefile once every stage is included, so a new rule that forgets one of
    them fails at parse time with its name, not silently in production.
    """
    problems = []
    for declared in workflow.rules:
        if declared.norun:  # target rules such as `all` run no job
            continue
        entry = re.search(r"python -m (apertus[\w.]*)", declared.shellcmd or "")
        entry = entry and entry.group(1)
        missing = [
            directive
            for directive, present in (
                ("log:", bool(declared.log)),
                ("benchmark:", declared.benchmark is not None),
                (
                    'params: config=stage_config("<stage>")',
                    "config" in declared.params.keys(),
                ),
                (
                    f'params: code=step_code("{entry}")',
                    entry is None
                    or "code" in declared.params.keys()
                    and declared.params.code == step_code(entry),
                ),
            )
            if not present
        ]
        if missing:
            problems.append(f"rule {declared.name} lacks {', '.join(missing)}")
    if problems:
        raise WorkflowError(
            "the stage contract (README.md) is broken:\n  " + "\n  ".join(problems)
        )


# The pretraining stage's helpers (workflow/rules/pretrain.smk defines PRETRAIN_PLAN & co.).


def pretrain_config(stage):
    """The `pretrain:` keys a stage's job depends on (its params)."""
    kind = PRETRAIN_PLAN[stage].kind
    if kind == "phase":
        return config_text("pretrain", *PRETRAIN_PHASE_KEYS)
    if kind == "control":
        return config_text("pretrain", *PRETRAIN_PHASE_KEYS, "goldfish_control")
    return config_text("pretrain")


def pretrain_threads(wildcards):
    """A stage's threads; a phase and its Goldfish control train side by side, each on half."""
    paired = (
        wildcards.stage in PRETRAIN_CONTROLS
        or wildcards.stage in PRETRAIN_CONTROLS.values()
    )
    threads = stage_threads("pretrain")
    return max(1, threads // 2) if paired else threads


def pretrain_seen(stage):
    """The pretraining stages whose data a checkpoint has trained on, in order: the line up to
    it (for the control: up to the stage before its phase, then itself); every one for a
    post-trained checkpoint."""
    if stage not in PRETRAIN_PLAN:
        return PRETRAIN_STAGES
    previous = PRETRAIN_PLAN[stage].previous
    if PRETRAIN_PLAN[stage].kind == "control":
        return PRETRAIN_STAGES[
            : PRETRAIN_STAGES.index(previous) + 1 if previous else 0
        ] + [stage]
    return PRETRAIN_STAGES[: PRETRAIN_STAGES.index(stage) + 1]
