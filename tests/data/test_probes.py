"""Memorization probes: random texts planted an exact number of times, in the corpus layout."""

from __future__ import annotations

import json
from collections import Counter

import numpy as np
import pyarrow.parquet as pq
import pytest

from apertus.core import ApertusError
from apertus.data.probes import (
    PROBES_FILE,
    Probe,
    ProbesConfig,
    corpus_schema,
    main,
    make_probes,
    probe_words,
    random_text,
    read_probes,
    write_probes,
)
from apertus.tokenize.shards import read_corpus

SMALL = ProbesConfig.from_dict(
    {"exposures": [1, 3, 5], "per_count": 2, "controls": 3, "words": 30, "seed": 11}
)


def planted(probes):
    return [p for p in probes if p.exposures > 0]


def controls(probes):
    return [p for p in probes if p.exposures == 0]


# -- the texts -----------------------------------------------------------------------------------


def test_probes_are_deterministic_per_seed():
    assert make_probes(SMALL) == make_probes(SMALL)
    other = make_probes(ProbesConfig(**{**SMALL.__dict__, "seed": 12}))
    assert {p.probe_id for p in other} == {p.probe_id for p in make_probes(SMALL)}
    assert not {p.text for p in other} & {p.text for p in make_probes(SMALL)}


def test_a_text_depends_only_on_the_seed_and_its_number():
    base = make_probes(SMALL)
    more = make_probes(ProbesConfig(**{**SMALL.__dict__, "exposures": (1, 3, 5, 7), "controls": 5}))
    by_id = {p.probe_id: p for p in more}
    for probe in base:
        assert by_id[probe.probe_id].text == probe.text
    assert len(planted(more)) == 8 and len(controls(more)) == 5


def test_the_word_stream_is_pinned():
    # numpy guarantees PCG64's raw output across versions; this pins it together with the word
    # list, so a change of either (which would silently change every probe) is noticed.
    vocabulary = ["a", "b", "c", "d", "e", "f", "g"]
    raw = np.random.PCG64(np.random.SeedSequence([5, 0, 3])).random_raw(6)
    expected = " ".join(vocabulary[int(r % 7)] for r in raw) + "."
    assert random_text(vocabulary, 6, seed=5, group=0, number=3) == expected
    assert random_text(vocabulary, 6, seed=5, group=0, number=3) == "e c b e c e."
    assert random_text(vocabulary, 6, seed=5, group=1, number=3) != expected


def test_words_are_drawn_uniformly_from_the_language_word_list():
    vocabulary = [f"w{i}" for i in range(10)]
    counts = Counter(random_text(vocabulary, 50_000, seed=0, group=0, number=0)[:-1].split())
    assert set(counts) == set(vocabulary)
    # 5000 expected each; a binomial sd of ~67, so 4% is over 3 sd.
    assert all(abs(c - 5000) < 200 for c in counts.values()), counts
    words = set(probe_words("de"))
    assert len(words) > 500 and all(w.isalpha() and w == w.lower() for w in words)
    for probe in make_probes(
        ProbesConfig.from_dict({"language": "de", "words": 40, "per_count": 1, "controls": 1})
    ):
        assert probe.text.endswith(".") and probe.language == "de"
        assert len(probe.text[:-1].split()) == 40
        assert set(probe.text[:-1].split()) <= words


def test_texts_are_unique_and_controls_are_never_planted():
    probes = make_probes(SMALL)
    assert len({p.text for p in probes}) == len(probes)
    assert [p.probe_id for p in planted(probes)] == [f"probe-{n}" for n in range(6)]
    assert [p.probe_id for p in controls(probes)] == ["control-0", "control-1", "control-2"]
    assert [p.exposures for p in planted(probes)] == [1, 1, 3, 3, 5, 5]
    assert not {p.text for p in planted(probes)} & {p.text for p in controls(probes)}


def test_repeated_texts_are_refused():
    # Two words drawn from a one-word vocabulary: every text is the same.
    with pytest.raises(ApertusError, match="same text"):
        make_probes_with_vocabulary(["only"])


def make_probes_with_vocabulary(vocabulary):
    import apertus.data.probes as probes

    original = probes.probe_words
    probes.probe_words = lambda language: vocabulary
    try:
        return make_probes(
            ProbesConfig.from_dict({"exposures": [1], "per_count": 2, "controls": 1, "words": 8})
        )
    finally:
        probes.probe_words = original


# -- the files -----------------------------------------------------------------------------------


@pytest.fixture
def written(tmp_path):
    probes = make_probes(SMALL)
    summary = write_probes(probes, tmp_path / "out")
    return probes, summary, tmp_path / "out"


def test_copies_are_exact_and_read_by_the_tokenize_stage(written):
    probes, summary, out = written
    rows = list(read_corpus(out, "probes"))
    assert list(read_corpus(out)) == rows  # probes.jsonl is not a corpus file
    assert len(rows) == summary["copies"] == 2 * (1 + 3 + 5)
    assert len({r["id"] for r in rows}) == len(rows)
    text_of = {p.probe_id: p.text for p in probes}
    copies = Counter()
    for row in rows:
        probe_id, _, copy = row["id"].rpartition("-copy-")
        assert row["text"] == text_of[probe_id]
        assert (row["source"], row["kind"], row["language"]) == ("probes", "probe", "en")
        assert row["url"] is None and row["quality_score"] is None
        assert 0 <= int(copy) < dict((p.probe_id, p.exposures) for p in probes)[probe_id]
        copies[probe_id] += 1
    assert copies == {p.probe_id: p.exposures for p in planted(probes)}
    assert summary["probes"] == 6 and summary["controls"] == 3
    assert summary["probes_by_exposure"] == {"1": 2, "3": 2, "5": 2}
    assert summary["files"] == ["probes/en/00000.parquet"]


def test_probes_file_round_trips(written):
    probes, _, out = written
    assert read_probes(out / PROBES_FILE) == probes
    lines = (out / PROBES_FILE).read_text().splitlines()
    assert set(json.loads(lines[0])) == {"probe_id", "text", "exposures", "language"}


def test_parquet_schema_is_the_data_stage_schema(written, tmp_path):
    from datatrove.data import Document
    from datatrove.pipeline.writers import ParquetWriter

    from apertus.data.pipeline import corpus_record

    _, _, out = written
    # What the data stage's writer produces for a document with every column filled.
    metadata = {
        "source": "web",
        "kind": "web",
        "url": "https://example.com/a",
        "language": "en",
        "language_score": 0.9,
        "quality_score": 0.5,
        "toxicity_score": 0.1,
    }
    with ParquetWriter(
        str(tmp_path / "ref"), output_filename="${rank}.parquet", adapter=corpus_record
    ) as writer:
        writer.write(Document(text="hello", id="x", metadata=metadata), rank=0)
    reference = pq.read_schema(tmp_path / "ref" / "000_00000.parquet").remove_metadata()
    ours = pq.read_schema(out / "probes" / "en" / "00000.parquet").remove_metadata()
    assert ours.equals(reference), (ours, reference)
    assert corpus_schema().equals(reference)


def test_a_non_empty_probe_directory_is_refused(written):
    probes, _, out = written
    with pytest.raises(ApertusError, match="not empty"):
        write_probes(probes, out)


def test_languages_get_their_own_directory(tmp_path):
    probes = [
        Probe("probe-0", "eins zwei drei", 2, "de"),
        Probe("probe-1", "one two three", 1, "en"),
        Probe("control-0", "uno dos", 0, "es"),
    ]
    summary = write_probes(probes, tmp_path)
    assert summary["files"] == ["probes/de/00000.parquet", "probes/en/00000.parquet"]
    assert Counter(r["language"] for r in read_corpus(tmp_path)) == {"de": 2, "en": 1}


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("{", "line 1: not valid JSON"),
        ('{"probe_id": "", "text": "a", "exposures": 1, "language": "en"}', "probe_id"),
        ('{"probe_id": "p", "text": " ", "exposures": 1, "language": "en"}', "no 'text'"),
        ('{"probe_id": "p", "text": "a", "exposures": -1, "language": "en"}', "exposures"),
        ('{"probe_id": "p", "text": "a", "exposures": true, "language": "en"}', "exposures"),
    ],
)
def test_malformed_probes_files_are_refused(tmp_path, line, message):
    (tmp_path / "p.jsonl").write_text(line + "\n")
    with pytest.raises(ApertusError, match=message):
        read_probes(tmp_path / "p.jsonl")


def test_repeated_probe_ids_are_refused(tmp_path):
    row = json.dumps({"probe_id": "p", "text": "a", "exposures": 1, "language": "en"})
    (tmp_path / "p.jsonl").write_text(row + "\n" + row + "\n")
    with pytest.raises(ApertusError, match="line 2: probe id 'p' appears twice"):
        read_probes(tmp_path / "p.jsonl")


# -- configuration and entry point ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"exposures": []}, "exposures must be"),
        ({"exposures": [1, 0]}, "exposures must be"),
        ({"exposures": [1, True]}, "exposures must be"),
        ({"exposures": [4, 4]}, "repeated"),
        ({"per_count": 0}, "per_count"),
        ({"controls": 0}, "controls"),
        ({"words": 3}, "words must be"),
        ({"language": "xx"}, "'xx' has no word list"),
        ({"seed": -1}, "seed"),
        ({"copies": 3}, r"unknown key 'data\.probes\.copies'"),
    ],
)
def test_bad_config_is_refused(values, message):
    with pytest.raises(ApertusError, match=message):
        ProbesConfig.from_dict(values)


def test_entry_point_writes_probes_and_manifest(tmp_path):
    config = {
        "probes": {
            "enabled": True,
            "exposures": [1, 2],
            "per_count": 1,
            "controls": 1,
            "words": 20,
            "language": "en",
            "seed": 3,
        }
    }
    manifest = tmp_path / "probes.manifest.json"
    main(
        [
            "--config",
            json.dumps(config),
            "--manifest",
            str(manifest),
            "--output-dir",
            str(tmp_path / "out"),
        ]
    )
    record = json.loads(manifest.read_text())
    assert record["summary"]["copies"] == 3
    assert len(read_probes(tmp_path / "out" / PROBES_FILE)) == 3
    assert len(list(read_corpus(tmp_path / "out", "probes"))) == 3
    disabled = {"probes": {**config["probes"], "enabled": False}}
    with pytest.raises(ApertusError, match="enabled is false"):
        main(
            [
                "--config",
                json.dumps(disabled),
                "--manifest",
                str(tmp_path / "m2.json"),
                "--output-dir",
                str(tmp_path / "out2"),
            ]
        )


def test_entry_point_needs_a_probes_section(tmp_path):
    with pytest.raises(ApertusError, match="no 'probes' section"):
        main(
            [
                "--config",
                json.dumps({"sources": [], "output": "parquet"}),
                "--manifest",
                str(tmp_path / "m.json"),
                "--output-dir",
                str(tmp_path / "out"),
            ]
        )
