"""Weights & Biases tracking of a training run (run spec `wandb`, `apertus.train.metrics.
WandbLogger`): off by default, offline when on, one W&B run per training run whose id survives a
resume, and a clear error before training when wandb is missing.

The W&B files are read back here without wandb's help: a ``.wandb`` file is LevelDB's log format
(32 KiB blocks of records with a 7-byte header) after a 7-byte W&B header, each record one
protobuf ``wandb.proto.wandb_internal_pb2.Record``.
"""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from apertus.core import ApertusError
from apertus.core.config import load_config
from apertus.posttrain.sft import SFTTrainingConfig
from apertus.train.config import PretrainConfig
from apertus.train.metrics import read_metrics
from apertus.train.run_spec import WandbSpec, load_run_spec, preflight, wandb_run_id
from apertus.train.stage import work_directory
from tests.train.test_torchtitan import REPO, run_ok, write_spec

# The cheapest run that logs, checkpoints and resumes: 4 steps of 4 windows, a checkpoint
# every 2 steps (test_torchtitan's debug flavor and phase).
TINY = {
    "steps": 4,
    "global_batch": 4,
    "lr": {"kind": "constant", "peak": 3e-3, "warmup_steps": 1},
}


def wandb_records(path: Path):
    """The protobuf records of a ``.wandb`` file, in order."""
    from wandb.proto import wandb_internal_pb2

    data = path.read_bytes()
    assert data[:4] == b":W&B"
    block, position, pending = 32768, 7, b""
    while position + 7 <= len(data):
        if block - position % block < 7:  # a block's tail too short for a header is padding
            position += block - position % block
            continue
        _, length, kind = struct.unpack("<IHB", data[position : position + 7])
        if length == 0 and kind == 0:
            break
        pending += data[position + 7 : position + 7 + length]
        position += 7 + length
        if kind in (1, 4):  # a whole record, or the last fragment of one
            record = wandb_internal_pb2.Record()
            record.ParseFromString(pending)
            pending = b""
            yield record


def offline_run(folder: Path) -> dict:
    """What one offline W&B run folder holds: its run id, project and name, and its history
    (step -> metrics)."""
    (log,) = folder.glob("run-*.wandb")
    found: dict = {"history": {}}
    for record in wandb_records(log):
        kind = record.WhichOneof("record_type")
        if kind == "run":
            found.update(id=record.run.run_id, project=record.run.project)
            found["name"] = record.run.display_name
        elif kind == "history":
            row = {
                item.key or "/".join(item.nested_key): json.loads(item.value_json)
                for item in record.history.item
            }
            found["history"][row["_step"]] = row
    return found


def wandb_core_processes() -> set[int]:
    """Running wandb service processes (wandb-core), by pid."""
    found = set()
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if b"wandb-core" in cmdline.read_bytes():
                found.add(int(cmdline.parent.name))
        except OSError:
            continue
    return found


@pytest.fixture
def offline_wandb(monkeypatch, tmp_path):
    """No W&B file outside `tmp_path`, nothing sent anywhere, no banner."""
    for variable, value in {
        "WANDB_MODE": "offline",
        "WANDB_SILENT": "true",
        "WANDB_ERROR_REPORTING": "false",
        "WANDB_CONFIG_DIR": str(tmp_path / "wandb-config"),
        "WANDB_CACHE_DIR": str(tmp_path / "wandb-cache"),
        "WANDB_DATA_DIR": str(tmp_path / "wandb-data"),
        "WANDB_ARTIFACT_DIR": str(tmp_path / "wandb-artifacts"),
    }.items():
        monkeypatch.setenv(variable, value)
    monkeypatch.delenv("WANDB_API_KEY", raising=False)


@pytest.mark.slow
def test_offline_run_logs_every_step_under_one_id_that_a_resumed_run_continues(
    phase, tmp_path, offline_wandb
):
    before = wandb_core_processes()
    directory = tmp_path / "phase1-0123456789abcdef"
    tracked = {**TINY, "wandb": {"enabled": True, "project": "apertus-test"}}
    checkpoint = {"folder": str(directory / "ckpt"), "interval": 2}
    proc = run_ok(write_spec(directory, phase, checkpoint=checkpoint, **tracked), 1)
    out = directory / "out"
    run_id = wandb_run_id(out)
    assert run_id.startswith("phase1-0123456789abcdef-")
    assert f"W&B run {run_id} of project apertus-test, offline in {out / 'wandb'}" in proc.stderr
    (first,) = (out / "wandb").glob(f"offline-run-*-{run_id}")
    logged = offline_run(first)
    assert (logged["id"], logged["project"], logged["name"]) == (run_id, "apertus-test", "phase1")
    metrics = read_metrics(out / "metrics.jsonl")
    assert sorted(logged["history"]) == [1, 2, 3, 4]
    for step, row in logged["history"].items():
        assert row["loss_metrics/global_avg_loss"] == metrics[step]["loss"]
        assert row["grad_norm"] == metrics[step]["grad_norm"]

    # The same run, extended to 6 steps: it resumes from its step-4 checkpoint and logs steps
    # 5 and 6 under the same id, in a second offline folder (`wandb sync` of both: one run).
    run_ok(write_spec(directory, phase, checkpoint=checkpoint, **{**tracked, "steps": 6}), 1)
    assert wandb_run_id(out) == run_id
    folders = sorted((out / "wandb").glob("offline-run-*"))
    assert len(folders) == 2 and all(f.name.endswith(f"-{run_id}") for f in folders)
    resumed = offline_run(next(f for f in folders if f != first))
    assert resumed["id"] == run_id
    metrics = read_metrics(out / "metrics.jsonl")
    assert sorted(resumed["history"]) == [5, 6]
    for step, row in resumed["history"].items():
        assert row["loss_metrics/global_avg_loss"] == metrics[step]["loss"]
    # The rank ended wandb's service with the run.
    assert wandb_core_processes() <= before


def test_the_run_id_is_the_run_folders_and_stable(tmp_path):
    out = tmp_path / "results" / "r" / "pretrain" / "_work" / "phase1-0123456789abcdef" / "out"
    assert wandb_run_id(out) == wandb_run_id(str(out))
    assert wandb_run_id(out).startswith("phase1-0123456789abcdef-")
    # The same run in another results folder is another W&B run.
    other = tmp_path / "elsewhere" / "_work" / "phase1-0123456789abcdef" / "out"
    assert wandb_run_id(other) != wandb_run_id(out)
    # Characters W&B refuses in an id do not reach it.
    assert not set(":;,#?/'") & set(wandb_run_id(tmp_path / "a:b,c#d" / "out"))


def test_switching_tracking_on_keeps_the_work_directory(phase, tmp_path):
    spec = load_run_spec(write_spec(tmp_path, phase, **TINY))
    tracked = replace(spec, wandb=WandbSpec(enabled=True, mode="online", entity="team"))
    assert work_directory(tmp_path, "phase1", tracked, []) == work_directory(
        tmp_path, "phase1", spec, []
    )


def test_tracking_is_off_by_default_and_offline_when_on_for_pretraining_and_sft():
    config = load_config(directory=REPO)
    for section in (config["pretrain"]["wandb"], config["posttrain"]["sft"]["wandb"]):
        assert section == {
            "enabled": False,
            "project": "apertus",
            "entity": None,
            "mode": "offline",
        }
    on = {"wandb": {"enabled": True}}
    assert PretrainConfig.from_dict(on).wandb == WandbSpec(enabled=True, mode="offline")
    assert SFTTrainingConfig.from_dict(on).wandb == WandbSpec(enabled=True, mode="offline")
    with pytest.raises(ApertusError, match=r"wandb\.mode must be 'offline' or 'online'"):
        WandbSpec(enabled=True, mode="sync")


def test_the_sft_run_spec_takes_its_sections_tracking(monkeypatch, tmp_path):
    from apertus.posttrain import sft

    monkeypatch.setattr(sft, "read_sft_record", lambda _: {"examples": 16, "max_len": 96})
    previous = {"flavor": "debug", "model_overrides": {}, "final_checkpoint": "ckpt/step-4"}
    cfg = SFTTrainingConfig.from_dict({"wandb": {"enabled": True, "project": "p"}})
    spec = sft.sft_run_spec(cfg, tmp_path, previous)
    assert spec.wandb == WandbSpec(enabled=True, project="p")


def test_tracking_without_wandb_installed_is_an_error_before_training(phase, tmp_path):
    # A Python in which `import wandb` fails, as in an environment without the extra.
    hidden = tmp_path / "no_wandb"
    hidden.mkdir()
    (hidden / "sitecustomize.py").write_text("import sys\nsys.modules['wandb'] = None\n")
    spec = write_spec(tmp_path / "run", phase, **TINY, wandb={"enabled": True})
    proc = subprocess.run(
        [sys.executable, "-m", "apertus.train.launch", "--spec", str(spec)],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(hidden)},
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert proc.returncode == 2
    assert "error: wandb.enabled is true but the wandb package is not installed" in proc.stderr
    assert 'pip install -e ".[wandb]"' in proc.stderr
    assert "torchrun" not in proc.stderr and not (tmp_path / "run" / "ckpt").exists()
    # With wandb importable the same spec passes the checks.
    preflight(load_run_spec(spec), world_size=1)
