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
