"""The release of the real default run: the folder's models load, its card parses and reports
the run's own numbers, its manifest is complete; and what the release rules plan."""

from __future__ import annotations

import csv
import hashlib
import json
import shutil

import pytest
from huggingface_hub import ModelCard
from huggingface_hub.repocard import metadata_load

from apertus.release.bundle import RELEASE_MANIFEST
from tests.conftest import REPO, planned_jobs, run_tool
from tests.release.hub_standin import HubStandIn
from tests.release.test_hub import FAKE_TOKEN, hub_env, release_files, token_anywhere


@pytest.mark.slow
def test_default_run_release_is_complete_and_loads(default_run):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    release = default_run / "release"
    manifest = json.loads((release / RELEASE_MANIFEST).read_text())
    files = {
        p.relative_to(release).as_posix()
        for p in release.rglob("*")
        if p.is_file() and not p.name.startswith(".")
    }
    assert set(manifest["artifacts"]) == files - {RELEASE_MANIFEST}
    for rel, entry in manifest["artifacts"].items():
        data = (release / rel).read_bytes()
        assert entry == {"sha256": hashlib.sha256(data).hexdigest(), "size": len(data)}, rel
    assert {"pretrain/phase1", "export/qrpo", "evaluate/table", "data/funnel"} <= set(
        manifest["stages"]
    )
    assert manifest["config"]["run"] == default_run.name

    tokenizer = AutoTokenizer.from_pretrained(release, subfolder="aligned")
    ids = tokenizer("Grüezi", return_tensors="pt")["input_ids"]
    for sub in ("base", "aligned"):
        model = AutoModelForCausalLM.from_pretrained(release, subfolder=sub)
        with torch.no_grad():
            assert torch.isfinite(model(ids).logits).all()

    meta = metadata_load(release / "README.md")
    assert ModelCard.load(release / "README.md").data.eval_results
    assert meta["license"] == "apache-2.0" and "rm" in meta["language"]
    with (release / "evaluation" / "scores.csv").open() as f:
        rows = {r["checkpoint"]: r for r in csv.DictReader(f)}
    aligned = meta["model-index"][1]
    assert aligned["name"].endswith("/aligned")
    for result in aligned["results"]:
        for metric in result["metrics"]:
            column = f"{result['dataset']['name']}/{metric['type']}"
            assert metric["value"] == float(rows["qrpo"][column]), column
    funnel = json.loads((release / "data" / "funnel.json").read_text())
    assert f"| read | {funnel['total'][0]['documents']:,} |" in (release / "README.md").read_text()


@pytest.mark.slow
def test_release_rules_follow_the_config(tmp_path):
    run = tmp_path / "results" / "plan"
    default = planned_jobs(run, tmp_path, "{}")
    assert default.get("release") == 1 and "release_upload" not in default
    upload = planned_jobs(run, tmp_path, "release: {hub: {repo_id: someone/model}}")
    assert upload["release"] == 1 and upload["release_upload"] == 1
    off = planned_jobs(run, tmp_path, "release: {enabled: false}")
    assert "release" not in off


@pytest.mark.slow
def test_one_flipped_byte_in_any_file_of_the_release_is_named_by_the_audit(default_run, tmp_path):
    copy = tmp_path / "release"
    shutil.copytree(default_run / "release", copy)
    assert run_tool("apertus", "audit", copy).returncode == 0
    files = sorted(p for p in copy.rglob("*") if p.is_file() and not p.name.startswith("."))
    assert len(files) > 20
    for path in files:
        original = path.read_bytes()
        flipped = bytearray(original)
        flipped[len(flipped) // 2] ^= 0x01
        path.write_bytes(bytes(flipped))
        proc = run_tool("apertus", "audit", copy)
        path.write_bytes(original)
        rel = path.relative_to(copy).as_posix()
        if path.name == RELEASE_MANIFEST:
            # A flipped byte makes it unreadable JSON (exit 2) or changes its content, which
            # its content_sha256 no longer matches (exit 1); either way the audit names it.
            assert proc.returncode in (1, 2), proc.stdout + proc.stderr
            assert rel in proc.stderr + proc.stdout.split("problems:", 1)[-1], proc.stdout
        else:
            assert proc.returncode == 1, rel
            assert rel in proc.stdout.split("problems:", 1)[-1], (rel, proc.stdout)


@pytest.mark.slow
def test_the_pipeline_uploads_to_a_hub_stand_in_and_writes_the_token_nowhere(default_run, tmp_path):
    """`release_upload` through Snakemake, with a fake token in the environment, against the
    local stand-in of the Hub: one commit holding the release, and the token in no file the
    pipeline wrote (results, logs, benchmarks, Snakemake's metadata)."""
    override = tmp_path / "upload.yaml"
    override.write_text("offline: false\nrelease:\n  hub:\n    repo_id: tester/apertus-e2e\n")
    args = [
        "--cores",
        "2",
        "--configfile",
        override,
        "--config",
        f"results_dir={default_run.parent}",
        f"run={default_run.name}",
    ]
    # The upload changes no stage's config: only the release (which records the whole config),
    # the upload and the report's summary (which lists the release's manifest) run.
    assert planned_jobs(default_run, tmp_path, override.read_text()) == {
        "release": 1,
        "release_upload": 1,
        "report_summary": 1,
    }
    try:
        with HubStandIn() as hub:
            env = hub_env(tmp_path, hub.url)
            proc = run_tool("snakemake", *args, env=env, timeout=600)
            assert proc.returncode == 0, proc.stdout + proc.stderr
        receipt = json.loads((default_run / "release-upload.json").read_text())
        # One repository per released model, its folder at the root.
        repos = {"base": "tester/apertus-e2e", "aligned": "tester/apertus-e2e-aligned"}
        for model, repo_id in repos.items():
            repo = hub.repos[repo_id]
            assert repo.private and len(repo.commits) == 1
            assert repo.files == release_files(default_run / "release" / model)
        assert {r["model"]: r["repo_id"] for r in receipt["repos"]} == repos
        # The token goes to the Hub's API; LFS objects go to their upload URL without it (on
        # the real Hub a pre-signed storage URL).
        storage = [r for r in hub.requests if r["path"].startswith("/lfs-objects/")]
        api = [r for r in hub.requests if r not in storage]
        assert {r["authorization"] for r in api} == {f"Bearer {FAKE_TOKEN}"}
        assert {r["authorization"] for r in storage} <= {None}
        written = [default_run.parent, REPO / ".snakemake"]
        leaks = [p for root in written for p in token_anywhere(root)]
        assert leaks == [] and FAKE_TOKEN not in proc.stdout + proc.stderr
    finally:
        # Back to the default config, so later tests see the run as the default made it.
        (default_run / "release-upload.json").unlink(missing_ok=True)
        (default_run / "release-upload.manifest.json").unlink(missing_ok=True)
        run_tool("snakemake", *args[:2], *args[4:], check=True, timeout=600)
