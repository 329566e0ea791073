"""The `release:` config section, typed once at the boundary (defaults live in the schema)."""

from __future__ import annotations

from dataclasses import dataclass

from apertus.core.typed import Config


@dataclass(frozen=True)
class CardConfig(Config, key="release.card"):
    model_name: str | None
    languages: list[str] | None
    datasets: list[str] | None
    base_model: str | None
    tags: list[str]


@dataclass(frozen=True)
class HubConfig(Config, key="release.hub"):
    repo_id: str | None
    private: bool
    tag: str | None
    dry_run: bool
    commit_message: str | None


@dataclass(frozen=True)
class ReleaseConfig(Config, key="release"):
    enabled: bool
    license: str
    card: CardConfig
    hub: HubConfig
