"""Step `data_dedup`: exact then MinHash deduplication, per language, across all sources.

python -m apertus.data.dedup --config JSON --manifest M --input-dir DIR ... --output-dir DIR
"""

from __future__ import annotations

import shutil
from pathlib import Path

from apertus.core.stage import StepRun, run_main
from apertus.data.config import DataConfig
from apertus.data.pipeline import dedup_language, files_by_language, step_stats
from apertus.data.steps import data_parser


def main(argv=None):
    parser = data_parser(__doc__.splitlines()[0])
    parser.add_argument("--input-dir", type=Path, action="append", required=True)
    parser.add_argument("--output-dir", type=Path, required=True)
    parser.add_argument("--work-dir", type=Path, required=True, help="scratch space, removed after")
    args = parser.parse_args(argv)
    cfg = DataConfig.from_dict(args.config)
    with StepRun(
        "data",
        "dedup",
        args.config,
        inputs=args.input_dir,
        outputs=[args.output_dir],
        manifest=args.manifest,
    ) as step:
        by_language = files_by_language(args.input_dir)
        for language, files in by_language.items():
            stats = dedup_language(
                cfg,
                language,
                files,
                output_dir=args.output_dir,
                work_dir=args.work_dir / language,
                funnel_dir=args.output_dir / "_funnel",
                workers=max(1, args.threads),
            )
            step.summary[language] = {part: step_stats(s) for part, s in stats.items()}
        shutil.rmtree(args.work_dir, ignore_errors=True)
        args.output_dir.mkdir(parents=True, exist_ok=True)
        step.summary["languages"] = sorted(by_language)


if __name__ == "__main__":
    run_main(main)
