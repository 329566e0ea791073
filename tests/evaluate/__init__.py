"""Builders shared by the evaluation tests: held-out files in several languages, and a tiny
random Hugging Face model folder with a tokenizer trained by our own tokenizer code."""

from __future__ import annotations

import json
import random
from pathlib import Path

# A few words per language: enough for texts that look different per language and share no
# spans across documents by accident.
WORDS = {
    "de": "der die das und nicht sehr schnell Haus Berg Wasser Stadt Winter fahren gehen "
    "kleine große heute morgen immer wieder",
    "en": "the and not very quickly house mountain water city winter travel walk small large "
    "today tomorrow always again river bread",
    "fr": "le la les et pas très vite maison montagne eau ville hiver voyager marcher petit "
    "grand aujourd'hui demain toujours encore",
    "it": "il la gli e non molto presto casa montagna acqua città inverno viaggiare camminare "
    "piccolo grande oggi domani sempre ancora",
    "rm": "il la ils e betg fitg svelt chasa muntogna aua citad enviern viagiar ir pitschen "
    "grond oz damaun adina puspè",
    "sv": "och inte mycket snabbt hus berg vatten stad vinter resa gå liten stor idag imorgon "
    "alltid igen flod bröd",
}


def make_text(language: str, rng: random.Random, chars: int) -> str:
    """Sentences of random words of `language`, about `chars` long, no edge whitespace."""
    words = WORDS[language].split()
    sentences = []
    length = 0
    while length < chars:
        sentence = " ".join(rng.choice(words) for _ in range(rng.randint(5, 11)))
        sentence = sentence[0].upper() + sentence[1:] + rng.choice([".", ".", "!", "?"])
        sentences.append(sentence)
        length += len(sentence) + 1
    paragraphs, k = [], 0
    while k < len(sentences):  # a newline now and then, as in web text
        n = rng.randint(2, 4)
        paragraphs.append(" ".join(sentences[k : k + n]))
        k += n
    return "\n".join(paragraphs)


def heldout_documents(
    languages=("de", "en", "fr", "it", "rm"),
    documents: int = 6,
    few: dict[str, int] | None = None,
    seed: int = 0,
    chars: tuple[int, int] = (350, 700),
) -> dict[str, list[dict]]:
    """{language: [{"id", "text", "source"}]}: `documents` per language, `few` overrides."""
    rng = random.Random(seed)
    counts = {language: documents for language in languages} | (few or {})
    return {
        language: [
            {
                "id": f"{language}-doc-{i:03d}",
                "text": make_text(language, rng, rng.randint(*chars)),
                "source": "web" if i % 2 else "edu",
            }
            for i in range(n)
        ]
        for language, n in counts.items()
    }


def write_heldout(directory: Path, documents: dict[str, list[dict]]) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    for language, rows in documents.items():
        (directory / f"{language}.jsonl").write_text(
            "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8"
        )
    return directory


def tiny_model_folder(
    directory: Path, texts: list[str], *, max_positions: int = 64, seed: int = 0
) -> Path:
    """A random ApertusForCausalLM (the shape of tests/model/test_model.py's debug flavour,
    smaller) saved with `save_pretrained`, beside a byte-level BPE trained on `texts` by
    apertus.tokenize.tokenizer (so its post-processor frames texts as <s> ... </s>).

    Weights are redrawn at a scale where next-token distributions are peaked: choices and
    documents then get clearly different log-likelihoods, so a wrongly scored token shows.
    `max_positions` is the model's max length, which lm-eval uses as its rolling window.
    """
    import torch
    from transformers import ApertusConfig, ApertusForCausalLM

    from apertus.tokenize.tokenizer import load_tokenizer, train_tokenizer

    train_tokenizer(texts, directory, vocab_size=400, min_frequency=2)
    vocab = len(load_tokenizer(str(directory)))
    config = ApertusConfig(
        vocab_size=vocab,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=8,
        max_position_embeddings=max_positions,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        tie_word_embeddings=False,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=3,
    )
    torch.manual_seed(seed)
    model = ApertusForCausalLM(config)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() >= 2:
                p.copy_(0.15 * torch.randn(p.shape, generator=gen))
    model.save_pretrained(directory)
    return directory
