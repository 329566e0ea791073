"""Pretraining data phases: planning an index over token shards and reading it back.

The shards are built here with numpy in DocumentTokenizer's layout. Every document is
``[1, v, v, ..., 2]`` (BOS, body, EOS) with ``v = source_id * 1000 + document number`` (or
``* 100000`` for uint32 shards), so a token says which document it came from.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import time
from pathlib import Path

import numpy as np
import pytest

from apertus.core import ApertusError
from apertus.core.blocks import BLOCK_BYTES, SIDECAR_SUFFIX, CorruptBlock, write_block_checksums
from apertus.tokenize.phases import INDEX_FILES, PhaseDataset, PhaseSpec, build_phase_index

BOS, EOS = 1, 2
# name -> (source id, documents per file, shortest and longest document)
SOURCES = {
    "web": (1, [200, 150, 250], (3, 40)),
    "edu": (2, [120, 90], (3, 30)),
    "code": (3, [180], (10, 60)),
}
LANGUAGES = ("de", "en", "fr", "rm")


def document_language(source_id: int, file: int, document: int) -> str:
    """The language the shards of `write_source` record for a document: a fixed scramble."""
    digest = hashlib.sha256(f"{source_id}/{file}/{document}".encode()).digest()
    return LANGUAGES[digest[0] % len(LANGUAGES)]


def write_source(
    directory: Path,
    source_id: int,
    docs_per_file: list[int],
    length_range: tuple[int, int],
    *,
    seed: int = 0,
    dtype: str = "uint16",
    vocab_size: int = 65536,
    empty_every: int = 0,
    languages: bool = True,
) -> dict[tuple[int, int], np.ndarray]:
    """Write a DocumentTokenizer-style source dir, with the language sidecars of
    apertus.tokenize.shards unless `languages` is false (shards written before them);
    return {(file, document): tokens}."""
    directory.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    base = source_id * (1000 if dtype == "uint16" else 100_000)
    documents: dict[tuple[int, int], np.ndarray] = {}
    listed = {}
    number = n_docs = n_tokens = 0
    for f, count in enumerate(docs_per_file):
        docs = []
        for d in range(count):
            if empty_every and d % empty_every == empty_every - 1:
                doc = np.zeros(0, dtype=dtype)
            else:
                length = int(rng.integers(length_range[0], length_range[1] + 1))
                doc = np.full(length, base + number, dtype=dtype)
                doc[0], doc[-1] = BOS, EOS
                number += 1
            documents[(f, d)] = doc
            docs.append(doc)
        name = f"{f:05d}_shard.ds"
        tokens = np.concatenate(docs).astype(f"<{np.dtype(dtype).str[1:]}")
        ends = np.cumsum([len(d) for d in docs]).astype("<u8")
        (directory / name).write_bytes(tokens.tobytes())
        (directory / f"{name}.index").write_bytes(ends.tobytes())
        written = [name, f"{name}.index"]
        for rel in list(written):  # as write_token_shards does (the loader checks them)
            write_block_checksums(directory / rel)
            written.append(rel + SIDECAR_SUFFIX)
        if languages:
            langs = [document_language(source_id, f, d) for d in range(count)]
            codes = sorted(set(langs))
            sidecar = {"codes": codes, "documents": [codes.index(lang) for lang in langs]}
            (directory / f"{name}.languages.json").write_text(json.dumps(sidecar))
            written.append(f"{name}.languages.json")
        for rel in written:
            data = (directory / rel).read_bytes()
            listed[rel] = {"sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data)}
        n_docs += count
        n_tokens += len(tokens)
    checksums = {
        "files": listed,
        "dtype": dtype,
        "vocab_size": vocab_size,
        "documents": n_docs,
        "tokens": n_tokens,
    }
    (directory / "checksums.json").write_text(json.dumps(checksums))
    return documents


@pytest.fixture
def shards(tmp_path):
    """Three sources; returns (shard_dirs, {source: {(file, doc): tokens}})."""
    dirs, originals = {}, {}
    for name, (sid, per_file, lengths) in SOURCES.items():
        dirs[name] = tmp_path / "shards" / name
        originals[name] = write_source(dirs[name], sid, per_file, lengths, seed=sid)
    return dirs, originals


def available(originals, name):
    return sum(len(d) for d in originals[name].values())


def longest(originals, name):
    return max(len(d) for d in originals[name].values())


def index_arrays(out_dir):
    return PhaseDataset(out_dir).rows()


def rows_of(arrays, source_index):
    keep = arrays["source"] == source_index
    return list(zip(arrays["file"][keep].tolist(), arrays["document"][keep].tolist(), strict=True))


def per_source(phase):
    return {s["name"]: s for s in phase["sources"]}


# -- determinism ---------------------------------------------------------------------------------


def test_same_spec_and_shards_give_byte_identical_files(shards, tmp_path, monkeypatch):
    dirs, _ = shards
    spec = PhaseSpec("p1", tokens=12_000, seed=7, weights={"web": 0.5, "edu": 0.2, "code": None})
    build_phase_index(spec, dirs, tmp_path / "a")
    # A later clock must not leak into the index (numpy.savez would stamp the time into the zip).
    later = time.time() + 3 * 86400
    monkeypatch.setattr(time, "time", lambda: later)
    build_phase_index(spec, dirs, tmp_path / "b")
    files = sorted(p.name for p in (tmp_path / "a").iterdir())
    # The work folder is gone; each index file has its block checksums.
    assert files == sorted(["phase.json", *INDEX_FILES, *(n + SIDECAR_SUFFIX for n in INDEX_FILES)])
    for name in files:
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()


def test_other_seed_changes_order_not_budget(shards, tmp_path):
    dirs, originals = shards
    weights = {"web": 2.0, "edu": 1.0, "code": 1.0}
    a = build_phase_index(PhaseSpec("p", 9_000, 1, weights), dirs, tmp_path / "a")
    b = build_phase_index(PhaseSpec("p", 9_000, 2, weights), dirs, tmp_path / "b")
    ia, ib = index_arrays(tmp_path / "a"), index_arrays(tmp_path / "b")
    order_a = list(
        zip(ia["source"].tolist(), ia["file"].tolist(), ia["document"].tolist(), strict=True)
    )
    order_b = list(
        zip(ib["source"].tolist(), ib["file"].tolist(), ib["document"].tolist(), strict=True)
    )
    assert order_a != order_b
    for name in weights:
        sa, sb = per_source(a)[name], per_source(b)[name]
        assert sa["tokens_target"] == sb["tokens_target"]
        for s in (sa, sb):
            assert 0 <= s["tokens_planned"] - s["tokens_target"] < longest(originals, name)


def test_source_order_does_not_depend_on_the_other_sources(shards, tmp_path):
    dirs, _ = shards
    with_edu = build_phase_index(
        PhaseSpec("p", 4_000, 5, {"web": 1, "edu": 1}), dirs, tmp_path / "a"
    )
    with_code = build_phase_index(
        PhaseSpec("p", 4_000, 5, {"web": 1, "code": 1}), dirs, tmp_path / "b"
    )
    assert per_source(with_edu)["web"]["tokens_target"] == 2_000
    assert per_source(with_code)["web"]["tokens_target"] == 2_000
    web_a = rows_of(
        index_arrays(tmp_path / "a"), [s["name"] for s in with_edu["sources"]].index("web")
    )
    web_b = rows_of(
        index_arrays(tmp_path / "b"), [s["name"] for s in with_code["sources"]].index("web")
    )
    assert web_a == web_b


# -- the mixture ---------------------------------------------------------------------------------


def test_tokens_per_source_follow_weights_within_one_document(shards, tmp_path):
    dirs, originals = shards
    budget = 10_000
    phase = build_phase_index(
        PhaseSpec("p", budget, 3, {"web": 5, "edu": 3, "code": 2}), dirs, tmp_path / "p"
    )
    expected = {"web": 5000, "edu": 3000, "code": 2000}
    ds = PhaseDataset(tmp_path / "p")
    # Count tokens by what the documents say they are, not by the index's own columns.
    seen = {name: 0 for name in SOURCES}
    source_of = {sid: name for name, (sid, _, _) in SOURCES.items()}
    for doc in ds.iter_documents():
        seen[source_of[int(doc[1]) // 1000]] += len(doc)
    for name, share in expected.items():
        record = per_source(phase)[name]
        assert record["tokens_target"] == share
        assert record["tokens_planned"] == seen[name]
        assert 0 <= seen[name] - share < longest(originals, name)
    assert phase["tokens_planned"] == sum(seen.values()) == ds.total_tokens
    assert budget <= phase["tokens_planned"] < budget + sum(longest(originals, n) for n in SOURCES)


def test_natural_weights_are_proportional_to_size(shards, tmp_path):
    dirs, originals = shards
    budget = 7_777
    phase = build_phase_index(
        PhaseSpec("p", budget, 3, dict.fromkeys(SOURCES)), dirs, tmp_path / "p"
    )
    total = sum(available(originals, n) for n in SOURCES)
    targets = {n: per_source(phase)[n]["tokens_target"] for n in SOURCES}
    assert sum(targets.values()) == budget
    for name in SOURCES:
        assert per_source(phase)[name]["tokens_available"] == available(originals, name)
        assert abs(targets[name] - budget * available(originals, name) / total) < 1


def test_numbers_mixed_with_natural_shares_are_fractions_of_the_budget(shards, tmp_path):
    dirs, originals = shards
    budget = 10_000
    phase = build_phase_index(
        PhaseSpec("p", budget, 3, {"code": 0.1, "web": None, "edu": None}), dirs, tmp_path / "p"
    )
    targets = {n: per_source(phase)[n]["tokens_target"] for n in SOURCES}
    assert targets["code"] == 1000
    web, edu = available(originals, "web"), available(originals, "edu")
    assert abs(targets["web"] - 9000 * web / (web + edu)) < 1
    assert abs(targets["edu"] - 9000 * edu / (web + edu)) < 1
    assert sum(targets.values()) == budget


def test_every_prefix_holds_the_planned_mixture(shards, tmp_path):
    dirs, _ = shards
    budget = 20_000
    weights = {"web": 0.5, "edu": 0.3, "code": 0.2}
    phase = build_phase_index(PhaseSpec("p", budget, 11, weights), dirs, tmp_path / "p")
    arrays = index_arrays(tmp_path / "p")
    names = [s["name"] for s in phase["sources"]]
    tokens = arrays["tokens"].astype(np.int64)
    prefix = np.cumsum(tokens)
    planned = {n: per_source(phase)[n]["tokens_planned"] for n in names}
    longest_doc = {n: int(tokens[arrays["source"] == i].max()) for i, n in enumerate(names)}

    def deviation(order):
        # Worst |tokens of s in a prefix - share_s * prefix length|, in units of the bound that the
        # module documents: d_s / 2 + share_s * sum(d) / 2.
        worst = 0.0
        length = np.cumsum(tokens[order])
        for i, n in enumerate(names):
            share = planned[n] / phase["tokens_planned"]
            mine = np.cumsum(np.where(arrays["source"][order] == i, tokens[order], 0))
            bound = longest_doc[n] / 2 + share * sum(longest_doc.values()) / 2
            worst = max(worst, float(np.abs(mine - share * length).max() / bound))
        return worst

    assert deviation(np.arange(len(tokens))) <= 1.0
    # The same documents grouped by source break the bound many times over: the check can fail.
    assert deviation(np.argsort(arrays["source"], kind="stable")) > 10

    # Stated tolerance: in the first 10% of the index each source's share is within 0.03 of its
    # weight (the bound above gives at most ~0.02 for these document lengths).
    tenth = int(np.searchsorted(prefix, budget // 10))
    head = arrays["source"][: tenth + 1]
    head_tokens = tokens[: tenth + 1]
    for i, n in enumerate(names):
        share = head_tokens[head == i].sum() / head_tokens.sum()
        assert abs(share - weights[n]) < 0.03, (n, share)


# -- epochs --------------------------------------------------------------------------------------


def test_budget_beyond_a_source_takes_fresh_permutations_per_epoch(shards, tmp_path):
    dirs, originals = shards
    edu_tokens = available(originals, "edu")
    budget = int(2.5 * edu_tokens)
    phase = build_phase_index(PhaseSpec("p", budget, 4, {"edu": 1}), dirs, tmp_path / "p")
    record = per_source(phase)["edu"]
    assert record["epochs"] == 3
    all_docs = set(originals["edu"])
    n = len(all_docs)
    rows = rows_of(index_arrays(tmp_path / "p"), 0)
    first, second, third = rows[:n], rows[n : 2 * n], rows[2 * n :]
    assert set(first) == all_docs and len(first) == n
    assert set(second) == all_docs and len(second) == n
    assert len(set(third)) == len(third) > 0
    assert first != second and second[: len(third)] != third
    taken = sum(len(originals["edu"][r]) for r in rows)
    assert taken == record["tokens_planned"]
    assert 0 <= taken - budget < longest(originals, "edu")
    # Stopping at the first document that reaches the budget: without the last one it falls short.
    assert taken - len(originals["edu"][rows[-1]]) < budget


@pytest.mark.parametrize(
    ("budget", "documents", "epochs"), [(50, 5, 1), (51, 6, 1), (120, 12, 2), (121, 13, 2)]
)
def test_source_stops_at_the_first_document_reaching_its_budget(
    tmp_path, budget, documents, epochs
):
    write_source(tmp_path / "s", 4, [6, 4], (10, 10))  # ten documents of exactly 10 tokens
    phase = build_phase_index(
        PhaseSpec("p", budget, 0, {"s": 1}), {"s": tmp_path / "s"}, tmp_path / "p"
    )
    record = per_source(phase)["s"]
    assert record["documents_planned"] == documents
    assert record["tokens_planned"] == 10 * documents
    assert record["epochs"] == epochs


def test_empty_documents_are_skipped_and_counted(tmp_path):
    docs = write_source(tmp_path / "s", 4, [30], (3, 9), empty_every=5)
    phase = build_phase_index(
        PhaseSpec("p", 10_000, 0, {"s": 1}), {"s": tmp_path / "s"}, tmp_path / "p"
    )
    record = per_source(phase)["s"]
    assert record["empty_documents_skipped"] == 6
    assert record["documents_available"] == 24
    empty = {k for k, d in docs.items() if len(d) == 0}
    assert not empty & set(rows_of(index_arrays(tmp_path / "p"), 0))


# -- an index, not a copy ------------------------------------------------------------------------


def test_index_is_small_and_documents_are_memory_maps_of_the_shards(tmp_path):
    docs = write_source(tmp_path / "long", 5, [40], (300, 700))
    phase = build_phase_index(
        PhaseSpec("p", 15_000, 0, {"long": 1}), {"long": tmp_path / "long"}, tmp_path / "p"
    )
    index_bytes = sum((tmp_path / "p" / name).stat().st_size for name in INDEX_FILES)
    token_bytes = phase["tokens_planned"] * 2
    assert index_bytes < token_bytes / 10
    # 5 bytes a row (uint8 source, uint32 document), the block table, three .npy headers.
    assert index_bytes <= 5 * phase["documents_planned"] + 3 * 128 + 16

    ds = PhaseDataset(tmp_path / "p")
    doc = ds.document(0)
    assert not doc.flags.writeable and not isinstance(doc, np.memmap)  # read, not mapped
    # Changing a token in place (same size) reaches the reader, which refuses it: nothing was
    # copied at planning time, and no changed byte is returned.
    file, number = (
        index_arrays(tmp_path / "p")["file"][0],
        index_arrays(tmp_path / "p")["document"][0],
    )
    start = sum(len(docs[(0, d)]) for d in range(int(number)))
    with open(tmp_path / "long" / "00000_shard.ds", "r+b") as f:
        f.seek(2 * (start + 1))
        f.write(np.array([4242], dtype="<u2").tobytes())
    assert file == 0
    with pytest.raises(CorruptBlock, match=r"00000_shard\.ds: block 0 "):
        PhaseDataset(tmp_path / "p").document(0)


# -- reading a phase -----------------------------------------------------------------------------


@pytest.fixture
def phase(shards, tmp_path):
    dirs, originals = shards
    spec = PhaseSpec("p", 9_000, 21, {"web": 0.4, "edu": 0.25, "code": None})
    record = build_phase_index(spec, dirs, tmp_path / "phase")
    return tmp_path / "phase", record, originals


def test_documents_equal_the_original_documents(phase):
    phase_dir, record, originals = phase
    ds = PhaseDataset(phase_dir)
    arrays = index_arrays(phase_dir)
    names = [s["name"] for s in record["sources"]]
    assert len(ds) == record["documents_planned"] == len(arrays["tokens"])
    for i in range(len(ds)):
        key = (int(arrays["file"][i]), int(arrays["document"][i]))
        original = originals[names[arrays["source"][i]]][key]
        np.testing.assert_array_equal(ds.document(i), original)
    with pytest.raises(IndexError):
        ds.document(len(ds))


def test_iter_documents_resumes_exactly(phase):
    phase_dir, _, _ = phase
    ds = PhaseDataset(phase_dir)
    everything = [d.tolist() for d in ds.iter_documents()]
    for start in (0, 1, 37, len(ds) - 1, len(ds)):
        assert [d.tolist() for d in ds.iter_documents(start)] == everything[start:]
    with pytest.raises(ApertusError, match="out of range"):
        next(ds.iter_documents(len(ds) + 1))


@pytest.mark.parametrize("seq_len", [4, 16, 100])
def test_packed_sequences_cut_the_stream_and_reset_positions(phase, seq_len):
    phase_dir, _, _ = phase
    ds = PhaseDataset(phase_dir)
    docs = list(ds.iter_documents())
    stream = np.concatenate(docs)
    doc_starts = np.zeros(len(stream), dtype=bool)
    doc_starts[np.cumsum([0] + [len(d) for d in docs[:-1]])] = True
    window = seq_len + 1
    windows = list(ds.packed_sequences(seq_len))
    assert len(windows) == len(stream) // window
    assert [state for _, _, state in windows] == [window * (k + 1) for k in range(len(windows))]
    np.testing.assert_array_equal(
        np.concatenate([w for w, _, _ in windows]), stream[: len(windows) * window]
    )
    for k, (tokens, positions, _) in enumerate(windows):
        assert tokens.shape == positions.shape == (window,)
        offset = k * window
        starts = doc_starts[offset : offset + window].copy()
        starts[0] = True  # the window start also counts from 0
        expected = np.arange(window) - np.maximum.accumulate(np.where(starts, np.arange(window), 0))
        np.testing.assert_array_equal(positions, expected)
        # In the tokens themselves: position 0 inside a window exactly where a BOS follows an EOS.
        inner_zero = np.flatnonzero(positions[1:] == 0) + 1
        assert np.all(tokens[inner_zero] == BOS) and np.all(tokens[inner_zero - 1] == EOS)
        assert set(np.flatnonzero(tokens == BOS)) - {0} == set(inner_zero)


def test_packed_sequences_resume_from_a_yielded_state(phase):
    phase_dir, _, _ = phase
    ds = PhaseDataset(phase_dir)
    windows = list(ds.packed_sequences(24))
    for k in (0, 3, len(windows) // 2, len(windows) - 1):
        state = windows[k][2]
        resumed = list(PhaseDataset(phase_dir).packed_sequences(24, start=state))
        assert len(resumed) == len(windows) - k - 1
        for (t, p, s), (t2, p2, s2) in zip(resumed, windows[k + 1 :], strict=True):
            np.testing.assert_array_equal(t, t2)
            np.testing.assert_array_equal(p, p2)
            assert s == s2
    with pytest.raises(ApertusError, match="seq_len"):
        next(ds.packed_sequences(0))


def test_uint32_shards_read_back(tmp_path):
    docs = write_source(tmp_path / "big", 7, [50], (3, 20), dtype="uint32", vocab_size=131072)
    build_phase_index(PhaseSpec("p", 300, 0, {"big": 1}), {"big": tmp_path / "big"}, tmp_path / "p")
    ds = PhaseDataset(tmp_path / "p")
    arrays = index_arrays(tmp_path / "p")
    for i in range(len(ds)):
        doc = ds.document(i)
        assert doc.dtype == np.dtype("<u4") and int(doc[1]) >= 700_000
        np.testing.assert_array_equal(
            doc, docs[(int(arrays["file"][i]), int(arrays["document"][i]))]
        )


def test_shard_dirs_override_the_recorded_location(phase, tmp_path):
    phase_dir, _, _ = phase
    moved = tmp_path / "moved"
    (tmp_path / "shards").rename(moved)
    with pytest.raises(ApertusError, match="missing"):
        PhaseDataset(phase_dir)
    ds = PhaseDataset(phase_dir, {n: moved / n for n in SOURCES})
    assert len(ds.document(0)) == ds.rows(0, 1)["tokens"][0]


def test_a_results_folder_moved_whole_reads_the_same_tokens(tmp_path, monkeypatch):
    # The layout of results/<run>/tokenize: shards/<source> beside phases/<phase>, planned
    # from the repository root with paths relative to it, as the rule passes them.
    monkeypatch.chdir(tmp_path)
    for name, (sid, per_file, lengths) in SOURCES.items():
        write_source(
            tmp_path / "results" / "run" / "tokenize" / "shards" / name, sid, per_file, lengths
        )
    relative = Path("results", "run", "tokenize")
    spec = PhaseSpec("p", 9_000, 21, {"web": 0.4, "edu": 0.25, "code": None})
    record = build_phase_index(
        spec, {n: relative / "shards" / n for n in SOURCES}, relative / "phases" / "p"
    )
    assert {s["dir"] for s in record["sources"]} == {f"../../shards/{n}" for n in SOURCES}
    before = [d.tolist() for d in PhaseDataset(relative / "phases" / "p").iter_documents()]

    elsewhere = tmp_path / "elsewhere" / "copy"
    elsewhere.parent.mkdir()
    shutil.move(tmp_path / "results" / "run", elsewhere)
    monkeypatch.chdir(elsewhere.parent)
    moved = PhaseDataset(Path("copy", "tokenize", "phases", "p"))
    assert [d.tolist() for d in moved.iter_documents()] == before


@pytest.mark.parametrize("version", [1, 2])
def test_a_phase_of_an_older_format_is_refused_with_the_advice_to_rebuild(phase, version):
    phase_dir, record, _ = phase
    (phase_dir / "phase.json").write_text(json.dumps({**record, "format_version": version}))
    with pytest.raises(ApertusError, match=f"format {version} .*rebuild the phase"):
        PhaseDataset(phase_dir)


# -- errors --------------------------------------------------------------------------------------


def test_weighted_source_without_tokens_is_refused(shards, tmp_path):
    dirs, _ = shards
    empty = tmp_path / "empty"
    write_source(empty, 9, [4], (3, 5), empty_every=1)  # four empty documents, zero tokens
    for weight in (1.0, None):
        with pytest.raises(ApertusError, match=r"'empty'.*no tokens"):
            build_phase_index(
                PhaseSpec("p", 100, 0, {"web": 1.0 if weight else None, "empty": weight}),
                {**dirs, "empty": empty},
                tmp_path / "p",
            )
    # Weight 0: recorded, not drawn from.
    phase = build_phase_index(
        PhaseSpec("p", 100, 0, {"web": 1, "empty": 0}), {**dirs, "empty": empty}, tmp_path / "p"
    )
    assert per_source(phase)["empty"]["tokens_planned"] == 0
    assert set(index_arrays(tmp_path / "p")["source"].tolist()) == {
        [s["name"] for s in phase["sources"]].index("web")
    }


@pytest.mark.parametrize(
    ("weights", "message"),
    [
        ({"web": -1.0, "edu": 1.0}, "'web' has weight -1.0"),
        ({"web": float("nan")}, "'web' has weight nan"),
        ({"web": float("inf")}, "'web' has weight inf"),
        ({"web": True}, "'web' has weight True"),
        ({"web": "1"}, "'web' has weight '1'"),
        ({"web": 0, "edu": 0.0}, "all weights are zero"),
        ({"web": 0.6, "edu": 0.5, "code": None}, "must sum below 1"),
        ({}, "at least one source"),
    ],
)
def test_bad_weights_are_refused(weights, message):
    with pytest.raises(ApertusError, match=message):
        PhaseSpec("p", 100, 0, weights)


@pytest.mark.parametrize(
    ("tokens", "seed", "message"),
    [(0, 0, "tokens must be"), (10.5, 0, "tokens must be"), (10, -1, "seed must be")],
)
def test_bad_budget_or_seed_is_refused(tokens, seed, message):
    with pytest.raises(ApertusError, match=message):
        PhaseSpec("p", tokens, seed, {"web": 1})


def test_source_without_shard_dir_is_refused(shards, tmp_path):
    dirs, _ = shards
    with pytest.raises(ApertusError, match="'books' has no shard directory"):
        build_phase_index(PhaseSpec("p", 100, 0, {"web": 1, "books": 1}), dirs, tmp_path / "p")
    with pytest.raises(ApertusError, match=r"'books'.*does not exist"):
        build_phase_index(
            PhaseSpec("p", 100, 0, {"books": 1}), {"books": tmp_path / "nowhere"}, tmp_path / "p"
        )


def test_inconsistent_shards_are_refused_when_planning(shards, tmp_path):
    dirs, _ = shards
    spec = PhaseSpec("p", 100, 0, {"edu": 1})
    shard = dirs["edu"] / "00001_shard.ds"
    shard.write_bytes(shard.read_bytes()[:-2])
    with pytest.raises(ApertusError, match=r"00001_shard\.ds: .*checksums\.json records"):
        build_phase_index(spec, dirs, tmp_path / "p")
    # Files are checked in path order, so 00000's problems surface before 00001's.
    index = dirs["edu"] / "00000_shard.ds.index"
    index.write_bytes(index.read_bytes()[:-8])
    with pytest.raises(ApertusError, match=r"00000_shard\.ds\.index: .*checksums\.json records"):
        build_phase_index(spec, dirs, tmp_path / "p")
    # Without a checksums entry for the index, the index must still end where the tokens end.
    checksums = json.loads((dirs["edu"] / "checksums.json").read_text())
    del checksums["files"]["00000_shard.ds.index"]
    (dirs["edu"] / "checksums.json").write_text(json.dumps(checksums))
    with pytest.raises(ApertusError, match=r"00000_shard\.ds\.index: last document ends at"):
        build_phase_index(spec, dirs, tmp_path / "p")
    index.unlink()
    with pytest.raises(ApertusError, match=r"00000_shard\.ds\.index: document index missing"):
        build_phase_index(spec, dirs, tmp_path / "p")
    shard.unlink()
    with pytest.raises(ApertusError, match=r"00001_shard\.ds is in checksums\.json but missing"):
        build_phase_index(spec, dirs, tmp_path / "p")
    assert not (tmp_path / "p" / "phase.json").exists()


def test_different_vocabularies_are_refused(shards, tmp_path):
    dirs, _ = shards
    write_source(tmp_path / "wide", 8, [5], (3, 5), dtype="uint32", vocab_size=131072)
    with pytest.raises(ApertusError, match="different vocabularies"):
        build_phase_index(
            PhaseSpec("p", 100, 0, {"web": 1, "wide": 1}),
            {**dirs, "wide": tmp_path / "wide"},
            tmp_path / "p",
        )


def test_shard_truncated_after_planning_is_named(phase):
    phase_dir, record, _ = phase
    shard = phase_dir / per_source(record)["code"]["dir"] / "00000_shard.ds"
    shard.write_bytes(shard.read_bytes()[:-2])
    with pytest.raises(
        ApertusError, match=r"code/00000_shard\.ds: \d+ bytes, the phase was planned"
    ):
        PhaseDataset(phase_dir)


def test_shard_rewritten_with_other_boundaries_is_refused_when_read(phase):
    phase_dir, record, _ = phase
    index = phase_dir / per_source(record)["web"]["dir"] / "00000_shard.ds.index"
    ends = np.fromfile(index, dtype="<u8")
    ends[:-1] = np.arange(1, len(ends), dtype="<u8")  # same size, other document lengths
    ends.tofile(index)
    ds = PhaseDataset(phase_dir)  # sizes agree: opening is cheap and does not read it
    with pytest.raises(CorruptBlock, match=r"00000_shard\.ds\.index: block 0 "):
        list(ds.iter_documents())


def read_all(phase_dir):
    ds = PhaseDataset(phase_dir)
    return list(ds.iter_documents()), list(ds.packed_sequences(63))


@pytest.mark.parametrize("name", INDEX_FILES)
def test_tampered_index_is_refused(phase, tmp_path, shards, name):
    phase_dir, _, _ = phase
    index = phase_dir / name
    original = index.read_bytes()
    data = bytearray(original)
    data[-3] ^= 0xFF
    index.write_bytes(bytes(data))
    with pytest.raises(ApertusError, match=rf"{name}: block \d+ .* has crc32 |disagree"):
        read_all(phase_dir)
    # A valid index from another build is refused too, with its block checksums or without.
    dirs, _ = shards
    build_phase_index(PhaseSpec("p", 9_000, 22, {"web": 3, "edu": 2}), dirs, tmp_path / "other")
    index.write_bytes((tmp_path / "other" / name).read_bytes())
    with pytest.raises(ApertusError, match=f"{name}|disagree"):
        read_all(phase_dir)
    sidecar = phase_dir / (name + SIDECAR_SUFFIX)
    sidecar.write_bytes((tmp_path / "other" / (name + SIDECAR_SUFFIX)).read_bytes())
    with pytest.raises(ApertusError, match=f"{name}|disagree"):
        read_all(phase_dir)


# -- the "all" weight: every document of a source exactly once -----------------------------------


@pytest.fixture
def planted(shards, tmp_path):
    """The three sources plus `planted`: 13 documents in two files, each a distinct token value."""
    dirs, originals = shards
    dirs = {**dirs, "planted": tmp_path / "shards" / "planted"}
    originals = {**originals, "planted": write_source(dirs["planted"], 7, [6, 7], (5, 25))}
    return dirs, originals


def planted_documents_seen(phase_dir) -> list[int]:
    """Document numbers of the planted source in plan order, read from the tokens themselves."""
    return [
        int(doc[1]) - 7000
        for doc in PhaseDataset(phase_dir).iter_documents()
        if doc[1] // 1000 == 7
    ]


def test_all_weight_plans_every_document_exactly_once(planted, tmp_path):
    dirs, originals = planted
    budget = 12_000
    phase = build_phase_index(
        PhaseSpec("p", budget, 3, {"planted": "all", "web": 0.5, "edu": 0.5}), dirs, tmp_path / "p"
    )
    record = per_source(phase)["planted"]
    held = available(originals, "planted")
    assert record["weight"] == "all"
    assert record["tokens_target"] == record["tokens_planned"] == record["tokens_available"] == held
    assert record["documents_planned"] == len(originals["planted"]) == 13
    assert record["epochs"] == 1
    assert record["share"] == pytest.approx(held / budget)
    # Each planted document exactly once, by its tokens and by the index rows.
    assert sorted(planted_documents_seen(tmp_path / "p")) == list(range(13))
    rows = rows_of(
        index_arrays(tmp_path / "p"), [s["name"] for s in phase["sources"]].index("planted")
    )
    assert sorted(rows) == sorted(originals["planted"])
    # The others split the rest of the budget by their weights, exactly to the budget.
    rest = budget - held
    targets = {n: per_source(phase)[n]["tokens_target"] for n in ("web", "edu")}
    assert sum(targets.values()) == rest
    assert abs(targets["web"] - rest / 2) <= 1 and abs(targets["edu"] - rest / 2) <= 1
    assert per_source(phase)["web"]["share"] == pytest.approx(0.5 * rest / budget)


def test_all_weight_leaves_fractions_and_natural_shares_to_the_rest(planted, tmp_path):
    dirs, originals = planted
    budget = 10_000
    phase = build_phase_index(
        PhaseSpec("p", budget, 3, {"planted": "all", "code": 0.1, "web": None, "edu": None}),
        dirs,
        tmp_path / "p",
    )
    rest = budget - available(originals, "planted")
    targets = {n: per_source(phase)[n]["tokens_target"] for n in ("code", "web", "edu")}
    assert abs(targets["code"] - 0.1 * rest) <= 1
    web, edu = available(originals, "web"), available(originals, "edu")
    assert abs(targets["web"] - 0.9 * rest * web / (web + edu)) <= 1
    assert abs(targets["edu"] - 0.9 * rest * edu / (web + edu)) <= 1
    assert sum(targets.values()) == rest
    assert per_source(phase)["planted"]["tokens_target"] == available(originals, "planted")


def test_all_weight_spreads_the_documents_over_the_phase(planted, tmp_path):
    dirs, _ = planted
    phase = build_phase_index(
        PhaseSpec("p", 12_000, 3, {"planted": "all", "web": None}), dirs, tmp_path / "p"
    )
    arrays = index_arrays(tmp_path / "p")
    where = np.flatnonzero(
        arrays["source"] == [s["name"] for s in phase["sources"]].index("planted")
    )
    fraction = np.cumsum(arrays["tokens"].astype(np.int64))[where] / phase["tokens_planned"]
    # 13 documents at their progress fraction: the first within the first tenth, the last in the
    # last tenth, never more than two in any tenth of the phase.
    assert fraction[0] < 0.1 and fraction[-1] > 0.9
    assert np.bincount((fraction * 10).astype(int).clip(0, 9), minlength=10).max() <= 2


def test_all_weight_is_deterministic_and_independent_of_the_others(planted, tmp_path):
    dirs, _ = planted
    spec = PhaseSpec("p", 12_000, 5, {"planted": "all", "web": 1, "edu": 2})
    build_phase_index(spec, dirs, tmp_path / "a")
    build_phase_index(spec, dirs, tmp_path / "b")
    files = sorted(p.name for p in (tmp_path / "a").iterdir())
    # The work folder is gone; each index file has its block checksums.
    assert files == sorted(["phase.json", *INDEX_FILES, *(n + SIDECAR_SUFFIX for n in INDEX_FILES)])
    for name in files:
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()
    build_phase_index(
        PhaseSpec("p", 9_000, 5, {"planted": "all", "code": None}), dirs, tmp_path / "c"
    )
    assert planted_documents_seen(tmp_path / "a") == planted_documents_seen(tmp_path / "c")


def test_all_weight_alone_must_match_the_budget(planted, tmp_path):
    dirs, originals = planted
    held = available(originals, "planted")
    phase = build_phase_index(
        PhaseSpec("p", held, 0, {"planted": "all", "web": 0}), dirs, tmp_path / "p"
    )
    assert phase["tokens_planned"] == held
    assert per_source(phase)["web"]["tokens_planned"] == 0
    with pytest.raises(
        ApertusError, match=rf"no other source draws .* set the phase's tokens to {held}"
    ):
        build_phase_index(PhaseSpec("p", held + 1, 0, {"planted": "all"}), dirs, tmp_path / "q")


@pytest.mark.parametrize(
    ("extra", "message"), [(-1, "more than the budget"), (0, "leaving nothing")]
)
def test_all_weight_beyond_the_budget_is_refused(planted, tmp_path, extra, message):
    dirs, originals = planted
    budget = available(originals, "planted") + extra
    with pytest.raises(ApertusError, match=rf"'p': .*'all' \(planted\).*{message}"):
        build_phase_index(
            PhaseSpec("p", budget, 0, {"planted": "all", "web": None}), dirs, tmp_path / "p"
        )
    assert not (tmp_path / "p" / "phase.json").exists()


@pytest.mark.parametrize(
    ("weights", "message"),
    [
        ({"planted": "ALL", "web": 1.0}, "'planted' has weight 'ALL'.*or 'all'"),
        ({"planted": "every", "web": 1.0}, "'planted' has weight 'every'"),
        ({"planted": "all", "web": 0.6, "edu": 0.5, "code": None}, "must sum below 1"),
    ],
)
def test_bad_all_weights_are_refused(weights, message):
    with pytest.raises(ApertusError, match=message):
        PhaseSpec("p", 100, 0, weights)


def test_all_weight_source_without_tokens_is_refused(shards, tmp_path):
    dirs, _ = shards
    write_source(tmp_path / "empty", 9, [3], (3, 5), empty_every=1)
    with pytest.raises(ApertusError, match=r"'empty' has weight all but no tokens"):
        build_phase_index(
            PhaseSpec("p", 100, 0, {"web": 1.0, "empty": "all"}),
            {**dirs, "empty": tmp_path / "empty"},
            tmp_path / "p",
        )


# -- languages -----------------------------------------------------------------------------------


def test_tokens_per_language_sum_to_the_totals_and_match_the_index_rows(shards, tmp_path):
    dirs, originals = shards
    spec = PhaseSpec("p", 30_000, 4, {"web": 0.3, "edu": 0.5, "code": None})
    phase = build_phase_index(spec, dirs, tmp_path / "p")
    assert per_source(phase)["edu"]["epochs"] > 2  # documents repeat: each use counts
    arrays = index_arrays(tmp_path / "p")
    phase_total: dict[str, dict[str, int]] = {}
    for i, record in enumerate(phase["sources"]):
        source_id = SOURCES[record["name"]][0]
        expected = {
            document_language(source_id, f, d): {"documents_planned": 0, "tokens_planned": 0}
            for f, d in originals[record["name"]]
        }
        keep = arrays["source"] == i
        for f, d, tokens in zip(
            arrays["file"][keep].tolist(),
            arrays["document"][keep].tolist(),
            arrays["tokens"][keep].tolist(),
            strict=True,
        ):
            counts = expected[document_language(source_id, f, d)]
            counts["documents_planned"] += 1
            counts["tokens_planned"] += tokens
        assert record["languages"] == expected
        for key in ("documents_planned", "tokens_planned"):
            assert sum(c[key] for c in expected.values()) == record[key]
        for language, counts in expected.items():
            total = phase_total.setdefault(language, {"documents_planned": 0, "tokens_planned": 0})
            for key, value in counts.items():
                total[key] += value
    assert phase["languages"] == phase_total
    assert set(phase_total) == set(LANGUAGES)
    for key in ("documents_planned", "tokens_planned"):
        assert sum(c[key] for c in phase_total.values()) == phase[key]
    assert json.loads((tmp_path / "p" / "phase.json").read_text())["languages"] == phase_total


def test_shards_without_language_sidecars_ask_to_rerun_tokenization(shards, tmp_path):
    dirs, _ = shards
    write_source(tmp_path / "old", 5, [20], (3, 9), languages=False)
    with pytest.raises(
        ApertusError,
        match=r"old/00000_shard\.ds\.languages\.json: not in checksums\.json.*"
        r"re-run tokenize_shards for 'old'",
    ):
        build_phase_index(
            PhaseSpec("p", 1_000, 0, {"web": 1, "old": 1}),
            {**dirs, "old": tmp_path / "old"},
            tmp_path / "p",
        )
    assert not (tmp_path / "p" / "phase.json").exists()


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        ("relabel", "sha256 differs from checksums.json"),
        ("delete", "language sidecar missing"),
        ("drop_document", r"names the language of 149 documents, but 00001_shard\.ds holds 150"),
        ("not_json", "malformed, not valid JSON"),
    ],
)
def test_corrupt_or_missing_language_sidecar_is_named(shards, tmp_path, damage, message):
    dirs, _ = shards
    sidecar = dirs["web"] / "00001_shard.ds.languages.json"
    original = json.loads(sidecar.read_text())
    if damage == "relabel":
        documents = list(original["documents"])
        documents[7] = (documents[7] + 1) % len(original["codes"])
        sidecar.write_text(json.dumps(original | {"documents": documents}))
    elif damage == "delete":
        sidecar.unlink()
    else:
        if damage == "drop_document":
            sidecar.write_text(json.dumps(original | {"documents": original["documents"][:-1]}))
        else:
            sidecar.write_text("{not json")
        # Recorded in checksums.json as if written so: only the content is wrong.
        checksums = json.loads((dirs["web"] / "checksums.json").read_text())
        data = sidecar.read_bytes()
        checksums["files"][sidecar.name] = {
            "sha256": hashlib.sha256(data).hexdigest(),
            "bytes": len(data),
        }
        (dirs["web"] / "checksums.json").write_text(json.dumps(checksums))
    with pytest.raises(ApertusError, match=message) as e:
        build_phase_index(PhaseSpec("p", 1_000, 0, {"web": 1}), dirs, tmp_path / "p")
    assert sidecar.name in str(e.value)
    assert not (tmp_path / "p" / "phase.json").exists()


# -- out of core: the same plan as the in-memory planner of format 2 ---------------------------


def reference_plan(spec: PhaseSpec, dirs) -> list[tuple[str, int, int]]:
    """The in-memory planner of format 2 (index.npz), written out again without the module's
    streaming code: every source's documents in seeded permutations until its target, merged
    by progress. Returns (source, file, document) in training order."""
    from apertus.tokenize import phases

    names = sorted(spec.weights)
    tables = {}
    for name in names:
        table = []
        for f, index in enumerate(sorted(Path(dirs[name]).glob("*.ds.index"))):
            lengths = np.diff(np.fromfile(index, dtype="<u8"), prepend=0)
            table += [(f, d, int(n)) for d, n in enumerate(lengths) if n > 0]
        tables[name] = table
    available = {n: sum(length for *_, length in tables[n]) for n in names}
    targets, _ = phases._targets(spec, available, names)
    merged = []
    for i, name in enumerate(names):
        plan, remaining, epoch = [], targets[name], 0
        while remaining > 0:
            seeds = np.random.SeedSequence([spec.seed, phases._name_key(name), epoch])
            raw = np.random.PCG64(seeds).random_raw(len(tables[name]))
            epoch += 1
            for row in np.argsort(raw, kind="stable"):
                plan.append(int(row))
                remaining -= tables[name][row][2]
                if remaining <= 0:
                    break
        lengths = np.array([tables[name][r][2] for r in plan])
        progress = (np.cumsum(lengths) - lengths / 2) / lengths.sum() if plan else []
        merged += [(p, i, *tables[name][r][:2]) for p, r in zip(progress, plan, strict=True)]
    merged.sort(key=lambda row: (row[0], row[1]))
    return [(names[i], f, d) for _, i, f, d in merged]


@pytest.mark.parametrize(
    ("tokens", "weights"),
    [
        (12_000, {"web": 0.5, "edu": 0.2, "code": None}),
        (60_000, {"web": 3, "edu": 1, "code": 1}),  # several epochs of every source
        (5_000, {"web": None, "edu": 0, "code": None}),
    ],
)
def test_out_of_core_build_plans_exactly_what_the_in_memory_planner_did(
    tmp_path, monkeypatch, tokens, weights
):
    """Chunks of 37 rows: the permutations are sorted in buckets, the plans and the merge run in
    pieces, the block table has an entry every 5 rows; the rows and the token stream are those
    of the format-2 planner."""
    from apertus.tokenize import phases

    dirs = {}
    for name, (sid, per_file, lengths) in SOURCES.items():
        dirs[name] = tmp_path / "shards" / name
        write_source(dirs[name], sid, per_file, lengths, seed=sid, empty_every=9)
    spec = PhaseSpec("p", tokens, 11, weights)
    monkeypatch.setattr(phases, "_CHUNK", 37)
    monkeypatch.setattr(phases, "BLOCK_ROWS", 5)
    build_phase_index(spec, dirs, tmp_path / "p")
    ds = PhaseDataset(tmp_path / "p")
    rows = ds.rows()
    got = [
        (ds.sources[s], f, d)
        for s, f, d in zip(rows["source"], rows["file"], rows["document"], strict=True)
    ]
    assert got == reference_plan(spec, dirs)
    stream = np.concatenate(list(ds.iter_documents()))
    assert len(stream) == ds.total_tokens == int(rows["tokens"].sum())
    for start in (0, 1, 17, 5 * 3, ds.total_tokens // 2 + 3):
        window, _, after = next(ds.packed_sequences(15, start=start))
        assert window.tolist() == stream[start : start + 16].tolist() and after == start + 16


def test_permutation_in_buckets_is_the_stable_argsort(tmp_path, monkeypatch):
    from apertus.tokenize import phases

    monkeypatch.setattr(phases, "_CHUNK", 1000)
    for n in (999, 1000, 1001, 10_007):
        pieces = list(phases._permutation(n, 3, "web", 2, tmp_path / "sort"))
        raw = np.random.PCG64(np.random.SeedSequence([3, phases._name_key("web"), 2]))
        expected = np.argsort(raw.random_raw(n), kind="stable")
        assert np.array_equal(np.concatenate(pieces), expected)
        assert (n <= 1000) == (len(pieces) == 1)
        assert not list((tmp_path / "sort").glob("*"))  # its files are removed


def _traced_peak(fn) -> int:
    import tracemalloc

    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_memory_does_not_grow_with_the_corpus_building_or_reading(tmp_path, monkeypatch):
    """With chunks of 2,000 rows, building a phase over 4x the documents peaks at about the same
    traced memory, and opening it and reading a window allocates a small fixed amount."""
    from apertus.tokenize import phases

    monkeypatch.setattr(phases, "_CHUNK", 2_000)
    peaks, opened = {}, {}
    for files in (1, 3, 12):  # 5,000 documents a file; the first is a warm-up (imports, caches)
        shard_dir = tmp_path / f"s{files}" / "web"
        write_source(shard_dir, 1, [5_000] * files, (3, 9), seed=files)
        out = tmp_path / f"p{files}"
        spec = PhaseSpec("p", 5_000 * files * 5, 1, {"web": None})  # about 90% of the tokens
        peaks[files] = _traced_peak(lambda: build_phase_index(spec, {"web": shard_dir}, out))  # noqa: B023

        def read(out=out):
            ds = PhaseDataset(out)
            next(ds.packed_sequences(31, start=ds.total_tokens // 2))

        opened[files] = _traced_peak(read)
    assert peaks[12] < 1.3 * peaks[3]
    # Opening 45,000 more documents costs less than a byte each (phase.json lists more files),
    # besides the last verified block each reader keeps and the copy a read returns: seeking
    # reads the 9 more files' indexes (40 KB each here; at most BLOCK_BYTES whatever the size).
    kept = 9 * min(5_000 * 8, BLOCK_BYTES)
    assert opened[12] - opened[3] < 45_000 + 2 * kept


def test_gather_through_small_windows_is_plain_indexing(tmp_path, monkeypatch):
    from apertus.tokenize import phases

    data = np.random.default_rng(0).integers(0, 1 << 40, 10_000).astype("<u8")
    data.tofile(tmp_path / "column")
    index = np.random.default_rng(1).integers(0, len(data), (2, 3_000))
    for window in (8, 800, 1 << 20):  # 1, 100 and all items a map
        monkeypatch.setattr(phases, "_MAP_BYTES", window)
        got = phases._gather(tmp_path / "column", "<u8", len(data), index)
        assert got.shape == index.shape and np.array_equal(got, data[index])
    assert phases._gather(tmp_path / "column", "<u8", len(data), 17) == data[17]


# -- selections: a source's long documents as a source of their own -----------------------------


def test_a_selection_draws_only_long_documents_beside_the_whole_source(shards, tmp_path):
    dirs, originals = shards
    spec = PhaseSpec(
        "longctx",
        8_000,
        5,
        {"web": 0.7, "long": 0.2, "edu": 0.1},
        {"long": {"source": "web", "min_tokens": 30}},
    )
    record = build_phase_index(spec, dirs, tmp_path / "p")
    ds = PhaseDataset(tmp_path / "p")
    rows = ds.rows()
    long_index = ds.sources.index("long")
    long_lengths = rows["tokens"][rows["source"] == long_index]
    assert len(long_lengths) and long_lengths.min() >= 30
    long_record = per_source(record)["long"]
    assert long_record["select"] == {"source": "web", "min_tokens": 30}
    assert long_record["dir"] == per_source(record)["web"]["dir"]
    web_docs = [d for d in originals["web"].values() if len(d)]
    assert long_record["tokens_available"] == sum(len(d) for d in web_docs if len(d) >= 30)
    assert long_record["short_documents_skipped"] == sum(1 for d in web_docs if len(d) < 30)
    # Its documents are web's own, read from web's shards.
    for i in np.flatnonzero(rows["source"] == long_index)[:20]:
        assert int(ds.document(int(i))[1]) // 1000 == SOURCES["web"][0]
    # Shares of the budget as weighted, within a document each.
    planned = {s["name"]: s["tokens_planned"] for s in record["sources"]}
    assert abs(planned["long"] - 1_600) < 40 and abs(planned["web"] - 5_600) < 40


def test_bad_selections_are_refused(shards, tmp_path):
    dirs, _ = shards
    with pytest.raises(ApertusError, match=r"select\.long must be"):
        PhaseSpec("p", 100, 1, {"long": None}, {"long": {"source": "web", "min_tokens": 0}})
    with pytest.raises(ApertusError, match="another selection"):
        PhaseSpec("p", 100, 1, {"b": None}, {"a": {"source": "web", "min_tokens": 2},
                                              "b": {"source": "a", "min_tokens": 3}})  # fmt: skip
    spec = PhaseSpec("p", 100, 1, {"long": None}, {"long": {"source": "books", "min_tokens": 9}})
    with pytest.raises(ApertusError, match="'books' has no shard directory"):
        build_phase_index(spec, dirs, tmp_path / "p")
