"""Quality / toxicity classifiers (RECIPE.md §5): offline n-gram backend, XLM-R backend on a tiny
local stand-in, the scorer step, per-language thresholds and the threshold filter."""

from __future__ import annotations

import hashlib
import itertools
import math
import os
import pickle
import random
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch
from datatrove.data import Document
from safetensors.torch import load_file, save_file

from apertus.core import ApertusError
from apertus.data.classifiers import (
    ClassifierScorer,
    NgramClassifier,
    ThresholdFilter,
    XLMRClassifier,
    compute_thresholds,
    featurize,
    load_classifier,
    train_ngram_classifier,
)
from apertus.rehearsal.models import XLMR_HIDDEN, build_xlmr


@pytest.fixture(autouse=True)
def _one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


# --------------------------------------------------------------------------------------------------
# Crafted multilingual sample data
# --------------------------------------------------------------------------------------------------

CLEAN = {
    "en": (
        ["The city council", "A team of researchers", "The local library", "Our school"],
        ["published a detailed report on", "organised a public discussion about", "studied"],
        ["regional water quality.", "the history of the old harbour.", "energy use in winter."],
    ),
    "fr": (
        ["Le conseil municipal", "Une équipe de chercheurs", "La bibliothèque du quartier"],
        ["a publié un rapport détaillé sur", "a organisé un débat public sur", "a étudié"],
        ["la qualité de l'eau dans la région.", "l'histoire du vieux port.", "les forêts."],
    ),
    "de": (
        ["Der Stadtrat", "Ein Team von Forschern", "Die Stadtbibliothek", "Unsere Schule"],
        ["veröffentlichte einen ausführlichen Bericht über", "diskutierte öffentlich über"],
        ["die Wasserqualität in der Region.", "die Geschichte des alten Hafens.", "den Wald."],
    ),
}
SPAM = [
    "CLICK HERE!!! cheap pills, buy now, best price, free shipping!!!",
    "Cookies akzeptieren | Impressum | Datenschutz | Login | Warenkorb (0)",
    "casino bonus $$$ win win win >>> click >>> jackpot >>> free spins",
    "Tous droits réservés © 2024 | Mentions légales | Plan du site | Contact",
    "Home | About | Contact | Login | Register | Cart | FAQ | Sitemap",
    "GRATIS!!! Jetzt kaufen!!! Nur heute -90% !!! Klick hier !!!",
]
INSULTS = [
    "you are a stupid idiot and a worthless moron",
    "shut up you pathetic loser, nobody wants you here",
    "tu es un crétin, un imbécile et un abruti",
    "ferme ta gueule espèce de connard",
    "du bist ein dummer Idiot und ein Vollpfosten",
    "halt die Klappe du erbärmlicher Trottel",
]


def clean_sentences() -> list[str]:
    return [" ".join(p) for parts in CLEAN.values() for p in itertools.product(*parts)]


def labelled_set(
    others: list[str], seed: int, n: int = 80, *, clean_label: int = 1
) -> tuple[list[str], list[int]]:
    """`n` clean sentences (label `clean_label`) and `n` variations of `others`, shuffled.

    Quality: clean = 1 (high quality). Toxicity: clean = 0, the insults are 1 ("toxic")."""
    rng = random.Random(seed)
    clean = clean_sentences()
    texts = [rng.choice(clean) for _ in range(n)] + [
        f"{rng.choice(others)} {rng.choice(others[::-1])}" for _ in range(n)
    ]
    labels = [clean_label] * n + [1 - clean_label] * n
    pairs = list(zip(texts, labels, strict=True))
    rng.shuffle(pairs)
    return [t for t, _ in pairs], [label for _, label in pairs]


@pytest.fixture(scope="module")
def quality_model(tmp_path_factory) -> tuple[Path, dict]:
    texts, labels = labelled_set(SPAM, seed=0)
    out = tmp_path_factory.mktemp("quality_ngram")
    return out, train_ngram_classifier(texts, labels, out, seed=7, task="quality")


# --------------------------------------------------------------------------------------------------
# featurize
# --------------------------------------------------------------------------------------------------


def _hand_hash(feature: str, *, word: bool) -> int:
    """splitmix64(sum(code point * 1000003**j) mod 2**64), xor-ed with the word tag for words."""
    mask = 2**64 - 1
    x = sum(ord(ch) * pow(1_000_003, j, 2**64) for j, ch in enumerate(feature)) & mask
    if word:
        x ^= 0x5851F42D4C957F2D
    x ^= x >> 30
    x = (x * 0xBF58476D1CE4E5B9) & mask
    x ^= x >> 27
    x = (x * 0x94D049BB133111EB) & mask
    return x ^ (x >> 31)


def hand_features(text: str, dim: int) -> dict[int, float]:
    """The documented feature recipe, written out again without the module's helpers."""
    padded = " " + " ".join(text.lower().split()) + " "
    counts: Counter[int] = Counter()
    for n in (1, 2, 3, 4):
        for i in range(len(padded) - n + 1):
            counts[_hand_hash(padded[i : i + n], word=False) % dim] += 1
    for word in re.findall(r"\w+", text.lower()):
        counts[_hand_hash(word, word=True) % dim] += 1
    norm = math.sqrt(sum(v * v for v in counts.values()))
    return {k: v / norm for k, v in counts.items()}


def as_dict(row: torch.Tensor) -> dict[int, float]:
    row = row.coalesce()
    return dict(zip(row.indices()[0].tolist(), row.values().tolist(), strict=True))


def test_featurize_matches_the_documented_hashing_recipe():
    texts = ["Ab  c\nÉté", "", "the the THE", "\U0001d518nicode 文字 a_b"]
    x = featurize(texts, dim=1009)
    assert x.shape == (4, 1009) and x.is_sparse
    for i, text in enumerate(texts):
        got, expected = as_dict(x[i]), hand_features(text, 1009)
        assert got.keys() == expected.keys()
        for k in expected:
            assert got[k] == pytest.approx(expected[k], rel=1e-6)
    # Layout and case do not change the features.
    assert torch.equal(
        featurize(["Hello   World"]).to_dense(), featurize(["hello world"]).to_dense()
    )


def test_featurize_collisions_add_up_and_rows_are_unit_length():
    x = featurize(["aaaa", "some words here"], dim=1)
    assert x.to_dense().tolist() == [[1.0], [1.0]]
    norms = torch.linalg.vector_norm(featurize(["x y z", "Ünïcödé 文字"]).to_dense(), dim=1)
    assert torch.allclose(norms, torch.ones(2))


def test_featurize_is_the_same_in_another_process():
    texts = ["Hash me the same everywhere.", "Überall gleich", "同じ"]
    code = (
        "from apertus.data.classifiers import featurize\n"
        f"x = featurize({texts!r}, dim=4096)\n"
        "print(x.indices().tolist()); print(x.values().tolist())\n"
    )
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True
    ).stdout.splitlines()
    here = featurize(texts, dim=4096)
    assert out[0] == str(here.indices().tolist())
    assert out[1] == str(here.values().tolist())


def test_featurize_rejects_non_text():
    with pytest.raises(ApertusError, match="expected str"):
        featurize(["fine", None])  # type: ignore[list-item]


# --------------------------------------------------------------------------------------------------
# train_ngram_classifier / NgramClassifier
# --------------------------------------------------------------------------------------------------


def test_quality_classifier_separates_clean_text_from_boilerplate(quality_model):
    out, metrics = quality_model
    assert metrics["examples"] == 160
    assert metrics["train_examples"] + metrics["val_examples"] == 160
    assert metrics["val_examples"] == 32  # 20% of each class
    assert metrics["val_accuracy"] > 0.9
    assert metrics["train_accuracy"] > 0.9
    config = (out / "config.json").read_text()
    assert '"backend": "ngram"' in config and '"1": "high quality"' in config
    model = NgramClassifier.load(out)
    # Unseen texts in the same styles.
    scores = model.score(
        [
            "The research team published a report on the old harbour.",
            "Die Forscher veröffentlichten einen Bericht über den Hafen.",
            "Login | Register | Cart | Contact | Impressum",
            "FREE!!! click here now!!! casino jackpot!!!",
        ]
    )
    assert min(scores[:2]) > 0.5 > max(scores[2:])


def test_toxicity_classifier_separates_clean_text_from_insults(tmp_path):
    texts, labels = labelled_set(INSULTS, seed=3, clean_label=0)
    metrics = train_ngram_classifier(texts, labels, tmp_path, seed=1, task="toxicity")
    assert metrics["val_accuracy"] > 0.9
    model = NgramClassifier.load(tmp_path, task="toxicity")
    calm, rude = model.score(["Le conseil a publié un rapport.", "du bist ein dummer Trottel"])
    assert rude > 0.5 > calm


def test_training_is_deterministic_and_seed_dependent(tmp_path):
    texts, labels = labelled_set(SPAM, seed=1, n=30)
    digests = []
    for name, seed in (("a", 5), ("b", 5), ("c", 6)):
        train_ngram_classifier(texts, labels, tmp_path / name, seed=seed, epochs=5)
        digests.append(
            hashlib.sha256((tmp_path / name / "model.safetensors").read_bytes()).digest()
        )
    assert digests[0] == digests[1]
    assert digests[0] != digests[2]


def test_saved_model_reproduces_metrics_and_by_hand_scores(quality_model):
    out, metrics = quality_model
    texts, labels = labelled_set(SPAM, seed=0)
    first, second = NgramClassifier.load(out), NgramClassifier.load(out)
    scores = first.score(texts)
    assert scores == second.score(texts)
    # By hand from the saved tensors: sigmoid(x . w + b).
    tensors = load_file(out / "model.safetensors")
    logits = featurize(texts).to_dense() @ tensors["weight"] + tensors["bias"]
    assert np.allclose(scores, torch.sigmoid(logits).numpy(), atol=1e-6)
    # Accuracy over all examples is the weighted mean of the reported train/val accuracies.
    correct = sum((s > 0.5) == (y == 1) for s, y in zip(scores, labels, strict=True))
    reported = metrics["train_accuracy"] * metrics["train_examples"]
    reported += metrics["val_accuracy"] * metrics["val_examples"]
    assert correct == round(reported)


def test_chunk_rules_of_the_ngram_backend(tmp_path):
    texts, labels = labelled_set(INSULTS, seed=4, clean_label=0)
    train_ngram_classifier(texts, labels, tmp_path / "tox", seed=0, task="toxicity", chunk_chars=60)
    train_ngram_classifier(texts, labels, tmp_path / "q", seed=0, task="quality", chunk_chars=60)
    tox, first = NgramClassifier.load(tmp_path / "tox"), NgramClassifier.load(tmp_path / "q")
    doc = " ".join(clean_sentences()[:4]) + " you are a stupid idiot and a worthless moron"
    windows = [doc[i : i + 60] for i in range(0, len(doc), 60)]
    assert len(windows) >= 4
    w = load_file(tmp_path / "tox" / "model.safetensors")
    window_scores = torch.sigmoid(featurize(windows).to_dense() @ w["weight"] + w["bias"])
    (score,) = tox.score([doc])
    assert score == pytest.approx(float(window_scores.max()), abs=1e-6)
    assert score > 0.5 > float(window_scores[0])  # the insult is in the last window only
    # Quality ("first" rule) looks at the first window only.
    assert first.score([doc]) == first.score([doc[:60]])


@pytest.mark.parametrize(
    ("texts", "labels", "message"),
    [
        ([], [], "no examples"),
        (["a", "b"], [1, 1], "both classes"),
        (["a", "b"], [0, 0], "both classes"),
        (["a", "b"], [0], "2 texts but 1 labels"),
        (["a", "b"], [0, 2], "0 or 1"),
    ],
)
def test_training_rejects_bad_data(tmp_path, texts, labels, message):
    with pytest.raises(ApertusError, match=message):
        train_ngram_classifier(texts, labels, tmp_path, seed=0)
    assert not (tmp_path / "model.safetensors").exists()


def test_loading_checks_files_and_task(quality_model, tmp_path):
    out, _ = quality_model
    with pytest.raises(ApertusError, match="'quality' classifier, asked to score 'toxicity'"):
        NgramClassifier.load(out, task="toxicity")
    with pytest.raises(ApertusError, match="missing"):
        NgramClassifier.load(tmp_path)
    with pytest.raises(ValueError, match="allowed: ngram, xlmr"):
        load_classifier("fasttext", model_dir=out)
    assert isinstance(load_classifier("ngram", model_dir=out), NgramClassifier)


# --------------------------------------------------------------------------------------------------
# XLM-R backend on a tiny local stand-in
# --------------------------------------------------------------------------------------------------

MAX_TOKENS = 16
HIDDEN = XLMR_HIDDEN  # the stand-in encoder's width


def head_state(inner: int, outputs: int, seed: int) -> dict[str, torch.Tensor]:
    """Random weights of Sequential(Linear(HIDDEN, inner), ReLU, Dropout, Linear(inner, out))."""
    g = torch.Generator().manual_seed(seed)
    # Scaled like torch's default init, so the probabilities do not saturate at 0 or 1.
    return {
        "0.weight": torch.randn(inner, HIDDEN, generator=g) / math.sqrt(HIDDEN),
        "0.bias": torch.randn(inner, generator=g) * 0.1,
        "3.weight": torch.randn(outputs, inner, generator=g) * 4 / math.sqrt(inner),
        "3.bias": torch.randn(outputs, generator=g) * 0.1,
    }


@pytest.fixture(scope="module")
def xlmr(tmp_path_factory):
    """A random 2-layer XLM-R with a tiny Unigram tokenizer (saved like a hub checkpoint, as
    the rehearsal's stand-in: apertus.rehearsal.models.build_xlmr) and heads."""
    root = tmp_path_factory.mktemp("xlmr")
    encoder_dir = root / "encoder"
    build_xlmr(encoder_dir, root / "quality.safetensors", clean_sentences() + SPAM + INSULTS)
    quality = {
        name.removeprefix("classifier."): weight
        for name, weight in load_file(root / "quality.safetensors").items()
    }
    toxicity_dir = root / "toxicity"
    toxicity_dir.mkdir()
    toxicity = {"en": head_state(HIDDEN, 2, seed=2), "de": head_state(HIDDEN, 2, seed=3)}
    for lang, state in toxicity.items():
        save_file(state, toxicity_dir / f"{lang}.safetensors")
    return {
        "encoder": str(encoder_dir),
        "quality_head": root / "quality.safetensors",
        "toxicity_dir": toxicity_dir,
        "quality": quality,
        "toxicity": toxicity,
        "root": root,
    }


def reference_chunk_embeddings(encoder_dir: str, text: str) -> list[torch.Tensor]:
    """Chunks of <= MAX_TOKENS tokens with <s> ... </s> each, each run alone (no padding) and
    averaged over its tokens."""
    from transformers import AutoModel, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(encoder_dir)
    model = AutoModel.from_pretrained(encoder_dir).eval()
    body = tokenizer(text, add_special_tokens=False)["input_ids"]
    step = MAX_TOKENS - 2
    pieces = [body[i : i + step] for i in range(0, len(body), step)] or [[]]
    embeddings = []
    with torch.no_grad():
        for piece in pieces:
            ids = torch.tensor([[tokenizer.cls_token_id, *piece, tokenizer.sep_token_id]])
            embeddings.append(model(input_ids=ids).last_hidden_state[0].mean(dim=0))
    return embeddings


def by_hand_logits(state: dict[str, torch.Tensor], e: torch.Tensor) -> torch.Tensor:
    hidden = torch.clamp(state["0.weight"] @ e + state["0.bias"], min=0)
    return state["3.weight"] @ hidden + state["3.bias"]


LONG_DOC = " ".join(clean_sentences()[:3] + INSULTS[:2] + clean_sentences()[5:7])
DOCS = [LONG_DOC, "Our school studied energy use in winter.", "", "du bist ein dummer Idiot"]


def test_xlmr_quality_scores_the_first_chunk(xlmr):
    model = XLMRClassifier(
        xlmr["encoder"], xlmr["quality_head"], "quality", max_tokens=MAX_TOKENS, batch_size=2
    )
    assert model.languages is None and model.supports_language("xx")
    scores = model.score(DOCS)
    for doc, score in zip(DOCS, scores, strict=True):
        chunks = reference_chunk_embeddings(xlmr["encoder"], doc)
        z = by_hand_logits(xlmr["quality"], chunks[0])[0]
        assert score == pytest.approx(1 / (1 + math.exp(-float(z))), abs=1e-5)
    # The long document spans several chunks and only the first counts.
    chunks = reference_chunk_embeddings(xlmr["encoder"], LONG_DOC)
    assert len(chunks) >= 3
    later = [torch.sigmoid(by_hand_logits(xlmr["quality"], c)[0]).item() for c in chunks[1:]]
    assert all(abs(scores[0] - s) > 1e-4 for s in later)


def test_xlmr_toxicity_takes_the_max_over_chunks_with_the_language_head(xlmr):
    model = XLMRClassifier(
        xlmr["encoder"], xlmr["toxicity_dir"], "toxicity", max_tokens=MAX_TOKENS, batch_size=3
    )
    assert sorted(model.languages) == ["de", "en"]
    languages = ["en", "de", "en", "de"]
    scores = model.score(DOCS, languages)
    for doc, lang, score in zip(DOCS, languages, scores, strict=True):
        chunk_scores = [
            torch.softmax(by_hand_logits(xlmr["toxicity"][lang], e), dim=0)[1].item()
            for e in reference_chunk_embeddings(xlmr["encoder"], doc)
        ]
        assert score == pytest.approx(max(chunk_scores), abs=1e-5)
    # The long document's worst chunk is not its first: the max rule is really exercised.
    long_chunks = [
        torch.softmax(by_hand_logits(xlmr["toxicity"]["en"], e), dim=0)[1].item()
        for e in reference_chunk_embeddings(xlmr["encoder"], LONG_DOC)
    ]
    assert max(long_chunks) > long_chunks[0] + 1e-4
    # Same text, other language: the other head.
    en, de = model.score([DOCS[1], DOCS[1]], ["en", "de"])
    assert abs(en - de) > 1e-4
    assert (en, de) == tuple(model.score([DOCS[1], DOCS[1]], ["en", "de"]))
    assert not model.supports_language("fr")
    with pytest.raises(ApertusError, match=r"no toxicity head for language\(s\) \['fr'\]"):
        model.score(["bonjour"], ["fr"])
    with pytest.raises(ApertusError, match="one language per text"):
        model.score(["hello"])


def test_xlmr_rejects_mismatched_or_missing_heads(xlmr, tmp_path):
    # A quality head where a toxicity head (2 outputs) is expected.
    with pytest.raises(ApertusError, match=r"3.weight has shape \(1, 256\), expected \(2, 256\)"):
        XLMRClassifier(xlmr["encoder"], xlmr["quality_head"], "toxicity")
    save_file({"fc1.weight": torch.zeros(2, HIDDEN)}, tmp_path / "bad.safetensors")
    with pytest.raises(ApertusError, match="lacks tensors"):
        XLMRClassifier(xlmr["encoder"], tmp_path / "bad.safetensors", "quality")
    with pytest.raises(ApertusError, match="not found"):
        XLMRClassifier(xlmr["encoder"], tmp_path / "nothing.safetensors", "quality")
    with pytest.raises(ApertusError, match="cannot load encoder"):
        XLMRClassifier(str(tmp_path / "no-encoder"), xlmr["quality_head"], "quality")


# --------------------------------------------------------------------------------------------------
# ClassifierScorer
# --------------------------------------------------------------------------------------------------


def make_docs() -> list[Document]:
    texts = [*clean_sentences()[:4], *SPAM[:3], "def f(x):\n    return x + 1"]
    kinds = ["web", "web", "code", "web", "web", "code", "web", "code"]
    return [
        Document(text=t, id=str(i), metadata={"kind": k, "language": "en"})
        for i, (t, k) in enumerate(zip(texts, kinds, strict=True))
    ]


def test_scorer_scores_web_and_exempts_code_across_batches(quality_model):
    out, _ = quality_model
    scorer = ClassifierScorer(
        "quality", "ngram", {"model_dir": str(out)}, ["web", "edu"], batch_size=3
    )
    assert scorer.name == "🧮 quality scorer"
    docs = make_docs()
    result = list(scorer.run(iter(docs)))
    assert [d.id for d in result] == [str(i) for i in range(8)]
    web = [d for d in result if d.metadata["kind"] == "web"]
    expected = NgramClassifier.load(out).score([d.text for d in web])
    assert [d.metadata["quality_score"] for d in web] == expected
    assert all("quality_score" not in d.metadata for d in result if d.metadata["kind"] == "code")
    stats = scorer.stats.stats
    assert stats["scored"].total == 5 and stats["exempt"].total == 3
    assert stats["total"].total == 8


def test_scorer_is_picklable_and_loads_its_model_in_the_worker(quality_model):
    out, _ = quality_model
    scorer = ClassifierScorer("quality", "ngram", {"model_dir": str(out)}, None, batch_size=64)
    first = [d.metadata["quality_score"] for d in scorer.run(iter(make_docs()))]
    assert scorer._classifier is not None
    clone = pickle.loads(pickle.dumps(scorer))
    assert clone._classifier is None  # the model itself is not shipped
    assert [d.metadata["quality_score"] for d in clone.run(iter(make_docs()))] == first
    assert len(first) == 8  # apply_to_kinds=None scores every kind


def test_scorer_with_per_language_heads_skips_languages_without_a_head(xlmr):
    model = {
        "encoder": xlmr["encoder"],
        "head": str(xlmr["toxicity_dir"]),
        "max_tokens": MAX_TOKENS,
    }
    scorer = ClassifierScorer("toxicity", "xlmr", model, ["web"], batch_size=2)
    langs = ["en", "fr", "de", "en", None]
    docs = [
        Document(text=t, id=str(i), metadata={"kind": "web", "language": lang})
        for i, (t, lang) in enumerate(zip([*DOCS, "x"], langs, strict=True))
    ]
    result = list(pickle.loads(pickle.dumps(scorer)).run(iter(docs)))
    direct = XLMRClassifier(
        xlmr["encoder"], xlmr["toxicity_dir"], "toxicity", max_tokens=MAX_TOKENS
    )
    for doc in result:
        if doc.metadata["language"] in ("en", "de"):
            (want,) = direct.score([doc.text], [doc.metadata["language"]])
            assert doc.metadata["toxicity_score"] == pytest.approx(want, abs=1e-6)
        else:
            assert "toxicity_score" not in doc.metadata


def test_scorer_rejects_bad_options(quality_model):
    out, _ = quality_model
    with pytest.raises(ValueError, match="allowed: quality, toxicity"):
        ClassifierScorer("spam", "ngram", {"model_dir": str(out)}, None)
    with pytest.raises(ValueError, match="allowed: ngram, xlmr"):
        ClassifierScorer("quality", "bert", {}, None)
    with pytest.raises(ValueError, match="list of kinds"):
        ClassifierScorer("quality", "ngram", {"model_dir": str(out)}, "web")


# --------------------------------------------------------------------------------------------------
# compute_thresholds / ThresholdFilter
# --------------------------------------------------------------------------------------------------


def linear_quantile(values, q: float) -> float:
    """numpy's default ('linear') quantile written out: interpolate at position q * (n - 1)."""
    s = sorted(values)
    h = q * (len(s) - 1)
    lo = math.floor(h)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (h - lo) * (s[hi] - s[lo])


def test_thresholds_are_per_language_linear_quantiles():
    rng = np.random.default_rng(0)
    scores = {"en": rng.random(101).tolist(), "de": rng.beta(2, 5, 37).tolist(), "rm": [0.5, 0.7]}
    top = compute_thresholds(scores, 0.33, keep="top", min_documents=5)
    bottom = compute_thresholds(scores, 0.05, keep="bottom", min_documents=5)
    assert set(top) == set(bottom) == {"en", "de"}  # rm has too few scores
    for lang in ("en", "de"):
        assert top[lang] == pytest.approx(linear_quantile(scores[lang], 0.67), abs=1e-12)
        assert bottom[lang] == pytest.approx(linear_quantile(scores[lang], 0.95), abs=1e-12)
    assert compute_thresholds(scores, 0.33, keep="top")["rm"] == pytest.approx(0.5 + 0.67 * 0.2)
    assert compute_thresholds({"en": []}, 0.5, keep="top", min_documents=0) == {}


def test_threshold_options_are_checked():
    with pytest.raises(ValueError, match="keep"):
        compute_thresholds({"en": [0.1]}, 0.1, keep="middle")
    with pytest.raises(ValueError, match="fraction"):
        compute_thresholds({"en": [0.1]}, 1.5, keep="top")
    with pytest.raises(ApertusError, match="non-finite"):
        compute_thresholds({"en": [0.1, float("nan")]}, 0.1, keep="top")
    with pytest.raises(ValueError, match="keep"):
        ThresholdFilter("quality_score", {}, keep="up", reason="low_quality")


def score_docs(scores, language="en", key="quality_score") -> list[Document]:
    return [
        Document(text=f"doc {i}", id=f"{language}-{i}", metadata={"language": language, key: s})
        for i, s in enumerate(scores)
    ]


def test_keep_top_third_of_a_hundred_scores():
    scores = [i / 100 for i in range(100)]
    thresholds = compute_thresholds({"en": scores}, 0.33, keep="top")
    assert thresholds["en"] == pytest.approx(0.6633)  # position 0.67 * 99 = 66.33
    step = ThresholdFilter("quality_score", thresholds, keep="top", reason="low_quality")
    kept = list(step.run(iter(score_docs(scores))))
    assert [d.metadata["quality_score"] for d in kept] == scores[67:]  # 0.67 .. 0.99: 33 docs
    assert step.stats.stats["dropped_low_quality"].total == 67


def test_drop_most_toxic_five_percent():
    scores = [i / 100 for i in range(100)]
    thresholds = compute_thresholds({"de": scores}, 0.05, keep="bottom")
    assert thresholds["de"] == pytest.approx(0.9405)
    step = ThresholdFilter("toxicity_score", thresholds, keep="bottom", reason="toxic")
    kept = list(step.run(iter(score_docs(scores, "de", "toxicity_score"))))
    assert len(kept) == 95 and max(d.metadata["toxicity_score"] for d in kept) == 0.94
    assert step.stats.stats["dropped_toxic"].total == 5


def test_ties_at_the_threshold_are_kept():
    thresholds = compute_thresholds({"en": [0.5] * 10}, 0.1, keep="top")
    step = ThresholdFilter("quality_score", thresholds, keep="top", reason="low_quality")
    assert len(list(step.run(iter(score_docs([0.5] * 10))))) == 10


def test_filter_passes_unscored_and_unthresholded_docs_and_counts_them():
    thresholds = {"en": 0.5}
    docs = [
        *score_docs([0.2, 0.8]),
        *score_docs([0.1], language="sw"),  # no threshold for Swahili: passes
        Document(text="code", id="code", metadata={"language": "en", "kind": "code"}),  # exempt
        *score_docs([float("nan")]),
    ]
    step = ThresholdFilter("quality_score", thresholds, keep="top", reason="low_quality")
    kept = [d.id for d in step.run(iter(docs))]
    assert kept == ["en-1", "sw-0", "code"]
    stats = step.stats.stats
    assert stats["no_score"].total == 1
    assert stats["no_threshold_sw"].total == 1
    assert stats["dropped_low_quality"].total == 1
    assert stats["dropped_invalid_score"].total == 1


# --------------------------------------------------------------------------------------------------
# RECIPE §5: the classifier judges its languages, the others are sampled at random
# --------------------------------------------------------------------------------------------------


def test_scorer_marks_other_languages_for_sampling_instead_of_scoring(quality_model):
    out, _ = quality_model
    docs = make_docs()
    for doc in docs[4:]:
        doc.metadata["language"] = "fr"
    model = {"model_dir": str(out)}
    scorer = ClassifierScorer("quality", "ngram", model, ["web"], languages=["en"])
    result = list(scorer.run(iter(docs)))
    judged = [d for d in result if d.metadata["language"] == "en" and d.metadata["kind"] == "web"]
    sampled = [d for d in result if d.metadata["language"] == "fr" and d.metadata["kind"] == "web"]
    assert judged and all("quality_score" in d.metadata for d in judged)
    assert sampled and all(d.metadata.get("quality_sampled") is True for d in sampled)
    assert all("quality_score" not in d.metadata for d in sampled)
    code = [d for d in result if d.metadata["kind"] == "code"]
    assert all("quality_sampled" not in d.metadata for d in code)  # exempt kinds stay exempt
    assert scorer.stats.stats["sampled"].total == len(sampled)


def test_sampled_documents_are_kept_by_a_seeded_draw_at_the_fraction():
    from apertus.data.classifiers import sample_draw

    # The draw, computed independently: blake2b-64 of "seed\0id" over 2**64.
    digest = hashlib.blake2b(b"7\x00doc-1", digest_size=8).digest()
    assert sample_draw(7, "doc-1") == int.from_bytes(digest, "big") / 2**64

    step = ThresholdFilter(
        "quality_score", {"fr": 0.5}, keep="top", reason="low_quality", sample_fraction=0.3, seed=7
    )
    docs = [
        Document(text="x", id=f"doc-{i}", metadata={"language": "de", "quality_sampled": True})
        for i in range(4000)
    ]
    verdicts = [step.filter(d) for d in docs]
    kept = [d.id for d, v in zip(docs, verdicts, strict=True) if v is True]
    assert abs(len(kept) / len(docs) - 0.3) < 0.03
    assert kept == [d.id for d in docs if sample_draw(7, d.id) < 0.3]  # the same in every run
    assert {v for v in verdicts if v is not True} == {(False, "sampled_out")}
    # Scored documents are still cut at their language's threshold.
    scored = Document(text="x", id="s", metadata={"language": "fr", "quality_score": 0.2})
    assert step.filter(scored) == (False, "low_quality")
    # Without a fraction, a marked document passes as before (no score).
    plain = ThresholdFilter("quality_score", {}, keep="top", reason="low_quality")
    assert plain.filter(docs[0]) is True


def test_a_source_exempt_from_quality_is_neither_scored_nor_cut(quality_model, tmp_path):
    """`quality_filter: false` (FineWeb2-HQ's top 10%, already a quality selection): the
    source's filter job gets no quality scorer, so data_select's threshold keeps all of its
    documents (none sampled either), while another web source's are scored and cut; the
    toxicity scorer stays in both."""
    from apertus.core.config import load_config
    from apertus.data.config import DataConfig
    from apertus.data.pipeline import filter_steps

    out, _ = quality_model
    raw = load_config()["data"]
    raw["robots"]["enabled"] = False
    raw["quality"].update(backend="ngram", apply_to_kinds=["web"], keep_fraction=0.5)
    raw["quality"]["languages"] = ["en"]
    raw["toxicity"].update(backend="ngram", apply_to_kinds=["web"])
    web = {"reader": "jsonl", "path": str(tmp_path), "kind": "web"}
    raw["sources"] = [
        {"name": "fineweb2", **web},
        {"name": "fineweb2-hq-top10", **web, "quality_filter": False},
    ]
    cfg = DataConfig.from_dict(raw)

    def scorers(name: str) -> dict[str, ClassifierScorer]:
        steps = filter_steps(
            cfg,
            cfg.source(name),
            snapshot=None,
            classifiers={"quality": out, "toxicity": out},
            output_dir=tmp_path / "out",
            funnel_dir=tmp_path / "funnel",
            job=f"{name}-0",
        )
        return {step.task: step for step in steps if isinstance(step, ClassifierScorer)}

    normal, exempt = scorers("fineweb2"), scorers("fineweb2-hq-top10")
    assert set(normal) == {"quality", "toxicity"}
    assert set(exempt) == {"toxicity"}

    texts = [*clean_sentences()[:4], *SPAM[:4]]

    def documents(source: str, language: str = "en") -> list[Document]:
        return [
            Document(
                text=t,
                id=f"{source}/{i}",
                metadata={"source": source, "kind": "web", "language": language},
            )
            for i, t in enumerate(texts)
        ]

    scored = list(normal["quality"].run(iter(documents("fineweb2"))))
    assert all("quality_score" in d.metadata for d in scored)
    # The exempt source's documents meet no quality scorer: no score, no sampling mark.
    passed = documents("fineweb2-hq-top10") + documents("fineweb2-hq-top10", "fr")
    scores = {"en": [d.metadata["quality_score"] for d in scored]}
    threshold = ThresholdFilter(
        "quality_score",
        compute_thresholds(scores, 0.5, keep="top"),
        keep="top",
        reason="low_quality",
        sample_fraction=0.5,
        seed=1,
    )
    kept = list(threshold.run(iter([*scored, *passed])))
    assert [d.text for d in kept if d.metadata["source"] == "fineweb2"] == texts[:4]
    assert [d.id for d in kept if d.metadata["source"] != "fineweb2"] == [d.id for d in passed]
