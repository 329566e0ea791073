"""Step `data_filter`: the per-document filters over one shard of one source.

    python -m apertus.data.filter --config JSON --manifest M --source NAME --shard I ...

Reads the source, tags the language, drops robots.txt opt-outs, low language scores and
heuristic quality failures, scores quality and toxicity, and writes JSONL per language for the
dedup step. The source's files are split between its `shards` jobs and, inside a job, between
`--threads` datatrove tasks.
"""

from __future__ import annotations

import math
from pathlib import Path

from apertus.core import ApertusError
from apertus.core.stage import StepRun, run_main
from apertus.data.config import DataConfig
from apertus.data.pipeline import filter_steps, run_pipeline, step_stats
from apertus.data.steps import (
    add_removed_dir,
    data_parser,
    fresh_removed_dir,
    local_files,
    sources_of,
)


def main(argv=None):
    parser = data_parser(__doc__.splitlines()[0])
    parser.add_argument("--source", required=True)
    parser.add_argument("--shard", type=int, default=0)
    parser.add_argument("--snapshot", type=Path, help="robots.txt snapshot (data_robots)")
    parser.add_argument(
        "--classifiers-dir", type=Path, help="the trained classifiers (ngram models, xlmr heads)"
    )
    parser.add_argument("--output-dir", type=Path, required=True)
    add_removed_dir(parser)
    args = parser.parse_args(argv)
    cfg = DataConfig.from_dict(args.config)
    try:
        source = next(s for s in sources_of(cfg, args.sample_dir) if s.name == args.source)
    except StopIteration:
        raise ApertusError(f"no data source named {args.source!r}") from None
    if not 0 <= args.shard < source.shards:
        raise ApertusError(f"shard {args.shard} out of range for {source.name} ({source.shards})")
    classifiers = {
        task: args.classifiers_dir / task
        for task in ("quality", "toxicity")
        if args.classifiers_dir is not None and (args.classifiers_dir / task).exists()
    }
    threads = max(1, args.threads)
    world = source.shards * threads
    # datatrove gives rank r the files r, r + world, ...; this job runs ranks shard*threads...
    ranks = range(args.shard * threads, (args.shard + 1) * threads)
    inputs = [f for i, f in enumerate(local_files(source)) if i % world in ranks]
    if cfg.robots.enabled:
        if args.snapshot is None:
            raise ApertusError("robots filtering is enabled but no --snapshot was given")
        inputs.append(args.snapshot)
    inputs += list(classifiers.values())
    limit = -1 if source.limit < 0 else math.ceil(source.limit / world)
    job = f"{source.name}-{args.shard}"
    with StepRun(
        "data",
        f"filter:{job}",
        args.config,
        inputs=inputs,
        outputs=[args.output_dir, *fresh_removed_dir(args.removed_dir)],
        manifest=args.manifest,
    ) as step:
        steps = filter_steps(
            cfg,
            source,
            snapshot=args.snapshot,
            classifiers=classifiers,
            output_dir=args.output_dir,
            funnel_dir=args.output_dir / "_funnel",
            job=job,
            limit=limit,
            removed_dir=args.removed_dir,
        )
        stats = run_pipeline(
            steps,
            logging_dir=args.datatrove_logs,
            tasks=world,
            workers=threads,
            local_tasks=threads,
            local_rank_offset=args.shard * threads,
        )
        step.summary["stats"] = step_stats(stats)


if __name__ == "__main__":
    run_main(main)
