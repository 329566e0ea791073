"""The RECIPE §5 sources whose records hold the text in other fields than `text`: local stand-ins
in each Hub dataset's own record format (its columns, its file format and folder layout), read
with `text_field` or a `text_template`; records without a field the template names are skipped
and counted, and a template that cannot work is refused at config time, naming its key."""

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
