"""The filter funnel: documents and characters per language at each point of the data stage.

`FunnelCheckpoint` steps sit between the filters of a datatrove pipeline and count what passes;
`merge_funnel` sums the checkpoints of every job into one table, where the documents a filter
removed are the difference between the checkpoints before and after it. The "read" checkpoint
also carries the records its reader skipped (bad lines, empty or corrupt files), per source and
reason, which never became documents and so never appear as a removal.
"""

from __future__ import annotations

import hashlib
import heapq
import json
from collections import defaultdict
from pathlib import Path
from typing import Any

from datatrove.data import Document
from datatrove.pipeline.base import PipelineStep
from datatrove.pipeline.writers import JsonlWriter

from apertus.core.files import atomic_write_json

# The order of the checkpoints through the stage; the first is what was read.
FUNNEL_STEPS = (
    "read",
    "robots",
    "language",
    "gopher_repetition",
    "gopher_quality",
    "c4",
    "fineweb",
    "exact",
    "minhash",
    "quality",
    "toxicity",
    "written",
)


def doc_language(doc) -> str:
    return doc.metadata.get("language") or doc.metadata.get("language_hint") or "und"


class FunnelCheckpoint(PipelineStep):
    """Counts the documents and characters per language that reach this point of the pipeline.

    Given `skips_of` (the reader step right before it), it also records the reader's
    `skipped_<reason>` counters under the reader's source, once the reader is exhausted.
    """

    name = "📊 funnel"
    type = "📊 - STATS"

    def __init__(self, step: str, output_dir: str | Path, job: str, skips_of=None):
        super().__init__()
        if step not in FUNNEL_STEPS:
            raise ValueError(f"unknown funnel step {step!r}; known: {', '.join(FUNNEL_STEPS)}")
        self.step, self.output_dir, self.job = step, str(output_dir), job
        self.skips_of = skips_of

    def run(self, data, rank: int = 0, world_size: int = 1):
        counts: dict[str, list[int]] = defaultdict(lambda: [0, 0])
        for doc in data:
            entry = counts[doc_language(doc)]
            entry[0] += 1
            entry[1] += len(doc.text)
            yield doc
        checkpoint: dict[str, Any] = {
            "step": self.step,
            "languages": {
                lang: {"documents": d, "characters": c} for lang, (d, c) in counts.items()
            },
        }
        if self.skips_of is not None:
            checkpoint["skipped"] = {self.skips_of.source.name: reader_skips(self.skips_of)}
        atomic_write_json(
            Path(self.output_dir) / f"{self.step}.{self.job}.{rank:05d}.json", checkpoint
        )


class RemovedSample(JsonlWriter):
    """A seeded sample of the documents one filter removed, for people to read: pass it as the
    filter's ``exclusion_writer`` (datatrove hands it each removed document with the reason in
    ``metadata["filter_reason"]``).

    Keeps, per language, the `per_language` documents with the smallest
    ``blake2b(seed, filter, id)``: a uniform sample of what was removed that does not depend on
    the order of the data, held in memory and written when the filter finishes, smallest hash
    first, to ``<output_dir>/<filter>/<language>/<task>.jsonl`` (plain JSON Lines).
    """

    name = "🗑 removed sample"

    def __init__(self, output_dir: str | Path, filter_name: str, per_language: int, seed: int):
        if per_language < 0:
            raise ValueError(f"per_language must be >= 0, got {per_language}")
        super().__init__(
            str(Path(output_dir) / filter_name),
            output_filename="${language}/${rank}.jsonl",
            compression=None,
        )
        self.filter_name, self.per_language, self.seed = filter_name, per_language, seed
        self._kept: dict[str, list[tuple[int, str, Document]]] = defaultdict(list)
        self._rank = 0

    def _key(self, document: Document) -> int:
        text = f"{self.seed}\0{self.filter_name}\0{document.id}".encode()
        return int.from_bytes(hashlib.blake2b(text, digest_size=8).digest(), "big")

    def write(self, document: Document, rank: int = 0, **kwargs) -> None:
        if self.per_language == 0:
            return
        self._rank = rank
        document.metadata.setdefault("filter_reason", self.filter_name)  # dedup gives none
        language = doc_language(document)
        heap = self._kept[language]  # a max-heap on the key (negated) of the kept documents
        item = (-self._key(document), str(document.id), document)
        if len(heap) < self.per_language:
            heapq.heappush(heap, item)
        elif item[:2] > heap[0][:2]:
            heapq.heapreplace(heap, item)

    def close(self) -> None:
        kept, self._kept = self._kept, defaultdict(list)
        for language, heap in sorted(kept.items()):
            for _, _, document in sorted(heap, key=lambda item: item[:2], reverse=True):
                document.metadata["language"] = language
                super().write(document, self._rank)
        super().close()


def reader_skips(reader) -> dict[str, int]:
    """{reason: records} out of a reader step's `skipped_<reason>` counters."""
    return {
        name.removeprefix("skipped_"): int(getattr(value, "total", value))
        for name, value in reader.stats.stats.items()
        if name.startswith("skipped_")
    }


def merge_funnel(checkpoint_files: list[Path]) -> dict[str, Any]:
    """Sum checkpoint files into {steps, languages: {lang: [{step, documents, characters,
    removed_documents, removed_characters}]}, total: [...], skipped: {source: {reason: records}}},
    steps in FUNNEL_STEPS order."""
    sums: dict[str, dict[str, list[int]]] = defaultdict(lambda: defaultdict(lambda: [0, 0]))
    skipped: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for path in checkpoint_files:
        data = json.loads(Path(path).read_text())
        for source, reasons in data.get("skipped", {}).items():
            per_reason = skipped[source]  # listed even when its reader skipped nothing
            for reason, n in reasons.items():
                per_reason[reason] += n
        for lang, c in data["languages"].items():
            entry = sums[data["step"]][lang]
            entry[0] += c["documents"]
            entry[1] += c["characters"]
    steps = [s for s in FUNNEL_STEPS if s in sums]
    languages = sorted({lang for per_step in sums.values() for lang in per_step})

    def rows(select) -> list[dict[str, Any]]:
        out, previous = [], None
        for step in steps:
            docs = sum(sums[step][lang][0] for lang in select)
            chars = sum(sums[step][lang][1] for lang in select)
            row = {"step": step, "documents": docs, "characters": chars}
            if previous is not None:
                row["removed_documents"] = previous[0] - docs
                row["removed_characters"] = previous[1] - chars
            out.append(row)
            previous = (docs, chars)
        return out

    return {
        "steps": steps,
        "languages": {lang: rows([lang]) for lang in languages},
        "total": rows(languages),
        "skipped": {source: dict(sorted(r.items())) for source, r in sorted(skipped.items())},
    }


def plot_funnel(funnel: dict[str, Any], path: Path) -> None:
    """Documents remaining after each step, in total and per language (log scale)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = funnel["steps"]
    fig, (ax_total, ax_lang) = plt.subplots(1, 2, figsize=(14, 5))
    total = [r["documents"] for r in funnel["total"]]
    ax_total.bar(range(len(steps)), total, color="#3b6ea5")
    for i, row in enumerate(funnel["total"]):
        removed = row.get("removed_documents")
        if removed:
            ax_total.annotate(f"-{removed}", (i, total[i]), ha="center", va="bottom", fontsize=8)
    ax_total.set_title("Documents after each step (all languages)")
    ax_lang.set_prop_cycle(color=plt.cm.tab20.colors)  # distinct colours for up to 20 languages
    for lang, rows in sorted(funnel["languages"].items(), key=lambda kv: -kv[1][0]["documents"]):
        by_step = {r["step"]: r["documents"] for r in rows}
        ax_lang.plot(
            range(len(steps)), [by_step.get(s, 0) or None for s in steps], marker="o", label=lang
        )
    ax_lang.set_yscale("log")
    ax_lang.set_title("Documents after each step, per language")
    ax_lang.legend(fontsize=7, ncol=2)
    for ax in (ax_total, ax_lang):
        ax.set_xticks(range(len(steps)))
        ax.set_xticklabels(steps, rotation=45, ha="right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv=None):
    """Step `data_funnel`: merge every job's checkpoints into funnel.json and funnel.png."""
    from apertus.core.stage import StepRun, stage_parser

    parser = stage_parser("data", "Merge the filter funnel of the data stage.")
    parser.add_argument("--input-dir", type=Path, action="append", required=True)
    parser.add_argument("--json", type=Path, required=True)
    parser.add_argument("--plot", type=Path, required=True)
    args = parser.parse_args(argv)
    files = sorted(p for d in args.input_dir for p in (Path(d) / "_funnel").glob("*.json"))
    with StepRun(
        "data",
        "funnel",
        args.config,
        inputs=files,
        outputs=[args.json, args.plot],
        manifest=args.manifest,
    ) as step:
        funnel = merge_funnel(files)
        atomic_write_json(args.json, funnel)
        plot_funnel(funnel, args.plot)
        step.summary["total"] = funnel["total"]
        step.summary["skipped"] = funnel["skipped"]


if __name__ == "__main__":
    from apertus.core.stage import run_main

    run_main(main)
