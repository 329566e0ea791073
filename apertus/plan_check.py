"""Cross-field checks of a run configuration: what the schema cannot say, refused before any job.

The schema (`apertus.core.config.validate_config`) checks each key alone: its type, range and
allowed values. :func:`check_plan` checks how keys fit together, on a validated config (its
defaults filled), without data and without torch, and names every problem by key path:

- names that must be unique are (data sources, tokenization phases, pretraining stages,
  suite tasks, heuristic families): a repeated name would merge two entries, and one would
  silently disappear;
- names that refer to another entry find it (a phase's weights name sources, pretraining and
  the long-context stages name tokenization phases, the Goldfish control a pretraining phase,
  the SFT replay a tokenization phase);
- each stage's typed section builds (`Config.from_dict` and the classes' own invariants, the
  checks a job would otherwise make first), and each heuristic filter's options are options of
  its datatrove class (the constructor signature, `apertus.data.quality`);
- the training arithmetic that needs no data: each pretraining stage's run spec builds
  (`apertus.train.run_spec.RunSpec`), its global batch splits over micro_batch x the
  data-parallel ranks, tensor_parallel divides the ranks and the model's shape, and a phase's
  token budget holds the windows the stages trained on it need;
- every GPU job fits its memory (`apertus.sizing.jobs.fit_problems`, where the stage's
  `resources` entry sets `gpu_memory_gb`): the planned peak per GPU of each training, sampling,
  scoring and evaluation job, and an export's host memory against `mem_mb`.
- every input the config names is there, as its job resolves it (`apertus.plan_inputs`):
  files and folders, models and tokenizers (offline, Hub ids in the local cache), the reward
  model a reward's kind needs, lm-eval task names in lm-eval's own index, the restart
  checkpoint.

`workflow/rules/common.smk` calls it right after the schema's validation (a mistake is a
WorkflowError before the first job), and `apertus config check` / `apertus run` call it after
`load_config`. It lives above the stages' packages (it reads their config classes), as
`apertus.cli` does; nothing below imports it.
"""

from __future__ import annotations

import difflib
import math
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from apertus.core.config import ConfigError, key_path, problems_message
from apertus.plan_inputs import attempt as _attempt
from apertus.plan_inputs import input_problems

__all__ = ["check_plan", "dry_run_warnings", "is_dry_run", "plan_problems"]

# The stage names post-training adds to the evaluated checkpoints (workflow/rules/posttrain.smk).
POSTTRAIN_STAGE_NAMES = ("sft", "qrpo")
# The shard set the memorization probes get when data.probes.enabled (workflow/rules/tokenize.smk).
PROBES_SOURCE = "probes"


def check_plan(
    config: Mapping[str, Any],
    sources: Sequence[str] = (),
    directory: str | os.PathLike[str] | None = None,
    *,
    dry_run: bool = False,
) -> list[str]:
    """Raise a ConfigError listing every cross-field problem of the validated `config`; its
    relative paths from `directory` (default: the working directory), where the jobs run.

    For a dry run (`dry_run`: it shows a plan, nothing reads the inputs) a missing input is not
    an error: the problems are returned, for the caller to print as warnings (a preset's plan
    can be looked at before its model files are in place)."""
    problems = plan_problems(config, inputs=not dry_run, directory=directory)
    if problems:
        raise ConfigError(problems_message(problems, sources))
    return input_problems(config, directory) if dry_run else []


def is_dry_run(argv: Sequence[str]) -> bool:
    """Whether Snakemake's arguments ask for a dry run (``-n``, ``--dry-run``, ``--dryrun``, or
    ``n`` among combined short flags such as ``-np``)."""
    return any(
        arg in ("--dry-run", "--dryrun") or re.fullmatch(r"-[A-Za-z]*n[A-Za-z]*", arg)
        for arg in argv
    )


def dry_run_warnings(problems: Sequence[str]) -> list[str]:
    """The lines a dry run prints for the inputs a real run would be refused for."""
    return [f"warning: a run (not this dry run) would be refused: {p}" for p in problems]


def plan_problems(
    config: Mapping[str, Any],
    *,
    inputs: bool = True,
    directory: str | os.PathLike[str] | None = None,
) -> list[str]:
    """Every cross-field problem of the validated `config` (defaults filled), one message each;
    with `inputs`, also every input it names that is not there (`apertus.plan_inputs`, relative
    paths from `directory`)."""
    problems = [
        *_duplicate_names(config),
        *_references(config),
        *_typed_sections(config),
        *_heuristic_options(config["data"]["heuristics"]),
        *_export_problems(config),
    ]
    if not problems:  # the arithmetic assumes the names and sections are right
        problems += _pretrain_arithmetic(config)
        problems += _sft_arithmetic(config)
    if not problems:  # sizing assumes the layouts divide
        from apertus.sizing.jobs import fit_problems

        problems += fit_problems(config)
    if inputs:  # independent of the others: a missing file hides no arithmetic
        problems += input_problems(config, directory)
    return list(dict.fromkeys(problems))  # a problem several stages share, once


def _repeats(items: Iterable[tuple[list[Any], Any]]) -> list[str]:
    """`(key path, name)` pairs: a message for each name already seen, naming both places."""
    first: dict[Any, list[Any]] = {}
    problems = []
    for path, name in items:
        if name in first:
            problems.append(
                f"key '{key_path(path)}' is {name!r}, already at '{key_path(first[name])}': "
                "names must be unique (a repeated one is merged and an entry disappears)"
            )
        else:
            first[name] = path
    return problems


def _named(entries: Sequence[Mapping[str, Any]], section: list[Any], key: str = "name"):
    return [([*section, i, key], entry[key]) for i, entry in enumerate(entries)]


def _duplicate_names(config: Mapping[str, Any]) -> list[str]:
    data, pretrain = config["data"], config["pretrain"]
    sources = _named(data["sources"], ["data", "sources"])
    if data["probes"]["enabled"]:
        # The probes are tokenized as one more source, named `probes`.
        sources.insert(0, (["data", "probes", "enabled"], PROBES_SOURCE))
    stages = [(["pretrain", "phases", i], name) for i, name in enumerate(pretrain["phases"])]
    stages += _named(pretrain["long_context"], ["pretrain", "long_context"])
    if pretrain["goldfish_control"] is not None:
        from apertus.train.plan import CONTROL_SUFFIX

        control = pretrain["goldfish_control"] + CONTROL_SUFFIX
        stages.append((["pretrain", "goldfish_control"], control))
    if config["posttrain"]["enabled"]:
        # Exported and evaluated beside the pretraining stages, under the same names.
        stages = [(["posttrain", "enabled"], name) for name in POSTTRAIN_STAGE_NAMES] + stages
    families = data["heuristics"]["families"]
    return [
        *_repeats(sources),
        *_repeats(_named(config["tokenize"]["phases"], ["tokenize", "phases"])),
        *_repeats(stages),
        *(
            problem
            for suite in ("suite", "instruct")
            for problem in _repeats(
                _named(config["evaluate"][suite]["tasks"], ["evaluate", suite, "tasks"], "task")
            )
        ),
        *_repeats((["data", "heuristics", "families", i], f) for i, f in enumerate(families)),
    ]


def _unknown(path: list[Any], name: str, known: Sequence[str], what: str, note: str = "") -> str:
    hint = difflib.get_close_matches(name, known, n=1)
    suggestion = f" (did you mean {hint[0]!r}?)" if hint else ""
    listed = ", ".join(dict.fromkeys(known)) or "none"
    return f"key '{key_path(path)}' is {name!r}, not one of {what}{suggestion}: {listed}{note}"


def _references(config: Mapping[str, Any]) -> list[str]:
    data, pretrain = config["data"], config["pretrain"]
    sources = [source["name"] for source in data["sources"]]
    if data["probes"]["enabled"]:
        sources.append(PROBES_SOURCE)
    probes_note = (
        "" if data["probes"]["enabled"] else f" ({PROBES_SOURCE!r} needs data.probes.enabled)"
    )
    phases = [phase["name"] for phase in config["tokenize"]["phases"]]
    what_phases = "the tokenize.phases names"
    problems = []
    for i, phase in enumerate(config["tokenize"]["phases"]):
        for alias, selection in (phase.get("select") or {}).items():
            if alias in sources:
                problems.append(
                    f"key {key_path(['tokenize', 'phases', i, 'select', alias])!r}: {alias!r} is "
                    "a data source's name; give the selection a name of its own"
                )
            if selection["source"] not in sources:
                path = ["tokenize", "phases", i, "select", alias, "source"]
                what = "the tokenized sources (data.sources names)"
                problems.append(_unknown(path, selection["source"], sources, what, probes_note))
        for source in phase["weights"]:
            if source not in sources and source not in (phase.get("select") or {}):
                path = ["tokenize", "phases", i, "weights", source]
                what = "the tokenized sources (data.sources names)"
                problems.append(_unknown(path, source, sources, what, probes_note))
    for i, name in enumerate(pretrain["phases"]):
        if name not in phases:
            problems.append(_unknown(["pretrain", "phases", i], name, phases, what_phases))
    for i, stage in enumerate(pretrain["long_context"]):
        if stage["phase"] not in phases:
            path = ["pretrain", "long_context", i, "phase"]
            problems.append(_unknown(path, stage["phase"], phases, what_phases))
    control = pretrain["goldfish_control"]
    if control is not None:
        if control not in pretrain["phases"]:
            problems.append(
                _unknown(
                    ["pretrain", "goldfish_control"], control, pretrain["phases"], "pretrain.phases"
                )
            )
        elif not pretrain["goldfish"]["enabled"]:
            problems.append(
                f"key 'pretrain.goldfish_control' is {control!r}, but Goldfish is off "
                "(pretrain.goldfish.enabled), so a run without it controls nothing; set it to null"
            )
    replay = config["posttrain"]["sft_data"]["replay"]
    if replay["documents"] and replay["phase"] not in phases:
        path = ["posttrain", "sft_data", "replay", "phase"]
        problems.append(_unknown(path, replay["phase"], phases, what_phases))
    return problems


def _typed_sections(config: Mapping[str, Any]) -> list[str]:
    """Each section as its stage's typed config (the checks the stage's job would make first).
    The classes whose modules import torch (export, QRPO sampling and training) are left to
    their jobs: importing torch would add seconds to every parse."""
    from apertus.data.config import DataConfig
    from apertus.evaluate.stage import EvaluateConfig
    from apertus.posttrain.instructions import InstructionConfig
    from apertus.posttrain.sft import SFTTrainingConfig
    from apertus.posttrain.sft_data import SFTConfig
    from apertus.release.config import ReleaseConfig
    from apertus.tokenize.phases import PhaseSpec
    from apertus.train.config import PretrainConfig

    posttrain = config["posttrain"]
    problems = []
    for cls, section, where in (
        (DataConfig, config["data"], "data"),
        (PretrainConfig, config["pretrain"], "pretrain"),
        (EvaluateConfig, config["evaluate"], "evaluate"),
        (ReleaseConfig, config["release"], "release"),
        (InstructionConfig, posttrain["instructions"], "posttrain.instructions"),
        (SFTConfig, posttrain["sft_data"], "posttrain.sft_data"),
        (SFTTrainingConfig, posttrain["sft"], "posttrain.sft"),
    ):
        problems += _attempt(where, cls.from_dict, section)[1]
    heldout = config["tokenize"]["heldout"]
    if heldout["min_documents"] > heldout["max_documents"]:
        problems.append(
            f"key 'tokenize.heldout.min_documents' is {heldout['min_documents']}: more than "
            f"tokenize.heldout.max_documents {heldout['max_documents']}"
        )
    for i, phase in enumerate(config["tokenize"]["phases"]):
        where = key_path(["tokenize", "phases", i])
        problems += _attempt(
            where,
            PhaseSpec,
            phase["name"],
            phase["tokens"],
            phase["seed"],
            phase["weights"],
            phase.get("select") or {},
        )[1]
    return problems


def _heuristic_options(heuristics: Mapping[str, Any]) -> list[str]:
    """Each heuristic family's options against its datatrove filter's constructor, by building
    the block the data job builds (`HeuristicQualityFilter`: option names from the signature,
    stop words), and the language labels against datatrove's tokenizer table, once. With no
    option and no language list set there is nothing to check (the families are the schema's
    enum): datatrove is not imported, which every dry run would pay (~0.3 s)."""
    options = heuristics["options"]
    if not any(options.values()) and heuristics["languages"] is None:
        return []
    from apertus.data.quality import HeuristicQualityFilter

    problems = []
    for family in dict.fromkeys([*heuristics["families"], *options]):
        where = key_path(["data", "heuristics", "options", family])
        problems += _attempt(where, HeuristicQualityFilter, family, options=options.get(family))[1]
    if heuristics["languages"] is not None and heuristics["families"]:
        where = "data.heuristics.languages"
        family = heuristics["families"][0]
        problems += _attempt(
            where, HeuristicQualityFilter, family, languages=heuristics["languages"]
        )[1]
    return problems


def _export_problems(config: Mapping[str, Any]) -> list[str]:
    verify = config["export"]["verify"]["seq_len"]
    pretrain = config["pretrain"]
    if verify is None:
        return []
    # Every checkpoint's model holds its stage's seq_len positions (the phases', then each
    # long-context stage's; post-training keeps the longest), and the export verifies each.
    lengths = [(["pretrain", "seq_len"], pretrain["seq_len"])]
    lengths += [
        (["pretrain", "long_context", i, "seq_len"], stage["seq_len"])
        for i, stage in enumerate(pretrain["long_context"])
    ]
    path, shortest = min(lengths, key=lambda item: item[1])
    if verify > shortest:
        return [
            f"key 'export.verify.seq_len' is {verify}, longer than the {shortest} positions of "
            f"the model trained with '{key_path(path)}'; lower it or set it to null (each "
            "stage's own seq_len)"
        ]
    return []


def _batch_split(
    where: str,
    batches: Mapping[str, int],
    *,
    micro_batch: int,
    nproc: tuple[str, int],
    nnodes: tuple[str, int] | None,
    tensor_parallel: int,
    context_parallel: tuple[str, int] | None = None,
) -> list[str]:
    """The split of apertus.train.run_spec.preflight, made before any job: tensor_parallel
    (x context_parallel) divides the ranks, and each global batch the run trains with divides
    by micro_batch x the data-parallel ranks (world size / (tensor_parallel x
    context_parallel))."""
    world = nproc[1] * (nnodes[1] if nnodes else 1)
    ranks = f"{nproc[0]} {nproc[1]}" + (f" x {nnodes[0]} {nnodes[1]}" if nnodes else "")
    cp_key, cp = context_parallel or ("", 1)
    if world % (tensor_parallel * cp):
        if cp == 1:
            return [
                f"key 'pretrain.tensor_parallel' is {tensor_parallel}: it does not divide the "
                f"{world} rank(s) of the run ({ranks})"
            ]
        return [
            f"key '{cp_key}' is {cp}: pretrain.tensor_parallel {tensor_parallel} x {cp} does "
            f"not divide the {world} rank(s) of the run ({ranks})"
        ]
    data_parallel = world // (tensor_parallel * cp)
    per_step = micro_batch * data_parallel
    degrees = [
        f"{name} {degree}"
        for name, degree in (("tensor_parallel", tensor_parallel), ("context_parallel", cp))
        if degree > 1
    ]
    split = f"{data_parallel} data-parallel rank(s) ({ranks}"
    split += f" / {' x '.join(degrees)})" if degrees else ")"
    return [
        f"key '{key}' is {batch}: not divisible by micro_batch {micro_batch} x {split}"
        for key, batch in batches.items()
        if batch % per_step
    ]


def _pretrain_arithmetic(config: Mapping[str, Any]) -> list[str]:
    """Each pretraining stage's run spec as far as it is known without data: the phases' steps
    from their token budgets (a phase plans at least its budget), the batch split, the model
    shape under tensor parallelism, and the long-context stages' windows."""
    from apertus.train.config import PretrainConfig
    from apertus.train.plan import planned_phases
    from apertus.train.run_spec import (
        LRSpec,
        RunSpec,
        batch_ramp,
        check_tensor_parallel_shape,
    )
    from apertus.train.stage import wsd_schedule

    section = config["pretrain"]
    cfg = PretrainConfig.from_dict(section)
    if not cfg.phases and config["posttrain"]["init_from"] is None:
        # No phase: the plan's own check (apertus.train.plan) that the first stage has weights.
        from apertus.train.plan import pretrain_stages

        found = _attempt("pretrain", pretrain_stages, cfg)[1]
        if found:
            return found
    budgets = {
        phase["name"]: (i, phase["tokens"]) for i, phase in enumerate(config["tokenize"]["phases"])
    }
    shared = cfg.settings()
    problems = []
    nproc = ("pretrain.nproc", cfg.nproc)

    def spec_problems(where: str, split: list[str], **fields: Any) -> list[str]:
        if split:  # RunSpec would repeat the batch problem
            return split
        spec, found = _attempt(where, RunSpec, **{**shared, **fields})
        if spec is not None and cfg.tensor_parallel > 1:
            found += _attempt(where, check_tensor_parallel_shape, spec, cfg.tensor_parallel)[1]
        return found

    # The phases, one WSD schedule over all of them (apertus.train.stage.run_spec).
    batches = {"pretrain.global_batch": cfg.global_batch}
    if cfg.batch_ramp is not None:
        batches["pretrain.batch_ramp.global_batch"] = cfg.batch_ramp.global_batch
    split = _batch_split(
        "pretrain",
        batches,
        micro_batch=cfg.micro_batch,
        nproc=nproc,
        nnodes=("pretrain.nnodes", cfg.nnodes),
        tensor_parallel=cfg.tensor_parallel,
    )
    ramp = batch_ramp(cfg.batch_ramp, seq_len=cfg.seq_len, global_batch=cfg.global_batch)
    phases = planned_phases(cfg, {name: tokens for name, (_, tokens) in budgets.items()})
    for i, phase in enumerate(phases):
        if phase.steps < 1:
            index, tokens = budgets[phase.name]
            problems.append(
                f"key 'tokenize.phases[{index}].tokens' is {tokens}: {phase.windows} windows "
                f"of pretrain.seq_len {cfg.seq_len} + 1 tokens, fewer than one batch of "
                f"{phase.batch} for pretrain.phases[{i}] {phase.name!r}; raise the phase's "
                "token budget or lower the batch"
            )
            return problems + split
    total = sum(phase.steps for phase in phases)
    if phases:  # none: the long-context stages alone, from pretrain.init_from
        problems += spec_problems(
            "pretrain",
            split,
            phase_dir=cfg.phases[-1],
            model_overrides={"rope_theta": cfg.rope_theta, "max_seq_len": cfg.seq_len},
            seq_len=cfg.seq_len,
            global_batch=cfg.global_batch,
            batch_ramp=cfg.batch_ramp,
            steps=total,
            lr=wsd_schedule(cfg, ramp, total),
        )
    # The long-context stages: the previous weights, their own batch, nodes and data.
    for i, long in enumerate(cfg.long_context):
        where = key_path(["pretrain", "long_context", i])
        micro_batch = math.gcd(cfg.micro_batch, long.global_batch)
        nnodes = ("pretrain.nnodes", cfg.nnodes)
        if long.nnodes is not None:
            nnodes = (f"{where}.nnodes", long.nnodes)
        split = _batch_split(
            where,
            {f"{where}.global_batch": long.global_batch},
            micro_batch=micro_batch,
            nproc=nproc,
            nnodes=nnodes,
            tensor_parallel=cfg.tensor_parallel,
            context_parallel=(f"{where}.context_parallel", long.context_parallel),
        )
        problems += spec_problems(
            where,
            split,
            context_parallel=long.context_parallel,
            micro_batch=micro_batch,
            phase_dir=long.phase,
            model_overrides={"rope_theta": long.rope_theta, "max_seq_len": long.seq_len},
            seq_len=long.seq_len,
            global_batch=long.global_batch,
            steps=long.steps,
            lr=LRSpec(kind="constant", peak=long.lr, warmup_steps=long.warmup_steps),
        )
        index, tokens = budgets[long.phase]
        windows = tokens // (long.seq_len + 1)
        needed = long.steps * long.global_batch
        if windows < needed:
            problems.append(
                f"{where} ({long.name!r}): tokenize.phases[{index}] {long.phase!r} plans "
                f"{tokens} tokens, {windows} windows of {where}.seq_len {long.seq_len} + 1, "
                f"fewer than the {needed} sequences of {where}.steps {long.steps} x "
                f"global_batch {long.global_batch}; lower steps or global_batch, or raise "
                f"tokenize.phases[{index}].tokens"
            )
    return problems


def _sft_arithmetic(config: Mapping[str, Any]) -> list[str]:
    """SFT's batch split (apertus.posttrain.sft.sft_run_spec: micro_batch is
    gcd(micro_batch, global_batch), over `nproc` data-parallel ranks)."""
    if not config["posttrain"]["enabled"]:
        return []
    sft = config["posttrain"]["sft"]
    return _batch_split(
        "posttrain.sft",
        {"posttrain.sft.global_batch": sft["global_batch"]},
        micro_batch=math.gcd(sft["micro_batch"], sft["global_batch"]),
        nproc=("posttrain.sft.nproc", sft["nproc"]),
        nnodes=("posttrain.sft.nnodes", sft["nnodes"]) if sft["nnodes"] > 1 else None,
        tensor_parallel=1,
    )
