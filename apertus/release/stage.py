"""Entry point of rule `release`: build the release folder and its step manifest.

python -m apertus.release.stage --config RELEASE_JSON --run-config FULL_CONFIG_JSON
    --manifest M --run-dir RUN [--base DIR=CHECKPOINT] [--aligned DIR=CHECKPOINT]
    --table DIR [--memorization DIR] [--memorization-control DIR]
    [--funnel-json F --funnel-png F] [--reward-json F --reward-md F] --output DIR
    [--sinks FILE...]

A post-training-only run (`posttrain.init_from`) has no base model of its own and no data
funnel: no --base, no --funnel-*.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from apertus.core.stage import StepRun, parse_config_argument, run_main, stage_parser
from apertus.release.bundle import ReleaseInputs, build_release
from apertus.release.config import ReleaseConfig


def _model_argument(text: str) -> tuple[Path, str]:
    path, sep, checkpoint = text.rpartition("=")
    if not sep or not path or not checkpoint:
        raise argparse.ArgumentTypeError(f"expected DIR=CHECKPOINT, got {text!r}")
    return Path(path), checkpoint


def main(argv: list[str] | None = None) -> None:
    parser = stage_parser("release", "Build the release folder: models, card, manifest.")
    parser.add_argument(
        "--run-config",
        type=parse_config_argument,
        required=True,
        help="the whole resolved config as JSON (recorded in RELEASE-MANIFEST.json)",
    )
    parser.add_argument("--run-dir", type=Path, required=True)
    parser.add_argument("--base", type=_model_argument, help="DIR=CHECKPOINT")
    parser.add_argument("--aligned", type=_model_argument, help="DIR=CHECKPOINT")
    parser.add_argument("--table", type=Path, required=True, help="evaluate/table/")
    parser.add_argument("--memorization", type=Path, help="the base model's memorization dir")
    parser.add_argument(
        "--memorization-control", type=Path, help="the Goldfish control's memorization dir"
    )
    parser.add_argument("--funnel-json", type=Path)
    parser.add_argument("--funnel-png", type=Path)
    parser.add_argument("--reward-json", type=Path)
    parser.add_argument("--reward-md", type=Path)
    parser.add_argument("--output", type=Path, required=True)
    parser.add_argument(
        "--sinks",
        type=Path,
        nargs="*",
        default=[],
        help="the run's other final outputs (recorded as inputs: any change re-runs the release)",
    )
    args = parser.parse_args(argv)
    config = ReleaseConfig.from_dict(args.config)
    if args.base is None and args.aligned is None:
        parser.error("a release needs a model: --base, --aligned or both")
    if (args.funnel_json is None) != (args.funnel_png is None):
        parser.error("--funnel-json and --funnel-png go together")
    base, base_checkpoint = args.base or (None, None)
    aligned, aligned_checkpoint = args.aligned or (None, None)
    inputs = ReleaseInputs(
        run_dir=args.run_dir,
        base=base,
        base_checkpoint=base_checkpoint,
        table=args.table,
        funnel_json=args.funnel_json,
        funnel_png=args.funnel_png,
        aligned=aligned,
        aligned_checkpoint=aligned_checkpoint,
        memorization=args.memorization,
        memorization_control=args.memorization_control,
        reward_json=args.reward_json,
        reward_md=args.reward_md,
    )
    read = [
        p
        for p in (
            base,
            aligned,
            args.table,
            args.memorization,
            args.memorization_control,
            args.funnel_json,
            args.funnel_png,
            args.reward_json,
            args.reward_md,
            *args.sinks,
        )
        if p is not None
    ]
    with StepRun(
        "release", "folder", args.config, inputs=read, outputs=[args.output], manifest=args.manifest
    ) as step:
        step.summary.update(build_release(inputs, config, args.run_config, args.output))


if __name__ == "__main__":
    run_main(main)
