"""Data stage throughput: documents/s per core of the full per-document filter chain, next to
datatrove's own JSONL reader -> writer on the same input, measured in one run.

    python bench/data_filter.py [--seed N] [--target-bytes N] [--repeat N]

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


def timed(steps, logs: Path) -> float:
    start = time.perf_counter()
    run_pipeline(steps, logging_dir=logs)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=20250902)
    parser.add_argument("--target-bytes", type=int, default=2_400_000)
    parser.add_argument("--repeat", type=int, default=2, help="best of N runs each")
    args = parser.parse_args()

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
    b, o = min(baseline), min(ours)
    rows = [
        ("datatrove JsonlReader -> JsonlWriter", b, docs / b),
        ("apertus filter chain (data_filter)", o, docs / o),
    ]
    print(
        f"\ninput: {docs} documents (sample corpus, web source), 1 process, best of {args.repeat}"
    )
    print(f"{'pipeline':<42} {'seconds':>8} {'docs/s/core':>12}")
    for name, seconds, rate in rows:
        print(f"{name:<42} {seconds:>8.2f} {rate:>12.0f}")
    print(f"{'ratio (filter chain / reader-writer)':<42} {'':>8} {b / o:>12.3f}")


if __name__ == "__main__":
    main()
