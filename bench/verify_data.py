"""What checking the bytes costs: training's reads through the block checksums, the checksums'
writing, the sha256 of SFT data, and sealing a checkpoint, each next to what a user would
otherwise run on the same bytes in the same run.

    python -m bench.verify_data [--files N] [--mib N] [--checkpoint-mib N] [--repeat N] [--quick]

- Document reads: documents of a few KiB read in a shuffled order, as the pretraining loader
  reads a phase, through `apertus.core.blocks.BlockReader` (each 64 KiB block under a read
  checked against its crc32) against plain `os.pread` of the same ranges (what a loader that
  checks nothing does).
- Writing the block checksums with the shards (`write_block_checksums`: crc32 per block and the
  sha256, one read) against the sha256 alone (`sha256_file`), which the shard writer computed
  before.
- The whole-file sha256 of SFT data before a run (`verify_checksums`, a few files at a time)
  against coreutils' `sha256sum`.
- Sealing a checkpoint (`apertus.train.checkpoint.seal_checkpoint`: the sha256 of its files)
  against DCP's save of the same state, at one rank's share of an 8B run by default (2 GiB:
  ~128 GB of fp32 weights and AdEMAMix's three moments over 64 ranks).

Files are written first, so reads come from the page cache: the checking, not the disk, is
measured (on a cluster filesystem the read bandwidth bounds both sides alike).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np

from apertus.core.blocks import BlockReader, write_block_checksums
from apertus.core.files import Checksummed, sha256_file, verify_checksums
from bench.common import Ratio, interleaved_best, main


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--files", type=int, default=8, help="shard files")
    parser.add_argument("--mib", type=int, default=64, help="MiB per file")
    parser.add_argument("--documents", type=int, default=20_000, help="documents read")
    parser.add_argument(
        "--checkpoint-mib", type=int, default=2048, help="MiB of state in the checkpoint"
    )
    parser.add_argument("--repeat", type=int, default=3, help="best of N runs each")


def document_reads(files: list[Path], count: int, seed: int = 0) -> list[tuple[int, int, int]]:
    """(file, offset, length) of `count` documents of 1-8 KiB at random places."""
    rng = np.random.default_rng(seed)
    sizes = [f.stat().st_size for f in files]
    reads = []
    for _ in range(count):
        file = int(rng.integers(len(files)))
        length = int(rng.integers(1 << 10, 8 << 10))
        reads.append((file, int(rng.integers(0, sizes[file] - length)), length))
    return reads


def seal_against_save(folder: Path, mib: int, repeat: int) -> tuple[float, float]:
    """Best seconds of DCP's save of `mib` MiB of float32 state, and of sealing it."""
    import torch
    import torch.distributed.checkpoint as dcp

    from apertus.train.checkpoint import seal_checkpoint

    state = {f"layer{i}": torch.randn((mib << 20) // 4 // 8) for i in range(8)}
    saves, seals = [], []
    for attempt in range(repeat):
        target = folder / f"step-{attempt}"
        start = time.perf_counter()
        dcp.save(state, checkpoint_id=str(target))
        saves.append(time.perf_counter() - start)
        start = time.perf_counter()
        seal_checkpoint(target)
        seals.append(time.perf_counter() - start)
        shutil.rmtree(target)
    return min(saves), min(seals)


def measure(args: argparse.Namespace) -> list[Ratio]:
    if args.quick:
        args.files, args.mib, args.documents, args.checkpoint_mib, args.repeat = 4, 4, 2000, 16, 1
    if shutil.which("sha256sum") is None:
        raise SystemExit("sha256sum (coreutils) is not installed: no baseline")
    with tempfile.TemporaryDirectory() as tmp:
        files = []
        for i in range(args.files):
            path = Path(tmp) / f"{i:05d}_shard.ds"
            data = os.urandom(args.mib << 20)
            path.write_bytes(data)
            files.append(Checksummed(path, hashlib.sha256(data).hexdigest(), len(data)))
        paths = [f.path for f in files]
        writes = interleaved_best(
            {
                "blocks": lambda: [write_block_checksums(p) for p in paths],
                "sha256": lambda: [sha256_file(p) for p in paths],
            },
            args.repeat,
        )

        reads = document_reads(paths, args.documents)
        readers = [BlockReader(p) for p in paths]
        descriptors = [os.open(p, os.O_RDONLY) for p in paths]

        def verified() -> None:
            for file, offset, length in reads:
                readers[file].read(offset, length)

        def plain() -> None:
            for file, offset, length in reads:
                os.pread(descriptors[file], length, offset)

        loads = interleaved_best({"verified": verified, "plain": plain}, args.repeat)
        for fd in descriptors:
            os.close(fd)
        whole = interleaved_best(
            {
                "ours": lambda: verify_checksums(files, "bench data"),
                "sha256sum": lambda: subprocess.run(
                    ["sha256sum", *map(str, paths)], check=True, stdout=subprocess.DEVNULL
                ),
            },
            args.repeat,
        )
        for f in paths:
            f.unlink()
        save, seal = seal_against_save(Path(tmp), args.checkpoint_mib, args.repeat)
    mib = args.files * args.mib
    cached = f"{args.files} files x {args.mib} MiB from the page cache, best of {args.repeat}"
    return [
        Ratio(
            "document reads, block-checked / plain pread",
            args.documents / loads["verified"],
            args.documents / loads["plain"],
            "docs/s",
            "os.pread of the same ranges, unchecked",
            lower_is_better=False,
            note=f"{args.documents} reads of 1-8 KiB in random order; {cached}",
        ),
        Ratio(
            "shard checksums written: crc32 blocks + sha256 / sha256 alone",
            writes["blocks"],
            writes["sha256"],
            "s",
            "sha256_file, what the shard writer computed before",
            note=cached,
        ),
        Ratio(
            "SFT data sha256 check / sha256sum",
            mib / whole["ours"],
            mib / whole["sha256sum"],
            "MiB/s",
            "coreutils sha256sum, 1 process",
            lower_is_better=False,
            note=f"{cached}; ours hashes {min(4, os.cpu_count() or 1)} files at a time",
        ),
        Ratio(
            "checkpoint seal (sha256 of its files) / DCP save",
            seal,
            save,
            "s",
            "torch.distributed.checkpoint.save of the same state",
            note=f"{args.checkpoint_mib} MiB of float32 state, 1 rank, best of {args.repeat}",
        ),
    ]


if __name__ == "__main__":
    main(add_arguments, measure, __doc__)
