"""The manifest helper: hashes that match an independent computation, atomic writes, git state."""

import datetime as dt
import hashlib
import json
import os
import subprocess

import pytest

from apertus.core import ApertusError
from apertus.core.files import atomic_write_json, atomic_write_text, sha256_file
from apertus.core.manifest import (
    KEY_PACKAGES,
    code_version,
    config_hash,
    describe_path,
    write_manifest,
)
from apertus.core.stage import StepRun, run_main


def test_sha256_file_matches_hashlib_on_multi_chunk_file(tmp_path):
    data = os.urandom(3 * (1 << 20) + 12345)  # crosses the 1 MiB read chunks
    path = tmp_path / "shard.bin"
    path.write_bytes(data)
    assert sha256_file(path) == hashlib.sha256(data).hexdigest()


def test_config_hash_ignores_key_order_but_not_values():
    a = {"lr": 1e-4, "phases": [{"name": "p1", "tokens": 10}], "seed": 1}
    b = {"seed": 1, "phases": [{"tokens": 10, "name": "p1"}], "lr": 1e-4}
    assert config_hash(a) == config_hash(b)
    assert config_hash(a) != config_hash({**a, "seed": 2})
    expected = hashlib.sha256(
        b'{"lr":0.0001,"phases":[{"name":"p1","tokens":10}],"seed":1}'
    ).hexdigest()
    assert config_hash(a) == expected


def test_directory_digest_changes_with_content_and_names(tmp_path):
    d = tmp_path / "shards"
    (d / "sub").mkdir(parents=True)
    (d / "a.ds").write_bytes(b"aaaa")
    (d / "sub" / "b.ds").write_bytes(b"bb")
    first = describe_path(d)
    assert first["size"] == 6
    assert first["files"]["sub/b.ds"]["sha256"] == hashlib.sha256(b"bb").hexdigest()

    (d / "a.ds").write_bytes(b"aaab")
    changed = describe_path(d)["sha256"]
    (d / "a.ds").write_bytes(b"aaaa")
    assert describe_path(d)["sha256"] == first["sha256"]
    (d / "a.ds").rename(d / "c.ds")
    renamed = describe_path(d)["sha256"]
    assert len({first["sha256"], changed, renamed}) == 3


def test_describe_missing_path_names_it(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"nope\.txt"):
        describe_path(tmp_path / "nope.txt")


def test_atomic_write_replaces_whole_file(tmp_path):
    path = tmp_path / "deep" / "out.json"
    atomic_write_json(path, {"a": 1})
    atomic_write_json(path, {"a": 2})
    assert json.loads(path.read_text()) == {"a": 2}
    assert sorted(p.name for p in path.parent.iterdir()) == ["out.json"]


def test_failed_atomic_write_keeps_old_file_and_leaves_no_temp(tmp_path, monkeypatch):
    path = tmp_path / "manifest.json"
    atomic_write_text(path, "old\n")

    def broken_fsync(fd):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", broken_fsync)
    with pytest.raises(OSError, match="No space"):
        atomic_write_text(path, "new and longer\n")
    assert path.read_text() == "old\n"
    assert [p.name for p in tmp_path.iterdir()] == ["manifest.json"]


def test_unserialisable_value_never_touches_disk(tmp_path):
    path = tmp_path / "m.json"
    atomic_write_json(path, {"ok": True})
    with pytest.raises(TypeError):
        atomic_write_json(path, {"bad": object()})
    assert json.loads(path.read_text()) == {"ok": True}
    assert [p.name for p in tmp_path.iterdir()] == ["m.json"]


def _git(repo, *args):
    subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True)


@pytest.fixture
def git_repo(tmp_path):
    repo = tmp_path / "checkout"
    repo.mkdir()
    _git(repo, "init", "-q")
    _git(repo, "config", "user.email", "t@example.org")
    _git(repo, "config", "user.name", "t")
    (repo / ".gitignore").write_text("results/\n")
    (repo / "code.py").write_text("x = 1\n")
    _git(repo, "add", ".")
    _git(repo, "commit", "-qm", "init")
    return repo


def test_code_version_clean_checkout(git_repo):
    head = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=git_repo, capture_output=True, text=True
    ).stdout.strip()
    version = code_version(git_repo)
    assert version["commit"] == head
    assert version["dirty"] is False


def test_ignored_outputs_do_not_make_the_checkout_dirty(git_repo):
    (git_repo / "results").mkdir()
    (git_repo / "results" / "x.bin").write_bytes(b"1")
    assert code_version(git_repo)["dirty"] is False


@pytest.mark.parametrize("change", ["modify", "untracked", "staged"])
def test_local_changes_make_the_checkout_dirty(git_repo, change):
    if change == "modify":
        (git_repo / "code.py").write_text("x = 2\n")
    elif change == "untracked":
        (git_repo / "new.py").write_text("y = 1\n")
    else:
        (git_repo / "staged.py").write_text("z = 1\n")
        _git(git_repo, "add", "staged.py")
    assert code_version(git_repo)["dirty"] is True


def test_outside_git_commit_and_dirty_are_unknown(tmp_path):
    version = code_version(tmp_path)
    assert version["commit"] is None
    assert version["dirty"] is None


def test_manifest_records_the_contract_fields(tmp_path):
    src = tmp_path / "in.txt"
    src.write_text("input")
    out = tmp_path / "out"
    out.mkdir()
    (out / "part-0.txt").write_text("output")
    manifest_path = out / "manifest.json"
    manifest_path.write_text("stale manifest from an earlier run")
    t0 = dt.datetime(2026, 1, 1, 12, 0, 0, tzinfo=dt.UTC)
    written = write_manifest(
        manifest_path,
        stage="data",
        step="filter",
        config={"k": 50},
        inputs=[src],
        outputs=[out],
        seed=7,
        started=t0,
        ended=t0 + dt.timedelta(seconds=90),
        summary={"documents": 3},
    )
    on_disk = json.loads(manifest_path.read_text())
    assert on_disk == written
    assert on_disk["stage"] == "data" and on_disk["step"] == "filter"
    assert on_disk["config"] == {"k": 50}
    assert on_disk["config_sha256"] == hashlib.sha256(b'{"k":50}').hexdigest()
    assert on_disk["inputs"][0]["sha256"] == hashlib.sha256(b"input").hexdigest()
    # the manifest never hashes itself, even inside the output directory
    assert list(on_disk["outputs"][0]["files"]) == ["part-0.txt"]
    assert on_disk["seed"] == 7
    assert on_disk["seconds"] == 90
    assert on_disk["started"] == "2026-01-01T12:00:00+00:00"
    assert on_disk["host"]
    assert set(on_disk["code"]) == {"package", "commit", "dirty"}
    assert set(on_disk["packages"]) == set(KEY_PACKAGES)
    assert on_disk["packages"]["torch"].startswith("2.13.0")
    assert on_disk["summary"] == {"documents": 3}


def test_step_run_writes_manifest_only_on_success(tmp_path):
    out = tmp_path / "out.txt"
    manifest = tmp_path / "manifest.json"
    with (
        pytest.raises(RuntimeError),
        StepRun("s", "x", {}, inputs=[], outputs=[out], manifest=manifest),
    ):
        raise RuntimeError("crash in the middle")
    assert not manifest.exists()

    with StepRun("s", "x", {"a": 1}, inputs=[], outputs=[out], manifest=manifest, seed=3) as step:
        out.write_text("done")
        step.summary["lines"] = 1
    assert json.loads(manifest.read_text())["summary"] == {"lines": 1}


def test_step_run_names_missing_inputs_and_outputs(tmp_path):
    absent = StepRun("s", "x", {}, inputs=[tmp_path / "absent.txt"], outputs=[], manifest="m")
    with pytest.raises(ApertusError, match=r"missing input.*absent\.txt"), absent:
        pass
    never = StepRun("s", "x", {}, inputs=[], outputs=[tmp_path / "never.txt"], manifest="m")
    with pytest.raises(ApertusError, match=r"without writing.*never\.txt"), never:
        pass


def test_run_main_turns_user_errors_into_one_line_and_exit_2(capsys):
    def main(argv):
        raise ApertusError("shard 00003.ds: checksum mismatch")

    with pytest.raises(SystemExit) as exit_info:
        run_main(main, [])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "error: shard 00003.ds: checksum mismatch" in err
    assert "Traceback" not in err
