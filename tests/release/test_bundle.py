"""The release folder: layout, RELEASE-MANIFEST.json, models that transformers loads, atomicity."""

from __future__ import annotations

import hashlib
import json

import pytest

from apertus.core import ApertusError
from apertus.core.files import NEW_FILE_MODE
from apertus.release.bundle import CHECKSUMS, RELEASE_MANIFEST, build_release, stage_manifests
from tests.release.conftest import release_inputs

EXPECTED_FILES = {
    "README.md",
    "SHA256SUMS",
    "base/README.md",  # each model's card: what its Hub repository shows
    "aligned/README.md",
    "data/funnel.json",
    "data/funnel.png",
    "evaluation/scores.csv",
    "evaluation/scores.md",
    "evaluation/scores.png",
    "evaluation/memorization.json",
    "evaluation/memorization.png",
    "evaluation/reward_report.json",
    "evaluation/reward_report.md",
}


def _files(folder):
    return {p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()}


def test_release_folder_holds_models_evaluation_card_and_manifest(
    run_dir, run_config, release_config, exports
):
    out = run_dir / "release"
    summary = build_release(release_inputs(run_dir), release_config, run_config, out)

    files = _files(out)
    model_files = {
        f"{sub}/{p.relative_to(exports[ck]).as_posix()}"
        for sub, ck in (("base", "ctxA"), ("aligned", "qrpo"))
        for p in exports[ck].rglob("*")
        if p.is_file() and not p.name.startswith(".")
    }
    assert {
        "base/config.json",
        "base/model.safetensors",
        "base/tokenizer.json",
        "base/verification.json",
        "aligned/model.safetensors",
    } <= model_files
    assert files == EXPECTED_FILES | model_files | {RELEASE_MANIFEST}
    # copies are byte for byte
    for sub, ck in (("base", "ctxA"), ("aligned", "qrpo")):
        assert (out / sub / "model.safetensors").read_bytes() == (
            exports[ck] / "model.safetensors"
        ).read_bytes()
    assert summary["models"] == {"base": "ctxA", "aligned": "qrpo"}
    assert not list(run_dir.glob(".release*")), "the temporary build directory is left behind"


def test_release_files_are_readable_by_others(run_dir, run_config, release_config):
    # An input written 0600 (a tool's private temporary file renamed into place) must not
    # make its copy in the release unreadable on a shared filesystem.
    (run_dir / "evaluate" / "table" / "scores.md").chmod(0o600)
    (run_dir / "export" / "qrpo" / "tokenizer.json").chmod(0o600)
    out = run_dir / "release"
    build_release(release_inputs(run_dir), release_config, run_config, out)
    modes = {rel: (out / rel).stat().st_mode & 0o777 for rel in _files(out)}
    assert modes == dict.fromkeys(modes, NEW_FILE_MODE)
    assert NEW_FILE_MODE & 0o044 == 0o044  # the test's umask lets others read
    assert all((d.stat().st_mode & 0o055) == 0o055 for d in [out, *out.rglob("*")] if d.is_dir())


def test_sha256sums_checks_the_release_with_coreutils_alone(run_dir, run_config, release_config):
    import shutil
    import subprocess

    if shutil.which("sha256sum") is None:
        pytest.skip("no sha256sum on this machine")
    out = run_dir / "release"
    build_release(release_inputs(run_dir), release_config, run_config, out)
    listed = [line.split("  ", 1)[1] for line in (out / CHECKSUMS).read_text().splitlines()]
    assert set(listed) == _files(out) - {CHECKSUMS, RELEASE_MANIFEST}
    manifest = json.loads((out / RELEASE_MANIFEST).read_text())
    assert CHECKSUMS in manifest["artifacts"]  # the manifest vouches for the checksum file
    check = subprocess.run(
        ["sha256sum", "-c", CHECKSUMS], cwd=out, capture_output=True, text=True, check=False
    )
    assert check.returncode == 0, check.stdout + check.stderr
    assert check.stdout.count(": OK") == len(listed)
    with (out / "aligned" / "config.json").open("a") as f:
        f.write(" ")
    check = subprocess.run(
        ["sha256sum", "-c", CHECKSUMS], cwd=out, capture_output=True, text=True, check=False
    )
    assert check.returncode == 1 and "aligned/config.json: FAILED" in check.stdout


def test_release_manifest_lists_every_file_with_its_sha256_and_size(
    run_dir, run_config, release_config
):
    out = run_dir / "release"
    build_release(release_inputs(run_dir), release_config, run_config, out)
    manifest = json.loads((out / RELEASE_MANIFEST).read_text())

    assert manifest["release_manifest_version"] == 1
    assert set(manifest["artifacts"]) == _files(out) - {RELEASE_MANIFEST}
    for rel, entry in manifest["artifacts"].items():
        data = (out / rel).read_bytes()
        assert entry == {"sha256": hashlib.sha256(data).hexdigest(), "size": len(data)}, rel
    assert manifest["config"] == run_config
    # The digest of everything else in the manifest, recomputed independently.
    rest = {k: v for k, v in manifest.items() if k != "content_sha256"}
    canonical = json.dumps(rest, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    assert manifest["content_sha256"] == hashlib.sha256(canonical.encode()).hexdigest()
    assert set(manifest["code"]) == {"package", "commit", "dirty"}
    assert "transformers" in manifest["packages"]
    assert set(manifest["stages"]) == {
        "export/ctxA",
        "export/qrpo",
        "evaluate/table",
        "evaluate/memorization/ctxA",
        "data/funnel",
        "data/corpus",
        "data/filtered/web/0",
        "data/robots",
        "pretrain/p1",
        "pretrain/ctxA",
        "posttrain/qrpo",
        "posttrain/reward_report",
    }  # no _work scratch, no release manifest of its own
    assert manifest["stages"]["pretrain/p1"]["summary"]["tokens_seen"] == 98765


def test_released_models_load_with_transformers(run_dir, run_config, release_config, exports):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    out = run_dir / "release"
    build_release(release_inputs(run_dir), release_config, run_config, out)
    for sub, ck in (("base", "ctxA"), ("aligned", "qrpo")):
        model = AutoModelForCausalLM.from_pretrained(out, subfolder=sub)
        reference = AutoModelForCausalLM.from_pretrained(exports[ck])
        for (name, p), (_, q) in zip(
            model.state_dict().items(), reference.state_dict().items(), strict=True
        ):
            assert torch.equal(p, q), f"{sub}: {name} differs from the export"
        tokenizer = AutoTokenizer.from_pretrained(out, subfolder=sub)
        assert tokenizer("abc")["input_ids"] == [4, 5, 6]
    base = AutoModelForCausalLM.from_pretrained(out, subfolder="base").state_dict()
    aligned = AutoModelForCausalLM.from_pretrained(out, subfolder="aligned").state_dict()
    assert any(not torch.equal(base[k], aligned[k]) for k in base), "base and aligned swapped?"


def test_failed_rebuild_leaves_the_previous_release_whole(run_dir, run_config, release_config):
    out = run_dir / "release"
    build_release(release_inputs(run_dir), release_config, run_config, out)
    before = {f: (out / f).read_bytes() for f in _files(out)}
    (run_dir / "data" / "funnel.png").unlink()
    with pytest.raises(ApertusError, match=r"funnel\.png"):
        build_release(release_inputs(run_dir), release_config, run_config, out)
    assert {f: (out / f).read_bytes() for f in _files(out)} == before
    assert not [p for p in run_dir.iterdir() if p.name.startswith(".release")]


def test_a_folder_that_is_not_an_export_is_refused(run_dir, run_config, release_config):
    (run_dir / "export" / "qrpo" / "verification.json").unlink()
    with pytest.raises(ApertusError, match=r"export/qrpo.*verification\.json"):
        build_release(release_inputs(run_dir), release_config, run_config, run_dir / "release")
    assert not (run_dir / "release").exists()


def test_release_without_post_training_has_the_base_model_only(run_dir, run_config, release_config):
    out = run_dir / "release"
    build_release(release_inputs(run_dir, aligned=False), release_config, run_config, out)
    assert not (out / "aligned").exists()
    assert not (out / "evaluation" / "reward_report.json").exists()
    card = (out / "README.md").read_text()
    assert 'repo = "base"' in card and "aligned" not in card.split("## How to use")[1]


def test_a_broken_step_manifest_is_named(run_dir):
    (run_dir / "data" / "robots" / "manifest.json").write_text("{not json")
    with pytest.raises(ApertusError, match=r"data/robots/manifest\.json"):
        stage_manifests(run_dir)
