"""Tokenizers as they come from the Hugging Face Hub, built locally (no network) for tests and
rehearsals: `save_hub_tokenizer` writes a byte-level BPE whose post-processor adds ``<s>`` only
(Llama, Mistral, Apertus), both ``<s>`` and ``</s>``, or nothing, in the Hub's files
(tokenizer.json, tokenizer_config.json with ``add_bos_token`` / ``add_eos_token``,
special_tokens_map.json); `save_apertus_layout_tokenizer` is the BOS-only one with the Apertus
layout: 131072 ids, the special and chat tokens at `SPECIAL_TOKENS`' ids.

The vocabulary is padded to its size with ``<|reserved_<id>|>`` entries that no merge produces,
so a 131072-id tokenizer costs one small BPE training; only the ids and the special tokens are
the real tokenizer's, not its merges.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

from apertus.tokenize.tokenizer import CHAT_TEMPLATE, CHAT_TOKENS, SPECIAL_TOKENS

APERTUS_VOCAB_SIZE = 131072
# What the tokenizer's post-processor adds around a text, as (single, pair) templates: those
# transformers builds from add_bos_token / add_eos_token (Llama's), or no post-processor.
FRAMINGS: dict[str, tuple[str, str] | None] = {
    "bos": ("<s> $A", "<s> $A <s>:1 $B:1"),
    "both": ("<s> $A </s>", "<s> $A </s> <s>:1 $B:1 </s>:1"),
    "none": None,
}

_TRAINING_TEXTS = (
    "The quick brown fox jumps over the lazy dog. Grüezi mitenand, wie gaht's?",
    "Allegra! Co vai? La vita è bella, et la vie aussi. Ελληνικά και русский текст.",
    "def main():\n    return sum(range(10))  # code too\n",
)


def save_hub_tokenizer(
    directory: Path,
    framing: str = "bos",
    *,
    vocab_size: int = 1024,
    texts: Iterable[str] = _TRAINING_TEXTS,
) -> Path:
    """Write a Hub-format byte-level BPE tokenizer into `directory` and return it.

    `framing` is what its post-processor adds: ``"bos"`` (``<s> $A``), ``"both"``
    (``<s> $A </s>``) or ``"none"``. `SPECIAL_TOKENS` (``<unk>``, ``<s>``, ``</s>``, ``<pad>``,
    the chat tokens) have their ids; BPE merges learnt from `texts` follow, then reserved
    entries up to `vocab_size` ids. The config carries the Apertus chat template.
    """
    templates = FRAMINGS[framing]
    adds_bos, adds_eos = framing in ("bos", "both"), framing == "both"
    specials = sorted(SPECIAL_TOKENS, key=SPECIAL_TOKENS.__getitem__)
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=min(vocab_size, 1024),
        special_tokens=specials,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(list(texts), trainer=trainer)
    data = json.loads(tokenizer.to_str())
    vocab = data["model"]["vocab"]
    if len(vocab) > vocab_size:
        raise ValueError(f"{len(vocab)} trained entries do not fit vocab_size {vocab_size}")
    vocab.update({f"<|reserved_{i}|>": i for i in range(len(vocab), vocab_size)})
    tokenizer = Tokenizer.from_str(json.dumps(data))
    if templates is not None:
        single, pair = templates
        tokenizer.post_processor = processors.TemplateProcessing(
            single=single,
            pair=pair,
            special_tokens=[(t, SPECIAL_TOKENS[t]) for t in ("<s>", "</s>") if t in single],
        )
    assert tokenizer.get_vocab_size(with_added_tokens=True) == vocab_size
    assert all(tokenizer.token_to_id(t) == i for t, i in SPECIAL_TOKENS.items())

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    tokenizer.save(str(directory / "tokenizer.json"))
    roles = {"bos_token": "<s>", "eos_token": "</s>", "pad_token": "<pad>", "unk_token": "<unk>"}
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        **roles,
        "additional_special_tokens": list(CHAT_TOKENS),
        "add_bos_token": adds_bos,
        "add_eos_token": adds_eos,
        "clean_up_tokenization_spaces": False,
        "model_max_length": 65536,
        "chat_template": CHAT_TEMPLATE,
    }
    special_tokens_map = {**roles, "additional_special_tokens": list(CHAT_TOKENS)}
    for name, content in (
        ("tokenizer_config.json", config),
        ("special_tokens_map.json", special_tokens_map),
    ):
        (directory / name).write_text(json.dumps(content, indent=2) + "\n", encoding="utf-8")
    return directory


def save_apertus_layout_tokenizer(directory: Path, texts: Iterable[str] = _TRAINING_TEXTS) -> Path:
    """A BOS-only Hub-format tokenizer with the Apertus layout: 131072 ids, `SPECIAL_TOKENS` at
    their ids (``<unk>`` 0, ``<s>`` 1, ``</s>`` 2, ``<pad>`` 3, the chat tokens from 4)."""
    return save_hub_tokenizer(directory, "bos", vocab_size=APERTUS_VOCAB_SIZE, texts=texts)
