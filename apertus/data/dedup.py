"""Step `data_dedup`: exact then MinHash deduplication, per language, across all sources.

python -m apertus.data.dedup --config JSON --manifest M --input-dir DIR ... --output-dir DIR
"""

from __future__ import annotations

import shutil
from pathlib import Path

from apertus.core.stage import StepRun, run_main
from apertus.data.config import DataConfig
from apertus.data.pipeline import dedup_language, files_by_language, step_stats
from apertus.data.steps import add_removed_dir, data_parser, fresh_removed_dir


def main(argv=None):
    parser = data_parser(__doc__.splitlines()[0])
    parser.add_argument("--input-dir", type=Path, action="append", required=True)
    parser.add_argument("--output-dir", type=Path, required=True)
    parser.add_argument("--work-dir", type=Path, required=True, help="scratch space, removed after")
    add_removed_dir(parser)
    args = parser.parse_args(argv)
    cfg = DataConfig.from_dict(args.config)
    with StepRun(
        "data",
        "dedup",
        args.config,
        inputs=args.input_dir,
        outputs=[args.output_dir, *fresh_removed_dir(args.removed_dir)],
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
                removed_dir=args.removed_dir,
            )
            step.summary[language] = {part: step_stats(s) for part, s in stats.items()}
        shutil.rmtree(args.work_dir, ignore_errors=True)
        args.output_dir.mkdir(parents=True, exist_ok=True)
        step.summary["languages"] = sorted(by_language)


if __name__ == "__main__":
    run_main(main)
