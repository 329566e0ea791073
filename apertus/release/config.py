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
    aligned_repo_id: str | None
    private: bool
    tag: str | None
    dry_run: bool
    commit_message: str | None

    def repo_for(self, model: str) -> str | None:
        """The Hub repository of a released model ("base", "aligned"): one repository per model,
        the aligned one `aligned_repo_id`, else `<repo_id>-aligned`; None without `repo_id`."""
        if model == "aligned":
            return self.aligned_repo_id or (f"{self.repo_id}-aligned" if self.repo_id else None)
        return self.repo_id


@dataclass(frozen=True)
class ReleaseConfig(Config, key="release"):
    enabled: bool
    license: str
    card: CardConfig
    hub: HubConfig
