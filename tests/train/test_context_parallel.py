"""Context parallelism (`apertus.model.context_parallel`) for the long-context stages.

End to end: the ``debug`` flavor trained with ``context_parallel: 2`` on 2 gloo processes,
through `python -m apertus.train.launch`, against the same run on 1 process (the shared
`one_process_run`): same per-step losses, tokens and kept-token counts, same weights at the end.
The test phase packs documents of 9-121 tokens into 65-token windows, so documents cross the
chunk boundaries of the 4 x 16-token head-tail split, and so do Goldfish windows (the labels
are masked on the whole sequence before it is split).

Measured here (2 cores, float32): max |loss difference| over 30 steps 9.5e-7, max |weight
difference| after 30 steps 5.1e-7.

Unit checks: the layout of each rank, the order the gathered keys are put back in, the mask rows
of a rank's queries (dense and FlexAttention forms, the FlexAttention one through an eager CPU
forward), and the layout checks before any job or rank starts.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch.nn.attention.flex_attention import flex_attention

from apertus.core import ApertusError
from apertus.model.context_parallel import (
    _gathered_order,
    context_parallel_problems,
    sequence_layout,
)
from apertus.model.model import block_causal_block_mask, block_causal_mask
from apertus.train.config import PretrainConfig
from apertus.train.metrics import read_metrics
from apertus.train.plan import launch_layout, planned_stage
from apertus.train.run_spec import checkpoint_steps, load_run_spec, preflight
from tests.train.test_tensor_parallel import WEIGHT_TOLERANCE, output
from tests.train.test_torchtitan import load_checkpoint, model_weights, run_ok, write_spec

LOSS_TOLERANCE = 2e-5


# ---------------------------------------------------------------------------------------------
# The layout and the masks


def test_each_rank_holds_a_head_and_a_tail_chunk():
    assert sequence_layout(8, 2, 0).tolist() == [0, 1, 6, 7]
    assert sequence_layout(8, 2, 1).tolist() == [2, 3, 4, 5]
    layouts = [sequence_layout(16, 4, r).tolist() for r in range(4)]
    assert layouts[0] == [0, 1, 14, 15] and layouts[3] == [6, 7, 8, 9]
    # Every position is held by exactly one rank.
    assert sorted(p for layout in layouts for p in layout) == list(range(16))
    assert sequence_layout(12, 1, 0).tolist() == list(range(12))


def test_the_gathered_keys_are_put_back_in_sequence_order():
    for seq_len, degree in ((8, 2), (24, 4), (12, 3)):
        gathered = torch.cat([sequence_layout(seq_len, degree, r) for r in range(degree)])
        order = torch.tensor(_gathered_order(seq_len // degree, degree))
        assert gathered[order].tolist() == list(range(seq_len))


def test_a_sequence_must_split_into_two_chunks_per_rank():
    assert context_parallel_problems(64, 1) == []
    assert context_parallel_problems(64, 4) == []
    assert context_parallel_problems(65, 1) == []
    assert context_parallel_problems(36, 4) == [
        "seq_len 36 is not divisible by 2 x context_parallel 4 (each rank holds 2 of 8 equal "
        "chunks)"
    ]
    with pytest.raises(ValueError, match="not divisible"):
        sequence_layout(36, 4, 0)


def _positions() -> torch.Tensor:
    # Two rows of documents that cross the chunk boundaries (every 4 tokens of 16).
    starts = [[0, 3, 9], [0, 6, 7, 13]]
    rows = []
    for row in starts:
        positions, document_start = [], 0
        for i in range(16):
            if i in row:
                document_start = i
            positions.append(i - document_start)
        rows.append(positions)
    # A row that begins inside a document (a continued one) too.
    rows.append([5 + i for i in range(6)] + list(range(10)))
    return torch.tensor(rows)


def test_a_ranks_mask_rows_are_those_of_the_whole_mask():
    positions = _positions()
    whole = block_causal_mask(positions)
    for rank in range(2):
        queries = sequence_layout(16, 2, rank)
        rows = block_causal_mask(positions, queries)
        assert rows.shape == (3, 1, 8, 16)
        assert torch.equal(rows, whole[:, :, queries])


def test_flex_attention_of_a_ranks_queries_matches_sdpa_of_the_same_rows():
    torch.manual_seed(0)
    positions = _positions()
    q_all, k, v = (torch.randn(3, 2, 16, 8) for _ in range(3))
    expected = F.scaled_dot_product_attention(q_all, k, v, attn_mask=block_causal_mask(positions))
    for rank in range(2):
        queries = sequence_layout(16, 2, rank)
        q = q_all[:, :, queries]
        dense = F.scaled_dot_product_attention(
            q, k, v, attn_mask=block_causal_mask(positions, queries)
        )
        flex = flex_attention(q, k, v, block_mask=block_causal_block_mask(positions, queries))
        torch.testing.assert_close(dense, expected[:, :, queries])
        torch.testing.assert_close(flex, dense, atol=1e-5, rtol=1e-5)


# ---------------------------------------------------------------------------------------------
# Checks before any rank starts


def test_run_spec_checks_the_degree_and_the_split(phase, tmp_path):
    for value, message in (
        (0, "context_parallel must be an integer >= 1, got 0"),
        (1.5, "context_parallel must be an integer, got 1.5"),
        (3, "seq_len 64 is not divisible by 2 x context_parallel 3"),
    ):
        with pytest.raises(ApertusError, match=message.replace(".", r"\.")):
            load_run_spec(write_spec(tmp_path / str(value), phase, context_parallel=value))
    spec = load_run_spec(write_spec(tmp_path / "ok", phase, context_parallel=2))
    preflight(spec, world_size=2)  # 1 data-parallel rank: 8 = 4 x 2 micro-steps
    with pytest.raises(ApertusError, match=r"context_parallel 2 does not divide the 3 rank"):
        preflight(spec, world_size=3)
    wide = load_run_spec(
        write_spec(tmp_path / "wide", phase, context_parallel=2, global_batch=12, micro_batch=3)
    )
    with pytest.raises(
        ApertusError,
        match=r"global batch 12 is not divisible by micro_batch 3 x 8 data-parallel rank\(s\) "
        r"\(16 ranks / context_parallel 2\)",
    ):
        preflight(wide, world_size=16)


def _pretrain(**long: object) -> PretrainConfig:
    from apertus.core.config import load_config

    config = load_config()
    section = dict(config["pretrain"])
    stage = {**section["long_context"][0], **long}
    section["long_context"] = [stage]
    return PretrainConfig.from_dict(section)


def test_the_launch_layout_names_each_degree():
    cfg = _pretrain(name="ctx", nnodes=8, context_parallel=4)
    stage = planned_stage(cfg, "ctx")
    assert stage.context_parallel == 4
    assert launch_layout(cfg, stage) == (
        "torchrun 8 node(s) x 1 = 8 rank(s): context_parallel 4 x tensor_parallel 1 x "
        "data_parallel 2"
    )
    phase = planned_stage(cfg, cfg.phases[0])
    assert phase.context_parallel == 1


def test_the_plan_check_names_the_stages_context_parallel_key():
    from apertus.core.config import load_config
    from apertus.plan_check import plan_problems

    config = load_config()
    config["pretrain"]["long_context"][0]["context_parallel"] = 3
    config["pretrain"]["long_context"][0]["nnodes"] = 2
    problems = "\n".join(plan_problems(config))
    assert "pretrain.long_context[0].context_parallel" in problems
    assert "does not divide the 2 rank(s)" in problems


# ---------------------------------------------------------------------------------------------
# End to end (torchrun, 2 gloo processes)


@pytest.mark.slow
def test_context_parallel_run_matches_one_process(one_process_run, phase, tmp_path):
    one_dir, one_proc = one_process_run
    cp_dir = tmp_path / "cp2"
    cp_proc = run_ok(write_spec(cp_dir, phase, context_parallel=2), 2)
    log = output(cp_proc)
    assert log.count("Applied context parallelism to Apertus over 2 rank(s)") == 2
    # The FSDP mesh spans the CP ranks: their gradient parts are summed.
    assert log.count("Applied FSDP to Apertus over 2 rank(s)") == 2
    assert "context parallelism" not in output(one_proc)

    one = read_metrics(one_dir / "out" / "metrics.jsonl")
    two = read_metrics(cp_dir / "out" / "metrics.jsonl")
    assert list(two) == list(one) == list(range(1, 31))
    differences = [abs(one[s]["loss"] - two[s]["loss"]) for s in one]
    assert max(differences) < LOSS_TOLERANCE
    for step in one:
        # Both CP ranks read the same sequences: the tokens and kept tokens are the 1-rank run's.
        assert two[step]["tokens_seen"] == one[step]["tokens_seen"]
        assert two[step]["kept_tokens"] == one[step]["kept_tokens"]
    assert sorted(checkpoint_steps(cp_dir / "ckpt")) == [10, 20, 30]
    theirs = model_weights(load_checkpoint(one_dir / "ckpt" / "step-30", tmp_path))
    ours = model_weights(load_checkpoint(cp_dir / "ckpt" / "step-30", tmp_path))
    assert ours.keys() == theirs.keys()
    worst = max((ours[key] - value).abs().max().item() for key, value in theirs.items())
    assert worst < WEIGHT_TOLERANCE
    print(
        f"\nCP=2 on 2 processes vs 1 process: max |loss diff| {max(differences):.1e}, "
        f"max |weight diff| {worst:.1e}; {cp_proc.wall_s:.1f} s wall"
    )
