"""Data stage throughput: documents/s per core of the full per-document filter chain, next to
datatrove's own JSONL reader -> writer on the same input, measured in one run.

    python -m bench.data_filter [--seed N] [--target-bytes N] [--repeat N] [--quick]

Both run in one process (one core) on the sample corpus's web source. The filter chain is what
`data_filter` runs: robust reader, language ID, robots.txt, language score, the four heuristic
families, quality and toxicity scoring, JSONL writer. The classifiers are trained first (not
timed). Prints a table with the ratio.
"""

from __future__ import annotations

import argparse
import gzip
import json
import tempfile
import time
from pathlib import Path

from datatrove.pipeline.readers import JsonlReader
from datatrove.pipeline.writers import JsonlWriter

from apertus.core.config import load_config
from apertus.data.classifiers import train_ngram_classifier
from apertus.data.config import DataConfig
from apertus.data.pipeline import filter_steps, resolve_source, run_pipeline
from apertus.data.robots import snapshot_from_directory, url_host, write_snapshot
from apertus.data.sample_corpus import make_sample_corpus
from apertus.data.train_classifiers import read_labels
from bench.common import Ratio, main


def timed(steps, logs: Path) -> float:
    start = time.perf_counter()
    run_pipeline(steps, logging_dir=logs)
    return time.perf_counter() - start


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--seed", type=int, default=20250902)
    parser.add_argument("--target-bytes", type=int, default=2_400_000)
    parser.add_argument("--repeat", type=int, default=2, help="best of N runs each")


def measure(args: argparse.Namespace) -> list[Ratio]:
    if args.quick:
        args.target_bytes, args.repeat = 300_000, 1

    cfg = DataConfig.from_dict(load_config()["data"])
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        make_sample_corpus(tmp / "sample", seed=args.seed, target_bytes=args.target_bytes)
        source = resolve_source(cfg.source("web"), tmp / "sample")
        with gzip.open(source.path, "rt", encoding="utf-8") as f:
            lines = [json.loads(line) for line in f]
        docs = len(lines)
        hosts = {url_host(d["url"]) for d in lines}
        write_snapshot(tmp / "snapshot.json", snapshot_from_directory(Path("config/robots"), hosts))
        classifiers = {}
        for spec in (cfg.quality, cfg.toxicity):
            texts, labels = read_labels(tmp / "sample" / "labels" / f"{spec.task}.jsonl")
            train_ngram_classifier(
                texts, labels, tmp / spec.task, seed=spec.seed, epochs=spec.epochs, task=spec.task
            )
            classifiers[spec.task] = tmp / spec.task

        baseline, ours = [], []
        for i in range(args.repeat):
            baseline.append(
                timed(
                    [
                        JsonlReader(str(Path(source.path).parent), glob_pattern="web.jsonl.gz"),
                        JsonlWriter(str(tmp / f"copy{i}")),
                    ],
                    tmp / f"logs-copy{i}",
                )
            )
            ours.append(
                timed(
                    filter_steps(
                        cfg,
                        source,
                        snapshot=tmp / "snapshot.json",
                        classifiers=classifiers,
                        output_dir=tmp / f"out{i}",
                        funnel_dir=tmp / f"funnel{i}",
                        job="bench",
                    ),
                    tmp / f"logs-ours{i}",
                )
            )
    return [
        Ratio(
            "filter chain / datatrove reader->writer",
            docs / min(ours),
            docs / min(baseline),
            "docs/s/core",
            "JsonlReader -> JsonlWriter",
            lower_is_better=False,
            note=(
                f"{docs} documents (sample corpus, web source), 1 process, best of {args.repeat};"
                " the chain runs language ID, robots.txt, heuristics, quality and toxicity models"
            ),
        )
    ]


if __name__ == "__main__":
    main(add_arguments, measure, __doc__)
