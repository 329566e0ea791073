"""Step `data_probes`: plant memorization probes, random texts repeated a known number of times.

    python -m apertus.data.probes --config JSON --manifest M --output-dir DIR

Goldfish loss (RECIPE.md §2) exists to stop verbatim memorization of passages that recur in the
corpus. To see it work, the pipeline plants *probes*: texts that cannot be predicted from anything
else in the data, each repeated an exact number of times (its *exposure count*, default 1, 4, 16
and 64), and evaluation (apertus.evaluate.memorization) prompts the trained model with a probe's
beginning and compares its greedy continuation with the true rest, per exposure count, as
Hans et al. (2024, "Be like a Goldfish, Don't Memorize!") do. *Controls* are texts made the same
way but never planted (exposure 0): the baseline a model reaches without having seen the text.

A probe's text is a sequence of `words` words drawn uniformly, with replacement, from the
vocabulary of the language's sample-corpus text bank (apertus.data.sample_text): every word is
one the tokenizer knows, so probes tokenize like ordinary prose, while the order is random, so no
part of a probe can be inferred from the corpus or from the rest of the probe beyond chance.
Draws use the raw output of a PCG64 generator seeded by ``SeedSequence([seed, group, number])``
(group 0 = probes, 1 = controls), which numpy keeps identical across versions; a probe's text
depends only on the seed and its number, so adding exposure counts or controls leaves the other
texts as they were.

Outputs, in `DIR`:

- ``probes.jsonl``: one line per probe and control, ``{"probe_id", "text", "exposures",
  "language"}`` (controls have ``exposures`` 0 and ids ``control-<m>``);
- ``probes/<language>/00000.parquet``: the copies, one corpus document each (id
  ``probe-<n>-copy-<j>``, source ``probes``, kind ``probe``), with exactly the columns and types
  of the data stage's corpus files (`apertus.data.pipeline.corpus_record`). `DIR` is therefore a
  corpus directory holding one source, ``probes``, that the tokenize stage reads like any other
  (``apertus.tokenize.shards.read_corpus(DIR, "probes")``).

The copies are exact duplicates on purpose, so they are planted after filtering and
deduplication, in a directory of their own: the held-out split and the tokenizer never see them.
Their exposure counts stay exact only if the phase that trains on them takes every copy exactly
once: the ``"all"`` source weight of apertus.tokenize.phases.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from apertus.core import ApertusError
from apertus.core.files import atomic_open, atomic_write_text, read_jsonl
from apertus.core.stage import StepRun, run_main, stage_parser
from apertus.core.typed import Config

SOURCE = "probes"
KIND = "probe"
PROBES_FILE = "probes.jsonl"
CORPUS_FILE = "00000.parquet"
_PROBE_GROUP, _CONTROL_GROUP = 0, 1
_WORD = re.compile(r"\w+")


@dataclass(frozen=True)
class ProbesConfig(Config, key="data.probes"):
    """`data.probes`: how many probes to plant, how often, and how long they are."""

    enabled: bool
    exposures: tuple[int, ...]
    per_count: int
    controls: int
    words: int
    language: str
    seed: int

    def __post_init__(self) -> None:
        def positive_int(value: Any) -> bool:
            return isinstance(value, int) and not isinstance(value, bool) and value >= 1

        exposures = self.exposures
        if isinstance(exposures, list):
            exposures = tuple(exposures)
            object.__setattr__(self, "exposures", exposures)
        if (
            not isinstance(exposures, tuple)
            or not exposures
            or not all(positive_int(e) for e in exposures)
        ):
            raise ApertusError(
                f"data.probes.exposures must be a non-empty list of integers >= 1, got "
                f"{self.exposures!r}"
            )
        if len(set(exposures)) != len(exposures):
            raise ApertusError(f"data.probes.exposures has repeated counts: {list(exposures)}")
        for key in ("per_count", "controls"):
            if not positive_int(getattr(self, key)):
                raise ApertusError(
                    f"data.probes.{key} must be an integer >= 1, got {getattr(self, key)!r}"
                )
        # Fewer words would leave too few tokens for a prompt and a continuation to compare.
        if not positive_int(self.words) or self.words < 8:
            raise ApertusError(f"data.probes.words must be an integer >= 8, got {self.words!r}")
        if not isinstance(self.seed, int) or isinstance(self.seed, bool) or self.seed < 0:
            raise ApertusError(f"data.probes.seed must be an integer >= 0, got {self.seed!r}")
        if not isinstance(self.enabled, bool):
            raise ApertusError(f"data.probes.enabled must be true or false, got {self.enabled!r}")
        probe_words(self.language)  # an unknown language fails here, naming the known ones


@dataclass(frozen=True)
class Probe:
    """One probe (exposures >= 1: planted that many times) or control (exposures 0)."""

    probe_id: str
    text: str
    exposures: int
    language: str

    def to_json(self) -> dict[str, Any]:
        return {
            "probe_id": self.probe_id,
            "text": self.text,
            "exposures": self.exposures,
            "language": self.language,
        }


def probe_words(language: str) -> list[str]:
    """The word list probes draw from: every distinct lower-cased alphabetic word of the
    language's TOPICS sentences in the sample-corpus text bank, sorted (so the list, and with it
    every probe, depends only on the bank's content)."""
    from apertus.data.sample_text import BANKS

    if language not in BANKS:
        raise ApertusError(
            f"data.probes.language {language!r} has no word list; choose one of {sorted(BANKS)}"
        )
    words = {
        word.lower()
        for sentences in BANKS[language].TOPICS.values()
        for sentence in sentences
        for word in _WORD.findall(sentence)
        if word.isalpha()
    }
    return sorted(words)


def random_text(
    vocabulary: Sequence[str], words: int, *, seed: int, group: int, number: int
) -> str:
    """`words` words drawn uniformly with replacement from `vocabulary`, space-separated, ending
    with a full stop. Raw PCG64 output reduced modulo the vocabulary size: the bias is below
    len(vocabulary) / 2^64, and numpy guarantees the raw stream across versions."""
    bit_generator = np.random.PCG64(np.random.SeedSequence([seed, group, number]))
    picks = bit_generator.random_raw(words) % np.uint64(len(vocabulary))
    return " ".join(vocabulary[int(i)] for i in picks) + "."


def make_probes(cfg: ProbesConfig) -> list[Probe]:
    """The probes (for each exposure count in config order, `per_count` of them, numbered
    ``probe-0``, ``probe-1``, ...) followed by the controls (``control-0``, ...). Raises
    ApertusError if two texts coincide (with the default vocabulary and length, a chance below
    1e-200; a tiny `words` could make it happen)."""
    vocabulary = probe_words(cfg.language)
    probes: list[Probe] = []
    number = 0
    for exposures in cfg.exposures:
        for _ in range(cfg.per_count):
            text = random_text(
                vocabulary, cfg.words, seed=cfg.seed, group=_PROBE_GROUP, number=number
            )
            probes.append(Probe(f"probe-{number}", text, exposures, cfg.language))
            number += 1
    for m in range(cfg.controls):
        text = random_text(vocabulary, cfg.words, seed=cfg.seed, group=_CONTROL_GROUP, number=m)
        probes.append(Probe(f"control-{m}", text, 0, cfg.language))
    seen: dict[str, str] = {}
    for probe in probes:
        if probe.text in seen:
            raise ApertusError(
                f"data.probes: {probe.probe_id} has the same text as {seen[probe.text]}; "
                "raise data.probes.words"
            )
        seen[probe.text] = probe.probe_id
    return probes


def copy_id(probe_id: str, copy: int) -> str:
    return f"{probe_id}-copy-{copy}"


def corpus_rows(probes: Iterable[Probe]) -> list[dict[str, Any]]:
    """One corpus row per planted copy (controls have none), in the data stage's columns."""
    return [
        {
            "id": copy_id(probe.probe_id, j),
            "text": probe.text,
            "source": SOURCE,
            "kind": KIND,
            "url": None,
            "language": probe.language,
            # Probes bypass the filters: no language, quality or toxicity score was measured.
            "language_score": None,
            "quality_score": None,
            "toxicity_score": None,
        }
        for probe in probes
        for j in range(probe.exposures)
    ]


def corpus_schema():
    """The Arrow schema of the data stage's corpus files (what datatrove's ParquetWriter infers
    from `apertus.data.pipeline.corpus_record` rows), stated so that the columns of probe rows,
    whose url and scores are all null, keep their types."""
    import pyarrow as pa

    return pa.schema(
        [
            ("id", pa.string()),
            ("text", pa.string()),
            ("source", pa.string()),
            ("kind", pa.string()),
            ("url", pa.string()),
            ("language", pa.string()),
            ("language_score", pa.float64()),
            ("quality_score", pa.float64()),
            ("toxicity_score", pa.float64()),
        ]
    )


def read_probes(path: Path) -> list[Probe]:
    """Probes and controls from a ``probes.jsonl``; ApertusError naming the file and line for
    a malformed line or a repeated id."""
    path = Path(path)
    probes: list[Probe] = []
    ids: set[str] = set()
    for where, row in read_jsonl(path):
        probe_id, text, exposures, language = (
            row.get(k) for k in ("probe_id", "text", "exposures", "language")
        )
        if not isinstance(probe_id, str) or not probe_id:
            raise ApertusError(f"{where}: 'probe_id' must be a non-empty string")
        if not isinstance(text, str) or not text.strip():
            raise ApertusError(f"{where}: probe {probe_id!r} has no 'text'")
        if not isinstance(exposures, int) or isinstance(exposures, bool) or exposures < 0:
            raise ApertusError(f"{where}: probe {probe_id!r}: 'exposures' must be an integer >= 0")
        if not isinstance(language, str):
            raise ApertusError(f"{where}: probe {probe_id!r}: 'language' must be a string")
        if probe_id in ids:
            raise ApertusError(f"{where}: probe id {probe_id!r} appears twice")
        ids.add(probe_id)
        probes.append(Probe(probe_id, text, exposures, language))
    if not probes:
        raise ApertusError(f"probes file {path} holds no probes")
    return probes


def write_probes(probes: Sequence[Probe], out_dir: Path) -> dict[str, Any]:
    """Write ``probes.jsonl`` and the planted copies (module docstring) to `out_dir`.

    The source directory ``out_dir/probes`` must be absent or empty: a corpus file left there
    by another configuration would be planted too. Returns a summary for the manifest.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    out_dir = Path(out_dir)
    source_dir = out_dir / SOURCE
    if source_dir.exists() and any(source_dir.iterdir()):
        raise ApertusError(f"probe corpus directory {source_dir} is not empty; remove it first")
    by_language: dict[str, list[Probe]] = {}
    for probe in probes:
        by_language.setdefault(probe.language, []).append(probe)
    files = []
    for language, group in sorted(by_language.items()):
        rows = corpus_rows(group)
        if not rows:
            continue
        path = source_dir / language / CORPUS_FILE
        table = pa.Table.from_pylist(rows, schema=corpus_schema())
        with atomic_open(path, "wb") as f:
            pq.write_table(table, f)
        files.append(str(path.relative_to(out_dir)))
    atomic_write_text(
        out_dir / PROBES_FILE,
        "".join(json.dumps(p.to_json(), ensure_ascii=False) + "\n" for p in probes),
    )
    planted = [p for p in probes if p.exposures > 0]
    by_count: dict[str, int] = {}
    for p in planted:
        by_count[str(p.exposures)] = by_count.get(str(p.exposures), 0) + 1
    return {
        "probes": len(planted),
        "controls": len(probes) - len(planted),
        "copies": sum(p.exposures for p in planted),
        "probes_by_exposure": by_count,
        "words_per_probe": sorted({len(p.text.split()) for p in probes}),
        "files": files,
    }


def main(argv=None):
    parser = stage_parser("data", __doc__.splitlines()[0])
    parser.add_argument("--output-dir", type=Path, required=True)
    args = parser.parse_args(argv)
    # The rule passes the data section; a bare data.probes section is accepted too.
    section = args.config.get("probes", args.config)
    if "probes" not in args.config and not set(args.config) <= set(
        ProbesConfig.__dataclass_fields__
    ):
        raise ApertusError("--config has no 'probes' section (data.probes)")
    if not isinstance(section, dict):
        raise ApertusError("data.probes must be a mapping")
    cfg = ProbesConfig.from_dict(section)
    if not cfg.enabled:
        raise ApertusError(
            "data.probes.enabled is false: the workflow should not schedule the probes step"
        )
    with StepRun(
        "data",
        "probes",
        args.config,
        inputs=[],
        outputs=[args.output_dir / PROBES_FILE, args.output_dir / SOURCE],
        manifest=args.manifest,
        seed=cfg.seed,
    ) as step:
        step.summary.update(write_probes(make_probes(cfg), args.output_dir))


if __name__ == "__main__":
    run_main(main)
