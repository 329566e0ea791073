"""The data phase index (`apertus.tokenize.phases`): how much memory `build_phase_index` needs
and how long it takes, how much memory a `PhaseDataset` holds once open, and how large the index
is on disk, per shard document, on synthetic shards of growing size; extrapolated to the
22 billion documents of the full corpus.

    python -m bench.phase_index [--documents 1000000,4000000,...] [--file-documents N] [--quick]

Shards are written fast (documents of 1..8 uint16 tokens, zeros; two sources, web 80% and code
20%, files of at most --file-documents documents) with a valid checksums.json, .ds.index and
language sidecar, in a temporary directory deleted at the end (each size's shards are deleted
once it is measured). Each measurement runs in a fresh process, so its peak memory is its own:

- build: wall time and peak RSS (``VmHWM``, reset just before, less the RSS then) of one
  ``build_phase_index`` planning about 90% of the tokens (both sources at their natural share);
  then, in another process (tracing slows the build), the tracemalloc peak of the same build.
- open: the RSS (``VmRSS``) added by opening the phase and reading one packed window at its
  start and one at its end, after ``malloc_trim`` (freed temporaries the C heap kept are not
  held by the dataset; the figure before it is shown too).
- disk: every file the build writes to the phase folder except phase.json.

Per-document figures divide by the documents in the shards (the plan holds about 90% of them).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from bench.common import Ratio, main

ROOT = Path(__file__).resolve().parent.parent
# Source name, share of the documents, its language codes (sorted, as the writer sorts them).
SOURCES = (("web", 0.8, ("de", "en", "fr", "it")), ("code", 0.2, ("en",)))
FULL_CORPUS = 22_000_000_000  # documents, for the extrapolation
GOAL_BUILD_MB = 1024
GOAL_OPEN_BYTES = 1.0
_CHUNK = 1 << 20  # documents generated and written at a time
_MB = 1 << 20

_PRELUDE = """
import json, sys, time
from pathlib import Path

def rss(field="VmRSS"):
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no {field} in /proc/self/status")

args = json.loads(sys.argv[1])
"""

_BUILD = (
    _PRELUDE
    + """
import tracemalloc
from apertus.tokenize.phases import PhaseSpec, build_phase_index
import apertus.tokenize.shards  # imported by the build: its modules are not the index's memory

spec = PhaseSpec(
    name="p", tokens=args["tokens"], seed=1, weights={s: None for s in args["sources"]}
)
dirs = {s: Path(args["root"]) / s for s in args["sources"]}
# Imports peak above the RSS they leave: reset the peak, VmHWM. (Not ru_maxrss: it also keeps
# the peak of the process this one was forked from, the benchmark's own, torch imported.)
Path("/proc/self/clear_refs").write_text("5")
before = rss()
if args["trace"]:
    tracemalloc.start()
start = time.perf_counter()
build_phase_index(spec, dirs, Path(args["out"]))
seconds = time.perf_counter() - start
traced = tracemalloc.get_traced_memory()[1] if args["trace"] else None
peak = rss("VmHWM")
print(json.dumps({"seconds": seconds, "peak": peak - before, "traced": traced}))
"""
)

_OPEN = (
    _PRELUDE
    + """
# What reading an index imports is not the index's memory.
import ctypes, gc, zipfile, numpy.lib.format
from apertus.tokenize.phases import PhaseDataset

before, before_anon = rss(), rss("RssAnon")
phase = PhaseDataset(Path(args["out"]))
window = 65
first = next(phase.packed_sequences(seq_len=window - 1, start=0))
last_start = max(0, phase.total_tokens - 4 * window)
last = next(phase.packed_sequences(seq_len=window - 1, start=last_start))
untrimmed = rss() - before
# Give back the heap that freed temporaries left (glibc keeps freed blocks under its mmap
# threshold, up to 32 MB each): what stays is what the open dataset holds.
gc.collect()
ctypes.CDLL(None).malloc_trim(0)
held, anon = rss() - before, rss("RssAnon") - before_anon
assert len(first[0]) == len(last[0]) == window
counts = {"planned": len(phase), "tokens": phase.total_tokens}
print(json.dumps({"held": held, "anon": anon, "untrimmed": untrimmed, **counts}))
"""
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--documents",
        type=lambda v: [int(x) for x in v.split(",") if x.strip()],
        default=[1_000_000, 4_000_000, 16_000_000, 64_000_000],
        help="comma-separated shard document counts, one measurement each",
    )
    parser.add_argument(
        "--file-documents", type=int, default=4_000_000, help="documents per shard file, at most"
    )


def _sidecar_bytes(codes: tuple[str, ...], positions: np.ndarray) -> bytes:
    """The documents part of a language sidecar, ``0,1,0`` (codes fewer than 10: one digit
    each), exactly as `write_document_languages`' json.dumps writes it."""
    out = np.full(2 * len(positions), ord(","), dtype=np.uint8)
    out[0::2] = ord("0") + positions
    return out[:-1].tobytes()


def _check_sidecar_format(tmp: Path) -> None:
    """Our fast sidecar writer gives the same bytes as the real one (`write_document_languages`)."""
    from apertus.tokenize.shards import languages_path, write_document_languages

    codes = SOURCES[0][2]
    positions = np.random.default_rng(0).integers(0, len(codes), 1000).astype(np.uint8)
    ds = tmp / "format_check.ds"
    write_document_languages(ds, [codes[p] for p in positions])
    ours = _sidecar_head(codes) + _sidecar_bytes(codes, positions) + _SIDECAR_TAIL
    assert languages_path(ds).read_bytes() == ours, "sidecar format differs from the writer's"
    languages_path(ds).unlink()


def _sidecar_head(codes: tuple[str, ...]) -> bytes:
    listed = json.dumps(list(codes), separators=(",", ":"), ensure_ascii=False)
    return ('{"codes":' + listed + ',"documents":[').encode()


_SIDECAR_TAIL = b"]}\n"


class _Hashed:
    """A file written in pieces, its sha256 and size taken on the way."""

    def __init__(self, path: Path):
        self.path, self.file, self.sha, self.bytes = path, path.open("wb"), hashlib.sha256(), 0

    def write(self, data: bytes | memoryview) -> None:
        self.file.write(data)
        self.sha.update(data)
        self.bytes += len(data)

    def close(self) -> dict:
        self.file.close()
        return {"sha256": self.sha.hexdigest(), "bytes": self.bytes}


def _write_source(
    directory: Path, documents: int, per_file: int, codes: tuple[str, ...], seed: int
) -> int:
    """A DocumentTokenizer-like shard directory of `documents` documents; its token count."""
    directory.mkdir(parents=True)
    rng = np.random.default_rng(seed)
    zeros = bytes(2 * 8 * _CHUNK)  # the most token bytes one chunk holds
    listed: dict[str, dict] = {}
    total_tokens = 0
    for f, first in enumerate(range(0, documents, per_file)):
        n = min(per_file, documents - first)
        name = f"{f:05d}_shard.ds"
        tokens, index = _Hashed(directory / name), _Hashed(directory / f"{name}.index")
        sidecar = _Hashed(directory / f"{name}.languages.json")
        sidecar.write(_sidecar_head(codes))
        end = 0
        for start in range(0, n, _CHUNK):
            m = min(_CHUNK, n - start)
            lengths = rng.integers(1, 9, m, dtype=np.uint64)
            ends = np.cumsum(lengths) + np.uint64(end)
            end = int(ends[-1])
            index.write(ends.astype("<u8").tobytes())
            tokens.write(memoryview(zeros)[: 2 * int(lengths.sum())])
            positions = rng.integers(0, len(codes), m).astype(np.uint8)
            sidecar.write((b"," if start else b"") + _sidecar_bytes(codes, positions))
        sidecar.write(_SIDECAR_TAIL)
        listed[name] = tokens.close()
        listed[f"{name}.index"] = index.close()
        listed[f"{name}.languages.json"] = sidecar.close()
        total_tokens += end
    checksums = {
        "files": listed,
        "dtype": "uint16",
        "vocab_size": 1 << 16,
        "documents": documents,
        "tokens": total_tokens,
    }
    (directory / "checksums.json").write_text(json.dumps(checksums, indent=1) + "\n")
    return total_tokens


def _child(code: str, **args: object) -> dict:
    """Run `code` in a fresh Python with `args` as JSON; the JSON it prints last."""
    done = subprocess.run(
        [sys.executable, "-c", code, json.dumps(args)],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        raise SystemExit(f"child failed (exit {done.returncode}):\n{done.stderr[-4000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _label(documents: int) -> str:
    return f"{documents / 1e6:g}M docs" if documents >= 1_000_000 else f"{documents / 1e3:g}k docs"


def _measure_size(tmp: Path, documents: int, per_file: int) -> dict:
    root, out = tmp / "shards", tmp / "phase"
    start = time.perf_counter()
    tokens = 0
    remaining = documents
    for i, (name, share, codes) in enumerate(SOURCES):
        n = remaining if i == len(SOURCES) - 1 else round(documents * share)
        remaining -= n
        tokens += _write_source(root / name, n, per_file, codes, seed=i)
    written = time.perf_counter() - start
    shard_bytes = sum(p.stat().st_size for p in root.rglob("*") if p.is_file())
    args = {"root": str(root), "out": str(out), "sources": [s for s, _, _ in SOURCES]}
    budget = tokens * 9 // 10
    build = _child(_BUILD, tokens=budget, trace=False, **args)
    traced = _child(_BUILD, tokens=budget, trace=True, **args)
    opened = _child(_OPEN, **args)
    index_bytes = sum(
        p.stat().st_size for p in out.rglob("*") if p.is_file() and p.name != "phase.json"
    )
    shutil.rmtree(root)
    shutil.rmtree(out)
    return {
        "documents": documents,
        "tokens": tokens,
        "planned": opened["planned"],
        "written_s": written,
        "shard_mb": shard_bytes / _MB,
        "build_s": build["seconds"],
        "peak_mb": build["peak"] / _MB,
        "traced_mb": traced["traced"] / _MB,
        "build_b_doc": build["peak"] / documents,
        "open_b_doc": opened["held"] / documents,
        "anon_b_doc": opened["anon"] / documents,
        "untrimmed_b_doc": opened["untrimmed"] / documents,
        "disk_b_doc": index_bytes / documents,
    }


def _table(results: list[dict]) -> str:
    header = (
        "documents",
        "planned",
        "build s",
        "peak RSS MB",
        "traced MB",
        "B/doc build",
        "B/doc open",
        "(anon)",
        "(untrimmed)",
        "B/doc disk",
    )
    rows = [header] + [
        (
            f"{r['documents']:,}",
            f"{r['planned']:,}",
            f"{r['build_s']:.2f}",
            f"{r['peak_mb']:,.1f}",
            f"{r['traced_mb']:,.1f}",
            f"{r['build_b_doc']:.1f}",
            f"{r['open_b_doc']:.2f}",
            f"{r['anon_b_doc']:.2f}",
            f"{r['untrimmed_b_doc']:.2f}",
            f"{r['disk_b_doc']:.2f}",
        )
        for r in results
    ]
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    lines = ("  ".join(c.rjust(w) for c, w in zip(row, widths, strict=True)) for row in rows)
    return "\n".join(lines)


def _fit(results: list[dict], key: str) -> float:
    """`key` (MB) at the full corpus, on the line through the two largest sizes (the small ones
    still fit in one chunk or one shard file): a figure that stopped growing stays flat, one
    that grows keeps its slope."""
    if len(results) < 2:
        return results[-1][key] / results[-1]["documents"] * FULL_CORPUS
    a, b = results[-2], results[-1]
    slope = max((b[key] - a[key]) / (b["documents"] - a["documents"]), 0.0)
    return b[key] + slope * (FULL_CORPUS - b["documents"])


def _extrapolation(results: list[dict]) -> str:
    for r in results:
        r["open_mb"] = r["open_b_doc"] * r["documents"] / 2**20
    largest, held = results[-1], _fit(results, "open_mb")
    return (
        f"at {FULL_CORPUS / 1e9:g}B documents (the line through the two largest sizes): build "
        f"peak {_fit(results, 'peak_mb') / 1024:,.1f} GB, held open {held / 1024:,.2f} GB "
        f"({held * 2**20 / FULL_CORPUS:.3f} B/doc), index on disk "
        f"{largest['disk_b_doc'] * FULL_CORPUS / 2**30:,.0f} GB"
    )


def measure(args: argparse.Namespace) -> list[Ratio]:
    if args.quick:
        args.documents, args.file_documents = [100_000, 400_000], 100_000
    sizes = sorted(args.documents)
    results = []
    with tempfile.TemporaryDirectory(prefix="apertus-bench-phase-", dir="/tmp") as tmp:
        _check_sidecar_format(Path(tmp))
        for documents in sizes:
            where = Path(tmp) / str(documents)
            r = _measure_size(where, documents, args.file_documents)
            results.append(r)
            print(
                f"{_label(documents)}: shards {r['shard_mb']:,.0f} MB written in "
                f"{r['written_s']:.1f} s; build {r['build_s']:.2f} s, peak {r['peak_mb']:,.1f} MB;"
                f" open {r['open_b_doc']:.2f} B/doc",
                flush=True,
            )
    table, largest = _table(results), results[-1]
    print(f"\n{table}\n\n{_extrapolation(results)}\n", flush=True)
    sizes_note = "; ".join(
        f"{_label(r['documents'])}: build {r['build_s']:.2f} s, peak {r['peak_mb']:,.1f} MB "
        f"(traced {r['traced_mb']:,.1f} MB), {r['build_b_doc']:.1f} B/doc build, "
        f"{r['open_b_doc']:.2f} B/doc open, {r['disk_b_doc']:.2f} B/doc on disk"
        for r in results
    )
    common = (
        f"synthetic shards, {'/'.join(s for s, _, _ in SOURCES)} "
        f"{'/'.join(f'{p:.0%}' for _, p, _ in SOURCES)}, 1..8 tokens a document, files of "
        f"<= {args.file_documents:,} documents; 90% of the tokens planned; per document of the "
        "shards"
    )
    return [
        Ratio(
            f"phase index build peak ({_label(largest['documents'])})",
            largest["peak_mb"],
            GOAL_BUILD_MB,
            "MB",
            "1 GB goal",
            goal=1.0,
            note=f"peak RSS of build_phase_index in a fresh process; {common}. {sizes_note}. "
            f"{_extrapolation(results)}",
        ),
        Ratio(
            "phase index open cost",
            largest["open_b_doc"],
            GOAL_OPEN_BYTES,
            "bytes/doc",
            "1 byte/doc goal",
            goal=1.0,
            note=f"RSS held after PhaseDataset() and a packed window at the start and the end, "
            f"{_label(largest['documents'])}, after malloc_trim ({largest['untrimmed_b_doc']:.2f} "
            f"B/doc before); {largest['anon_b_doc']:.2f} B/doc of it anonymous, the rest file "
            f"pages mapped; index on disk {largest['disk_b_doc']:.2f} B/doc",
        ),
    ]


if __name__ == "__main__":
    main(add_arguments, measure, __doc__)
