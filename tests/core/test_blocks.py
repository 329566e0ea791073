"""Block checksums (apertus.core.blocks): what a reader gets is what was written, block by block."""

from __future__ import annotations

import hashlib
import zlib

import numpy as np
import pytest

from apertus.core import ApertusError
from apertus.core.blocks import (
    BlockReader,
    CorruptBlock,
    VerifiedNpy,
    sidecar_path,
    write_block_checksums,
)
from tests.conftest import flip_bit_in_place

BLOCK = 64  # small blocks: many of them in a few KiB


@pytest.fixture
def data_file(tmp_path):
    path = tmp_path / "a.ds"
    path.write_bytes(np.random.default_rng(0).bytes(BLOCK * 20 + 17))  # a short last block
    return path


def test_the_sidecar_holds_zlibs_crc32_of_every_block_and_the_write_returns_the_sha256(data_file):
    data = data_file.read_bytes()
    assert write_block_checksums(data_file, BLOCK) == hashlib.sha256(data).hexdigest()
    crcs = np.frombuffer(sidecar_path(data_file).read_bytes()[56:], dtype="<u4")
    assert crcs.tolist() == [zlib.crc32(data[i : i + BLOCK]) for i in range(0, len(data), BLOCK)]


def test_reads_of_any_range_return_the_files_bytes(data_file):
    data = data_file.read_bytes()
    write_block_checksums(data_file, BLOCK)
    reader = BlockReader(data_file)
    rng = np.random.default_rng(1)
    for _ in range(200):
        offset = int(rng.integers(0, len(data)))
        length = int(rng.integers(1, 4 * BLOCK))
        assert reader.read(offset, length) == data[offset : offset + length]
    assert reader.read(len(data) - 3, 100) == data[-3:]
    items = np.frombuffer(data[: len(data) // 4 * 4], dtype="<u4")
    index = rng.integers(0, len(items), size=(2, 50))
    assert np.array_equal(reader.take("<u4", index), items[index])


def test_a_flipped_bit_is_refused_naming_file_block_and_both_crcs_and_other_blocks_still_read(
    data_file,
):
    write_block_checksums(data_file, BLOCK)
    recorded = zlib.crc32(data_file.read_bytes()[5 * BLOCK : 6 * BLOCK])
    flip_bit_in_place(data_file, 5 * BLOCK + 9, bit=3)
    actual = zlib.crc32(data_file.read_bytes()[5 * BLOCK : 6 * BLOCK])
    reader = BlockReader(data_file)  # size and times unchanged: opening cannot tell
    with pytest.raises(CorruptBlock) as caught:
        reader.read(5 * BLOCK + 60, 8)  # a range across blocks 5 and 6
    message = str(caught.value)
    assert str(data_file) in message and f"block 5 (bytes {5 * BLOCK}-{6 * BLOCK - 1})" in message
    assert f"{actual:08x}" in message and f"{recorded:08x}" in message
    assert len(reader.read(0, 5 * BLOCK)) == 5 * BLOCK  # the blocks before are good
    with pytest.raises(CorruptBlock):
        reader.take("<u1", np.array([3, 5 * BLOCK]))


def test_a_missing_foreign_or_cut_sidecar_or_a_resized_file_is_refused(data_file):
    with pytest.raises(ApertusError, match=r"a\.ds: no block checksums \(a\.ds\.crc32 is missing"):
        BlockReader(data_file)
    write_block_checksums(data_file, BLOCK)
    sidecar = sidecar_path(data_file)
    good = sidecar.read_bytes()
    sidecar.write_bytes(good[:-1])
    with pytest.raises(ApertusError, match=r"a\.ds\.crc32: .* the checksum file is cut"):
        BlockReader(data_file)
    sidecar.write_bytes(b"X" + good[1:])
    with pytest.raises(ApertusError, match=r"not a block-checksum file"):
        BlockReader(data_file)
    sidecar.write_bytes(good)
    with open(data_file, "ab") as f:
        f.write(b"more")
    with pytest.raises(ApertusError, match=r"were written for \d+: the file was cut or rewritten"):
        BlockReader(data_file)


def test_a_verified_npy_reads_like_its_memory_map_and_refuses_a_flipped_bit(tmp_path):
    path = tmp_path / "index.document.npy"
    values = np.arange(1000, dtype="<u8") * 7
    np.save(path, values)
    write_block_checksums(path, BLOCK)
    column = VerifiedNpy(path)
    assert len(column) == 1000 and column.dtype == values.dtype
    assert column[0] == 0 and column[-1] == values[-1] and column[999] == values[999]
    assert np.array_equal(column[10:600], values[10:600]) and len(column[990:2000]) == 10
    with pytest.raises(IndexError):
        column[1000]
    flip_bit_in_place(path, path.stat().st_size - 8 * 500)  # inside the array, not the header
    fresh = VerifiedNpy(path)
    with pytest.raises(CorruptBlock, match=r"index\.document\.npy: block \d+"):
        fresh[:]


def test_a_sidecar_written_for_other_bytes_is_refused_given_the_records_sha256(tmp_path):
    """Another build's file copied in with its own sidecar reads cleanly block by block; the
    sha256 in the sidecar's header is what tells it from the recorded one."""
    ours, theirs = tmp_path / "ours.npy", tmp_path / "theirs.npy"
    np.save(ours, np.arange(100, dtype="<u8"))
    np.save(theirs, np.arange(100, dtype="<u8")[::-1].copy())
    recorded = write_block_checksums(ours, BLOCK)
    write_block_checksums(theirs, BLOCK)
    for suffix in ("", ".crc32"):
        (tmp_path / f"ours.npy{suffix}").write_bytes(
            (tmp_path / f"theirs.npy{suffix}").read_bytes()
        )
    assert VerifiedNpy(ours)[0] == 99  # consistent in itself
    with pytest.raises(ApertusError, match=rf"ours\.npy: .* the record names {recorded}"):
        VerifiedNpy(ours, recorded)
