"""Readers: every source format maps onto the document contract, and bad input is skipped and
counted per reason, never crashing and never dropping good lines around it."""

import bz2
import gzip
import io
import json
import lzma

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from apertus.data.config import Source
from apertus.data.readers import make_reader


def source(path, reader="jsonl", **kw):
    return Source.from_dict(
        {"name": "web", "reader": reader, "path": str(path), "kind": "web", **kw}
    )


def read(src):
    reader = make_reader(src)
    docs = list(reader.run())
    counters = {k: v.total if hasattr(v, "total") else v for k, v in reader.stats.stats.items()}
    return docs, counters


def good(i):
    return json.dumps({"id": f"d{i}", "text": f"document {i}", "url": f"https://x.ch/{i}"})


def test_fields_map_onto_the_document_contract(tmp_path):
    path = tmp_path / "a.jsonl"
    path.write_text(
        json.dumps({"body": "Grüezi", "uid": 7, "link": "https://www.zueri.ch/a", "lang": "de"})
        + "\n"
        + json.dumps({"body": "no id here"})
        + "\n"
    )
    docs, _ = read(
        source(
            path,
            text_field="body",
            id_field="uid",
            url_field="link",
            language_field="lang",
            language="rm",
        )
    )
    assert [d.text for d in docs] == ["Grüezi", "no id here"]
    assert docs[0].id == "7"
    assert docs[0].metadata == {
        "source": "web",
        "kind": "web",
        "url": "https://www.zueri.ch/a",
        "language_hint": "de",
    }
    assert docs[1].id == "web/a.jsonl/2"  # generated from file and line
    assert docs[1].metadata["language_hint"] == "rm"  # the source's hint when the doc has none


def test_bad_lines_are_skipped_counted_and_good_lines_around_them_kept(tmp_path, caplog):
    path = tmp_path / "mixed.jsonl"
    lines = [
        good(1).encode(),
        b'{"id": "broken", "text": "no closing brace"',
        good(2).encode(),
        b'{"id": "latin1", "text": "caf\xe9"}',  # not UTF-8
        b'["an", "array"]',
        b'{"id": "notext"}',
        b'{"id": "num", "text": 42}',
        b'{"id": "blank", "text": "   "}',
        b"",
        good(3).encode(),
    ]
    path.write_bytes(b"\n".join(lines) + b"\n")
    with caplog.at_level("WARNING", logger="apertus.data.readers"):
        docs, stats = read(source(path))
    assert [d.id for d in docs] == ["d1", "d2", "d3"]
    for reason in (
        "bad_json",
        "bad_utf8",
        "not_an_object",
        "missing_text",
        "text_not_string",
        "blank_text",
    ):
        assert stats[f"skipped_{reason}"] == 1, reason
    assert "mixed.jsonl:2" in caplog.text  # the sample in the log names file and line


def test_truncated_gzip_keeps_what_was_read_and_counts_the_file(tmp_path):
    data = gzip.compress(("\n".join(good(i) for i in range(2000)) + "\n").encode())
    path = tmp_path / "cut.jsonl.gz"
    path.write_bytes(data[: len(data) // 2])
    docs, stats = read(source(path))
    assert 0 < len(docs) < 2000
    assert stats["skipped_truncated_file"] == 1


def test_empty_file_is_counted(tmp_path):
    (tmp_path / "empty.jsonl").write_bytes(b"")
    docs, stats = read(source(tmp_path / "empty.jsonl"))
    assert docs == [] and stats["skipped_empty_file"] == 1


def test_directory_with_glob_reads_matching_files(tmp_path):
    (tmp_path / "part").mkdir()
    (tmp_path / "part" / "a.jsonl").write_text(good(1) + "\n")
    (tmp_path / "part" / "b.jsonl").write_text(good(2) + "\n")
    (tmp_path / "part" / "notes.txt").write_text("not data")
    docs, _ = read(source(tmp_path, glob="**/*.jsonl"))
    assert sorted(d.id for d in docs) == ["d1", "d2"]


def test_limit_caps_documents_read(tmp_path):
    (tmp_path / "a.jsonl").write_text("".join(good(i) + "\n" for i in range(10)))
    assert len(list(make_reader(source(tmp_path / "a.jsonl"), limit=4).run())) == 4


def test_parquet_rows_and_a_corrupt_file(tmp_path):
    table = pa.table(
        {
            "id": ["p1", "p2", "p3"],
            "text": ["first", None, "third"],
            "url": ["https://a.de/1", "https://a.de/2", None],
        }
    )
    pq.write_table(table, tmp_path / "good.parquet")
    (tmp_path / "bad.parquet").write_bytes(b"PAR1 this is not parquet")
    docs, stats = read(source(tmp_path, reader="parquet", glob="*.parquet"))
    assert [d.id for d in docs] == ["p1", "p3"]
    assert docs[0].metadata["url"] == "https://a.de/1" and "url" not in docs[1].metadata
    assert stats["skipped_missing_text"] == 1
    assert stats["skipped_corrupt_file"] == 1


def _warc(path, pages):
    from warcio.statusandheaders import StatusAndHeaders
    from warcio.warcwriter import WARCWriter

    with open(path, "wb") as f:
        writer = WARCWriter(f, gzip=True)
        for url, content_type, body in pages:
            headers = StatusAndHeaders(
                "200 OK", [("Content-Type", content_type)], protocol="HTTP/1.1"
            )
            record = writer.create_warc_record(
                url, "response", payload=io.BytesIO(body), http_headers=headers
            )
            writer.write_record(record)


ARTICLE = (
    "<html><head><title>Alpen</title></head><body><nav>Home | About</nav><article>"
    + "".join(
        f"<p>Die Wanderung über den Pass dauert {i} Stunden und bietet eine schöne Aussicht auf "
        "die Berge und die Seen der Region, die im Sommer viele Gäste anziehen.</p>"
        for i in range(3, 9)
    )
    + "</article><footer>© 2024</footer></body></html>"
)


def test_warc_html_is_reduced_to_main_text(tmp_path):
    path = tmp_path / "crawl.warc.gz"
    _warc(
        path,
        [
            ("https://www.alpen.ch/pass", "text/html; charset=utf-8", ARTICLE.encode()),
            ("https://www.alpen.ch/logo.png", "image/png", b"\x89PNG..."),
            (
                "https://www.alpen.ch/latin",
                "text/html; charset=iso-8859-1",
                ARTICLE.encode("latin-1"),
            ),
        ],
    )
    docs, stats = read(source(path, reader="warc"))
    assert len(docs) == 2
    assert "Wanderung über den Pass" in docs[0].text and "Home | About" not in docs[0].text
    assert "Wanderung über den Pass" in docs[1].text  # decoded with the declared charset
    assert docs[0].metadata["url"] == "https://www.alpen.ch/pass"
    assert stats["not_html"] == 1


def test_truncated_warc_is_counted(tmp_path):
    path = tmp_path / "cut.warc.gz"
    _warc(path, [("https://a.ch/x", "text/html", ARTICLE.encode())] * 3)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    docs, stats = read(source(path, reader="warc"))
    assert len(docs) >= 1 and stats["skipped_truncated_file"] == 1


@pytest.mark.parametrize("reader", ["jsonl", "parquet", "warc"])
def test_reader_is_picklable(tmp_path, reader):
    import pickle

    (tmp_path / "a.jsonl").write_text(good(1) + "\n")
    step = make_reader(source(tmp_path, reader=reader))
    assert pickle.loads(pickle.dumps(step)).source.name == "web"


def test_huggingface_reader_streams_a_local_dataset_in_hub_format(tmp_path):
    """Real presets stream FineWeb-2 from the Hub; the same code path on a local dataset folder
    (FineWeb-2's columns, Parquet, one config) — no network."""
    folder = tmp_path / "fineweb-2-standin" / "data" / "roh_Latn" / "train"
    folder.mkdir(parents=True)
    pq.write_table(
        pa.table(
            {
                "text": ["Bun di!", "Allegra"],
                "id": ["<urn:uuid:1>", "<urn:uuid:2>"],
                "url": ["https://www.rtr.ch/a", "https://www.rtr.ch/b"],
                "language": ["roh_Latn", "roh_Latn"],
                "language_score": [0.9, 0.8],
            }
        ),
        folder / "000_00000.parquet",
    )
    src = Source.from_dict(
        {
            "name": "fw2",
            "reader": "huggingface",
            "path": str(tmp_path / "fineweb-2-standin"),
            "kind": "web",
            "hf_config": None,
            "hf_split": "train",
        }
    )
    docs, _ = read(src)
    assert [d.text for d in docs] == ["Bun di!", "Allegra"]
    assert {
        "source": "fw2",
        "kind": "web",
        "url": "https://www.rtr.ch/a",
        "language_hint": "roh_Latn",
    }.items() <= docs[0].metadata.items()


def test_a_one_file_source_reads_exactly_that_file(tmp_path):
    (tmp_path / "crlf.jsonl").write_text(good(1) + "\n")
    (tmp_path / "bom_crlf.jsonl").write_text(good(2) + "\n")  # ends with the name
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "crlf.jsonl").write_text(good(3) + "\n")
    (tmp_path / "a[1].jsonl").write_text(good(4) + "\n")  # glob characters in the name
    (tmp_path / "xa[1].jsonl").write_text(good(5) + "\n")
    assert [d.id for d in read(source(tmp_path / "crlf.jsonl"))[0]] == ["d1"]
    assert [d.id for d in read(source(tmp_path / "a[1].jsonl"))[0]] == ["d4"]


def test_byte_order_mark_does_not_cost_the_first_document(tmp_path):
    path = tmp_path / "bom_crlf.jsonl"
    path.write_bytes(b"\xef\xbb\xbf" + good(1).encode() + b"\r\n" + good(2).encode() + b"\r\n")
    docs, stats = read(source(path))
    assert [d.id for d in docs] == ["d1", "d2"]
    assert not any(k.startswith("skipped_") for k in stats)


@pytest.mark.parametrize(
    ("suffix", "compress"),
    [(".gz", gzip.compress), (".bz2", bz2.compress), (".xz", lzma.compress)],
)
def test_compressed_jsonl_is_read(tmp_path, suffix, compress):
    path = tmp_path / f"part.jsonl{suffix}"
    path.write_bytes(compress(("".join(good(i) + "\n" for i in range(5))).encode()))
    docs, stats = read(source(path))
    assert [d.id for d in docs] == [f"d{i}" for i in range(5)]
    assert not any(k.startswith("skipped_") for k in stats)


@pytest.mark.parametrize(("suffix", "compress"), [(".bz2", bz2.compress), (".xz", lzma.compress)])
def test_truncated_bz2_and_xz_keep_what_was_read_and_count_the_file(tmp_path, suffix, compress):
    data = compress(("\n".join(good(i) for i in range(20000)) + "\n").encode())
    path = tmp_path / f"cut.jsonl{suffix}"
    path.write_bytes(data[: len(data) // 2])
    docs, stats = read(source(path))
    assert len(docs) < 20000
    assert stats["skipped_truncated_file"] == 1


def test_zstd_without_its_package_is_refused_per_file_by_name(tmp_path, caplog, monkeypatch):
    import importlib.util

    real_find_spec = importlib.util.find_spec

    def without_zstandard(name, *args):
        return None if name == "zstandard" else real_find_spec(name, *args)

    monkeypatch.setattr(importlib.util, "find_spec", without_zstandard)
    (tmp_path / "a.jsonl.zst").write_bytes(b"\x28\xb5\x2f\xfd not really zstd")
    (tmp_path / "b.jsonl").write_text(good(1) + "\n")
    with caplog.at_level("ERROR", logger="apertus.data.readers"):
        docs, stats = read(source(tmp_path, glob="*.jsonl*"))
    assert [d.id for d in docs] == ["d1"]  # the other files of the source are still read
    assert stats["skipped_unsupported_compression"] == 1
    assert "skipped_bad_utf8" not in stats
    assert "a.jsonl.zst" in caplog.text and "needs the zstandard package" in caplog.text


def test_a_file_of_blank_lines_is_counted_as_empty(tmp_path):
    (tmp_path / "blank.jsonl").write_bytes(b"\n  \r\n\n")
    docs, stats = read(source(tmp_path / "blank.jsonl"))
    assert docs == [] and stats["skipped_empty_file"] == 1


def test_parquet_bad_rows_are_counted_per_reason_and_named_by_row_number(tmp_path, caplog):
    texts = ["ok 0", None, "ok 2", "  ", None, None, None, None, "ok 8"]
    pq.write_table(
        pa.table({"id": [f"r{i}" for i in range(9)], "text": texts}),
        tmp_path / "rows.parquet",
        row_group_size=4,  # several batches: row numbers carry across them
    )
    pq.write_table(
        pa.table({"id": pa.array([], pa.string()), "text": pa.array([], pa.string())}),
        tmp_path / "none.parquet",
    )
    with caplog.at_level("WARNING", logger="apertus.data.readers"):
        docs, stats = read(source(tmp_path, reader="parquet", glob="*.parquet"))
    assert [d.id for d in docs] == ["r0", "r2", "r8"]
    assert stats["skipped_missing_text"] == 5 and stats["skipped_blank_text"] == 1
    assert stats["skipped_empty_file"] == 1
    assert "rows.parquet:row 1" in caplog.text and "rows.parquet:row 3" in caplog.text
    assert caplog.text.count("(missing_text)") == 3  # the first examples only, not every row


def test_parquet_generated_ids_use_the_row_number(tmp_path):
    pq.write_table(pa.table({"text": [None, "kept"]}), tmp_path / "noid.parquet")
    docs, _ = read(source(tmp_path / "noid.parquet", reader="parquet"))
    assert [d.id for d in docs] == ["web/noid.parquet/1"]


def test_zstd_jsonl_is_read_when_its_package_is_installed(tmp_path):
    zstandard = pytest.importorskip("zstandard")
    path = tmp_path / "part.jsonl.zst"
    path.write_bytes(zstandard.ZstdCompressor().compress((good(1) + "\n").encode()))
    assert [d.id for d in read(source(path))[0]] == ["d1"]


def write_with_long_line(path, long_bytes, *, opener=open):
    """Good lines d0..d2, one record `long_bytes` long, good lines d3..d5."""
    with opener(path, "wb") as f:
        for i in range(3):
            f.write(good(i).encode() + b"\n")
        f.write(b'{"id": "huge", "text": "' + b"x" * long_bytes + b'"}\n')
        for i in range(3, 6):
            f.write(good(i).encode() + b"\n")


@pytest.mark.parametrize(("suffix", "opener"), [("", open), (".gz", gzip.open)])
def test_a_line_over_max_line_bytes_is_a_counted_skip_read_in_bounded_memory(
    tmp_path, caplog, suffix, opener
):
    import tracemalloc

    path = tmp_path / f"long.jsonl{suffix}"
    write_with_long_line(path, 50_000_000, opener=opener)  # a 50 MB record
    limit = 1 << 20
    reader = make_reader(source(path, max_line_bytes=limit))
    tracemalloc.start()
    try:
        with caplog.at_level("WARNING", logger="apertus.data.readers"):
            docs = list(reader.run())
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert [d.id for d in docs] == [f"d{i}" for i in range(6)]
    assert reader.stats.stats["skipped_line_too_long"].total == 1
    assert f"{path.name}:4" in caplog.text and "47.7 MiB" in caplog.text
    assert peak < 2 * limit + (4 << 20), f"reading held {peak / 2**20:.1f} MiB"


def test_a_line_of_exactly_max_line_bytes_is_read(tmp_path):
    record = good(0).encode()
    path = tmp_path / "edge.jsonl"
    path.write_bytes(record + b"\n" + record)  # the last line without its line end
    docs, counters = read(source(path, max_line_bytes=len(record)))
    assert len(docs) == 2 and "skipped_line_too_long" not in counters
    _, counters = read(source(path, max_line_bytes=len(record) - 1))
    assert counters["skipped_line_too_long"] == 2
