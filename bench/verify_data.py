"""Training-data verification: how fast training checks the sha256 of the shard files it reads
before its first step (`apertus.core.files.verify_checksums`, as `apertus.train.launch` calls
it), next to coreutils' `sha256sum` on the same files, the tool a user would otherwise run.

    python -m bench.verify_data [--files N] [--mib N] [--repeat N] [--quick]

Files are written first (so both read from the page cache: the hashing, not the disk, is
measured; on a cluster filesystem the read bandwidth bounds both alike). Also measured: a
resumed run's re-check, which reads only files whose size, mtime, ctime or inode changed.
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

from apertus.core.files import Checksummed, verify_checksums
from bench.common import Ratio, interleaved_best, main


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--files", type=int, default=8, help="shard files")
    parser.add_argument("--mib", type=int, default=64, help="MiB per file")
    parser.add_argument("--repeat", type=int, default=3, help="best of N runs each")


def measure(args: argparse.Namespace) -> list[Ratio]:
    if args.quick:
        args.files, args.mib, args.repeat = 4, 4, 1
    if shutil.which("sha256sum") is None:
        raise SystemExit("sha256sum (coreutils) is not installed: no baseline")
    with tempfile.TemporaryDirectory() as tmp:
        files = []
        for i in range(args.files):
            path = Path(tmp) / f"{i:05d}_shard.ds"
            data = os.urandom(args.mib << 20)
            path.write_bytes(data)
            files.append(Checksummed(path, hashlib.sha256(data).hexdigest(), len(data)))
        paths = [str(f.path) for f in files]
        cache = Path(tmp) / "verified.json"

        def ours() -> None:
            cache.unlink(missing_ok=True)
            verify_checksums(files, "bench shards", cache)

        def coreutils() -> None:
            subprocess.run(["sha256sum", *paths], check=True, stdout=subprocess.DEVNULL)

        best = interleaved_best({"ours": ours, "sha256sum": coreutils}, args.repeat)
        start = time.perf_counter()
        again = verify_checksums(files, "bench shards", cache)
        cached = time.perf_counter() - start
        assert again["bytes_hashed"] == 0
    mib = args.files * args.mib
    threads = min(4, os.cpu_count() or 1)
    note = f"{args.files} files x {args.mib} MiB from the page cache, best of {args.repeat}"
    return [
        Ratio(
            "shard verification / sha256sum",
            mib / best["ours"],
            mib / best["sha256sum"],
            "MiB/s",
            "coreutils sha256sum, 1 process",
            lower_is_better=False,
            note=f"{note}; ours hashes {threads} files at a time",
        ),
        Ratio(
            "resumed run's re-check / first check",
            cached,
            best["ours"],
            "s",
            "the first check",
            note="unchanged files are not read again (size, mtime, ctime, inode)",
        ),
    ]


if __name__ == "__main__":
    main(add_arguments, measure, __doc__)
