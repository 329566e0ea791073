"""Step `data_select`: quality and toxicity thresholds per language, PII, the corpus files.

    python -m apertus.data.select --config JSON --manifest M --input-dir DIR --output-dir DIR ...

Thresholds are computed on the deduplicated data (quality keeps the top `keep_fraction` per
language, toxicity drops the top `drop_fraction`) and recorded in the manifest.
"""

from __future__ import annotations

import logging
from pathlib import Path

from apertus.core.stage import StepRun, run_main
from apertus.data.config import DataConfig
from apertus.data.pipeline import collect_scores, run_pipeline, select_steps, step_stats
from apertus.data.steps import add_removed_dir, data_parser, fresh_removed_dir

log = logging.getLogger("apertus.data")


def main(argv=None):
    from apertus.data.classifiers import compute_thresholds

    parser = data_parser(__doc__.splitlines()[0])
    parser.add_argument("--input-dir", type=Path, required=True)
    parser.add_argument("--output-dir", type=Path, required=True)
    add_removed_dir(parser)
    args = parser.parse_args(argv)
    cfg = DataConfig.from_dict(args.config)
    with StepRun(
        "data",
        "select",
        args.config,
        inputs=[args.input_dir],
        outputs=[args.output_dir, *fresh_removed_dir(args.removed_dir)],
        manifest=args.manifest,
    ) as step:
        args.output_dir.mkdir(parents=True, exist_ok=True)
        if not any(args.input_dir.rglob("*.jsonl.gz")):
            log.warning("no documents survived the earlier filters: the corpus is empty")
            step.summary["documents"] = 0
            return
        thresholds = {}
        enabled = [spec for spec in (cfg.quality, cfg.toxicity) if spec.enabled]
        keys = [spec.score_key for spec in enabled]
        all_scores = collect_scores(args.input_dir, keys) if keys else {}
        for spec in enabled:
            scores = all_scores[spec.score_key]
            thresholds[spec.task] = compute_thresholds(
                scores, spec.fraction, keep=spec.keep, min_documents=spec.min_documents
            )
            step.summary[f"{spec.task}_scored"] = {k: len(v) for k, v in scores.items()}
        step.summary["thresholds"] = thresholds
        stats = run_pipeline(
            select_steps(
                cfg,
                input_root=args.input_dir,
                thresholds=thresholds,
                output_dir=args.output_dir,
                funnel_dir=args.output_dir / "_funnel",
                removed_dir=args.removed_dir,
            ),
            logging_dir=args.datatrove_logs,
        )
        step.summary["stats"] = step_stats(stats)


if __name__ == "__main__":
    run_main(main)
