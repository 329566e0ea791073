"""Composition of the data stage's datatrove pipelines, one function per Snakemake step.

    filter  per (source, shard): read -> language ID -> robots.txt -> language score ->
            heuristic quality families -> quality and toxicity scores -> JSONL per language
    dedup   per language over all sources: MinHash (datatrove's four stages) -> exact
    select  quality and toxicity thresholds per language (computed on the data) -> PII ->
            the corpus, per source and language

A `FunnelCheckpoint` follows every filter, so the funnel shows what each one removed, and a
`DocumentProgress` follows the reader of the filter and select pipelines, so their logs show
progress with an ETA.
"""

from __future__ import annotations

import json
import logging
from collections import defaultdict
from pathlib import Path
from typing import Any

from datatrove.executor import LocalPipelineExecutor
from datatrove.pipeline.readers import JsonlReader
from datatrove.pipeline.writers import JsonlWriter, ParquetWriter

from apertus.core import ApertusError
from apertus.core.progress import Progress, count_records
from apertus.data.config import DataConfig, Source
from apertus.data.funnel import FunnelCheckpoint, RemovedSample

log = logging.getLogger("apertus.data")

# Intermediate files between the steps: JSONL per language, read back with datatrove's reader.
_INTERMEDIATE = "${language}/${rank}.jsonl.gz"


def reader_documents(reader, rank: int, world_size: int) -> int | None:
    """The documents datatrove `reader` yields in task `rank` of `world_size`, where cheaply
    known, for the ETA: the records of the task's files (`count_records`: Parquet footers,
    JSON Lines newlines) less the reader's `skip`, at most its `limit`. Files on a remote
    filesystem, a Hub dataset and formats without a cheap count (WARC) give None (count and
    rate only), or the `limit` when there is one."""
    limit = getattr(reader, "limit", -1)
    total = None
    folder = getattr(reader, "data_folder", None)
    if folder is not None and folder.is_local():
        if getattr(reader, "paths_file", None):
            from datatrove.io import get_shard_from_paths_file

            files = list(get_shard_from_paths_file(reader.paths_file, rank, world_size))
        else:
            files = folder.get_shard(
                rank, world_size, recursive=reader.recursive, glob_pattern=reader.glob_pattern
            )
        total = count_records(folder.resolve_paths(files or []))
        if total is not None:
            total = max(total - getattr(reader, "skip", 0), 0)
    if limit != -1:
        total = limit if total is None else min(total, limit)
    return total


class DocumentProgress:
    """Progress of one datatrove task in documents, with an ETA (`apertus.core.progress`),
    counted right after the reader; documents pass through unchanged.

    A plain callable, not a `PipelineStep`: datatrove keeps stats only for steps, so it adds
    nothing to stats.json, the step summaries of the manifests or the funnel, and the other
    steps' stats keep their places. The total comes from `reader_documents` of `reader` (None:
    count and rate, no ETA). With several tasks each writes its own line, named by its task.
    """

    def __init__(self, what: str, reader=None) -> None:
        self.what, self.reader = what, reader

    def __repr__(self) -> str:  # the pipeline listing in datatrove's log
        return "📈 - PROGRESS: documents"

    def __call__(self, data, rank: int = 0, world_size: int = 1):
        total = None if self.reader is None else reader_documents(self.reader, rank, world_size)
        what = self.what if world_size == 1 else f"{self.what} (task {rank + 1} of {world_size})"
        with Progress(total, what, unit="documents") as progress:
            for document in data or ():
                progress.update()
                yield document


def run_pipeline(
    steps: list, *, logging_dir: Path, tasks: int = 1, workers: int = 1, **executor_options
) -> dict[str, Any]:
    """Run datatrove steps with its local executor; return the merged per-step stats."""
    executor = LocalPipelineExecutor(
        pipeline=steps,
        tasks=tasks,
        workers=min(workers, tasks),
        logging_dir=str(logging_dir),
        skip_completed=False,
        **executor_options,
    )
    executor.run()
    stats_file = Path(logging_dir) / "stats.json"
    return {"stats": json.loads(stats_file.read_text())} if stats_file.exists() else {}


def step_stats(stats: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """{step name: {counter: total}} out of datatrove's stats.json, for manifests and logs."""
    out: dict[str, dict[str, Any]] = {}
    for entry in stats.get("stats", []):
        counters = {}
        for key, value in entry.get("stats", {}).items():
            counters[key] = value.get("total", value) if isinstance(value, dict) else value
        out[entry.get("name", "?")] = counters
    return out


def removed_sample(cfg: DataConfig, removed_dir: Path | None, name: str) -> RemovedSample | None:
    """The exclusion writer of filter `name`: a seeded sample of what it removed (`data.removed`)
    under `removed_dir`; None when no directory is given or the sample size is 0."""
    if removed_dir is None or cfg.removed.per_language == 0:
        return None
    return RemovedSample(removed_dir, name, cfg.removed.per_language, cfg.removed.seed)


def filter_steps(
    cfg: DataConfig,
    source: Source,
    *,
    snapshot: Path | None,
    classifiers: dict[str, Path],
    output_dir: Path,
    funnel_dir: Path,
    job: str,
    limit: int = -1,
    removed_dir: Path | None = None,
) -> list:
    """The first pass over one source: everything that decides per document. Each filter keeps
    a sample of what it removed under `removed_dir` (`removed_sample`)."""
    from apertus.data.classifiers import ClassifierScorer
    from apertus.data.language import LanguageFilter, LanguageTagger
    from apertus.data.quality import HeuristicQualityFilter
    from apertus.data.readers import make_reader
    from apertus.data.robots import RobotsFilter

    lang = cfg.language
    reader = make_reader(source, limit=limit)
    steps: list = [
        reader,
        DocumentProgress(f"filtering {job}", reader),
        LanguageTagger(
            backend=lang.backend, model_path=lang.model_path, trust_hint_for=lang.trust_hint_for
        ),
        FunnelCheckpoint("read", funnel_dir, job, skips_of=reader),
    ]
    if cfg.robots.enabled:
        steps += [
            RobotsFilter(
                str(snapshot),
                agents=cfg.robots.agents,
                reading=cfg.robots.reading,
                exclusion_writer=removed_sample(cfg, removed_dir, "robots"),
            ),
            FunnelCheckpoint("robots", funnel_dir, job),
        ]
    steps += [
        LanguageFilter(
            min_score=lang.min_score,
            min_score_by_language=lang.min_score_by_language,
            languages=lang.languages,
            exempt_kinds=lang.exempt_kinds,
            exclusion_writer=removed_sample(cfg, removed_dir, "language"),
        ),
        FunnelCheckpoint("language", funnel_dir, job),
    ]
    for family in cfg.heuristics.families:
        steps += [
            HeuristicQualityFilter(
                family,
                languages=cfg.heuristics.languages,
                options=cfg.heuristics.options.get(family) or {},
                exempt_kinds=cfg.heuristics.exempt_kinds,
                exclusion_writer=removed_sample(cfg, removed_dir, family),
            ),
            FunnelCheckpoint(family, funnel_dir, job),
        ]
    for task in ("quality", "toxicity"):
        spec = getattr(cfg, task)
        # A source that is already a quality selection is not scored (so not cut) again.
        if spec.enabled and (task != "quality" or source.quality_filter):
            steps.append(
                ClassifierScorer(
                    task,
                    spec.backend,
                    model=classifier_model(spec, classifiers.get(task)),
                    apply_to_kinds=spec.apply_to_kinds,
                    languages=getattr(spec, "languages", None),
                )
            )
    steps.append(JsonlWriter(str(output_dir), output_filename=_INTERMEDIATE))
    return steps


def classifier_model(spec, trained_dir: Path | None) -> dict[str, Any]:
    """Constructor arguments of the classifier backend."""
    if spec.backend == "ngram":
        if trained_dir is None:
            raise ApertusError(
                f"the {spec.task} ngram classifier was not trained (data_classifiers)"
            )
        return {"model_dir": str(trained_dir)}
    if spec.head:
        return {"encoder": spec.encoder, "head": spec.head}
    if trained_dir is None:
        raise ApertusError(
            f"the {spec.task} xlmr heads were not trained (data_classifiers) and "
            f"data.{spec.task}.head names none"
        )
    from apertus.data.classifiers import trained_head

    return {"encoder": spec.encoder, "head": str(trained_head(spec.task, trained_dir))}


def files_by_language(dirs: list[Path]) -> dict[str, list[Path]]:
    """Intermediate files (`<dir>/.../<language>/<rank>.jsonl.gz`) of exactly these dirs."""
    found: dict[str, list[Path]] = defaultdict(list)
    for d in dirs:
        for path in sorted(Path(d).rglob("*.jsonl.gz")):
            found[path.parent.name].append(path)
    return dict(sorted(found.items()))


def _word_tokenizer_language(language: str) -> str:
    """datatrove needs a word tokenizer for MinHash shingles; unknown codes fall back to English."""
    from datatrove.utils.word_tokenizers import load_tokenizer_assignments

    return language if language in load_tokenizer_assignments() else "en"


def exact_dedup_content(doc) -> str:
    """What counts as the same document for exact dedup: the text without outer whitespace."""
    return doc.text.strip()


def dedup_language(
    cfg: DataConfig,
    language: str,
    files: list[Path],
    *,
    output_dir: Path,
    work_dir: Path,
    funnel_dir: Path,
    workers: int,
    removed_dir: Path | None = None,
) -> dict[str, Any]:
    """Exact then MinHash dedup of one language across every source (datatrove's stages).

    Exact first: it is cheap and catches verbatim copies, so MinHash counts only near copies.
    Each pass reads the previous pass's output and the last one writes to `output_dir`.
    """
    from datatrove.pipeline.dedup import (
        MinhashDedupBuckets,
        MinhashDedupCluster,
        MinhashDedupFilter,
        MinhashDedupSignature,
    )
    from datatrove.pipeline.dedup.exact_dedup import (
        ExactDedupConfig,
        ExactDedupFilter,
        ExactDedupSignature,
        ExactFindDedups,
    )
    from datatrove.pipeline.dedup.minhash import MinhashConfig

    work_dir.mkdir(parents=True, exist_ok=True)
    listing = work_dir / "inputs.txt"
    listing.write_text("".join(f"{Path(f).resolve().relative_to('/')}\n" for f in files))
    passes = [
        name for name, on in (("exact", cfg.dedup.exact), ("minhash", cfg.dedup.minhash)) if on
    ]
    job = f"dedup-{language}"
    stats: dict[str, Any] = {}
    previous: Path | None = None  # None: the listed input files

    def reader():
        if previous is None:  # paths in the listing are relative to "/"
            return JsonlReader("/", paths_file=str(listing), add_file_path=False)
        return JsonlReader(str(previous), glob_pattern="**/*.jsonl.gz", add_file_path=False)

    for i, name in enumerate(passes):
        w = work_dir / name
        out = output_dir if i == len(passes) - 1 else w / "out"
        if name == "exact":
            exact = ExactDedupConfig(content_getter=exact_dedup_content)
            run_pipeline(
                [reader(), ExactDedupSignature(str(w / "sigs"), exact)],
                logging_dir=w / "logs" / "signatures",
            )
            run_pipeline(
                [ExactFindDedups(str(w / "sigs"), str(w / "dups"), exact)],
                logging_dir=w / "logs" / "find",
            )
            drop = ExactDedupFilter(
                str(w / "dups"), exact, exclusion_writer=removed_sample(cfg, removed_dir, name)
            )
        else:
            mh = MinhashConfig(
                n_grams=cfg.dedup.ngrams,
                num_buckets=cfg.dedup.buckets,
                hashes_per_bucket=cfg.dedup.hashes_per_bucket,
            )
            run_pipeline(
                [
                    reader(),
                    MinhashDedupSignature(str(w / "sigs"), mh, _word_tokenizer_language(language)),
                ],
                logging_dir=w / "logs" / "signatures",
            )
            run_pipeline(
                [MinhashDedupBuckets(str(w / "sigs"), str(w / "buckets"), config=mh)],
                logging_dir=w / "logs" / "buckets",
                tasks=mh.num_buckets,
                workers=workers,
            )
            run_pipeline(
                [MinhashDedupCluster(str(w / "buckets"), str(w / "remove_ids"), config=mh)],
                logging_dir=w / "logs" / "cluster",
            )
            drop = MinhashDedupFilter(
                str(w / "remove_ids"), exclusion_writer=removed_sample(cfg, removed_dir, name)
            )
        stats[name] = run_pipeline(
            [
                reader(),
                drop,
                FunnelCheckpoint(name, funnel_dir, job),
                JsonlWriter(str(out), output_filename=_INTERMEDIATE),
            ],
            logging_dir=w / "logs" / "filter",
        )
        previous = out
    if not passes:
        stats["copy"] = run_pipeline(
            [reader(), JsonlWriter(str(output_dir), output_filename=_INTERMEDIATE)],
            logging_dir=work_dir / "logs" / "copy",
        )
    return stats


def collect_scores(root: Path, score_keys: list[str]) -> dict[str, dict[str, list[float]]]:
    """Every document's scores per key and language, read from intermediate files in one pass
    (for thresholds): {score_key: {language: [scores]}}."""
    scores: dict[str, dict[str, list[float]]] = {key: defaultdict(list) for key in score_keys}
    for doc in JsonlReader(str(root), glob_pattern="**/*.jsonl.gz", add_file_path=False).run():
        language = doc.metadata.get("language", "und")
        for key in score_keys:
            value = doc.metadata.get(key)
            if value is not None:
                scores[key][language].append(float(value))
    return {key: dict(per_language) for key, per_language in scores.items()}


_CORPUS_FIELDS = (
    "source",
    "kind",
    "url",
    "language",
    "language_score",
    "quality_score",
    "toxicity_score",
)


def corpus_record(writer, doc) -> dict[str, Any]:
    """Fixed columns for the corpus files, so every Parquet file has the same schema."""
    record = {"id": doc.id, "text": doc.text}
    for key in _CORPUS_FIELDS:
        record[key] = doc.metadata.get(key)
    return record


def select_steps(
    cfg: DataConfig,
    *,
    input_root: Path,
    thresholds: dict[str, dict[str, float]],
    output_dir: Path,
    funnel_dir: Path,
    removed_dir: Path | None = None,
) -> list:
    """Quality and toxicity thresholds, PII redaction, and the corpus writer."""
    from apertus.data.classifiers import ThresholdFilter
    from apertus.data.pii import PIIFormatter

    job = "select"
    reader = JsonlReader(str(input_root), glob_pattern="**/*.jsonl.gz", add_file_path=False)
    steps: list = [reader, DocumentProgress("selecting", reader)]
    for task, reason in (("quality", "low_quality"), ("toxicity", "toxic")):
        spec = getattr(cfg, task)
        if spec.enabled:
            steps += [
                ThresholdFilter(
                    spec.score_key,
                    thresholds[task],
                    keep=spec.keep,
                    reason=reason,
                    exclusion_writer=removed_sample(cfg, removed_dir, task),
                    sample_fraction=spec.fraction if getattr(spec, "languages", None) else None,
                    seed=spec.seed,
                ),
                FunnelCheckpoint(task, funnel_dir, job),
            ]
    if cfg.pii.kinds:
        steps.append(PIIFormatter(kinds=cfg.pii.kinds, exempt_kinds=cfg.pii.exempt_kinds))
    if cfg.output == "parquet":
        writer = ParquetWriter(
            str(output_dir),
            output_filename="${source}/${language}/${rank}.parquet",
            adapter=corpus_record,
        )
    else:
        writer = JsonlWriter(
            str(output_dir),
            output_filename="${source}/${language}/${rank}.jsonl.gz",
            adapter=corpus_record,
        )
    steps += [writer, FunnelCheckpoint("written", funnel_dir, job)]
    return steps
