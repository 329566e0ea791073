"""Loss masks applied in the data loader (`apertus.train.dataloader.PhaseDataLoader.make_batch`)
by setting labels to `ignore_index` (RECIPE.md §1, §2).

- EOD transition (§1): documents are packed, so the label at a position whose *input* token is
  EOD is the first token of the next, unrelated document; it is masked.
- Goldfish loss (§2, k = 50, h = 50): a label is dropped when a hash of the h labels ending at it
  falls below 1/k, so about 1 in k tokens never receives gradient. The hash depends only on the
  local context, so a passage repeated verbatim in the corpus loses the same tokens every time
  and cannot be memorised exactly:

      table  = torch.rand(1_000_003, generator=torch.Generator().manual_seed(2971215073))
      key_j  = prod(labels[j : j+h]) mod 1_000_003   # int64 product, wrapping; includes target
      drop label j+h-1 if table[key_j] < 1/k

  The first h-1 labels of each packed sample are never dropped, and windows run across document
  boundaries inside a pack. The int64 product wraps modulo 2^64 (two's complement), and
  "mod" follows Python / `torch.remainder`: the result has the sign of the modulus, so a negative
  wrapped product still gives a key in [0, 1_000_003). Multiplication modulo 2^64 is associative
  and commutative, so the order in which the window is reduced does not change the key.

Keys are computed from the labels *before* any masking (the recipe's training scripts keep the
label tokens and mask through a separate loss mask), so the EOD-transition mask does not move the
Goldfish drops.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch

__all__ = [
    "GOLDFISH_H",
    "GOLDFISH_K",
    "GOLDFISH_TABLE_SEED",
    "GOLDFISH_TABLE_SIZE",
    "LossMaskStats",
    "apply_goldfish",
    "apply_loss_masks",
    "eod_transition_mask",
    "goldfish_mask",
    "goldfish_table",
]

# RECIPE.md §2: the table and its seed come from the training scripts.
GOLDFISH_TABLE_SIZE = 1_000_003
GOLDFISH_TABLE_SEED = 2971215073
GOLDFISH_K = 50
GOLDFISH_H = 50


@functools.cache
def goldfish_table(device: torch.device | str = "cpu") -> torch.Tensor:
    """The fixed table of uniform numbers the Goldfish keys index into (cached per device; it is
    always drawn on the CPU generator so every device sees the same values)."""
    table = torch.rand(
        GOLDFISH_TABLE_SIZE, generator=torch.Generator().manual_seed(GOLDFISH_TABLE_SEED)
    )
    return table.to(device)


def _check_labels(labels: torch.Tensor, what: str = "labels") -> None:
    if labels.dim() != 2:
        raise ValueError(f"{what} must be [batch, seq_len], got shape {tuple(labels.shape)}")
    if labels.dtype != torch.int64:
        # The key is defined by int64 wrap-around; a narrower type would wrap differently.
        raise TypeError(f"{what} must be int64 (torch.long), got {labels.dtype}")


def goldfish_mask(labels: torch.Tensor, k: int = GOLDFISH_K, h: int = GOLDFISH_H) -> torch.Tensor:
    """Which labels Goldfish drops (True = drop), for `labels` of shape [batch, seq_len], int64.

    Each row is one packed sample: its first h-1 labels are never dropped; a row shorter than h
    has no full window and keeps everything.
    """
    _check_labels(labels)
    if k < 1 or h < 1:
        raise ValueError(f"goldfish needs k >= 1 and h >= 1, got k={k}, h={h}")
    drop = torch.zeros(labels.shape, dtype=torch.bool, device=labels.device)
    if labels.shape[1] < h:
        return drop
    # windows[b, j] = labels[b, j : j+h]; the int64 product wraps modulo 2^64.
    window_products = labels.unfold(1, h, 1).prod(dim=-1)
    keys = torch.remainder(window_products, GOLDFISH_TABLE_SIZE)
    drop[:, h - 1 :] = goldfish_table(labels.device)[keys] < 1.0 / k
    return drop


def apply_goldfish(
    labels: torch.Tensor,
    k: int = GOLDFISH_K,
    h: int = GOLDFISH_H,
    ignore_index: int = -100,
    *,
    key_labels: torch.Tensor | None = None,
) -> tuple[torch.Tensor, float]:
    """Set the labels Goldfish drops to `ignore_index`; returns (new labels, fraction of the
    previously valid labels that were dropped).

    Positions already at `ignore_index` stay as they are and are not counted. Keys are hashed
    from `key_labels` when given (pass the unmasked labels if `labels` was already masked, as
    `apply_loss_masks` does), else from `labels` themselves.
    """
    keys_from = labels if key_labels is None else key_labels
    if keys_from.shape != labels.shape:
        raise ValueError(
            f"key_labels shape {tuple(keys_from.shape)} != labels shape {tuple(labels.shape)}"
        )
    drop = goldfish_mask(keys_from, k=k, h=h)
    valid = labels != ignore_index
    dropped = drop & valid
    n_valid = int(valid.sum())
    fraction = int(dropped.sum()) / n_valid if n_valid else 0.0
    return labels.masked_fill(dropped, ignore_index), fraction


def eod_transition_mask(inputs: torch.Tensor, eod_id: int) -> torch.Tensor:
    """True where the input token is EOD: the label there is the first token of the next packed
    document, which cannot be predicted from this one (RECIPE.md §1)."""
    _check_labels(inputs, "inputs")
    return inputs == eod_id


@dataclass(frozen=True)
class LossMaskStats:
    """Label counts for one batch, for logging."""

    total: int  # labels in the batch
    already_ignored: int  # labels at ignore_index on entry (e.g. padding)
    eod_masked: int  # valid labels masked because the input is EOD
    goldfish_dropped: int  # labels still valid after the EOD mask that Goldfish dropped
    kept: int  # labels that contribute to the loss

    @property
    def goldfish_fraction(self) -> float:
        """Share of the labels reaching Goldfish that it dropped (~1/k)."""
        seen = self.goldfish_dropped + self.kept
        return self.goldfish_dropped / seen if seen else 0.0


def apply_loss_masks(
    inputs: torch.Tensor,
    labels: torch.Tensor,
    eod_id: int,
    goldfish: tuple[int, int] | None = (GOLDFISH_K, GOLDFISH_H),
    ignore_index: int = -100,
) -> tuple[torch.Tensor, LossMaskStats]:
    """The pretraining loss masks: EOD transitions first, then Goldfish `(k, h)` (None: off),
    with Goldfish keys hashed from the original labels. Returns new labels (the inputs are not
    modified) and the counts."""
    _check_labels(labels)
    if inputs.shape != labels.shape:
        raise ValueError(
            f"inputs shape {tuple(inputs.shape)} != labels shape {tuple(labels.shape)}"
        )
    valid = labels != ignore_index
    eod = eod_transition_mask(inputs, eod_id) & valid
    masked = labels.masked_fill(eod, ignore_index)
    goldfish_dropped = 0
    if goldfish is not None:
        k, h = goldfish
        drop = goldfish_mask(labels, k=k, h=h) & (masked != ignore_index)
        goldfish_dropped = int(drop.sum())
        masked = masked.masked_fill(drop, ignore_index)
    stats = LossMaskStats(
        total=labels.numel(),
        already_ignored=int((~valid).sum()),
        eod_masked=int(eod.sum()),
        goldfish_dropped=goldfish_dropped,
        kept=int((masked != ignore_index).sum()),
    )
    return masked, stats
