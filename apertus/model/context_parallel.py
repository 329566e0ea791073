"""Context parallelism (CP) for the long-context stages (RECIPE.md §6: degrees 1/1/2/4 for the
8B model's 8k/16k/32k/64k stages).

The ``c`` ranks of a CP group train on the same sequences, each holding ``L / c`` of every
sequence's tokens. The sequence is cut into ``2c`` equal chunks and rank ``r`` holds chunks ``r``
and ``2c - 1 - r`` (`sequence_layout`): under a causal mask the early chunks attend to few keys and
the late ones to many, so pairing them gives every rank the same attention work. Embedding, norms,
MLP and the loss are per token and need nothing more. In attention each rank all-gathers the keys
and values of the whole sequence from its group (their gradients are reduce-scattered back in
backward), puts them in sequence order (`ContextGroup.gather`), and attends its own queries to
them under the rows of the document mask that belong to its tokens
(`apertus.model.model.ApertusModel.attention_mask` with ``queries``). The mask is built from the
whole sequence's positions, so documents that cross a chunk boundary stay one document.

This is the scheme of torchtitan's FlexAttention CP (all-gather K/V, shard Q; torchtitan 0.3
``distributed/context_parallel``), written for the project's own ``Attention`` module: that one
takes torchtitan's attention modules only, and its SDPA path needs the flash-attention op CPU
torch has no sharding strategy for (PLATFORM.md, CPU blocker 7). This one works with both of the
model's backends and over gloo, so the CPU tests check it against a run without CP. Memory: each
rank holds the gathered K/V of one layer at a time (2 x L x kv_heads x head_dim) and, with the
dense SDPA mask, an ``L/c x L`` boolean mask; FlexAttention's block mask is O(L/c x L / 128^2).

Gradients: the FSDP mesh spans the data-parallel and CP ranks (torchtitan's ``fsdp`` mesh), so
the gradient reduction sums the CP ranks' parts of each sequence, and the loss is normalised by
the tokens of the whole global batch as without CP.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # torch is imported where it is used: the plan check runs without it
    import torch
    from torch.distributed.device_mesh import DeviceMesh

__all__ = ["ContextGroup", "context_parallel_problems", "sequence_layout"]


def context_parallel_problems(seq_len: int, degree: int) -> list[str]:
    """Why a sequence of `seq_len` tokens cannot be split over `degree` CP ranks (empty: it can):
    each rank holds two of 2 x degree equal chunks."""
    if degree == 1:
        return []
    if seq_len % (2 * degree):
        return [
            f"seq_len {seq_len} is not divisible by 2 x context_parallel {degree} (each rank "
            f"holds 2 of {2 * degree} equal chunks)"
        ]
    return []


@functools.cache
def _layout(seq_len: int, degree: int, rank: int) -> tuple[int, ...]:
    (problem,) = context_parallel_problems(seq_len, degree) or [None]
    if problem is not None:
        raise ValueError(problem)
    if not 0 <= rank < degree:
        raise ValueError(f"CP rank {rank} of {degree}")
    chunk = seq_len // (2 * degree)
    first, second = rank, 2 * degree - 1 - rank
    return (
        *range(first * chunk, (first + 1) * chunk),
        *range(second * chunk, (second + 1) * chunk),
    )


def sequence_layout(
    seq_len: int, degree: int, rank: int, device: torch.device | str = "cpu"
) -> torch.Tensor:
    """The positions in the sequence (int64, ascending per chunk) of the tokens CP rank `rank`
    of `degree` holds: chunks ``rank`` and ``2 * degree - 1 - rank`` of ``2 * degree``."""
    import torch

    return torch.tensor(_layout(seq_len, degree, rank), dtype=torch.long, device=device)


@functools.cache
def _gathered_order(local_len: int, degree: int) -> tuple[int, ...]:
    """Where each sequence position sits in the rank-major concatenation of all ranks' tokens."""
    held = [p for rank in range(degree) for p in _layout(local_len * degree, degree, rank)]
    order = [0] * len(held)
    for slot, position in enumerate(held):
        order[position] = slot
    return tuple(order)


class ContextGroup:
    """The CP group of one rank: its degree and rank, and the all-gather of keys and values."""

    def __init__(self, mesh: DeviceMesh) -> None:
        self.degree = mesh.size()
        self.rank = mesh.get_local_rank()
        self.group = mesh.get_group()
        # Index tensors by (sequence length, device): made once, used by every layer and step.
        self._layouts: dict[tuple[int, str], torch.Tensor] = {}
        self._orders: dict[tuple[int, str], torch.Tensor] = {}

    def layout(self, seq_len: int, device: torch.device) -> torch.Tensor:
        """The positions of the tokens this rank holds (`sequence_layout`)."""
        key = (seq_len, str(device))
        if key not in self._layouts:
            self._layouts[key] = sequence_layout(seq_len, self.degree, self.rank, device)
            # `gather`'s order too, here in eager code: filled inside a compiled block, the
            # cache would fail the first graph's guard, and the block would compile again.
            self._order(seq_len // self.degree, device)
        return self._layouts[key]

    def _order(self, local_len: int, device: torch.device) -> torch.Tensor:
        import torch

        key = (local_len, str(device))
        if key not in self._orders:
            order = _gathered_order(local_len, self.degree)
            self._orders[key] = torch.tensor(order, dtype=torch.long, device=device)
        return self._orders[key]

    def shard(self, tensor: torch.Tensor, layout: torch.Tensor) -> torch.Tensor:
        """This rank's tokens of a [B, L, ...] tensor of whole sequences."""
        return tensor.index_select(1, layout)

    def gather(self, local: torch.Tensor) -> torch.Tensor:
        """[B, H, L/c, D] of every rank -> [B, H, L, D] of the whole sequence, in sequence
        order; differentiable (the backward reduce-scatters the gradient to its owners)."""
        import torch.distributed._functional_collectives as funcol

        gathered = funcol.all_gather_tensor_autograd(
            local.contiguous(), gather_dim=2, group=self.group
        )
        return gathered.index_select(2, self._order(local.shape[2], local.device))
