"""The rehearsal's data stand-ins (`apertus.rehearsal.data.build`): byte-identical on every build,
one for every Hub data source of the 8B preset at the overlay's path, each read by the data
stage's own readers with documents and no skipped record, and the toxicity labels in the Hub
layout the classifier step reads."""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path

import pytest

from apertus.core.config import load_config
from apertus.data.config import DataConfig
from apertus.data.readers import make_reader
from apertus.data.steps import local_files, sources_of
from apertus.data.train_classifiers import read_hub_labels
from apertus.rehearsal import data
from apertus.rehearsal.overlay import STANDIN_ROOT
from tests.rehearsal.background import OVERLAY, PRESET


def tree(root: Path) -> dict[str, bytes]:
    return {
        p.relative_to(root).as_posix(): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
    """A working directory holding `rehearsal-inputs/`, as the rehearsal's Snakemake sees it."""
    root = tmp_path_factory.mktemp("rehearsal")
    data.build(root / STANDIN_ROOT)
    return root


@pytest.fixture(scope="module")
def rehearsal() -> dict:
    return load_config([PRESET, OVERLAY])


@pytest.fixture
def in_workdir(workdir, monkeypatch):
    monkeypatch.chdir(workdir)
    return workdir


def test_two_builds_are_byte_identical_and_small(workdir, tmp_path):
    again = tmp_path / "again"
    data.build(again)
    first, second = tree(workdir / STANDIN_ROOT), tree(again)
    assert list(first) == list(second)
    assert [name for name in first if first[name] != second[name]] == []
    assert sum(len(b) for b in first.values()) < 20_000_000


def test_every_hub_source_of_the_preset_has_its_stand_in_at_the_overlays_path(rehearsal):
    preset = {s["name"]: s for s in load_config([PRESET])["data"]["sources"]}
    merged = {s["name"]: s for s in rehearsal["data"]["sources"]}
    assert set(merged) == set(preset)
    for name, source in preset.items():
        assert source["path"].startswith("hf://datasets/"), name
        standin = source["path"].replace("hf://", STANDIN_ROOT, 1)
        assert merged[name]["path"] == standin, name


def test_every_source_reads_documents_through_the_filters_reader(in_workdir, rehearsal):
    cfg = DataConfig.from_dict(rehearsal["data"])
    counts = {}
    for source in sources_of(cfg, None):  # refuses a path that does not exist
        assert local_files(source), source.name
        reader = make_reader(source, limit=source.limit)
        docs = list(reader.run())
        stats = {k: getattr(v, "total", v) for k, v in reader.stats.stats.items()}
        assert not {k: v for k, v in stats.items() if k.startswith("skipped_")}, source.name
        assert all(doc.text.strip() for doc in docs), source.name
        assert {doc.metadata["source"] for doc in docs} == {source.name}
        counts[source.name] = docs
    assert all(counts.values()), {name: len(docs) for name, docs in counts.items()}
    # Most documents of every source are its own: the data stage deduplicates across sources,
    # and a source of another's copies would vanish from the corpus (the sample corpus's
    # planted duplicates may still land in two sources, as crawls overlap).
    owners = Counter(text for docs in counts.values() for text in {doc.text for doc in docs})
    for name, docs in counts.items():
        own = sum(owners[doc.text] == 1 for doc in docs)
        assert own > 0.9 * len(docs), (name, own, len(docs))

    # FineWeb-2: a language per folder (the `_removed` folders not read), several scripts.
    hints = Counter(doc.metadata["language_hint"] for doc in counts["fineweb2"])
    assert len(hints) >= 10 and {"deu_Latn", "roh_Latn", "rus_Cyrl", "ell_Grek"} <= set(hints)
    assert all("_removed" not in doc.id for doc in counts["fineweb2"])
    assert {doc.metadata["language_hint"] for doc in counts["wikipedia"]} >= {"en", "de", "rm"}
    # The templates and conversations filled from their fields.
    assert all("\n\n" in doc.text for doc in counts["europarl-de"] + counts["flan"])
    assert all(doc.text.startswith("System: ") for doc in counts["euroblocks"])
    assert all("\n\n" in doc.text for doc in counts["paradocs-fr"])
    # Long documents for the long-context mixture (over 129 tokens: far over 129 words).
    for name in ("fineweb-edu", "fineweb2-hq-top10", "gutenberg"):
        assert any(len(doc.text.split()) > 300 for doc in counts[name]), name
    # URLs for the robots.txt step, on hosts whose files the stand-ins carry.
    hosts = {doc.metadata["url"].split("/")[2] for doc in counts["fineweb2"]}
    robots = {p.stem for p in (in_workdir / rehearsal["data"]["robots"]["directory"]).iterdir()}
    assert hosts & robots


def test_toxicity_labels_read_as_the_hub_dataset(workdir, rehearsal, monkeypatch):
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    cfg = DataConfig.from_dict(rehearsal["data"])
    labels = workdir / cfg.toxicity.labels
    assert labels.is_dir() and os.listdir(labels / "data")
    texts, classes, languages = read_hub_labels(str(labels), cfg.toxicity.hub_labels)
    per_class = Counter(zip(languages, classes, strict=True))
    # Both classes in every language, languages named as the filter names documents (GlotLID).
    assert {language for language, _ in per_class} >= {"eng_Latn", "deu_Latn", "fra_Latn"}
    assert all(per_class[(language, c)] > 0 for language, _ in per_class for c in (0, 1))
    assert len(texts) == len(classes) > 100
