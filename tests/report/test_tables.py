"""The report's tables and figures from small hand-made stage outputs: every number comes
from the files it is given, malformed inputs are named, and the README's DAG diagram is the
workflow's."""

import json

import numpy as np
import pytest

from apertus.core import ApertusError
from apertus.data.pii import PIIFormatter
from apertus.data.robots import RobotsFilter
from apertus.report import figures, rulegraph, tables
from apertus.report.html import Table, render_page


def filter_manifest(**robots):
    return {"summary": {"stats": {f"🔻 - FILTER: {RobotsFilter.name}": robots}}}


def test_robots_tables_sum_shards_per_source_and_read_languages_from_the_funnel():
    manifests = [
        ("web", filter_manifest(total=10, allowed=5, no_robots=3, dropped=2, disallowed_GPTBot=2)),
        ("web", filter_manifest(total=4, allowed=4, no_robots=0, dropped=0)),
        ("edu", filter_manifest(total=3, allowed=0, no_robots=2, dropped=1, disallowed_CCBot=1)),
    ]
    funnel = {
        "languages": {
            "de": [
                {"step": "read", "documents": 9, "characters": 900},
                {"step": "robots", "removed_documents": 2, "removed_characters": 150},
            ]
        }
    }
    checked, agents, languages = tables.robots_tables(manifests, funnel)
    assert checked.rows == [["edu", 3, 0, 2, 1], ["web", 14, 9, 3, 2]]
    assert agents.columns == ["agent", "edu", "web"]
    assert agents.rows == [["CCBot", 1, 0], ["GPTBot", 0, 2]]
    assert languages.rows == [["de", 9, 2, 150]]


def test_pii_table_lists_every_replaced_kind():
    manifest = {
        "summary": {
            "stats": {
                f"✂️ - FORMAT: {PIIFormatter.name}": {
                    "total": 50,
                    "documents_with_pii": 7,
                    "exempt": 3,
                    "replaced_email": 4,
                    "replaced_iban": 2,
                }
            }
        }
    }
    rows = dict(map(tuple, tables.pii_table(manifest).rows))
    assert rows == {
        "documents written": 50,
        "documents with PII": 7,
        "documents exempt (code, math)": 3,
        "email replaced": 4,
        "iban replaced": 2,
    }


def phase(name, languages, sources):
    return {
        "name": name,
        "tokens_planned": sum(v["tokens_planned"] for v in languages.values()),
        "languages": languages,
        "sources": sources,
    }


def test_tokens_table_and_plot_per_phase_and_language(tmp_path):
    one = phase(
        "phase1",
        {"de": {"documents_planned": 2, "tokens_planned": 300}, "en": {"tokens_planned": 700}},
        [{"name": "web", "weight": None, "share": 1.0, "epochs": 1,
          "documents_planned": 5, "tokens_planned": 1000}],
    )  # fmt: skip
    two = phase("phase2", {"en": {"documents_planned": 1, "tokens_planned": 50}}, [])
    per_language, per_source = tables.tokens_table([("phase1", one), ("phase2", two)])
    assert per_language.rows == [
        ["de", 300, 0],
        ["en", 700, 50],
        ["all", 1000, 50],
        ["non-English share", 0.3, 0.0],
    ]
    assert per_source.rows == [["phase1", "web", "-", 1.0, 1, 5, 1000]]
    drawn = figures.plot_tokens(
        [("phase1", one["languages"]), ("phase2", two["languages"])], tmp_path / "t.png"
    )
    assert drawn == {"phase1": {"de": 300, "en": 700}, "phase2": {"de": 0, "en": 50}}
    assert (tmp_path / "t.png").read_bytes()[:4] == b"\x89PNG"


def test_a_phase_without_language_counts_asks_to_rerun_tokenization():
    with pytest.raises(ApertusError, match="re-run it"):
        tables.tokens_table([("phase1", {"sources": [], "tokens_planned": 1})])


def test_scores_table_reads_the_csv_as_numbers(tmp_path):
    (tmp_path / "scores.csv").write_text("checkpoint,a/acc,b/ppl\nphase1,0.5,\nqrpo,0.75,3.5\n")
    table = tables.scores_table(tmp_path / "scores.csv")
    assert table.columns == ["checkpoint", "a/acc", "b/ppl"]
    assert table.rows == [["phase1", 0.5, ""], ["qrpo", 0.75, 3.5]]


def reward_report():
    model = {"mean": 0.1, "per_language": {"de": {"mean": 0.2}}}
    aligned = {"mean": 0.15, "per_language": {"de": {"mean": 0.3}, "en": {"mean": 0.1}}}
    comparison = {"qrpo": {"mean_delta": 0.05, "delta_stderr": 0.01, "win_rate": 0.6}}
    return {
        "reward": {"kind": "chrf"},
        "prompt_count": 20,
        "baseline": "sft",
        "order": ["sft", "qrpo"],
        "models": {"sft": model, "qrpo": aligned},
        "comparison": comparison,
        "sampled": {
            "n": 4,
            "temperature": 1.0,
            "models": {"sft": model, "qrpo": aligned},
            "comparison": comparison,
        },
    }


def test_reward_tables_and_plot(tmp_path):
    sampled, greedy = tables.reward_tables(reward_report())
    assert "4 samples per prompt" in sampled.title
    assert greedy.rows == [["sft", 0.1, None, None, None], ["qrpo", 0.15, 0.05, 0.01, 0.6]]
    figures.plot_rewards(reward_report(), tmp_path / "r.png")
    assert (tmp_path / "r.png").stat().st_size > 1000


def test_manifest_tables_summarise_each_step():
    manifest = {
        "step": "tokenizer",
        "started": "2026-01-02T03:04:05+00:00",
        "seconds": 1.5,
        "config_sha256": "ab" * 32,
        "code": {"commit": "0123456789abcdef", "dirty": True},
        "inputs": [{"path": "x"}],
        "outputs": [{"path": "d", "size": 30, "files": {"a": {}, "b": {}}}, {"size": 5}],
        "summary": {"documents": 3, "files": {"a": "sha"}, "long": "x" * 200, "nested": {"k": 1}},
    }
    steps, facts = tables.manifest_tables(
        "tokenize", [("tokenize/tokenizer.manifest.json", manifest)]
    )
    assert steps.rows == [
        ["tokenizer", "tokenize/tokenizer.manifest.json", "2026-01-02 03:04:05", 1.5,
         "abababababab", "0123456789 (dirty)", 1, 3, 35, "-"],
    ]  # fmt: skip
    assert facts.rows == [["documents", 3], ["files.a", "sha"], ["nested.k", 1]]


def test_html_page_escapes_and_refuses_ragged_rows():
    page = render_page("<t>", [Table("a&b", ["x"], [["<script>"], [3]])])
    assert "&lt;script&gt;" in page and "<script>" not in page
    assert '<td class="num">3</td>' in page
    with pytest.raises(ValueError, match="2 columns"):
        render_page("t", [Table("t", ["x", "y"], [[1]])])


def test_training_metrics_keep_the_last_record_of_a_redone_step_and_name_a_bad_line(tmp_path):
    path = tmp_path / "metrics.jsonl"
    lines = [{"step": 1, "loss": 5.0}, {"step": 2, "loss": 4.0}, {"step": 2, "loss": 3.0}]
    path.write_text("".join(json.dumps(r) + "\n" for r in lines))
    assert [r["loss"] for r in figures.read_step_metrics(path)] == [5.0, 3.0]
    path.write_text('{"step": 1}\n{"step": \n')
    with pytest.raises(ApertusError, match=r"metrics.jsonl:2"):
        figures.read_step_metrics(path)


def test_moving_average_matches_a_convolution():
    values = np.random.default_rng(0).normal(size=50)
    window = 7
    ours = figures.moving_average(list(values), window)
    full = np.convolve(values, np.ones(window), mode="full")[: len(values)]
    counts = np.minimum(np.arange(1, len(values) + 1), window)
    np.testing.assert_allclose(ours, full / counts, rtol=1e-12)


def test_training_figure_draws_every_logged_metric(tmp_path):
    records = [
        {"step": s, "loss": 9 - s / 10, "lr": 1e-3, "grad_norm": 1.0 + s, "goldfish_fraction": 0.02}
        for s in range(1, 31)
    ]
    drawn = figures.plot_training(records, "t", tmp_path / "p.png", smoothing=5)
    assert drawn == {"loss": 30, "lr": 30, "grad_norm": 30, "goldfish_fraction": 30}
    qrpo = [{"step": s, "loss": 1.0, "lr": 1e-6, "grad_norm": 0.1, "quantile_reward": 0.5}
            for s in range(1, 4)]  # fmt: skip
    drawn = figures.plot_training(qrpo, "q", tmp_path / "q.png")
    assert drawn["quantile_reward"] == 3 and "goldfish_fraction" not in drawn


def test_rulegraph_reduction_keeps_reachability_and_drops_implied_collector_edges():
    dot = "\n".join(
        [
            '0[label = "all", color = "x"];',
            '1[label = "a_x", color = "x"];',
            '2[label = "b_y", color = "x"];',
            '3[label = "release", color = "x"];',
            "1 -> 2",
            "2 -> 3",
            "1 -> 3",
            "3 -> 0",
        ]
    )
    _, edges = rulegraph.parse_dot(dot)
    assert edges == {("a_x", "b_y"), ("b_y", "release"), ("a_x", "release"), ("release", "all")}
    text = rulegraph.diagram(dot)
    assert "a_x --> release" not in text and "a_x --> b_y" in text and "all" not in text
    # A cycle (a rule feeding itself through another) keeps its edges.
    cyclic = {("p", "q"), ("q", "p"), ("p", "r")}
    assert rulegraph.transitive_reduction(cyclic) == cyclic


def test_readme_diagram_is_the_workflows_rule_graph():
    """`apertus rulegraph --check`: regenerate with `apertus rulegraph` after changing rules."""
    text = rulegraph.README.read_text(encoding="utf-8")
    expected = rulegraph.replace_block(text, rulegraph.diagram(rulegraph.rulegraph_dot()))
    assert text == expected, "README.md's DAG diagram is stale: run `apertus rulegraph`"


def test_cost_tables_are_the_plan_of_the_config_beside_the_measured_wall_clock():
    from apertus.core.config import load_config
    from apertus.sizing.jobs import run_plan
    from apertus.sizing.render import HEADER, job_rows

    config = load_config(["config/presets/apertus-8b.yaml"])
    plan = run_plan(config)
    jobs, memory = tables.cost_tables(
        config, {"pretrain/phase1.manifest.json": {"seconds": 12.5}, "posttrain/sft.json": {}}
    )
    assert jobs.columns == [*HEADER, "measured wall (s)"]
    assert [row[:-1] for row in jobs.rows] == [list(row) for row in job_rows(plan)]
    measured = {row[0]: row[-1] for row in jobs.rows if row[-1] is not None}
    assert measured == {"pretrain phase1": 12.5}
    assert f"{plan.gpu_hours / 1e3:.2f}k GPU-hours" in jobs.note
    assert memory.rows[0][:2] == ["pretrain phase1", "loss backward"]
    assert "<td>pretrain phase1</td>" in render_page("cost", [jobs, memory])
