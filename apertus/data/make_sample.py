"""Step `data_sample`: write the sample corpus the embedded default filters.

python -m apertus.data.make_sample --config JSON --manifest M --output-dir DIR
"""

from __future__ import annotations

from pathlib import Path

from apertus.core.stage import StepRun, run_main, stage_parser

# What make_sample_corpus writes; sources reading `sample` are named after these files.
SAMPLE_SOURCES = ("web", "edu", "code")
SAMPLE_FILES = (
    *(f"{name}.jsonl.gz" for name in SAMPLE_SOURCES),
    "labels/quality.jsonl",
    "labels/toxicity.jsonl",
    "planted.json",
)


def main(argv=None):
    from apertus.data.sample_corpus import make_sample_corpus

    parser = stage_parser("data", __doc__.splitlines()[0])
    parser.add_argument("--output-dir", type=Path, required=True)
    args = parser.parse_args(argv)
    sample = args.config["sample"]
    outputs = [args.output_dir / name for name in SAMPLE_FILES]
    with StepRun(
        "data",
        "sample",
        args.config,
        inputs=[],
        outputs=outputs,
        manifest=args.manifest,
        seed=sample["seed"],
    ) as step:
        step.summary.update(
            make_sample_corpus(
                args.output_dir, seed=sample["seed"], target_bytes=sample["target_bytes"]
            )
        )


if __name__ == "__main__":
    run_main(main)
