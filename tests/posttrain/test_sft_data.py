"""SFT data: chat-template tokenization with a completion-only loss mask, truncation, padding
and the file format the trainer reads (RECIPE.md §7). The expected text of a conversation is
written out here from the chat format (`<s><|role_start|>...<|role_end|>...`), and the masked
tokens are decoded and compared with the assistant turns."""

from __future__ import annotations

import json

import numpy as np
import pytest

from apertus.core import ApertusError
from apertus.core.files import sha256_file
from apertus.posttrain.instructions import InstructionConfig, make_instruction_set, write_jsonl
from apertus.posttrain.sft_data import (
    SFTData,
    build_sft_data,
    main,
    read_sft_record,
    tokenize_conversation,
)
from apertus.tokenize.tokenizer import load_tokenizer, train_tokenizer

PAD = 3

# Adversarial conversations: multi-byte text inside completions, an empty completion, a
# developer turn, a completion that looks like a chat marker, three assistant turns.
EXTRA = [
    {
        "id": "x-umlaut",
        "language": "de",
        "messages": [
            {"role": "system", "content": "Grüezi! Antworte kurz."},
            {"role": "user", "content": "Wie heißt der Baum auf Spanisch?"},
            {"role": "assistant", "content": "árbol \u2013 «Baum» 😀"},
        ],
    },
    {
        "id": "x-empty",
        "language": "en",
        "messages": [
            {"role": "developer", "content": "Say nothing."},
            {"role": "user", "content": "Anything?"},
            {"role": "assistant", "content": ""},
        ],
    },
    {
        "id": "x-three",
        "language": "rm",
        "messages": [
            {"role": "user", "content": "Quant fa 1 plus 1?"},
            {"role": "assistant", "content": "2"},
            {"role": "user", "content": "E 2 plus 2?"},
            {"role": "assistant", "content": "<|user_start|> 4"},
            {"role": "user", "content": "Grazia"},
            {"role": "assistant", "content": "Bugen."},
        ],
    },
]


def render(messages: list[dict]) -> str:
    """The chat format of RECIPE.md §7, written out by hand."""
    return "<s>" + "".join(
        f"<|{m['role']}_start|>{m['content']}<|{m['role']}_end|>" for m in messages
    )


def runs(mask: np.ndarray) -> list[tuple[int, int]]:
    """[start, end) of each run of ones."""
    edges = np.diff(np.concatenate([[0], mask.astype(int), [0]]))
    return list(zip(np.flatnonzero(edges == 1), np.flatnonzero(edges == -1), strict=True))


@pytest.fixture(scope="module")
def conversations():
    config = InstructionConfig.from_dict({"train": 120, "qrpo": 0, "heldout": 0})
    return make_instruction_set(config).train + EXTRA


@pytest.fixture(scope="module")
def tokenizer(conversations, tmp_path_factory):
    texts = [m["content"] for c in conversations for m in c["messages"]]
    directory = tmp_path_factory.mktemp("tok") / "tokenizer"
    train_tokenizer(texts * 3, directory, vocab_size=400)
    return load_tokenizer(str(directory))


def test_the_mask_is_exactly_the_assistant_completions(tokenizer, conversations):
    """Every run of masked tokens decodes to one assistant turn's content followed by
    <|assistant_end|>, in order, and all tokens decode to the chat format's text."""
    for conversation in conversations:
        messages = conversation["messages"]
        row = tokenize_conversation(tokenizer, messages, max_len=1000)
        assert not row.truncated
        ids = row.tokens.tolist()
        assert tokenizer.decode(ids, skip_special_tokens=False) == render(messages)
        completions = [
            m["content"] + "<|assistant_end|>" for m in messages if m["role"] == "assistant"
        ]
        spans = runs(row.loss_mask)
        assert len(spans) == len(completions), conversation["id"]
        for (start, end), expected in zip(spans, completions, strict=True):
            assert tokenizer.decode(ids[start:end], skip_special_tokens=False) == expected
            # The token before a completion is the turn's start marker (never learned).
            assert ids[start - 1] == tokenizer.convert_tokens_to_ids("<|assistant_start|>")
        assert ids[0] == 1 and row.loss_mask[0] == 0


def test_truncation_keeps_the_prefix_and_drops_rows_without_completion(tokenizer, tmp_path):
    long = {
        "id": "long",
        "language": "en",
        "messages": [
            {"role": "user", "content": "Repeat after me: " + "dog cat " * 20},
            {"role": "assistant", "content": "dog cat " * 20},
        ],
    }
    hopeless = {
        "id": "hopeless",
        "language": "en",
        "messages": [
            {"role": "user", "content": "x " * 200},
            {"role": "assistant", "content": "y"},
        ],
    }
    full = tokenize_conversation(tokenizer, long["messages"], max_len=10_000)
    prompt_tokens = int(np.argmax(full.loss_mask))  # first completion token
    max_len = prompt_tokens + 5
    cut = tokenize_conversation(tokenizer, long["messages"], max_len=max_len)
    assert cut.truncated and cut.length == len(full.tokens)
    assert len(cut.tokens) == max_len + 1
    assert np.array_equal(cut.tokens, full.tokens[: max_len + 1])
    assert np.array_equal(cut.loss_mask, full.loss_mask[: max_len + 1])
    assert int(cut.loss_mask.sum()) == 6  # the completion's first tokens only

    record = build_sft_data([long, hopeless, EXTRA[0]], tokenizer, tmp_path, max_len=max_len)
    assert record["truncated"] == 2  # both long ones; the short one fits
    assert record["dropped_no_completion"] == 1 and record["dropped_ids"] == ["hopeless"]
    assert record["examples"] == 2 and record["conversations"] == 3
    data = SFTData(tmp_path)
    assert np.array_equal(data.row(0)[0], cut.tokens)


def test_rows_are_padded_with_pad_and_masked_there(tokenizer, conversations, tmp_path):
    record = build_sft_data(conversations, tokenizer, tmp_path, max_len=80)
    data = SFTData(tmp_path)
    assert len(data) == record["examples"] == len(conversations) - record["dropped_no_completion"]
    tokens, mask = data.padded([2, 0, len(data) - 1])
    assert tokens.shape == mask.shape == (3, 81) and tokens.dtype == np.int64
    kept = [c for c in conversations if c["id"] not in record["dropped_ids"]]
    for out, index in enumerate([2, 0, len(data) - 1]):
        row = tokenize_conversation(tokenizer, kept[index]["messages"], max_len=80)
        n = len(row.tokens)
        assert np.array_equal(tokens[out, :n], row.tokens)
        assert np.array_equal(mask[out, :n], row.loss_mask.astype(bool))
        assert (tokens[out, n:] == PAD).all() and not mask[out, n:].any()
    assert record["pad_id"] == PAD == tokenizer.pad_token_id
    # With a multiple: the same rows, cut after the longest (rounded up to the multiple, + 1).
    short, short_mask = data.padded([2, 0, len(data) - 1], multiple=16)
    longest = max(len(data.row(i)[0]) for i in [2, 0, len(data) - 1])
    width = min(81, -(-longest // 16) * 16 + 1)
    assert short.shape == (3, width) and width < 81
    assert np.array_equal(short, tokens[:, :width]) and (tokens[:, width:] == PAD).all()
    assert np.array_equal(short_mask, mask[:, :width]) and not mask[:, width:].any()


def test_the_record_describes_the_arrays(tokenizer, conversations, tmp_path):
    record = build_sft_data(
        conversations, tokenizer, tmp_path, max_len=80, conversations_sha256="c"
    )
    assert read_sft_record(tmp_path) == record
    assert record["vocab_size"] == len(tokenizer)
    assert (record["max_len"], record["row_tokens"]) == (80, 81)
    tokens = np.load(tmp_path / "tokens.npy")
    mask = np.load(tmp_path / "loss_mask.npy")
    lengths = np.load(tmp_path / "lengths.npy")
    assert tokens.dtype == np.int32 and mask.dtype == np.uint8 and lengths.dtype == np.int32
    assert record["tokens"] == len(tokens) == int(lengths.sum())
    assert record["completion_tokens"] == int(mask.sum())
    assert int(tokens.max()) < record["vocab_size"]
    for name, entry in record["files"].items():
        assert entry["sha256"] == sha256_file(tmp_path / name)
    languages = {}
    for c in conversations:
        if c["id"] not in record["dropped_ids"]:
            languages[c["language"]] = languages.get(c["language"], 0) + 1
    assert record["languages"] == dict(sorted(languages.items()))
    assert record["truncated"] == sum(
        len(tokenize_conversation(tokenizer, c["messages"], max_len=10**6).tokens) > 81
        for c in conversations
    )


def test_a_template_without_generation_marks_is_refused(tokenizer, conversations):
    plain = type(tokenizer).from_pretrained(tokenizer.name_or_path)
    plain.chat_template = plain.chat_template.replace("{%- generation -%}", "").replace(
        "{%- endgeneration -%}", ""
    )
    with pytest.raises(ApertusError, match="marks no assistant tokens"):
        tokenize_conversation(plain, conversations[0]["messages"], max_len=100)
    plain.chat_template = None
    with pytest.raises(ApertusError, match="no chat template"):
        tokenize_conversation(plain, conversations[0]["messages"], max_len=100)
    bad = [{"role": "tool", "content": "x"}, {"role": "assistant", "content": "y"}]
    with pytest.raises(ApertusError, match=r"conversation: the chat template refused it.*tool"):
        tokenize_conversation(tokenizer, bad, max_len=100)


def test_damaged_data_is_refused_naming_the_file(tokenizer, conversations, tmp_path):
    build_sft_data(conversations[:10], tokenizer, tmp_path, max_len=80)
    np.save(tmp_path / "lengths.npy", np.load(tmp_path / "lengths.npy")[:-1])
    with pytest.raises(ApertusError, match="arrays disagree"):
        SFTData(tmp_path)
    np.save(tmp_path / "lengths.npy", np.ones(10, dtype=np.int64))
    with pytest.raises(ApertusError, match=r"lengths\.npy: expected a 1-D int32 array"):
        SFTData(tmp_path)
    (tmp_path / "sft.json").write_text(json.dumps({"format": "other"}))
    with pytest.raises(ApertusError, match=r"sft\.json: not an apertus-sft-v1 record"):
        read_sft_record(tmp_path)
    with pytest.raises(ApertusError, match=r"sft\.json: not found"):
        read_sft_record(tmp_path / "nowhere")


def test_entry_point_writes_the_data_and_its_manifest(tokenizer, conversations, tmp_path):
    source = tmp_path / "train.jsonl"
    write_jsonl(source, conversations)
    out = tmp_path / "sft"
    argv = [
        "--config", json.dumps({"max_len": 64, "replay": {"documents": 0}}),
        "--manifest", str(tmp_path / "m.json"),
        "--conversations", str(source), "--tokenizer", tokenizer.name_or_path,
        "--output", str(out),
    ]  # fmt: skip
    main(argv)
    record = read_sft_record(out)
    assert record["conversations_sha256"] == sha256_file(source)
    assert record["max_len"] == 64 and record["examples"] > 100
    manifest = json.loads((tmp_path / "m.json").read_text())
    assert manifest["summary"]["truncated"] == record["truncated"]
    first = np.load(out / "tokens.npy")
    main(argv)  # deterministic: the same bytes again
    assert np.array_equal(np.load(out / "tokens.npy"), first)
    with pytest.raises(ApertusError, match=r"max_len must be a positive integer"):
        main([*argv[:1], json.dumps({"max_len": 0, "replay": {"documents": 0}}), *argv[2:]])
    with pytest.raises(ApertusError, match=r"unknown key 'posttrain\.sft_data\.max_length'"):
        main([*argv[:1], json.dumps({"max_length": 8}), *argv[2:]])


def test_replayed_documents_are_rows_of_their_own_with_every_label(
    tokenizer, conversations, tmp_path
):
    """posttrain.sft_data.replay: the first documents of a built phase, in its training order,
    cut to a row, labelled on every token after <s>; the conversations' rows are unchanged."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from apertus.data.sample_text import en
    from apertus.tokenize.phases import PhaseDataset, PhaseSpec, build_phase_index
    from apertus.tokenize.shards import write_token_shards

    corpus = tmp_path / "corpus" / "web" / "en"
    corpus.mkdir(parents=True)
    texts = [text for topic in en.TOPICS.values() for text in topic]
    rows = [
        {"id": f"web-{i}", "text": t, "source": "web", "language": "en"}
        for i, t in enumerate(texts)
    ]
    pq.write_table(pa.Table.from_pylist(rows), corpus / "00000.parquet")
    shards = tmp_path / "shards"
    write_token_shards(
        tmp_path / "corpus", "web", tokenizer.name_or_path, shards, exclude_ids=set(), seed=0,
        logging_dir=tmp_path / "logs",
    )  # fmt: skip
    build_phase_index(PhaseSpec("warm", 20_000, 3, {"web": None}), {"web": shards}, tmp_path / "p")
    phase = PhaseDataset(tmp_path / "p")

    source = tmp_path / "train.jsonl"
    write_jsonl(source, conversations)
    config = {"max_len": 64, "replay": {"documents": 7, "phase": "warm"}}
    argv = [
        "--config", json.dumps(config), "--manifest", str(tmp_path / "m.json"),
        "--conversations", str(source), "--tokenizer", tokenizer.name_or_path,
        "--output", str(tmp_path / "sft"), "--replay-phase", str(tmp_path / "p"),
    ]  # fmt: skip
    main(argv)
    data = SFTData(tmp_path / "sft")
    alone = build_sft_data(conversations, tokenizer, tmp_path / "alone", max_len=64)
    n = alone["examples"]
    assert len(data) == n + 7
    for i in range(n):  # the conversations first, as without replay
        assert np.array_equal(data.row(i)[0], SFTData(tmp_path / "alone").row(i)[0])
    for k in range(7):
        tokens, mask = data.row(n + k)
        assert np.array_equal(tokens, np.asarray(phase.document(k))[:65])
        assert tokens[0] == tokenizer.bos_token_id and mask[0] == 0 and mask[1:].all()
    record = data.record
    assert record["completion_tokens"] == alone["completion_tokens"]
    assert record["replay"] == {
        "phase": "warm",
        "index_sha256": phase.index_sha256,
        "documents": 7,
        "tokens": sum(len(data.row(n + k)[0]) - 1 for k in range(7)),
    }
    manifest = json.loads((tmp_path / "m.json").read_text())
    assert str(tmp_path / "p") in [entry["path"] for entry in manifest["inputs"]]

    def refused(config, *extra):
        args = [*argv[:1], json.dumps(config), *argv[2:10], *extra]
        with pytest.raises(ApertusError) as e:
            main(args)
        return str(e.value)

    assert "give the phase's directory with --replay-phase" in refused(config)
    too_many = {**config, "replay": {"documents": len(phase) + 1, "phase": "warm"}}
    assert f"plans {len(phase)}" in refused(too_many, "--replay-phase", str(tmp_path / "p"))
    other = {**config, "replay": {"documents": 1, "phase": "phase9"}}
    assert "phase 'warm'" in refused(other, "--replay-phase", str(tmp_path / "p"))
    # A shard the replayed documents come from, one bit changed: refused, naming it.
    shard = sorted(shards.glob("*.ds"))[0]
    flipped = bytearray(shard.read_bytes())
    flipped[3] ^= 0x10
    shard.write_bytes(bytes(flipped))
    message = refused(config, "--replay-phase", str(tmp_path / "p"))
    assert f"{shard}: block 0 (bytes 0-" in message and "has crc32" in message
