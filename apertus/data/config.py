"""The data section of the config, typed once at the boundary (the schema validated it already)."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any


def _build(cls, values: dict[str, Any]):
    names = {f.name for f in fields(cls)}
    return cls(**{k: v for k, v in values.items() if k in names})


@dataclass(frozen=True)
class Source:
    name: str
    reader: str
    path: str
    kind: str
    glob: str | None = None
    hf_config: str | None = None
    hf_split: str = "train"
    text_field: str = "text"
    id_field: str = "id"
    url_field: str | None = "url"
    language_field: str | None = "language"
    language: str | None = None
    limit: int = -1
    shards: int = 1

    @property
    def is_sample(self) -> bool:
        return self.path == "sample"


@dataclass(frozen=True)
class Robots:
    enabled: bool = True
    agents: tuple[str, ...] = ()
    directory: str | None = "config/robots"
    concurrency: int = 16
    timeout: float = 10.0
    cache_dir: str = "results/robots-cache"
    max_age_days: int | None = None


@dataclass(frozen=True)
class Language:
    backend: str = "ft176"
    model_path: str | None = None
    min_score: float = 0.5
    min_score_by_language: dict[str, float] = field(default_factory=dict)
    languages: tuple[str, ...] | None = None
    trust_hint_for: tuple[str, ...] = ()
    exempt_kinds: tuple[str, ...] = ()


@dataclass(frozen=True)
class Heuristics:
    families: tuple[str, ...] = ()
    languages: tuple[str, ...] | None = None
    exempt_kinds: tuple[str, ...] = ()
    options: dict[str, dict[str, Any]] = field(default_factory=dict)


@dataclass(frozen=True)
class ClassifierFilter:
    """Quality (keep the top `fraction`) or toxicity (drop the top `fraction`) per language."""

    task: str
    fraction: float
    enabled: bool = True
    backend: str = "ngram"
    apply_to_kinds: tuple[str, ...] = ("web",)
    min_documents: int = 20
    labels: str = "sample"
    epochs: int = 20
    seed: int = 1234
    encoder: str = "FacebookAI/xlm-roberta-base"
    head: str | None = None

    @property
    def score_key(self) -> str:
        return f"{self.task}_score"

    @property
    def keep(self) -> str:
        """The end of the score distribution kept: quality keeps the top, toxicity the bottom."""
        return "top" if self.task == "quality" else "bottom"


@dataclass(frozen=True)
class Dedup:
    minhash: bool = True
    ngrams: int = 5
    buckets: int = 14
    hashes_per_bucket: int = 8
    exact: bool = True


@dataclass(frozen=True)
class PII:
    kinds: tuple[str, ...] = ()
    exempt_kinds: tuple[str, ...] = ("code", "math")


def _tuple(value):
    return tuple(value) if isinstance(value, list) else value


@dataclass(frozen=True)
class DataConfig:
    sources: tuple[Source, ...]
    robots: Robots
    language: Language
    heuristics: Heuristics
    quality: ClassifierFilter
    toxicity: ClassifierFilter
    dedup: Dedup
    pii: PII
    output: str = "parquet"
    sample_seed: int = 0
    sample_target_bytes: int = 0

    @classmethod
    def from_dict(cls, cfg: dict[str, Any]) -> DataConfig:
        def typed(kind, values, **extra):
            return _build(kind, {k: _tuple(v) for k, v in {**values, **extra}.items()})

        quality = dict(cfg.get("quality", {}))
        toxicity = dict(cfg.get("toxicity", {}))
        sample = cfg.get("sample", {})
        return cls(
            sources=tuple(typed(Source, s) for s in cfg.get("sources", [])),
            robots=typed(Robots, cfg.get("robots", {})),
            language=typed(Language, cfg.get("language", {})),
            heuristics=typed(Heuristics, cfg.get("heuristics", {})),
            quality=typed(
                ClassifierFilter, quality, task="quality", fraction=quality.get("keep_fraction", 1)
            ),
            toxicity=typed(
                ClassifierFilter,
                toxicity,
                task="toxicity",
                fraction=toxicity.get("drop_fraction", 0),
            ),
            dedup=typed(Dedup, cfg.get("dedup", {})),
            pii=typed(PII, cfg.get("pii", {})),
            output=cfg.get("output", "parquet"),
            sample_seed=sample.get("seed", 0),
            sample_target_bytes=sample.get("target_bytes", 0),
        )

    def source(self, name: str) -> Source:
        for source in self.sources:
            if source.name == name:
                return source
        raise KeyError(
            f"no data source named {name!r}; configured: {[s.name for s in self.sources]}"
        )
