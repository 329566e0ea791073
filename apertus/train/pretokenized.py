"""What the two data loaders (`apertus.train.dataloader.PhaseDataLoader` for pretraining,
`apertus.train.sft_loader.SFTDataLoader` for SFT) share: the trainer's vocabulary stand-in for
pre-tokenized data, the loss-mask counts they accumulate, and the handle through which the
metrics component reads them.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torchtitan.components.tokenizer import BaseTokenizer

from apertus.core import ApertusError
from apertus.posttrain.sft_data import SFT_FILE, read_sft_record
from apertus.tokenize.phases import read_phase_record

__all__ = [
    "BOS_ID",
    "EOD_ID",
    "LossMaskCounts",
    "PretokenizedVocabulary",
    "active_loader",
    "set_active_loader",
]

# RECIPE.md §1: every document is <s> ... </s>, bos 1, eos 2.
BOS_ID = 1
EOD_ID = 2

# The loader built last in this process: the metrics component reads its mask counts (the
# trainer gives the metrics component no handle on the loader).
_ACTIVE: Any = None


def active_loader() -> Any:
    """The data loader built last in this process (a `PhaseDataLoader` or an `SFTDataLoader`,
    each with `mask_counts`), or None."""
    return _ACTIVE


def set_active_loader(loader: Any) -> None:
    """Make `loader` the one whose loss-mask counts the metrics log; every loader calls it."""
    global _ACTIVE
    _ACTIVE = loader


@dataclass
class LossMaskCounts:
    """Label counts summed over the micro-batches yielded since the last `reset`."""

    labels: int = 0  # every label position
    eod_masked: int = 0  # labels masked because their input token is EOD
    goldfish_dropped: int = 0  # labels Goldfish dropped (after the EOD mask)
    kept: int = 0  # labels that reach the loss

    def add(self, other: LossMaskCounts) -> None:
        self.labels += other.labels
        self.eod_masked += other.eod_masked
        self.goldfish_dropped += other.goldfish_dropped
        self.kept += other.kept

    def as_tensor(self) -> torch.Tensor:
        """The four counts as int64, in field order (to sum them across ranks)."""
        return torch.tensor(
            [self.labels, self.eod_masked, self.goldfish_dropped, self.kept], dtype=torch.int64
        )

    @classmethod
    def from_tensor(cls, values: torch.Tensor) -> LossMaskCounts:
        labels, eod, dropped, kept = (int(v) for v in values.tolist())
        return cls(labels, eod, dropped, kept)

    @property
    def goldfish_fraction(self) -> float:
        """Share of the labels reaching Goldfish that it dropped (~1/k)."""
        seen = self.goldfish_dropped + self.kept
        return self.goldfish_dropped / seen if seen else 0.0

    @property
    def eod_fraction(self) -> float:
        """Share of all labels masked as EOD transitions."""
        return self.eod_masked / self.labels if self.labels else 0.0


class PretokenizedVocabulary(BaseTokenizer):
    """What the trainer's tokenizer slot holds when the data is already tokenized.

    torchtitan builds a tokenizer from `hf_assets_path` before the data loader, even for
    pre-tokenized data (PLATFORM.md). Pointing `hf_assets_path` at the data directory (a data
    phase with its phase.json, or SFT data with its sft.json) and using this class gives the
    trainer the vocabulary size and special ids recorded there, without a tokenizer file (a
    phase records no special ids: they are RECIPE.md §1's). It cannot encode or decode text
    (training never needs to; the tokenizer directory of the tokenize stage can).
    """

    @dataclass(kw_only=True, slots=True)
    class Config(BaseTokenizer.Config):
        pass

    def __init__(self, config: Config | None = None, *, tokenizer_path: str) -> None:
        super().__init__()
        if (Path(tokenizer_path) / SFT_FILE).is_file():
            record = read_sft_record(tokenizer_path)
        else:
            record = read_phase_record(tokenizer_path)
        self.vocab_size = int(record["vocab_size"])
        self.bos_id = int(record.get("bos_id", BOS_ID))
        self.eos_id = int(record.get("eos_id", EOD_ID))
        self.pad_id = record.get("pad_id")

    def encode(self, *args: Any, **kwargs: Any) -> list[int]:
        raise ApertusError(
            "the training data holds token ids only; load the tokenizer of the tokenize stage "
            "to encode"
        )

    def decode(self, *args: Any, **kwargs: Any) -> str:
        raise ApertusError(
            "the training data holds token ids only; load the tokenizer of the tokenize stage "
            "to decode"
        )

    def get_vocab_size(self) -> int:
        return self.vocab_size
