"""How the pretraining stage turns the config into torchtitan runs: steps per phase, one WSD
schedule over the phases, long-context stages from the previous weights, the unigram entropy."""

import json
import math
import shutil
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from apertus.core import ApertusError
from apertus.core.config import load_config
from apertus.core.files import recorded_path
from apertus.core.stage import StepRun
from apertus.export.stage import read_run_record
from apertus.tokenize.phases import PhaseDataset, PhaseSpec, build_phase_index
from apertus.train.config import PretrainConfig
from apertus.train.run_spec import (
    CHECKPOINT_CHECKSUMS,
    BatchRampSpec,
    CheckpointSpec,
    LRSpec,
    RunSpec,
    set_aside,
)
from apertus.train.schedule import BatchRamp
from apertus.train.stage import (
    cooldown_steps,
    final_checkpoint,
    numerics,
    phase_steps,
    run_spec,
    train_and_record,
    unigram_entropy,
    vocabulary_cover,
    work_directory,
)
from tests.train.test_torchtitan import build_phase


@pytest.fixture(scope="module")
def phases(tmp_path_factory):
    root = tmp_path_factory.mktemp("phases")
    for name, docs in (("phase1", 300), ("phase2", 200)):
        # build_phase's data, planned where the stage looks for the phase (a phase records its
        # shards relative to itself: it moves with them, not alone).
        built = build_phase(root / name, n_docs=docs)
        spec = json.loads((built / "phase.json").read_text())
        build_phase_index(
            PhaseSpec(name, spec["budget"], spec["seed"], {"web": None}),
            {"web": root / name / "shards" / "web"},
            root / "phases" / name,
        )
    return root / "phases"


def test_unigram_entropy_is_the_entropy_of_the_planned_tokens(phases):
    docs = list(PhaseDataset(phases / "phase1").iter_documents())
    counts = np.bincount(np.concatenate(docs))
    p = counts[counts > 0] / counts.sum()
    assert unigram_entropy(phases / "phase1") == pytest.approx(-(p * np.log(p)).sum(), rel=1e-12)


def test_steps_are_whole_batches_of_windows(phases):
    tokens = PhaseDataset(phases / "phase1").total_tokens
    assert phase_steps(phases / "phase1", 64, BatchRamp.constant(8)) == tokens // 65 // 8
    with pytest.raises(ApertusError, match="fewer than one batch"):
        phase_steps(phases / "phase1", 64, BatchRamp.constant(10**9))


def test_the_embedding_grows_only_for_data_with_more_ids_than_the_flavor(phases, tmp_path):
    assert vocabulary_cover("tiny", phases / "phase1") == {}  # 256 ids, 8192 rows: unchanged
    record = json.loads((phases / "phase1" / "phase.json").read_text())
    (tmp_path / "phase.json").write_text(json.dumps({**record, "vocab_size": 131072}))
    # A Hub tokenizer of the Apertus layout with the tiny flavor: every id needs a row.
    assert vocabulary_cover("tiny", tmp_path) == {"vocab_size": 131072}
    assert vocabulary_cover("8b", tmp_path) == {}


def test_phases_share_one_schedule_and_long_context_starts_fresh(phases):
    cfg = load_config()["pretrain"]
    # The default ramps the batch 8 -> 16 at 400k tokens; here at 10k, inside phase 1.
    cfg["batch_ramp"] = {"global_batch": 16, "at_tokens": 10_000}
    assert (cfg["seq_len"], cfg["global_batch"]) == (128, 8)
    steps, tokens_seen, switch = [], 0, 0
    for name in cfg["phases"]:  # step by step: the batch is 16 from the first step at 10k
        windows, count = PhaseDataset(phases / name).total_tokens // (cfg["seq_len"] + 1), 0
        while windows >= (batch := 8 if tokens_seen < 10_000 else 16):
            switch += batch == 8
            windows, count, tokens_seen = windows - batch, count + 1, tokens_seen + batch * 128
        steps.append(count)
    assert tokens_seen > 10_000  # the switch happened
    typed = PretrainConfig.from_dict(cfg)
    first = run_spec(typed, "phase1", phases, None)
    second = run_spec(typed, "phase2", phases, {"final_checkpoint": "/ckpt/step-1"})
    assert first.steps == steps[0] and second.steps == sum(steps)
    assert first.batch_ramp == second.batch_ramp == BatchRampSpec(**cfg["batch_ramp"])
    for spec in (first, second):
        assert spec.lr.total_steps == sum(steps)
        # The cooldown covers the last 20% of the sequences: steps of 16 at the end.
        sequences = 8 * switch + 16 * (sum(steps) - switch)
        assert spec.lr.decay_steps == math.floor(cfg["lr"]["decay_fraction"] * sequences / 16)
    assert first.checkpoint.initial is None
    assert second.checkpoint == CheckpointSpec(
        interval=cfg["checkpoint_interval"],
        initial="/ckpt/step-1",
        initial_mode="continue",
    )
    stage = cfg["long_context"][0]
    long = run_spec(typed, stage["name"], phases, {"final_checkpoint": "/ckpt/step-2"})
    assert long.checkpoint.initial_mode == "weights"
    assert long.lr == LRSpec(kind="constant", peak=stage["lr"], warmup_steps=5)
    assert long.model_overrides == {"rope_theta": stage["rope_theta"], "max_seq_len": 256}
    assert long.global_batch % long.micro_batch == 0
    with pytest.raises(ApertusError, match="needs the previous stage"):
        run_spec(typed, stage["name"], phases, None)
    with pytest.raises(ApertusError, match="no pretraining phase or long-context stage"):
        run_spec(typed, "nope", phases, None)


def test_cooldown_covers_the_last_share_of_tokens():
    # A constant batch: the share of the steps, as plain WSD has it.
    assert cooldown_steps(BatchRamp.constant(8), 1000, 0.11) == 110
    # 8B: 1024 -> 2048 sequences at 7.038T, 15T in all; the cooldown is the last 1.65T.
    ramp = BatchRamp.at_tokens(seq_len=4096, start_batch=1024, batch=2048, tokens=7_038 * 10**9)
    total = ramp.switch_step + ramp.steps_within(
        15 * 10**12 // 4096 - ramp.sequences(0, ramp.switch_step), ramp.switch_step
    )
    assert cooldown_steps(ramp, total, 1.65 / 15) == pytest.approx(1.65e12 / (2048 * 4096), abs=1)


def test_the_manifest_says_which_checkpoint_the_resume_set_aside_and_where_it_went_on(
    phases, tmp_path, monkeypatch
):
    """The stage's record of a resume (train_and_record): which step it resumed from, and each
    checkpoint the trainer's resume moved to ckpt/corrupt/ (here, as it does on a checksum
    mismatch, `apertus.train.checkpoint`), with its step and why. The training process is a
    stand-in: what it leaves (a set-aside step, a sealed final checkpoint, metrics) is the
    real trainer's, tested end to end in tests/train/test_torchtitan.py."""
    import apertus.train.launch as launch

    spec = run_spec(PretrainConfig.from_dict(load_config()["pretrain"]), "phase1", phases, None)
    work_root, output = tmp_path / "_work", tmp_path / "phase1"
    work = work_directory(work_root, "phase1", spec, {"data": 1})

    def sealed(step: int) -> None:
        folder = work / "ckpt" / f"step-{step}"
        folder.mkdir(parents=True)
        (folder / ".metadata").write_bytes(b"")
        (folder / CHECKPOINT_CHECKSUMS).write_text('{"files": {}}')

    for number in (10, 20):
        sealed(number)

    def trainer(spec_path, nproc, nnodes=1):
        set_aside(work / "ckpt" / "step-20", "checkpoint step-20: a.distcp: sha256 0a, not 0b")
        sealed(30)
        (work / "out").mkdir(parents=True, exist_ok=True)
        (work / "out" / "metrics.jsonl").write_text('{"step": 30, "loss": 2.5}\n')
        return 0

    monkeypatch.setattr(launch, "run", trainer)
    step = StepRun("pretrain", "phase1", {}, inputs=[], outputs=[], manifest=tmp_path / "m.json")
    record = train_and_record(
        step, spec, name="phase1", key_material={"data": 1}, work_root=work_root, output=output,
        nproc=1,
    )  # fmt: skip
    assert record["final_step"] == 30 and step.summary["resumed_from_step"] == 10
    assert step.summary["checkpoints_set_aside"] == [
        {
            "step": 20,
            "moved_to": "../_work/" + f"{work.name}/ckpt/corrupt/step-20",
            "problem": "checkpoint step-20: a.distcp: sha256 0a, not 0b",
        }
    ]


# -- a results folder moved whole ----------------------------------------------------------------


def test_run_json_names_its_checkpoint_relative_to_itself(tmp_path):
    """run.json records ``final_checkpoint`` relative to its folder (train_and_record): the next
    stage, SFT and the export find the checkpoint after the results folder moved, and a run.json
    written before, with an absolute path, still reads."""
    run = tmp_path / "results" / "run"
    (run / "pretrain" / "_work" / "phase1-0123" / "ckpt" / "step-5").mkdir(parents=True)
    checkpoint = run / "pretrain" / "_work" / "phase1-0123" / "ckpt" / "step-5"
    output = run / "pretrain" / "phase1"
    output.mkdir()
    record = {
        "name": "phase1",
        "final_checkpoint": recorded_path(checkpoint, output),
        "flavor": "debug",
        "model_overrides": {},
        "seq_len": 16,
    }
    assert record["final_checkpoint"] == "../_work/phase1-0123/ckpt/step-5"
    (output / "run.json").write_text(json.dumps(record))

    moved = tmp_path / "elsewhere"
    shutil.move(run, moved)
    output = moved / "pretrain" / "phase1"
    record = json.loads((output / "run.json").read_text())
    expected = (moved / "pretrain" / "_work" / "phase1-0123" / "ckpt" / "step-5").absolute()
    assert final_checkpoint(record, output) == expected and expected.is_dir()
    assert read_run_record(output).final_checkpoint.resolve() == expected.resolve()
    old = {**record, "final_checkpoint": "/old/results/run/ckpt/step-5"}
    assert final_checkpoint(old, output) == Path("/old/results/run/ckpt/step-5")


def test_the_next_stage_starts_from_the_checkpoint_in_the_moved_folder(phases, tmp_path):
    typed = PretrainConfig.from_dict(load_config()["pretrain"])
    output = tmp_path / "pretrain" / "phase1"
    output.mkdir(parents=True)
    record = {"final_checkpoint": "../_work/phase1-0123/ckpt/step-1"}
    previous = {**record, "final_checkpoint": str(final_checkpoint(record, output))}
    second = run_spec(typed, "phase2", phases, previous)
    assert Path(second.checkpoint.initial).is_absolute()
    assert second.checkpoint.initial == str(
        (tmp_path / "pretrain" / "_work" / "phase1-0123" / "ckpt" / "step-1").absolute()
    )


def test_the_work_directory_does_not_change_when_the_results_folder_moves(tmp_path):
    """Its key holds the spec's paths relative to the work root, and the records of the data
    and the previous stage as written (their paths relative to themselves)."""
    names = []
    for root in (tmp_path / "a" / "run", tmp_path / "b" / "moved"):
        spec = RunSpec(
            flavor="debug",
            micro_batch=2,
            seq_len=16,
            global_batch=4,
            steps=10,
            lr=LRSpec(peak=1e-3),
            phase_dir=str(root / "tokenize" / "phases" / "phase2"),
            checkpoint=CheckpointSpec(
                initial=str(root / "pretrain" / "_work" / "phase1-0123" / "ckpt" / "step-1")
            ),
        )
        material = ['{"sources": [{"dir": "../../shards/web"}]}', {"final_checkpoint": "x"}]
        work = work_directory(root / "pretrain" / "_work", "phase2", spec, material)
        assert work.parent == root / "pretrain" / "_work"
        names.append(work.name)
        recorded = spec.relative_to(root / "pretrain" / "phase2")
        assert recorded.phase_dir == "../../tokenize/phases/phase2"
        assert recorded.resolved(root / "pretrain" / "phase2") == spec
    assert names[0] == names[1]


def test_the_manifest_records_the_runs_numerics_and_each_change_of_its_compiled_graphs():
    spec = RunSpec(flavor="debug", micro_batch=1, seq_len=8, global_batch=1, steps=4,
                   lr=LRSpec(kind="constant", peak=1e-3), dtype="bfloat16", compile=True,
                   phase_dir="phase")  # fmt: skip
    metrics = {1: {"compiled_graphs": 2}, 2: {"compiled_graphs": 2}, 3: {"compiled_graphs": 4},
               4: {"compiled_graphs": 4}}  # fmt: skip
    assert numerics(spec, metrics) == {
        "dtype": "bfloat16",
        "master_weights": "float32",
        "gradient_reduction": "float32",
        "compile": True,
        "compiled_graphs": {"1": 2, "3": 4},  # one recompilation, at step 3
    }
    eager = numerics(replace(spec, dtype="float32", compile=False), {1: {"loss": 3.0}})
    assert eager["compile"] is False and eager["compiled_graphs"] == {}
