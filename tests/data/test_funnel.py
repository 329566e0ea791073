"""The funnel: checkpoints count what passes each point; merging sums jobs and derives removals."""

import json

import pytest
from datatrove.data import Document

from apertus.data.funnel import FunnelCheckpoint, merge_funnel, plot_funnel


def docs(spec):
    return [
        Document(text="x" * n, id=f"{lang}{i}", metadata={"language": lang})
        for i, (lang, n) in enumerate(spec)
    ]


def run_checkpoint(step, job, documents, out):
    checkpoint = FunnelCheckpoint(step, out, job)
    assert list(checkpoint.run(iter(documents))) == documents  # passes everything through


def test_merge_sums_jobs_and_derives_removals(tmp_path):
    out = tmp_path / "_funnel"
    run_checkpoint("read", "web-0", docs([("de", 10), ("de", 5), ("fr", 7)]), out)
    run_checkpoint("read", "edu-0", docs([("de", 1)]), out)
    run_checkpoint("robots", "web-0", docs([("de", 10), ("fr", 7)]), out)
    run_checkpoint("robots", "edu-0", docs([("de", 1)]), out)
    run_checkpoint("written", "select", docs([("fr", 7)]), out)
    funnel = merge_funnel(sorted(out.glob("*.json")))
    assert funnel["steps"] == ["read", "robots", "written"]
    assert funnel["total"] == [
        {"step": "read", "documents": 4, "characters": 23},
        {
            "step": "robots",
            "documents": 3,
            "characters": 18,
            "removed_documents": 1,
            "removed_characters": 5,
        },
        {
            "step": "written",
            "documents": 1,
            "characters": 7,
            "removed_documents": 2,
            "removed_characters": 11,
        },
    ]
    de = {row["step"]: row for row in funnel["languages"]["de"]}
    assert de["written"]["documents"] == 0 and de["written"]["removed_documents"] == 2
    plot = tmp_path / "funnel.png"
    plot_funnel(funnel, plot)
    assert plot.read_bytes()[:4] == b"\x89PNG"


def test_documents_without_language_count_under_their_hint_or_und(tmp_path):
    out = tmp_path / "f"
    documents = [
        Document(text="ab", id="1", metadata={"language_hint": "rm"}),
        Document(text="c", id="2", metadata={}),
    ]
    run_checkpoint("read", "j", documents, out)
    data = json.loads(next(out.glob("*.json")).read_text())
    assert data["languages"] == {
        "rm": {"documents": 1, "characters": 2},
        "und": {"documents": 1, "characters": 1},
    }


def test_unknown_step_is_refused(tmp_path):
    with pytest.raises(ValueError, match="unknown funnel step 'robot'"):
        FunnelCheckpoint("robot", tmp_path, "j")


def test_records_the_reader_skipped_reach_the_funnel_per_source_and_reason(tmp_path):
    from apertus.data.config import Source
    from apertus.data.readers import make_reader

    out = tmp_path / "_funnel"
    for shard, lines in enumerate([b'{"text": "a"}\n{broken\n', b'{"text": "b"}\n{"x": 1}\n']):
        (tmp_path / f"web{shard}.jsonl").write_bytes(lines)
        src = Source.from_dict(
            {"name": "web", "reader": "jsonl", "path": str(tmp_path / f"web{shard}.jsonl")}
            | {"kind": "web"}
        )
        reader = make_reader(src)
        checkpoint = FunnelCheckpoint("read", out, f"web-{shard}", skips_of=reader)
        assert len(list(checkpoint.run(reader.run()))) == 1
    (tmp_path / "empty.jsonl").write_bytes(b"")
    src = Source.from_dict(
        {"name": "edu", "reader": "jsonl", "path": str(tmp_path / "empty.jsonl"), "kind": "edu"}
    )
    reader = make_reader(src)
    list(FunnelCheckpoint("read", out, "edu-0", skips_of=reader).run(reader.run()))
    funnel = merge_funnel(sorted(out.glob("*.json")))
    assert funnel["skipped"] == {
        "edu": {"empty_file": 1},
        "web": {"bad_json": 1, "missing_text": 1},
    }
    assert funnel["total"][0]["documents"] == 2


# --------------------------------------------------------------------------------------------------
# RemovedSample: a seeded sample of what a filter removed
# --------------------------------------------------------------------------------------------------


def removed_docs(n: int, language: str = "de") -> list[Document]:
    return [
        Document(text=f"text {i}", id=f"{language}-{i}", metadata={"language": language})
        for i in range(n)
    ]


def sampled(out, documents, *, per_language=5, seed=0, name="c4", rank=0) -> dict[str, list]:
    from apertus.data.funnel import RemovedSample

    writer = RemovedSample(out, name, per_language, seed)
    with writer:
        for document in documents:
            document.metadata.setdefault("filter_reason", f"{name}:why")
            writer.write(document, rank)
    found = {}
    for path in sorted((out / name).glob("*/*.jsonl")):
        found[path.parent.name] = [json.loads(line) for line in path.read_text().splitlines()]
    return found


def test_removed_sample_is_seeded_uniform_and_independent_of_order(tmp_path):
    import hashlib

    documents = removed_docs(200) + removed_docs(3, "fr")
    first = sampled(tmp_path / "a", documents)
    again = sampled(tmp_path / "b", list(reversed(removed_docs(200) + removed_docs(3, "fr"))))
    assert first == again  # same documents, any order: the same sample, in the same order
    assert [len(first["de"]), len(first["fr"])] == [5, 3]  # at most 5 per language
    assert {r["metadata"]["filter_reason"] for r in first["de"]} == {"c4:why"}

    # The sample is the 5 smallest blake2b(seed, filter, id), written smallest first.
    def key(i):
        text = f"0\0c4\0de-{i}".encode()
        return int.from_bytes(hashlib.blake2b(text, digest_size=8).digest(), "big")

    expected = sorted(range(200), key=key)[:5]
    assert [r["id"] for r in first["de"]] == [f"de-{i}" for i in expected]
    other_seed = sampled(tmp_path / "c", removed_docs(200), seed=1)
    assert [r["id"] for r in other_seed["de"]] != [r["id"] for r in first["de"]]


def test_removed_sample_of_zero_writes_nothing_and_reasons_default_to_the_filter(tmp_path):
    assert sampled(tmp_path / "none", removed_docs(10), per_language=0) == {}
    plain = Document(text="dup", id="d1", metadata={"language": "en"})
    (record,) = sampled(tmp_path / "dedup", [plain], name="minhash", per_language=1)["en"]
    assert record["metadata"]["filter_reason"] == "minhash:why"  # set by `sampled`
    from apertus.data.funnel import RemovedSample

    writer = RemovedSample(tmp_path / "x", "minhash", 1, 0)
    with writer:
        writer.write(Document(text="dup", id="d2", metadata={"language": "en"}))
    line = (tmp_path / "x" / "minhash" / "en" / "00000.jsonl").read_text()
    assert json.loads(line)["metadata"]["filter_reason"] == "minhash"
    with pytest.raises(ValueError, match="per_language"):
        RemovedSample(tmp_path, "c4", -1, 0)


def test_report_tables_show_skips_and_removed_samples(tmp_path):
    from apertus.report.tables import removed_samples_table, skipped_table

    run = tmp_path / "run"
    removed = run / "data" / "removed" / "filter-web-0"
    sampled(removed, removed_docs(4), name="robots", per_language=3)
    funnel = {
        "languages": {
            "de": [
                {"step": "read", "documents": 10},
                {"step": "robots", "documents": 6, "removed_documents": 4},
                {"step": "c4", "documents": 5, "removed_documents": 1},
            ]
        },
        "skipped": {"web": {"bad_json": 2}, "edu": {}},
    }
    skipped = skipped_table(funnel)
    assert skipped.rows == [["edu", "(none)", 0], ["web", "bad_json", 2]]
    table = removed_samples_table([removed], funnel, run)
    robots = [row for row in table.rows if row[0] == "robots"]
    assert len(robots) == 2  # two excerpts per filter and language
    assert robots[0][1:4] == ["de", 4, "data/removed/filter-web-0/robots/de/00000.jsonl"]
    assert robots[0][5] == "robots:why" and robots[0][6].startswith("text ")
    # A filter that removed documents without a sample is still listed, with its count.
    assert [row[:4] for row in table.rows if row[0] == "c4"] == [["c4", "de", 1, "-"]]
