"""Data stage throughput: documents/s per core of the project's per-document filter chain, next
to the chain a datatrove user would write for the same heuristic job, at two sizes, in one run.

    python -m bench.data_filter [--seed N] [--target-bytes N] [--scale N] [--repeat N] [--quick]

Ours is what `data_filter` runs: robust reader, language ID, robots.txt, language score, the four
heuristic families, quality and toxicity scoring, JSONL writer. The baseline is datatrove's
FineWeb-2-style chain: JsonlReader -> datatrove's LanguageFilter (ft176) -> Gopher repetition ->
Gopher quality -> C4 -> FineWeb quality -> JsonlWriter, each heuristic filter built for the
document's language with the same options as ours (stop words, C4 terminal punctuation). It has
no robots.txt and no classifiers, so ours does more work per document.

Both run in one process (one core) on the sample corpus's web source at `--target-bytes` (1x)
and `--scale` times that, after one untimed round at 1x that loads spaCy's per-language
tokenizers and the models (a once-per-process cost of a few seconds for both chains); the
classifiers are trained first (not timed). The calls are interleaved, best of `--repeat`. Prints
the ratio at each size and, in the note, where our chain's time goes (datatrove's per-step time).
"""

from __future__ import annotations

import argparse
import gzip
import json
import tempfile
import time
from pathlib import Path

import numpy as np
from datatrove.pipeline import filters as datatrove_filters
from datatrove.pipeline.filters import (
    C4QualityFilter,
    FineWebQualityFilter,
    GopherQualityFilter,
    GopherRepetitionFilter,
)
from datatrove.pipeline.filters.base_filter import BaseFilter
from datatrove.pipeline.readers import JsonlReader
from datatrove.pipeline.writers import JsonlWriter
from datatrove.utils.lid import FT176LID

from apertus.core.config import load_config
from apertus.data.classifiers import train_ngram_classifier
from apertus.data.config import DataConfig, resolve_source
from apertus.data.lid_models import bundled_ft176_path
from apertus.data.pipeline import filter_steps, run_pipeline
from apertus.data.quality import FAMILY_DEFAULTS, GOPHER_STOP_WORDS, word_tokenizer_available
from apertus.data.robots import snapshot_from_directory, url_host, write_snapshot
from apertus.data.sample_corpus import make_sample_corpus
from apertus.data.train_classifiers import read_labels
from bench.common import Ratio, main

FAMILIES = {
    "gopher_repetition": GopherRepetitionFilter,
    "gopher_quality": GopherQualityFilter,
    "c4": C4QualityFilter,
    "fineweb": FineWebQualityFilter,
}


class PerLanguage(BaseFilter):
    """One datatrove filter per document language, built on first sight: what a FineWeb-2 user
    runs as one chain per language. Languages without a word tokenizer pass."""

    def __init__(self, family: str):
        self.name = f"{FAMILIES[family].name} (per language)"
        super().__init__()
        self.family = family
        self.filters: dict[str, BaseFilter | None] = {}

    def _filter_for(self, language: str) -> BaseFilter | None:
        if language not in self.filters:
            options = dict(FAMILY_DEFAULTS[self.family])
            if self.family == "gopher_quality":
                words = GOPHER_STOP_WORDS.get(language)
                options["stop_words"] = list(words) if words else []
                options["min_stop_words"] = 2 if words else None
            self.filters[language] = (
                FAMILIES[self.family](language=language, **options)
                if word_tokenizer_available(language)
                else None
            )
        return self.filters[language]

    def filter(self, doc):
        inner = self._filter_for(doc.metadata["language"])
        return True if inner is None else inner.filter(doc)


class DatatroveLanguageFilter(datatrove_filters.LanguageFilter):
    """datatrove's LanguageFilter, unchanged, but for the package check: it asks for the
    `fasttext-numpy2-wheel` distribution, where the project installs `fasttext-predict`, which
    provides the same `fasttext` module and `predict`."""

    def __new__(cls, *args, **kwargs):  # skips PipelineStep's distribution check
        return object.__new__(cls)


class BundledFT176(FT176LID):
    """datatrove's ft176 model wrapper reading the same model as ours, from the wheel, instead
    of downloading it; fasttext-predict answers plain floats where datatrove expects numpy."""

    @property
    def model(self):
        if self._model is None:
            import fasttext

            self._model = _NumpyScores(fasttext.load_model(str(bundled_ft176_path())))
        return self._model


class _NumpyScores:
    def __init__(self, model) -> None:
        self.model = model

    def predict(self, text: str, k: int = 1):
        labels, scores = self.model.predict(text, k=k)
        return labels, np.asarray(scores)


def datatrove_chain(source_dir: Path, out: Path, min_score: float) -> list:
    language = DatatroveLanguageFilter(backend="ft176", language_threshold=min_score)
    language.model = BundledFT176()
    return [
        JsonlReader(str(source_dir), glob_pattern="web.jsonl.gz"),
        language,
        *(PerLanguage(family) for family in FAMILIES),
        JsonlWriter(str(out)),
    ]


def step_seconds(stats: dict) -> dict[str, float]:
    """datatrove's time per step of one run, {step name: seconds}."""
    out = {}
    for entry in stats.get("stats", []):
        timing = entry.get("time_stats")
        if isinstance(timing, dict) and timing.get("total"):
            out[entry["name"].split(": ", 1)[-1]] = timing["total"]
    return out


def web_documents(out: Path, seed: int, target_bytes: int, copies: int) -> list[dict]:
    """`copies` sample corpora of `target_bytes` (seeds seed, seed+1, ...; ids made unique), their
    web sources joined into `out/web.jsonl.gz`: more documents of the same kind, not the same
    documents again (a warm cache would favour repeats)."""
    records = []
    for k in range(copies):
        make_sample_corpus(out / str(k), seed=seed + k, target_bytes=target_bytes)
        with gzip.open(out / str(k) / "web.jsonl.gz", "rt", encoding="utf-8") as f:
            for line in f:
                record = json.loads(line)
                records.append({**record, "id": f"{k}-{record['id']}"})
    with gzip.open(out / "web.jsonl.gz", "wt", encoding="utf-8") as f:
        f.writelines(json.dumps(record, ensure_ascii=False) + "\n" for record in records)
    return records


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--seed", type=int, default=20250902)
    parser.add_argument("--target-bytes", type=int, default=2_400_000, help="the 1x size")
    parser.add_argument("--scale", type=int, default=16, help="the second size, times 1x")
    parser.add_argument("--repeat", type=int, default=2, help="best of N runs each (1x)")


def measure(args: argparse.Namespace) -> list[Ratio]:
    if args.quick:
        args.target_bytes, args.scale, args.repeat = 300_000, 2, 1

    cfg = DataConfig.from_dict(load_config()["data"])
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        classifiers: dict[str, Path] = {}
        for size, scale in (("1x", 1), (f"{args.scale}x", args.scale)):
            sample = tmp / f"sample-{size}"
            lines = web_documents(sample, args.seed, args.target_bytes, scale)
            source = resolve_source(cfg.source("web"), sample)
            docs = len(lines)
            hosts = {url_host(d["url"]) for d in lines}
            snapshot = tmp / f"snapshot-{size}.json"
            write_snapshot(snapshot, snapshot_from_directory(Path("config/robots"), hosts))
            if not classifiers:  # trained once, on the 1x sample's labels
                for spec in (cfg.quality, cfg.toxicity):
                    texts, labels = read_labels(sample / "0" / "labels" / f"{spec.task}.jsonl")
                    train_ngram_classifier(
                        texts,
                        labels,
                        tmp / spec.task,
                        seed=spec.seed,
                        epochs=spec.epochs,
                        task=spec.task,
                    )
                    classifiers[spec.task] = tmp / spec.task
            runs = 0
            best = {"ours": float("inf"), "datatrove": float("inf")}
            where: dict[str, float] = {}

            def ours(run: int, source=source, snapshot=snapshot, size=size) -> dict:
                steps = filter_steps(
                    cfg,
                    source,
                    snapshot=snapshot,
                    classifiers=classifiers,
                    output_dir=tmp / f"out-{size}-{run}",
                    funnel_dir=tmp / f"funnel-{size}-{run}",
                    job="bench",
                )
                return run_pipeline(steps, logging_dir=tmp / f"logs-ours-{size}-{run}")

            def baseline(run: int, source=source, size=size) -> dict:
                steps = datatrove_chain(
                    Path(source.path).parent, tmp / f"dt-{size}-{run}", cfg.language.min_score
                )
                return run_pipeline(steps, logging_dir=tmp / f"logs-dt-{size}-{run}")

            if scale == 1:  # the untimed warm-up round
                ours(-1), baseline(-1)
            for _ in range(args.repeat if scale == 1 else 1):
                for name, fn in (("datatrove", baseline), ("ours", ours)):
                    start = time.perf_counter()
                    stats = fn(runs)
                    seconds = time.perf_counter() - start
                    if seconds < best[name]:
                        best[name] = seconds
                        if name == "ours":
                            where = step_seconds(stats)
                    runs += 1
            total = sum(where.values()) or 1.0
            shares = ", ".join(
                f"{step} {100 * s / total:.0f}%"
                for step, s in sorted(where.items(), key=lambda kv: -kv[1])
                if s / total >= 0.02
            )
            results.append(
                Ratio(
                    f"filter chain {size} / datatrove FineWeb-2 chain",
                    docs / best["ours"],
                    docs / best["datatrove"],
                    "docs/s/core",
                    "datatrove LanguageFilter -> Gopher -> C4 -> FineWeb",
                    lower_is_better=False,
                    goal=2.0,
                    note=(
                        f"{docs} documents (sample corpus x{scale}, web source), 1 process, "
                        f"best of {args.repeat if scale == 1 else 1} after a warm-up round; ours "
                        f"also runs robots.txt and the quality and toxicity models; our time: "
                        f"{shares}"
                    ),
                )
            )
    return results


if __name__ == "__main__":
    main(add_arguments, measure, __doc__)
