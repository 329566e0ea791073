"""The training-step benchmark's pieces: the matched llama3 shape, the FLOPs and MFU formulas,
the synthetic packed batch, and one real step of each model. Timings are never asserted."""

from __future__ import annotations

from contextlib import nullcontext

import pytest
import torch
from torchtitan.components.loss import IGNORE_INDEX

from apertus.core import ApertusError
from apertus.model.flavors import flavor, num_params
from apertus.train.pretokenized import BOS_ID
from bench.train_step import (
    adamw,
    ademamix,
    build,
    document_positions,
    llama3_config,
    loss_masks,
    make_step,
    mfu,
    peak_bf16_flops,
    swiglu_hidden,
    synthetic_batch,
)


def test_swiglu_hidden_matches_our_mlp_weights():
    assert swiglu_hidden(21504) == 14336  # the 8b flavor: exactly Llama-3 8B's hidden size
    assert swiglu_hidden(768) == 512
    assert swiglu_hidden(8192) == 5461  # 1b: 8192 is not a multiple of 3, rounded


def test_llama3_has_our_shape_and_parameter_count():
    ours = flavor("tiny")
    with torch.device("meta"):
        ours_model = ours.build()
        llama_model = llama3_config(ours, seq_len=256, attention="sdpa").build()
    ours_params = sum(p.numel() for p in ours_model.parameters())
    llama_params = sum(p.numel() for p in llama_model.parameters())
    assert ours_params == num_params(ours)
    # What only we have: QK-norm weights and the two xIELU scalars per layer.
    assert ours_params - llama_params == ours.n_layers * (2 * ours.attention_head_dim + 2)
    block = llama_model.layers["0"]
    assert block.attention.n_kv_heads == ours.n_kv_heads
    assert block.attention.head_dim == ours.attention_head_dim
    assert block.feed_forward.w1.out_features == 512


def test_llama3_refuses_a_head_dim_it_cannot_derive():
    with pytest.raises(ApertusError, match="head_dim=32"):
        llama3_config(flavor("debug"), seq_len=64, attention="sdpa")


def test_flops_per_token_use_one_formula_for_both():
    ours = flavor("tiny")
    llama = llama3_config(ours, seq_len=256, attention="sdpa")
    with torch.device("meta"):
        ours_model, llama_model = ours.build(), llama.build()
    ours_params, ours_flops = ours.get_nparams_and_flops(ours_model, 256)
    llama_params, llama_flops = llama.get_nparams_and_flops(llama_model, 256)
    # 6 FLOPs per weight outside the input embedding, the rest is attention.
    attention = 6 * ours.n_layers * ours.n_heads * 2 * ours.attention_head_dim * 256
    embedding = ours.vocab_size * ours.dim
    assert ours_flops == 6 * (ours_params - embedding) + attention
    assert llama_flops == 6 * (llama_params - embedding) + attention


def test_mfu_and_peak_table():
    assert mfu(6e9, 50_000, 1e15) == pytest.approx(0.3)
    assert peak_bf16_flops("NVIDIA H100 80GB HBM3") == 989.4e12
    assert peak_bf16_flops("NVIDIA H100 PCIe") == 756e12
    assert peak_bf16_flops("NVIDIA H200") == 989.4e12
    assert peak_bf16_flops("NVIDIA GeForce RTX 4090") is None


def test_document_positions_restart_at_row_start_and_bos():
    tokens = torch.tensor([[7, 8, BOS_ID, 9, 2, BOS_ID], [BOS_ID, 5, 6, 7, 8, 9]])
    assert document_positions(tokens).tolist() == [[0, 1, 0, 1, 2, 0], [0, 1, 2, 3, 4, 5]]


def test_synthetic_batch_is_packed_documents_with_shifted_labels():
    inputs, positions, labels = synthetic_batch(batch=3, seq_len=200, vocab_size=300)
    assert inputs.shape == positions.shape == labels.shape == (3, 200)
    assert torch.equal(inputs[:, 1:], labels[:, :-1])
    assert (inputs == BOS_ID).sum() >= 2  # several documents per batch
    assert torch.equal(positions, document_positions(inputs))
    masked = loss_masks(inputs, labels)
    assert (masked == IGNORE_INDEX).any()


def test_one_step_of_each_model_trains():
    config = flavor("debug", head_dim=None)
    batch = synthetic_batch(batch=2, seq_len=64, vocab_size=config.vocab_size)
    cpu = torch.device("cpu")
    for model_config, optimizer, masks in (
        (config, ademamix, loss_masks),
        (llama3_config(config, seq_len=64, attention="sdpa"), adamw, None),
    ):
        model = build(model_config, cpu, torch.float32, compile_blocks=False, fsdp_mesh=None)
        before = [p.detach().clone() for p in model.parameters()]
        make_step(model, optimizer(model), batch, nullcontext, masks)()
        after = list(model.parameters())
        assert all(torch.isfinite(p).all() for p in after)
        assert any(not torch.equal(a, b) for a, b in zip(after, before, strict=True))
        assert all(p.grad is None for p in after)  # zero_grad(set_to_none=True)
