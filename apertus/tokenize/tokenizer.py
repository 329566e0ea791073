"""The tokenizer: byte-level BPE, Apertus's special-token ids, chat format (RECIPE.md §1, §7).

Apertus uses a 131072-token byte-level BPE derived from Mistral-Nemo's "tekken", with
``<unk>`` = 0, ``<s>`` (bos) = 1, ``</s>`` (eos) = 2 and ``<pad>`` = 3. Every pretraining document
is ``<s> ... </s>``. Real runs load that tokenizer from the Hugging Face Hub
(:func:`load_tokenizer`, :func:`save_pretrained_from`); the embedded default run trains a small one
of the same kind on the sample corpus (:func:`train_tokenizer`). Either way the result is a plain
Hugging Face tokenizer directory that ``transformers.AutoTokenizer.from_pretrained`` loads without
custom code, and :func:`check_special_tokens` refuses any tokenizer whose special tokens are not
where the rest of the pipeline expects them.

Chat format (RECIPE.md §7), rendered by :data:`CHAT_TEMPLATE`::

    <s><|system_start|>...<|system_end|><|user_start|>...<|user_end|><|assistant_start|>...<|assistant_end|>

Roles are system, developer, user and assistant, in any order; ``add_generation_prompt=True``
appends ``<|assistant_start|>``.

EOS: a pretraining document is ``<s> ... </s>``, but a tokenizer's own post-processor is not
trusted to say so. Hub tokenizers for causal LMs (Llama, Mistral, Apertus) add only ``<s>``, so
that ``generate`` continues a prompt instead of starting after an end of document, and ours
follows that convention (post-processor ``<s> $A``, ``add_bos_token`` true, ``add_eos_token``
false). :func:`check_special_tokens` reports what a tokenizer adds (``adds_bos``, ``adds_eos``)
instead of refusing, and the document framing never relies on it: :func:`encode_documents`
encodes the text without special tokens and puts ``bos_id`` / ``eos_id`` around it, and the
shard writer gives datatrove :func:`document_framing` in place of the tokenizer's post-processor,
so every document is ``<s> ... </s>`` whether the tokenizer adds ``<s>``, both or nothing.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from types import MappingProxyType
from typing import Any

from huggingface_hub import constants as hub_constants
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
from transformers import AutoTokenizer, PreTrainedTokenizerBase, PreTrainedTokenizerFast

from apertus.core import ApertusError
from apertus.core.files import building_directory, sha256_file

log = logging.getLogger(__name__)

CHAT_ROLES: tuple[str, ...] = ("system", "developer", "user", "assistant")
CHAT_TOKENS: tuple[str, ...] = tuple(
    f"<|{role}_{edge}|>" for role in CHAT_ROLES for edge in ("start", "end")
)

# RECIPE.md §1 fixes ids 0-3; the chat tokens of §7 follow them in our trained tokenizer (the real
# Apertus tokenizer has them elsewhere, so only their presence is checked on a loaded tokenizer).
SPECIAL_TOKENS: dict[str, int] = {
    "<unk>": 0,
    "<s>": 1,
    "</s>": 2,
    "<pad>": 3,
    **{token: 4 + i for i, token in enumerate(CHAT_TOKENS)},
}

# What every tokenizer the pipeline uses must satisfy (RECIPE.md §1: bos=1, eos=2, pad=3).
PRETRAINING_SPECIAL_IDS: Mapping[str, int] = MappingProxyType({"<s>": 1, "</s>": 2, "<pad>": 3})

# The attribute of a Hugging Face tokenizer that names each of these tokens.
_ROLE_OF_TOKEN = {
    "<s>": "bos_token",
    "</s>": "eos_token",
    "<pad>": "pad_token",
    "<unk>": "unk_token",
}

# The longest context Apertus is trained on (RECIPE.md §6, 64k). Only used by `transformers` for
# truncation defaults and "sequence too long" warnings; documents are never truncated here.
MODEL_MAX_LENGTH = 65536

# The byte-level alphabet: every byte has a token, so any text is encodable without <unk>.
_BYTE_ALPHABET_SIZE = 256

CHAT_TEMPLATE: str = (
    "{{- bos_token -}}"
    "{%- for message in messages -%}"
    "{%- if message['role'] not in ['system', 'developer', 'user', 'assistant'] -%}"
    "{{- raise_exception('Apertus chat format: unknown role ' ~ message['role'] ~ "
    "' (expected system, developer, user or assistant)') -}}"
    "{%- endif -%}"
    "{%- if message['content'] is not string -%}"
    "{{- raise_exception('Apertus chat format: the content of a ' ~ message['role'] ~ "
    "' message must be a string') -}}"
    "{%- endif -%}"
    "{%- if message['role'] == 'assistant' -%}"
    "{{- '<|assistant_start|>' -}}"
    "{%- generation -%}"
    "{{- message['content'] ~ '<|assistant_end|>' -}}"
    "{%- endgeneration -%}"
    "{%- else -%}"
    "{{- '<|' ~ message['role'] ~ '_start|>' ~ message['content'] ~ '<|' ~ message['role'] "
    "~ '_end|>' -}}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}"
    "{{- '<|assistant_start|>' -}}"
    "{%- endif -%}"
)
"""The Apertus chat format (RECIPE.md §7) as a Jinja template for `apply_chat_template`.

``<s>`` once, then each message as ``<|{role}_start|>{content}<|{role}_end|>`` for the roles
system, developer, user and assistant; with ``add_generation_prompt=True`` a trailing
``<|assistant_start|>``. An unknown role or a non-string content raises a template error
(``jinja2.TemplateError``). The template adds no ``</s>``: a turn ends with its ``_end`` token.

Completion tokens for SFT (RECIPE.md §7, "loss on completions only"): the completion of an
assistant turn is its content followed by ``<|assistant_end|>``, i.e. everything between
``<|assistant_start|>`` (excluded) and the end of the turn (``<|assistant_end|>`` included), so the
model learns to close its turn. The template wraps exactly that span in ``{% generation %}``, so
``tokenizer.apply_chat_template(messages, return_dict=True, return_assistant_tokens_mask=True)``
returns ``assistant_masks`` = 1 on the completion tokens and 0 elsewhere. Special tokens are never
merged with their neighbours by the BPE, so this character span maps to whole tokens.
``generation`` is a tag of the `transformers` chat renderer (also understood by vLLM, which renders
through `transformers`); a bare ``jinja2.Environment`` does not know it.
"""

_PROBE_TEXTS = (
    "hello",
    "Grüezi mitenand! Wie gaht's? Allegra, co vai?",
    "Ελληνικά και русский текст, 日本語の文章、中文。",
    " leading and trailing spaces , tabs\tand\r\nnewlines \x00\x07 😀 e\u0301 ",
)


# ---------------------------------------------------------------------------------------------
# Training


def _check_int(name: str, value: Any, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ApertusError(f"tokenizer {name} must be an integer >= {minimum}, got {value!r}")


class _TextStream:
    """Passes texts to the BPE trainer, refusing what it cannot train on, and counts them."""

    def __init__(self, texts: Iterable[str]) -> None:
        self.texts = texts
        self.documents = 0
        self.empty = 0
        self.characters = 0

    def __iter__(self) -> Iterator[str]:
        for index, text in enumerate(self.texts):
            if not isinstance(text, str):
                raise ApertusError(
                    f"tokenizer training text {index} is a {type(text).__name__}, not a str"
                )
            try:
                # Lone surrogates (e.g. from JSON "\\ud800") have no UTF-8 form: the byte-level
                # BPE cannot see them, and they must not silently vanish from the statistics.
                text.encode("utf-8")
            except UnicodeEncodeError as e:
                raise ApertusError(
                    f"tokenizer training text {index} is not valid Unicode ({e.reason} at "
                    f"character {e.start})"
                ) from None
            if not text:
                self.empty += 1
                continue
            self.documents += 1
            self.characters += len(text)
            yield text


def _prompt_post_processor() -> processors.TemplateProcessing:
    """Encoding a text gives ``<s> ...``, the Hub convention for causal LMs (Llama, Mistral):
    a prompt the model continues, not a closed document. The shards' ``</s>`` is added by the
    shard writer (:func:`document_framing`). The pair template is the one `transformers` builds
    from ``add_bos_token`` alone (Llama's)."""
    return processors.TemplateProcessing(
        single="<s> $A",
        pair="<s> $A <s>:1 $B:1",
        special_tokens=[("<s>", SPECIAL_TOKENS["<s>"])],
    )


def _tokenizer_config() -> dict[str, Any]:
    return {
        # PreTrainedTokenizerFast reads tokenizer.json as is, in transformers 4 and 5 alike.
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": "<s>",
        "eos_token": "</s>",
        "pad_token": "<pad>",
        "unk_token": "<unk>",
        "additional_special_tokens": list(CHAT_TOKENS),
        # The post-processor in tokenizer.json adds <s> only; transformers 5 rebuilds it from
        # these flags when they are present, so they must say the same.
        "add_bos_token": True,
        "add_eos_token": False,
        # Decoding must give back the text exactly, e.g. keep the space in "word ,".
        "clean_up_tokenization_spaces": False,
        "model_max_length": MODEL_MAX_LENGTH,
        "padding_side": "right",
        "chat_template": CHAT_TEMPLATE,
    }


def _special_tokens_map() -> dict[str, Any]:
    return {
        "bos_token": "<s>",
        "eos_token": "</s>",
        "pad_token": "<pad>",
        "unk_token": "<unk>",
        "additional_special_tokens": list(CHAT_TOKENS),
    }


def train_tokenizer(
    texts: Iterable[str],
    out_dir: Path,
    *,
    vocab_size: int = 8192,
    min_frequency: int = 2,
    seed: int = 0,
) -> dict:
    """Train a byte-level BPE on `texts` and save it as a Hugging Face tokenizer in `out_dir`.

    The model is the `tokenizers` byte-level BPE (ByteLevel pre-tokenizer without a prefix
    space, ByteLevel decoder, all 256 bytes in the initial alphabet so any text encodes without
    ``<unk>``, no normalizer so decoding gives the text back exactly), with :data:`SPECIAL_TOKENS`
    at their fixed ids and a post-processor that puts ``<s>`` in front of an encoded text (no
    ``</s>``: the Hub convention for causal LMs; the shards add it, :func:`document_framing`).
    `out_dir` receives ``tokenizer.json``, ``tokenizer_config.json`` (class
    ``PreTrainedTokenizerFast``, special tokens, :data:`CHAT_TEMPLATE`) and
    ``special_tokens_map.json``; it is written as a whole or not at all (built beside it, loaded
    back with ``AutoTokenizer`` and checked, then moved into place). An existing `out_dir` is
    replaced only if it holds nothing but tokenizer files.

    `vocab_size` counts everything (special tokens, the 256 bytes, merges) and is an upper bound:
    a corpus too small to support that many merges (see `min_frequency`) gives fewer, reported
    in the summary. Deterministic: the same texts and settings give a byte-identical
    ``tokenizer.json``. The BPE counts words and picks merges by count with a fixed tie-break,
    so with `tokenizers` 0.23 the result also does not depend on the order of `texts` (checked in
    tests/tokenize/test_tokenizer.py); BPE training draws no random numbers, so `seed` does not
    change the result and is only recorded in the summary.

    Raises ApertusError for a `vocab_size` below 256 + the number of special tokens, for no
    non-empty text, and for a text that is not a str or not valid Unicode.
    """
    out_dir = Path(out_dir)
    minimum = _BYTE_ALPHABET_SIZE + len(SPECIAL_TOKENS)
    _check_int("vocab_size", vocab_size, 0)
    if vocab_size < minimum:
        raise ApertusError(
            f"tokenizer vocab_size {vocab_size} is too small: the byte-level BPE needs at least "
            f"{minimum} (256 bytes + {len(SPECIAL_TOKENS)} special tokens)"
        )
    _check_int("min_frequency", min_frequency, 0)
    _check_int("seed", seed, 0)

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=min_frequency,
        # In id order: the trainer gives special tokens the first ids, in the order listed.
        special_tokens=sorted(SPECIAL_TOKENS, key=SPECIAL_TOKENS.__getitem__),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    stream = _TextStream(texts)
    tokenizer.train_from_iterator(stream, trainer=trainer)
    if stream.documents == 0:
        raise ApertusError(
            f"no text to train the tokenizer on ({stream.empty} empty text(s) and nothing else)"
        )
    tokenizer.post_processor = _prompt_post_processor()

    vocab = tokenizer.get_vocab(with_added_tokens=True)
    wrong = {t: vocab.get(t) for t, i in SPECIAL_TOKENS.items() if vocab.get(t) != i}
    if wrong:  # would mean the trainer changed how it places special tokens
        raise ApertusError(f"trained tokenizer has special tokens at unexpected ids: {wrong}")
    tokenizer_json = tokenizer.to_str(pretty=True)
    merges = len(json.loads(tokenizer_json)["model"]["merges"])
    if len(vocab) < vocab_size:
        log.warning(
            "tokenizer vocabulary has %d tokens, fewer than the %d asked for: the corpus "
            "(%d characters) has too few pairs seen at least %d times",
            len(vocab),
            vocab_size,
            stream.characters,
            min_frequency,
        )

    def write(tmp: Path) -> None:
        (tmp / "tokenizer.json").write_text(tokenizer_json, encoding="utf-8")
        _write_json(tmp / "tokenizer_config.json", _tokenizer_config())
        _write_json(tmp / "special_tokens_map.json", _special_tokens_map())
        # Prove the directory is what later stages get: AutoTokenizer loads it, no custom code.
        loaded = load_tokenizer(str(tmp))
        check_special_tokens(loaded, SPECIAL_TOKENS)
        _check_same_encoding(loaded, tokenizer)

    files = _publish_directory(out_dir, write)
    return {
        "vocab_size": len(vocab),
        "vocab_size_requested": vocab_size,
        "merges": merges,
        "special_tokens": dict(SPECIAL_TOKENS),
        "bos_id": SPECIAL_TOKENS["<s>"],
        "eos_id": SPECIAL_TOKENS["</s>"],
        "pad_id": SPECIAL_TOKENS["<pad>"],
        "unk_id": SPECIAL_TOKENS["<unk>"],
        "documents": stream.documents,
        "empty_documents": stream.empty,
        "characters": stream.characters,
        "min_frequency": min_frequency,
        "seed": seed,
        "files": files,
    }


def _write_json(path: Path, obj: Any) -> None:
    path.write_text(json.dumps(obj, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def _check_same_encoding(loaded: PreTrainedTokenizerBase, reference: Tokenizer) -> None:
    for text in _PROBE_TEXTS:
        got = loaded(text)["input_ids"]
        want = reference.encode(text).ids
        if got != want:
            raise ApertusError(
                f"the saved tokenizer encodes {text!r} as {got}, the trained one as {want}"
            )


# Files a Hugging Face tokenizer directory may hold; a directory with anything else is not ours
# to replace, and an export copies only these.
TOKENIZER_FILES = frozenset(
    {
        "tokenizer.json",
        "tokenizer_config.json",
        "special_tokens_map.json",
        "chat_template.jinja",
        "chat_template.json",
        "additional_chat_templates",
        "added_tokens.json",
        "vocab.json",
        "merges.txt",
        "tokenizer.model",
    }
)


def _publish_directory(out_dir: Path, write) -> dict[str, str]:
    """Build `out_dir` with `write(tmp)` in a sibling directory, then swap it into place.

    Readers see the old directory or the whole new one; a failure leaves `out_dir` as it was.
    Returns {file name: sha256} of the files written.
    """
    if out_dir.exists():
        if not out_dir.is_dir():
            raise ApertusError(f"tokenizer output {out_dir} exists and is not a directory")
        # Dotfiles are tool bookkeeping (e.g. Snakemake's .snakemake_timestamp), not user data.
        foreign = sorted(
            p.name
            for p in out_dir.iterdir()
            if p.name not in TOKENIZER_FILES and not p.name.startswith(".")
        )
        if foreign:
            raise ApertusError(
                f"tokenizer output {out_dir} holds files that are not tokenizer files "
                f"({', '.join(foreign[:5])}); refusing to replace it"
            )
    with building_directory(out_dir) as tmp:
        write(tmp)
        files = {
            str(p.relative_to(tmp)): sha256_file(p) for p in sorted(tmp.rglob("*")) if p.is_file()
        }
    return files


# ---------------------------------------------------------------------------------------------
# Loading and checking


def load_tokenizer(
    name_or_path: str, *, cache_dir: str | None = None, revision: str | None = None
) -> PreTrainedTokenizerFast:
    """Load a tokenizer from a local directory or a Hugging Face Hub id, and check it.

    Uses ``AutoTokenizer.from_pretrained`` without custom code (``trust_remote_code=False``), so
    ``HF_HUB_OFFLINE=1`` is honoured: offline, a Hub id loads only from the cache (`cache_dir`,
    or the default Hugging Face cache). Real runs name e.g. ``"swiss-ai/Apertus-8B-2509"``.
    The tokenizer must be a fast (Rust `tokenizers`) one and pass :func:`check_special_tokens`
    with the default expectations; otherwise, or when it cannot be loaded, ApertusError.
    `revision`: a Hub id's branch, tag or commit (None: main); not for a directory.
    """
    if not isinstance(name_or_path, str | os.PathLike) or not str(name_or_path):
        raise ApertusError(f"tokenizer must be a directory or a Hub id, got {name_or_path!r}")
    name = str(name_or_path)
    if revision is not None and Path(name).is_dir():
        raise ApertusError(f"tokenizer revision {revision!r} is for a Hub id; {name} is a folder")
    try:
        tokenizer = AutoTokenizer.from_pretrained(
            name, cache_dir=cache_dir, trust_remote_code=False, revision=revision
        )
    except Exception as e:
        if Path(name).is_dir():
            where = f"the directory {name} is not a loadable Hugging Face tokenizer"
        elif hub_constants.is_offline_mode():
            where = (
                f"{name!r} is not a directory, and HF_HUB_OFFLINE is set, so as a Hub id it "
                f"must already be in the cache ({cache_dir or 'default Hugging Face cache'}); "
                "save it once with save_pretrained_from while online, then point to that copy"
            )
        else:
            where = f"{name!r} is neither a tokenizer directory nor a reachable Hub id"
        raise ApertusError(f"cannot load tokenizer: {where} ({type(e).__name__}: {e})") from e
    if not getattr(tokenizer, "is_fast", False):
        raise ApertusError(
            f"tokenizer {name} loaded as {type(tokenizer).__name__}, not a fast tokenizer; "
            "the pipeline needs a tokenizer.json (Rust `tokenizers`)"
        )
    check_special_tokens(tokenizer)
    return tokenizer


def check_special_tokens(
    tokenizer: PreTrainedTokenizerBase,
    expected: Mapping[str, int] = PRETRAINING_SPECIAL_IDS,
) -> dict[str, Any]:
    """Refuse a tokenizer whose special tokens are not where the pipeline expects them.

    Checks, and lists every failure in one ApertusError (token, expected id, actual id):

    * each token of `expected` is in the vocabulary at its expected id, and ``<s>``, ``</s>``,
      ``<pad>``, ``<unk>`` (those of them in `expected`) are the tokenizer's declared
      bos/eos/pad/unk tokens;
    * each chat token of :data:`CHAT_TOKENS` is in the vocabulary and encodes as one token;
    * encoding ``"hello"`` with the tokenizer's own special tokens adds at most ``<s>`` in front
      and ``</s>`` at the end and nothing else, and the text decodes back to ``"hello"``.

    Hub tokenizers for causal LMs often add only ``<s>``; that is not refused but reported
    (``adds_eos: False``), and :func:`encode_documents` appends ``</s>`` itself. Returns the
    facts the shard writer uses::

        {"bos_id": 1, "eos_id": 2, "pad_id": 3, "adds_bos": bool, "adds_eos": bool,
         "vocab_size": len(tokenizer)}   # vocab_size includes added tokens
    """
    name = getattr(tokenizer, "name_or_path", "") or type(tokenizer).__name__
    vocab = tokenizer.get_vocab()
    problems: list[str] = []
    for token, want in expected.items():
        got = vocab.get(token)
        if got != want:
            actual = "missing" if got is None else f"actual id {got}"
            problems.append(f"special token {token!r}: expected id {want}, {actual}")
        role = _ROLE_OF_TOKEN.get(token)
        if role is not None and getattr(tokenizer, role, None) != token:
            problems.append(
                f"{role} is {getattr(tokenizer, role, None)!r}, expected {token!r} (id {want})"
            )
    for token in CHAT_TOKENS:
        if token not in vocab:
            problems.append(f"chat token {token!r} is missing")
            continue
        ids = tokenizer(token, add_special_tokens=False)["input_ids"]
        if ids != [vocab[token]]:
            problems.append(f"chat token {token!r} encodes as {ids}, not as one token")
    if problems:
        raise ApertusError(f"tokenizer {name} is not usable: " + "; ".join(problems))

    bos_id, eos_id = tokenizer.bos_token_id, tokenizer.eos_token_id
    plain = tokenizer("hello", add_special_tokens=False)["input_ids"]
    full = tokenizer("hello")["input_ids"]
    adds_bos = bool(full) and full[0] == bos_id
    adds_eos = bool(full) and full[-1] == eos_id and len(full) > int(adds_bos)
    core = full[int(adds_bos) : len(full) - int(adds_eos)]
    if core != plain:
        raise ApertusError(
            f"tokenizer {name} adds tokens other than <s>/</s> around a document: 'hello' "
            f"encodes as {full} with special tokens and {plain} without"
        )
    decoded = tokenizer.decode(plain, skip_special_tokens=True)
    if decoded != "hello":
        raise ApertusError(f"tokenizer {name} decodes 'hello' ({plain}) as {decoded!r}")
    return {
        "bos_id": bos_id,
        "eos_id": eos_id,
        "pad_id": tokenizer.pad_token_id,
        "adds_bos": adds_bos,
        "adds_eos": adds_eos,
        "vocab_size": len(tokenizer),
    }


def encode_documents(tokenizer: PreTrainedTokenizerBase, texts: Sequence[str]) -> list[list[int]]:
    """Token ids of pretraining documents, each exactly ``<s> ... </s>`` (RECIPE.md §1).

    The text is encoded as plain text: strings that look like special tokens (a web page quoting
    ``</s>`` or ``<|user_start|>``) become ordinary byte-level tokens, so no document can end
    early or fake a chat turn, and decoding with ``skip_special_tokens=True`` gives the text back.
    ``<s>`` and ``</s>`` are added here, whatever the tokenizer's post-processor does. An empty
    text gives ``[bos, eos]``. Raises ApertusError for a text that is not a str or not valid
    Unicode (a lone surrogate), naming its index.
    """
    bos_id, eos_id = tokenizer.bos_token_id, tokenizer.eos_token_id
    if bos_id is None or eos_id is None:
        raise ApertusError("tokenizer has no bos/eos token; run check_special_tokens on it first")
    texts = list(texts)
    for index, text in enumerate(texts):
        if not isinstance(text, str):
            raise ApertusError(f"document {index} is a {type(text).__name__}, not a str")
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as e:
            raise ApertusError(
                f"document {index} is not valid Unicode ({e.reason} at character {e.start})"
            ) from None
    if not texts:
        return []
    encoded = tokenizer(
        texts,
        add_special_tokens=False,
        split_special_tokens=True,
        return_attention_mask=False,
        verbose=False,
    )["input_ids"]
    return [[bos_id, *ids, eos_id] for ids in encoded]


def document_framing(tokenizer: PreTrainedTokenizerBase) -> processors.TemplateProcessing:
    """The `tokenizers` post-processor that frames a document as ``<s> ... </s>`` with
    `tokenizer`'s BOS and EOS (strings and ids), whatever its own post-processor adds: set on
    the ``tokenizers.Tokenizer`` datatrove loads, its ids equal :func:`encode_documents`'.
    Raises ApertusError when the tokenizer defines no BOS or no EOS."""
    bos, eos = tokenizer.bos_token, tokenizer.eos_token
    bos_id, eos_id = tokenizer.bos_token_id, tokenizer.eos_token_id
    if None in (bos, eos, bos_id, eos_id):
        raise ApertusError(
            f"tokenizer {getattr(tokenizer, 'name_or_path', '')} defines no BOS or no EOS token"
        )
    bos, eos = str(bos), str(eos)
    if any(c.isspace() for c in bos + eos):  # the template is split at whitespace
        raise ApertusError(f"BOS {bos!r} / EOS {eos!r} contain whitespace; cannot frame documents")
    return processors.TemplateProcessing(
        single=f"{bos} $A {eos}",
        pair=f"{bos} $A {eos} {bos}:1 $B:1 {eos}:1",
        special_tokens=[(bos, int(bos_id)), (eos, int(eos_id))],
    )


def save_pretrained_from(name_or_path: str, out_dir: Path, *, revision: str | None = None) -> dict:
    """Copy a tokenizer (Hub id or directory) into `out_dir`, so later stages never touch the Hub.

    Loads and checks it (:func:`load_tokenizer`), saves it with ``save_pretrained`` into a
    directory beside `out_dir`, loads that copy back and requires the same facts, the same ids on
    multilingual probe texts and the same chat rendering, then moves it into place (replacing an
    `out_dir` that holds only tokenizer files). Returns the facts of :func:`check_special_tokens`
    plus ``source``, ``revision`` (a Hub id's; None: main), ``has_chat_template`` and
    ``files`` ({name: sha256}).
    """
    tokenizer = load_tokenizer(name_or_path, revision=revision)
    facts = check_special_tokens(tokenizer)
    has_template = bool(getattr(tokenizer, "chat_template", None))
    probe_chat = [{"role": "user", "content": _PROBE_TEXTS[1]}]

    def write(tmp: Path) -> None:
        tokenizer.save_pretrained(str(tmp))
        copy = load_tokenizer(str(tmp))
        copy_facts = check_special_tokens(copy)
        if copy_facts != facts:
            raise ApertusError(f"saved tokenizer differs: {copy_facts} != {facts}")
        for text in _PROBE_TEXTS:
            if copy(text)["input_ids"] != tokenizer(text)["input_ids"]:
                raise ApertusError(f"saved tokenizer encodes {text!r} differently")
        if has_template and copy.apply_chat_template(
            probe_chat, tokenize=False
        ) != tokenizer.apply_chat_template(probe_chat, tokenize=False):
            raise ApertusError("saved tokenizer renders the chat template differently")

    files = _publish_directory(Path(out_dir), write)
    return {
        "source": str(name_or_path),
        "revision": revision,
        **facts,
        "has_chat_template": has_template,
        "files": files,
    }
