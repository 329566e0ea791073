"""The tokenization stage end to end through Snakemake on the embedded default (the shared
`default_run`): a tokenizer transformers loads, shards equal to what it produces, a held-out
split the shards never see, phase indexes, and re-runs that stop at the right stage."""

import json
import shutil
import subprocess
import sys

import pytest
import yaml
from transformers import AutoTokenizer

from apertus.core.config import load_schema
from apertus.tokenize.phases import INDEX_FILES, PhaseDataset
from apertus.tokenize.shards import TokenShards, read_corpus, verify_shards
from apertus.tokenize.tokenizer import encode_documents
from tests.conftest import REPO, planned_jobs

pytestmark = pytest.mark.slow


def tok(run_dir, *parts):
    return run_dir.joinpath("tokenize", *parts)


def test_tokenizer_loads_in_transformers_with_apertus_special_tokens(default_run):
    tokenizer = AutoTokenizer.from_pretrained(str(tok(default_run, "tokenizer")))
    assert (tokenizer.bos_token_id, tokenizer.eos_token_id, tokenizer.pad_token_id) == (1, 2, 3)
    assert len(tokenizer) == 8192
    chat = tokenizer.apply_chat_template(
        [{"role": "user", "content": "Allegra!"}, {"role": "assistant", "content": "Bun di."}],
        tokenize=False,
    )
    assert (
        chat == "<s><|user_start|>Allegra!<|user_end|><|assistant_start|>Bun di.<|assistant_end|>"
    )


def stored_and_expected(run_dir, tokenizer, source: str) -> tuple[list, list]:
    """A source's shard documents (after `verify_shards`) and its training rows of the corpus
    encoded by `tokenizer` as `encode_documents` does, both sorted."""
    heldout = {
        i
        for ids in json.loads(tok(run_dir, "split", "heldout_ids.json").read_text())["ids"].values()
        for i in ids
    }
    verify_shards(tok(run_dir, "shards", source))
    shards = TokenShards(tok(run_dir, "shards", source))
    stored = sorted(
        tuple(shards.document(f, d).tolist())
        for f in range(len(shards.files))
        for d in range(shards.documents(f))
    )
    rows = [r for r in read_corpus(run_dir / "data" / "corpus", source) if r["id"] not in heldout]
    expected = sorted(tuple(ids) for ids in encode_documents(tokenizer, [r["text"] for r in rows]))
    return stored, expected


def test_shards_hold_exactly_the_training_documents_as_transformers_tokenizes_them(default_run):
    tokenizer = AutoTokenizer.from_pretrained(str(tok(default_run, "tokenizer")))
    for source in ("web", "edu", "code"):
        stored, expected = stored_and_expected(default_run, tokenizer, source)
        assert stored == expected, source
        assert all(doc[0] == 1 and doc[-1] == 2 for doc in stored)


def test_heldout_documents_never_reach_training(default_run):
    heldout_dir = tok(default_run, "heldout")
    texts = {
        json.loads(line)["text"]
        for path in heldout_dir.glob("*.jsonl")
        for line in path.read_text().splitlines()
    }
    languages = {p.stem for p in heldout_dir.glob("*.jsonl")}
    assert {"en", "de", "fr", "it", "rm", "ru", "el"} <= languages
    assert len(texts) >= 5 * len(languages)
    tokenizer = AutoTokenizer.from_pretrained(str(tok(default_run, "tokenizer")))
    heldout_ids = {tuple(ids) for ids in encode_documents(tokenizer, sorted(texts))}
    for source in ("web", "edu", "code"):
        shards = TokenShards(tok(default_run, "shards", source))
        for f in range(len(shards.files)):
            for d in range(shards.documents(f)):
                assert tuple(shards.document(f, d).tolist()) not in heldout_ids


def test_phases_are_indexes_over_the_shards(default_run):
    for name, budget in (("phase1", 200_000), ("phase2", 200_000)):
        phase = PhaseDataset(tok(default_run, "phases", name))
        assert budget <= phase.total_tokens < budget * 1.05
        index_bytes = sum(tok(default_run, "phases", name, f).stat().st_size for f in INDEX_FILES)
        assert index_bytes < phase.total_tokens  # an index, not a copy (2 bytes per token)
    phase2 = json.loads(tok(default_run, "phases", "phase2", "phase.json").read_text())
    planned = {s["name"]: s["tokens_planned"] for s in phase2["sources"]}
    assert planned["web"] > planned["edu"] > planned["code"]


def test_corrupt_shard_is_refused_before_training_naming_the_file(default_run, tmp_path):
    copy = tmp_path / "web"
    shutil.copytree(tok(default_run, "shards", "web"), copy)
    ds = next(copy.glob("*.ds"))
    data = bytearray(ds.read_bytes())
    data[len(data) // 2] ^= 0xFF
    ds.write_bytes(bytes(data))
    config = json.dumps(
        {"phases": [{"name": "p", "tokens": 1000, "seed": 1, "weights": {"web": 1}}]}
    )
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "apertus.tokenize.steps",
            "phase",
            "--config",
            config,
            "--manifest",
            tmp_path / "m.json",
            "--name",
            "p",
            "--shards",
            f"web={copy}",
            "--output",
            tmp_path / "p",
        ],
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    assert proc.returncode == 2
    assert ds.name in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "p").exists()


def test_changing_only_the_vocab_size_reruns_tokenization_not_the_data_stage(default_run, tmp_path):
    planned = set(
        planned_jobs(default_run, tmp_path, "tokenize:\n  tokenizer:\n    vocab_size: 4096\n")
    )
    assert {
        "tokenize_tokenizer",
        "tokenize_heldout",
        "tokenize_shards",
        "tokenize_phase",
    } <= planned
    assert not {rule for rule in planned if rule.startswith("data_")}  # never the data stage
    assert "tokenize_split" not in planned  # the held-out choice does not depend on it


def test_a_phase_is_replanned_only_when_its_own_sources_or_entry_change(default_run, tmp_path):
    """Phase 1 draws no probes: new probes, or a new budget for phase 2, re-plan phase 2 alone."""
    probes = planned_jobs(default_run, tmp_path, "data:\n  probes:\n    per_count: 3\n")
    assert probes["data_probes"] == 1 and probes["tokenize_phase"] == 1
    schema = load_schema()
    default = schema["properties"]["tokenize"]["properties"]["phases"]["default"]
    bigger = [dict(p, tokens=p["tokens"] + 1000) if p["name"] == "phase2" else p for p in default]
    budget = planned_jobs(default_run, tmp_path, yaml.safe_dump({"tokenize": {"phases": bigger}}))
    assert budget["tokenize_phase"] == 1
