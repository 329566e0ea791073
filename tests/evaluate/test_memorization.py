"""Memorization probes: the scores, greedy continuations, measured exposures and the curve.

Models here are tiny Hugging Face `ApertusForCausalLM`s built in fixtures (random, or trained for
a few hundred steps to memorize one probe), with a small byte-level BPE trained on the English
sample-text bank, so nothing is downloaded.
"""

from __future__ import annotations

import copy
import itertools
import json
import os
import random
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from transformers import ApertusConfig, ApertusForCausalLM, AutoTokenizer

from apertus.core import ApertusError
from apertus.data.probes import ProbesConfig, make_probes, read_probes, write_probes
from apertus.evaluate.memorization import (
    exact_match_prefix,
    exposure_counts,
    longest_common_subsequence,
    main,
    measure,
    plot_curves,
    rouge_l,
    trained_stream,
)
from apertus.tokenize.phases import PhaseDataset, PhaseSpec, build_phase_index
from apertus.tokenize.tokenizer import encode_documents, train_tokenizer
from apertus.train.goldfish import goldfish_mask

PREFIX, SUFFIX = 8, 12


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """Models this small run fastest on one thread; on a busy machine, thread hand-offs made
    the training tests over ten times slower."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


# -- scores against hand computation and brute force ---------------------------------------------


def brute_force_lcs(a, b) -> int:
    """The longest subsequence of `a` (tried from the longest) that is also a subsequence of b."""

    def is_subsequence(sub, seq):
        it = iter(seq)
        return all(x in it for x in sub)

    for length in range(len(a), 0, -1):
        if any(is_subsequence(c, b) for c in itertools.combinations(a, length)):
            return length
    return 0


def test_lcs_matches_brute_force():
    rng = random.Random(0)
    for _ in range(400):
        a = [rng.randrange(3) for _ in range(rng.randrange(0, 9))]
        b = [rng.randrange(3) for _ in range(rng.randrange(0, 9))]
        assert longest_common_subsequence(a, b) == brute_force_lcs(a, b), (a, b)


@pytest.mark.parametrize(
    ("candidate", "reference", "expected"),
    [
        ([1, 2, 3], [1, 2, 3], 1.0),
        ([1, 2, 3, 4], [1, 3, 4, 5], 0.75),  # LCS 1 3 4: P = R = 3/4
        ([1, 2], [1, 2, 3, 4], 2 / 3),  # P = 1, R = 1/2: F = 2 * 0.5 / 1.5
        ([3, 2, 1], [1, 2, 3], 1 / 3),  # order matters: LCS 1
        ([7, 8], [1, 2], 0.0),
        ([], [1, 2], 0.0),
        ([1], [], 0.0),
    ],
)
def test_rouge_l_hand_cases(candidate, reference, expected):
    assert rouge_l(candidate, reference) == pytest.approx(expected)


def test_rouge_l_on_lins_example():
    # Lin (2004) §3.1: against "police killed the gunman", "police kill the gunman" shares
    # "police the gunman" (F 3/4) and "the gunman kill police" only "the gunman" (F 1/2).
    ids = {w: i for i, w in enumerate(["police", "killed", "kill", "the", "gunman"])}

    def encode(text):
        return [ids[w] for w in text.split()]

    reference = encode("police killed the gunman")
    assert rouge_l(encode("police kill the gunman"), reference) == pytest.approx(0.75)
    assert rouge_l(encode("the gunman kill police"), reference) == pytest.approx(0.5)


def test_rouge_l_is_the_f1_of_brute_force_lcs():
    rng = random.Random(1)
    for _ in range(200):
        a = [rng.randrange(4) for _ in range(rng.randrange(1, 8))]
        b = [rng.randrange(4) for _ in range(rng.randrange(1, 8))]
        lcs = brute_force_lcs(a, b)
        expected = 0.0 if lcs == 0 else 2 * lcs / (len(a) + len(b))  # F1 = 2 LCS / (m + n)
        assert rouge_l(a, b) == pytest.approx(expected)


@pytest.mark.parametrize(
    ("candidate", "reference", "expected"),
    [
        ([1, 2, 3], [1, 2, 3], 3),
        ([1, 2, 4], [1, 2, 3], 2),
        ([5, 2, 3], [1, 2, 3], 0),  # later agreement does not count
        ([1, 2], [1, 2, 3], 2),
        ([], [1], 0),
    ],
)
def test_exact_match_prefix_hand_cases(candidate, reference, expected):
    assert exact_match_prefix(candidate, reference) == expected


# -- fixtures: tokenizer, probes, tiny models ----------------------------------------------------


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    from apertus.data.sample_text import en

    root = tmp_path_factory.mktemp("memorization")
    texts = [s for sentences in en.TOPICS.values() for s in sentences]
    train_tokenizer(texts, root / "tokenizer", vocab_size=600, min_frequency=2)
    probes = make_probes(
        ProbesConfig.from_dict(
            {"exposures": [1, 3], "per_count": 2, "controls": 2, "words": 24, "seed": 4}
        )
    )
    write_probes(probes, root / "probes")
    tokenizer = AutoTokenizer.from_pretrained(str(root / "tokenizer"))
    return {
        "root": root,
        "tokenizer_dir": root / "tokenizer",
        "tokenizer": tokenizer,
        "probes": probes,
        "probes_jsonl": root / "probes" / "probes.jsonl",
    }


def tiny_config(vocab_size: int) -> ApertusConfig:
    config = ApertusConfig(
        vocab_size=vocab_size,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        max_position_embeddings=256,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        tie_word_embeddings=False,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=3,
    )
    config._attn_implementation = "eager"
    return config


def save_model(model, tokenizer, directory):
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)  # as the export stage does
    return directory


@pytest.fixture(scope="module")
def random_model(world):
    torch.manual_seed(0)
    model = ApertusForCausalLM(tiny_config(len(world["tokenizer"]))).eval()
    return model, save_model(model, world["tokenizer"], world["root"] / "random_model")


@torch.no_grad()
def greedy_reference(model, prompt, steps):
    """Greedy decoding by hand: the whole sequence through the model each step, no cache, argmax
    of the last position, never stopping at EOS."""
    sequence = torch.tensor([prompt])
    for _ in range(steps):
        logits = model(sequence).logits[0, -1]
        sequence = torch.cat([sequence, logits.argmax().view(1, 1)], dim=1)
    return sequence[0, len(prompt) :].tolist()


def split(tokenizer, text):
    ids = encode_documents(tokenizer, [text])[0]
    return ids[: 1 + PREFIX], ids[1 + PREFIX : 1 + PREFIX + SUFFIX]


# -- measure -------------------------------------------------------------------------------------


def test_measure_generates_greedily_and_scores_each_probe(world, random_model):
    model, model_dir = random_model
    result = measure(
        model_dir, world["probes_jsonl"], prefix_tokens=PREFIX, suffix_tokens=SUFFIX, batch_size=3
    )
    assert result["exposures_from"] == "planned"
    assert [r["probe_id"] for r in result["probes"]] == [p.probe_id for p in world["probes"]]
    for row, probe in zip(result["probes"], world["probes"], strict=True):
        prompt, reference = split(world["tokenizer"], probe.text)
        assert row["prompt"] == prompt and prompt[0] == 1
        assert row["reference"] == reference and len(reference) == SUFFIX
        assert row["generated"] == greedy_reference(model, prompt, SUFFIX)
        assert row["rouge_l"] == pytest.approx(rouge_l(row["generated"], reference))
        assert row["exact_match_prefix"] == exact_match_prefix(row["generated"], reference)
    # The curve aggregates the rows of each exposure count, controls at 0.
    curve = {row["exposures"]: row for row in result["curve"]}
    assert sorted(curve) == [0, 1, 3]
    for exposures, row in curve.items():
        group = [r for r in result["probes"] if r["exposures"] == exposures]
        assert row["probes"] == len(group) == 2
        assert row["rouge_l_mean"] == pytest.approx(np.mean([r["rouge_l"] for r in group]))
        assert row["rouge_l_min"] == min(r["rouge_l"] for r in group)
        assert row["rouge_l_max"] == max(r["rouge_l"] for r in group)
        assert row["exact_match_prefix_mean"] == pytest.approx(
            np.mean([r["exact_match_prefix"] for r in group])
        )
    assert result["control"] == curve[0]
    assert result["exposure_mismatches"] == []


def test_generation_does_not_stop_at_eos(world, random_model, tmp_path):
    model, _ = random_model
    eos_model = copy.deepcopy(model).eval()
    prompt, _ = split(world["tokenizer"], world["probes"][0].text)
    with torch.no_grad():
        logits = eos_model(torch.tensor([prompt])).logits[0, -1]
        first = int(logits.argmax())
        assert logits[first] > 0  # so a scaled copy of its output row wins
        eos_model.lm_head.weight[2] = 1.5 * eos_model.lm_head.weight[first]
    expected = greedy_reference(eos_model, prompt, SUFFIX)
    assert expected[0] == 2  # the model ends the text at once ...
    directory = save_model(eos_model, world["tokenizer"], tmp_path / "eos_model")
    result = measure(directory, world["probes_jsonl"], prefix_tokens=PREFIX, suffix_tokens=SUFFIX)
    # ... and the continuation still has all its tokens, scored as they are.
    assert result["probes"][0]["generated"] == expected
    assert len(expected) == SUFFIX


def test_measured_exposures_group_the_probes(world, random_model):
    _, model_dir = random_model
    counts = {p.probe_id: p.exposures for p in world["probes"]}
    counts["probe-2"] = 2  # planned 3, measured 2 (e.g. one copy cut off by the end of training)
    result = measure(
        model_dir,
        world["probes_jsonl"],
        prefix_tokens=PREFIX,
        suffix_tokens=SUFFIX,
        exposures_by_probe=counts,
    )
    assert result["exposures_from"] == "measured"
    assert {r["exposures"]: r["probes"] for r in result["curve"]} == {0: 2, 1: 2, 2: 1, 3: 1}
    assert result["exposure_mismatches"] == [{"probe_id": "probe-2", "planned": 3, "measured": 2}]
    del counts["control-1"]
    with pytest.raises(ApertusError, match=r"no measured exposure count .*control-1"):
        measure(
            model_dir,
            world["probes_jsonl"],
            prefix_tokens=PREFIX,
            suffix_tokens=SUFFIX,
            exposures_by_probe=counts,
        )


def test_probes_too_short_for_prompt_and_suffix_are_refused(world, random_model):
    _, model_dir = random_model
    with pytest.raises(ApertusError, match=r"probe-0 has \d+ tokens, fewer than .* = 1000"):
        measure(model_dir, world["probes_jsonl"], prefix_tokens=500, suffix_tokens=500)


def train_on(world, text, *, steps, goldfish=None, seed=0):
    """A tiny model trained on one document (full-sequence causal LM loss, Adam), optionally with
    Goldfish `(k, h)` dropping labels as the pretraining loader does."""
    torch.manual_seed(seed)
    model = ApertusForCausalLM(tiny_config(len(world["tokenizer"])))
    ids = torch.tensor(encode_documents(world["tokenizer"], [text]))
    labels = ids[:, 1:].clone()
    if goldfish is not None:
        labels[goldfish_mask(labels, k=goldfish[0], h=goldfish[1])] = -100
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    for _ in range(steps):
        logits = model(ids[:, :-1]).logits
        loss = torch.nn.functional.cross_entropy(
            logits.reshape(-1, logits.shape[-1]), labels.reshape(-1), ignore_index=-100
        )
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return model.eval(), labels


def test_a_memorized_probe_scores_one_and_controls_stay_low(world, tmp_path):
    probe = world["probes"][0]
    model, _ = train_on(world, probe.text, steps=150)
    directory = save_model(model, world["tokenizer"], tmp_path / "memorized")
    result = measure(directory, world["probes_jsonl"], prefix_tokens=PREFIX, suffix_tokens=SUFFIX)
    rows = {r["probe_id"]: r for r in result["probes"]}
    assert rows[probe.probe_id]["rouge_l"] == 1.0
    assert rows[probe.probe_id]["exact_match_prefix"] == SUFFIX
    for control in ("control-0", "control-1"):
        assert rows[control]["rouge_l"] < 0.5
        assert rows[control]["exact_match_prefix"] < SUFFIX // 2


def test_goldfish_dropped_tokens_break_the_verbatim_copy(world, tmp_path):
    probe = world["probes"][0]
    k, h = 4, 3
    model, labels = train_on(world, probe.text, steps=150, goldfish=(k, h))
    # Label j is body token j (labels start after <s>), so the suffix is labels PREFIX...
    dropped = np.flatnonzero((labels[0] == -100).numpy()[PREFIX : PREFIX + SUFFIX])
    assert len(dropped) > 0  # precondition: Goldfish drops a token of the suffix
    directory = save_model(model, world["tokenizer"], tmp_path / "goldfish")
    row = measure(directory, world["probes_jsonl"], prefix_tokens=PREFIX, suffix_tokens=SUFFIX)[
        "probes"
    ][0]
    assert row["probe_id"] == probe.probe_id
    # The first never-trained token is where the copy breaks (or earlier).
    assert row["exact_match_prefix"] <= dropped[0] < SUFFIX
    assert row["rouge_l"] < 1.0


# -- exposures -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def phase(world):
    """The probes tokenized by the tokenize stage's own shard writer, and a phase taking every
    copy once ("all") beside an ordinary source, as the default pipeline plans it."""
    from apertus.data.sample_text import en
    from apertus.tokenize.shards import write_token_shards

    root = world["root"]
    other = root / "other_corpus" / "web" / "en"
    other.mkdir(parents=True)
    rows = [
        {"id": f"web-{i}", "text": s, "source": "web", "language": "en"}
        for i, s in enumerate(s for ss in en.TOPICS.values() for s in ss)
    ]
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.Table.from_pylist(rows), other / "00000.parquet")
    shard_dirs = {}
    for source, corpus in (("probes", root / "probes"), ("web", root / "other_corpus")):
        shard_dirs[source] = root / "shards" / source
        write_token_shards(
            corpus,
            source,
            world["tokenizer_dir"],
            shard_dirs[source],
            exclude_ids=set(),
            seed=0,
            logging_dir=root / "logs" / source,
        )
    record = build_phase_index(
        PhaseSpec("p", 6_000, 1, {"probes": "all", "web": None}), shard_dirs, root / "phase"
    )
    return root / "phase", record


def test_exposure_counts_find_every_planted_copy(world, phase):
    phase_dir, _ = phase
    counts = exposure_counts([phase_dir], world["probes_jsonl"], world["tokenizer_dir"])
    assert counts == {p.probe_id: p.exposures for p in world["probes"]}
    # A phase read twice (a later stage re-reading it) trains on its copies twice.
    twice = exposure_counts([phase_dir, phase_dir], world["probes_jsonl"], world["tokenizer_dir"])
    assert twice == {p.probe_id: 2 * p.exposures for p in world["probes"]}


def test_exposure_counts_stop_where_training_stopped(world, phase):
    phase_dir, _ = phase
    dataset = PhaseDataset(phase_dir)
    ids = {
        tuple(encode_documents(world["tokenizer"], [p.text])[0]): p.probe_id
        for p in world["probes"]
    }
    limit = dataset.total_tokens // 2
    # Independent count: walk the plan, keep documents that end within the limit.
    expected = dict.fromkeys((p.probe_id for p in world["probes"]), 0)
    end = 0
    for doc in dataset.iter_documents():
        end += len(doc)
        if end <= limit and tuple(doc.tolist()) in ids:
            expected[ids[tuple(doc.tolist())]] += 1
    counts = exposure_counts([(phase_dir, limit)], world["probes_jsonl"], world["tokenizer_dir"])
    assert counts == expected
    assert 0 < sum(counts.values()) < sum(p.exposures for p in world["probes"])


# The keys of a run spec (apertus.train.run_spec) that the memorization evaluation does not read.
SPEC_REQUIRED = {"flavor": "debug", "micro_batch": 1, "lr": {"peak": 1e-3}}


def test_trained_stream_follows_the_run_spec(tmp_path):
    spec = {
        **SPEC_REQUIRED,
        "phase_dir": "phases/p2",
        "seq_len": 8,
        "global_batch": 4,
        "steps": 10,
        "checkpoint": {"initial": "/ckpt/step-3", "initial_mode": "continue"},
    }
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    # Steps 3..9 of the schedule, 4 windows of 9 tokens each; the phase relative to the run.
    assert trained_stream(tmp_path) == (tmp_path / "phases" / "p2", 7 * 4 * 9)
    spec["checkpoint"]["initial_mode"] = "weights"  # a new stage starts at its phase's start
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    assert trained_stream(tmp_path)[1] == 10 * 4 * 9
    (tmp_path / "spec.json").unlink()
    with pytest.raises(ApertusError, match=r"spec\.json: not found"):
        trained_stream(tmp_path)


def test_trained_stream_reads_a_spec_written_before_paths_were_relative(tmp_path, monkeypatch):
    spec = {**SPEC_REQUIRED, "phase_dir": "phases/p1", "seq_len": 8, "global_batch": 4}
    run = tmp_path / "run"
    run.mkdir()
    (run / "spec.json").write_text(json.dumps({**spec, "steps": 2}))
    (tmp_path / "phases" / "p1").mkdir(parents=True)
    (tmp_path / "phases" / "p1" / "phase.json").write_text("{}")
    monkeypatch.chdir(tmp_path)  # the old form: relative to the directory the stage ran in
    assert trained_stream(run) == (Path("phases/p1"), 2 * 4 * 9)


# -- plot and entry point ------------------------------------------------------------------------


def test_entry_point_writes_results_plot_and_manifest(world, random_model, phase, tmp_path):
    _, model_dir = random_model
    phase_dir, _ = phase
    other = tmp_path / "other.json"
    base = {
        "prefix_tokens": PREFIX,
        "suffix_tokens": SUFFIX,
        "batch_size": 4,
        "device": "cpu",
        "label": "goldfish",
    }
    arguments = [
        "--manifest",
        str(tmp_path / "m.json"),
        "--model",
        str(model_dir),
        "--probes",
        str(world["probes_jsonl"]),
        "--tokenizer",
        str(world["tokenizer_dir"]),
        "--phases",
        str(phase_dir),
        "--output",
        str(tmp_path / "out"),
    ]
    main(["--config", json.dumps({"memorization": base}), *arguments])
    result = json.loads((tmp_path / "out" / "memorization.json").read_text())
    assert result["exposures_from"] == "measured" and result["label"] == "goldfish"
    assert {r["exposures"] for r in result["curve"]} == {0, 1, 3}
    assert (tmp_path / "out" / "memorization.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert json.loads((tmp_path / "m.json").read_text())["summary"]["exposure_mismatches"] == 0
    # A second run's curve beside this one.
    shutil.copy(tmp_path / "out" / "memorization.json", other)
    main(
        [
            "--config",
            json.dumps({"memorization": {**base, "label": "no goldfish"}}),
            *[a if a != str(tmp_path / "out") else str(tmp_path / "out2") for a in arguments],
            "--compare",
            f"goldfish={other}",
        ]
    )
    assert (tmp_path / "out2" / "memorization.png").stat().st_size > 0
    with pytest.raises(ApertusError, match="unknown key"):
        main(["--config", json.dumps({"memorization": {"prefix": 3}}), *arguments])


def test_entry_point_counts_what_the_runs_trained_on(world, random_model, phase, tmp_path):
    _, model_dir = random_model
    phase_dir, _ = phase
    run = tmp_path / "run"
    run.mkdir()
    spec = {
        **SPEC_REQUIRED,
        "phase_dir": str(phase_dir),
        "seq_len": 15,
        "global_batch": 2,
        "steps": 60,
    }
    (run / "spec.json").write_text(json.dumps(spec))
    common = [
        "--config",
        json.dumps(
            {"prefix_tokens": PREFIX, "suffix_tokens": SUFFIX, "device": "cpu", "label": "this run"}
        ),
        "--manifest",
        str(tmp_path / "m.json"),
        "--model",
        str(model_dir),
        "--probes",
        str(world["probes_jsonl"]),
        "--tokenizer",
        str(world["tokenizer_dir"]),
        "--output",
        str(tmp_path / "out"),
    ]
    main([*common, "--runs", str(run)])
    result = json.loads((tmp_path / "out" / "memorization.json").read_text())
    recorded = os.path.relpath(phase_dir, tmp_path / "out")  # relative to memorization.json
    assert result["phases"] == [{"phase": recorded, "tokens": 60 * 2 * 16}]
    expected = exposure_counts(
        [(phase_dir, 60 * 2 * 16)], world["probes_jsonl"], world["tokenizer_dir"]
    )
    assert {r["probe_id"]: r["exposures"] for r in result["probes"]} == expected
    with pytest.raises(ApertusError, match=r"either --phases .* or --runs"):
        main([*common, "--runs", str(run), "--phases", str(phase_dir)])
    with pytest.raises(ApertusError, match="used twice"):
        main([*common, "--runs", str(run), "--compare", "this run=x.json"])


def test_plot_curves_draws_each_run(tmp_path):
    def result(level):
        return {
            "suffix_tokens": 10,
            "curve": [
                {
                    "exposures": e,
                    "rouge_l_mean": level * e / 4,
                    "rouge_l_min": 0.0,
                    "rouge_l_max": 1.0,
                    "exact_match_prefix_mean": e,
                }
                for e in (0, 1, 2, 4)
            ],
            "control": {"rouge_l_mean": 0.0, "exact_match_prefix_mean": 0.0},
        }

    path = plot_curves({"a": result(1.0), "b": result(0.5)}, tmp_path / "plot.png")
    assert path.read_bytes()[:4] == b"\x89PNG"
    with pytest.raises(ApertusError, match="cannot read memorization results"):
        plot_curves({"a": tmp_path / "missing.json"}, tmp_path / "x.png")


def test_read_probes_reads_what_the_data_stage_wrote(world):
    assert read_probes(world["probes_jsonl"]) == world["probes"]


def test_plot_command_compares_two_runs(tmp_path, capsys):
    """`python -m apertus.evaluate.memorization plot`: the Goldfish / no-Goldfish comparison."""
    from apertus.evaluate.memorization import plot_main

    def result(scale: float) -> dict:
        curve = [
            {
                "exposures": n,
                "rouge_l_mean": scale * n / 64,
                "rouge_l_min": 0.0,
                "rouge_l_max": scale,
                "exact_match_prefix_mean": scale * n / 4,
                "probes": 2,
            }
            for n in (0, 1, 4, 16, 64)
        ]
        return {"curve": curve, "control": curve[0], "suffix_tokens": 16}

    paths = {}
    for label, scale in (("goldfish", 0.2), ("no-goldfish", 0.9)):
        paths[label] = tmp_path / f"{label}.json"
        paths[label].write_text(json.dumps(result(scale)))
    out = tmp_path / "both.png"
    plot_main([f"--curve={k}={v}" for k, v in paths.items()] + ["--output", str(out)])
    assert out.stat().st_size > 10_000
    lines = capsys.readouterr().out.splitlines()
    assert "no-goldfish\t64\t0.9000\t14.40" in lines and "goldfish\t64\t0.2000\t3.20" in lines
    with pytest.raises(ApertusError, match="LABEL=PATH"):
        plot_main(["--curve", "nolabel", "--output", str(out)])
    with pytest.raises(ApertusError, match="cannot read"):
        plot_main(["--curve", f"x={tmp_path / 'missing.json'}", "--output", str(out)])
