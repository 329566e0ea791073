"""The QRPO data for torchtitan: scored completions as rows with completion-only labels, plus
each row's reference log-probability, quantile reward and weight in the step (RECIPE.md §7).

Format. A QRPO data directory is an SFT data directory (`apertus.posttrain.sft_data`: sft.json,
``tokens.npy``, ``loss_mask.npy`` 1 on completion tokens, ``lengths.npy``; one completion with
its prompt per row) plus ``qrpo.npy``, float64 ``[N, 2]``: ``reference_logp`` (log pi_ref(y|x),
summed over the completion) and the quantile reward Rq of each row, in the rows' order.
`write_qrpo_data` writes one (the QRPO step does, before torchrun starts); sft.json's
``data_sha256`` covers the four arrays, so a checkpoint's data position refuses other data.

`QRPODataLoader` is `apertus.train.sft_loader.SFTDataLoader` (padding, labels, sharding over
data-parallel ranks, exact state) with the order and the step boundaries of the single-process
trainer this replaced: epoch ``e`` is the ``e``-th ``torch.randperm(N)`` of one generator seeded
with ``seed``, and an epoch is ``ceil(N / B)`` optimizer steps of ``B = step_completions``
completions, the last one holding the remainder. Its missing rows are fillers (a real row with
weight 0), so every step has the same number of rows on every rank (torchtitan's gradient
accumulation is fixed per step) and no completion is dropped. Each micro-batch carries, besides
``input`` (no ``positions``: a row is one sequence from position 0, plain causal attention):

- ``reference_logp`` [B] float64, ``quantile_reward`` [B] float64;
- ``weight`` [B] float64: 1 / (completions of the row's optimizer step), 0 for fillers.

`apertus.train.qrpo_loss.QRPOLoss` sums ``weight x squared residual`` over the rows of every
micro-batch and rank: the mean over the step's completions, whatever the number of ranks and
micro-batches, with no collective (the weights already know the step's count).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from apertus.core import ApertusError
from apertus.core.files import atomic_write_json, building_directory
from apertus.posttrain.sft_data import ARRAYS, FORMAT, SFT_FILE, save_arrays
from apertus.train.sft_loader import SFTDataLoader

__all__ = ["QRPO_ARRAY", "QRPODataLoader", "QRPORow", "qrpo_epoch_order", "write_qrpo_data"]

QRPO_ARRAY = "qrpo.npy"
"""float64 [N, 2]: reference_logp, quantile reward."""

# Padding sits after every real token and carries no label; its id is irrelevant.
PAD_ID = 0

# A micro-batch is padded to its longest row, as the single-process trainer did (the same shapes,
# so the same rounding); SFT's rounding up to 16 tokens only pays under torch.compile.
PAD_MULTIPLE = 1


@dataclass(frozen=True)
class QRPORow:
    """One scored completion as the trainer needs it."""

    input_ids: Sequence[int]
    completion_mask: Sequence[int]
    reference_logp: float
    quantile_reward: float


def write_qrpo_data(
    rows: Sequence[QRPORow], out_dir: str | Path, *, max_len: int, vocab_size: int
) -> dict:
    """Write `rows` as a QRPO data directory (module doc) built beside `out_dir` and moved into
    place; returns its sft.json record. Every row must hold at most ``max_len + 1`` tokens."""
    if not rows:
        raise ApertusError("QRPO needs at least one completion")
    lengths = np.asarray([len(r.input_ids) for r in rows], dtype=np.int32)
    if int(lengths.max()) > max_len + 1:
        raise ApertusError(f"a QRPO row holds {int(lengths.max())} tokens, more than {max_len + 1}")
    arrays = {
        "tokens.npy": np.concatenate([np.asarray(r.input_ids) for r in rows]).astype(np.int32),
        "loss_mask.npy": np.concatenate([np.asarray(r.completion_mask) for r in rows]).astype(
            np.uint8
        ),
        "lengths.npy": lengths,
        QRPO_ARRAY: np.asarray(
            [[r.reference_logp, r.quantile_reward] for r in rows], dtype=np.float64
        ),
    }
    out_dir = Path(out_dir)
    with building_directory(out_dir) as building:
        files = save_arrays(building, arrays)
        record = {
            "format": FORMAT,
            "max_len": max_len,
            "row_tokens": max_len + 1,
            "vocab_size": int(vocab_size),
            "bos_id": PAD_ID,
            "eos_id": PAD_ID,
            "pad_id": PAD_ID,
            "examples": len(rows),
            "tokens": int(arrays["tokens.npy"].size),
            "completion_tokens": int(arrays["loss_mask.npy"].sum()),
            "files": files,
            "data_sha256": hashlib.sha256(
                "".join(files[name]["sha256"] for name in (*ARRAYS, QRPO_ARRAY)).encode()
            ).hexdigest(),
            "qrpo": True,
        }
        atomic_write_json(building / SFT_FILE, record)
    return record


def qrpo_epoch_order(rows: int, seed: int, epoch: int) -> np.ndarray:
    """The rows of epoch `epoch`: the ``epoch``-th permutation of one torch generator seeded with
    `seed` (the order of the single-process QRPO trainer, so the default run's steps are the
    same)."""
    generator = torch.Generator().manual_seed(seed)
    for _ in range(epoch):
        torch.randperm(rows, generator=generator)
    return torch.randperm(rows, generator=generator).numpy()


class QRPODataLoader(SFTDataLoader):
    """Micro-batches of scored completions for one data-parallel rank (module doc)."""

    pad_multiple = PAD_MULTIPLE

    @dataclass(kw_only=True, slots=True)
    class Config(SFTDataLoader.Config):
        step_completions: int = 0
        """Completions per optimizer step (the run's global batch)."""

    def __init__(self, config: Config, **kwargs) -> None:
        super().__init__(config, **kwargs)
        path = Path(config.sft_dir) / QRPO_ARRAY
        try:
            extras = np.load(path, allow_pickle=False)
        except (OSError, ValueError) as e:
            raise ApertusError(f"{path}: not a QRPO data directory ({e})") from None
        if extras.shape != (self.rows, 2) or extras.dtype != np.float64:
            raise ApertusError(f"{path}: expected float64 [{self.rows}, 2]")
        batch = config.step_completions
        if batch < 1 or batch % (self.micro_batch * self.dp_world_size):
            raise ApertusError(
                f"{batch} completions per step do not split into micro-batches of "
                f"{self.micro_batch} on {self.dp_world_size} data-parallel rank(s)"
            )
        self.extras = extras
        self.steps_per_epoch = -(-self.rows // batch)

    @property
    def samples_per_epoch(self) -> int:
        """Rows of an epoch, fillers of its last step included."""
        return self.steps_per_epoch * self.config.step_completions

    @property
    def total_samples(self) -> int:
        return self.samples_per_epoch * self.config.epochs

    def _epoch_rows(self, epoch: int) -> np.ndarray:
        if self._order is None or self._order[0] != epoch:
            self._order = (epoch, qrpo_epoch_order(self.rows, self.config.seed, epoch))
        return self._order[1]

    def make_batch(self, first: int) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
        batch = self.config.step_completions
        rows = np.empty(self.micro_batch, dtype=np.int64)
        weights = np.empty(self.micro_batch, dtype=np.float64)
        for i, sample in enumerate(range(first, first + self.micro_batch)):
            epoch, within = divmod(sample, self.samples_per_epoch)
            order = self._epoch_rows(epoch)
            if within < self.rows:
                rows[i] = order[within]
                weights[i] = 1.0 / min(batch, self.rows - within // batch * batch)
            else:
                rows[i], weights[i] = order[0], 0.0
        inputs, labels = self.inputs_and_labels(rows, first)
        extras = torch.from_numpy(self.extras[rows])
        # No positions: one completion per row from position 0, so plain causal attention (SDPA's
        # is_causal path on the CPU, no dense mask) is exact.
        return {
            "input": inputs,
            "reference_logp": extras[:, 0].contiguous(),
            "quantile_reward": extras[:, 1].contiguous(),
            "weight": torch.from_numpy(weights),
        }, labels
