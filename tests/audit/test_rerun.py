"""`apertus audit RUN_DIR --rerun STEP`: a recorded step started again from its manifest."""

import gzip
import json
import os
import tempfile

import pytest

from apertus.audit.checksums import audit_path
from apertus.audit.rerun import (
    DIFFERENT,
    IDENTICAL,
    WITHIN,
    _same_place,
    compare_json,
    compare_output,
    rerun_step,
)
from apertus.cli import main
from apertus.cli import run as cli
from apertus.core import ApertusError
from apertus.core.manifest import step_command
from tests.audit.conftest import flip_byte, read_json

INSTRUCTIONS = [
    "posttrain/instructions/heldout.jsonl",
    "posttrain/instructions/qrpo.jsonl",
    "posttrain/instructions/train.jsonl",
]


def verdicts(report):
    return {o.path: o.verdict for o in report.outputs}


def test_manifest_records_the_command_only_for_python_dash_m_apertus():
    argv = ["/usr/bin/python3", "-X", "utf8", "-m", "apertus.data.funnel", "--config", "{}"]
    assert step_command(argv) == ["-m", "apertus.data.funnel", "--config", "{}"]
    assert step_command(["python", "-m", "pytest", "tests"]) is None
    assert step_command(["python", "script.py", "-m", "apertus.x"]) is None
    assert step_command(["python", "-c", "import apertus"]) is None


def test_rerun_of_a_deterministic_step_is_identical_and_leaves_the_run_alone(
    tiny_run, tmp_path, capsys
):
    manifest = read_json(tiny_run / "posttrain/instructions.manifest.json")
    assert manifest["command"][:2] == ["-m", "apertus.posttrain.instructions"]
    before = sorted(p for p in tiny_run.rglob("*"))
    scratch = tmp_path / "scratch"
    report = rerun_step(tiny_run, "posttrain/instructions", scratch)
    assert report.ok and verdicts(report) == dict.fromkeys(INSTRUCTIONS, IDENTICAL)
    # Outputs and the manifest went to the scratch dir, nothing into the run.
    assert (scratch / "posttrain/instructions.manifest.json").is_file()
    assert (scratch / "posttrain/instructions/train.jsonl").is_file()
    assert sorted(p for p in tiny_run.rglob("*")) == before and audit_path(tiny_run).ok

    scratch = tmp_path / "cli"
    assert (
        cli(
            ["audit", str(tiny_run), "--rerun", "posttrain/instructions", "--scratch", str(scratch)]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "verdict: OK: 3 identical" in out and "rtol 1e-06" in out


def test_corrupted_output_is_different_in_the_rerun(tiny_run, tmp_path, capsys):
    flip_byte(tiny_run / "posttrain/instructions/qrpo.jsonl")
    report = rerun_step(tiny_run, "posttrain/instructions", tmp_path / "scratch")
    assert not report.ok
    assert verdicts(report) == {
        **dict.fromkeys(INSTRUCTIONS, IDENTICAL),
        "posttrain/instructions/qrpo.jsonl": DIFFERENT,
    }
    scratch = tmp_path / "cli"
    assert (
        cli(
            ["audit", str(tiny_run), "--rerun", "posttrain/instructions", "--scratch", str(scratch)]
        )
        == 1
    )
    line = next(ln for ln in capsys.readouterr().out.splitlines() if ln.startswith(INSTRUCTIONS[1]))
    assert "DIFFERENT" in line


def test_nondeterministic_timestamp_is_within_tolerance(tiny_run, tmp_path):
    # data/robots writes the time of the snapshot (`created`): the rest must match exactly.
    report = rerun_step(tiny_run, "data/robots", tmp_path / "scratch")
    (row,) = report.outputs
    assert row.path == "data/robots/snapshot.json"
    assert row.verdict in (IDENTICAL, WITHIN), row.detail
    assert report.ok


def test_changed_input_means_no_rerun(tiny_run, tmp_path, capsys, monkeypatch):
    web = tiny_run / "data/sample/web.jsonl.gz"
    web.write_bytes(gzip.compress(gzip.decompress(web.read_bytes()) + b"\n"))
    scratch = tmp_path / "scratch"
    report = rerun_step(tiny_run, "data/robots", scratch)
    assert report.status == "inputs changed" and not report.ok and not report.outputs
    changed = [i.path for i in report.inputs if i.changed]
    assert changed == ["data/sample/web.jsonl.gz"]
    assert not (scratch / "data").exists()  # nothing ran
    temp = tmp_path / "temp"
    temp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    assert cli(["audit", str(tiny_run), "--rerun", "data/robots"]) == 1
    assert "verdict: inputs changed" in capsys.readouterr().out
    assert not list(temp.iterdir())  # the scratch folder it made for nothing is gone


def test_manifest_from_before_the_command_key_cannot_be_rerun(tiny_run, capsys):
    path = tiny_run / "posttrain/instructions.manifest.json"
    manifest = read_json(path)
    del manifest["command"]
    path.write_text(json.dumps(manifest))
    with pytest.raises(ApertusError, match="recorded by an older version; cannot re-run"):
        rerun_step(tiny_run, "posttrain/instructions")
    with pytest.raises(SystemExit) as exit_:
        main(["audit", str(tiny_run), "--rerun", "posttrain/instructions"])
    assert exit_.value.code == 2
    assert "older version" in capsys.readouterr().err

    manifest["command"] = None  # the step ran inside another process (a test's main())
    path.write_text(json.dumps(manifest))
    with pytest.raises(ApertusError, match="not started as `python -m apertus"):
        rerun_step(tiny_run, "posttrain/instructions")


def test_step_selection_errors_name_the_choices(tiny_run, tmp_path):
    with pytest.raises(ApertusError, match=r"no step 'posttrain/sft'.*posttrain/instructions"):
        rerun_step(tiny_run, "posttrain/sft")
    (tmp_path / "full").mkdir()
    (tmp_path / "full/x").write_text("x")
    with pytest.raises(ApertusError, match="not empty"):
        rerun_step(tiny_run, "posttrain/instructions", tmp_path / "full")
    with pytest.raises(ApertusError, match="inside the run directory"):
        rerun_step(tiny_run, "posttrain/instructions", tiny_run / "scratch")


def test_json_comparison_tolerance_and_volatile_keys():
    assert compare_json({"loss": 1.0, "n": 3}, {"loss": 1.0 + 1e-9, "n": 3})[1] is None
    diff, problem = compare_json({"loss": 1.0}, {"loss": 1.001})
    assert problem == "loss: 1.0 vs 1.001" and diff == pytest.approx(0.001 / 1.001)
    assert compare_json({"a": [1, 2]}, {"a": [1, 2, 3]})[1] == "a: 2 items vs 3"
    assert compare_json({"a": 1}, {"a": 1, "b": 2})[1] == "b: only in the re-run"
    ignored: set[str] = set()
    assert (
        compare_json({"created": "t1", "x": 1}, {"created": "t2", "x": 1}, "", ignored)[1] is None
    )
    assert ignored == {"created"}
    assert compare_json({"text": "a"}, {"text": "b"})[1] is not None
    assert compare_json({"flag": True}, {"flag": 1})[1] is not None


def test_relative_paths_naming_the_same_place_are_the_same(tmp_path):
    """Records name paths relative to their folder: a phase re-run in the scratch directory
    names the run directory's shards by another relative path than the recorded phase.json."""
    run, scratch = tmp_path / "results" / "run", tmp_path / "scratch"
    recorded_dir, rerun_dir = run / "tokenize/phases/p", scratch / "tokenize/phases/p"
    same = _same_place(recorded_dir, rerun_dir, scratch, run)
    across = os.path.relpath(run / "tokenize/shards/web", rerun_dir)
    assert compare_json({"dir": "../../shards/web"}, {"dir": across}, "", None, same)[1] is None
    # What the re-run wrote under the scratch stands for the run directory.
    assert same("../../../pretrain/_work/x", "../../../pretrain/_work/x")
    other = compare_json({"dir": "../../shards/web"}, {"dir": "../../shards/edu"}, "", None, same)
    assert other[1] is not None
    assert not same("/abs/a", "/abs/b") and not same("text", "other text")


def test_gzip_header_and_scratch_paths_do_not_count_as_differences(tmp_path):
    recorded, rerun = tmp_path / "a.jsonl.gz", tmp_path / "b.jsonl.gz"
    text = b'{"id": 1}\n'
    recorded.write_bytes(gzip.compress(text, mtime=1))
    rerun.write_bytes(gzip.compress(text, mtime=2))
    sha = __import__("hashlib").sha256(recorded.read_bytes()).hexdigest()
    row = compare_output(recorded, sha, rerun, "a.jsonl.gz", {})
    assert (row.verdict, row.detail) == (WITHIN, "gzip header only; same content")

    recorded, rerun = tmp_path / "run.json", tmp_path / "rerun.json"
    recorded.write_text(json.dumps({"checkpoint": "/results/x/ckpt", "loss": 2.5}))
    rerun.write_text(json.dumps({"checkpoint": "/scratch/x/ckpt", "loss": 2.5}))
    sha = __import__("hashlib").sha256(recorded.read_bytes()).hexdigest()
    assert compare_output(recorded, sha, rerun, "r", {"/scratch/x": "/results/x"}).verdict == WITHIN
    assert compare_output(recorded, sha, rerun, "r", {}).verdict == DIFFERENT
    # A recorded file that no longer matches its manifest is never "within tolerance".
    assert compare_output(recorded, "0" * 64, rerun, "r", {"/scratch/x": "/results/x"}).verdict == (
        DIFFERENT
    )


def test_checkpoint_index_differs_only_in_its_path_and_save_id(tmp_path):
    """A torch.distributed.checkpoint `.metadata` records the folder it was saved to and a
    random save id: two saves of the same tensors are within tolerance, other tensors are not."""
    import hashlib

    import torch
    import torch.distributed.checkpoint as dcp

    def save(folder, shape):
        dcp.save({"w": torch.ones(shape), "b": torch.zeros(3)}, checkpoint_id=folder)
        return folder / ".metadata"

    first, again = save(tmp_path / "a", (2, 2)), save(tmp_path / "b", (2, 2))
    other = save(tmp_path / "c", (4, 1))
    assert first.read_bytes() != again.read_bytes()
    sha = hashlib.sha256(first.read_bytes()).hexdigest()
    assert compare_output(first, sha, again, ".metadata", {}).verdict == WITHIN
    assert compare_output(first, sha, other, ".metadata", {}).verdict == DIFFERENT
