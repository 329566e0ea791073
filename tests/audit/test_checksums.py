"""`apertus audit PATH`: every changed, truncated, missing or extra file is caught and named."""

import hashlib
import io
import json
import os

import pytest

from apertus.audit.checksums import (
    CONTENT,
    MISSING,
    SHA256,
    SIZE,
    UNLISTED,
    HashProgress,
    audit_path,
    render_report,
)
from apertus.cli import run as cli
from apertus.core import ApertusError
from apertus.core.manifest import CONTENT_DIGEST_KEY, content_digest, write_manifest
from tests.audit.conftest import flip_byte, sha256

RELEASE_FILES = {
    "model/model.safetensors": os.urandom(3 * (1 << 20) + 7),  # crosses the 1 MiB read chunks
    "model/config.json": b'{"hidden_size": 64}\n',
    "README.md": b"# tiny model\n",
    "stages/tokenize/shards.manifest.json": b'{"stage": "tokenize"}\n',
}


@pytest.fixture
def release(tmp_path):
    folder = tmp_path / "release"
    artifacts = {}
    for rel, data in RELEASE_FILES.items():
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        (folder / rel).write_bytes(data)
        artifacts[rel] = {"sha256": hashlib.sha256(data).hexdigest(), "size": len(data)}
    manifest = {
        "release_manifest_version": 1,
        "artifacts": artifacts,
        "stages": {"tokenize/shards": {"config": {"seed": 1234}}},
    }
    manifest[CONTENT_DIGEST_KEY] = content_digest(manifest)
    (folder / "RELEASE-MANIFEST.json").write_text(json.dumps(manifest, indent=1))
    return folder


def problems(report):
    return [(f.path, f.problem) for f in report.findings]


def test_clean_release_passes_with_exit_0(release, capsys):
    report = audit_path(release)
    assert report.ok and report.kind == "release" and report.files == len(RELEASE_FILES)
    assert cli(["audit", str(release)]) == 0
    assert "OK: all 4 files match" in capsys.readouterr().out


@pytest.mark.parametrize("rel", sorted(RELEASE_FILES))
def test_one_flipped_byte_in_a_release_is_named(release, rel, capsys):
    flip_byte(release / rel)
    report = audit_path(release)
    assert problems(report) == [(rel, SHA256)]
    (finding,) = report.findings
    assert finding.expected == hashlib.sha256(RELEASE_FILES[rel]).hexdigest()
    assert finding.actual == sha256(release / rel)
    assert cli(["audit", str(release)]) == 1
    out = capsys.readouterr().out
    assert rel in out and "FAILED: 1 sha256 mismatch" in out


def test_a_changed_record_in_the_release_manifest_itself_is_named(release, capsys):
    """Not only the checksums: a changed recorded config (1234 -> 1235) breaks the manifest's
    own content digest; a manifest without the digest (older) is checked by its artifacts."""
    path = release / "RELEASE-MANIFEST.json"
    path.write_text(path.read_text().replace("1234", "1235"))
    assert problems(audit_path(release)) == [("RELEASE-MANIFEST.json", CONTENT)]
    assert cli(["audit", str(release)]) == 1
    assert "RELEASE-MANIFEST.json" in capsys.readouterr().out.split("problems:", 1)[1]
    manifest = json.loads(path.read_text())
    del manifest[CONTENT_DIGEST_KEY]
    path.write_text(json.dumps(manifest))
    assert audit_path(release).ok


def test_truncated_deleted_and_extra_release_files_are_named(release):
    weights = release / "model/model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-1])
    (release / "README.md").unlink()
    (release / "model/extra.bin").write_bytes(b"not released")
    (release / ".snakemake_timestamp").write_bytes(b"")  # Snakemake's marker: not an artifact
    (release / "model/.snakemake_timestamp").write_bytes(b"hidden")  # but not if it holds data
    report = audit_path(release)
    assert sorted(problems(report)) == [
        ("README.md", MISSING),
        ("model/.snakemake_timestamp", UNLISTED),
        ("model/extra.bin", UNLISTED),
        ("model/model.safetensors", SIZE),
    ]
    size = next(f for f in report.findings if f.problem == SIZE)
    n = len(RELEASE_FILES["model/model.safetensors"])
    assert (size.expected, size.actual) == (f"{n} bytes", f"{n - 1} bytes")


def test_json_report_lists_every_finding(release, capsys):
    (release / "README.md").unlink()
    assert cli(["audit", str(release), "--json"]) == 1
    data = json.loads(capsys.readouterr().out)
    assert data["ok"] is False and data["counts"][MISSING] == 1
    assert data["findings"][0]["path"] == "README.md"


@pytest.mark.parametrize(
    "manifest, message",
    [
        ("{not json", "not a readable release manifest"),
        ('{"artifacts": []}', "no `artifacts` mapping"),
        ('{"artifacts": {"../escape": {"sha256": "0", "size": 1}}}', "not a path inside"),
        ('{"artifacts": {"a": {"size": 1}}}', "needs `sha256`"),
    ],
)
def test_unusable_release_manifest_is_exit_2_with_the_reason(release, manifest, message, capsys):
    (release / "RELEASE-MANIFEST.json").write_text(manifest)
    with pytest.raises(ApertusError, match=message):
        audit_path(release)
    with pytest.raises(SystemExit) as exit_:
        from apertus.cli import main

        main(["audit", str(release)])
    assert exit_.value.code == 2
    assert "RELEASE-MANIFEST.json" in capsys.readouterr().err


def test_folder_with_no_manifest_at_all_is_unusable(tmp_path):
    (tmp_path / "x.txt").write_text("x")
    with pytest.raises(ApertusError, match="neither a release folder"):
        audit_path(tmp_path)
    with pytest.raises(ApertusError, match="no such directory"):
        audit_path(tmp_path / "missing")


# The tiny run: data/sample (6 files), data/robots (1), posttrain/instructions (3), plus a step
# written here with a directory output, so files inside directories are checked too.
RUN_FILES = [
    "data/sample/web.jsonl.gz",
    "data/sample/edu.jsonl.gz",
    "data/sample/code.jsonl.gz",
    "data/sample/labels/quality.jsonl",
    "data/sample/labels/toxicity.jsonl",
    "data/sample/planted.json",
    "data/robots/snapshot.json",
    "posttrain/instructions/train.jsonl",
    "posttrain/instructions/qrpo.jsonl",
    "posttrain/instructions/heldout.jsonl",
    "tokenize/shards/web/000.ds",
    "tokenize/shards/web/sub/001.ds",
]


@pytest.fixture
def run_dir(tiny_run):
    import datetime as dt

    shards = tiny_run / "tokenize/shards/web"
    (shards / "sub").mkdir(parents=True)
    (shards / "000.ds").write_bytes(os.urandom(5000))
    (shards / "sub/001.ds").write_bytes(os.urandom(3000))
    now = dt.datetime.now(dt.UTC)
    write_manifest(
        tiny_run / "tokenize/shards/web.manifest.json",
        stage="tokenize",
        step="shards:web",
        config={},
        inputs=[tiny_run / "data/sample/web.jsonl.gz"],
        outputs=[shards],
        seed=None,
        started=now,
        ended=now,
    )
    return tiny_run


def test_clean_run_dir_passes_even_after_being_moved(run_dir, capsys):
    # The fixture copied the run away from where its steps ran: paths map by the run root.
    report = audit_path(run_dir)
    assert report.ok, render_report(report)
    assert report.kind == "run" and report.files == len(RUN_FILES)
    assert len(report.groups) == 4
    assert cli(["audit", str(run_dir)]) == 0


@pytest.mark.parametrize("rel", RUN_FILES)
def test_one_flipped_byte_in_a_run_dir_is_named(run_dir, rel):
    before = sha256(run_dir / rel)
    flip_byte(run_dir / rel)
    report = audit_path(run_dir)
    assert problems(report) == [(rel, SHA256)]
    assert report.findings[0].expected == before
    assert report.findings[0].actual == sha256(run_dir / rel)


def test_truncated_deleted_and_extra_run_files_are_named(run_dir):
    train = run_dir / "posttrain/instructions/train.jsonl"
    train.write_bytes(train.read_bytes()[:100])
    (run_dir / "tokenize/shards/web/sub/001.ds").unlink()
    (run_dir / "tokenize/shards/web/sub/002.ds").write_bytes(b"sneaked in")
    (run_dir / "tokenize/shards/web/.snakemake_timestamp").write_bytes(b"")  # Snakemake's own
    report = audit_path(run_dir)
    assert sorted(problems(report)) == [
        ("posttrain/instructions/train.jsonl", SIZE),
        ("tokenize/shards/web/sub/001.ds", MISSING),
        ("tokenize/shards/web/sub/002.ds", UNLISTED),
    ]
    assert report.group("tokenize/shards/web.manifest.json").problems == 2


def test_corrupt_step_manifest_is_a_finding_not_a_crash(run_dir):
    (run_dir / "data/robots/manifest.json").write_text("{truncated")
    report = audit_path(run_dir)
    assert problems(report) == [("data/robots/manifest.json", "unreadable manifest")]


def test_progress_line_counts_bytes_and_gives_an_eta():
    stream = io.StringIO()
    progress = HashProgress(4000, stream, enabled=True)
    progress._drawn = -1e9  # draw on the first call
    progress.advance(1000)
    assert "hashed 1.0 KB of 4.0 KB (25%" in stream.getvalue() and "ETA" in stream.getvalue()
    quiet = io.StringIO()
    HashProgress(4000, quiet).advance(4000)  # a StringIO is no terminal: silent
    assert quiet.getvalue() == ""
