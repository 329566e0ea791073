"""The SFT data loader for torchtitan: one conversation per row, completion-only labels,
shuffled per epoch, sharded across data-parallel ranks (RECIPE.md §7).

`SFTDataLoader` is a torchtitan `BaseDataLoader` (built by the trainer from
`SFTDataLoader.Config`) over a directory written by `apertus.posttrain.sft_data`
(`apertus.posttrain.sft_data.SFTData`). Each row holds at most ``max_len + 1`` tokens (a
conversation); a micro-batch pads its rows with ``<pad>`` to the longest of them, rounded up to
`PAD_MULTIPLE` (plus one): ``input = row[:-1]``, ``positions = 0 .. L - 1`` (one document
per row: no packing, §7), ``labels = row[1:]`` with the ignore index wherever the label token
is not a completion token (system/user turns, chat markers, ``<s>``, padding). The trainer
normalises the loss over the labels that remain, i.e. over the completion tokens of the step.
No Goldfish: it belongs to pretraining and the long-context stages (§2).

Order. The sample stream is epoch after epoch; epoch ``e`` is the permutation
``numpy.random.default_rng([seed, e]).permutation(rows)``. Samples are dealt out in rounds of
``micro_batch * dp_world_size`` as `PhaseDataLoader` deals windows: data-parallel rank ``k``
takes the ``micro_batch`` consecutive samples from ``k * micro_batch`` inside the round, so
step ``s`` trains on samples ``[s * global_batch, (s + 1) * global_batch)`` whatever the number
of ranks. Iteration stops after `epochs` epochs (at the last complete round).

State: the samples consumed by all ranks together (`samples_consumed`), the same on every
rank, plus the data's sha256, the row width and the shuffle seed; loading refuses a state
made for other data, another sequence length or another seed. Because the position is global,
a run can resume on another number of ranks or micro-batch (never mid-step).

The trainer's tokenizer slot holds `apertus.train.pretokenized.PretokenizedVocabulary`, read from
sft.json (the trainer builds a tokenizer from `hf_assets_path`, which points at the SFT
directory).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torchtitan.components.dataloader import BaseDataLoader
from torchtitan.components.loss import IGNORE_INDEX
from torchtitan.components.tokenizer import BaseTokenizer

from apertus.core import ApertusError
from apertus.posttrain.sft_data import SFTData
from apertus.train.pretokenized import LossMaskCounts, set_active_loader

__all__ = ["SFTDataLoader", "epoch_order"]

# A micro-batch is padded to its longest row rounded up to this many tokens (at most max_len),
# not to max_len: the same loss (padding carries no label, and attention is causal) for less
# compute, with few distinct shapes for torch.compile.
PAD_MULTIPLE = 16


def epoch_order(rows: int, seed: int, epoch: int) -> np.ndarray:
    """The rows of epoch `epoch` in training order: a permutation seeded by (seed, epoch)."""
    return np.random.default_rng([seed, epoch]).permutation(rows)


class SFTDataLoader(BaseDataLoader):
    """Micro-batches ``({"input": [B, L], "positions": [B, L]}, labels [B, L])`` of SFT rows
    for one data-parallel rank, ``L <= max_len`` the longest row's length rounded up to
    `PAD_MULTIPLE` (see the module docstring)."""

    @dataclass(kw_only=True, slots=True)
    class Config(BaseDataLoader.Config):
        sft_dir: str = ""
        """Directory written by apertus.posttrain.sft_data (sft.json + arrays)."""

        seed: int = 0
        """Seed of the per-epoch shuffle."""

        epochs: int = 1
        """Passes over the rows (RECIPE.md §7: 1)."""

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
        # As PhaseDataLoader: the state is one exact counter, no torchdata snapshots needed.
        del snapshot_every_n_steps
        if not config.sft_dir:
            raise ApertusError("dataloader.sft_dir is not set")
        if dp_world_size < 1 or not 0 <= dp_rank < dp_world_size:
            raise ApertusError(f"bad data-parallel rank {dp_rank} of {dp_world_size}")
        if local_batch_size < 1 or config.epochs < 1 or config.seed < 0:
            raise ApertusError(
                f"micro-batch and epochs must be positive and the seed >= 0, got "
                f"{local_batch_size}, {config.epochs}, {config.seed}"
            )
        self.config = config
        self.data = SFTData(config.sft_dir)
        record = self.data.record
        if seq_len != record["max_len"]:
            raise ApertusError(
                f"{config.sft_dir}: rows were made for max_len {record['max_len']}, the run's "
                f"seq_len is {seq_len}; they must be equal"
            )
        self.vocab_size = int(record["vocab_size"])
        if tokenizer is not None and tokenizer.get_vocab_size() < self.vocab_size:
            raise ApertusError(
                f"{config.sft_dir}: tokenized with {self.vocab_size} ids, the tokenizer has "
                f"{tokenizer.get_vocab_size()}"
            )
        self.data_sha256 = str(record["data_sha256"])
        self.dp_world_size = dp_world_size
        self.dp_rank = dp_rank
        self.seq_len = seq_len
        self.micro_batch = local_batch_size
        self.samples_consumed = 0
        self.mask_counts = LossMaskCounts()
        self._order: tuple[int, np.ndarray] | None = None
        # ApertusMetrics logs the label counts of the active loader (kept = completion labels,
        # nothing EOD-masked or dropped by Goldfish).
        set_active_loader(self)

    @property
    def rows(self) -> int:
        return len(self.data)

    @property
    def samples_per_round(self) -> int:
        """Samples all ranks consume together per micro-batch."""
        return self.micro_batch * self.dp_world_size

    @property
    def total_samples(self) -> int:
        """Samples in all epochs."""
        return self.rows * self.config.epochs

    def sample_rows(self, first: int, count: int) -> np.ndarray:
        """The row indices of samples ``first .. first + count - 1`` of the stream."""
        rows = np.empty(count, dtype=np.int64)
        for i, sample in enumerate(range(first, first + count)):
            epoch, within = divmod(sample, self.rows)
            if self._order is None or self._order[0] != epoch:
                self._order = (epoch, epoch_order(self.rows, self.config.seed, epoch))
            rows[i] = self._order[1][within]
        return rows

    pad_multiple: int = PAD_MULTIPLE
    """A micro-batch is padded to a multiple of this many tokens."""

    def inputs_and_labels(self, rows: np.ndarray, first: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Inputs and completion-only labels of `rows` (the samples from ``first``), padded;
        refuses token ids outside the vocabulary and counts the labels."""
        tokens, mask = self.data.padded(rows, self.pad_multiple)
        if int(tokens.max()) >= self.vocab_size:
            raise ApertusError(
                f"{self.config.sft_dir}: token id {int(tokens.max())} in samples {first}.. is "
                f"outside the vocabulary of {self.vocab_size}"
            )
        full = torch.from_numpy(tokens)
        labels = full[:, 1:].masked_fill(~torch.from_numpy(mask[:, 1:]), IGNORE_INDEX)
        kept = int((labels != IGNORE_INDEX).sum())
        self.mask_counts.add(LossMaskCounts(labels=labels.numel(), kept=kept))
        return full[:, :-1].contiguous(), labels.contiguous()

    def make_batch(self, first: int) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
        """The micro-batch of samples ``first ...`` (`micro_batch` rows); counts its labels."""
        inputs, labels = self.inputs_and_labels(self.sample_rows(first, self.micro_batch), first)
        positions = torch.arange(inputs.shape[1], dtype=torch.int64).expand(len(inputs), -1)
        return {"input": inputs, "positions": positions.contiguous()}, labels

    def __iter__(self) -> Iterator[tuple[dict[str, torch.Tensor], torch.Tensor]]:
        while self.samples_consumed + self.samples_per_round <= self.total_samples:
            batch = self.make_batch(self.samples_consumed + self.dp_rank * self.micro_batch)
            # Advanced before yielding, as PhaseDataLoader: a checkpoint taken while this batch
            # is in use counts it.
            self.samples_consumed += self.samples_per_round
            yield batch

    def state_dict(self) -> dict[str, Any]:
        return {
            "samples_consumed": self.samples_consumed,
            "seq_len": self.seq_len,
            "seed": self.config.seed,
            "sft_data_sha256": self.data_sha256,
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        if not state_dict:
            return
        if state_dict.get("sft_data_sha256") != self.data_sha256:
            raise ApertusError(
                f"the checkpoint's data position belongs to other SFT data (sha256 "
                f"{state_dict.get('sft_data_sha256')}, this data {self.data_sha256}); start a "
                "new stage from it (weights only) instead of resuming"
            )
        for key, mine in (("seq_len", self.seq_len), ("seed", self.config.seed)):
            if int(state_dict.get(key, -1)) != mine:
                raise ApertusError(
                    f"the checkpoint's data position was made with {key} {state_dict.get(key)}, "
                    f"this run uses {mine}; start a new stage from it (weights only) instead"
                )
        consumed = int(state_dict["samples_consumed"])
        if consumed < 0 or consumed % self.samples_per_round:
            raise ApertusError(
                f"the checkpoint's data position ({consumed} samples) is not a whole number of "
                f"rounds of {self.micro_batch} x {self.dp_world_size} samples"
            )
        self.samples_consumed = consumed
