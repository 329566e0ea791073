"""The `release:` config section, typed once at the boundary (defaults live in the schema)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class CardConfig:
    model_name: str | None = None
    languages: list[str] | None = None
    datasets: list[str] | None = None
    base_model: str | None = None
    tags: list[str] = field(default_factory=lambda: ["apertus", "multilingual", "compliant"])


@dataclass(frozen=True)
class HubConfig:
    repo_id: str | None = None
    private: bool = True
    tag: str | None = None
    dry_run: bool = False
    commit_message: str | None = None


@dataclass(frozen=True)
class ReleaseConfig:
    enabled: bool = True
    license: str = "apache-2.0"
    card: CardConfig = field(default_factory=CardConfig)
    hub: HubConfig = field(default_factory=HubConfig)

    @classmethod
    def from_dict(cls, section: dict[str, Any]) -> ReleaseConfig:
        section = dict(section)
        card = CardConfig(**section.pop("card", {}))
        hub = HubConfig(**section.pop("hub", {}))
        return cls(card=card, hub=hub, **section)
