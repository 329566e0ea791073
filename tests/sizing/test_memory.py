"""The memory formulas against what torch really keeps: `block_saved_bytes` against the
tensors autograd saves for one block of the real model (saved-tensor hooks, eager, CPU), in
fp32 and bf16, with and without a context-parallel gather; the sharding arithmetic against
FSDP2's padding rule and the parameter count."""

from __future__ import annotations

import math

import pytest
import torch

from apertus.model.flavors import flavor
from apertus.model.shapes import FLAVOR_SHAPES, num_params
from apertus.sizing.memory import (
    block_saved_bytes,
    parameter_units,
    sharded_numel,
)


def _saved_by_block(shape_name: str, dtype: torch.dtype, batch: int = 2, seq: int = 64) -> float:
    """Bytes per token that autograd keeps for one block's backward, parameters and the RoPE
    tables (shared by all blocks) left out, each storage counted once."""
    config = flavor(shape_name, n_layers=1)
    model = config.build().to(dtype)
    block = model.layers["0"]
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    positions = torch.arange(seq).expand(batch, seq)
    cos, sin = model.rope(positions, dtype)
    shared = {t.untyped_storage().data_ptr() for t in (cos, sin)}
    saved: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        storage = t.untyped_storage()
        # xIELU's one-element alphas, beta and eps are constants, not activations.
        if t.numel() > 1 and storage.data_ptr() not in params | shared:
            saved[storage.data_ptr()] = storage.nbytes()
        return t

    x = torch.randn(batch, seq, config.dim, dtype=dtype, requires_grad=True)
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        block(x, cos, sin, None)
    return sum(saved.values()) / (batch * seq)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("name", ["debug", "tiny"])
def test_block_saved_bytes_is_what_autograd_keeps(name, dtype):
    measured = _saved_by_block(name, getattr(torch, dtype))
    assert block_saved_bytes(FLAVOR_SHAPES[name], dtype) == pytest.approx(measured, rel=1e-9)


def test_parameter_units_hold_every_parameter():
    for shape in FLAVOR_SHAPES.values():
        units = parameter_units(shape)
        count = sum(
            sum(math.prod(dims) for dims, _ in params) * (shape.n_layers if name == "block" else 1)
            for name, params in units.items()
        )
        assert count == num_params(shape)


def test_sharded_numel_pads_dim_zero_as_fsdp2_does():
    # FSDP2 chunks dim 0 into world-size pieces of ceil(n / world) rows (torch.chunk), padding
    # the last ranks: 5 rows over 4 ranks is 2 rows each.
    assert sharded_numel((5, 3), 4) == 6
    assert sharded_numel((128,), 2048) == 1
    assert sharded_numel((8192, 8192), 2048) == 4 * 8192
