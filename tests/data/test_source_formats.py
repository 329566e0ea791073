"""The RECIPE §5 sources whose records hold the text in other fields than `text`: local stand-ins
in each Hub dataset's own record format (its columns, its file format and folder layout), read
with `text_field` or a `text_template`; records without a field the template names are skipped
and counted, and a template that cannot work is refused at config time, naming its key."""

import gzip
import json
import pickle

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from apertus.core import ApertusError
from apertus.core.config import ConfigError, load_config
from apertus.data.config import DataConfig, Source
from apertus.data.readers import make_reader
from apertus.plan_check import plan_problems
from tests.data.test_readers import read

FLAN = "{inputs}\n\n{targets}"
WIKIPEDIA = "{title}\n\n{text}"
EUROPARL = "{translation[en]}\n\n{translation[de]}"


def source(path, reader="parquet", **kw) -> Source:
    return Source.from_dict(
        {"name": "src", "reader": reader, "path": str(path), "kind": "web", **kw}
    )


def skips(stats) -> dict:
    return {k: v for k, v in stats.items() if k.startswith("skipped_")}


# Open-Orca/FLAN: `<submix>_data/part.<n>.parquet`, the seqio-rendered prompt and answer.
FLAN_ROWS = [
    {
        "inputs": "Translate to German:\n\nThe weather is nice today.",
        "targets": "Das Wetter ist heute schön.",
        "_template_idx": 3,
        "_task_source": "Flan2021",
        "_task_name": "wmt16_translate/de-en:1.0.0",
        "_template_type": "zs_opt",
    },
    {
        "inputs": "Is the following review positive or negative?\nGreat little café.",
        "targets": "positive",
        "_template_idx": 1,
        "_task_source": "Flan2021",
        "_task_name": "yelp_polarity_reviews:0.2.0",
        "_template_type": "zs_noopt",
    },
]


def write_flan(root, reader: str, rows=FLAN_ROWS):
    folder = root / "flan_zsopt_data"
    folder.mkdir(parents=True)
    if reader == "parquet":
        pq.write_table(pa.Table.from_pylist(rows), folder / "part.0.parquet")
    else:
        (folder / "part.0.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return folder


@pytest.mark.parametrize("reader", ["parquet", "jsonl"])
def test_flan_inputs_and_targets_make_one_document(tmp_path, reader):
    folder = write_flan(tmp_path, reader)
    docs, stats = read(source(tmp_path, reader, glob=f"*/*.{reader}", text_template=FLAN))
    assert [d.text for d in docs] == [
        "Translate to German:\n\nThe weather is nice today.\n\nDas Wetter ist heute schön.",
        "Is the following review positive or negative?\nGreat little café.\n\npositive",
    ]
    # No id column: ids from file and row (Parquet, from 0) or line (JSONL, from 1).
    first = 0 if reader == "parquet" else 1
    name = next(folder.iterdir()).name
    assert [d.id for d in docs] == [f"src/{name}/{first}", f"src/{name}/{first + 1}"]
    assert not skips(stats)


@pytest.mark.parametrize("reader", ["parquet", "jsonl"])
def test_a_record_without_a_templated_field_is_skipped_and_counted(tmp_path, reader, caplog):
    rows = [
        FLAN_ROWS[0],
        {**FLAN_ROWS[1], "targets": None},  # null (Parquet) or null (JSON)
        {k: v for k, v in FLAN_ROWS[1].items() if k != "inputs"},  # no such key (JSONL)
        {**FLAN_ROWS[1], "targets": ""},  # empty but present: the document is the prompt
        {**FLAN_ROWS[0], "inputs": " ", "targets": "\n"},  # nothing but the template's text
    ]
    if reader == "parquet":
        rows[2] = {**FLAN_ROWS[1], "inputs": None}  # a column is in every row: null instead
    folder = write_flan(tmp_path, reader, rows)
    with caplog.at_level("WARNING", logger="apertus.data.readers"):
        docs, stats = read(source(tmp_path, reader, glob=f"*/*.{reader}", text_template=FLAN))
    assert [d.text for d in docs] == [
        "Translate to German:\n\nThe weather is nice today.\n\nDas Wetter ist heute schön.",
        "Is the following review positive or negative?\nGreat little café.\n\n",
    ]
    assert skips(stats) == {"skipped_missing_field": 2, "skipped_blank_text": 1}
    name = next(folder.iterdir()).name
    where = f"{name}:row 1" if reader == "parquet" else f"{name}:2"
    assert where in caplog.text and "(missing_field)" in caplog.text
    assert "field {targets} of text_template" in caplog.text
    assert "field {inputs} of text_template" in caplog.text


def write_europarl(root, rows):
    """Helsinki-NLP/europarl: `<pair>/train-*.parquet`, one `translation` struct per row."""
    folder = root / "de-en"
    folder.mkdir(parents=True)
    pq.write_table(
        pa.table(
            {"translation": pa.array(rows, pa.struct([("de", pa.string()), ("en", pa.string())]))}
        ),
        folder / "train-00000-of-00001.parquet",
    )


def test_europarl_translation_pairs_become_one_document_each(tmp_path, caplog):
    write_europarl(
        tmp_path,
        [
            {
                "de": "Ich erkläre die Sitzungsperiode für eröffnet.",
                "en": "I declare the session open.",
            },
            {"de": "Vielen Dank.", "en": None},  # one side missing: no pair, no document
            {"de": "Die Aussprache ist geschlossen.", "en": "The debate is closed."},
        ],
    )
    src = source(
        tmp_path, glob="de-en/*.parquet", text_template=EUROPARL, language="deu_Latn", kind="edu"
    )
    with caplog.at_level("WARNING", logger="apertus.data.readers"):
        docs, stats = read(src)
    assert [d.text for d in docs] == [
        "I declare the session open.\n\nIch erkläre die Sitzungsperiode für eröffnet.",
        "The debate is closed.\n\nDie Aussprache ist geschlossen.",
    ]
    # The hint is the non-English side (the source's `language`), the same for every pair.
    assert {d.metadata["language_hint"] for d in docs} == {"deu_Latn"}
    assert skips(stats) == {"skipped_missing_field": 1}
    assert "train-00000-of-00001.parquet:row 1" in caplog.text
    assert "field {translation[en]}" in caplog.text


def test_translation_dicts_in_jsonl_and_list_items_by_index(tmp_path):
    """The same keys in JSON objects; a numeric key reads a list's item (chat-like records)."""
    path = tmp_path / "pairs.jsonl"
    path.write_text(
        json.dumps({"translation": {"de": "Guten Tag.", "en": "Good day."}})
        + "\n"
        + json.dumps({"translation": {"de": {"text": "not a string"}, "en": "x"}})
        + "\n"
        + json.dumps({"conversations": [{"from": "human", "value": "Hallo"}]})
        + "\n"
    )
    docs, stats = read(source(path, "jsonl", text_template="{translation[de]} = {translation[en]}"))
    assert [d.text for d in docs] == ["Guten Tag. = Good day."]
    assert skips(stats) == {"skipped_field_not_string": 1, "skipped_missing_field": 1}
    chat = source(path, "jsonl", text_template="{conversations[0][value]}{{!}}")
    docs, stats = read(chat)
    assert [d.text for d in docs] == ["Hallo{!}"]  # literal braces doubled, as in str.format
    assert skips(stats) == {"skipped_missing_field": 2}


def test_infimm_webmath_interleaved_text_list_joins_its_text(tmp_path):
    """Infi-MM/InfiMM-WebMath-40B: Parquet with `URL`, `text_list` (None where an image was),
    `image_list` (None where text was) and `metadata` (a JSON string)."""
    pq.write_table(
        pa.table(
            {
                "URL": ["https://math.example/pythagoras", "https://math.example/figure"],
                "text_list": [
                    ["Pythagoras", None, "In a right triangle, a^2 + b^2 = c^2."],
                    [None],  # a page of images only: no text
                ],
                "image_list": [
                    [None, "https://math.example/triangle.png", None],
                    ["https://math.example/figure.png"],
                ],
                "metadata": [
                    '{"ft_lang_label": "__label__en"}',
                    '{"ft_lang_label": "__label__en"}',
                ],
            }
        ),
        tmp_path / "part-00000.parquet",
    )
    src = source(tmp_path, text_template="{text_list}", url_field="URL", kind="math")
    docs, stats = read(src)
    assert [d.text for d in docs] == ["Pythagoras\n\nIn a right triangle, a^2 + b^2 = c^2."]
    assert docs[0].metadata["url"] == "https://math.example/pythagoras"
    assert skips(stats) == {"skipped_missing_field": 1}


def test_starcoder_content_column_with_text_field(tmp_path):
    """bigcode/starcoderdata: `<language>/train-*.parquet` with the file in `content`."""
    folder = tmp_path / "python"
    folder.mkdir()
    pq.write_table(
        pa.table(
            {
                "max_stars_repo_path": ["src/app.py", "empty.py"],
                "max_stars_repo_name": ["octo/app", "octo/empty"],
                "max_stars_count": [12, 0],
                "id": ["1001", "1002"],
                "content": ["def main():\n    return 0\n", ""],
            }
        ),
        folder / "train-00000-of-00059.parquet",
    )
    src = source(tmp_path, glob="python/*.parquet", text_field="content", kind="code")
    docs, stats = read(src)
    assert [(d.id, d.text) for d in docs] == [("1001", "def main():\n    return 0\n")]
    assert docs[0].metadata["kind"] == "code" and "url" not in docs[0].metadata  # none there
    assert skips(stats) == {"skipped_missing_text": 1}


def test_wikipedia_title_and_text_via_a_template(tmp_path):
    """wikimedia/wikipedia: `<date>.<lang>/train-*.parquet` with id, url, title, text."""
    folder = tmp_path / "20231101.de"
    folder.mkdir()
    pq.write_table(
        pa.table(
            {
                "id": ["1", "3"],
                "url": [
                    "https://de.wikipedia.org/wiki/Alan_Smithee",
                    "https://de.wikipedia.org/wiki/Actinium",
                ],
                "title": ["Alan Smithee", "Actinium"],
                "text": [
                    "Alan Smithee steht als Pseudonym für einen fiktiven Regisseur.",
                    "Actinium ist ein chemisches Element.",
                ],
            }
        ),
        folder / "train-00000-of-00020.parquet",
    )
    src = source(
        tmp_path,
        glob="*/train-*.parquet",
        text_template=WIKIPEDIA,
        language_from_path=r"^\d+\.([a-z]+)/",
        kind="edu",
    )
    docs, stats = read(src)
    assert [d.text for d in docs] == [
        "Alan Smithee\n\nAlan Smithee steht als Pseudonym für einen fiktiven Regisseur.",
        "Actinium\n\nActinium ist ein chemisches Element.",
    ]
    assert docs[1].id == "3"
    assert {
        "source": "src",
        "kind": "edu",
        "url": "https://de.wikipedia.org/wiki/Actinium",
        "language_hint": "de",
    }.items() <= docs[1].metadata.items()
    assert not skips(stats)
    # Without the template the same files read as before: the `text` column alone.
    plain = Source.from_dict({**src.__dict__, "text_template": None})
    assert read(plain)[0][1].text == "Actinium ist ein chemisches Element."


def test_the_huggingface_reader_applies_the_template_and_counts_skips(tmp_path):
    folder = tmp_path / "flan-standin" / "data"
    folder.mkdir(parents=True)
    rows = [FLAN_ROWS[0], {**FLAN_ROWS[1], "targets": None}]
    pq.write_table(pa.Table.from_pylist(rows), folder / "train-00000-of-00001.parquet")
    src = source(tmp_path / "flan-standin", "huggingface", text_template=FLAN)
    docs, stats = read(src)
    assert [d.text for d in docs] == [
        "Translate to German:\n\nThe weather is nice today.\n\nDas Wetter ist heute schön."
    ]
    assert stats["skipped_missing_field"] == 1


@pytest.mark.parametrize("reader", ["jsonl", "parquet"])
def test_a_templated_reader_is_picklable(tmp_path, reader):
    write_flan(tmp_path, reader)
    step = make_reader(source(tmp_path, reader, glob=f"*/*.{reader}", text_template=FLAN))
    list(step.run())  # the parsed template is cached on the step: it must travel too
    copy = pickle.loads(pickle.dumps(step))
    assert [d.text for d in copy.run()][1].endswith("\n\npositive")


BAD = [
    ("{inputs\n\n{targets}", "not a str.format template"),
    ("{inputs} }", "not a str.format template"),
    ("{translation[de}", "not a str.format template"),
    ("plain text", "it names no field"),
    ("{{inputs}}", "it names no field"),
    ("{}\n\n{targets}", "is positional"),
    ("{0}", "is positional"),
    ("{translation.de}", "reads an attribute"),
    ("{inputs!r}", "conversion or format spec"),
    ("{inputs:>20}", "conversion or format spec"),
]


@pytest.mark.parametrize(("template", "problem"), BAD)
def test_a_bad_template_is_refused_at_config_time_naming_the_key(template, problem):
    sources = [
        {"name": "web", "reader": "jsonl", "path": "sample", "kind": "web"},
        {
            "name": "flan",
            "reader": "parquet",
            "path": "x",
            "kind": "edu",
            "text_template": template,
        },
    ]
    with pytest.raises(ConfigError) as error:
        DataConfig.from_dict({"sources": sources})
    assert "key 'data.sources[1].text_template'" in str(error.value)
    assert problem in str(error.value)
    # The cross-field check of a whole run config names it too (before any job).
    found = plan_problems(load_config((), [f"data.sources={json.dumps(sources)}"]))
    assert any("data.sources[1].text_template" in p and problem in p for p in found), found


@pytest.mark.parametrize(
    ("extra", "problem"),
    [
        ({"text_field": "content"}, "text_field is 'content' too; set one of them"),
        ({"reader": "warc"}, "the warc reader"),
    ],
)
def test_a_template_with_a_text_field_or_the_warc_reader_is_refused(extra, problem):
    entry = {"name": "flan", "reader": "jsonl", "path": "x", "kind": "edu", "text_template": FLAN}
    with pytest.raises(ConfigError, match=r"data\.sources\[0\]\.text_template") as error:
        DataConfig.from_dict({"sources": [{**entry, **extra}]})
    assert problem in str(error.value)


def test_a_reader_built_from_a_bad_template_refuses_it(tmp_path):
    with pytest.raises(ApertusError, match="data source 'src': text_template 'no field'"):
        make_reader(source(tmp_path, text_template="no field"))


# jhu-clsp/paradocs: `data/en-<xx>/<subset>/NNN.gz`, gzipped lines of 18 tab-separated columns
# (rewicks/ParaDocs `paradocs/paradocs-hf`): English sentence, other sentence, two similarity
# scores, collection, paragraph/sentence ids and character offsets of both sides, two LID
# probabilities, a duplication count, then the English and the other document's ids.
def paradocs_line(en, de, src_doc, tgt_doc, i=0):
    columns = [en, de, "0.91", "0.88", "paracrawl", str(i // 2), str(i // 2), str(i), str(i)]
    columns += [str(10 * i), str(10 * i + 9), str(12 * i), str(12 * i + 11)]
    columns += ["0.99", "0.98", "1", src_doc, tgt_doc]
    return "\t".join(columns) + "\n"


def write_paradocs(root, files):
    folder = root / "en-de" / "strict"
    folder.mkdir(parents=True)
    for name, lines in files.items():
        with gzip.open(folder / name, "wt", encoding="utf-8") as f:
            f.writelines(lines)
    return folder


def paradocs_source(root, **kw):
    return source(root, "paradocs", glob="en-de/strict/*.gz", language="deu_Latn", kind="edu", **kw)


def test_paradocs_sentence_lines_of_one_document_become_one_document(tmp_path, caplog):
    first = [
        paradocs_line("Welcome to our shop.", "Willkommen in unserem Laden.", "17", "42", 0),
        paradocs_line("We sell cheese.", "Wir verkaufen Käse.", "17", "42", 1),
        paradocs_line("Opening hours", "Öffnungszeiten", "5", "9", 0),
        paradocs_line("a line cut short", "eine Zeile", "5", "9", 1).rsplit("\t", 2)[0] + "\n",
        paradocs_line("", "Montag bis Freitag", "5", "9", 2),  # nothing on the English side
        paradocs_line("Monday to Friday.", "Montag bis Freitag.", "5", "9", 3),
        paradocs_line("The town lies on a lake.", "Die Stadt liegt an einem See.", "8", "3", 0),
    ]
    # The next file goes on with the document the previous one ended in.
    second = [paradocs_line("It has a harbour.", "Sie hat einen Hafen.", "8", "3", 1)]
    write_paradocs(tmp_path, {"000.gz": first, "001.gz": second})
    with caplog.at_level("WARNING", logger="apertus.data.readers"):
        docs, stats = read(paradocs_source(tmp_path))
    assert [d.text for d in docs] == [
        "Welcome to our shop.\nWe sell cheese.\n\nWillkommen in unserem Laden.\n"
        "Wir verkaufen Käse.",
        "Opening hours\nMonday to Friday.\n\nÖffnungszeiten\nMontag bis Freitag.",
        "The town lies on a lake.\n\nDie Stadt liegt an einem See.",
        "It has a harbour.\n\nSie hat einen Hafen.",  # the part in the next file, read apart
    ]
    # One id per document part: its file and first line, so the two parts never collide.
    assert [d.id for d in docs] == ["src/000.gz/1", "src/000.gz/3", "src/000.gz/7", "src/001.gz/1"]
    assert {d.metadata["language_hint"] for d in docs} == {"deu_Latn"}
    assert {d.metadata["kind"] for d in docs} == {"edu"}
    assert skips(stats) == {"skipped_malformed_line": 1, "skipped_blank_sentence": 1}
    assert "(malformed_line) " in caplog.text
    assert "000.gz:4: 16 tab-separated columns" in caplog.text
    assert "000.gz:5: src" in caplog.text


def test_paradocs_truncated_and_empty_files_keep_what_was_read(tmp_path):
    lines = [paradocs_line(f"Sentence {i}.", f"Satz {i}.", "1", "1", i) for i in range(200)]
    folder = write_paradocs(tmp_path, {"000.gz": lines, "001.gz": []})
    data = (folder / "000.gz").read_bytes()
    (folder / "000.gz").write_bytes(data[: len(data) * 2 // 3])
    docs, stats = read(paradocs_source(tmp_path))
    # The document read up to the cut is kept; the cut file and the empty one are counted.
    assert len(docs) == 1 and docs[0].text.startswith("Sentence 0.\nSentence 1.\n")
    assert 0 < docs[0].text.split("\n\n")[0].count("\n") < 199
    assert skips(stats) == {"skipped_truncated_file": 1, "skipped_empty_file": 1}


# utter-project/EuroBlocks-SFT-Synthetic-1124: `data/train-0000N-of-00002.parquet`, a ShareGPT
# `conversations` column (a list of {from, value} turns, from = system/human/gpt) and the
# conversation's `language` by name (swiss-ai/posttraining-data converts it as ShareGPT).
EUROBLOCKS_TURN = pa.struct([("from", pa.string()), ("value", pa.string())])


def write_euroblocks(root, rows):
    folder = root / "data"
    folder.mkdir(parents=True)
    table = pa.table(
        {
            "conversations": pa.array(
                [r["conversations"] for r in rows], pa.list_(EUROBLOCKS_TURN)
            ),
            "language": pa.array([r["language"] for r in rows], pa.string()),
        }
    )
    pq.write_table(table, folder / "train-00000-of-00002.parquet")
    return folder


def test_euroblocks_conversations_become_one_document_each(tmp_path, caplog):
    conversation = [
        {"from": "system", "value": "Du bist ein hilfreicher Assistent."},
        {"from": "human", "value": "Wie heisst die Hauptstadt der Schweiz?"},
        {"from": "gpt", "value": "Bern ist die Bundesstadt."},
        {"from": "human", "value": "Danke!"},
        {"from": "gpt", "value": "Gern geschehen."},
    ]
    rows = [
        {"conversations": conversation, "language": "German"},
        {"conversations": None, "language": "German"},  # no conversation at all
        {"conversations": [], "language": "French"},  # no turns
        {"conversations": [{"from": "human", "value": None}], "language": "Greek"},
        {"conversations": [{"from": "human", "value": " "}], "language": "Greek"},
        {"conversations": conversation[1:3], "language": "German"},
    ]
    write_euroblocks(tmp_path, rows)
    src = source(
        tmp_path,
        glob="data/*.parquet",
        conversation_field="conversations",
        language_field=None,
        url_field=None,
        kind="edu",
    )
    with caplog.at_level("WARNING", logger="apertus.data.readers"):
        docs, stats = read(src)
    assert [d.text for d in docs] == [
        "System: Du bist ein hilfreicher Assistent.\n\n"
        "User: Wie heisst die Hauptstadt der Schweiz?\n\n"
        "Assistant: Bern ist die Bundesstadt.\n\n"
        "User: Danke!\n\n"
        "Assistant: Gern geschehen.",
        "User: Wie heisst die Hauptstadt der Schweiz?\n\nAssistant: Bern ist die Bundesstadt.",
    ]
    assert [d.id for d in docs] == [
        "src/train-00000-of-00002.parquet/0",
        "src/train-00000-of-00002.parquet/5",
    ]
    assert skips(stats) == {
        "skipped_missing_field": 1,
        "skipped_conversation_not_list": 1,
        "skipped_malformed_turn": 1,
        "skipped_blank_text": 1,
    }
    assert "train-00000-of-00002.parquet:row 3" in caplog.text
    assert "field 'conversations', turn 0" in caplog.text


def test_role_content_turns_and_records_that_are_no_conversation_in_jsonl(tmp_path):
    path = tmp_path / "chat.jsonl"
    records = [
        {"messages": [{"role": "user", "content": "2+2?"}, {"role": "tool", "content": "4"}]},
        {"messages": "User: hi"},  # a string, not a list of turns
        {"messages": [{"role": "user", "content": "hi"}, "a bare string"]},
        {"messages": [{"role": "user", "text": "wrong key"}]},
        {"messages": [{"role": "", "content": "no speaker"}]},
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    docs, stats = read(source(path, "jsonl", conversation_field="messages"))
    assert [d.text for d in docs] == ["User: 2+2?\n\nTool: 4"]
    assert skips(stats) == {"skipped_conversation_not_list": 1, "skipped_malformed_turn": 3}


@pytest.mark.parametrize(
    ("extra", "key", "problem"),
    [
        ({"text_template": FLAN}, "text_template", "conversation_field is 'conversations' too"),
        ({"text_field": "content"}, "conversation_field", "text_field is 'content' too"),
        ({"reader": "warc"}, "conversation_field", "the warc reader makes its own text"),
        ({"reader": "paradocs"}, "conversation_field", "the paradocs reader makes its own text"),
    ],
)
def test_a_conversation_field_that_cannot_work_is_refused(extra, key, problem):
    entry = {
        "name": "euroblocks",
        "reader": "parquet",
        "path": "x",
        "kind": "edu",
        "conversation_field": "conversations",
    }
    with pytest.raises(ConfigError, match=rf"data\.sources\[0\]\.{key}") as error:
        DataConfig.from_dict({"sources": [{**entry, **extra}]})
    assert problem in str(error.value)


def test_the_paradocs_reader_takes_no_template():
    entry = {"name": "paradocs", "reader": "paradocs", "path": "x", "kind": "edu"}
    with pytest.raises(ConfigError, match="the paradocs reader makes its own text"):
        DataConfig.from_dict({"sources": [{**entry, "text_template": FLAN}]})
