"""The ``data:`` section of the config as frozen dataclasses, typed once at the boundary; every
default comes from the schema (:mod:`apertus.core.typed`)."""

from __future__ import annotations

import _string  # the field-name parser str.format itself uses
import abc
import dataclasses
import os
import re
import string
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from apertus.core.config import ConfigError
from apertus.core.typed import Config
from apertus.data.probes import ProbesConfig


@dataclass(frozen=True)
class Sample(Config, key="data.sample"):
    """The sample corpus the pipeline makes itself (read by sources whose path is `sample`)."""

    seed: int
    target_bytes: int


# A parsed `text_template`: (literal text, then the field's key path or None at the end), in order.
TemplatePieces = tuple[tuple[str, tuple[str | int, ...] | None], ...]


def parse_text_template(template: str) -> TemplatePieces:
    """The pieces of a `text_template` (str.format syntax, every field naming a record field:
    `{inputs}`, `{translation[de]}`, `{conversations[0][value]}`), or ValueError saying why not.

    Positional fields (`{}`, `{0}`), attributes (`{a.b}`), conversions (`!r`) and format specs
    (`:>10`) are refused: a template only joins record fields and literal text."""
    pieces = []
    try:
        for literal, field, spec, conversion in string.Formatter().parse(template):
            if field is None:
                pieces.append((literal, None))
                continue
            first, rest = _string.formatter_field_name_split(field)
            rest = list(rest)
            if first == "" or isinstance(first, int):
                raise ValueError(
                    f"the field {{{field}}} is positional; name a record field, e.g. {{text}}"
                )
            if any(is_attribute for is_attribute, _ in rest):
                raise ValueError(
                    f"the field {{{field}}} reads an attribute; name nested keys as "
                    "{outer[inner]}"
                )
            if conversion or spec:
                raise ValueError(
                    f"the field {{{field}}} has a conversion or format spec; a template only "
                    "joins record fields and text"
                )
            pieces.append((literal, (first, *(key for _, key in rest))))
    except ValueError as e:
        message = str(e)
        if message.startswith("the field"):
            raise
        raise ValueError(f"not a str.format template ({message})") from None
    if not any(path is not None for _, path in pieces):
        raise ValueError("it names no field; name the record fields, e.g. '{title}: {text}'")
    return tuple(pieces)


@dataclass(frozen=True)
class Source(Config, key="data.sources[]"):
    name: str
    reader: str
    path: str
    kind: str
    glob: str | None
    hf_config: str | None
    hf_split: str
    text_field: str
    text_template: str | None
    id_field: str
    url_field: str | None
    language_field: str | None
    language: str | None
    language_from_path: str | None
    conversation_field: str | None
    quality_filter: bool
    limit: int
    max_line_bytes: int
    shards: int

    @property
    def is_sample(self) -> bool:
        return self.path == "sample"

    def language_from_path_problem(self) -> str | None:
        """Why `language_from_path` cannot be used (None when it is unset or usable): it must
        compile and have exactly one group, and the huggingface reader reads no files."""
        pattern = self.language_from_path
        if pattern is None:
            return None
        try:
            groups = re.compile(pattern).groups
        except re.error as e:
            return f"not a regular expression ({e})"
        if groups != 1:
            return f"it has {groups} groups; it needs exactly one, the language"
        if self.reader == "huggingface":
            return (
                "the huggingface reader reads no files; read the dataset's files with reader "
                "parquet (or jsonl) and an hf://datasets/... path"
            )
        return None

    def text_template_problem(self) -> str | None:
        """Why `text_template` cannot be used (None when it is unset or usable): it must parse
        and name a field; `text_field` is then left at its default, `conversation_field`
        unset, and the warc and paradocs readers (which make their own text) take none."""
        if self.text_template is None:
            return None
        try:
            parse_text_template(self.text_template)
        except ValueError as e:
            return str(e)
        if self.text_field != "text":
            return (
                f"text_field is {self.text_field!r} too; set one of them (the template names "
                f"the field itself: '{{{self.text_field}}}')"
            )
        if self.reader in ("warc", "paradocs"):
            return f"the {self.reader} reader makes its own text; it takes no template"
        if self.conversation_field is not None:
            return f"conversation_field is {self.conversation_field!r} too; set one of them"
        return None

    def conversation_field_problem(self) -> str | None:
        """Why `conversation_field` cannot be used (None when it is unset or usable): the
        conversation is the text, so `text_field` stays at its default, and the warc and
        paradocs readers, which make their own text, take none."""
        if self.conversation_field is None:
            return None
        if self.text_field != "text":
            return f"text_field is {self.text_field!r} too; set one of them"
        if self.reader in ("warc", "paradocs"):
            return f"the {self.reader} reader makes its own text; it reads no conversation"
        return None

    def problems(self) -> list[tuple[str, str]]:
        """(key, why it cannot be used) for each of this source's keys that cannot work."""
        found = [
            ("language_from_path", self.language_from_path_problem()),
            ("text_template", self.text_template_problem()),
            ("conversation_field", self.conversation_field_problem()),
        ]
        return [(key, problem) for key, problem in found if problem]


@dataclass(frozen=True)
class Robots(Config, key="data.robots"):
    enabled: bool
    agents: tuple[str, ...]
    reading: str
    directory: str | None
    concurrency: int
    timeout: float
    cache_dir: str
    max_age_days: int | None


@dataclass(frozen=True)
class Language(Config, key="data.language"):
    backend: str
    model_path: str | None
    min_score: float
    min_score_by_language: dict[str, float]
    trust_hint_for: tuple[str, ...]
    exempt_kinds: tuple[str, ...]
    languages: tuple[str, ...] | None


@dataclass(frozen=True)
class Heuristics(Config, key="data.heuristics"):
    families: tuple[str, ...]
    languages: tuple[str, ...] | None
    exempt_kinds: tuple[str, ...]
    options: dict[str, dict[str, Any]]


@dataclass(frozen=True)
class HubLabels(Config):
    """How a Hub dataset named by `labels: hf://datasets/<id>` becomes labelled examples."""

    split: str
    text_field: str
    label_field: str | tuple[str, ...]
    """The label column, or several score columns: label 1 when any is above `positive_above`
    (ToxicCommons scores five axes of toxicity)."""
    language_field: str | None
    positive_above: float | None
    limit: int


@dataclass(frozen=True)
class ClassifierFilter(Config, abc.ABC):
    """What the quality and toxicity filters share: a classifier scoring documents per language,
    and the end of the score distribution each keeps."""

    task: ClassVar[str]
    seed: int
    enabled: bool
    backend: str
    min_documents: int
    labels: str
    hub_labels: HubLabels
    epochs: int
    encoder: str
    head: str | None
    apply_to_kinds: tuple[str, ...]

    def __post_init__(self) -> None:
        if self.labels.startswith("hf://") and not (self.backend == "xlmr" and self.head is None):
            raise ConfigError(
                f"key 'data.{self.task}.labels' is {self.labels!r}: Hub labels train the xlmr "
                "backend's heads (backend xlmr, head null); the ngram backend reads a JSONL file"
            )

    @property
    def score_key(self) -> str:
        return f"{self.task}_score"

    @property
    def trained(self) -> bool:
        """Whether `data_classifiers` trains this filter's model: the ngram backend always, the
        xlmr backend when no `head` is given."""
        return self.enabled and (self.backend == "ngram" or self.head is None)

    @property
    def keep(self) -> str:
        """The end of the score distribution kept: quality keeps the top, toxicity the bottom."""
        return "top" if self.task == "quality" else "bottom"

    @property
    @abc.abstractmethod
    def fraction(self) -> float:
        """The share of scored documents at the far end: kept (quality) or dropped (toxicity)."""


@dataclass(frozen=True)
class QualityFilter(ClassifierFilter, key="data.quality"):
    """Keep the top `keep_fraction` of documents per language by quality score."""

    task: ClassVar[str] = "quality"
    keep_fraction: float
    languages: tuple[str, ...] | None

    @property
    def fraction(self) -> float:
        return self.keep_fraction


@dataclass(frozen=True)
class ToxicityFilter(ClassifierFilter, key="data.toxicity"):
    """Drop the top `drop_fraction` of documents per language by toxicity score."""

    task: ClassVar[str] = "toxicity"
    drop_fraction: float

    @property
    def fraction(self) -> float:
        return self.drop_fraction


@dataclass(frozen=True)
class Dedup(Config, key="data.dedup"):
    minhash: bool
    ngrams: int
    buckets: int
    hashes_per_bucket: int
    exact: bool


@dataclass(frozen=True)
class Removed(Config, key="data.removed"):
    """The seeded sample of what each filter removed (`apertus.data.funnel.RemovedSample`)."""

    per_language: int
    seed: int


@dataclass(frozen=True)
class PII(Config, key="data.pii"):
    kinds: tuple[str, ...]
    exempt_kinds: tuple[str, ...]


@dataclass(frozen=True)
class DataConfig(Config, key="data"):
    """The ``data:`` section. A step is given only the parts it reads (the rules pass e.g.
    ``{"dedup": ...}``); the others take the schema's defaults."""

    sample: Sample
    sources: tuple[Source, ...]
    robots: Robots
    language: Language
    heuristics: Heuristics
    quality: QualityFilter
    toxicity: ToxicityFilter
    dedup: Dedup
    removed: Removed
    pii: PII
    output: str
    probes: ProbesConfig

    def __post_init__(self) -> None:
        problems = [
            f"key 'data.sources[{i}].{key}' is {getattr(source, key)!r}: {problem}"
            for i, source in enumerate(self.sources)
            for key, problem in source.problems()
        ]
        if problems:
            raise ConfigError("; ".join(problems))

    def source(self, name: str) -> Source:
        for source in self.sources:
            if source.name == name:
                return source
        raise KeyError(
            f"no data source named {name!r}; configured: {[s.name for s in self.sources]}"
        )


def resolve_source(source: Source, sample_dir: str | os.PathLike[str] | None) -> Source:
    """A source whose path is `sample` reads the generated sample corpus file `<name>.jsonl.gz`."""
    if not source.is_sample:
        return source
    if sample_dir is None:
        raise ValueError(f"source {source.name!r} reads the sample corpus, but none was given")
    return dataclasses.replace(source, path=str(Path(sample_dir) / f"{source.name}.jsonl.gz"))
