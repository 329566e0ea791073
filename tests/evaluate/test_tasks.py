"""The task builder: cloze items and perplexity documents from held-out files, and the lm-eval
task directory they are written to."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
import yaml

from apertus.core import ApertusError
from apertus.evaluate.stage import EvaluateConfig
from apertus.evaluate.tasks import (
    ClozeOptions,
    PerplexityOptions,
    build_task_directory,
    context_before,
    read_heldout,
    span_after,
    word_cuts,
)
from tests.evaluate import heldout_documents, write_heldout

LANGUAGES = ("de", "en", "fr", "it", "rm")


@pytest.fixture(scope="module")
def documents():
    # Five languages with six documents, Swedish with only three (fewer than 4 choices need).
    return heldout_documents(LANGUAGES, documents=6, few={"sv": 3})


@pytest.fixture(scope="module")
def heldout(tmp_path_factory, documents):
    return write_heldout(tmp_path_factory.mktemp("heldout"), documents)


@pytest.fixture(scope="module")
def built(tmp_path_factory, heldout):
    out = tmp_path_factory.mktemp("build") / "tasks"
    summary = build_task_directory(
        heldout, out, mc=ClozeOptions.from_dict({"items_per_language": 10}), seed=7
    )
    return out, summary


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def task_data(out: Path, task: str) -> list[dict]:
    config = yaml.safe_load((out / f"{task}.yaml").read_text())
    return read_jsonl(Path(config["dataset_kwargs"]["data_files"]["test"]))


# --------------------------------------------------------------------------------------------
# Text cuts


def test_word_cuts_are_single_spaces_between_words():
    text = "ab cd  ef\ngh i"
    assert word_cuts(text) == [2, 12]  # not the double space, not the newline


def test_span_after_extends_to_the_next_whitespace_and_needs_enough_text():
    text = "one two three four"
    assert span_after(text, 3, 5) == "two three"  # 5 chars reach "two t", then to the word end
    assert span_after(text, 3, 3) == "two"
    assert span_after(text, 13, 4) == "four"  # up to the end of the text
    assert span_after(text, 13, 5) is None


def test_context_before_starts_at_a_word():
    text = "alpha beta gamma delta"
    assert context_before(text, 16, 8) == "gamma"  # 8 chars back lands inside "beta"
    assert context_before(text, 16, 100) == "alpha beta gamma"
    assert context_before(text, 16, 11) == "beta gamma"  # lands exactly at a word start


# --------------------------------------------------------------------------------------------
# Cloze items


def test_every_item_holds_its_true_continuation_exactly_once(built, documents):
    out, _ = built
    texts = {d["id"]: d["text"] for rows in documents.values() for d in rows}
    for language in LANGUAGES:
        items = task_data(out, f"apertus_mc_{language}")
        assert len(items) == 10
        for item in items:
            text = texts[item["document_id"]]
            cut, truth = item["cut"], item["choices"][item["gold"]]
            assert text[cut] == " "
            assert text[cut - len(item["context"]) : cut] == item["context"]
            assert text[cut + 1 :].startswith(truth)
            assert len(truth) >= 60 and len(item["context"]) >= 100
            assert item["choices"].count(truth) == 1
            assert len(set(item["choices"])) == 4


def test_distractors_come_from_other_documents_of_the_same_language(built, documents):
    out, _ = built
    by_id = {d["id"]: (language, d["text"]) for language, rows in documents.items() for d in rows}
    for language in LANGUAGES:
        for item in task_data(out, f"apertus_mc_{language}"):
            sources = item["choice_documents"]
            assert sources[item["gold"]] == item["document_id"]
            others = [s for k, s in enumerate(sources) if k != item["gold"]]
            assert item["document_id"] not in others
            assert len(set(others)) == 3  # three different documents
            for k, source in enumerate(sources):
                source_language, text = by_id[source]
                assert source_language == language
                assert " " + item["choices"][k] in text


def test_items_spread_over_the_documents_and_gold_positions(built):
    out, _ = built
    for language in LANGUAGES:
        items = task_data(out, f"apertus_mc_{language}")
        assert len({i["document_id"] for i in items}) == 6  # 10 items round-robin over 6 docs
    golds = [i["gold"] for lang in LANGUAGES for i in task_data(out, f"apertus_mc_{lang}")]
    assert set(golds) == {0, 1, 2, 3}


def test_languages_with_too_few_documents_are_skipped_and_counted(built):
    out, summary = built
    assert "sv" in summary["mc"]["skipped_languages"]
    assert "3 document(s)" in summary["mc"]["skipped_languages"]["sv"]
    assert summary["mc"]["tasks"] == [f"apertus_mc_{lang}" for lang in LANGUAGES]
    assert not (out / "apertus_mc_sv.yaml").exists()
    # Perplexity needs no distractors: Swedish is there.
    assert "apertus_ppl_sv" in summary["ppl"]["tasks"]
    assert json.loads((out / "tasks.json").read_text())["mc"]["skipped_languages"] == {
        "sv": summary["mc"]["skipped_languages"]["sv"]
    }


def test_items_are_deterministic_and_independent_of_line_order(tmp_path, documents, built):
    out, _ = built
    shuffled = {lang: random.Random(1).sample(rows, len(rows)) for lang, rows in documents.items()}
    again = tmp_path / "again"
    build_task_directory(
        write_heldout(tmp_path / "heldout", shuffled),
        again,
        mc=ClozeOptions.from_dict({"items_per_language": 10}),
        seed=7,
    )
    for language in LANGUAGES:
        task = f"apertus_mc_{language}"
        assert task_data(again, task) == task_data(out, task)


def test_another_seed_gives_other_items(tmp_path, heldout, built):
    out, _ = built
    other = tmp_path / "other"
    build_task_directory(
        heldout, other, mc=ClozeOptions.from_dict({"items_per_language": 10}), seed=8
    )
    for language in LANGUAGES:
        a = task_data(out, f"apertus_mc_{language}")
        b = task_data(other, f"apertus_mc_{language}")
        assert [(i["document_id"], i["cut"], i["choices"]) for i in a] != [
            (i["document_id"], i["cut"], i["choices"]) for i in b
        ]


def test_item_count_is_capped_by_the_available_cuts(tmp_path):
    docs = heldout_documents(("de",), documents=4, chars=(270, 300))
    out = tmp_path / "tasks"
    summary = build_task_directory(
        write_heldout(tmp_path / "heldout", docs),
        out,
        mc=ClozeOptions.from_dict(
            {"items_per_language": 1000, "context_chars": 200, "continuation_chars": 60}
        ),
    )
    items = task_data(out, "apertus_mc_de")
    cuts = {
        (d["id"], i)
        for d in docs["de"]
        for i in word_cuts(d["text"])
        if i >= 200 and span_after(d["text"], i, 60)
    }
    assert 0 < len(items) <= len(cuts)
    assert {(i["document_id"], i["cut"]) for i in items} <= cuts
    assert len({(i["document_id"], i["cut"]) for i in items}) == len(items)  # no cut twice
    assert summary["mc"]["languages"]["de"]["items"] == len(items)


def test_documents_too_short_for_any_item_skip_the_language(tmp_path):
    docs = heldout_documents(("de",), documents=5, chars=(100, 150))
    summary = build_task_directory(
        write_heldout(tmp_path / "heldout", docs), tmp_path / "tasks", mc=ClozeOptions.from_dict({})
    )
    assert "de" in summary["mc"]["skipped_languages"]
    assert summary["groups"] == ["apertus_ppl"]


# --------------------------------------------------------------------------------------------
# Perplexity documents


def test_perplexity_tasks_hold_every_document_verbatim(built, documents):
    out, summary = built
    for language, rows in documents.items():
        data = task_data(out, f"apertus_ppl_{language}")
        assert sorted(d["text"] for d in data) == sorted(r["text"] for r in rows)
        assert summary["ppl"]["languages"][language]["documents"] == len(rows)


def test_max_documents_takes_a_seeded_sample(tmp_path, heldout, documents):
    picks = []
    for seed in (1, 1, 2):
        out = tmp_path / f"tasks-{len(picks)}"
        build_task_directory(
            heldout, out, ppl=PerplexityOptions.from_dict({"max_documents": 3}), seed=seed
        )
        picks.append([d["id"] for d in task_data(out, "apertus_ppl_de")])
    assert picks[0] == picks[1] != picks[2]
    assert all(len(p) == 3 and p == sorted(p) for p in picks)
    assert set(picks[0]) <= {d["id"] for d in documents["de"]}


# --------------------------------------------------------------------------------------------
# The task directory for lm-eval


def test_yamls_name_their_data_by_absolute_path_and_lm_eval_loads_them(built, monkeypatch):
    out, summary = built
    monkeypatch.chdir(out.parent.parent)  # anywhere but the task directory
    from lm_eval.tasks import TaskManager

    manager = TaskManager(include_path=str(out), include_defaults=False)
    for name in ("apertus_mc", "apertus_ppl", "apertus_mc_de", "apertus_ppl_sv"):
        assert name in manager.all_tasks
    loaded = manager.load(["apertus_mc", "apertus_ppl"])
    assert set(loaded["tasks"]) == set(summary["mc"]["tasks"]) | set(summary["ppl"]["tasks"])
    de = loaded["tasks"]["apertus_mc_de"]
    docs = list(de.test_docs())
    assert len(docs) == 10
    assert de.doc_to_text(docs[0]) == docs[0]["context"]
    assert de.doc_to_choice(docs[0]) == docs[0]["choices"]
    assert de.doc_to_target(docs[0]) == docs[0]["gold"]
    assert loaded["tasks"]["apertus_ppl_sv"].get_config("output_type") == "loglikelihood_rolling"
    for task in summary["mc"]["tasks"] + summary["ppl"]["tasks"]:
        config = yaml.safe_load((out / f"{task}.yaml").read_text())
        path = Path(config["dataset_kwargs"]["data_files"]["test"])
        assert path.is_absolute() and path.is_file() and path.parent == out / "data"


def test_rebuild_replaces_a_task_directory_but_not_a_foreign_one(tmp_path, heldout):
    out = tmp_path / "tasks"
    build_task_directory(heldout, out, mc=ClozeOptions.from_dict({"items_per_language": 2}))
    (out / "data" / "stale.jsonl").write_text("{}\n")
    build_task_directory(heldout, out, mc=ClozeOptions.from_dict({"items_per_language": 3}))
    assert not (out / "data" / "stale.jsonl").exists()
    assert len(task_data(out, "apertus_mc_de")) == 3
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("mine")
    with pytest.raises(ApertusError, match="not a task directory"):
        build_task_directory(heldout, foreign)
    assert (foreign / "notes.txt").read_text() == "mine"


# --------------------------------------------------------------------------------------------
# Bad input


@pytest.mark.parametrize(
    "line, message",
    [
        ("{not json", "not valid JSON"),
        ('["a", "list"]', "expected a JSON object"),
        ('{"id": 5, "text": "x"}', "'id' must be a string"),
        ('{"id": "x-1"}', "'text' must be a string"),
        ('{"id": "de-doc-000", "text": "same id again"}', "already at .*, line 1"),
        ('{"id": "x-2", "text": "lone \\ud800 surrogate"}', "not valid Unicode"),
    ],
)
def test_a_bad_line_is_an_error_naming_file_and_line(tmp_path, documents, line, message):
    heldout = write_heldout(tmp_path / "heldout", documents)
    path = heldout / "de.jsonl"
    lines = path.read_text().splitlines()
    lines.insert(2, line)
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(ApertusError, match=message) as error:
        build_task_directory(heldout, tmp_path / "tasks")
    assert f"{path}, line 3" in str(error.value)
    assert not (tmp_path / "tasks").exists()


def test_blank_lines_are_ignored_and_empty_texts_counted(tmp_path, documents):
    heldout = write_heldout(tmp_path / "heldout", documents)
    path = heldout / "de.jsonl"
    path.write_text(path.read_text() + "\n" + json.dumps({"id": "e", "text": " \n "}) + "\n")
    result = read_heldout(heldout)
    assert result.empty_documents == {"de": 1}
    assert len(result.documents["de"]) == 6


def test_a_configured_language_without_heldout_documents_is_an_error(tmp_path, heldout):
    with pytest.raises(ApertusError, match=r"mc\.languages names xx"):
        build_task_directory(
            heldout, tmp_path / "t", mc=ClozeOptions.from_dict({"languages": ["de", "xx"]})
        )


def test_only_the_configured_languages_are_built(tmp_path, heldout):
    summary = build_task_directory(
        heldout,
        tmp_path / "t",
        mc=ClozeOptions.from_dict({"languages": ["fr", "de"]}),
        ppl=PerplexityOptions.from_dict({"languages": []}),
    )
    assert summary["mc"]["tasks"] == ["apertus_mc_fr", "apertus_mc_de"]
    assert summary["groups"] == ["apertus_mc"]


def test_missing_heldout_directory_is_an_error(tmp_path):
    with pytest.raises(ApertusError, match="does not exist"):
        build_task_directory(tmp_path / "nowhere", tmp_path / "t")


@pytest.mark.parametrize(
    "config, message",
    [
        ({"tasks": {"mc": {"choices": 1}}}, r"tasks\.mc\.choices must be an integer >= 2"),
        ({"tasks": {"mc": {"items": 3}}}, r"evaluate\.tasks\.mc: unknown key"),
        ({"tasks": {"mc": {"languages": "de"}}}, r"tasks\.mc\.languages must be a list"),
        ({"tasks": {"ppl": {"max_documents": 0}}}, r"tasks\.ppl\.max_documents"),
        ({"tasks": {"seed": -1}}, r"tasks\.seed"),
        ({"tasks": {"mc": {}, "choices": 4}}, r"evaluate\.tasks: unknown key"),
        ({"seed": 1}, "evaluate: unknown key"),
    ],
)
def test_bad_builder_options_are_refused(config, message):
    with pytest.raises(ApertusError, match=message):
        EvaluateConfig.from_dict(config)


def test_default_config_and_key_reference():
    cfg = EvaluateConfig.from_dict({})
    assert cfg.tasks.mc == ClozeOptions.from_dict({})
    assert cfg.tasks.ppl == PerplexityOptions.from_dict({})
    assert (cfg.tasks.mc.items_per_language, cfg.tasks.mc.choices, cfg.tasks.seed) == (8, 4, 1234)
    # A step gets only its own part (the rules pass {"tasks": ...}); the memorization part
    # belongs to apertus.evaluate.memorization and is let through.
    cfg = EvaluateConfig.from_dict({"tasks": {"mc": {"languages": ["de"]}}, "memorization": {}})
    assert cfg.tasks.mc.languages == ("de",)
