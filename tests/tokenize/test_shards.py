"""Token shards: exact Hugging Face ids, dtype, seeded shuffling, held-out split, verification."""

from __future__ import annotations

import gzip
import hashlib
import json
import random
import shutil
from collections import Counter
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

from apertus.core import ApertusError
from apertus.data.sample_corpus import make_sample_corpus
from apertus.evaluate.tasks import read_heldout
from apertus.tokenize.phases import PhaseSpec, build_phase_index
from apertus.tokenize.shards import (
    TokenShards,
    heldout_ids,
    read_corpus,
    token_dtype,
    verify_shards,
    write_heldout,
    write_token_shards,
)
from apertus.tokenize.tokenizer import SPECIAL_TOKENS, check_special_tokens, encode_documents
from tests.tokenize.hub_tokenizers import save_apertus_layout_tokenizer, save_hub_tokenizer

SPECIALS = ["<unk>", "<s>", "</s>", "<pad>"]
BOS, EOS = 1, 2
CORPUS_COLUMNS = (
    "id",
    "text",
    "source",
    "kind",
    "url",
    "language",
    "language_score",
    "quality_score",
    "toxicity_score",
)


# ---------------------------------------------------------------------------------------------
# Fixtures: a byte-level BPE tokenizer and a corpus in the data stage's layout


def save_tokenizer(tokenizer: Tokenizer, directory: Path) -> Path:
    """tokenizer.json plus the minimal config transformers.AutoTokenizer needs to load the dir."""
    directory.mkdir(parents=True, exist_ok=True)
    tokenizer.save(str(directory / "tokenizer.json"))
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "unk_token": "<unk>",
        "bos_token": "<s>",
        "eos_token": "</s>",
        "pad_token": "<pad>",
    }
    (directory / "tokenizer_config.json").write_text(json.dumps(config))
    return directory


def bpe_tokenizer(texts: list[str], template: str = "<s> $A </s>") -> Tokenizer:
    tokenizer = Tokenizer(models.BPE(unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=1000,
        special_tokens=SPECIALS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(texts, trainer)
    assert [tokenizer.token_to_id(t) for t in SPECIALS] == [0, 1, 2, 3]
    tokenizer.post_processor = processors.TemplateProcessing(
        single=template, special_tokens=[("<s>", BOS), ("</s>", EOS)]
    )
    return tokenizer


def word_level_tokenizer(vocab_size: int) -> Tokenizer:
    """Specials 0-3, then words w4 ... w<vocab_size-1>, one id each."""
    vocab = {t: i for i, t in enumerate(SPECIALS)}
    vocab.update({f"w{i}": i for i in range(len(SPECIALS), vocab_size)})
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer.post_processor = processors.TemplateProcessing(
        single="<s> $A </s>", special_tokens=[("<s>", BOS), ("</s>", EOS)]
    )
    return tokenizer


def corpus_row(raw: dict, source: str, kind: str) -> dict:
    return {
        "id": raw["id"],
        "text": raw["text"],
        "source": source,
        "kind": kind,
        "url": raw.get("url"),
        "language": raw["language"],
        "language_score": 0.9,
        "quality_score": 0.5,
        "toxicity_score": 0.1,
    }


def write_parquet(path: Path, rows: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows), path)


def write_jsonl_gz(path: Path, rows: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(path, "wt", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")


def shard_docs(shard_dir: Path) -> list[tuple[int, ...]]:
    shards = TokenShards(shard_dir)
    return [
        tuple(int(t) for t in shards.document(f, d))
        for f in range(len(shards.files))
        for d in range(shards.documents(f))
    ]


def dir_bytes(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir()) if p.is_file()}


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """The sample corpus laid out as the data stage writes it, a tokenizer, a held-out split and
    one shard set of the `web` source."""
    from transformers import AutoTokenizer

    root = tmp_path_factory.mktemp("shards")
    make_sample_corpus(root / "sample", seed=1, target_bytes=200_000)

    def raw(name):
        with gzip.open(root / "sample" / f"{name}.jsonl.gz", "rt", encoding="utf-8") as f:
            return [json.loads(line) for line in f]

    corpus = root / "corpus"
    rows: dict[str, list[dict]] = {"web": [], "edu": []}
    for source, kind in (("web", "web"), ("edu", "edu")):
        by_language: dict[str, list[dict]] = {}
        for r in raw(source):
            by_language.setdefault(r["language"], []).append(corpus_row(r, source, kind))
        for language, lang_rows in sorted(by_language.items()):
            directory = corpus / source / language
            if source == "edu":
                write_jsonl_gz(directory / "00000.jsonl.gz", lang_rows)
            elif language == "en":
                # Mixed formats in one directory, and texts with nothing to train on.
                lang_rows += [
                    corpus_row({"id": "empty-1", "text": "", "language": "en"}, "web", "web"),
                    corpus_row({"id": "blank-1", "text": " \n\t", "language": "en"}, "web", "web"),
                ]
                half = len(lang_rows) // 2
                write_parquet(directory / "00000.parquet", lang_rows[:half])
                write_jsonl_gz(directory / "00001.jsonl.gz", lang_rows[half:])
            else:
                write_parquet(directory / "00000.parquet", lang_rows)
            rows[source] += lang_rows

    tokenizer_dir = save_tokenizer(
        bpe_tokenizer([r["text"] for r in rows["web"] + rows["edu"]]), root / "tokenizer"
    )
    heldout = heldout_ids(
        ((r["id"], r["language"]) for r in read_corpus(corpus)),
        fraction=0.1,
        min_documents=1,
        max_documents=3,
        seed=0,
    )
    summary = write_token_shards(
        corpus,
        "web",
        tokenizer_dir,
        root / "web_shards",
        exclude_ids=heldout,
        seed=7,
        max_tokens_per_file=20_000,
        tasks=2,
        logging_dir=root / "logs" / "web",
    )
    return SimpleNamespace(
        root=root,
        corpus=corpus,
        rows=rows,
        tokenizer_dir=tokenizer_dir,
        hf=AutoTokenizer.from_pretrained(str(tokenizer_dir)),
        heldout=heldout,
        shards=root / "web_shards",
        summary=summary,
    )


def fresh_copy(world, tmp_path: Path) -> Path:
    return Path(shutil.copytree(world.shards, tmp_path / "shards"))


# ---------------------------------------------------------------------------------------------
# Shards hold exactly the Hugging Face tokenizer's ids


def test_every_training_document_is_stored_as_the_hf_tokenizer_ids(world):
    training = [r for r in world.rows["web"] if r["id"] not in world.heldout and r["text"].strip()]
    expected = Counter(tuple(ids) for ids in world.hf([r["text"] for r in training])["input_ids"])
    stored = shard_docs(world.shards)

    assert Counter(stored) == expected
    assert all(doc[0] == BOS and doc[-1] == EOS for doc in stored)
    assert BOS not in {doc[1] for doc in stored}  # one BOS, not a doubled one
    shards = TokenShards(world.shards)
    assert shards.total_documents() == len(training) == world.summary["documents"]
    assert shards.total_tokens() == sum(map(len, expected.elements()))
    assert world.summary["tokens"] == shards.total_tokens()
    assert len(shards.files) > 2  # max_tokens_per_file split the two tasks' output

    web_ids = {r["id"] for r in world.rows["web"]}
    assert world.summary["documents_read"] == len(world.rows["web"])
    assert world.summary["excluded_heldout"] == len(world.heldout & web_ids) > 0
    assert world.summary["skipped_empty"] == 2
    assert world.summary["dtype"] == "uint16"


def test_datatrove_eos_option_would_drop_the_bos_so_it_is_left_unset(world, tmp_path):
    from datatrove.pipeline.tokens import DocumentTokenizer

    tokenizer_json = str(world.tokenizer_dir / "tokenizer.json")
    text = world.rows["web"][0]["text"]
    with_eos_option = DocumentTokenizer(str(tmp_path), tokenizer_json, eos_token="</s>").tokenizer
    assert with_eos_option.encode(text).ids[0] != BOS
    as_used = DocumentTokenizer(str(tmp_path), tokenizer_json).tokenizer
    assert as_used.encode(text).ids == world.hf(text)["input_ids"]


def _training_docs(world, tokenizer_dir: Path) -> Counter:
    """The web source's training documents as `encode_documents` frames them: <s> ... </s>."""
    from transformers import AutoTokenizer

    training = [r["text"] for r in world.rows["web"] if r["id"] not in world.heldout]
    hf = AutoTokenizer.from_pretrained(str(tokenizer_dir))
    return Counter(map(tuple, encode_documents(hf, [t for t in training if t.strip()])))


def _token_files(directory: Path) -> dict[str, bytes]:
    return {n: b for n, b in dir_bytes(directory).items() if n.endswith((".ds", ".ds.index"))}


def test_shards_are_framed_bos_eos_whatever_the_tokenizer_post_processor_adds(world, tmp_path):
    # Hub tokenizers for causal LMs add <s> only; others add both, or nothing; the same BPE with
    # each, saved as the Hub saves it, gives byte-identical <s> ... </s> shards.
    texts = [r["text"] for r in world.rows["web"][:50]]
    token_files = {}
    for framing in ("bos", "both", "none"):
        tokenizer_dir = save_hub_tokenizer(tmp_path / framing, framing, texts=texts)
        out = tmp_path / f"shards-{framing}"
        summary = write_token_shards(
            world.corpus,
            "web",
            tokenizer_dir,
            out,
            exclude_ids=world.heldout,
            seed=7,
            logging_dir=tmp_path / "logs" / framing,
        )
        stored = shard_docs(out)
        assert Counter(stored) == _training_docs(world, tokenizer_dir)
        assert all(doc[0] == BOS and doc[-1] == EOS for doc in stored)
        assert BOS not in {doc[1] for doc in stored} and EOS not in {doc[-2] for doc in stored}
        assert verify_shards(out)["vocab_size"] == summary["vocab_size"] == 1024
        token_files[framing] = _token_files(out)
    assert token_files["bos"] == token_files["both"] == token_files["none"]


def test_an_eos_only_tokenizer_gets_its_bos_too(world, tmp_path):
    texts = [r["text"] for r in world.rows["web"][:50]]
    eos_only = save_tokenizer(bpe_tokenizer(texts, template="$A </s>"), tmp_path / "eos_only")
    write_token_shards(
        world.corpus,
        "web",
        eos_only,
        tmp_path / "out",
        exclude_ids=world.heldout,
        seed=0,
        logging_dir=tmp_path / "logs",
    )
    assert Counter(shard_docs(tmp_path / "out")) == _training_docs(world, eos_only)


def test_a_bos_only_tokenizer_with_the_apertus_layout_gives_uint32_bos_eos_shards(world, tmp_path):
    from transformers import AutoTokenizer

    tokenizer_dir = save_apertus_layout_tokenizer(
        tmp_path / "apertus", texts=[r["text"] for r in world.rows["web"][:50]]
    )
    hf = AutoTokenizer.from_pretrained(str(tokenizer_dir))
    assert len(hf) == 131072 and check_special_tokens(hf, SPECIAL_TOKENS)["adds_eos"] is False
    text = world.rows["web"][0]["text"]
    assert hf(text)["input_ids"] == [BOS, *hf(text, add_special_tokens=False)["input_ids"]]

    summary = write_token_shards(
        world.corpus,
        "web",
        tokenizer_dir,
        tmp_path / "out",
        exclude_ids=world.heldout,
        seed=7,
        logging_dir=tmp_path / "logs",
    )
    checksums = verify_shards(tmp_path / "out")
    assert (summary["dtype"], checksums["vocab_size"]) == ("uint32", 131072)
    assert (checksums["bos_token_id"], checksums["eos_token_id"]) == (BOS, EOS)
    assert Counter(shard_docs(tmp_path / "out")) == _training_docs(world, tokenizer_dir)
    # The tokenizer on disk is left as it was: still BOS-only for `transformers` at inference.
    post_processor = json.loads((tokenizer_dir / "tokenizer.json").read_text())["post_processor"]
    assert "</s>" not in json.dumps(post_processor)

    heldout = write_heldout(world.corpus, world.heldout, tmp_path / "heldout", tokenizer_dir)
    framed = encode_documents(
        hf, [r["text"] for r in read_corpus(world.corpus) if r["id"] in world.heldout]
    )
    assert heldout["tokens"] == sum(map(len, framed))


def test_a_tokenizer_without_eos_is_refused(world, tmp_path):
    texts = [r["text"] for r in world.rows["web"][:50]]
    directory = save_tokenizer(bpe_tokenizer(texts), tmp_path / "no_eos")
    config = json.loads((directory / "tokenizer_config.json").read_text())
    del config["eos_token"]
    (directory / "tokenizer_config.json").write_text(json.dumps(config))
    with pytest.raises(ApertusError, match="no BOS or no EOS"):
        write_token_shards(
            world.corpus,
            "web",
            directory,
            tmp_path / "out",
            exclude_ids=set(),
            seed=0,
            logging_dir=tmp_path / "logs",
        )
    assert not (tmp_path / "out").exists()


def test_a_tokenizer_that_truncates_is_refused(world, tmp_path):
    tokenizer = bpe_tokenizer([r["text"] for r in world.rows["web"][:50]])
    tokenizer.enable_truncation(max_length=16)
    directory = save_tokenizer(tokenizer, tmp_path / "truncating")
    with pytest.raises(ApertusError, match="truncation"):
        write_token_shards(
            world.corpus,
            "web",
            directory,
            tmp_path / "out",
            exclude_ids=set(),
            seed=0,
            logging_dir=tmp_path / "logs",
        )


def test_a_non_empty_output_directory_is_refused(world, tmp_path):
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "old.ds").write_bytes(b"\x01\x00")
    with pytest.raises(ApertusError, match="not empty"):
        write_token_shards(
            world.corpus,
            "web",
            world.tokenizer_dir,
            tmp_path / "out",
            exclude_ids=set(),
            seed=0,
            logging_dir=tmp_path / "logs",
        )


def test_a_source_with_nothing_to_train_on_gives_an_empty_verified_set(world, tmp_path):
    rows = [{"id": "a", "text": ""}, {"id": "b", "text": "kept out"}, {"id": "c", "text": " "}]
    write_jsonl_gz(tmp_path / "corpus" / "web" / "en" / "0.jsonl.gz", rows)
    summary = write_token_shards(
        tmp_path / "corpus",
        "web",
        world.tokenizer_dir,
        tmp_path / "out",
        exclude_ids={"b"},
        seed=0,
        tasks=2,
        logging_dir=tmp_path / "logs",
    )
    counts = (summary["documents"], summary["excluded_heldout"], summary["skipped_empty"])
    assert counts == (0, 1, 2)
    # datatrove leaves empty token files of tasks without documents; they are removed.
    assert [p.name for p in (tmp_path / "out").iterdir()] == ["checksums.json"]
    assert verify_shards(tmp_path / "out")["files"] == {}
    assert TokenShards(tmp_path / "out").total_documents() == 0


# ---------------------------------------------------------------------------------------------
# Token dtype


def test_token_dtype_is_uint16_up_to_65536_entries_then_uint32():
    assert token_dtype(1000) == np.uint16
    assert token_dtype(65536) == np.uint16
    assert token_dtype(65537) == np.uint32
    assert token_dtype(131072) == np.uint32  # the Apertus vocabulary (RECIPE.md)
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ApertusError):
            token_dtype(bad)


@pytest.mark.parametrize("vocab_size", [65536, 65537])
def test_token_dtype_agrees_with_datatrove(tmp_path, vocab_size):
    from datatrove.pipeline.tokens import DocumentTokenizer

    path = tmp_path / "tokenizer.json"
    word_level_tokenizer(vocab_size).save(str(path))
    step = DocumentTokenizer(str(tmp_path), str(path))
    assert step.tokenizer.get_vocab_size() == vocab_size
    assert step.token_size == token_dtype(vocab_size).itemsize


def test_large_vocabulary_shards_are_uint32_and_keep_ids_above_65535(tmp_path):
    from transformers import AutoTokenizer

    tokenizer_dir = save_tokenizer(word_level_tokenizer(70_000), tmp_path / "tok")
    texts = ["w65535 w65536 w69999", "w4 w70 w66000 w100", "w69998 w5"]
    rows = [
        {"id": f"d{i}", "text": t, "source": "web", "language": "xx"} for i, t in enumerate(texts)
    ]
    write_jsonl_gz(tmp_path / "corpus" / "web" / "xx" / "0.jsonl.gz", rows)
    summary = write_token_shards(
        tmp_path / "corpus",
        "web",
        tokenizer_dir,
        tmp_path / "out",
        exclude_ids=set(),
        seed=0,
        logging_dir=tmp_path / "logs",
    )
    assert summary["dtype"] == "uint32"
    checksums = verify_shards(tmp_path / "out")
    assert checksums["dtype"] == "uint32" and checksums["vocab_size"] == 70_000
    hf = AutoTokenizer.from_pretrained(str(tokenizer_dir))
    expected = Counter(tuple(ids) for ids in hf(texts)["input_ids"])
    assert Counter(shard_docs(tmp_path / "out")) == expected
    assert (1, 65535, 65536, 69999, 2) in expected  # ids a uint16 file would wrap
    (ds,) = TokenShards(tmp_path / "out").files
    assert (tmp_path / "out" / ds).stat().st_size == 4 * sum(map(len, expected))


# ---------------------------------------------------------------------------------------------
# Seeded shuffling


def _write(world, out: Path, seed: int, **kwargs) -> dict:
    return write_token_shards(
        world.corpus,
        "edu",
        world.tokenizer_dir,
        out,
        exclude_ids=world.heldout,
        seed=seed,
        logging_dir=out.parent / f"{out.name}_logs",
        **kwargs,
    )


def test_same_seed_gives_byte_identical_shards(world, tmp_path):
    _write(world, tmp_path / "a", seed=11)
    _write(world, tmp_path / "b", seed=11)
    a, b = dir_bytes(tmp_path / "a"), dir_bytes(tmp_path / "b")
    assert a == b
    assert "checksums.json" in a and any(name.endswith(".ds") for name in a)


def test_different_seed_changes_the_order_not_the_documents(world, tmp_path):
    _write(world, tmp_path / "a", seed=11)
    _write(world, tmp_path / "b", seed=12)
    a, b = shard_docs(tmp_path / "a"), shard_docs(tmp_path / "b")
    assert a != b
    assert Counter(a) == Counter(b)
    training = [r["text"] for r in world.rows["edu"] if r["id"] not in world.heldout]
    assert Counter(a) == Counter(tuple(ids) for ids in world.hf(training)["input_ids"])
    # Shuffled, not left in corpus order.
    assert a != [tuple(ids) for ids in world.hf(training)["input_ids"]]


def test_shards_do_not_depend_on_the_number_of_workers(world, tmp_path):
    _write(world, tmp_path / "one", seed=5, tasks=3, workers=1)
    _write(world, tmp_path / "three", seed=5, tasks=3, workers=3)
    assert dir_bytes(tmp_path / "one") == dir_bytes(tmp_path / "three")


# ---------------------------------------------------------------------------------------------
# Held-out split


def _docs(counts: dict[str, int]) -> list[tuple[str, str]]:
    return [(f"{lang}-{i}", lang) for lang, n in counts.items() for i in range(n)]


def test_heldout_counts_follow_fraction_min_max_and_keep_a_training_document():
    counts = {"a": 1, "b": 2, "c": 10, "d": 100, "e": 1000, "f": 50}
    chosen = heldout_ids(_docs(counts), fraction=0.05, min_documents=2, max_documents=20, seed=3)
    per_language = Counter(doc_id.split("-")[0] for doc_id in chosen)
    # a: 1 document, none held out; b: min 2 but one must stay; c: round(0.5)=0 -> min 2;
    # d: 5; e: 50 -> max 20; f: round(2.5)=2 (half to even)
    assert dict(per_language) == {"b": 1, "c": 2, "d": 5, "e": 20, "f": 2}


def test_heldout_choice_is_the_lowest_seeded_sha256_ranks():
    docs = _docs({"de": 40, "en": 60})
    chosen = heldout_ids(docs, fraction=0.1, min_documents=0, max_documents=100, seed=42)
    for lang, n in (("de", 4), ("en", 6)):
        ids = [d for d, lang_ in docs if lang_ == lang]
        ranked = sorted(ids, key=lambda i: hashlib.sha256(f"42:{i}".encode()).hexdigest())
        assert {d for d in chosen if d.startswith(lang)} == set(ranked[:n])


def test_heldout_is_deterministic_and_independent_of_input_order():
    docs = _docs({"de": 300, "en": 500, "fr": 7})
    options = {"fraction": 0.02, "min_documents": 1, "max_documents": 8}
    first = heldout_ids(docs, seed=1, **options)
    shuffled = docs[::-1] + docs[:50]  # reversed, with repeats
    random.Random(0).shuffle(shuffled)
    assert heldout_ids(iter(shuffled), seed=1, **options) == first
    assert heldout_ids(docs, seed=1, **options) == first
    assert heldout_ids(docs, seed=2, **options) != first


@pytest.mark.parametrize(
    "options",
    [
        {"fraction": 1.0},
        {"fraction": -0.1},
        {"fraction": float("nan")},
        {"min_documents": 5, "max_documents": 4},
        {"min_documents": -1},
        {"seed": "0"},
    ],
)
def test_heldout_rejects_bad_options(options):
    kwargs = {"fraction": 0.1, "min_documents": 1, "max_documents": 10, "seed": 0} | options
    with pytest.raises(ApertusError):
        heldout_ids(_docs({"en": 10}), **kwargs)


def test_heldout_documents_never_reach_the_training_shards(world):
    stored = set(shard_docs(world.shards))
    training_texts = {r["text"] for r in world.rows["web"] if r["id"] not in world.heldout}
    # Exact duplicates (planted in the sample) with another id legitimately stay in training.
    heldout_only = [
        r["text"]
        for r in world.rows["web"]
        if r["id"] in world.heldout and r["text"] not in training_texts
    ]
    assert len(heldout_only) >= 5
    for ids in world.hf(heldout_only)["input_ids"]:
        assert tuple(ids) not in stored


def test_write_heldout_writes_each_languages_documents(world, tmp_path):
    summary = write_heldout(world.corpus, world.heldout, tmp_path / "heldout", world.tokenizer_dir)
    all_rows = {r["id"]: r for source in ("web", "edu") for r in world.rows[source]}
    expected_languages = Counter(all_rows[i]["language"] for i in world.heldout)
    assert {lang: s["documents"] for lang, s in summary["languages"].items()} == dict(
        expected_languages
    )
    written_ids = set()
    for language, stats in summary["languages"].items():
        lines = (tmp_path / "heldout" / f"{language}.jsonl").read_text(encoding="utf-8")
        rows = [json.loads(line) for line in lines.splitlines()]
        assert len(rows) == stats["documents"]
        for row in rows:
            assert set(row) == {"id", "text", "source"}
            assert row["text"] == all_rows[row["id"]]["text"]
            assert row["source"] == all_rows[row["id"]]["source"]
            assert all_rows[row["id"]]["language"] == language
        written_ids |= {row["id"] for row in rows}
        assert stats["tokens"] == sum(
            len(ids) for ids in world.hf([r["text"] for r in rows])["input_ids"]
        )
    assert written_ids == world.heldout
    assert summary["documents"] == len(world.heldout)


def test_a_heldout_id_two_sources_share_is_written_once(world, tmp_path):
    """FineWeb-Edu and FineWeb-HQ carry FineWeb's ids: a held-out id found again in another
    source is written once (evaluation refuses an id twice in a file), and counted."""
    corpus = tmp_path / "corpus"
    shutil.copytree(world.corpus, corpus)
    first = next(r for r in world.rows["edu"] if r["id"] in world.heldout)
    again = {**first, "text": first["text"] + " (the other source's copy)", "source": "zz-copy"}
    write_jsonl_gz(corpus / "zz-copy" / first["language"] / "00000.jsonl.gz", [again])
    summary = write_heldout(corpus, world.heldout, tmp_path / "heldout", world.tokenizer_dir)
    assert summary["repeated_ids"] == 1
    assert summary["documents"] == len(world.heldout)
    lines = (tmp_path / "heldout" / f"{first['language']}.jsonl").read_text().splitlines()
    rows = [json.loads(line) for line in lines]
    assert [r["text"] for r in rows if r["id"] == first["id"]] == [first["text"]]
    read_heldout(tmp_path / "heldout")  # what evaluation reads: each id once


def test_write_heldout_refuses_ids_missing_from_the_corpus(world, tmp_path):
    with pytest.raises(ApertusError, match="not-a-document"):
        write_heldout(
            world.corpus, {*world.heldout, "not-a-document"}, tmp_path, world.tokenizer_dir
        )


# ---------------------------------------------------------------------------------------------
# verify_shards


def _ds_files(directory: Path) -> list[Path]:
    return sorted(directory.glob("*.ds"))


def _rewrite_checksums(directory: Path, **changes) -> None:
    """Record the files' current hashes, as a buggy writer would have."""
    path = directory / "checksums.json"
    checksums = json.loads(path.read_text())
    for name in checksums["files"]:
        data = (directory / name).read_bytes()
        checksums["files"][name] = {"sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data)}
    checksums.update(changes)
    path.write_text(json.dumps(checksums))


def test_verify_passes_on_a_fresh_shard_set(world):
    checksums = verify_shards(world.shards)
    on_disk = {p.name for p in world.shards.iterdir()} - {"checksums.json"}
    assert set(checksums["files"]) == on_disk
    for name, entry in checksums["files"].items():
        data = (world.shards / name).read_bytes()
        assert entry == {"sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data)}
    tokenizer_json = (world.tokenizer_dir / "tokenizer.json").read_bytes()
    assert checksums["tokenizer_sha256"] == hashlib.sha256(tokenizer_json).hexdigest()
    assert checksums["documents"] == world.summary["documents"]


def test_verify_names_the_file_with_a_flipped_byte(world, tmp_path):
    shards = fresh_copy(world, tmp_path)
    target = _ds_files(shards)[2]
    data = bytearray(target.read_bytes())
    data[len(data) // 2] ^= 0x01
    target.write_bytes(bytes(data))
    with pytest.raises(ApertusError, match="checksum mismatch") as e:
        verify_shards(shards)
    assert target.name in str(e.value)


def test_verify_names_a_truncated_token_file(world, tmp_path):
    shards = fresh_copy(world, tmp_path)
    target = _ds_files(shards)[1]
    target.write_bytes(target.read_bytes()[:-2])
    with pytest.raises(ApertusError, match="truncated") as e:
        verify_shards(shards)
    assert target.name in str(e.value)


def test_verify_names_a_missing_file(world, tmp_path):
    shards = fresh_copy(world, tmp_path)
    target = shards / (_ds_files(shards)[-1].name + ".index")
    target.unlink()
    with pytest.raises(ApertusError, match="missing") as e:
        verify_shards(shards)
    assert target.name in str(e.value)


def test_verify_reports_an_extra_token_file(world, tmp_path):
    shards = fresh_copy(world, tmp_path)
    extra = shards / "web_00099_00000_doc_shuffled.ds"
    shutil.copy(_ds_files(shards)[0], extra)
    with pytest.raises(ApertusError, match="not listed") as e:
        verify_shards(shards)
    assert extra.name in str(e.value)


def test_verify_catches_an_index_inconsistent_with_its_tokens(world, tmp_path):
    shards = fresh_copy(world, tmp_path)
    index = shards / (_ds_files(shards)[0].name + ".index")
    ends = np.fromfile(index, dtype="<u8")
    ends[-1] -= 1
    ends.tofile(index)
    _rewrite_checksums(shards)  # the hashes match: only the structure is wrong
    with pytest.raises(ApertusError, match="index inconsistent") as e:
        verify_shards(shards)
    assert index.name in str(e.value)


def test_verify_catches_half_a_token_recorded_in_the_checksums(world, tmp_path):
    shards = fresh_copy(world, tmp_path)
    target = _ds_files(shards)[0]
    target.write_bytes(target.read_bytes() + b"\x00")
    _rewrite_checksums(shards)
    with pytest.raises(ApertusError, match="whole number") as e:
        verify_shards(shards)
    assert target.name in str(e.value)


def test_verify_catches_a_document_without_bos(world, tmp_path):
    shards = fresh_copy(world, tmp_path)
    target = _ds_files(shards)[0]
    tokens = np.fromfile(target, dtype="<u2")
    tokens[0] = 7
    tokens.tofile(target)
    _rewrite_checksums(shards)
    with pytest.raises(ApertusError, match="BOS") as e:
        verify_shards(shards)
    assert target.name in str(e.value)


def test_verify_catches_totals_that_disagree(world, tmp_path):
    shards = fresh_copy(world, tmp_path)
    _rewrite_checksums(shards, documents=world.summary["documents"] + 1)
    with pytest.raises(ApertusError, match=r"checksums\.json"):
        verify_shards(shards)


@pytest.mark.parametrize(
    "content",
    [
        "{not json",
        "[]",
        '{"dtype": "uint16"}',
        "BROKEN_DTYPE",
        "MISSING_TOKENS",
        "ESCAPING_PATH",
    ],
)
def test_verify_names_a_malformed_checksums_file(world, tmp_path, content):
    shards = fresh_copy(world, tmp_path)
    path = shards / "checksums.json"
    checksums = json.loads(path.read_text())
    if content == "BROKEN_DTYPE":
        content = json.dumps(checksums | {"dtype": "float32"})
    elif content == "MISSING_TOKENS":
        content = json.dumps({k: v for k, v in checksums.items() if k != "tokens"})
    elif content == "ESCAPING_PATH":
        files = checksums["files"] | {"../outside.ds": {"sha256": "0" * 64, "bytes": 0}}
        content = json.dumps(checksums | {"files": files})
    path.write_text(content)
    with pytest.raises(ApertusError, match=r"checksums\.json.*malformed"):
        verify_shards(shards)


def test_verify_requires_checksums_json(world, tmp_path):
    shards = fresh_copy(world, tmp_path)
    (shards / "checksums.json").unlink()
    with pytest.raises(ApertusError, match=r"checksums\.json.*missing"):
        verify_shards(shards)


def test_token_shards_rejects_out_of_range_documents(world):
    shards = TokenShards(world.shards)
    with pytest.raises(IndexError):
        shards.document(0, shards.documents(0))


# ---------------------------------------------------------------------------------------------
# read_corpus


def test_read_corpus_reads_parquet_and_jsonl_gz_in_a_stable_order(tmp_path):
    def rows(source, language, ids):
        return [
            {
                "id": i,
                "text": f"text of {i}",
                "source": source,
                "kind": "web",
                "url": None,
                "language": language,
                "language_score": 0.5,
                "quality_score": 0.5,
                "toxicity_score": 0.0,
            }
            for i in ids
        ]

    corpus = tmp_path / "corpus"
    # Written in an order unrelated to the expected reading order.
    write_jsonl_gz(corpus / "web" / "en" / "00001.jsonl.gz", rows("web", "en", ["e3", "e4"]))
    write_parquet(corpus / "web" / "en" / "00000.parquet", rows("web", "en", ["e2", "e1"]))
    write_parquet(corpus / "edu" / "fr" / "00000.parquet", rows("edu", "fr", ["f1"]))
    write_jsonl_gz(corpus / "web" / "de" / "00000.jsonl.gz", rows("web", "de", ["d1"]))
    (corpus / "web" / "de" / "notes.txt").write_text("not a corpus file")

    order = [r["id"] for r in read_corpus(corpus)]
    assert order == ["f1", "d1", "e2", "e1", "e3", "e4"]
    assert [r["id"] for r in read_corpus(corpus)] == order
    assert [r["id"] for r in read_corpus(corpus, "web")] == ["d1", "e2", "e1", "e3", "e4"]
    first = next(read_corpus(corpus, "edu"))
    assert set(first) == set(CORPUS_COLUMNS)
    assert (first["source"], first["language"], first["text"]) == ("edu", "fr", "text of f1")


def test_read_corpus_fills_source_and_language_from_the_path(tmp_path):
    write_jsonl_gz(tmp_path / "web" / "rm" / "0.jsonl.gz", [{"id": "x", "text": "Allegra"}])
    (row,) = read_corpus(tmp_path)
    assert (row["source"], row["language"]) == ("web", "rm")


BAD_CORPORA = {
    "outside a language directory": ("web/0.jsonl.gz", {"id": "a", "text": "t"}, "0.jsonl.gz"),
    "no text": ("web/en/0.jsonl.gz", {"id": "a"}, r"0\.jsonl\.gz line 1"),
    "no id": ("web/en/0.jsonl.gz", {"text": "t"}, "no string 'id'"),
    "null text in parquet": ("web/en/0.parquet", {"id": "a", "text": None}, r"0\.parquet row 1"),
}


@pytest.mark.parametrize("case", sorted(BAD_CORPORA))
def test_read_corpus_names_the_file_of_bad_input(tmp_path, case):
    relpath, row, message = BAD_CORPORA[case]
    write = write_parquet if relpath.endswith(".parquet") else write_jsonl_gz
    write(tmp_path / relpath, [row])
    with pytest.raises(ApertusError, match=message):
        list(read_corpus(tmp_path))


def test_read_corpus_names_the_line_of_invalid_json(tmp_path):
    path = tmp_path / "web" / "en" / "0.jsonl.gz"
    path.parent.mkdir(parents=True)
    with gzip.open(path, "wt") as f:
        f.write('{"id": "a", "text": "ok"}\n{"id": "b", "te\n')
    with pytest.raises(ApertusError, match=r"0\.jsonl\.gz line 2"):
        list(read_corpus(tmp_path))


def test_read_corpus_refuses_a_missing_source(tmp_path):
    write_jsonl_gz(tmp_path / "web" / "en" / "0.jsonl.gz", [{"id": "a", "text": "t"}])
    with pytest.raises(ApertusError, match="code"):
        list(read_corpus(tmp_path, "code"))


def test_text_quoting_special_tokens_is_stored_as_plain_text(world, tmp_path):
    """A page that quotes `</s>` or `<s>` must not end early or gain a second BOS."""
    from apertus.tokenize.tokenizer import encode_documents

    text = "HTML tip: the tag </s> closes strike-through, <s> opens it; EOS is </s>."
    corpus = tmp_path / "corpus"
    write_jsonl_gz(
        corpus / "web" / "en" / "00000.jsonl.gz",
        [corpus_row({"id": "quote-1", "text": text, "language": "en"}, "web", "web")],
    )
    write_token_shards(
        corpus,
        "web",
        world.tokenizer_dir,
        tmp_path / "shards",
        exclude_ids=set(),
        seed=1,
        logging_dir=tmp_path / "logs",
    )
    (stored,) = shard_docs(tmp_path / "shards")
    assert list(stored) == encode_documents(world.hf, [text])[0]
    assert stored.count(EOS) == 1 and stored.count(BOS) == 1
    assert world.hf.decode(list(stored), skip_special_tokens=True) == text


# ---------------------------------------------------------------------------------------------
# The language of each shard document


def shard_text_languages(shard_dir: Path, hf) -> Counter:
    """(text, language) of every shard document: the text decoded from its tokens, the language
    read from the sidecar next to its file, at the document's position."""
    shards = TokenShards(shard_dir)
    pairs: Counter = Counter()
    for f, name in enumerate(shards.files):
        sidecar = json.loads((shard_dir / f"{name}.languages.json").read_text(encoding="utf-8"))
        assert len(sidecar["documents"]) == shards.documents(f)
        for d, position in enumerate(sidecar["documents"]):
            ids = shards.document(f, d).tolist()
            text = hf.decode(ids, skip_special_tokens=True, clean_up_tokenization_spaces=False)
            pairs[(text, sidecar["codes"][position])] += 1
    return pairs


def training_rows(world, source: str) -> list[dict]:
    return [r for r in world.rows[source] if r["id"] not in world.heldout and r["text"].strip()]


def counts_per_language(world, rows: list[dict], documents: str, tokens: str) -> dict:
    """{language: {documents: n, tokens: t}} of corpus rows, tokenized by transformers."""
    counts: dict[str, dict[str, int]] = {}
    texts = [r["text"] for r in rows]
    for row, ids in zip(rows, world.hf(texts)["input_ids"], strict=True):
        language = counts.setdefault(row["language"], {documents: 0, tokens: 0})
        language[documents] += 1
        language[tokens] += len(ids)
    return counts


def test_language_sidecars_name_the_language_of_each_shard_document(world):
    training = training_rows(world, "web")
    expected = Counter((r["text"], r["language"]) for r in training)
    assert shard_text_languages(world.shards, world.hf) == expected
    assert len(TokenShards(world.shards).files) > 2  # parts of split task outputs
    assert len({language for _, language in expected}) >= 5


def test_language_sidecars_follow_documents_over_many_part_files(world, tmp_path):
    summary = _write(world, tmp_path / "out", seed=3, tasks=2, max_tokens_per_file=300)
    shards = TokenShards(tmp_path / "out")
    per_task = Counter(name.split("_")[1] for name in shards.files)
    assert len(per_task) == 2 and min(per_task.values()) >= 5
    training = training_rows(world, "edu")
    assert shard_text_languages(tmp_path / "out", world.hf) == Counter(
        (r["text"], r["language"]) for r in training
    )
    # The summary's languages, against an independent tokenization of the corpus rows.
    expected = counts_per_language(world, training, "documents", "tokens")
    assert summary["languages"] == expected
    assert sum(c["tokens"] for c in expected.values()) == summary["tokens"]


def test_verify_names_a_corrupt_missing_or_misaligned_language_sidecar(world, tmp_path):
    shards = fresh_copy(world, tmp_path)
    sidecar = shards / (_ds_files(shards)[1].name + ".languages.json")
    original = json.loads(sidecar.read_text())
    assert "languages.json" in "".join(verify_shards(shards)["files"])

    assert len(original["codes"]) > 1
    relabelled = list(original["documents"])
    relabelled[0] = (relabelled[0] + 1) % len(original["codes"])  # one document's language
    relabelled_json = json.dumps(original | {"documents": relabelled}, separators=(",", ":"))
    sidecar.write_text(relabelled_json + "\n")  # same size, one value differs
    with pytest.raises(ApertusError, match="checksum mismatch") as e:
        verify_shards(shards)
    assert sidecar.name in str(e.value)

    sidecar.write_text(json.dumps(original | {"documents": original["documents"][:-1]}))
    _rewrite_checksums(shards)  # the hashes match: only the document count is wrong
    with pytest.raises(ApertusError, match=r"names the language of \d+ documents") as e:
        verify_shards(shards)
    assert sidecar.name in str(e.value)

    sidecar.unlink()
    with pytest.raises(ApertusError, match="missing") as e:
        verify_shards(shards)
    assert sidecar.name in str(e.value)


def test_phase_counts_the_tokens_of_each_language_of_real_shards(world, tmp_path):
    phase = build_phase_index(
        PhaseSpec("p", world.summary["tokens"], 0, {"web": "all"}),
        {"web": world.shards},
        tmp_path / "p",
    )
    training = training_rows(world, "web")
    expected = counts_per_language(world, training, "documents_planned", "tokens_planned")
    assert phase["languages"] == phase["sources"][0]["languages"] == expected
