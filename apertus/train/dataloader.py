"""The pretraining data loader for torchtitan: packed windows of a data phase, sharded across
data-parallel ranks, with the recipe's loss masks (RECIPE.md §1, §2, §5).

`PhaseDataLoader` is a torchtitan `BaseDataLoader` (built by the trainer from
`PhaseDataLoader.Config`). It reads a phase built by `apertus.tokenize.phases` through
`PhaseDataset.packed_sequences`: the phase's token stream cut into non-overlapping windows of
``seq_len + 1`` tokens, window ``i`` starting at token ``i * (seq_len + 1)``. Each window gives
one training sequence: ``input = w[:-1]``, ``labels = w[1:]``, and ``positions`` that restart at
every document start (and at the window start), so the model's attention is block-causal per
document (reset-position-ids / reset-attention-mask).

Sharding. Windows are dealt out in rounds: round ``r`` is the ``micro_batch * dp_world_size``
windows from ``r * micro_batch * dp_world_size`` on, and data-parallel rank ``k`` takes the
``micro_batch`` consecutive windows from ``k * micro_batch`` inside it. The trainer draws
``global_batch / (micro_batch * dp_world_size)`` rounds per optimizer step, so step ``s`` trains on
windows ``[s * global_batch, (s + 1) * global_batch)`` whatever the number of ranks: a run on one
process and a run on eight see the same sequences at the same step. Nothing is random; the order
is the phase's plan.

Loss masks (`apertus.train.goldfish.apply_loss_masks`): the label whose input token is EOD (the
first token of the next packed document) is set to the ignore index, then Goldfish drops about
1/k of the remaining labels (k = h = 50 in pretraining and long-context stages). The trainer
counts valid tokens from the labels, so the loss is normalised over the kept tokens. Label counts
are accumulated in `mask_counts` for logging (the metrics component reads and resets them).

State. The loader's position is one number, the windows consumed by all ranks together
(`windows_consumed`), the same on every rank; a checkpoint taken after step ``s`` holds
``s * global_batch`` and the next run continues with exactly the windows that would have
followed. Because the position is global, a run can resume on a different number of ranks or
with another micro-batch (never mid-step). The state also records the sequence length and the
phase index's sha256, and loading refuses a checkpoint made for another phase or sequence length.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torchtitan.components.dataloader import BaseDataLoader
from torchtitan.components.loss import IGNORE_INDEX
from torchtitan.components.tokenizer import BaseTokenizer

from apertus.core import ApertusError
from apertus.tokenize.phases import PhaseDataset
from apertus.train.goldfish import GOLDFISH_H, GOLDFISH_K, apply_loss_masks
from apertus.train.pretokenized import EOD_ID, LossMaskCounts, set_active_loader

__all__ = ["PhaseDataLoader"]


class PhaseDataLoader(BaseDataLoader):
    """Micro-batches ``({"input": [B, L], "positions": [B, L]}, labels [B, L])`` of a data phase
    for one data-parallel rank (see the module docstring for order, sharding, masks and state).

    Labels are int64 with `IGNORE_INDEX` where masked. Iteration stops when the phase has no
    complete round left; the trainer then ends the run ("ran out of data").
    """

    @dataclass(kw_only=True, slots=True)
    class Config(BaseDataLoader.Config):
        phase_dir: str = ""
        """Directory of a built data phase (phase.json and its index files)."""

        eod_id: int = EOD_ID
        """Token id ending each document; the label after it is masked (RECIPE.md §1)."""

        goldfish: bool = True
        """Apply the Goldfish loss mask (RECIPE.md §2)."""

        goldfish_k: int = GOLDFISH_K
        """Goldfish drops a label when its hashed context falls below 1/k."""

        goldfish_h: int = GOLDFISH_H
        """Goldfish context width in labels (the window includes the target)."""

    def __init__(
        self,
        config: Config,
        *,
        dp_world_size: int,
        dp_rank: int,
        tokenizer: BaseTokenizer | None,
        seq_len: int,
        local_batch_size: int,
        snapshot_every_n_steps: int | None = None,
    ) -> None:
        # snapshot_every_n_steps is torchdata's state-snapshot cadence; this loader's state is one
        # counter that is exact after every micro-batch, so it needs none.
        del snapshot_every_n_steps
        if not config.phase_dir:
            raise ApertusError("dataloader.phase_dir is not set")
        if dp_world_size < 1 or not 0 <= dp_rank < dp_world_size:
            raise ApertusError(f"bad data-parallel rank {dp_rank} of {dp_world_size}")
        if seq_len < 1 or local_batch_size < 1:
            raise ApertusError(
                f"seq_len and micro-batch must be positive, got {seq_len}, {local_batch_size}"
            )
        if config.goldfish and (config.goldfish_k < 1 or config.goldfish_h < 1):
            raise ApertusError(
                f"goldfish needs k >= 1 and h >= 1, got {config.goldfish_k}, {config.goldfish_h}"
            )
        self.config = config
        self.dataset = PhaseDataset(Path(config.phase_dir))
        record = self.dataset.meta
        vocab_size = int(record["vocab_size"])
        if tokenizer is not None and tokenizer.get_vocab_size() < vocab_size:
            raise ApertusError(
                f"{config.phase_dir}: the phase was tokenized with {vocab_size} ids, the "
                f"tokenizer has {tokenizer.get_vocab_size()}"
            )
        eos_id = tokenizer.eos_id if tokenizer is not None else None
        if eos_id is not None and eos_id != config.eod_id:
            raise ApertusError(f"eod_id {config.eod_id} is not the tokenizer's EOS id {eos_id}")
        self.vocab_size = vocab_size
        self.index_sha256 = self.dataset.index_sha256
        self.dp_world_size = dp_world_size
        self.dp_rank = dp_rank
        self.seq_len = seq_len
        self.micro_batch = local_batch_size
        self.goldfish = (config.goldfish_k, config.goldfish_h) if config.goldfish else None
        self.windows_consumed = 0
        self.mask_counts = LossMaskCounts()
        set_active_loader(self)

    @property
    def windows_per_round(self) -> int:
        """Windows all ranks consume together per micro-batch."""
        return self.micro_batch * self.dp_world_size

    @property
    def total_windows(self) -> int:
        """Complete windows in the phase."""
        return self.dataset.total_tokens // (self.seq_len + 1)

    def _window_batch(self, first_window: int) -> tuple[np.ndarray, np.ndarray]:
        """Tokens and positions of `micro_batch` consecutive windows, [B, seq_len + 1]."""
        window = self.seq_len + 1
        tokens = np.empty((self.micro_batch, window), dtype=np.int64)
        positions = np.empty((self.micro_batch, window), dtype=np.int64)
        stream = self.dataset.packed_sequences(self.seq_len, start=first_window * window)
        for row, (w_tokens, w_positions, _) in zip(range(self.micro_batch), stream, strict=False):
            tokens[row] = w_tokens
            positions[row] = w_positions
        return tokens, positions

    def make_batch(self, first_window: int) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
        """The micro-batch of windows ``first_window ...`` with masks applied; counts it."""
        tokens, positions = self._window_batch(first_window)
        if int(tokens.max()) >= self.vocab_size:
            raise ApertusError(
                f"{self.config.phase_dir}: token id {int(tokens.max())} in window "
                f"{first_window}.. is outside the phase's vocabulary of {self.vocab_size}"
            )
        window = torch.from_numpy(tokens)
        inputs = window[:, :-1].contiguous()
        labels = window[:, 1:].contiguous()
        labels, stats = apply_loss_masks(
            inputs, labels, self.config.eod_id, goldfish=self.goldfish, ignore_index=IGNORE_INDEX
        )
        self.mask_counts.add(
            LossMaskCounts(stats.total, stats.eod_masked, stats.goldfish_dropped, stats.kept)
        )
        batch = {"input": inputs, "positions": torch.from_numpy(positions[:, :-1]).contiguous()}
        return batch, labels

    def __iter__(self) -> Iterator[tuple[dict[str, torch.Tensor], torch.Tensor]]:
        while self.windows_consumed + self.windows_per_round <= self.total_windows:
            first = self.windows_consumed + self.dp_rank * self.micro_batch
            batch = self.make_batch(first)
            # Advanced before yielding: a checkpoint taken while this batch is in use already
            # counts it, and the resumed run starts with the next round.
            self.windows_consumed += self.windows_per_round
            yield batch

    def state_dict(self) -> dict[str, Any]:
        # Identical on every rank (a global position), so the checkpoint holds it once.
        return {
            "windows_consumed": self.windows_consumed,
            "seq_len": self.seq_len,
            "phase_index_sha256": self.index_sha256,
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        if not state_dict:
            return
        consumed = int(state_dict["windows_consumed"])
        if state_dict.get("phase_index_sha256") != self.index_sha256:
            raise ApertusError(
                f"the checkpoint's data position belongs to another phase (index sha256 "
                f"{state_dict.get('phase_index_sha256')}, this phase {self.index_sha256}); "
                "start a new stage from it (weights only) instead of resuming"
            )
        if int(state_dict["seq_len"]) != self.seq_len:
            raise ApertusError(
                f"the checkpoint was trained with seq_len {state_dict['seq_len']}, this run "
                f"uses {self.seq_len}; start a new stage from it (weights only) instead"
            )
        if consumed < 0 or consumed % self.windows_per_round:
            raise ApertusError(
                f"the checkpoint's data position ({consumed} windows) is not a whole number of "
                f"rounds of {self.micro_batch} x {self.dp_world_size} windows"
            )
        self.windows_consumed = consumed
