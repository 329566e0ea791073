"""Block checksums: a CRC-32 of every 64 KiB block of a file, written with the data into a sidecar
(``<file>.crc32``) and checked on every read, so a reader verifies exactly the bytes it uses.

Why per block. A whole-file sha256 proves a file once, when it is hashed; a run that resumes
weeks later either re-hashes everything (a 15T-token phase as uint32 is ~60 TB) or trusts the
file's size and times, which bit rot does not change. A checksum per block, checked as the block is
read, costs O(bytes read), needs nothing at resume and catches a flipped bit the moment it would
be used. The whole-file sha256 stays in the records (checksums.json, phase.json) for audits.

Why 64 KiB. The training loader reads documents in a shuffled order, a few KiB each, so every
read verifies the blocks it touches: the block bounds that read's amplification (Linux reads
ahead 128 KiB anyway), while the sidecar costs 4 bytes per block (0.006 % of the data). CRC-32
(zlib's, hardware-assisted where the CPU has it) detects every error of up to 32 flipped bits in a
block and any other with probability 1 - 2**-32; it guards against decay, not against an
adversary (the sha256 in the records does that).

Sidecar format: a 56-byte header (magic ``APCRC32\\0``, block size and file size as little-endian
uint64, the file's sha256 computed in the same read), then one little-endian uint32 per block, the
last block possibly short. The sha256 binds the sidecar to the record: a reader given the sha256
that checksums.json or phase.json records refuses a sidecar written for other bytes (a valid file
of another build, copied in with its sidecar), without hashing anything. A reader refuses a
sidecar whose header or length does not fit the file, and a block whose CRC differs, naming the
file, the block, its byte range and both values.
"""

from __future__ import annotations

import hashlib
import os
import struct
import zlib
from pathlib import Path

import numpy as np

from apertus.core import ApertusError
from apertus.core.files import atomic_open

__all__ = [
    "BLOCK_BYTES",
    "SIDECAR_SUFFIX",
    "BlockReader",
    "CorruptBlock",
    "sidecar_path",
    "write_block_checksums",
]

BLOCK_BYTES = 1 << 16
SIDECAR_SUFFIX = ".crc32"
_MAGIC = b"APCRC32\x00"
_HEADER = struct.Struct("<8sQQ32s")
_CRC = np.dtype("<u4")
_READ_BLOCKS = 256  # blocks read at once while writing a sidecar (16 MiB)


class CorruptBlock(ApertusError):
    """A block whose bytes do not match the CRC its sidecar recorded when it was written."""


def sidecar_path(path: str | os.PathLike[str]) -> Path:
    path = Path(path)
    return path.with_name(path.name + SIDECAR_SUFFIX)


def write_block_checksums(path: str | os.PathLike[str], block_bytes: int = BLOCK_BYTES) -> str:
    """Write `path`'s sidecar (atomically) and return the file's sha256, from one read of it."""
    if block_bytes < 8 or block_bytes & (block_bytes - 1):
        raise ValueError(f"block size must be a power of two >= 8, got {block_bytes}")
    path = Path(path)
    digest = hashlib.sha256()
    crcs: list[int] = []
    size = 0
    with open(path, "rb") as f:
        while chunk := f.read(block_bytes * _READ_BLOCKS):
            digest.update(chunk)
            size += len(chunk)
            view = memoryview(chunk)
            crcs.extend(
                zlib.crc32(view[i : i + block_bytes]) for i in range(0, len(chunk), block_bytes)
            )
    with atomic_open(sidecar_path(path), "wb") as out:
        out.write(_HEADER.pack(_MAGIC, block_bytes, size, digest.digest()))
        out.write(np.asarray(crcs, dtype=_CRC).tobytes())
    return digest.hexdigest()


class BlockReader:
    """Reads byte ranges of a file, verifying every block a read touches against the sidecar.

    Opening checks the sidecar's header against the file (present, the format, the file's size,
    one CRC per block) and, given `sha256` (the record's), that it was written for those bytes;
    each `read` then reads the whole blocks under the range and checks their
    CRCs before returning a byte of them, and keeps the last blocks read for the next call (the
    reads of one file often fall into the same block). Raises `CorruptBlock` on a mismatch and
    ApertusError on a missing, foreign or cut sidecar, each naming the file.
    """

    def __init__(self, path: str | os.PathLike[str], sha256: str | None = None):
        self.path = Path(path)
        self.sidecar = sidecar_path(self.path)
        if not self.sidecar.is_file():
            raise ApertusError(
                f"{self.path}: no block checksums ({self.sidecar.name} is missing): the file was "
                "written before they existed, or the sidecar was deleted; re-run the step that "
                "wrote it"
            )
        self._fd = os.open(self.path, os.O_RDONLY)
        self._crc_fd = os.open(self.sidecar, os.O_RDONLY)
        try:
            header = os.pread(self._crc_fd, _HEADER.size, 0)
            magic, block, size, digest = (
                _HEADER.unpack(header) if len(header) == _HEADER.size else (b"", 0, 0, b"")
            )
            self.size = os.fstat(self._fd).st_size
            if magic != _MAGIC or block < 8 or block & (block - 1):
                raise ApertusError(f"{self.sidecar}: not a block-checksum file (bad header)")
            if size != self.size:
                raise ApertusError(
                    f"{self.path}: {self.size} bytes, its block checksums ({self.sidecar.name}) "
                    f"were written for {size}: the file was cut or rewritten since"
                )
            if sha256 is not None and digest.hex() != sha256:
                raise ApertusError(
                    f"{self.path}: its block checksums ({self.sidecar.name}) were written for the "
                    f"file with sha256 {digest.hex()}, the record names {sha256}: the file was "
                    "replaced by another build's; rebuild it (re-run the step that wrote it)"
                )
            self.block_bytes = block
            self.blocks = -(-size // block)
            expected = _HEADER.size + self.blocks * _CRC.itemsize
            if os.fstat(self._crc_fd).st_size != expected:
                raise ApertusError(
                    f"{self.sidecar}: {os.fstat(self._crc_fd).st_size} bytes, {expected} expected "
                    f"for {self.blocks} blocks: the checksum file is cut or corrupt"
                )
        except BaseException:
            self.close()
            raise
        self._cached = (0, b"")  # (first block, bytes) of the last verified read

    def read(self, offset: int, length: int) -> bytes:
        """`length` verified bytes from `offset` (fewer only past the end of the file)."""
        if length <= 0 or offset >= self.size:
            return b""
        length = min(length, self.size - offset)
        block = self.block_bytes
        first, last = offset // block, (offset + length - 1) // block
        cached_first, cached = self._cached
        start = offset - cached_first * block
        if start >= 0 and start + length <= len(cached):
            return cached[start : start + length]
        count = last - first + 1
        data = os.pread(self._fd, count * block, first * block)
        want = min(count * block, self.size - first * block)
        if len(data) != want:
            raise ApertusError(
                f"{self.path}: shorter than its block checksums say (cut while read)"
            )
        recorded = np.frombuffer(
            os.pread(self._crc_fd, count * _CRC.itemsize, _HEADER.size + first * _CRC.itemsize),
            dtype=_CRC,
        )
        view = memoryview(data)
        for i in range(count):
            actual = zlib.crc32(view[i * block : (i + 1) * block])
            if actual != int(recorded[i]):
                number = first + i
                end = min((number + 1) * block, self.size)
                raise CorruptBlock(
                    f"{self.path}: block {number} (bytes {number * block}-{end - 1}) has crc32 "
                    f"{actual:08x}, {self.sidecar.name} recorded {int(recorded[i]):08x} when it "
                    "was written: the bytes changed on disk since (bit rot, or an overwrite); "
                    "nothing was trained on them. Rebuild the file (re-run the step that wrote it)"
                )
        self._cached = (first, data)
        start = offset - first * block
        return data[start : start + length]

    def items(self, dtype: np.dtype, first: int, count: int) -> np.ndarray:
        """`count` verified items of `dtype` from item `first` (a read-only array)."""
        dtype = np.dtype(dtype)
        data = self.read(first * dtype.itemsize, count * dtype.itemsize)
        if len(data) != count * dtype.itemsize:
            raise ApertusError(
                f"{self.path}: holds {self.size // dtype.itemsize} items, item {first + count - 1} "
                "was asked for"
            )
        return np.frombuffer(data, dtype=dtype)

    def take(self, dtype: np.dtype, index: np.ndarray) -> np.ndarray:
        """The items at `index` (any shape) of the file as an array of `dtype`, read block by
        block in sorted order: each block is read and verified once."""
        dtype = np.dtype(dtype)
        index = np.asarray(index, dtype=np.int64)
        flat = index.ravel()
        out = np.empty(flat.size, dtype=dtype)
        if flat.size == 0:
            return out.reshape(index.shape)
        if int(flat.min()) < 0 or (int(flat.max()) + 1) * dtype.itemsize > self.size:
            raise ApertusError(f"{self.path}: an item index is outside the file")
        blocks = flat * dtype.itemsize // self.block_bytes
        order = np.argsort(blocks, kind="stable")
        cuts = np.flatnonzero(np.diff(blocks[order])) + 1
        for group in np.split(order, cuts):
            lo, hi = int(flat[group].min()), int(flat[group].max()) + 1
            out[group] = self.items(dtype, lo, hi - lo)[flat[group] - lo]
        return out.reshape(index.shape)

    def close(self) -> None:
        for name in ("_fd", "_crc_fd"):
            fd = self.__dict__.pop(name, None)
            if fd is not None:
                os.close(fd)

    def __del__(self) -> None:
        self.close()


class VerifiedNpy:
    """A 1-D ``.npy`` file read through a `BlockReader`: ``len``, ``dtype``, integer and slice
    (step 1) indexing like the memory map it replaces, each read verified."""

    def __init__(self, path: str | os.PathLike[str], sha256: str | None = None):
        self.path = Path(path)
        try:
            with open(self.path, "rb") as f:
                version = np.lib.format.read_magic(f)
                read_header = {
                    (1, 0): np.lib.format.read_array_header_1_0,
                    (2, 0): np.lib.format.read_array_header_2_0,
                }.get(version)
                if read_header is None:
                    raise ValueError(f".npy format {version} is not read here")
                shape, fortran, dtype = read_header(f)
                self._offset = f.tell()
        except (ValueError, OSError) as e:
            raise ApertusError(f"{self.path}: unreadable .npy file: {e}") from None
        if len(shape) != 1 or dtype.hasobject:
            raise ApertusError(f"{self.path}: expected a 1-D array of numbers, got {shape} {dtype}")
        del fortran  # a 1-D array is laid out the same either way
        self.dtype = dtype
        self._len = int(shape[0])
        self._reader = BlockReader(self.path, sha256)
        if self._offset + self._len * dtype.itemsize != self._reader.size:
            raise ApertusError(f"{self.path}: its size does not match its .npy header")

    def __len__(self) -> int:
        return self._len

    def __getitem__(self, key: int | slice) -> np.ndarray | np.generic:
        if isinstance(key, slice):
            start, stop, step = key.indices(self._len)
            if step != 1:
                raise ValueError("only contiguous slices are read")
            return self._items(start, max(stop - start, 0))
        i = int(key)
        if i < 0:
            i += self._len
        if not 0 <= i < self._len:
            raise IndexError(f"index {key} out of range for {self._len} items of {self.path}")
        return self._items(i, 1)[0]

    def _items(self, first: int, count: int) -> np.ndarray:
        item = self.dtype.itemsize
        data = self._reader.read(self._offset + first * item, count * item)
        return np.frombuffer(data, dtype=self.dtype)
