"""Entry point of the pretraining stage, one run per rule of workflow/rules/pretrain.smk:

    python -m apertus.train.stage --config JSON --manifest M --name STAGE --phases-root DIR
        [--previous DIR] --output DIR --work-root DIR

A stage is either a pretraining phase (continuing the previous phase's optimizer, step count and
WSD schedule on its own data; RECIPE.md §4-§5), a long-context stage (the previous weights
with a new sequence length and RoPE theta, a fresh optimizer and a constant LR after warmup;
RECIPE.md §6) or the Goldfish control (a phase again, Goldfish off; `apertus.train.plan`).
The run itself is torchtitan under torchrun (`apertus.train.launch`).

Checkpoints live in a work directory named after everything the run depends on (its spec, the
phase index, the checkpoint it starts from): re-running a killed job resumes from its last
checkpoint, while any change starts afresh. The declared output holds `run.json` (where the
final checkpoint is, the last loss, the data's unigram entropy), the spec and the metrics.

Paths in these records are relative to the folder that holds them (`run.json`'s
``final_checkpoint`` is ``../_work/<name>-<key>/ckpt/step-N``, `spec.json`'s paths likewise,
`RunSpec.relative_to`), so a results folder moved or copied whole still reads; `run.json` files
written before held an absolute ``final_checkpoint``, which `final_checkpoint` reads as is. The
spec handed to the trainer (``spec.json`` in the work directory) keeps the paths it runs on.
"""

from __future__ import annotations

import dataclasses
import json
import math
import shutil
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from apertus.core import ApertusError, codedigest
from apertus.core.files import (
    atomic_write_json,
    canonical_json,
    recorded_path,
    resolve_recorded,
    sha256_text,
)
from apertus.core.lifetime import exclusive_lock
from apertus.core.stage import StepRun, run_main, stage_parser
from apertus.tokenize.phases import PHASE_FILE
from apertus.train.config import PretrainConfig
from apertus.train.plan import CONTROL_SUFFIX, planned_stage
from apertus.train.run_spec import (
    MASTER_DTYPE,
    REDUCE_DTYPE,
    CheckpointSpec,
    LRSpec,
    RunSpec,
    batch_ramp,
    sealed_steps,
    set_aside_checkpoints,
    write_run_spec,
)
from apertus.train.schedule import BatchRamp


def phase_steps(phase_dir: Path, seq_len: int, ramp: BatchRamp, first_step: int = 0) -> int:
    """Optimizer steps one pass over a phase's planned tokens gives when it starts after step
    `first_step` of the schedule: windows of seq_len + 1 tokens (input and shifted labels), as
    many windows per step as the ramp's global batch at that step."""
    from apertus.tokenize.phases import PhaseDataset

    windows = PhaseDataset(phase_dir).total_tokens // (seq_len + 1)
    steps = ramp.steps_within(windows, first_step)
    if steps < 1:
        raise ApertusError(
            f"{phase_dir}: {windows} windows of {seq_len + 1} tokens, fewer than one batch of "
            f"{ramp.batch_at(first_step)}; raise the phase's token budget or lower the batch"
        )
    return steps


def cooldown_steps(ramp: BatchRamp, total_steps: int, fraction: float) -> int:
    """The last steps of a `total_steps` schedule that train on at most `fraction` of its
    sequences: the 1-sqrt cooldown of RECIPE.md §4 covers the last 1.65T of 15T tokens, which
    is fewer steps than that share of the steps once the batch has doubled."""
    budget = fraction * ramp.sequences(0, total_steps)
    low, high = 0, total_steps  # the largest d with sequences(total - d, total) <= budget
    while low < high:
        mid = (low + high + 1) // 2
        if ramp.sequences(total_steps - mid, total_steps) <= budget:
            low = mid
        else:
            high = mid - 1
    return low


def wsd_schedule(cfg: PretrainConfig, ramp: BatchRamp, total_steps: int) -> LRSpec:
    """The one Warmup-Stable-Decay schedule of all the phases, `total_steps` long (RECIPE §4):
    warmup, the stable peak, the 1-sqrt cooldown over `lr.decay_fraction` of the sequences."""
    return LRSpec(
        kind="wsd",
        peak=cfg.lr.peak,
        warmup_steps=min(cfg.lr.warmup_steps, total_steps),
        decay_steps=cooldown_steps(ramp, total_steps, cfg.lr.decay_fraction),
        min_lr_ratio=cfg.lr.min_lr_ratio,
        total_steps=total_steps,
    )


def unigram_entropy(phase_dir: Path, max_tokens: int = 20_000_000) -> float:
    """Entropy (nats) of the token distribution of a phase's planned documents (the first
    `max_tokens` of the plan): the loss of a model that ignores context, which a trained model
    must beat."""
    from apertus.tokenize.phases import PhaseDataset

    counts = np.zeros(0, dtype=np.int64)
    seen = 0
    for doc in PhaseDataset(phase_dir).iter_documents():
        c = np.bincount(np.asarray(doc, dtype=np.int64))
        if len(c) > len(counts):
            counts = np.pad(counts, (0, len(c) - len(counts)))
        counts[: len(c)] += c
        seen += len(doc)
        if seen >= max_tokens:
            break
    p = counts[counts > 0] / counts.sum()
    return float(-(p * np.log(p)).sum())


def vocabulary_cover(flavor_name: str, phase_dir: Path) -> dict[str, int]:
    """``{"vocab_size": n}`` when the phase was tokenized with more ids than the flavor's
    embedding has rows (a Hub tokenizer of 131072 ids, e.g. Apertus', with the ``tiny``
    flavor), as torchtitan sizes the embedding by the tokenizer; else nothing, so a flavor that
    covers its data keeps its shape (and the run its work directory)."""
    from apertus.model.flavors import flavor
    from apertus.tokenize.phases import read_phase_record

    vocab_size = int(read_phase_record(phase_dir)["vocab_size"])
    return {"vocab_size": vocab_size} if vocab_size > flavor(flavor_name).vocab_size else {}


def run_spec(
    cfg: PretrainConfig,
    name: str,
    phases_root: Path,
    previous: Mapping[str, Any] | None,
    hf_start: Path | None = None,
) -> RunSpec:
    """The torchtitan run spec of pretraining stage `name` (the `pretrain:` config, the previous
    stage's run.json); how it starts from the previous stage is `apertus.train.plan`'s. The
    first phase (and its Goldfish control) starts from the Hugging Face checkpoint folder
    `hf_start` when `pretrain.init_from` names one (`resolve_start`)."""
    stage = planned_stage(cfg, name)
    if stage.kind == "control":
        # Its phase's run, Goldfish off (apertus.train.plan): same start, data and schedule;
        # a restart of that phase is the phase's own.
        phase = name.removesuffix(CONTROL_SUFFIX)
        if cfg.restart is not None and cfg.restart.stage == phase:
            cfg = dataclasses.replace(cfg, restart=None)
        spec = run_spec(cfg, phase, phases_root, previous, hf_start)
        return dataclasses.replace(spec, goldfish=dataclasses.replace(spec.goldfish, enabled=False))
    if stage.previous is not None and previous is None:
        kind = "long-context stage" if stage.kind == "long_context" else "phase"
        raise ApertusError(f"{kind} {name!r} needs the previous stage's weights")
    # The settings the `pretrain:` config and the run spec share (run_spec.TrainingSettings)
    # go across as they are; the rest is each stage's own.
    shared = cfg.settings()
    checkpoint = CheckpointSpec(
        interval=cfg.checkpoint_interval,
        initial=previous["final_checkpoint"] if stage.previous is not None else None,
        initial_mode="continue" if stage.start == "continue" else "weights",
    )
    if stage.previous is None and hf_start is not None:
        checkpoint = dataclasses.replace(checkpoint, initial=str(hf_start), initial_mode="hf")
    restart = cfg.restart
    if restart is not None and restart.stage == name:
        # Everything of its own checkpoint (`initial_mode: restart`); the key of the work
        # directory holds the checkpoint and the new LR, so this is a new run.
        checkpoint = dataclasses.replace(
            checkpoint,
            initial=str(Path(restart.checkpoint).absolute()),
            initial_mode="restart",
        )
    if stage.kind == "phase":
        if (
            restart is not None
            and restart.lr is not None
            and restart.stage in cfg.phases
            and cfg.phases.index(name) >= cfg.phases.index(restart.stage)
        ):
            # One WSD schedule: the new peak from the restarted phase on.
            cfg = dataclasses.replace(cfg, lr=dataclasses.replace(cfg.lr, peak=restart.lr))
        # One WSD schedule over all phases; each phase adds its steps to the count.
        ramp = batch_ramp(cfg.batch_ramp, seq_len=cfg.seq_len, global_batch=cfg.global_batch)
        steps: list[int] = []
        for phase in cfg.phases:
            steps.append(phase_steps(phases_root / phase, cfg.seq_len, ramp, sum(steps)))
        total = sum(steps)
        return RunSpec(
            **shared,
            tensorboard=True,
            activation_checkpoint=cfg.activation_checkpoint,
            phase_dir=str(phases_root / name),
            model_overrides={
                "rope_theta": cfg.rope_theta,
                "max_seq_len": cfg.seq_len,
                **vocabulary_cover(cfg.flavor, phases_root / name),
            },
            seq_len=cfg.seq_len,
            global_batch=cfg.global_batch,
            batch_ramp=cfg.batch_ramp,
            steps=sum(steps[: cfg.phases.index(name) + 1]),
            lr=wsd_schedule(cfg, ramp, total),
            checkpoint=checkpoint,
        )
    long = next(s for s in cfg.long_context if s.name == name)
    if restart is not None and restart.stage == name and restart.lr is not None:
        long = dataclasses.replace(long, lr=restart.lr)
    return RunSpec(
        **{**shared, "micro_batch": math.gcd(cfg.micro_batch, long.global_batch)},
        tensorboard=True,
        activation_checkpoint=long.activation_checkpoint or cfg.activation_checkpoint,
        context_parallel=long.context_parallel,
        phase_dir=str(phases_root / long.phase),
        model_overrides={
            "rope_theta": long.rope_theta,
            "max_seq_len": long.seq_len,
            **vocabulary_cover(cfg.flavor, phases_root / long.phase),
        },
        seq_len=long.seq_len,
        global_batch=long.global_batch,
        steps=long.steps,
        lr=LRSpec(kind="constant", peak=long.lr, warmup_steps=long.warmup_steps),
        checkpoint=checkpoint,
    )


LOCK_FILE = "LOCK"
"""In a work directory: held by the stage process while its trainer runs (host, PID, start)."""

# The code that trains: what torchrun starts (apertus.core.codedigest counts what it uses).
TRAINER_MODULE = "apertus.train.config_registry"


def work_directory(work_root: Path, name: str, spec: RunSpec, key_material: Any) -> Path:
    """Where run `name` trains: a folder named after it and a hash of what it depends on (the
    spec's non-default fields, `key_material` and the trainer's code digest), so a re-run with
    the same inputs and code resumes there and any change starts afresh: a step re-run for a
    code change never resumes from checkpoints the old code wrote. The spec's paths count
    relative to `work_root` (and `key_material` holds none but relative ones: the records of
    the data and the previous stage, as written), so a results folder moved whole keeps its
    work directories."""
    code = codedigest.step_code(TRAINER_MODULE, codedigest.pins_of_run())["digest"]
    explicit = spec.relative_to(work_root).explicit()
    key = sha256_text(canonical_json([explicit, key_material, code]))[:16]
    return work_root / f"{name}-{key}"


def final_checkpoint(record: Mapping[str, Any], run_dir: Path) -> Path:
    """The checkpoint a training stage's run.json (`record`, read from `run_dir`) names, as an
    absolute path (torchtitan requires one): recorded relative to `run_dir`, or absolute in a
    run.json written before paths were relative."""
    return resolve_recorded(record["final_checkpoint"], run_dir).absolute()


def train_and_record(
    step: StepRun,
    spec: RunSpec,
    *,
    name: str,
    key_material: Any,
    work_root: Path,
    output: Path,
    nproc: int,
    nnodes: int = 1,
) -> dict[str, Any]:
    """Run the torchtitan training `spec` in a work directory named after `name` and a hash of
    the spec and `key_material` (what else the run depends on), resuming from its last
    checkpoint when one is there; then write `output/` (run.json, spec.json, metrics.jsonl)
    and return the run record. Shared by every training stage (pretraining phases, long
    context, SFT), so each is resumable the same way and exported the same way."""
    from apertus.train.launch import DIVERGED, STOPPED, rank_hosts, run
    from apertus.train.metrics import read_metrics

    work = work_directory(work_root, name, spec, key_material)
    spec = spec.placed(work)
    work.mkdir(parents=True, exist_ok=True)
    # One trainer per work directory: a second run of the same stage (another clone on the
    # same results folder, a re-run while an orphan of the last one lives) is refused.
    with exclusive_lock(work / LOCK_FILE, f"the training work directory {work}"):
        write_run_spec(work / "spec.json", spec)
        # Listed, not hashed: the trainer's rank 0 checks the newest before loading it.
        done = sealed_steps(work / "ckpt")
        aside_before = set(set_aside_checkpoints(work / "ckpt"))
        started = time.time()
        code = run(work / "spec.json", nproc, nnodes=nnodes)
        if code == STOPPED:
            raise ApertusError(
                f"training of {name} stopped early with a checkpoint in {work / 'ckpt'} (a signal, "
                "its SLURM time limit ahead, or a hang: the lines above say which); a re-run "
                "resumes from it"
            )
        if code == DIVERGED:
            raise ApertusError(
                f"training of {name} diverged; the lines above name its last sane checkpoint and "
                "the config lines that restart it from there with a lower LR (README: "
                'Troubleshooting, "training diverged"); a plain re-run would diverge again'
            )
        if code != 0:
            raise ApertusError(
                f"training of {name} failed (exit {code}); its checkpoints are kept in "
                f"{work / 'ckpt'} and a re-run resumes from the last one"
            )
        # Where the ranks ran (each node of a multi-node run): in the manifest, not in run.json,
        # which the next stage hashes into its work directory's key.
        step.summary["rank_hosts"] = rank_hosts(spec.metrics_folder, since=started)
        aside = {
            path: found
            for path, found in set_aside_checkpoints(work / "ckpt").items()
            if path not in aside_before
        }
        if aside:  # what the trainer's resume moved out of its way
            step.summary["checkpoints_set_aside"] = [
                {"step": number, "moved_to": recorded_path(path, output), "problem": why}
                for path, (number, why) in aside.items()
            ]
        moved = {number for number, _ in aside.values()}
        kept = [number for number in done if number not in moved]
        if kept:  # none: it started over
            step.summary["resumed_from_step"] = max(kept)
        final_step = max(sealed_steps(work / "ckpt"))
        last_checkpoint = work / "ckpt" / f"step-{final_step}"
        metrics = read_metrics(work / "out" / "metrics.jsonl")
        last = metrics[max(metrics)]
        step.summary["numerics"] = numerics(spec, metrics)
        record = {
            "name": name,
            "final_checkpoint": recorded_path(last_checkpoint, output),
            "final_step": final_step,
            "final_loss": last["loss"],
            "tokens_seen": last.get("tokens_seen"),
            "flavor": spec.flavor,
            "model_overrides": spec.model_overrides,
            "seq_len": spec.seq_len,
        }
    step.outputs.append(last_checkpoint)  # hashed into the manifest
    output.mkdir(parents=True, exist_ok=True)
    write_run_spec(output / "spec.json", spec.relative_to(output))
    shutil.copyfile(work / "out" / "metrics.jsonl", output / "metrics.jsonl")
    return record


def numerics(spec: RunSpec, metrics: Mapping[int, Mapping[str, Any]]) -> dict[str, Any]:
    """What the manifest records of a run's numerics: FSDP2's mixed precision (the parameters
    and compute in `spec.dtype`, master weights and gradient reduction as
    `apertus.train.config_registry` sets them), whether the blocks were compiled, and the count of
    compiled graphs at each step where it changed (`compiled_graphs` of metrics.jsonl): one
    entry at the first step when nothing recompiles; a resumed process counts from zero again."""
    graphs: dict[str, int] = {}
    previous = None
    for number in sorted(metrics):
        count = metrics[number].get("compiled_graphs")
        if count is not None and count != previous:
            graphs[str(number)] = previous = count
    return {
        "dtype": spec.dtype,
        "master_weights": MASTER_DTYPE,
        "gradient_reduction": REDUCE_DTYPE,
        "compile": spec.compile,
        "compiled_graphs": graphs,
    }


def resolve_start(cfg: PretrainConfig, name: str) -> tuple[Path, str | None] | None:
    """The local folder of `pretrain.init_from` when stage `name` starts from it (the first
    phase and its Goldfish control; with no phase, the first long-context stage), downloaded
    if need be, and the Hub commit it is at
    (`apertus.model.hf_checkpoint.resolve_hf_checkpoint`); else None."""
    if cfg.init_from is None or planned_stage(cfg, name).previous is not None:
        return None
    from apertus.data.lid_models import hub_offline
    from apertus.model.hf_checkpoint import resolve_hf_checkpoint

    return resolve_hf_checkpoint(cfg.init_from.model, cfg.init_from.revision, offline=hub_offline())


def start_record(cfg: PretrainConfig, spec: RunSpec, commit: str | None) -> dict[str, Any]:
    """What the manifest says of the checkpoint `spec` starts from
    (`apertus.model.hf_checkpoint.start_record`). Its shape is checked here with the run's own
    (the flavor, the data's vocabulary)."""
    from apertus.model.hf_checkpoint import check_hf_checkpoint, start_record

    assert cfg.init_from is not None and spec.checkpoint.initial is not None
    checked = check_hf_checkpoint(spec.checkpoint.initial, spec.flavor, spec.model_overrides)
    return start_record(cfg.init_from, commit, checked)


def main(argv=None):
    parser = stage_parser("pretrain", __doc__.splitlines()[0])
    parser.add_argument("--name", required=True)
    parser.add_argument("--phases-root", type=Path, required=True)
    parser.add_argument("--previous", type=Path, help="the previous stage's output directory")
    parser.add_argument("--output", type=Path, required=True)
    parser.add_argument("--work-root", type=Path, required=True)
    args = parser.parse_args(argv)
    # A phase's rule passes every key but the long-context stages and the Goldfish control
    # (they do not concern it), nor does a restart of a long-context stage.
    config = {"long_context": [], "goldfish_control": None, **args.config}
    restart = config.get("restart")
    if restart and "long_context" not in args.config and restart["stage"] not in config["phases"]:
        config["restart"] = None
    cfg = PretrainConfig.from_dict(config)
    previous = json.loads((args.previous / "run.json").read_text()) if args.previous else None
    starting = (
        {**previous, "final_checkpoint": str(final_checkpoint(previous, args.previous))}
        if previous is not None
        else None
    )
    start = resolve_start(cfg, args.name)
    spec = run_spec(cfg, args.name, args.phases_root, starting, start[0] if start else None)
    started_from = start_record(cfg, spec, start[1]) if start else None
    assert spec.phase_dir is not None
    phase_json = Path(spec.phase_dir) / PHASE_FILE
    # The previous stage's checkpoint is an input too: its bytes are checked against that
    # stage's manifest before this one loads it (apertus.core.provenance).
    inputs = [Path(spec.phase_dir)]
    if starting is not None:
        inputs += [args.previous, Path(starting["final_checkpoint"])]
    with StepRun(
        "pretrain",
        args.name,
        args.config,
        inputs=inputs,
        outputs=[args.output],
        manifest=args.manifest,
        seed=cfg.seed,
    ) as step:
        if started_from is not None:
            step.summary["init_from"] = started_from
        if spec.checkpoint.initial_mode == "restart" and cfg.restart is not None:
            step.summary["restarted_from"] = {
                "checkpoint": cfg.restart.checkpoint,
                "step": spec.first_step(),
                "lr": spec.lr.peak,
            }
        record = train_and_record(
            step,
            spec,
            name=args.name,
            # A start's weight files by their digests: other bytes, another run.
            key_material=[phase_json.read_text(), previous, *filter(None, [started_from])],
            work_root=args.work_root,
            output=args.output,
            nproc=cfg.nproc,
            nnodes=planned_stage(cfg, args.name).nnodes,
        )
        record["unigram_entropy"] = unigram_entropy(Path(spec.phase_dir))
        atomic_write_json(args.output / "run.json", record)
        step.summary.update({k: v for k, v in record.items() if k != "model_overrides"})


if __name__ == "__main__":
    run_main(main)
