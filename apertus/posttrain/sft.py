"""Step `posttrain_sft`: supervised fine-tuning on torchtitan (RECIPE.md §7).

    python -m apertus.posttrain.sft --config JSON --manifest M --sft-data DIR --previous DIR
        --output DIR --work-root DIR

From the weights of the last pretraining stage (`--previous`, its run.json), or of the released
checkpoint a post-training-only run starts from (`apertus.posttrain.start`: its run.json says
``checkpoint_format: hf``; torchtitan reads it through the state-dict adapter), on the rows of an
SFT data directory (`apertus.posttrain.sft_data`): the loss on completions only, `epochs`
passes, linear warmup over `warmup_ratio` of the steps then linear decay to 0, AdEMAMix with
alpha 8, beta3 0.999 and both warmups over all steps, no weight decay, gradient clipping, no
Goldfish. The run is the pretraining stages' torchtitan run (`apertus.train.stage.
train_and_record`): resumable from its last checkpoint, and its output (run.json, metrics)
exports and evaluates like theirs; the paths in it are relative to the output folder, as theirs.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from apertus.core import ApertusError
from apertus.core.stage import StepRun, run_main, stage_parser
from apertus.core.typed import Config
from apertus.posttrain.sft_data import read_sft_record
from apertus.train.run_spec import (
    AdEMAMixSpec,
    CheckpointSpec,
    GoldfishSpec,
    LRSpec,
    RunSpec,
    WandbSpec,
)

NAME = "sft"


@dataclass(frozen=True)
class SFTTrainingConfig(Config, key="posttrain.sft"):
    """The ``posttrain.sft`` section (config/README.md); the recipe's fixed SFT values are
    `sft_run_spec`'s."""

    micro_batch: int
    global_batch: int
    epochs: int
    lr: float
    warmup_ratio: float
    grad_clip: float
    checkpoint_interval: int
    nproc: int
    nnodes: int
    activation_checkpoint: str
    dtype: str
    compile: bool
    seed: int
    wandb: WandbSpec
    """Weights & Biases tracking of the run, as `pretrain.wandb` for the pretraining stages."""


def sft_run_spec(cfg: SFTTrainingConfig, sft_dir: Path, previous: dict[str, Any]) -> RunSpec:
    """The torchtitan run spec of SFT (`posttrain.sft` config, the data's record, the previous
    stage's run.json: a training stage's, or a Hugging Face start's)."""
    record = read_sft_record(sft_dir)
    steps = record["examples"] * cfg.epochs // cfg.global_batch
    if steps < 1:
        raise ApertusError(
            f"{sft_dir}: {record['examples']} conversations x {cfg.epochs} epoch(s) are fewer "
            f"than one global batch of {cfg.global_batch}"
        )
    overrides = dict(previous["model_overrides"])
    overrides["max_seq_len"] = max(overrides.get("max_seq_len", 0), record["max_len"])
    return RunSpec(
        flavor=previous["flavor"],
        model_overrides=overrides,
        sft_data=str(sft_dir),
        sft_epochs=cfg.epochs,
        seq_len=record["max_len"],
        micro_batch=math.gcd(cfg.micro_batch, cfg.global_batch),
        global_batch=cfg.global_batch,
        steps=steps,
        lr=LRSpec(kind="linear", peak=cfg.lr, warmup_steps=math.ceil(cfg.warmup_ratio * steps)),
        # RECIPE §7: alpha 8, beta3 0.999 in code, T = total steps, no weight decay.
        ademamix=AdEMAMixSpec(
            betas=(0.9, 0.999, 0.999), alpha=8.0, t_alpha=steps, t_beta3=steps, weight_decay=0.0
        ),
        grad_clip=cfg.grad_clip,
        goldfish=GoldfishSpec(enabled=False),
        seed=cfg.seed,
        dtype=cfg.dtype,
        compile=cfg.compile,
        activation_checkpoint=cfg.activation_checkpoint,
        tensorboard=True,
        wandb=cfg.wandb,
        checkpoint=CheckpointSpec(
            interval=cfg.checkpoint_interval,
            initial=previous["final_checkpoint"],
            initial_mode="hf" if previous.get("checkpoint_format") == "hf" else "weights",
        ),
    )


def main(argv=None):
    from apertus.core.files import atomic_write_json
    from apertus.train.stage import final_checkpoint, train_and_record

    parser = stage_parser("posttrain", __doc__.splitlines()[0])
    parser.add_argument("--sft-data", type=Path, required=True)
    parser.add_argument(
        "--previous", type=Path, required=True, help="the last pretraining stage, or the start"
    )
    parser.add_argument("--output", type=Path, required=True)
    parser.add_argument("--work-root", type=Path, required=True)
    args = parser.parse_args(argv)
    cfg = SFTTrainingConfig.from_dict(args.config)
    try:
        previous = json.loads((args.previous / "run.json").read_text())
    except (OSError, ValueError) as e:
        raise ApertusError(f"{args.previous / 'run.json'}: unreadable ({e})") from None
    starting = {**previous, "final_checkpoint": str(final_checkpoint(previous, args.previous))}
    spec = sft_run_spec(cfg, args.sft_data, starting)
    with StepRun(
        "posttrain",
        NAME,
        args.config,
        inputs=[args.sft_data, args.previous, Path(starting["final_checkpoint"])],
        outputs=[args.output],
        manifest=args.manifest,
        seed=cfg.seed,
    ) as step:
        if "init_from" in previous:  # a released checkpoint (apertus.posttrain.start)
            step.summary["init_from"] = previous["init_from"]
        record = train_and_record(
            step,
            spec,
            name=NAME,
            key_material=[(args.sft_data / "sft.json").read_text(), previous],
            work_root=args.work_root,
            output=args.output,
            nproc=cfg.nproc,
            nnodes=cfg.nnodes,
        )
        atomic_write_json(args.output / "run.json", record)
        step.summary.update({k: v for k, v in record.items() if k != "model_overrides"})


if __name__ == "__main__":
    run_main(main)
