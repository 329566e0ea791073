"""The xlmr backend's MLP heads trained by the pipeline (RECIPE.md §5): embedding with the tiny
local XLM-R stand-in, training, the files the filter step loads, the `data_classifiers` step and
the Hub-labels reader on a local stand-in in the Hub dataset's format."""

from __future__ import annotations

import hashlib
import itertools
import json
import random
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from apertus.core import ApertusError
from apertus.data import train_classifiers
from apertus.data.classifiers import (
    HEAD_TENSORS,
    XLMRClassifier,
    XLMREmbedder,
    train_xlmr_heads,
    trained_head,
)
from apertus.data.config import DataConfig, HubLabels
from apertus.data.pipeline import classifier_model
from tests.data.test_classifiers import (  # noqa: F401  (xlmr is a fixture)
    CLEAN,
    HIDDEN,
    INSULTS,
    MAX_TOKENS,
    SPAM,
    clean_sentences,
    labelled_set,
    xlmr,
)


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    # Module-wide, so the module's trained heads and the tests' use the same thread count (the
    # embeddings' last bits depend on it; the head training itself always runs on one thread).
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def toxicity_set(seed: int, n: int = 40) -> tuple[list[str], list[int], list[str]]:
    """Per language (en, de): `n` clean sentences (0) and `n` insults of that language (1), plus
    a few French examples, too few for a head of their own."""
    rng = random.Random(seed)
    insults = {"en": INSULTS[:2], "de": INSULTS[4:], "fr": INSULTS[2:4]}
    texts, labels, languages = [], [], []
    for lang, count in (("en", n), ("de", n), ("fr", 3)):
        clean = [" ".join(p) for p in _product(CLEAN[lang])]
        for _ in range(count):
            texts += [rng.choice(clean), f"{rng.choice(insults[lang])} {rng.choice(clean)}"]
            labels += [0, 1]
            languages += [lang, lang]
    return texts, labels, languages


def _product(parts):
    return itertools.product(*parts)


def digest(directory: Path) -> dict[str, str]:
    return {
        p.name: hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(directory.glob("*.safetensors"))
    }


@pytest.fixture(scope="module")
def quality_heads(xlmr, tmp_path_factory):  # noqa: F811
    texts, labels = labelled_set(SPAM, seed=0, n=60)
    out = tmp_path_factory.mktemp("quality_heads")
    metrics = train_xlmr_heads(
        texts,
        labels,
        out,
        encoder=xlmr["encoder"],
        task="quality",
        seed=3,
        epochs=30,
        max_tokens=MAX_TOKENS,
    )
    return out, metrics


@pytest.fixture(scope="module")
def toxicity_heads(xlmr, tmp_path_factory):  # noqa: F811
    texts, labels, languages = toxicity_set(seed=1)
    out = tmp_path_factory.mktemp("toxicity_heads")
    metrics = train_xlmr_heads(
        texts,
        labels,
        out,
        encoder=xlmr["encoder"],
        task="toxicity",
        seed=3,
        languages=languages,
        epochs=100,
        max_tokens=MAX_TOKENS,
    )
    return out, metrics


def test_quality_head_has_the_recipe_shape_and_the_loaders_names(quality_heads):
    out, metrics = quality_heads
    assert sorted(p.name for p in out.iterdir()) == ["config.json", "head.safetensors"]
    tensors = load_file(str(trained_head("quality", out)))
    assert {k: tuple(v.shape) for k, v in tensors.items()} == {
        "0.weight": (256, HIDDEN),
        "0.bias": (256,),
        "3.weight": (1, 256),
        "3.bias": (1,),
    }
    assert set(tensors) == set(HEAD_TENSORS)
    config = json.loads((out / "config.json").read_text())
    assert config["head"] == {
        "hidden": HIDDEN,
        "inner": 256,
        "outputs": 1,
        "activation": "relu",
        "dropout": 0.2,
        "tensors": list(HEAD_TENSORS),
    }
    assert config["chunks"] == "first" and config["max_tokens"] == MAX_TOKENS
    assert config["metrics"] == metrics
    head = metrics["heads"]["all"]
    assert head["val_documents"] == 24 and head["train_documents"] == 96
    assert head["train_chunks"] == 96  # quality: one (the first) chunk per document
    assert head["val_accuracy"] >= 0.9


def test_trained_quality_head_separates_held_out_texts(quality_heads, xlmr):  # noqa: F811
    out, _ = quality_heads
    model = XLMRClassifier(
        xlmr["encoder"], trained_head("quality", out), "quality", max_tokens=MAX_TOKENS
    )
    good = clean_sentences()[-6:]
    bad = [f"{SPAM[i]} {SPAM[-1 - i]}" for i in range(3)]
    scores = model.score(good + bad)
    assert min(scores[:6]) > max(scores[6:])


def test_toxicity_heads_per_language_and_too_few_examples_skipped(toxicity_heads, xlmr):  # noqa: F811
    out, metrics = toxicity_heads
    assert sorted(p.name for p in out.iterdir()) == [
        "config.json",
        "de.safetensors",
        "en.safetensors",
    ]
    for lang in ("de", "en"):
        tensors = load_file(str(out / f"{lang}.safetensors"))
        assert {k: tuple(v.shape) for k, v in tensors.items()} == {
            "0.weight": (HIDDEN, HIDDEN),
            "0.bias": (HIDDEN,),
            "3.weight": (2, HIDDEN),
            "3.bias": (2,),
        }
        assert metrics["heads"][lang]["val_accuracy"] >= 0.9
    assert list(metrics["skipped"]) == ["fr"]
    assert "3 examples of class 0" in metrics["skipped"]["fr"]

    model = XLMRClassifier(
        xlmr["encoder"], trained_head("toxicity", out), "toxicity", max_tokens=MAX_TOKENS
    )
    assert model.languages == ("de", "en") and not model.supports_language("fr")
    clean_en, clean_de = clean_sentences()[5], clean_sentences()[-2]
    texts = [clean_en, f"{INSULTS[1]} {clean_en}", clean_de, f"{INSULTS[5]} {clean_de}"]
    s = model.score(texts, ["en", "en", "de", "de"])
    assert s[1] > s[0] and s[3] > s[2]


def test_toxicity_embeds_every_chunk_with_the_document_label(xlmr):  # noqa: F811
    long = " ".join(clean_sentences()[:4])
    embedder = XLMREmbedder(xlmr["encoder"], "toxicity", max_tokens=MAX_TOKENS)
    embeddings, owners = embedder.embed_chunks([long, "short"])
    assert owners.count(0) > 1 and owners.count(1) == 1
    assert embeddings.shape == (len(owners), HIDDEN)


def test_training_is_deterministic_and_seed_dependent(quality_heads, xlmr, tmp_path):  # noqa: F811
    out, metrics = quality_heads
    texts, labels = labelled_set(SPAM, seed=0, n=60)
    common = dict(encoder=xlmr["encoder"], task="quality", epochs=30, max_tokens=MAX_TOKENS)
    again = train_xlmr_heads(texts, labels, tmp_path / "same", seed=3, **common)
    assert digest(tmp_path / "same") == digest(out) and again == metrics
    train_xlmr_heads(texts, labels, tmp_path / "other", seed=4, **common)
    assert digest(tmp_path / "other") != digest(out)


def test_training_refuses_bad_labels(xlmr, tmp_path):  # noqa: F811
    texts, labels, languages = toxicity_set(seed=1, n=3)
    with pytest.raises(ApertusError, match="no toxicity head trained"):
        train_xlmr_heads(
            texts, labels, tmp_path, encoder=xlmr["encoder"], task="toxicity", seed=0,
            languages=languages, max_tokens=MAX_TOKENS,
        )  # fmt: skip
    with pytest.raises(ApertusError, match="needs a `language`"):
        train_xlmr_heads(
            texts, labels, tmp_path, encoder=xlmr["encoder"], task="toxicity", seed=0,
            max_tokens=MAX_TOKENS,
        )  # fmt: skip
    with pytest.raises(ApertusError, match="both classes"):
        train_xlmr_heads(
            texts, [0] * len(texts), tmp_path, encoder=xlmr["encoder"], task="quality", seed=0
        )


def write_jsonl(path: Path, texts, labels, languages=None) -> Path:
    languages = languages or [None] * len(texts)
    with path.open("w", encoding="utf-8") as f:
        for text, label, lang in zip(texts, labels, languages, strict=True):
            record = {"text": text, "label": label}
            if lang:
                record["language"] = lang
            f.write(json.dumps(record) + "\n")
    return path


def test_step_trains_the_heads_the_filter_loads_and_records_accuracy(
    xlmr,  # noqa: F811
    tmp_path,
    monkeypatch,
):
    monkeypatch.setattr(train_classifiers, "XLMR_CHUNK_TOKENS", MAX_TOKENS)
    q_texts, q_labels = labelled_set(SPAM, seed=0, n=30)
    t_texts, t_labels, t_languages = toxicity_set(seed=2, n=15)
    config = {
        task: {
            "backend": "xlmr",
            "encoder": xlmr["encoder"],
            "labels": str(path),
            "epochs": 10,
            "seed": 5,
        }
        for task, path in (
            ("quality", write_jsonl(tmp_path / "q.jsonl", q_texts, q_labels)),
            ("toxicity", write_jsonl(tmp_path / "t.jsonl", t_texts, t_labels, t_languages)),
        )
    }
    manifest = tmp_path / "classifiers" / "manifest.json"
    train_classifiers.main(
        [
            "--config",
            json.dumps(config),
            "--manifest",
            str(manifest),
            "--output-dir",
            str(tmp_path / "classifiers"),
            "--datatrove-logs",
            str(tmp_path / "logs"),
        ]
    )
    summary = json.loads(manifest.read_text())["summary"]
    assert set(summary["quality"]["val_accuracy"]) == {"all"}
    assert set(summary["toxicity"]["val_accuracy"]) == {"de", "en"}
    assert summary["toxicity"]["skipped"].keys() == {"fr"}
    for task in ("quality", "toxicity"):
        written = json.loads((tmp_path / "classifiers" / task / "config.json").read_text())
        assert summary[task]["heads"] == written["metrics"]["heads"]
        assert all(0 <= a <= 1 for a in summary[task]["val_accuracy"].values())

    cfg = DataConfig.from_dict(config)
    model = classifier_model(cfg.toxicity, tmp_path / "classifiers" / "toxicity")
    assert model == {
        "encoder": xlmr["encoder"],
        "head": str(tmp_path / "classifiers" / "toxicity"),
    }
    assert classifier_model(cfg.quality, tmp_path / "classifiers" / "quality")["head"] == str(
        tmp_path / "classifiers" / "quality" / "head.safetensors"
    )
    XLMRClassifier(max_tokens=MAX_TOKENS, task="quality", **classifier_model(
        cfg.quality, tmp_path / "classifiers" / "quality"
    ))  # fmt: skip


def test_given_heads_are_used_and_not_trained(xlmr):  # noqa: F811
    cfg = DataConfig.from_dict({"toxicity": {"backend": "xlmr", "head": str(xlmr["toxicity_dir"])}})
    assert not cfg.toxicity.trained and cfg.quality.trained  # quality: the ngram default
    assert train_classifiers.trained_tasks(cfg) == [cfg.quality]
    assert classifier_model(cfg.toxicity, None)["head"] == str(xlmr["toxicity_dir"])
    untrained = DataConfig.from_dict({"quality": {"backend": "xlmr"}}).quality
    with pytest.raises(ApertusError, match="were not trained"):
        classifier_model(untrained, None)


def test_hub_labels_reader_on_a_local_stand_in(tmp_path):
    """A local directory of parquet files, as a Hub dataset stores them, with its own column
    names and a 0..3 toxicity score; read as `hub_labels` says, without the network."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    data = tmp_path / "ToxicStandIn" / "data"
    data.mkdir(parents=True)
    table = pa.table(
        {
            "original_text": ["nice", "rude", "gentil", "idiot", "nett", "doof", "fine", "bad"],
            "toxicity": [0.0, 3.0, 0.0, 2.0, 0.0, 3.0, 1.0, 2.5],
            "lang": ["en", "en", "fr", "fr", "de", "de", "en", "en"],
        }
    )
    pq.write_table(table, data / "train-00000-of-00001.parquet")
    columns = HubLabels(
        split="train",
        text_field="original_text",
        label_field="toxicity",
        language_field="lang",
        positive_above=1.5,
        limit=1,
    )
    dataset = str(tmp_path / "ToxicStandIn")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HF_DATASETS_OFFLINE", "1")
        mp.setenv("HF_HUB_OFFLINE", "1")
        texts, labels, languages = train_classifiers.read_hub_labels(dataset, columns)
        # limit 1 per (language, class): "fine" and "bad" are the second en 0 / en 1
        assert texts == ["nice", "rude", "gentil", "idiot", "nett", "doof"]
        assert labels == [0, 1, 0, 1, 0, 1]
        assert languages == ["en", "en", "fr", "fr", "de", "de"]
        everything = train_classifiers.read_hub_labels(
            dataset, HubLabels("train", "original_text", "toxicity", None, 1.5, -1)
        )
        assert everything[1] == [0, 1, 0, 1, 0, 1, 0, 1] and set(everything[2]) == {None}
        with pytest.raises(ApertusError, match="not 0/1"):
            train_classifiers.read_hub_labels(
                dataset, HubLabels("train", "original_text", "toxicity", None, None, -1)
            )
        with pytest.raises(ApertusError, match="no column"):
            train_classifiers.read_hub_labels(
                dataset, HubLabels("train", "text", "toxicity", None, 1.5, -1)
            )
    assert train_classifiers.hub_dataset("hf://datasets/PleIAs/ToxicCommons") == (
        "PleIAs/ToxicCommons"
    )
    assert train_classifiers.hub_dataset("labels.jsonl") is None


def test_hub_labels_from_several_score_columns(tmp_path):
    """ToxicCommons-style: five axes scored 0..3; label 1 when any axis is above the bound."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    axes = ["race_origin", "gender_sex", "religion", "ability", "violence"]
    scores = [[0, 0, 0, 0, 0], [0, 3, 0, 0, 0], [1, 1, 1, 1, 1], [0, 0, 0, 0, 2]]
    data = tmp_path / "Axes" / "data"
    data.mkdir(parents=True)
    table = {"text": ["a", "b", "c", "d"], "language": ["en"] * 4}
    table |= {axis: [row[i] for row in scores] for i, axis in enumerate(axes)}
    pq.write_table(pa.table(table), data / "train-00000-of-00001.parquet")
    columns = HubLabels("train", "text", tuple(axes), "language", 1.0, -1)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HF_DATASETS_OFFLINE", "1")
        mp.setenv("HF_HUB_OFFLINE", "1")
        _, labels, _ = train_classifiers.read_hub_labels(str(tmp_path / "Axes"), columns)
        assert labels == [0, 1, 0, 1]
        missing = HubLabels("train", "text", (*axes, "sexual"), "language", 1.0, -1)
        with pytest.raises(ApertusError, match=r"no column\(s\) \['sexual'\]"):
            train_classifiers.read_hub_labels(str(tmp_path / "Axes"), missing)


def test_hub_labels_for_the_ngram_backend_are_refused_before_any_job():
    from apertus.core.config import load_config
    from apertus.plan_check import plan_problems

    hub = "data.toxicity.labels=hf://datasets/PleIAs/ToxicCommons"
    found = plan_problems(load_config((), [hub]))
    assert [p for p in found if "ngram" in p] == [p for p in found if "data.toxicity.labels" in p]
    assert len([p for p in found if "ngram" in p]) == 1
    # The xlmr backend trains on Hub labels (here offline, so its inputs are refused as such).
    with_xlmr = plan_problems(load_config((), [hub, "data.toxicity.backend=xlmr"]))
    assert not [p for p in with_xlmr if "ngram" in p]
