"""The Hub upload, against a local stand-in of the Hub (tests/release/hub_standin.py).

The upload runs as `python -m apertus.release.hub` in a subprocess whose environment points
huggingface_hub at the stand-in (HF_ENDPOINT), carries a fake token (HF_TOKEN) and a private
HF_HOME (no stored login), and is not offline (the test session is)."""

from __future__ import annotations

import hashlib
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from apertus.release.bundle import build_release
from tests.release.conftest import release_inputs
from tests.release.hub_standin import HubStandIn

FAKE_TOKEN = "hf_fakeTokenForTheStandIn_9f3c2a7b"
REPO_ID = "someone/apertus-fixture"
ALIGNED_REPO_ID = "someone/apertus-fixture-aligned"


@pytest.fixture
def release(run_dir, run_config, release_config) -> Path:
    build_release(release_inputs(run_dir), release_config, run_config, run_dir / "release")
    (run_dir / "release" / ".snakemake_timestamp").write_text("")
    return run_dir / "release"


def hub_env(tmp_path: Path, endpoint: str, token: str | None = FAKE_TOKEN) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if k
        not in (
            "HF_TOKEN",
            "HUGGING_FACE_HUB_TOKEN",
            "HF_HUB_OFFLINE",
            "TRANSFORMERS_OFFLINE",
            "HF_ENDPOINT",
        )
    }
    env.update(
        HF_ENDPOINT=endpoint,
        HF_HOME=str(tmp_path / "hf-home"),
        HF_HUB_DISABLE_TELEMETRY="1",
        # The stand-in speaks the legacy LFS protocol, not Xet (hub_standin.py).
        HF_HUB_DISABLE_XET="1",
    )
    if token is not None:
        env["HF_TOKEN"] = token
    return env


def upload(env: dict[str, str], *args: str | Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "apertus.release.hub", "upload", *map(str, args)],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


def release_files(folder: Path) -> dict[str, bytes]:
    return {
        p.relative_to(folder).as_posix(): p.read_bytes()
        for p in folder.rglob("*")
        if p.is_file() and not p.name.startswith(".")
    }


def token_anywhere(root: Path) -> list[Path]:
    return [p for p in root.rglob("*") if FAKE_TOKEN.encode() in _bytes(p)]


def _bytes(path: Path) -> bytes:
    """The file's bytes; none for a folder, or a file gone since the listing (the rehearsal
    writes in .snakemake/ while the tests run)."""
    try:
        return path.read_bytes()
    except (IsADirectoryError, FileNotFoundError):
        return b""


def hub_config(**changes) -> str:
    config = {"repo_id": REPO_ID, "private": True, "tag": None, "dry_run": False}
    return json.dumps(config | {"commit_message": None} | changes)


@pytest.mark.slow
def test_upload_sends_each_model_to_its_repository_in_one_tagged_commit(release, run_dir, tmp_path):
    receipt, manifest = run_dir / "release-upload.json", run_dir / "release-upload.manifest.json"
    with HubStandIn() as hub:
        proc = upload(
            hub_env(tmp_path, hub.url),
            "--config",
            hub_config(),
            "--folder",
            release,
            "--receipt",
            receipt,
            "--manifest",
            manifest,
        )
        assert proc.returncode == 0, proc.stderr
        assert sorted(hub.repos) == [REPO_ID, ALIGNED_REPO_ID]
        done = json.loads(receipt.read_text())
        for model, repo_id, entry in zip(
            ("base", "aligned"), (REPO_ID, ALIGNED_REPO_ID), done["repos"], strict=True
        ):
            repo = hub.repos[repo_id]
            assert repo.private
            assert len(repo.commits) == 1, "a model must arrive in one commit"
            # The model's folder at the root, its card included, byte for byte.
            assert repo.files == release_files(release / model)
            assert "README.md" in repo.files and "config.json" in repo.files
            assert entry["model"] == model and entry["commit"] == repo.commits[0]["oid"]
            assert repo.tags == {done["tag"]: entry["commit"]}
            assert repo.commits[0]["summary"] == f"Release {done['tag']}"
            assert sorted(f["path"] for f in entry["files"]) == sorted(repo.files)
        assert all(r["authorization"] == f"Bearer {FAKE_TOKEN}" for r in hub.requests)
        assert done["tag"].startswith("fixture-run-")
    step = json.loads(manifest.read_text())
    assert step["stage"] == "release"
    assert step["summary"]["repos"] == {r["repo_id"]: r["commit"] for r in done["repos"]}
    # The token is handed to huggingface_hub only: no file of the run, no output carries it.
    assert token_anywhere(run_dir) == []
    assert token_anywhere(tmp_path) == []
    assert FAKE_TOKEN not in proc.stdout + proc.stderr


def test_large_files_go_as_lfs_and_stale_files_are_deleted_in_the_same_commit(release, tmp_path):
    weights = release / "base" / "model.safetensors"
    with HubStandIn(lfs_threshold=1024) as hub:
        env = hub_env(tmp_path, hub.url)
        first = upload(env, "--config", hub_config(tag="first"), "--folder", release)
        assert first.returncode == 0, first.stderr
        base = hub.repos[REPO_ID]
        # Above the threshold: sent through the LFS batch API, committed by its sha256.
        sha = hashlib.sha256(weights.read_bytes()).hexdigest()
        assert weights.stat().st_size > 1024 and base.lfs["model.safetensors"] == sha
        assert base.files["model.safetensors"] == weights.read_bytes()
        assert "config.json" not in base.lfs  # small files inline
        assert any(r["method"] == "PUT" for r in hub.requests)

        # The next release no longer has a file the first one had.
        (release / "base" / "verification.json").unlink()
        second = upload(env, "--config", hub_config(tag="second"), "--folder", release)
        assert second.returncode == 0, second.stderr
        assert len(base.commits) == 2
        assert base.commits[1]["deleted"] == ["verification.json"]
        assert base.files == release_files(release / "base")
        assert hub.repos[ALIGNED_REPO_ID].commits[1]["deleted"] == []


def test_without_a_token_nothing_is_sent(release, tmp_path):
    with HubStandIn() as hub:
        proc = upload(
            hub_env(tmp_path, hub.url, token=None), "--folder", release, "--repo-id", REPO_ID
        )
        assert proc.returncode == 2
        assert "error: no Hugging Face token" in proc.stderr
        assert "Traceback" not in proc.stderr
        assert hub.requests == []


def test_an_unreachable_hub_is_named_and_nothing_is_committed(release, tmp_path):
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{s.getsockname()[1]}"
    proc = upload(hub_env(tmp_path, closed), "--folder", release, "--repo-id", REPO_ID)
    assert proc.returncode == 2
    assert f"cannot reach the Hugging Face Hub at {closed}" in proc.stderr
    assert "nothing was committed" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_dry_run_lists_the_files_and_sends_nothing(release, tmp_path):
    receipt = tmp_path / "receipt.json"
    with HubStandIn() as hub:
        proc = upload(
            hub_env(tmp_path, hub.url),
            "--folder",
            release,
            "--repo-id",
            REPO_ID,
            "--dry-run",
            "--receipt",
            receipt,
        )
        assert proc.returncode == 0, proc.stderr
        assert hub.requests == []
    listed = json.loads(receipt.read_text())
    assert listed["dry_run"]
    for model, entry in zip(("base", "aligned"), listed["repos"], strict=True):
        files = release_files(release / model)
        assert entry["commit"] is None
        assert {f["path"]: f["size"] for f in entry["files"]} == {
            k: len(v) for k, v in files.items()
        }
        for path in files:
            assert f"{entry['repo_id']}  {path}" in proc.stdout


def test_offline_mode_refuses_the_upload(release, tmp_path):
    with HubStandIn() as hub:
        env = hub_env(tmp_path, hub.url) | {"HF_HUB_OFFLINE": "1"}
        proc = upload(env, "--folder", release, "--repo-id", REPO_ID)
        assert proc.returncode == 2 and "offline mode" in proc.stderr
        assert hub.requests == []


def test_a_refused_commit_is_a_clear_error_and_leaves_the_repo_empty(release, tmp_path):
    with HubStandIn(refuse={"commit"}) as hub:
        proc = upload(hub_env(tmp_path, hub.url), "--folder", release, "--repo-id", REPO_ID)
        assert proc.returncode == 2
        assert "refused committing" in proc.stderr and "HTTP 403" in proc.stderr
        assert "nothing was committed" in proc.stderr
        assert hub.repos[REPO_ID].files == {} and hub.repos[REPO_ID].tags == {}
        assert ALIGNED_REPO_ID not in hub.repos  # stopped at the first refusal
        assert FAKE_TOKEN not in proc.stderr
