"""Goldfish loss mask and EOD-transition mask against literal references (RECIPE.md §1, §2)."""

from __future__ import annotations

import pytest
import torch

from apertus.train.goldfish import (
    LossMaskStats,
    apply_goldfish,
    apply_loss_masks,
    eod_transition_mask,
    goldfish_mask,
    goldfish_table,
)

EOD = 2
BOS = 1


def wrap_int64(value: int) -> int:
    """Python int -> the int64 two's-complement value it wraps to."""
    return (value + 2**63) % 2**64 - 2**63


def reference_goldfish_mask(labels: list[list[int]], k: int, h: int) -> list[list[bool]]:
    """RECIPE.md §2 line by line, on Python ints emulating int64 wrap-around; `%` is Python's
    (sign of the divisor), the same as torch.remainder."""
    table = torch.rand(1_000_003, generator=torch.Generator().manual_seed(2971215073)).tolist()
    out = []
    for row in labels:
        drop = [False] * len(row)
        for j in range(len(row) - h + 1):
            product = 1
            for label in row[j : j + h]:
                product = wrap_int64(product * label)
            key = product % 1_000_003
            if table[key] < 1 / k:
                drop[j + h - 1] = True
        out.append(drop)
    return out


def random_labels(batch, length, high, seed):
    return torch.randint(0, high, (batch, length), generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize(
    ("high", "k", "h", "seed"),
    [
        (131_072, 50, 50, 0),  # the recipe's vocabulary and (k, h): products wrap many times
        (2**62, 50, 50, 1),  # huge ids: every multiplication overflows
        (131_072, 3, 7, 2),  # other (k, h), so that many labels are dropped
        (5, 2, 4, 3),  # tiny ids: products often stay small (no wrap) and hit key 0..3
    ],
)
def test_vectorised_mask_equals_literal_reference(high, k, h, seed):
    labels = random_labels(3, 160, high, seed)
    # Negative labels (padding at ignore_index) take part in the keys like any other value.
    labels[1, 40:45] = -100
    expected = reference_goldfish_mask(labels.tolist(), k, h)
    assert goldfish_mask(labels, k=k, h=h).tolist() == expected
    # The reference must actually exercise dropping (and keeping) for the comparison to bite.
    flat = [d for row in expected for d in row]
    assert any(flat) and not all(flat)


def test_wrapping_products_are_negative_and_still_give_valid_keys():
    # Products that wrap to a negative int64: the key is their non-negative remainder.
    labels = torch.full((1, 60), 2**40 + 3, dtype=torch.int64)
    window_product = 1
    for _ in range(50):
        window_product = wrap_int64(window_product * (2**40 + 3))
    assert window_product < 0
    expected = reference_goldfish_mask(labels.tolist(), k=50, h=50)
    assert goldfish_mask(labels).tolist() == expected
    # torch agrees with the Python int64 emulation on the raw product too.
    assert labels[:, :50].prod(dim=-1).item() == window_product


def test_first_h_minus_1_labels_are_never_dropped():
    labels = random_labels(4, 200, 131_072, 4)
    # k = 1 drops every label that has a full window (table values are < 1).
    drop = goldfish_mask(labels, k=1, h=50)
    assert not drop[:, :49].any()
    assert drop[:, 49:].all()


def test_rows_shorter_than_h_keep_everything():
    labels = random_labels(2, 49, 131_072, 5)
    assert not goldfish_mask(labels, k=1, h=50).any()


def test_windows_cross_document_boundaries():
    # A pack with a document boundary at position 60: labels right after it are still eligible
    # (no restart of the h-1 grace period), and their keys include the previous document.
    labels = random_labels(1, 120, 131_072, 6)
    labels[0, 59] = BOS
    assert goldfish_mask(labels, k=1, h=50)[0, 60:].all()
    second_doc_alone = labels[:, 60:]
    together = goldfish_mask(labels, k=2, h=10)[:, 60:]
    alone = goldfish_mask(second_doc_alone, k=2, h=10)
    assert not alone[:, :9].any()
    assert together[:, :9].any()  # would be all False if windows restarted at the document


def test_drops_one_in_k_when_keys_are_spread():
    # Odd labels: window products stay odd, so the keys spread over the whole table and the
    # drop rate is 1/k up to sampling noise.
    labels = 2 * random_labels(64, 2048, 65_536, 7) + 1
    eligible = goldfish_mask(labels)[:, 49:]
    rate = eligible.float().mean().item()
    sd = (0.02 * 0.98 / eligible.numel()) ** 0.5
    assert abs(rate - 0.02) < 5 * sd, rate


def test_drop_rate_on_random_token_ids():
    # With arbitrary ids, a window whose product holds >= 64 factors of two wraps to 0 (key 0,
    # table value 0.2337 > 1/k: never dropped), and one with many factors of two wraps onto a
    # handful of keys; so uniform random ids lose somewhat less than 1/k: "about 2%".
    labels = random_labels(64, 2048, 131_072, 8)
    drop = goldfish_mask(labels)
    zero_product = labels.unfold(1, 50, 1).prod(dim=-1) == 0
    assert zero_product.float().mean().item() > 0.1
    assert goldfish_table()[0].item() >= 1 / 50
    assert not drop[:, 49:][zero_product].any()
    assert 0.012 < drop.float().mean().item() < 0.021


def test_k_changes_the_rate():
    labels = 2 * random_labels(16, 1024, 65_536, 9) + 1
    eligible = goldfish_mask(labels, k=10, h=8)[:, 7:]
    rate = eligible.float().mean().item()
    assert abs(rate - 0.1) < 5 * (0.1 * 0.9 / eligible.numel()) ** 0.5, rate


def test_mask_is_deterministic_and_depends_only_on_the_window():
    labels = random_labels(2, 300, 131_072, 9)
    first = goldfish_mask(labels)
    assert torch.equal(first, goldfish_mask(labels.clone()))
    # The same 50-token passage at a different offset in another row gets the same drop.
    row = torch.cat([random_labels(1, 37, 131_072, 10), labels[:1, 100:200]], dim=1)
    assert torch.equal(goldfish_mask(row)[0, 37 + 49 :], first[0, 149:200])


def test_table_is_the_recipe_table():
    table = goldfish_table()
    assert table.shape == (1_000_003,)
    assert table.dtype == torch.float32
    # Pinned values of the seeded CPU Mersenne-Twister stream (torch 2.13): if a torch release
    # changed the stream, masks would no longer match the original run's.
    assert table[:3].tolist() == pytest.approx(
        [0.23368388414382935, 0.4412640333175659, 0.7411476969718933], abs=0
    )
    assert goldfish_table() is table


@pytest.mark.parametrize(
    ("labels", "error", "message"),
    [
        (torch.zeros(5, dtype=torch.int64), ValueError, r"\[batch, seq_len\]"),
        (torch.zeros(2, 5, dtype=torch.int32), TypeError, "int64"),
    ],
)
def test_bad_labels_are_rejected(labels, error, message):
    with pytest.raises(error, match=message):
        goldfish_mask(labels)


def test_bad_k_h_are_rejected():
    with pytest.raises(ValueError, match="k=0, h=50"):
        goldfish_mask(torch.zeros(1, 60, dtype=torch.int64), k=0)


def test_apply_goldfish_leaves_ignored_positions_and_reports_the_fraction():
    labels = random_labels(2, 100, 131_072, 11)
    drop = goldfish_mask(labels, k=3, h=5)
    labels_with_padding = labels.clone()
    labels_with_padding[:, 90:] = -100
    out, fraction = apply_goldfish(labels_with_padding, k=3, h=5, key_labels=labels)
    valid = labels_with_padding != -100
    expected = labels_with_padding.masked_fill(drop & valid, -100)
    assert torch.equal(out, expected)
    assert fraction == pytest.approx((drop & valid).sum().item() / valid.sum().item())
    assert 0.2 < fraction < 0.5  # about 1/3 of the labels with a full window
    # The input labels are untouched.
    assert (labels_with_padding[:, :90] != -100).all()


def test_apply_goldfish_hashes_its_own_labels_by_default():
    labels = random_labels(1, 100, 131_072, 12)
    out, fraction = apply_goldfish(labels, k=2, h=4)
    drop = goldfish_mask(labels, k=2, h=4)
    assert torch.equal(out == -100, drop)
    assert fraction == drop.sum().item() / 100


def test_apply_goldfish_on_all_ignored_labels():
    labels = torch.full((1, 60), -100, dtype=torch.int64)
    out, fraction = apply_goldfish(labels, k=1, h=50)
    assert torch.equal(out, labels)
    assert fraction == 0.0


@pytest.fixture
def packed():
    """Two packed rows of <s> ... </s> documents; labels are inputs shifted by one."""
    stream = [BOS, 11, 12, 13, EOD, BOS, 21, 22, EOD, BOS, 31, 32, 33, 34, EOD, BOS, 41]
    inputs = torch.tensor([stream[0:8], stream[8:16]])
    labels = torch.tensor([stream[1:9], stream[9:17]])
    return inputs, labels


def test_eod_transition_mask_on_a_packed_example(packed):
    inputs, labels = packed
    mask = eod_transition_mask(inputs, EOD)
    assert mask.tolist() == [
        [False, False, False, False, True, False, False, False],
        [True, False, False, False, False, False, True, False],
    ]
    # Every masked label is the <s> that starts the next document.
    assert (labels[mask] == BOS).all()


def test_apply_loss_masks_without_goldfish(packed):
    inputs, labels = packed
    out, stats = apply_loss_masks(inputs, labels, EOD, goldfish=None)
    assert out.tolist() == [
        [11, 12, 13, EOD, -100, 21, 22, EOD],
        [-100, 31, 32, 33, 34, EOD, -100, 41],
    ]
    assert stats == LossMaskStats(
        total=16, already_ignored=0, eod_masked=3, goldfish_dropped=0, kept=13
    )
    assert stats.goldfish_fraction == 0.0
    assert torch.equal(labels, packed[1])  # not modified in place


def test_apply_loss_masks_composes_eod_then_goldfish_on_original_labels():
    gen = torch.Generator().manual_seed(13)
    inputs = torch.randint(3, 131_072, (4, 400), generator=gen)
    inputs[inputs % 37 == 0] = EOD  # EOD every ~37 tokens
    labels = torch.cat([inputs[:, 1:], torch.randint(3, 131_072, (4, 1), generator=gen)], dim=1)
    labels[inputs == EOD] = BOS
    labels[3, 390:] = -100  # padding at the end of the last row
    out, stats = apply_loss_masks(inputs, labels, EOD, goldfish=(5, 6))

    valid = labels != -100
    eod = (inputs == EOD) & valid
    drop = goldfish_mask(labels, k=5, h=6)  # keys from the unmasked labels
    expected = labels.masked_fill(eod | (drop & valid), -100)
    assert torch.equal(out, expected)
    assert stats.total == 1600
    assert stats.already_ignored == 10
    assert stats.eod_masked == int(eod.sum()) > 0
    assert stats.goldfish_dropped == int((drop & valid & ~eod).sum()) > 0
    assert stats.kept == int((expected != -100).sum())
    assert stats.already_ignored + stats.eod_masked + stats.goldfish_dropped + stats.kept == 1600
    assert stats.goldfish_fraction == pytest.approx(0.2, abs=0.05)

    # Hashing the already-EOD-masked labels would give different drops: the choice matters.
    drop_from_masked = goldfish_mask(labels.masked_fill(eod, -100), k=5, h=6)
    assert not torch.equal(drop_from_masked, drop)


def test_apply_loss_masks_rejects_mismatched_shapes(packed):
    inputs, labels = packed
    with pytest.raises(ValueError, match=r"inputs shape \(2, 7\) != labels shape \(2, 8\)"):
        apply_loss_masks(inputs[:, :7], labels, EOD)
