"""Checkpoints: torchtitan's DCP `CheckpointManager` that refuses to write NaN/inf weights, so no
checkpoint on disk holds them, records the sha256 of every file it wrote (`seal_checkpoint`), can
save on demand (the early stop), and resumes from the newest checkpoint that loads and whose
bytes are the recorded ones, setting a corrupt or unsealed newer one aside. Finite is not sane:
weights blowing up before the NaN are saved; after a divergence the launcher judges the
checkpoints by their losses (`apertus.train.launch.checkpoint_health`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.tensor import DTensor
from torchtitan.components.checkpoint import MODEL, CheckpointManager
from torchtitan.components.checkpointer.utils import canonical_fqn
from torchtitan.tools.logging import logger

from apertus.core.files import atomic_write_json, sha256_file
from apertus.train.run_spec import (
    CHECKPOINT_CHECKSUMS,
    checkpoint_files,
    resumable_checkpoints,
    set_aside,
)


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
            seal_checkpoint(Path(self._create_checkpoint_id(curr_step)))
            self.saved_step = curr_step
        return saved

    def _find_load_step(self, folder: str = "") -> int:
        """The newest step of `folder` that loads and whose files match its checksums
        (`run_spec.resumable_checkpoints`), or -1 (then torchtitan starts fresh or from
        `initial_load_path`). torchtitan's own scan takes the newest ``step-N`` with a
        ``.metadata`` and fails on it with pickle's error when that file is truncated, or loads
        a flipped byte silently; here such a checkpoint is moved to ``corrupt/`` with a warning.
        Rank 0 scans (hashing each candidate's files) and moves the bad ones; the others wait
        for its answer, so all load the same step and none reads a folder being moved."""
        rank = dist.get_rank() if dist.is_initialized() else 0
        step = self._scan_for_load_step(Path(folder or self.folder)) if rank == 0 else -1
        if dist.is_initialized() and dist.get_world_size() > 1:
            shared = [step]
            dist.broadcast_object_list(shared, src=0)
            step = shared[0]
        return step

    @staticmethod
    def _scan_for_load_step(folder: Path) -> int:
        steps, bad = resumable_checkpoints(folder)
        for step_dir, problem in bad.values():
            aside = set_aside(step_dir, problem)
            logger.warning(
                f"Checkpoint {step_dir} cannot be loaded: {problem}. Moved it to {aside}."
            )
        if bad:
            logger.warning(
                f"Resuming from the previous checkpoint, {steps[max(steps)]}."
                if steps
                else f"No checkpoint in {folder} loads: this run starts over "
                "(from checkpoint.initial when the spec has one, else from step 0)."
            )
        return max(steps) if steps else -1

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


def seal_checkpoint(step_dir: Path) -> None:
    """Record the sha256 and size of every file of a checkpoint DCP has just written, in its
    ``checksums.json`` (`run_spec.CHECKPOINT_CHECKSUMS`), which a resume checks before loading.

    Collective: every rank hashes its share of the files (DCP writes one or more per rank, so
    each hashes about its own, still in the page cache), rank 0 writes the record, and all wait
    for it, so a rank that goes on never sees an unsealed checkpoint it saved. A kill before the
    record is written leaves the checkpoint unsealed: a resume sets it aside and takes the one
    before."""
    rank, world = (dist.get_rank(), dist.get_world_size()) if dist.is_initialized() else (0, 1)
    begin = time.monotonic()
    names = checkpoint_files(step_dir) if rank == 0 else []
    if world > 1:
        shared = [names]
        dist.broadcast_object_list(shared, src=0)
        names = shared[0]
    mine = {
        name: {"sha256": sha256_file(step_dir / name), "bytes": (step_dir / name).stat().st_size}
        for name in names[rank::world]
    }
    parts = [mine]
    if world > 1:
        parts = [None] * world
        dist.all_gather_object(parts, mine)
    if rank == 0:
        files = {name: entry for part in parts for name, entry in part.items()}
        atomic_write_json(step_dir / CHECKPOINT_CHECKSUMS, {"files": dict(sorted(files.items()))})
    if world > 1:
        dist.barrier()
    size = sum(entry["bytes"] for entry in mine.values())
    logger.info(
        f"Sealed {step_dir.name}: sha256 of {len(names)} file(s) in "
        f"{time.monotonic() - begin:.2f}s ({size / 2**20:.1f} MiB hashed on this rank)"
    )
