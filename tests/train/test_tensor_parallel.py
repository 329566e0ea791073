"""Tensor parallelism for Apertus pretraining on CPU (torchtitan 0.3.0, gloo), end to end.

The ``debug`` flavor (4 query heads, 2 kv heads, 192 hidden units, vocabulary 256) trained with
``tensor_parallel: 2`` on 2 processes, through `python -m apertus.train.launch` as a user runs
it, against the independent reference of the same run on 1 process without any parallelism:
same per-step losses and gradient norms, same weights at the end, notably those of the
replicated modules whose gradients must be summed over the TP ranks (q_norm / k_norm on the
local heads, the xIELU scalars on the local hidden units). A checkpoint written under TP
resumes bit-identically, and on 1 process. Bad layouts are refused before torchrun starts.
Context parallelism: tests/train/test_context_parallel.py.

Measured here (2 cores, float32): max |loss difference| over 30 steps 1.9e-6, gradient norms
within 3e-5 relative, weights after 30 steps within 1.3e-4 (matrices; AdEMAMix amplifies
rounding where a gradient is ~0) and 8e-6 (replicated modules). A TP plan that forgets to sum
the xIELU scalars' gradients over the TP ranks leaves losses within 7e-4 and the scalars off
by 2e-3: the tolerances below sit between the two.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from apertus.core import ApertusError
from apertus.model.flavors import flavor
from apertus.model.parallelize import parallelize_apertus, tensor_parallel_problems
from apertus.train.metrics import read_metrics
from apertus.train.run_spec import checkpoint_steps, load_run_spec, preflight
from tests.train.test_torchtitan import (
    REPO,
    load_checkpoint,
    model_weights,
    run_ok,
    write_spec,
)

# Tolerances (see the module doc for what was measured and what a broken plan gives).
LOSS_TOLERANCE = 2e-5
GRAD_NORM_RELATIVE = 5e-4
WEIGHT_TOLERANCE = 1e-3
# Modules whose weights are replicated over the TP ranks; their gradients need the TP sum
# whenever the module sees a slice of the activations.
REPLICATED = ("norm", "act.alpha", "tok_embeddings", "lm_head")
REPLICATED_TOLERANCE = 5e-5


# The phase and the 1-process reference run (`phase`, `one_process_run`): tests/train/conftest.py,
# shared with test_torchtitan.
@pytest.fixture(scope="module")
def tp_run(phase, tmp_path_factory):
    directory = tmp_path_factory.mktemp("tp2")
    return directory, run_ok(write_spec(directory, phase, tensor_parallel=2), 2)


def output(proc: subprocess.CompletedProcess) -> str:
    return proc.stdout + proc.stderr


def resumed_from_tp_step_20(tp_dir: Path, target: Path, phase: Path, *, tp: int, nproc: int):
    """A run whose checkpoint folder holds only the TP run's step-20 checkpoint."""
    (target / "ckpt").mkdir(parents=True)
    shutil.copytree(tp_dir / "ckpt" / "step-20", target / "ckpt" / "step-20")
    return run_ok(write_spec(target, phase, tensor_parallel=tp), nproc)


# ---------------------------------------------------------------------------------------------
# End to end (torchrun, 2 gloo processes)


@pytest.mark.slow
def test_tensor_parallel_run_matches_one_process(one_process_run, tp_run, tmp_path):
    one_dir, one_proc = one_process_run
    tp_dir, tp_proc = tp_run
    # Really tensor-parallel: both ranks in one TP group, no data parallelism left.
    log = output(tp_proc)
    assert log.count("Applied tensor parallelism to Apertus over 2 rank(s)") == 2
    assert log.count("Applied FSDP to Apertus over 1 rank(s)") == 2
    assert "tensor parallelism" not in output(one_proc)

    one = read_metrics(one_dir / "out" / "metrics.jsonl")
    two = read_metrics(tp_dir / "out" / "metrics.jsonl")
    assert list(two) == list(one) == list(range(1, 31))
    loss_differences = [abs(one[s]["loss"] - two[s]["loss"]) for s in one]
    assert max(loss_differences) < LOSS_TOLERANCE
    assert one[30]["loss"] < one[1]["loss"] - 2.0  # it trained
    for step in one:
        expected_norm = pytest.approx(one[step]["grad_norm"], rel=GRAD_NORM_RELATIVE)
        assert two[step]["grad_norm"] == expected_norm
        # Both TP ranks read the same micro-batches: the tokens and the LR are the 1-rank run's.
        assert two[step]["tokens_seen"] == one[step]["tokens_seen"]
        assert two[step]["lr"] == one[step]["lr"]
        # ... and the loss-mask counts are summed over data-parallel ranks only, not TP ranks.
        assert two[step]["kept_tokens"] == one[step]["kept_tokens"]

    assert sorted(checkpoint_steps(tp_dir / "ckpt")) == [10, 20, 30]
    theirs = model_weights(load_checkpoint(one_dir / "ckpt" / "step-30", tmp_path))
    ours = model_weights(load_checkpoint(tp_dir / "ckpt" / "step-30", tmp_path))
    # DCP holds whole tensors whatever the layout: same keys, same shapes.
    assert ours.keys() == theirs.keys()
    worst, worst_replicated = 0.0, 0.0
    for key, value in theirs.items():
        assert ours[key].shape == value.shape, key
        difference = (ours[key] - value).abs().max().item()
        worst = max(worst, difference)
        if any(part in key for part in REPLICATED):
            worst_replicated = max(worst_replicated, difference)
            assert difference < REPLICATED_TOLERANCE, key
        assert difference < WEIGHT_TOLERANCE, key
    print(
        f"\nTP=2 on 2 processes vs 1 process: max |loss diff| {max(loss_differences):.1e}, "
        f"max |weight diff| {worst:.1e} (replicated modules {worst_replicated:.1e}); "
        f"{tp_proc.wall_s:.1f} s wall (1 process: {one_proc.wall_s:.1f} s)"
    )


@pytest.mark.slow
def test_tensor_parallel_checkpoint_resumes_under_tp_and_on_one_process(tp_run, phase, tmp_path):
    tp_dir, _ = tp_run
    reference_metrics = read_metrics(tp_dir / "out" / "metrics.jsonl")
    reference = load_checkpoint(tp_dir / "ckpt" / "step-30", tmp_path)

    # The same layout: the uninterrupted run's exact weights, optimizer state and losses.
    proc = resumed_from_tp_step_20(tp_dir, tmp_path / "tp", phase, tp=2, nproc=2)
    assert "Training starts at step 21" in output(proc)
    resumed = read_metrics(tmp_path / "tp" / "out" / "metrics.jsonl")
    assert list(resumed) == list(range(21, 31))
    assert [resumed[s]["loss"] for s in resumed] == [reference_metrics[s]["loss"] for s in resumed]
    final = load_checkpoint(tmp_path / "tp" / "ckpt" / "step-30", tmp_path)
    assert final.keys() == reference.keys()
    for key, value in model_weights(reference).items():
        assert torch.equal(final[key], value), key
    for name, state in reference["optimizer"].items():
        other = final["optimizer"][name]
        same = torch.equal(other, state) if isinstance(state, torch.Tensor) else other == state
        assert same, name

    # Another layout: the TP checkpoint resumes on one process without tensor parallelism.
    proc = resumed_from_tp_step_20(tp_dir, tmp_path / "one", phase, tp=1, nproc=1)
    assert "Training starts at step 21" in output(proc)
    assert "tensor parallelism" not in output(proc)
    resumed = read_metrics(tmp_path / "one" / "out" / "metrics.jsonl")
    assert list(resumed) == list(range(21, 31))
    for step in resumed:
        assert abs(resumed[step]["loss"] - reference_metrics[step]["loss"]) < LOSS_TOLERANCE
    final = model_weights(load_checkpoint(tmp_path / "one" / "ckpt" / "step-30", tmp_path))
    for key, value in model_weights(reference).items():
        assert (final[key] - value).abs().max().item() < WEIGHT_TOLERANCE, key


# ---------------------------------------------------------------------------------------------
# Layout checks before any rank starts (in process, and through the launcher)


def test_tensor_parallel_problems_name_what_does_not_divide():
    debug = flavor("debug")  # 4 heads, 2 kv heads, 192 hidden units, vocabulary 256
    assert tensor_parallel_problems(debug, 1) == []
    assert tensor_parallel_problems(debug, 2) == []
    assert tensor_parallel_problems(debug, 3) == [
        "n_heads=4 is not divisible by the tensor parallel degree 3",
        "n_kv_heads=2 is not divisible by the tensor parallel degree 3",
        "vocab_size=256 is not divisible by the tensor parallel degree 3",
    ]
    # 4 ranks: whole query heads, but two ranks would share each kv head.
    assert tensor_parallel_problems(debug, 4) == [
        "n_kv_heads=2 is not divisible by the tensor parallel degree 4"
    ]
    odd = flavor("debug", ffn_hidden=193, n_kv_heads=1)
    assert tensor_parallel_problems(odd, 2) == [
        "n_kv_heads=1 is not divisible by the tensor parallel degree 2",
        "ffn_hidden=193 is not divisible by the tensor parallel degree 2",
    ]


@pytest.mark.parametrize("value", [0, -2, "2", True, 1.5])
def test_run_spec_tensor_parallel_must_be_a_positive_integer(phase, tmp_path, value):
    with pytest.raises(ApertusError, match=r"tensor_parallel must be an integer( >= 1)?, got"):
        load_run_spec(write_spec(tmp_path, phase, tensor_parallel=value))


def test_preflight_splits_the_batch_over_the_data_parallel_ranks(phase, tmp_path):
    spec = load_run_spec(write_spec(tmp_path, phase, tensor_parallel=2))
    assert spec.tensor_parallel == 2
    assert load_run_spec(write_spec(tmp_path, phase)).tensor_parallel == 1
    # global batch 8 = micro_batch 4 x 2 data-parallel ranks: 4 ranks as 2 TP groups of 2.
    preflight(spec, world_size=4)
    preflight(spec, world_size=2)
    # Without TP the same 4 ranks are 4 data-parallel ranks: 8 does not split into 4 x 4.
    with pytest.raises(ApertusError, match=r"micro_batch 4 x 4 rank\(s\)"):
        preflight(load_run_spec(write_spec(tmp_path, phase)), world_size=4)
    small = load_run_spec(write_spec(tmp_path, phase, tensor_parallel=2, global_batch=4))
    with pytest.raises(
        ApertusError,
        match=r"micro_batch 4 x 2 data-parallel rank\(s\) \(4 ranks / tensor_parallel 2\)",
    ):
        preflight(small, world_size=4)
    with pytest.raises(ApertusError, match=r"tensor_parallel 2 does not divide the 3 rank\(s\)"):
        preflight(spec, world_size=3)


def test_preflight_refuses_a_flavor_that_does_not_split(phase, tmp_path):
    spec = load_run_spec(write_spec(tmp_path, phase, tensor_parallel=4, global_batch=4))
    with pytest.raises(
        ApertusError,
        match=r"tensor_parallel 4 does not fit flavor 'debug': n_kv_heads=2 is not divisible",
    ):
        preflight(spec, world_size=4)
    overridden = load_run_spec(
        write_spec(tmp_path, phase, tensor_parallel=2, model_overrides={"n_kv_heads": 1})
    )
    with pytest.raises(ApertusError, match=r"n_kv_heads=1 is not divisible by the tensor para"):
        preflight(overridden, world_size=2)


def test_launcher_refuses_a_bad_tensor_parallel_degree_before_torchrun(phase, tmp_path):
    def launch_quick(spec: Path, nproc: int) -> subprocess.CompletedProcess:
        command = [sys.executable, "-m", "apertus.train.launch", "--spec", str(spec)]
        return subprocess.run(
            [*command, "--nproc", str(nproc)],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )

    proc = launch_quick(write_spec(tmp_path / "a", phase, tensor_parallel=3), 3)
    assert proc.returncode == 2
    assert "error: tensor_parallel 3 does not fit flavor 'debug': n_heads=4 is not" in proc.stderr
    assert "torchrun" not in proc.stderr
    proc = launch_quick(write_spec(tmp_path / "b", phase, tensor_parallel=2), 1)
    assert proc.returncode == 2
    assert "error: tensor_parallel 2 does not divide the 1 rank(s)" in proc.stderr
    assert "torchrun" not in proc.stderr


def _parallel_dims(**degrees: int):
    from torchtitan.distributed import ParallelDims

    layout = {"dp_replicate": 1, "dp_shard": 1, "cp": 1, "tp": 1, "pp": 1, "ep": 1, **degrees}
    world = 1
    for value in layout.values():
        world *= value
    return ParallelDims(**layout, world_size=world, spmd_backend="partial_dtensor")


def _parallelize(parallel_dims, **parallelism):
    from torchtitan.config import CompileConfig, ParallelismConfig, TrainingConfig

    with torch.device("meta"):
        model = flavor("debug").build()
    return parallelize_apertus(
        model,
        parallel_dims=parallel_dims,
        training=TrainingConfig(),
        parallelism=ParallelismConfig(spmd_backend="partial_dtensor", **parallelism),
        compile_config=CompileConfig(),
        ac_config=None,
        dump_folder="",
    )


def test_parallelize_refuses_sequence_and_pipeline_parallel():
    with pytest.raises(ApertusError, match=r"sequence parallelism is not implemented"):
        _parallelize(_parallel_dims(tp=2), tensor_parallel_degree=2, enable_sequence_parallel=True)
    with pytest.raises(ApertusError, match=r"pipeline parallelism is not implemented"):
        _parallelize(_parallel_dims(pp=2), pipeline_parallel_degree=2)


def test_run_spec_passes_the_degree_to_torchtitan(phase, tmp_path):
    from apertus.train.config_registry import trainer_config

    spec = load_run_spec(write_spec(tmp_path, phase, tensor_parallel=2))
    parallelism = trainer_config(spec, world_size=2).parallelism
    assert parallelism.tensor_parallel_degree == 2
    assert parallelism.spmd_backend == "partial_dtensor"
    assert parallelism.enable_sequence_parallel is False
    plain = trainer_config(load_run_spec(write_spec(tmp_path, phase)))
    assert plain.parallelism.tensor_parallel_degree == 1
    assert plain.metrics.spike_factor == 2.0  # pretraining stops on a loss spike
    assert plain.comm.train_timeout_seconds == 1860  # past the hang watchdog's 1800 s
