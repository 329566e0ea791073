"""The data stage end to end through Snakemake on the embedded default: the sample corpus is
filtered, every filter removes what the corpus plants, and the outputs load in pyarrow."""

import json
import re
from collections import Counter

import pyarrow.parquet as pq
import pytest

from tests.conftest import planned_jobs

pytestmark = pytest.mark.slow


@pytest.fixture
def run_dir(default_run):
    return default_run


def data(run_dir, *parts):
    return run_dir.joinpath("data", *parts)


def manifest(run_dir, name):
    return json.loads(data(run_dir, name).read_text())


def corpus_rows(run_dir, source=None):
    rows = []
    for path in sorted(data(run_dir, "corpus").glob("*/*/*.parquet")):
        if source is None or path.parts[-3] == source:
            rows += pq.read_table(path).to_pylist()
    return rows


def test_every_filter_removes_what_the_sample_plants(run_dir):
    funnel = json.loads(data(run_dir, "funnel.json").read_text())
    removed = {row["step"]: row.get("removed_documents", 0) for row in funnel["total"]}
    assert funnel["steps"][0] == "read" and funnel["steps"][-1] == "written"
    for step in ("robots", "minhash", "exact", "quality", "toxicity"):
        assert removed[step] > 0, f"{step} removed nothing"
    assert sum(removed[f] for f in ("gopher_repetition", "gopher_quality", "c4", "fineweb")) > 0
    assert data(run_dir, "funnel.png").read_bytes()[:4] == b"\x89PNG"
    read = funnel["total"][0]["documents"]
    written = funnel["total"][-1]["documents"]
    assert 0.3 * read < written < read


def test_corpus_is_multilingual_parquet_with_fixed_columns(run_dir):
    rows = corpus_rows(run_dir)
    assert {"id", "text", "source", "kind", "url", "language", "language_score"} <= set(rows[0])
    languages = Counter(r["language"] for r in rows)
    assert len(languages) >= 10, languages
    assert {"en", "de", "fr", "it", "ru", "el"} <= set(languages)
    assert len({r["id"] for r in rows}) == len(rows)
    assert sum(len(r["text"].encode()) for r in rows) > 1_000_000


def test_no_exact_duplicates_survive(run_dir):
    texts = Counter(r["text"].strip() for r in corpus_rows(run_dir))
    assert texts.most_common(1)[0][1] == 1


EMAIL = re.compile(r"[\w.+-]+@[\w-]+\.[\w.-]+")


def test_pii_is_redacted_in_web_text_but_code_is_exempt(run_dir):
    web = " ".join(r["text"] for r in corpus_rows(run_dir, "web"))
    assert "<email-pii>" in web and "<ip-pii>" in web and "<iban-pii>" in web
    assert "<phone-pii>" in web
    assert not EMAIL.search(web)
    code = " ".join(r["text"] for r in corpus_rows(run_dir, "code"))
    assert "<email-pii>" not in code


def test_manifests_record_robots_counts_and_thresholds(run_dir):
    web = manifest(run_dir, "filtered/web/0.manifest.json")
    robots = next(v for k, v in web["summary"]["stats"].items() if "robots" in k)
    agents = {k: v for k, v in robots.items() if k.startswith("disallowed_")}
    assert len(agents) >= 2 and all(v > 0 for v in agents.values())
    select = manifest(run_dir, "corpus.manifest.json")
    thresholds = select["summary"]["thresholds"]
    assert set(thresholds) == {"quality", "toxicity"}
    assert all(0 <= t <= 1 for per_lang in thresholds.values() for t in per_lang.values())
    assert select["outputs"][0]["files"]  # every corpus file hashed


def test_changing_pii_reruns_only_selection(run_dir, tmp_path):
    planned = planned_jobs(run_dir, tmp_path, "data:\n  pii:\n    kinds: [email]\n")
    assert {rule for rule in planned if rule.startswith("data_")} == {"data_select", "data_funnel"}
