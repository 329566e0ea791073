"""The typed run spec (apertus.train.run_spec): what names a run, and what a run needs before any
rank starts."""

import json
from pathlib import Path

import pytest

from apertus.core import ApertusError
from apertus.train.run_spec import (
    LRSpec,
    RunSpec,
    TrainingSettings,
    checkpoint_steps,
    preflight,
    resolve_initial_checkpoint,
    sealed_steps,
    set_aside,
    set_aside_checkpoints,
    unloadable_checkpoints,
)
from tests.conftest import flip_bit_in_place


def spec(**changes) -> RunSpec:
    required = {
        "flavor": "debug",
        "micro_batch": 2,
        "seq_len": 16,
        "global_batch": 4,
        "steps": 10,
        "lr": LRSpec(peak=1e-3),
        "phase_dir": "phases/p1",
    }
    return RunSpec(**(required | changes))


def test_a_run_is_named_by_what_differs_from_the_defaults_not_by_where_it_is_placed():
    plain = spec()
    assert plain.explicit() == {
        "flavor": "debug",
        "micro_batch": 2,
        "seq_len": 16,
        "global_batch": 4,
        "steps": 10,
        "lr": {"peak": 1e-3},
        "phase_dir": "phases/p1",
    }
    assert plain.placed(Path("/work/run-1")).explicit() == plain.explicit()
    assert spec(seed=1).explicit()["seed"] == 1
    assert spec(lr=LRSpec(peak=1e-3, warmup_steps=3)).explicit()["lr"] == {
        "peak": 1e-3,
        "warmup_steps": 3,
    }


def test_a_spec_round_trips_through_its_json_form():
    placed = spec(seed=4).placed(Path("/work/run-1"))
    assert RunSpec.from_dict(placed.as_dict()) == placed


def test_a_run_needs_its_folders_before_any_rank_starts():
    with pytest.raises(ApertusError, match=r"checkpoint\.folder is not set"):
        preflight(spec(), world_size=1)


def test_the_settings_a_config_shares_with_its_runs_are_checked_once():
    with pytest.raises(ApertusError, match="dtype must be 'float32' or 'bfloat16'"):
        spec(dtype="float16")
    assert set(spec().settings()) == {
        "flavor",
        "micro_batch",
        "ademamix",
        "grad_clip",
        "goldfish",
        "seed",
        "dtype",
        "compile",
        "device",
        "tensor_parallel",
        "wandb",
    }
    assert issubclass(RunSpec, TrainingSettings)


def test_the_work_directory_changes_with_the_trainers_code(tmp_path, monkeypatch):
    """A stage re-run for a code change (issue 20) must not resume from checkpoints the old
    code wrote: the trainer's code digest is part of the work directory's name."""
    from apertus.core import codedigest
    from apertus.train.stage import TRAINER_MODULE, work_directory

    first = work_directory(tmp_path, "phase1", spec(), ["key"])
    assert first == work_directory(tmp_path, "phase1", spec(), ["key"])  # resumable
    assert first.name.startswith("phase1-")
    files = codedigest.step_code(TRAINER_MODULE)["files"]
    assert "apertus/train/goldfish.py" in files and "apertus/model/model.py" in files
    real = codedigest.step_code
    monkeypatch.setattr(
        codedigest, "step_code", lambda *a: {**real(*a), "digest": "changed trainer code"}
    )
    assert work_directory(tmp_path, "phase1", spec(), ["key"]) != first


def save_checkpoint(folder: Path, step: int) -> Path:
    """A small DCP checkpoint, ``folder/step-N``, written the way torchtitan writes one."""
    import torch
    import torch.distributed.checkpoint as dcp

    from apertus.train.checkpoint import seal_checkpoint

    target = folder / f"step-{step}"
    dcp.save({"weight": torch.full((64,), float(step))}, checkpoint_id=str(target))
    seal_checkpoint(target)  # as the trainer's checkpoint manager does after each save
    return target


def test_a_checkpoint_whose_bytes_differ_from_its_checksums_or_has_none_is_not_resumed(tmp_path):
    """Bit rot under a tensor (loads fine, wrong numbers), a save killed before its checksums
    were written, and a stray file: each is named, and resuming takes the step before."""
    folder = tmp_path / "ckpt"
    for step in (10, 20, 30, 40):
        save_checkpoint(folder, step)
    assert sorted(checkpoint_steps(folder)) == [10, 20, 30, 40]
    recorded = json.loads((folder / "step-40" / "checksums.json").read_text())["files"]
    assert sorted(recorded) == sorted(
        p.name for p in (folder / "step-40").iterdir() if p.name != "checksums.json"
    )
    data = next((folder / "step-40").glob("*.distcp"))
    flip_bit_in_place(data, data.stat().st_size // 2)
    (folder / "step-30" / "checksums.json").unlink()
    (folder / "step-20" / "notes.txt").write_text("stray")
    bad = unloadable_checkpoints(folder)
    assert sorted(bad) == [20, 30, 40] and sorted(checkpoint_steps(folder)) == [10]
    assert sorted(sealed_steps(folder)) == [10, 20, 40]  # listed, not hashed
    assert f"{data}: sha256 " in bad[40][1] and f"its record says {recorded[data.name]['sha256']}"
    assert "it has no checksums.json (its save did not finish" in bad[30][1]
    assert "notes.txt is not in its checksums.json" in bad[20][1]
    with pytest.raises(ApertusError, match=r"step-40 cannot be loaded: .*distcp: sha256"):
        resolve_initial_checkpoint(folder)
    # A resume moves them out of its way (apertus.train.checkpoint), each with why.
    for step in (40, 30):
        set_aside(folder / f"step-{step}", bad[step][1])
    set_aside(save_checkpoint(folder, 40), "again")  # a second step-40 does not overwrite it
    assert set_aside_checkpoints(folder) == {
        folder / "corrupt" / "step-30": (30, bad[30][1]),
        folder / "corrupt" / "step-40": (40, bad[40][1]),
        folder / "corrupt" / "step-40.1": (40, "again"),
    }
    assert sorted(sealed_steps(folder)) == [10, 20]


def test_a_checkpoint_that_does_not_load_is_not_one_to_resume_from(tmp_path):
    """A truncated .metadata (pickle's "truncated" error when torch loads it) or a data file
    shorter than its .metadata says: that step and every newer one is left out, and a folder
    holding no loadable step has none (the run starts over)."""
    folder = tmp_path / "ckpt"
    for step in (10, 20, 30):
        save_checkpoint(folder, step)
    assert sorted(checkpoint_steps(folder)) == [10, 20, 30] and not unloadable_checkpoints(folder)
    metadata = folder / "step-30" / ".metadata"
    metadata.write_bytes(metadata.read_bytes()[:40])
    data = next((folder / "step-20").glob("*.distcp"))
    data.write_bytes(data.read_bytes()[:100])
    assert sorted(checkpoint_steps(folder)) == [10]
    bad = unloadable_checkpoints(folder)
    assert sorted(bad) == [20, 30]
    assert bad[30][0] == folder / "step-30"
    assert "its .metadata does not load" in bad[30][1] and "truncated" in bad[30][1]
    assert f"{data.name} holds 100 bytes, its .metadata records" in bad[20][1]
    # The next stage's seed is another run's result: an error, not an older step.
    with pytest.raises(ApertusError, match=r"step-30 cannot be loaded: its .metadata"):
        resolve_initial_checkpoint(folder)
    with pytest.raises(ApertusError, match=r"step-20 cannot be loaded: .*distcp holds 100"):
        resolve_initial_checkpoint(folder / "step-20")
    assert resolve_initial_checkpoint(folder / "step-10") == folder / "step-10"
    (folder / "step-10" / ".metadata").write_bytes(b"")
    assert checkpoint_steps(folder) == {}
