"""Local stand-ins of the 8B preset's Hub data, in each dataset's own format and folder layout.

`build(root)` writes, under ``root/datasets/<org>/<name>/`` (the overlay's paths for
``hf://datasets/<org>/<name>/``), every data source of config/presets/apertus-8b.yaml with the
columns, nesting, file types and folders the preset's `path`, `glob`, `language_from_path`,
`text_field`, `text_template` and `conversation_field` expect, the ToxicCommons labels its
toxicity heads train on, and ``root/robots/<host>.txt`` (the preset fetches robots.txt from the
web; the rehearsal reads the hosts' files shipped in config/robots/).

The text is the embedded default's sample corpus (`apertus.data.sample_corpus`: multilingual
pages with planted PII, toxicity, boilerplate, duplicates and robots.txt opt-outs, so every
filter has something to keep and something to drop), made three times with three seeds so that
no source is another's copy (the data stage deduplicates across sources): English pages to the
English web and edu sets, the other languages' pages to FineWeb-2 (one folder per language) and
FineWeb2-HQ, educational pages to Wikipedia, code snippets to StarCoder and Stack-v2-Edu. The
banks' sentences are translations of each other, index by index, so EuroParl, ParaDocs, Flan
and EuroBlocks get real sentence pairs, and PG19's books are the English bank's topics, two per
book. Math pages are worked problems drawn here among English sentences (the sample corpus has
none).

Deterministic: seeded `random.Random` streams only, gzip without name and time, Parquet without
timestamps, so two builds are byte-identical (about 2 MB, in about a second).
"""

from __future__ import annotations

import gzip
import hashlib
import json
import random
import re
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from apertus.core.config import shipped_path
from apertus.core.files import atomic_write_bytes
from apertus.data.sample_corpus import make_sample_corpus
from apertus.data.sample_text import BANKS, TOPIC_NAMES

SEED = 27  # issue 27
# Bytes of text of the three sample corpora shared out between the sources (the first ~80 web
# pages per language, the third only for Wikipedia's ~5 educational pages per language).
TARGETS = (1_000_000, 600_000, 600_000)
# Where `hf://datasets/<id>` lives under the stand-ins' root.
DATASETS = "datasets"
ROBOTS = "robots"
DUMP = "CC-MAIN-2024-10"

# The sample banks' lid.176 codes as FineWeb-2 folders and GlotLID labels (ISO 639-3 + script).
LABELS = {
    "en": "eng_Latn",
    "de": "deu_Latn",
    "fr": "fra_Latn",
    "it": "ita_Latn",
    "rm": "roh_Latn",
    "es": "spa_Latn",
    "pt": "por_Latn",
    "nl": "nld_Latn",
    "pl": "pol_Latn",
    "sv": "swe_Latn",
    "ru": "rus_Cyrl",
    "el": "ell_Grek",
}
# Languages by English name, as EuroBlocks' `language` column names them.
NAMES = {
    "en": "English",
    "de": "German",
    "fr": "French",
    "it": "Italian",
    "rm": "Romansh",
    "es": "Spanish",
    "pt": "Portuguese",
    "nl": "Dutch",
    "pl": "Polish",
    "sv": "Swedish",
    "ru": "Russian",
    "el": "Greek",
}
# Wikipedia editions written (wikimedia/wikipedia `20231101.<code>/`).
WIKIPEDIA_LANGUAGES = ("en", "de", "fr", "it", "rm")
# FineWeb-2's folders of documents its own filters removed, which the preset's glob skips.
REMOVED_FOLDERS = ("deu_Latn", "roh_Latn")
# StarCoder's folders by the snippet's file suffix.
CODE_FOLDERS = {
    ".py": "python",
    ".js": "javascript",
    ".sh": "shell",
    ".sql": "sql",
    ".yaml": "yaml",
    ".yml": "yaml",
    ".c": "c",
    ".go": "go",
}
TOXIC_AXES = ("race_origin", "gender_sex", "religion", "ability", "violence")

Record = dict[str, Any]


def build(root: Path) -> None:
    """Write every stand-in under `root` (created if missing; files there are overwritten)."""
    root = Path(root)
    # Three corpora of their own seeds, so no source is made of another's documents: the data
    # stage deduplicates across sources, and such a source would vanish from the corpus.
    first, second, third = (_sample_corpus(SEED + i, target) for i, target in enumerate(TARGETS))

    # --- web / edu ---
    en_web, en_edu, other_web, other_edu = _split(first)
    _fineweb(root, "HuggingFaceFW/fineweb-edu/data", en_edu + en_web[0::2], edu_scores=True)
    _fineweb(root, "epfml/FineWeb-HQ/data", en_web[1::2], edu_scores=False)
    _fineweb2(root, other_web)
    en_web, en_edu, other_web, other_edu = _split(second)
    _dclm_edu(root, en_edu + en_web)
    _fineweb2_hq(root, other_edu + other_web[0::2])
    # --- code ---
    _starcoder(root, first["code"])
    _stack_v2_edu(root, second["code"])
    # --- math ---
    math_rng = random.Random(f"apertus-rehearsal-math-{SEED}")
    _finemath(root, [_math_page(math_rng) for _ in range(40)])
    _megamath(root, [_math_page(math_rng) for _ in range(40)])
    _infimm_webmath(root, [_math_page(math_rng) for _ in range(30)])
    # --- books, encyclopaedia, parallel and instruction data ---
    _pg19(root)
    _wikipedia(root, third["edu"])
    for other in ("de", "fr"):
        _paradocs(root, other)
        _europarl(root, other)
    _flan(root)
    _euroblocks(root)
    # --- the toxicity heads' labels, and robots.txt ---
    _toxic_commons(root, first["toxicity"])
    _robots(root)


def _split(corpus: dict[str, list[Record]]) -> tuple[list[Record], ...]:
    """(English web, English edu, other web, other edu) pages of a corpus."""
    web, edu = corpus["web"], corpus["edu"]
    return (
        [r for r in web if r["language"] == "en"],
        [r for r in edu if r["language"] == "en"],
        [r for r in web if r["language"] != "en"],
        [r for r in edu if r["language"] != "en"],
    )


def dataset_dir(root: Path, dataset: str) -> Path:
    """The stand-in of `hf://datasets/<dataset>` under `root`."""
    return Path(root) / DATASETS / dataset


# --- the text ------------------------------------------------------------------------------------


def _sample_corpus(seed: int, target_bytes: int) -> dict[str, list[Record]]:
    """A sample corpus's records by file (web, edu, code) and its toxicity labels."""
    with tempfile.TemporaryDirectory(prefix="apertus-rehearsal-") as tmp:
        out = Path(tmp)
        make_sample_corpus(out, seed=seed, target_bytes=target_bytes)
        corpus = {kind: _read_jsonl(out / f"{kind}.jsonl.gz") for kind in ("web", "edu", "code")}
        corpus["toxicity"] = _read_jsonl(out / "labels" / "toxicity.jsonl")
    return corpus


def _read_jsonl(path: Path) -> list[Record]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def _title_and_body(text: str) -> tuple[str, str]:
    title, _, body = text.partition("\n\n")
    return title.strip(), body.strip() or title.strip()


def _uuid(rng: random.Random) -> str:
    return f"<urn:uuid:{uuid.UUID(int=rng.getrandbits(128), version=4)}>"


def _pairs(other: str) -> Iterator[tuple[str, str, str]]:
    """(topic, English sentence, its translation) for every sentence of the banks."""
    for topic in TOPIC_NAMES:
        english, translated = BANKS["en"].TOPICS[topic], BANKS[other].TOPICS[topic]
        for en, tr in zip(english, translated, strict=True):
            yield topic, en, tr


def _math_page(rng: random.Random) -> str:
    """A page of three to five worked problems (equations, percentages, areas, sums), each after
    a sentence of the English bank, below an opening paragraph of it: the problems' templates
    alone would differ in their numbers only, which deduplication ignores."""
    sentences = rng.sample([s for t in TOPIC_NAMES for s in BANKS["en"].TOPICS[t]], 9)
    problems = [" ".join(sentences[:4])]
    for _ in range(rng.randint(3, 5)):
        kind = rng.choice(("linear", "percent", "area", "series"))
        if kind == "linear":
            a, x, b = rng.randint(2, 12), rng.randint(-9, 15), rng.randint(1, 40)
            c = a * x + b
            problems.append(
                f"Solve ${a}x + {b} = {c}$ for $x$.\n\nSubtract {b} from both sides: "
                f"${a}x = {c - b}$. Divide both sides by {a}: $x = {x}$. Check: "
                f"${a} \\cdot {x} + {b} = {c}$."
            )
        elif kind == "percent":
            price, percent = rng.randint(20, 400), rng.choice((5, 10, 15, 20, 25, 30, 40))
            off = price * percent / 100
            problems.append(
                f"A coat costs {price} francs and is reduced by {percent}%. What is the new "
                f"price?\n\nThe reduction is ${price} \\times {percent}/100 = {off:g}$ francs, "
                f"so the new price is ${price} - {off:g} = {price - off:g}$ francs."
            )
        elif kind == "area":
            w, h = rng.randint(2, 30), rng.randint(2, 30)
            problems.append(
                f"A rectangular garden is {w} m wide and {h} m long. Find its area and "
                f"perimeter.\n\nThe area is $A = {w} \\cdot {h} = {w * h}$ m$^2$ and the "
                f"perimeter is $P = 2({w} + {h}) = {2 * (w + h)}$ m."
            )
        else:
            n = rng.randint(5, 60)
            problems.append(
                f"Compute the sum of the first {n} positive integers.\n\nPair the terms from "
                f"both ends: $\\sum_{{k=1}}^{{{n}}} k = \\frac{{{n}({n}+1)}}{{2}} = "
                f"{n * (n + 1) // 2}$."
            )
    problems[1:] = [f"{sentences[4 + i]} {p}" for i, p in enumerate(problems[1:])]
    title = rng.choice(("Worked examples", "Practice problems", "Exercises with solutions"))
    return "\n\n".join([title, *problems])


# --- writers -------------------------------------------------------------------------------------


def _parquet(path: Path, columns: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    table = columns if isinstance(columns, pa.Table) else pa.table(columns)
    pq.write_table(table, path)


def _gzip(path: Path, text: str) -> None:
    # mtime 0 and no file name in the header: the bytes depend on the text only.
    atomic_write_bytes(path, gzip.compress(text.encode("utf-8"), compresslevel=9, mtime=0))


def _fineweb(root: Path, dataset: str, records: list[Record], *, edu_scores: bool) -> None:
    """HuggingFaceFW/fineweb-edu (and FineWeb-HQ, unverified): `data/<dump>/*.parquet` with
    FineWeb's columns, and the educational score FineWeb-Edu selected on."""
    rng = random.Random(f"apertus-rehearsal-{dataset}-{SEED}")
    n = len(records)
    columns: dict[str, Any] = {
        "text": [r["text"] for r in records],
        "id": [_uuid(rng) for _ in records],
        "dump": [DUMP] * n,
        "url": [r["url"] for r in records],
        "file_path": [f"s3://commoncrawl/crawl-data/{DUMP}/segments/{i}.warc.gz" for i in range(n)],
        "language": ["en"] * n,
        "language_score": [round(rng.uniform(0.85, 0.99), 4) for _ in records],
        "token_count": [len(r["text"].split()) for r in records],
    }
    if edu_scores:
        scores = [round(rng.uniform(3.0, 4.6), 4) for _ in records]
        columns |= {"score": scores, "int_score": [round(s) for s in scores]}
    _parquet(dataset_dir(root, dataset) / DUMP / "train-00000-of-00001.parquet", columns)


def _dclm_edu(root: Path, records: list[Record]) -> None:
    """HuggingFaceTB/dclm-edu (unverified): `data/*.parquet` of text, id, url and edu score."""
    rng = random.Random(f"apertus-rehearsal-dclm-edu-{SEED}")
    scores = [round(rng.uniform(2.5, 4.5), 4) for _ in records]
    _parquet(
        dataset_dir(root, "HuggingFaceTB/dclm-edu/data") / "train-00000-of-00001.parquet",
        {
            "text": [r["text"] for r in records],
            "id": [_uuid(rng) for _ in records],
            "url": [r["url"] for r in records],
            "score": scores,
            "int_score": [round(s) for s in scores],
        },
    )


def fineweb2_columns(records: list[Record], label: str, rel: str) -> dict[str, list]:
    """FineWeb-2's columns for `records` of one language folder; `language` holds the ISO code
    alone and `language_script` the script, as there."""
    code, script = label.split("_")
    n = len(records)
    return {
        "text": [r["text"] for r in records],
        "id": [f"{rel}#{i}" for i in range(n)],
        "dump": [DUMP] * n,
        "url": [r["url"] for r in records],
        "date": ["2024-02-20T00:00:00Z"] * n,
        "file_path": [f"s3://commoncrawl/crawl-data/{DUMP}/{i}.warc.gz" for i in range(n)],
        "language": [code] * n,
        "language_score": [0.9] * n,
        "language_script": [script] * n,
        "minhash_cluster_size": [1] * n,
        "top_langs": [f'{{"{label}_score": 0.9}}'] * n,
    }


def _by_label(records: list[Record]) -> dict[str, list[Record]]:
    out: dict[str, list[Record]] = {}
    for r in records:
        out.setdefault(LABELS[r["language"]], []).append(r)
    return dict(sorted(out.items()))


def _fineweb2(root: Path, records: list[Record]) -> None:
    """HuggingFaceFW/fineweb-2: `data/<lang>_<Script>/train/000_0000N.parquet`, two files per
    language, and a few `<lang>_<Script>_removed/` folders (what FineWeb-2's filters dropped)."""
    data = dataset_dir(root, "HuggingFaceFW/fineweb-2/data")
    for label, rows in _by_label(records).items():
        for part, chunk in enumerate((rows[0::2], rows[1::2])):
            rel = f"{label}/train/000_{part:05d}.parquet"
            _parquet(data / rel, fineweb2_columns(chunk, label, rel))
        if label in REMOVED_FOLDERS:
            rel = f"{label}_removed/train/000_00000.parquet"
            _parquet(data / rel, fineweb2_columns(rows[:5], label, rel))


def _fineweb2_hq(root: Path, records: list[Record]) -> None:
    """epfml/FineWeb2-HQ (unverified): `<lang>_<Script>/000_00000.parquet`, FineWeb-2's columns
    and the selection's quality score."""
    folder = dataset_dir(root, "epfml/FineWeb2-HQ")
    for label, rows in _by_label(records).items():
        rel = f"{label}/000_00000.parquet"
        columns = fineweb2_columns(rows, label, rel)
        columns["quality_score"] = [round(0.9 - 0.001 * i, 4) for i in range(len(rows))]
        _parquet(folder / rel, columns)


def _code_folder(record: Record) -> str:
    return CODE_FOLDERS.get(Path(record["url"]).suffix, "text")


def _content_id(dataset: str, record: Record) -> str:
    """A code file's id, a hash of its dataset and text (as the Stack's blob ids hash content):
    the sample corpus numbers its documents per seed, so two code sources built from it would
    otherwise share ids, which the pipeline takes as one document's."""
    return hashlib.sha1(f"{dataset}\0{record['text']}".encode()).hexdigest()


def _starcoder(root: Path, records: list[Record]) -> None:
    """bigcode/starcoderdata: `<language>/train-*.parquet`, the file's text in `content`."""
    by_folder: dict[str, list[Record]] = {}
    for r in records:
        by_folder.setdefault(_code_folder(r), []).append(r)
    for folder, rows in sorted(by_folder.items()):
        _parquet(
            dataset_dir(root, "bigcode/starcoderdata") / folder / "train-00000-of-00001.parquet",
            {
                "max_stars_repo_path": [r["url"].split("/blob/main/", 1)[-1] for r in rows],
                "max_stars_repo_name": ["/".join(r["url"].split("/")[3:5]) for r in rows],
                "max_stars_count": [len(r["text"]) % 97 for r in rows],
                "id": [_content_id("starcoder", r) for r in rows],
                "content": [r["text"] for r in rows],
            },
        )


def _stack_v2_edu(root: Path, records: list[Record]) -> None:
    """common-pile/stackv2_edu_filtered (unverified): gzipped JSONL, Common Pile's record
    (id, text, source, added, created, metadata)."""
    lines = [
        json.dumps(
            {
                "id": _content_id("stackv2_edu", r),
                "text": r["text"],
                "source": "stackv2_edu",
                "added": "2025-01-01T00:00:00Z",
                "created": "2023-01-01T00:00:00Z",
                "metadata": {"url": r["url"], "language": _code_folder(r)},
            },
            ensure_ascii=False,
        )
        for r in records
    ]
    folder = dataset_dir(root, "common-pile/stackv2_edu_filtered") / "documents"
    _gzip(folder / "stackv2_edu-0000.jsonl.gz", "".join(line + "\n" for line in lines))


def _math_urls(pages: list[str], host: str) -> list[str]:
    titles = [page.split("\n", 1)[0] for page in pages]
    return [f"https://{host}/{i:04d}/{_slug(title)}" for i, title in enumerate(titles)]


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def _finemath(root: Path, pages: list[str]) -> None:
    """HuggingFaceTB/finemath: `finemath-3plus/train-*.parquet` with url, text and scores."""
    n = len(pages)
    _parquet(
        dataset_dir(root, "HuggingFaceTB/finemath")
        / "finemath-3plus"
        / "train-00000-of-00001.parquet",
        {
            "url": _math_urls(pages, "www.mathe-werkstatt.org"),
            "fetch_time": [1706000000] * n,
            "content_mime_type": ["text/html"] * n,
            "text": pages,
            "token_count": [len(p.split()) for p in pages],
            "score": [3.5] * n,
            "int_score": [4] * n,
            "crawl": [DUMP] * n,
            "language": ["en"] * n,
            "language_score": [0.95] * n,
        },
    )


def _megamath(root: Path, pages: list[str]) -> None:
    """LLM360/MegaMath (unverified): `megamath-web/<dump>/*.parquet` of text and url."""
    _parquet(
        dataset_dir(root, "LLM360/MegaMath") / "megamath-web" / DUMP / "000_00000.parquet",
        {"text": pages, "url": _math_urls(pages, "blog.openfield-science.org")},
    )


def _infimm_webmath(root: Path, pages: list[str]) -> None:
    """Infi-MM/InfiMM-WebMath-40B: Parquet with `URL`, `text_list` (None where an image was),
    `image_list` (None where text was) and `metadata` (a JSON string)."""
    text_lists, image_lists = [], []
    for i, page in enumerate(pages):
        parts = page.split("\n\n")
        texts: list[str | None] = [*parts[:2], None, *parts[2:]]  # an image after the first problem
        images = [None if t is not None else f"https://img.example/figure-{i}.png" for t in texts]
        text_lists.append(texts)
        image_lists.append(images)
    _parquet(
        dataset_dir(root, "Infi-MM/InfiMM-WebMath-40B") / "data" / "part-00000.parquet",
        {
            "URL": _math_urls(pages, "learn.brightpath-academy.org"),
            "text_list": pa.array(text_lists, pa.list_(pa.string())),
            "image_list": pa.array(image_lists, pa.list_(pa.string())),
            "metadata": ['{"ft_lang_label": "__label__en"}'] * len(pages),
        },
    )


def _pg19(root: Path) -> None:
    """emozilla/pg19: `data/train-*.parquet`, whole books (title, year, url, text): here one book
    per pair of the English bank's topics, a chapter per topic of all its sentences (no sentence
    twice in a book, none in two books: the repetition filters and deduplication keep them)."""
    rng = random.Random(f"apertus-rehearsal-pg19-{SEED}")
    bank = BANKS["en"]
    books = []
    for first, second in zip(TOPIC_NAMES[0::2], TOPIC_NAMES[1::2], strict=True):
        title = bank.TITLES[first][0]
        chapters = []
        for n, topic in enumerate((first, second), start=1):
            sentences = rng.sample(bank.TOPICS[topic], len(bank.TOPICS[topic]))
            heading = f"CHAPTER {n}. {bank.TITLES[topic][-1].upper()}"
            chapters.append("\n\n".join([heading, *_paragraphs(sentences)]))
        books.append((title, "\n\n".join([title.upper(), *chapters])))
    _parquet(
        dataset_dir(root, "emozilla/pg19/data") / "train-00000-of-00001.parquet",
        {
            "short_book_title": [t for t, _ in books],
            "publication_date": [1850 + 7 * i for i in range(len(books))],
            "url": [f"http://www.gutenberg.org/ebooks/{10001 + i}" for i in range(len(books))],
            "text": [text for _, text in books],
        },
    )


def _paragraphs(sentences: list[str], size: int = 4) -> list[str]:
    return [" ".join(sentences[i : i + size]) for i in range(0, len(sentences), size)]


def _wikipedia(root: Path, records: list[Record]) -> None:
    """wikimedia/wikipedia: `20231101.<code>/train-*.parquet` with id, url, title, text."""
    for code in WIKIPEDIA_LANGUAGES:
        rows = [_title_and_body(r["text"]) for r in records if r["language"] == code]
        _parquet(
            dataset_dir(root, "wikimedia/wikipedia")
            / f"20231101.{code}"
            / "train-00000-of-00001.parquet",
            {
                "id": [str(1000 + i) for i in range(len(rows))],
                "url": [
                    f"https://{code}.wikipedia.org/wiki/{title.replace(' ', '_')}"
                    for title, _ in rows
                ],
                "title": [title for title, _ in rows],
                "text": [body for _, body in rows],
            },
        )


def paradocs_line(en: str, other: str, src_doc: str, tgt_doc: str, i: int = 0) -> str:
    """One line of jhu-clsp/paradocs: the 18 tab-separated columns of
    `apertus.data.readers.PARADOCS_COLUMNS`, English first."""
    columns = [en, other, "0.91", "0.88", "paracrawl", str(i // 2), str(i // 2), str(i), str(i)]
    columns += [str(10 * i), str(10 * i + 9), str(12 * i), str(12 * i + 11)]
    columns += ["0.99", "0.98", "1", src_doc, tgt_doc]
    return "\t".join(columns) + "\n"


def _paradocs(root: Path, other: str) -> None:
    """jhu-clsp/paradocs: `data/en-<xx>/strict/NNN.gz`, documents of consecutive sentence pairs
    (one topic's sentences, four at a time), over two files."""
    lines = []
    for n, (_topic, en, tr) in enumerate(_pairs(other)):
        doc = n // 4
        lines.append(paradocs_line(en, tr, f"en-{doc}", f"{other}-{doc}", n % 4))
    folder = dataset_dir(root, f"jhu-clsp/paradocs/data/en-{other}/strict")
    half = len(lines) // 2
    for name, part in (("000.gz", lines[:half]), ("001.gz", lines[half:])):
        _gzip(folder / name, "".join(part))


def _europarl(root: Path, other: str) -> None:
    """Helsinki-NLP/europarl: `<pair>/train-*.parquet`, one `translation` struct per row; the
    pair's folder names its languages in alphabetical order (`de-en`, `en-fr`). A row is an
    aligned segment of one to four sentences, as a speech's segments run."""
    rng = random.Random(f"apertus-rehearsal-europarl-{other}-{SEED}")
    first, second = sorted(("en", other))
    struct = pa.struct([(first, pa.string()), (second, pa.string())])
    pairs = [(en, tr) for _, en, tr in _pairs(other)]
    rows, i = [], 0
    while i < len(pairs):
        segment = pairs[i : i + rng.randint(1, 4)]
        i += len(segment)
        rows.append({"en": " ".join(e for e, _ in segment), other: " ".join(t for _, t in segment)})
    _parquet(
        dataset_dir(root, "Helsinki-NLP/europarl")
        / f"{first}-{second}"
        / "train-00000-of-00001.parquet",
        {"translation": pa.array(rows, struct)},
    )


def _flan(root: Path) -> None:
    """Open-Orca/FLAN (unverified columns): `<submix>_data/*.parquet` of seqio-rendered
    `inputs` and `targets`: translations and topic questions from the banks."""
    rng = random.Random(f"apertus-rehearsal-flan-{SEED}")
    rows = []
    for other in ("de", "fr", "it", "es"):
        for _topic, en, tr in _pairs(other):
            if rng.random() < 0.25:
                rows.append(
                    {
                        "inputs": f"Translate to {NAMES[other]}:\n\n{en}",
                        "targets": tr,
                        "_template_idx": rng.randint(0, 9),
                        "_task_source": "Flan2021",
                        "_task_name": f"wmt16_translate/{other}-en:1.0.0",
                        "_template_type": "zs_opt",
                    }
                )
    # Summaries: a paragraph of a topic's sentences, its first one the answer.
    for topic in TOPIC_NAMES:
        sentences = BANKS["en"].TOPICS[topic]
        for start in (0, 6):
            paragraph = " ".join(sentences[start : start + 6])
            rows.append(
                {
                    "inputs": f"Summarize this text in one sentence:\n\n{paragraph}",
                    "targets": sentences[start],
                    "_template_idx": rng.randint(0, 9),
                    "_task_source": "Flan2021",
                    "_task_name": "cnn_dailymail:3.4.0",
                    "_template_type": "zs_opt",
                }
            )
    for topic in TOPIC_NAMES:
        for sentence in BANKS["en"].TOPICS[topic][:4]:
            rows.append(
                {
                    "inputs": f"What is this text about?\n\n{sentence}\n\nAnswer with one word.",
                    "targets": topic.replace("_", " "),
                    "_template_idx": rng.randint(0, 9),
                    "_task_source": "Flan2021",
                    "_task_name": "ag_news_subset:1.0.0",
                    "_template_type": "zs_noopt",
                }
            )
    columns = {key: [row[key] for row in rows] for key in rows[0]}
    _parquet(dataset_dir(root, "Open-Orca/FLAN") / "flan_zsopt_data" / "part.0.parquet", columns)


def _euroblocks(root: Path) -> None:
    """utter-project/EuroBlocks-SFT-Synthetic-1124 (unverified columns): `data/train-*.parquet`
    with ShareGPT `conversations` ({from, value} turns) and the language by English name."""
    rng = random.Random(f"apertus-rehearsal-euroblocks-{SEED}")
    rows = []
    for other in sorted(BANKS):
        if other == "en":
            continue
        for topic, en, tr in _pairs(other):
            if rng.random() < 0.3:
                sentences = rng.sample(BANKS[other].TOPICS[topic], 3)
                turns = [
                    {"from": "system", "value": "You are a helpful multilingual assistant."},
                    {"from": "human", "value": f"Translate into {NAMES[other]}: {en}"},
                    {"from": "gpt", "value": tr},
                    {"from": "human", "value": rng.choice(BANKS[other].TITLES[topic])},
                    {"from": "gpt", "value": " ".join(sentences)},
                ]
                rows.append({"conversations": turns, "language": NAMES[other]})
    turn = pa.struct([("from", pa.string()), ("value", pa.string())])
    _parquet(
        dataset_dir(root, "utter-project/EuroBlocks-SFT-Synthetic-1124/data")
        / "train-00000-of-00001.parquet",
        {
            "conversations": pa.array([r["conversations"] for r in rows], pa.list_(turn)),
            "language": [r["language"] for r in rows],
        },
    )


def _toxic_commons(root: Path, labels: list[Record]) -> None:
    """PleIAs/ToxicCommons: `data/train-*.parquet`, the text in `original_text`, its language
    and five axes scored 0-3 (the preset: toxic when any is above 1). The sample corpus's
    toxicity labels, a toxic text scoring 2-3 on one axis; languages as the GlotLID labels the
    filter gives documents, so each head is found for its language (the real column's values
    are unverified)."""
    rng = random.Random(f"apertus-rehearsal-toxic-commons-{SEED}")
    columns: dict[str, list] = {"original_text": [], "language": []}
    columns |= {axis: [] for axis in TOXIC_AXES}
    for row in labels:
        columns["original_text"].append(row["text"])
        columns["language"].append(LABELS[row["language"]])
        toxic_axis = rng.choice(TOXIC_AXES) if row["label"] else None
        for axis in TOXIC_AXES:
            columns[axis].append(rng.randint(2, 3) if axis == toxic_axis else rng.randint(0, 1))
    _parquet(
        dataset_dir(root, "PleIAs/ToxicCommons") / "data" / "train-00000-of-00001.parquet",
        columns,
    )


def _robots(root: Path) -> None:
    """The sample hosts' robots.txt files (config/robots/), for `data.robots.directory`."""
    out = Path(root) / ROBOTS
    out.mkdir(parents=True, exist_ok=True)
    for path in sorted(shipped_path("config/robots").glob("*.txt")):
        shutil.copyfile(path, out / path.name)
