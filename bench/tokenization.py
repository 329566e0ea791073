"""Tokenization throughput: tokens/s per core of the tokenization stage's shard writer (datatrove
DocumentTokenizer with our checks, checksums and shuffling) next to raw `tokenizers`
`encode_batch` on the same texts, measured in one run (goal: ratio >= 0.8).

    python -m bench.tokenization [--seed N] [--target-bytes N] [--repeat N] [--quick]

Both on one core (RAYON_NUM_THREADS=1), on the sample corpus's web and edu text, with a
tokenizer of 8192 tokens trained first (not timed).
"""

from __future__ import annotations

import os

os.environ.setdefault("RAYON_NUM_THREADS", "1")  # one core for tokenizers' encode_batch too

import argparse
import gzip
import json
import tempfile
import time
from pathlib import Path

from tokenizers import Tokenizer

from apertus.data.sample_corpus import make_sample_corpus
from apertus.tokenize.shards import write_token_shards
from apertus.tokenize.tokenizer import train_tokenizer
from bench.common import Ratio, main


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--seed", type=int, default=20250902)
    parser.add_argument("--target-bytes", type=int, default=2_400_000)
    parser.add_argument("--repeat", type=int, default=3, help="best of N runs each")


def measure(args: argparse.Namespace) -> list[Ratio]:
    if args.quick:
        args.target_bytes, args.repeat = 300_000, 1
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        make_sample_corpus(tmp / "sample", seed=args.seed, target_bytes=args.target_bytes)
        rows = []
        for kind in ("web", "edu"):
            with gzip.open(tmp / "sample" / f"{kind}.jsonl.gz", "rt", encoding="utf-8") as f:
                rows += [dict(json.loads(line), source="web", kind=kind) for line in f]
        by_language: dict[str, list[dict]] = {}
        for row in rows:
            by_language.setdefault(row["language"], []).append(row)
        for language, group in by_language.items():
            path = tmp / "corpus" / "web" / language / "part.jsonl.gz"
            path.parent.mkdir(parents=True)
            with gzip.open(path, "wt", encoding="utf-8") as f:
                f.writelines(json.dumps(r, ensure_ascii=False) + "\n" for r in group)
        texts = [r["text"] for r in rows]
        train_tokenizer(texts, tmp / "tokenizer", vocab_size=8192)
        raw = Tokenizer.from_file(str(tmp / "tokenizer" / "tokenizer.json"))
        raw.encode_special_tokens = True  # as the shard writer encodes text

        baseline, ours, tokens = [], [], 0
        for i in range(args.repeat):
            start = time.perf_counter()
            tokens = sum(len(e.ids) for e in raw.encode_batch(texts))
            baseline.append(time.perf_counter() - start)
            start = time.perf_counter()
            summary = write_token_shards(
                tmp / "corpus",
                "web",
                tmp / "tokenizer",
                tmp / f"shards{i}",
                exclude_ids=set(),
                seed=1,
                logging_dir=tmp / f"logs{i}",
            )
            ours.append(time.perf_counter() - start)
        if summary["tokens"] != tokens:
            raise SystemExit(
                f"the shards hold {summary['tokens']} tokens, encode_batch made {tokens}:"
                " the two did not tokenize the same text"
            )

    return [
        Ratio(
            "tokenization stage / raw encode_batch",
            tokens / min(ours),
            tokens / min(baseline),
            "tokens/s/core",
            "tokenizers encode_batch",
            lower_is_better=False,
            goal=0.8,
            note=f"{len(texts)} documents, {tokens} tokens, 1 core, best of {args.repeat}",
        )
    ]


if __name__ == "__main__":
    main(add_arguments, measure, __doc__)
