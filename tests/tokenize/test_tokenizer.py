"""The tokenizer: special-token ids, offline Hugging Face loading, exact round trips, determinism,
the Apertus chat format, and the checks that refuse a tokenizer the pipeline cannot use."""

from __future__ import annotations

import gzip
import hashlib
import json
import random
import re
import unicodedata
from pathlib import Path

import huggingface_hub.constants
import jinja2
import pytest
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
from transformers import AutoTokenizer, PreTrainedTokenizerFast

from apertus.core import ApertusError
from apertus.data.sample_corpus import make_sample_corpus
from apertus.tokenize.tokenizer import (
    CHAT_TEMPLATE,
    CHAT_TOKENS,
    SPECIAL_TOKENS,
    check_special_tokens,
    encode_documents,
    load_tokenizer,
    save_pretrained_from,
    train_tokenizer,
)

# Written out by hand from RECIPE.md §1 and §7, not derived from the module under test.
EXPECTED_IDS = {
    "<unk>": 0,
    "<s>": 1,
    "</s>": 2,
    "<pad>": 3,
    "<|system_start|>": 4,
    "<|system_end|>": 5,
    "<|developer_start|>": 6,
    "<|developer_end|>": 7,
    "<|user_start|>": 8,
    "<|user_end|>": 9,
    "<|assistant_start|>": 10,
    "<|assistant_end|>": 11,
}
CHAT = [t for t in EXPECTED_IDS if t.startswith("<|")]
VOCAB = 1000

# Where byte-level tokenizers and their Hugging Face wrappers usually lose characters.
ADVERSARIAL_TEXTS = [
    "😀 \U0001f469\u200d\U0001f469\u200d\U0001f467 🇨🇭 emoji with ZWJ sequences and a flag",
    "日本語の文章と中文句子\uff0c한국어 문장도。",
    "e\u0301 (decomposed) vs \u00e9 (composed); Ω\u0308\u0301 stacked marks",
    "control \x00 null \x07 bell \x1b escape \x7f delete \u200b zero width \ufeff bom",
    "tabs\tand\nnewlines\r\nand\r carriage\x0bvertical\x0cfeed",
    "   leading and trailing spaces   ",
    " ",
    "\n\n",
    "word , word . it 's ( spaced ) punctuation !",
    "\U0010ffff\U0001f9ec astral plane",
]


def _read_corpus(corpus_dir: Path) -> list[tuple[str, str]]:
    rows = []
    for path in sorted(corpus_dir.glob("*.jsonl.gz")):
        with gzip.open(path, "rt", encoding="utf-8") as f:
            for line in f:
                record = json.loads(line)
                rows.append((record["language"], record["text"]))
    return rows


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> list[tuple[str, str]]:
    out = tmp_path_factory.mktemp("corpus")
    make_sample_corpus(out, seed=1, target_bytes=200_000)
    rows = _read_corpus(out)
    assert {"rm", "ru", "el", "de", "fr", "it", "en"} <= {lang for lang, _ in rows}
    return rows


@pytest.fixture(scope="module")
def texts(corpus) -> list[str]:
    return [text for _, text in corpus]


@pytest.fixture(scope="module")
def trained(tmp_path_factory, texts) -> tuple[Path, dict]:
    out = tmp_path_factory.mktemp("trained") / "tokenizer"
    summary = train_tokenizer(texts, out, vocab_size=VOCAB, min_frequency=2, seed=0)
    return out, summary


@pytest.fixture(scope="module")
def hf(trained):
    return AutoTokenizer.from_pretrained(str(trained[0]), trust_remote_code=False)


@pytest.fixture
def offline(monkeypatch):
    """Offline for this test whatever the environment, and so whatever order tests import in."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)


def _other_tokenizer(specials: list[str], single: str | None = "<s> $A </s>", **roles):
    """A small byte-level BPE built here with `tokenizers` directly: the special tokens get ids
    in the order given, `single` is the post-processor template (None: no post-processor)."""
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=400,
        special_tokens=specials,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(["hello world, hello there"] * 20, trainer=trainer)
    if single is not None:
        used = sorted(set(re.findall(r"<[^ $]+>", single)))
        tokenizer.post_processor = processors.TemplateProcessing(
            single=single, special_tokens=[(t, tokenizer.token_to_id(t)) for t in used]
        )
    roles = {"bos_token": "<s>", "eos_token": "</s>", "pad_token": "<pad>", **roles}
    return PreTrainedTokenizerFast(tokenizer_object=tokenizer, **roles)


# ---------------------------------------------------------------------------------------------
# Special tokens


def test_special_token_ids_are_fixed_in_tokenizer_json_and_via_autotokenizer(trained, hf):
    out, summary = trained
    assert SPECIAL_TOKENS == EXPECTED_IDS
    assert tuple(CHAT) == CHAT_TOKENS

    data = json.loads((out / "tokenizer.json").read_text(encoding="utf-8"))
    added = {t["content"]: t["id"] for t in data["added_tokens"]}
    assert added == EXPECTED_IDS
    assert all(t["special"] for t in data["added_tokens"])
    assert {t: data["model"]["vocab"][t] for t in EXPECTED_IDS} == EXPECTED_IDS

    assert (hf.unk_token_id, hf.bos_token_id, hf.eos_token_id, hf.pad_token_id) == (0, 1, 2, 3)
    assert {t: hf.convert_tokens_to_ids(t) for t in EXPECTED_IDS} == EXPECTED_IDS
    assert summary["special_tokens"] == EXPECTED_IDS
    assert (summary["bos_id"], summary["eos_id"], summary["pad_id"]) == (1, 2, 3)


def test_chat_tokens_are_single_tokens_even_inside_text(hf):
    for token, token_id in EXPECTED_IDS.items():
        assert hf(token, add_special_tokens=False)["input_ids"] == [token_id]
        ids = hf(f"before{token}after", add_special_tokens=False)["input_ids"]
        assert ids.count(token_id) == 1
        assert hf.decode(ids) == f"before{token}after"


def test_tokenizer_config_needs_no_custom_code(trained):
    out, summary = trained
    config = json.loads((out / "tokenizer_config.json").read_text(encoding="utf-8"))
    assert config["tokenizer_class"] == "PreTrainedTokenizerFast"
    assert "auto_map" not in config
    assert (config["bos_token"], config["eos_token"], config["pad_token"]) == (
        "<s>",
        "</s>",
        "<pad>",
    )
    assert config["unk_token"] == "<unk>"
    # The Hub convention for causal LMs; transformers 5 rebuilds the post-processor from these.
    assert config["add_bos_token"] is True and config["add_eos_token"] is False
    # transformers 5 never cleans up BPE output; older readers would, and break round trips.
    assert config["clean_up_tokenization_spaces"] is False
    assert config["chat_template"] == CHAT_TEMPLATE
    assert isinstance(config["model_max_length"], int)
    special_map = json.loads((out / "special_tokens_map.json").read_text(encoding="utf-8"))
    assert special_map["bos_token"] == "<s>" and special_map["eos_token"] == "</s>"
    assert sorted(summary["files"]) == sorted(p.name for p in out.iterdir())


def test_autotokenizer_offline_matches_tokenizers_library(trained, offline):
    out, _ = trained
    hf = AutoTokenizer.from_pretrained(str(out), trust_remote_code=False)
    raw = Tokenizer.from_file(str(out / "tokenizer.json"))
    for text in ["text", "Hello world", "Allegra! Co vai?", *ADVERSARIAL_TEXTS]:
        ids = hf(text)["input_ids"]
        assert ids == raw.encode(text).ids
        assert len(ids) > 1


def test_a_plain_encoding_has_one_bos_and_no_eos_like_hub_causal_lms(trained, offline):
    # Llama, Mistral and Apertus tokenizers add <s> only, so `generate` continues a prompt
    # instead of starting after an end of document; training adds </s> itself (the shards).
    hf = AutoTokenizer.from_pretrained(str(trained[0]))
    for text in ["text", "Hello world", "Allegra! Co vai?", *ADVERSARIAL_TEXTS]:
        ids = hf(text)["input_ids"]
        assert ids[0] == 1 and ids.count(1) == 1
        assert 2 not in ids
        assert ids[1:] == hf(text, add_special_tokens=False)["input_ids"]
    batch = hf(["one text", "and another"])["input_ids"]
    assert [ids.count(1) for ids in batch] == [1, 1] and all(2 not in ids for ids in batch)


# ---------------------------------------------------------------------------------------------
# Round trips


def test_round_trip_is_exact_in_every_sample_language(corpus, hf):
    by_language: dict[str, list[str]] = {}
    for language, text in corpus:
        by_language.setdefault(language, []).append(text)
    assert len(by_language) == 12
    for language, docs in by_language.items():
        for text in docs[:5]:
            ids = hf(text)["input_ids"]
            assert ids[0] == 1 and 2 not in ids, language
            assert 0 not in ids, f"<unk> in a {language} document"
            assert hf.decode(ids, skip_special_tokens=True) == text, language


@pytest.mark.parametrize("text", ADVERSARIAL_TEXTS)
def test_round_trip_is_exact_on_hard_text(hf, trained, text):
    ids = hf(text)["input_ids"]
    assert 0 not in ids
    assert hf.decode(ids, skip_special_tokens=True) == text
    raw = Tokenizer.from_file(str(trained[0] / "tokenizer.json"))
    assert raw.decode(raw.encode(text).ids, skip_special_tokens=True) == text


def test_no_unicode_normalization(hf):
    composed, decomposed = "caf\u00e9", "cafe\u0301"
    assert unicodedata.normalize("NFC", decomposed) == composed
    assert hf(composed)["input_ids"] != hf(decomposed)["input_ids"]
    assert hf.decode(hf(decomposed)["input_ids"], skip_special_tokens=True) == decomposed


# ---------------------------------------------------------------------------------------------
# Determinism and vocabulary size


def test_training_is_deterministic_and_independent_of_order_and_seed(tmp_path, texts, trained):
    subset = texts[::3]
    shuffled = subset[:]
    random.Random(7).shuffle(shuffled)
    assert shuffled != subset
    runs = {
        "a": (subset, 0),
        "b": (subset, 0),
        "shuffled": (shuffled, 0),
        "seed": (iter(subset), 12345),  # also from a one-pass iterator
    }
    files = {}
    for name, (data, seed) in runs.items():
        summary = train_tokenizer(data, tmp_path / name, vocab_size=600, seed=seed)
        files[name] = (tmp_path / name / "tokenizer.json").read_bytes()
        assert summary["files"]["tokenizer.json"] == hashlib.sha256(files[name]).hexdigest()
    assert files["a"] == files["b"] == files["shuffled"] == files["seed"]
    # A different corpus does give a different tokenizer: the comparison above can fail.
    assert files["a"] != (trained[0] / "tokenizer.json").read_bytes()


def test_vocab_size_is_honoured(trained, hf):
    out, summary = trained
    assert summary["vocab_size"] == summary["vocab_size_requested"] == VOCAB
    assert len(hf) == VOCAB
    assert sorted(hf.get_vocab().values()) == list(range(VOCAB))
    # 12 special tokens + 256 bytes + merges make up the vocabulary.
    assert summary["merges"] == VOCAB - 12 - 256
    data = json.loads((out / "tokenizer.json").read_text(encoding="utf-8"))
    assert len(data["model"]["merges"]) == summary["merges"]


def test_small_corpus_gives_fewer_tokens_and_says_so(tmp_path):
    summary = train_tokenizer(["ab ab ab abc"], tmp_path / "tok", vocab_size=5000)
    assert summary["vocab_size"] < 5000
    assert summary["vocab_size"] == len(AutoTokenizer.from_pretrained(str(tmp_path / "tok")))
    assert summary["vocab_size"] == 12 + 256 + summary["merges"]


def test_smallest_vocabulary_is_bytes_plus_special_tokens(tmp_path, texts):
    summary = train_tokenizer(texts[:20], tmp_path / "tok", vocab_size=268)
    assert summary["vocab_size"] == 268 and summary["merges"] == 0
    hf = AutoTokenizer.from_pretrained(str(tmp_path / "tok"))
    assert hf.decode(hf("Grüezi 😀")["input_ids"], skip_special_tokens=True) == "Grüezi 😀"
    with pytest.raises(ApertusError, match=r"vocab_size 267 is too small.*at least 268"):
        train_tokenizer(texts[:20], tmp_path / "small", vocab_size=267)
    assert not (tmp_path / "small").exists()


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ([], "no text to train the tokenizer on"),
        (["", ""], r"no text.*2 empty"),
        (["fine", b"bytes"], "text 1 is a bytes, not a str"),
        (["fine", "lone \ud800 surrogate"], "text 1 is not valid Unicode"),
    ],
)
def test_bad_training_input_is_refused(tmp_path, data, message):
    with pytest.raises(ApertusError, match=message):
        train_tokenizer(iter(data), tmp_path / "tok", vocab_size=300)
    assert not (tmp_path / "tok").exists()
    assert list(tmp_path.iterdir()) == []  # no temporary directory left behind


@pytest.mark.parametrize(
    "options", [{"vocab_size": 300.0}, {"vocab_size": True}, {"min_frequency": -1}, {"seed": -1}]
)
def test_bad_training_options_are_refused(tmp_path, options):
    with pytest.raises(ApertusError, match="must be an integer"):
        train_tokenizer(["some text"], tmp_path / "tok", **options)


def test_existing_output_is_replaced_only_when_it_holds_tokenizer_files(tmp_path, texts):
    out = tmp_path / "tok"
    train_tokenizer(texts[:30], out, vocab_size=400)
    first = (out / "tokenizer.json").read_bytes()
    train_tokenizer(texts[30:60], out, vocab_size=400)
    assert (out / "tokenizer.json").read_bytes() != first
    (out / "notes.txt").write_text("mine", encoding="utf-8")
    with pytest.raises(ApertusError, match=r"notes\.txt.*refusing to replace"):
        train_tokenizer(texts[:30], out, vocab_size=400)
    assert (out / "notes.txt").read_text(encoding="utf-8") == "mine"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tok"]


# ---------------------------------------------------------------------------------------------
# Chat template

CONVERSATION = [
    {"role": "system", "content": "You are Apertus."},
    {"role": "user", "content": "Grüezi! Wie gaht's?"},
    {"role": "assistant", "content": "Mir gaht's guet, merci."},
    {"role": "user", "content": "Und dir?"},
]
RENDERED = (
    "<s>"
    "<|system_start|>You are Apertus.<|system_end|>"
    "<|user_start|>Grüezi! Wie gaht's?<|user_end|>"
    "<|assistant_start|>Mir gaht's guet, merci.<|assistant_end|>"
    "<|user_start|>Und dir?<|user_end|>"
)


def test_chat_template_renders_the_apertus_format(hf):
    assert hf.apply_chat_template(CONVERSATION, tokenize=False) == RENDERED
    assert (
        hf.apply_chat_template(CONVERSATION, tokenize=False, add_generation_prompt=True)
        == RENDERED + "<|assistant_start|>"
    )
    developer = [{"role": "developer", "content": "Deliberation: disabled"}]
    assert (
        hf.apply_chat_template(developer, tokenize=False)
        == "<s><|developer_start|>Deliberation: disabled<|developer_end|>"
    )


def test_chat_template_tokenized_has_the_chat_token_ids(hf):
    ids = hf.apply_chat_template(CONVERSATION, tokenize=True, return_dict=True)["input_ids"]

    def text(s):
        return hf(s, add_special_tokens=False)["input_ids"]

    want = [1, 4, *text("You are Apertus."), 5, 8, *text("Grüezi! Wie gaht's?"), 9]
    want += [10, *text("Mir gaht's guet, merci."), 11, 8, *text("Und dir?"), 9]
    assert ids == want
    assert ids.count(1) == 1 and 2 not in ids  # <s> once, no </s> in a chat
    prompt = hf.apply_chat_template(
        CONVERSATION, tokenize=True, return_dict=True, add_generation_prompt=True
    )["input_ids"]
    assert prompt == [*want, 10]


def test_chat_template_marks_completion_tokens_for_sft(hf):
    out = hf.apply_chat_template(
        CONVERSATION, tokenize=True, return_dict=True, return_assistant_tokens_mask=True
    )
    ids, mask = out["input_ids"], out["assistant_masks"]
    completion = [*hf("Mir gaht's guet, merci.", add_special_tokens=False)["input_ids"], 11]
    start = ids.index(10) + 1
    assert [i for i, m in zip(ids, mask, strict=True) if m] == completion
    assert mask == [0] * start + [1] * len(completion) + [0] * (len(ids) - start - len(completion))


@pytest.mark.parametrize(
    ("messages", "message"),
    [
        ([{"role": "tool", "content": "42"}], "unknown role tool"),
        ([{"role": "user", "content": "hi"}, {"role": "bot", "content": "x"}], "unknown role bot"),
        ([{"role": "assistant", "content": None}], "must be a string"),
    ],
)
def test_chat_template_refuses_bad_messages(hf, messages, message):
    with pytest.raises(jinja2.TemplateError, match=message):
        hf.apply_chat_template(messages, tokenize=False)


# ---------------------------------------------------------------------------------------------
# check_special_tokens, load_tokenizer, save_pretrained_from


def test_check_special_tokens_returns_the_facts(hf):
    facts = check_special_tokens(hf)
    assert facts == {
        "bos_id": 1,
        "eos_id": 2,
        "pad_id": 3,
        "adds_bos": True,
        "adds_eos": False,
        "vocab_size": VOCAB,
    }
    assert check_special_tokens(hf, EXPECTED_IDS) == facts


def test_bos_at_another_id_is_refused_naming_token_and_ids():
    swapped = _other_tokenizer(["<unk>", "</s>", "<s>", "<pad>", *CHAT])
    with pytest.raises(ApertusError) as info:
        check_special_tokens(swapped)
    assert "'<s>': expected id 1, actual id 2" in str(info.value)
    assert "'</s>': expected id 2, actual id 1" in str(info.value)


def test_tokenizer_without_chat_tokens_is_refused():
    plain = _other_tokenizer(["<unk>", "<s>", "</s>", "<pad>"])
    with pytest.raises(ApertusError, match=r"chat token '<\|system_start\|>' is missing"):
        check_special_tokens(plain)


def test_missing_pad_and_wrong_declared_bos_are_refused():
    no_pad = _other_tokenizer(["<unk>", "<s>", "</s>", "<x>", *CHAT], pad_token="<x>")
    with pytest.raises(ApertusError, match=r"'<pad>': expected id 3, missing"):
        check_special_tokens(no_pad)
    other_bos = _other_tokenizer(["<unk>", "<s>", "</s>", "<pad>", *CHAT], bos_token="<unk>")
    with pytest.raises(ApertusError, match=r"bos_token is '<unk>', expected '<s>' \(id 1\)"):
        check_special_tokens(other_bos)


def test_bos_only_tokenizer_is_accepted_and_documents_still_end_in_eos():
    # Like Hub tokenizers for causal LMs (the Apertus one included): the template adds only <s>.
    bos_only = _other_tokenizer(["<unk>", "<s>", "</s>", "<pad>", *CHAT], single="<s> $A")
    facts = check_special_tokens(bos_only)
    assert (facts["adds_bos"], facts["adds_eos"]) == (True, False)
    assert bos_only("hello")["input_ids"][-1] != 2
    nothing = _other_tokenizer(["<unk>", "<s>", "</s>", "<pad>", *CHAT], single="$A")
    nothing_facts = check_special_tokens(nothing)
    assert (nothing_facts["adds_bos"], nothing_facts["adds_eos"]) == (False, False)
    for tokenizer in (bos_only, nothing):
        [ids] = encode_documents(tokenizer, ["hello world"])
        assert ids == [1, *tokenizer("hello world", add_special_tokens=False)["input_ids"], 2]


def test_tokenizer_adding_other_tokens_is_refused():
    extra = _other_tokenizer(["<unk>", "<s>", "</s>", "<pad>", *CHAT], single="<s> <pad> $A </s>")
    with pytest.raises(ApertusError, match="adds tokens other than <s>/</s>"):
        check_special_tokens(extra)


def test_encode_documents_treats_special_token_strings_as_text(hf):
    texts = ["a web page quoting </s> and <|user_start|> and <s>", "", "plain"]
    encoded = encode_documents(hf, texts)
    assert encoded[1] == [1, 2]
    assert encoded[2] == [*hf("plain")["input_ids"], 2]
    first = encoded[0]
    assert first[0] == 1 and first[-1] == 2
    assert not set(first[1:-1]) & set(EXPECTED_IDS.values())
    assert hf.decode(first, skip_special_tokens=True) == texts[0]
    # The default encoding would have cut the document at the quoted "</s>".
    assert 2 in hf(texts[0])["input_ids"][1:-1]
    with pytest.raises(ApertusError, match="document 1 is a int"):
        encode_documents(hf, ["x", 3])
    with pytest.raises(ApertusError, match="document 0 is not valid Unicode"):
        encode_documents(hf, ["\udfff"])


def test_load_tokenizer_from_a_local_directory(trained, offline):
    tokenizer = load_tokenizer(str(trained[0]))
    assert tokenizer.is_fast
    assert tokenizer("hello")["input_ids"][0] == 1
    assert tokenizer.apply_chat_template(CONVERSATION, tokenize=False) == RENDERED


def test_uncached_hub_id_offline_gives_a_clear_error(tmp_path, offline):
    with pytest.raises(ApertusError) as info:
        load_tokenizer("swiss-ai/Apertus-8B-2509", cache_dir=str(tmp_path / "cache"))
    message = str(info.value)
    assert "'swiss-ai/Apertus-8B-2509'" in message and "HF_HUB_OFFLINE" in message
    assert str(tmp_path / "cache") in message


@pytest.mark.parametrize("kind", ["empty directory", "missing path"])
def test_unloadable_local_tokenizer_gives_a_clear_error(tmp_path, offline, kind):
    path = tmp_path / "empty"
    if kind == "empty directory":
        path.mkdir()
    with pytest.raises(ApertusError, match="cannot load tokenizer"):
        load_tokenizer(str(path))


def test_save_pretrained_from_makes_a_checked_local_copy(trained, tmp_path, offline):
    out = tmp_path / "copy"
    result = save_pretrained_from(str(trained[0]), out)
    assert result["source"] == str(trained[0])
    assert (result["bos_id"], result["eos_id"], result["pad_id"]) == (1, 2, 3)
    assert result["adds_eos"] is False and result["has_chat_template"] is True
    assert set(result["files"]) == {p.name for p in out.iterdir()}
    copy = load_tokenizer(str(out))
    original = load_tokenizer(str(trained[0]))
    for text in ADVERSARIAL_TEXTS:
        assert copy(text)["input_ids"] == original(text)["input_ids"]
    assert copy.apply_chat_template(CONVERSATION, tokenize=False) == RENDERED
    # A failed load leaves an existing copy as it was.
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    with pytest.raises(ApertusError):
        save_pretrained_from(str(tmp_path / "nowhere"), out)
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
