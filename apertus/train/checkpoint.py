"""Checkpoints: torchtitan's DCP `CheckpointManager` that refuses to write NaN/inf weights, so the
last checkpoint on disk is always a good one, and can save on demand (the early stop).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.tensor import DTensor
from torchtitan.components.checkpoint import MODEL, CheckpointManager
from torchtitan.components.checkpointer.utils import canonical_fqn


@torch.no_grad()
def assert_finite_parameters(modules: list[nn.Module], what: str) -> None:
    """Raise on every rank if any rank holds a NaN/inf parameter (local shards are checked
    and the count of bad tensors is summed over the ranks)."""
    bad, first = 0, ""
    device = torch.device("cpu")
    for module in modules:
        for name, param in module.named_parameters():
            local = param.to_local() if isinstance(param, DTensor) else param
            device = local.device
            if not bool(torch.isfinite(local).all()):
                bad += 1
                first = first or canonical_fqn(name)
    count = torch.tensor([bad], dtype=torch.int64, device=device)
    if dist.is_initialized() and dist.get_world_size() > 1:
        dist.all_reduce(count)
    total = int(count.item())
    if total:
        where = f" (on this rank: {first})" if first else ""
        raise RuntimeError(
            f"Weights are not finite: {total} parameter shard(s) hold NaN/inf{where}. "
            f"Refusing to write the {what}; the previous checkpoint is kept."
        )


class FiniteCheckpointManager(CheckpointManager):
    """torchtitan's DCP `CheckpointManager` that checks the weights are finite before each
    save and refuses (raising on every rank) otherwise, so a diverged step never replaces the
    last good checkpoint."""

    @dataclass(kw_only=True, slots=True)
    class Config(CheckpointManager.Config):
        pass

    saved_step: int | None = None
    """The step of the last checkpoint this process wrote."""
    _forced: bool = False

    def _should_save(self, curr_step: int, last_step: bool = False) -> bool:
        return self._forced or super()._should_save(curr_step, last_step)

    def _save(self, curr_step: int, last_step: bool = False) -> bool:
        if self._should_save(curr_step, last_step):
            assert_finite_parameters(self.states[MODEL].model, f"checkpoint of step {curr_step}")
        saved = super()._save(curr_step, last_step)
        if saved:
            self.saved_step = curr_step
        return saved

    def save_now(self, curr_step: int) -> None:
        """A full checkpoint (to resume from) of `curr_step`, whatever the interval, unless
        this step's is already written; waits for it to be on disk."""
        if not self.enable or self.saved_step == curr_step:
            return
        self._forced = True
        try:
            self._save(curr_step)
        finally:
            self._forced = False
        self.maybe_wait_for_saving()
