"""One source over many language folders (FineWeb-2's `data/<lang>_<Script>/train/*.parquet`):
each document's language hint comes from its file's path (`language_from_path`), a file whose
path names no language is refused and counted, and shards split whole files."""

from collections import Counter

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from apertus.core import ApertusError
from apertus.core.config import ConfigError, load_config
from apertus.data.config import DataConfig, Source
from apertus.data.readers import make_reader
from apertus.data.steps import local_files
from apertus.plan_check import plan_problems

FINEWEB2_LANGUAGE = r"^([a-z]{3}_[A-Z][a-z]{3})/"
GLOB = "*/train/*.parquet"

# 39 language folders over 13 scripts, Serbian in two of them.
SCRIPTS = {
    "Latn": "deu fra ita spa roh nld pol ces fin hun swe tur vie ind eus cym srp",
    "Cyrl": "rus ukr bul srp mkd kaz",
    "Grek": "ell",
    "Arab": "arb fas urd",
    "Hani": "cmn yue",
    "Deva": "hin mar nep",
    "Jpan": "jpn",
    "Hang": "kor",
    "Thai": "tha",
    "Hebr": "heb",
    "Geor": "kat",
    "Armn": "hye",
    "Ethi": "amh",
}
LANGUAGES = [f"{code}_{script}" for script, codes in SCRIPTS.items() for code in codes.split()]
ONE_FILE = "roh_Latn"
STRAY = "unsorted/train/000_00000.parquet"  # matches the glob, names no language


def files_of(language: str) -> int:
    return 1 if language == ONE_FILE else 2 + LANGUAGES.index(language) % 2


def rows_of(language: str, part: int) -> int:
    return 1 + (LANGUAGES.index(language) + part) % 3


def write_part(path, language: str, n: int) -> None:
    """A Parquet file with FineWeb-2's columns; `language` holds the ISO code alone, as there."""
    code, script = language.split("_")
    rel = f"{path.parent.parent.name}/train/{path.name}"
    pq.write_table(
        pa.table(
            {
                "text": [f"{language} text {i}" for i in range(n)],
                "id": [f"{rel}#{i}" for i in range(n)],
                "dump": ["CC-MAIN-2024-10"] * n,
                "url": [f"https://{code}.example/{path.stem}/{i}" for i in range(n)],
                "date": ["2024-02-20T00:00:00Z"] * n,
                "file_path": [f"s3://commoncrawl/{path.stem}.warc.gz"] * n,
                "language": [code] * n,
                "language_score": [0.9] * n,
                "language_script": [script] * n,
                "minhash_cluster_size": [1] * n,
                "top_langs": [f'{{"{language}_score": 0.9}}'] * n,
            }
        ),
        path,
    )


@pytest.fixture
def fineweb2(tmp_path):
    """A local stand-in of FineWeb-2's `data/` folder: {relative file: (language, rows)}."""
    root = tmp_path / "fineweb-2" / "data"
    expected = {}
    for language in LANGUAGES:
        folder = root / language / "train"
        folder.mkdir(parents=True)
        for part in range(files_of(language)):
            n = rows_of(language, part)
            write_part(folder / f"000_{part:05d}.parquet", language, n)
            expected[f"{language}/train/000_{part:05d}.parquet"] = (language, n)
    (root / "unsorted" / "train").mkdir(parents=True)
    write_part(root / STRAY, "xxx_Latn", 2)
    return root, expected


def fw2_source(root, **kw) -> Source:
    return Source.from_dict(
        {
            "name": "fineweb2",
            "reader": "parquet",
            "path": str(root),
            "glob": GLOB,
            "kind": "web",
            "language_from_path": FINEWEB2_LANGUAGE,
            **kw,
        }
    )


def read(src, rank=0, world_size=1):
    reader = make_reader(src)
    docs = list(reader.run(rank=rank, world_size=world_size))
    stats = {k: v.total if hasattr(v, "total") else v for k, v in reader.stats.stats.items()}
    return docs, stats


def file_of(doc) -> str:
    return doc.id.rsplit("#", 1)[0]


def test_the_stand_in_has_the_shape_the_feature_is_for(fineweb2):
    _, expected = fineweb2
    languages = Counter(language for language, _ in expected.values())
    assert len(languages) >= 30
    assert len({language.split("_")[1] for language in languages}) >= 6
    assert languages[ONE_FILE] == 1 and max(languages.values()) == 3


def test_every_document_takes_its_folders_language(fineweb2, caplog):
    root, expected = fineweb2
    with caplog.at_level("ERROR", logger="apertus.data.readers"):
        docs, stats = read(fw2_source(root))
    for doc in docs:
        # The path decides, before the records' own `language` column ("deu", not "deu_Latn").
        assert doc.metadata["language_hint"] == file_of(doc).split("/")[0], doc.id
        assert doc.text.startswith(doc.metadata["language_hint"] + " ")
    wanted = Counter()
    for language, n in expected.values():
        wanted[language] += n
    assert Counter(doc.metadata["language_hint"] for doc in docs) == wanted
    assert {file_of(doc) for doc in docs} == set(expected)  # the one-file language included
    assert stats["skipped_no_language_in_path"] == 1
    assert STRAY in caplog.text and "does not match language_from_path" in caplog.text
    assert caplog.text.count("not read") == 1
    assert not any(k.startswith("skipped_") and k != "skipped_no_language_in_path" for k in stats)


def test_serbian_in_two_scripts_stays_two_languages(fineweb2):
    root, _ = fineweb2
    docs, _ = read(fw2_source(root))
    hints = Counter(doc.metadata["language_hint"] for doc in docs if doc.text.startswith("srp"))
    assert set(hints) == {"srp_Latn", "srp_Cyrl"}


@pytest.mark.parametrize("world_size", [1, 4, 7])
def test_shards_split_whole_files_as_the_filter_job_counts_them(fineweb2, world_size):
    """Each file is read by exactly one rank, every document of it there and with its folder's
    language; the rank's files are the ones `data_filter` hashes as its inputs (`local_files`,
    every world-th), less the refused stray."""
    root, expected = fineweb2
    src = fw2_source(root)
    listed = [p.relative_to(root).as_posix() for p in local_files(src)]
    assert sorted(listed) == sorted([*expected, STRAY])
    seen: dict[str, int] = {}
    refused = 0
    for rank in range(world_size):
        docs, stats = read(src, rank, world_size)
        refused += stats.get("skipped_no_language_in_path", 0)
        files = Counter(file_of(doc) for doc in docs)
        assert set(files) == set(listed[rank::world_size]) - {STRAY}
        for name, n in files.items():
            assert name not in seen, f"{name} read by ranks {seen.get(name)} and {rank}"
            assert n == expected[name][1]  # the whole file, in this rank
            seen[name] = rank
        assert all(doc.metadata["language_hint"] == file_of(doc).split("/")[0] for doc in docs)
    assert set(seen) == set(expected) and refused == 1


def test_path_before_field_before_source_language(tmp_path):
    folder = tmp_path / "gsw_Latn"
    folder.mkdir()
    (folder / "a.jsonl").write_text('{"id": "1", "text": "Grüezi", "lang": "deu_Latn"}\n')
    src = Source.from_dict(
        {
            "name": "web",
            "reader": "jsonl",
            "path": str(tmp_path),
            "glob": "*/*.jsonl",
            "kind": "web",
            "language_field": "lang",
            "language": "und",
            "language_from_path": r"^([^/]+)/",
        }
    )
    (doc,) = read(src)[0]
    assert doc.metadata["language_hint"] == "gsw_Latn"
    # Without the option, the record's field and then the source's hint, as before.
    plain = Source.from_dict({**src.__dict__, "language_from_path": None})
    assert read(plain)[0][0].metadata["language_hint"] == "deu_Latn"


@pytest.mark.parametrize(
    ("pattern", "problem"),
    [
        (r"^[a-z]{3}_[A-Z][a-z]{3}/", "it has 0 groups; it needs exactly one"),
        (r"^([a-z]{3})_([A-Z][a-z]{3})/", "it has 2 groups; it needs exactly one"),
        (r"^([a-z]{3}_[A-Z][a-z]{3}/", "not a regular expression"),
    ],
)
def test_a_bad_pattern_is_refused_at_config_time_naming_the_key(pattern, problem):
    sources = [
        {"name": "web", "reader": "jsonl", "path": "sample", "kind": "web"},
        {"name": "fw2", "reader": "parquet", "path": "x", "kind": "web"},
    ]
    sources[1]["language_from_path"] = pattern
    with pytest.raises(ConfigError) as error:
        DataConfig.from_dict({"sources": sources})
    assert "key 'data.sources[1].language_from_path'" in str(error.value)
    assert problem in str(error.value)
    # The cross-field check of a whole run config names it too (before any job).
    found = plan_problems(
        load_config(
            (),
            [
                "data.sources=[{name: web, reader: jsonl, path: sample, kind: web},"
                " {name: fw2, reader: parquet, path: x, kind: web,"
                f" language_from_path: '{pattern}'}}]"
            ],
        )
    )
    assert any("data.sources[1].language_from_path" in p and problem in p for p in found), found


def test_the_huggingface_reader_cannot_take_languages_from_paths():
    with pytest.raises(ConfigError, match=r"data\.sources\[0\]\.language_from_path.*huggingface"):
        DataConfig.from_dict(
            {
                "sources": [
                    {
                        "name": "fw2",
                        "reader": "huggingface",
                        "path": "HuggingFaceFW/fineweb-2",
                        "kind": "web",
                        "language_from_path": FINEWEB2_LANGUAGE,
                    }
                ]
            }
        )


def test_a_reader_built_from_a_bad_source_refuses_it(tmp_path):
    with pytest.raises(ApertusError, match="data source 'fineweb2': language_from_path"):
        make_reader(fw2_source(tmp_path, language_from_path="no group"))


def test_a_glob_of_language_folders_leaves_out_removed_data_and_other_splits(fineweb2):
    """FineWeb-2 also holds `<lang>_<Script>_removed/` (what its filters dropped) and test
    splits; a glob naming the folder shape reads the languages' train files only, so nothing is
    refused file by file."""
    root, expected = fineweb2
    (root / "deu_Latn_removed" / "train").mkdir(parents=True)
    write_part(root / "deu_Latn_removed" / "train" / "000_00000.parquet", "deu_Latn", 2)
    (root / "deu_Latn" / "test").mkdir()
    write_part(root / "deu_Latn" / "test" / "000_00000.parquet", "deu_Latn", 2)
    src = fw2_source(root, glob="[a-z][a-z][a-z]_[A-Z][a-z][a-z][a-z]/train/*.parquet")
    docs, stats = read(src)
    assert {file_of(doc) for doc in docs} == set(expected)
    assert "skipped_no_language_in_path" not in stats
    assert len(local_files(src)) == len(expected)
