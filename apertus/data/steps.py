"""Arguments and helpers shared by the data stage's step entry points."""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path

from apertus.core import ApertusError
from apertus.core.stage import stage_parser
from apertus.data.config import DataConfig, Source, resolve_source
from apertus.data.make_sample import SAMPLE_SOURCES


def data_parser(description: str) -> argparse.ArgumentParser:
    parser = stage_parser("data", description)
    parser.add_argument(
        "--sample-dir", type=Path, help="the sample corpus, for sources reading `sample`"
    )
    parser.add_argument("--threads", type=int, default=1, help="datatrove workers in this job")
    parser.add_argument(
        "--datatrove-logs", type=Path, required=True, help="datatrove's logging dir"
    )
    return parser


def add_removed_dir(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--removed-dir", type=Path, help="where each filter's sample of what it removed goes"
    )


def fresh_removed_dir(path: Path | None) -> list[Path]:
    """Empty `path` (a sample of an earlier run would mix with this one's); [path] for the
    step's outputs, [] when there is none."""
    if path is None:
        return []
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True)
    return [path]


def sources_of(cfg: DataConfig, sample_dir: Path | None) -> list[Source]:
    """The configured sources with `sample` paths resolved; clear errors for unreadable ones."""
    sources = []
    for source in cfg.sources:
        if source.is_sample and source.name not in SAMPLE_SOURCES:
            raise ApertusError(
                f"data source {source.name!r} reads `sample`, but the sample corpus only has "
                f"{', '.join(SAMPLE_SOURCES)}; rename the source or give it a path"
            )
        resolved = resolve_source(source, sample_dir)
        local = source.reader != "huggingface" and not resolved.path.startswith("hf://")
        if local and not Path(resolved.path).exists():
            raise ApertusError(f"data source {source.name!r}: path {resolved.path} does not exist")
        sources.append(resolved)
    return sources


def local_files(source: Source) -> list[Path]:
    """Local files a (resolved) source reads: none for the Hub, the file, or the directory's
    files matching `glob`. A path that does not exist yet (the sample corpus, before it is
    made) counts as one file."""
    if source.reader == "huggingface" or source.path.startswith("hf://"):
        return []
    path = Path(source.path)
    if path.is_dir():
        return sorted(p for p in path.glob(source.glob or "**/*") if p.is_file())
    return [path]


def source_paths(cfg: DataConfig, sample_dir: Path | None) -> list[Path]:
    """Local input files of all sources (hashed into the manifest)."""
    return [p for source in sources_of(cfg, sample_dir) for p in local_files(source)]
