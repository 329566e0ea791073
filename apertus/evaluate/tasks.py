"""lm-eval tasks made from the project's own held-out documents (RECIPE.md §8, multilingual).

The tokenization stage keeps some documents of every language out of training
(``<heldout>/<lang>.jsonl``, one ``{"id", "text", "source"}`` per line). Two kinds of lm-eval
0.4.13 tasks are built from them, one task per language and one group per kind:

``apertus_mc_<lang>`` (group ``apertus_mc``; metrics ``acc``, ``acc_norm``)
    A continuation cloze, the HellaSwag / LAMBADA idea on our own data: the context is a window
    of a held-out document ending at a word boundary, and the choices are the text that truly
    follows it and ``choices - 1`` spans of *other* held-out documents of the same language, cut
    the same way (they start after a single space and end at a whitespace). A model that reads
    the language picks the true continuation; chance is ``1 / choices``. Items are drawn with a
    seeded generator per language, round-robin over the documents, so the same held-out files
    and options give the same items whatever the order of their lines.

``apertus_ppl_<lang>`` (group ``apertus_ppl``; metrics ``word_perplexity``, ``byte_perplexity``,
``bits_per_byte``)
    ``loglikelihood_rolling`` over each held-out document, as lm-eval's ``wikitext`` task does.

The task logic lives in YAML templates shipped in ``task_templates/`` and copied into the task
directory; the builder writes the data (JSONL, named by content hash so that a rebuilt file never
meets a stale `datasets` cache entry) and per-language YAMLs that ``include:`` a template and name
their data by **absolute** path (lm-eval resolves ``dataset_kwargs.data_files`` against the
working directory), so ``lm_eval --include_path TASKDIR`` works from any directory. Moving the
task directory breaks those paths: rebuild it instead. ``dataset_path: json`` is a builder that
ships with `datasets`, so loading reaches no network (with ``HF_DATASETS_OFFLINE=1`` too).
"""

from __future__ import annotations

import dataclasses
import json
import os
import random
import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import yaml

from apertus.core import ApertusError
from apertus.core.files import (
    atomic_write_json,
    building_directory,
    read_jsonl,
    recorded_path,
    sha256_text,
)
from apertus.core.typed import Config

TEMPLATES = Path(__file__).parent / "task_templates"
MC_TEMPLATE = "_apertus_mc_template_yaml"
PPL_TEMPLATE = "_apertus_ppl_template_yaml"
MC_GROUP_TEMPLATE = "_apertus_mc_group_yaml"
PPL_GROUP_TEMPLATE = "_apertus_ppl_group_yaml"
MC_GROUP = "apertus_mc"
PPL_GROUP = "apertus_ppl"
SUMMARY_FILE = "tasks.json"

# A language names files and lm-eval tasks: keep it to what both accept.
_LANGUAGE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]*$")


def mc_task(language: str) -> str:
    return f"{MC_GROUP}_{language}"


def ppl_task(language: str) -> str:
    return f"{PPL_GROUP}_{language}"


# ---------------------------------------------------------------------------------------------
# Options


def _check_int(where: str, value: Any, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ApertusError(f"{where} must be an integer >= {minimum}, got {value!r}")


def _check_languages(where: str, value: Any) -> tuple[str, ...] | None:
    if value is None:
        return None
    if isinstance(value, str) or not isinstance(value, Sequence):
        raise ApertusError(f"{where} must be a list of language codes or null, got {value!r}")
    for language in value:
        if not isinstance(language, str) or not _LANGUAGE.match(language):
            raise ApertusError(f"{where}: {language!r} is not a language code")
    if len(set(value)) != len(value):
        raise ApertusError(f"{where} lists a language twice: {list(value)}")
    return tuple(value)


@dataclass(frozen=True)
class ClozeOptions(Config, key="evaluate.tasks.mc"):
    """How the continuation cloze (``apertus_mc_<lang>``) is built.

    languages: the languages to build, or None for every held-out language with enough
        documents (at least `choices` documents with a usable span).
    items_per_language: items per language (fewer when the documents offer fewer cuts).
    choices: answer choices per item: the true continuation and `choices - 1` distractors, each
        from a different other document of the same language.
    context_chars: the context is (about) this many characters before the cut, trimmed to
        start at a word; a cut needs this many characters before it.
    continuation_chars: every choice is at least this many characters, extended to the next
        whitespace.
    """

    languages: tuple[str, ...] | None
    items_per_language: int
    choices: int
    context_chars: int
    continuation_chars: int

    def __post_init__(self) -> None:
        object.__setattr__(
            self, "languages", _check_languages("evaluate.tasks.mc.languages", self.languages)
        )
        _check_int("evaluate.tasks.mc.items_per_language", self.items_per_language, 1)
        _check_int("evaluate.tasks.mc.choices", self.choices, 2)
        _check_int("evaluate.tasks.mc.context_chars", self.context_chars, 1)
        _check_int("evaluate.tasks.mc.continuation_chars", self.continuation_chars, 1)


@dataclass(frozen=True)
class PerplexityOptions(Config, key="evaluate.tasks.ppl"):
    """How the perplexity tasks (``apertus_ppl_<lang>``) are built.

    languages: the languages to build, or None for every held-out language.
    max_documents: at most this many documents per language (a seeded sample, kept in id
        order), or None for all.
    """

    languages: tuple[str, ...] | None
    max_documents: int | None

    def __post_init__(self) -> None:
        object.__setattr__(
            self, "languages", _check_languages("evaluate.tasks.ppl.languages", self.languages)
        )
        if self.max_documents is not None:
            _check_int("evaluate.tasks.ppl.max_documents", self.max_documents, 1)


# ---------------------------------------------------------------------------------------------
# Held-out documents


@dataclass(frozen=True)
class HeldoutDocument:
    id: str
    text: str
    source: str | None = None


@dataclass
class Heldout:
    """Held-out documents by language (each list in id order), and what was left out."""

    documents: dict[str, list[HeldoutDocument]]
    empty_documents: dict[str, int] = field(default_factory=dict)


def read_heldout(heldout_dir: str | os.PathLike) -> Heldout:
    """Read ``<heldout_dir>/<lang>.jsonl``. A line that is not a JSON object with a string
    ``id`` and ``text`` (valid Unicode), or an id seen twice in a file, is an ApertusError naming
    the file and line; blank lines are ignored; documents with only whitespace are counted in
    ``empty_documents`` and left out (nothing to predict)."""
    heldout_dir = Path(heldout_dir)
    if not heldout_dir.is_dir():
        raise ApertusError(f"held-out directory {heldout_dir} does not exist")
    files = sorted(heldout_dir.glob("*.jsonl"))
    if not files:
        raise ApertusError(f"held-out directory {heldout_dir} has no <language>.jsonl file")
    result = Heldout(documents={})
    for path in files:
        language = path.name.removesuffix(".jsonl")
        if not _LANGUAGE.match(language):
            raise ApertusError(f"{path}: {language!r} is not a language code")
        documents, empty = _read_heldout_file(path)
        result.documents[language] = sorted(documents, key=lambda d: d.id)
        if empty:
            result.empty_documents[language] = empty
    return result


def _read_heldout_file(path: Path) -> tuple[list[HeldoutDocument], int]:
    documents: list[HeldoutDocument] = []
    seen: dict[str, str] = {}
    empty = 0
    for where, row in read_jsonl(path):
        for key in ("id", "text"):
            if not isinstance(row.get(key), str):
                raise ApertusError(f"{where}: {key!r} must be a string, got {row.get(key)!r:.60}")
        try:
            row["text"].encode("utf-8")
        except UnicodeEncodeError as e:
            raise ApertusError(f"{where}: text is not valid Unicode ({e.reason})") from None
        if row["id"] in seen:
            raise ApertusError(f"{where}: id {row['id']!r} already at {seen[row['id']]}")
        seen[row["id"]] = where
        if not row["text"].strip():
            empty += 1
            continue
        source = row.get("source")
        documents.append(
            HeldoutDocument(row["id"], row["text"], source if isinstance(source, str) else None)
        )
    return documents, empty


# ---------------------------------------------------------------------------------------------
# The continuation cloze


def word_cuts(text: str) -> list[int]:
    """Positions of single spaces between two non-space characters: where a span may start
    (after the space) with the same delimiter lm-eval puts between context and choice (" ")."""
    return [
        i
        for i in range(1, len(text) - 1)
        if text[i] == " " and not text[i - 1].isspace() and not text[i + 1].isspace()
    ]


def span_after(text: str, cut: int, min_chars: int) -> str | None:
    """The text after the space at `cut`: at least `min_chars` characters, up to the next
    whitespace (or the end of the text); None when the text ends sooner."""
    start = cut + 1
    if len(text) - start < min_chars:
        return None
    end = start + min_chars
    while end < len(text) and not text[end].isspace():
        end += 1
    return text[start:end].rstrip() or None


def context_before(text: str, cut: int, chars: int) -> str:
    """About `chars` characters before `cut`, starting at a word (or at the document start)."""
    start = max(0, cut - chars)
    while 0 < start < cut and not text[start - 1].isspace():
        start += 1
    while start < cut and text[start].isspace():
        start += 1
    return text[start:cut]


@dataclass(frozen=True)
class ClozeItem:
    """One multiple-choice item; `choice_documents[k]` is the document `choices[k]` comes from
    (`document_id` for the true continuation, at index `gold`)."""

    id: str
    language: str
    document_id: str
    cut: int
    context: str
    choices: list[str]
    gold: int
    choice_documents: list[str]


def _item_cuts(doc: HeldoutDocument, options: ClozeOptions) -> list[int]:
    """Cuts with a full context window before them and a continuation after them."""
    cuts = []
    for i in word_cuts(doc.text):
        if i < options.context_chars:
            continue
        if len(context_before(doc.text, i, options.context_chars)) < options.context_chars // 2:
            continue  # one "word" longer than the window (minified code): no usable context
        if span_after(doc.text, i, options.continuation_chars) is not None:
            cuts.append(i)
    return cuts


def _span_cuts(doc: HeldoutDocument, options: ClozeOptions) -> list[int]:
    return [i for i in word_cuts(doc.text) if span_after(doc.text, i, options.continuation_chars)]


def cloze_items(
    language: str, documents: Sequence[HeldoutDocument], options: ClozeOptions, seed: int
) -> tuple[list[ClozeItem], dict[str, Any]]:
    """The cloze items of one language, and what happened: ``{"items", "documents",
    "source_documents", "skipped_items"}`` or ``{"skipped": reason, ...}`` when the language
    has fewer than `options.choices` documents with a usable span (every distractor comes from
    a different other document) or no document long enough for a context and a continuation.

    Deterministic in (`seed`, `language`, the documents as a set): documents are taken in id
    order and every draw comes from one generator seeded with both.
    """
    documents = sorted(documents, key=lambda d: d.id)
    rng = random.Random(f"apertus_mc:{seed}:{language}")
    item_cuts = {d.id: _item_cuts(d, options) for d in documents}
    span_cuts = {d.id: _span_cuts(d, options) for d in documents}
    sources = [d for d in documents if item_cuts[d.id]]
    pool = [d for d in documents if span_cuts[d.id]]
    stats: dict[str, Any] = {
        "documents": len(documents),
        "source_documents": len(sources),
        "items": 0,
        "skipped_items": 0,
    }
    if len(pool) < options.choices:
        stats["skipped"] = (
            f"{len(pool)} document(s) with a span of >= {options.continuation_chars} characters, "
            f"fewer than the {options.choices} choices need"
        )
        return [], stats
    if not sources:
        stats["skipped"] = (
            f"no document has {options.context_chars} characters of context and "
            f"{options.continuation_chars} of continuation"
        )
        return [], stats

    remaining = {d.id: rng.sample(item_cuts[d.id], len(item_cuts[d.id])) for d in sources}
    order = rng.sample(sources, len(sources))
    items: list[ClozeItem] = []
    while len(items) < options.items_per_language and any(remaining.values()):
        for doc in order:
            if len(items) == options.items_per_language:
                break
            if not remaining[doc.id]:
                continue
            cut = remaining[doc.id].pop()
            item = _cloze_item(language, doc, cut, pool, span_cuts, options, rng)
            if item is None:
                stats["skipped_items"] += 1
                continue
            items.append(dataclasses.replace(item, id=f"{language}-{len(items):04d}"))
    stats["items"] = len(items)
    return items, stats


def _cloze_item(
    language: str,
    doc: HeldoutDocument,
    cut: int,
    pool: Sequence[HeldoutDocument],
    span_cuts: dict[str, list[int]],
    options: ClozeOptions,
    rng: random.Random,
) -> ClozeItem | None:
    """An item cut at `cut` of `doc`, or None when the other documents cannot give enough
    distractors that differ from the true continuation and from each other."""
    truth = span_after(doc.text, cut, options.continuation_chars)
    assert truth is not None
    taken = {truth}
    distractors: list[tuple[str, str]] = []
    others = [d for d in pool if d.id != doc.id]
    for other in rng.sample(others, len(others)):
        starts = span_cuts[other.id]
        for i in rng.sample(starts, len(starts)):
            span = span_after(other.text, i, options.continuation_chars)
            if span is not None and span not in taken:
                taken.add(span)
                distractors.append((span, other.id))
                break
        if len(distractors) == options.choices - 1:
            break
    if len(distractors) < options.choices - 1:
        return None
    gold = rng.randrange(options.choices)
    choices = [*distractors[:gold], (truth, doc.id), *distractors[gold:]]
    return ClozeItem(
        id="",
        language=language,
        document_id=doc.id,
        cut=cut,
        context=context_before(doc.text, cut, options.context_chars),
        choices=[text for text, _ in choices],
        gold=gold,
        choice_documents=[doc_id for _, doc_id in choices],
    )


# ---------------------------------------------------------------------------------------------
# Perplexity documents


def perplexity_documents(
    language: str, documents: Sequence[HeldoutDocument], options: PerplexityOptions, seed: int
) -> list[HeldoutDocument]:
    """The documents of one language's perplexity task: all of them, or a seeded sample of
    `options.max_documents` (held-out files list documents by source, so a prefix would not do),
    in id order."""
    documents = sorted(documents, key=lambda d: d.id)
    if options.max_documents is None or len(documents) <= options.max_documents:
        return documents
    rng = random.Random(f"apertus_ppl:{seed}:{language}")
    chosen = set(rng.sample(range(len(documents)), options.max_documents))
    return [d for i, d in enumerate(documents) if i in chosen]


# ---------------------------------------------------------------------------------------------
# The task directory


def _selected(where: str, wanted: tuple[str, ...] | None, heldout: Heldout) -> list[str]:
    available = sorted(heldout.documents)
    if wanted is None:
        return available
    missing = [language for language in wanted if language not in heldout.documents]
    if missing:
        raise ApertusError(
            f"{where} names {', '.join(missing)}, not in the held-out documents "
            f"(available: {', '.join(available)})"
        )
    return list(wanted)


def _jsonl(rows: Sequence[dict[str, Any]]) -> str:
    return "".join(json.dumps(r, ensure_ascii=False, sort_keys=True) + "\n" for r in rows)


def _dump_yaml(obj: dict[str, Any]) -> str:
    return yaml.safe_dump(obj, sort_keys=False, allow_unicode=True, width=1000)


def _group_yaml(template: str, group: str, tasks: list[str]) -> str:
    config = yaml.safe_load((TEMPLATES / template).read_text(encoding="utf-8"))
    return _dump_yaml({"group": group, "task": tasks, **config})


def build_task_directory(
    heldout_dir: str | os.PathLike,
    out_dir: str | os.PathLike,
    *,
    mc: ClozeOptions | None = None,
    ppl: PerplexityOptions | None = None,
    seed: int = 1234,
) -> dict[str, Any]:
    """Build an lm-eval task directory in `out_dir` from the held-out documents.

    Writes the templates, one YAML per task and group, ``data/*.jsonl`` and ``tasks.json``
    (this summary). `out_dir` is written as a whole or not at all: it is built beside and moved
    into place, replacing an earlier task directory (one with a ``tasks.json``) or an empty
    directory; anything else is refused. Returns::

        {"mc": {"tasks": [...], "languages": {lang: stats}, "skipped_languages": {lang: why}},
         "ppl": {"tasks": [...], "languages": {lang: {"documents", "characters"}}, ...},
         "groups": [...], "empty_documents": {lang: n}, "options": {...}, "seed": seed}

    `mc` and `ppl` default to the config's (``evaluate.tasks.mc`` and ``.ppl`` of the schema).
    Raises ApertusError for bad held-out files (naming file and line), a configured language
    without held-out documents, or when no task at all can be built.
    """
    mc = ClozeOptions.from_dict({}) if mc is None else mc
    ppl = PerplexityOptions.from_dict({}) if ppl is None else ppl
    _check_int("seed", seed, 0)
    out_dir = Path(out_dir).absolute()
    heldout = read_heldout(heldout_dir)
    files: dict[str, str] = {}  # relative path -> text
    summary: dict[str, Any] = {
        # Relative to the task directory, as paths in every record of a results folder; the
        # task YAMLs name their data files absolute, as lm-eval reads them (from any directory).
        "heldout": recorded_path(heldout_dir, out_dir),
        "seed": seed,
        "options": {"mc": asdict(mc), "ppl": asdict(ppl)},
        "empty_documents": dict(heldout.empty_documents),
        "groups": [],
    }

    def add_data(task: str, rows: list[dict[str, Any]]) -> str:
        text = _jsonl(rows)
        relative = f"data/{task}.{sha256_text(text)[:12]}.jsonl"
        files[relative] = text
        return str(out_dir / relative)

    mc_summary: dict[str, Any] = {"tasks": [], "languages": {}, "skipped_languages": {}}
    for language in _selected("evaluate.tasks.mc.languages", mc.languages, heldout):
        items, stats = cloze_items(language, heldout.documents[language], mc, seed)
        if not items:
            mc_summary["skipped_languages"][language] = stats.get("skipped", "no item")
            continue
        task = mc_task(language)
        data = add_data(task, [asdict(item) for item in items])
        files[f"{task}.yaml"] = _task_yaml(MC_TEMPLATE, task, language, data)
        mc_summary["tasks"].append(task)
        mc_summary["languages"][language] = stats

    ppl_summary: dict[str, Any] = {"tasks": [], "languages": {}, "skipped_languages": {}}
    for language in _selected("evaluate.tasks.ppl.languages", ppl.languages, heldout):
        documents = perplexity_documents(language, heldout.documents[language], ppl, seed)
        if not documents:
            ppl_summary["skipped_languages"][language] = "no non-empty document"
            continue
        task = ppl_task(language)
        data = add_data(task, [asdict(d) for d in documents])
        files[f"{task}.yaml"] = _task_yaml(PPL_TEMPLATE, task, language, data)
        ppl_summary["tasks"].append(task)
        ppl_summary["languages"][language] = {
            "documents": len(documents),
            "characters": sum(len(d.text) for d in documents),
        }

    for group, template, group_template, part in (
        (MC_GROUP, MC_TEMPLATE, MC_GROUP_TEMPLATE, mc_summary),
        (PPL_GROUP, PPL_TEMPLATE, PPL_GROUP_TEMPLATE, ppl_summary),
    ):
        if part["tasks"]:
            files[template] = (TEMPLATES / template).read_text(encoding="utf-8")
            files[f"{group}.yaml"] = _group_yaml(group_template, group, part["tasks"])
            summary["groups"].append(group)
    if not summary["groups"]:
        raise ApertusError(
            f"no evaluation task could be built from {heldout_dir}: cloze skipped "
            f"{mc_summary['skipped_languages'] or 'every language'}, perplexity "
            f"{ppl_summary['skipped_languages'] or 'every language'}"
        )
    summary["mc"], summary["ppl"] = mc_summary, ppl_summary
    _publish(out_dir, files, summary)
    return summary


def _task_yaml(template: str, task: str, language: str, data_file: str) -> str:
    return _dump_yaml(
        {
            "include": template,
            "task": task,
            "task_alias": language,
            "dataset_kwargs": {"data_files": {"test": data_file}},
        }
    )


def _publish(out_dir: Path, files: dict[str, str], summary: dict[str, Any]) -> None:
    """Write `files` and the summary into a sibling directory, then swap it into `out_dir`."""
    if out_dir.exists():
        if not out_dir.is_dir():
            raise ApertusError(f"task directory {out_dir} exists and is not a directory")
        contents = [p for p in out_dir.iterdir() if not p.name.startswith(".")]
        if contents and not (out_dir / SUMMARY_FILE).is_file():
            raise ApertusError(
                f"{out_dir} is not empty and is not a task directory (no {SUMMARY_FILE}); "
                "refusing to replace it"
            )
    with building_directory(out_dir) as tmp:
        for relative, text in files.items():
            path = tmp / relative
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
        atomic_write_json(tmp / SUMMARY_FILE, summary)
