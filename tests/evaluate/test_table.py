"""The table across checkpoints: CSV, Markdown and plot from lm-eval results JSONs."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest

from apertus.core import ApertusError
from apertus.evaluate.stage import main
from apertus.evaluate.table import (
    read_scores,
    score_table,
    scores_from_results,
    table_csv,
    table_markdown,
    write_table,
)

# Checkpoint order on purpose not alphabetical: rows must keep it.
CHECKPOINTS = ("step-200", "step-50", "final")


def lm_eval_results(k: int, *, with_it: bool = True) -> dict:
    """Results as lm-eval 0.4.13 writes them, with values that depend on the checkpoint."""
    results = {
        "apertus_mc": {
            "alias": "apertus_mc",
            "acc,none": 0.25 + 0.1 * k,
            "acc_stderr,none": 0.04,
            "acc_norm,none": 0.3 + 0.05 * k,
            "acc_norm_stderr,none": 0.04,
            "sample_len": 16,
        },
        "apertus_mc_de": {"alias": "de", "acc,none": 0.2 + 0.1 * k, "acc_norm,none": 0.25},
        "apertus_mc_fr": {"alias": "fr", "acc,none": 0.3 + 0.1 * k, "acc_norm,none": 0.35},
        "apertus_ppl": {"alias": "apertus_ppl", "bits_per_byte,none": 5.0 - k},
        "apertus_ppl_de": {
            "alias": "de",
            "word_perplexity,none": 1000.0 / (k + 1),
            "word_perplexity_stderr,none": "N/A",
            "byte_perplexity,none": 30.0 - k,
            "bits_per_byte,none": 4.9 - k,
            "bits_per_byte_stderr,none": "N/A",
        },
        "gsm8k": {"exact_match,strict-match": 0.1 * k, "exact_match,flexible-extract": 0.2},
    }
    if with_it:
        results["apertus_ppl_it"] = {"alias": "it", "bits_per_byte,none": 5.1 - k}
    return {"results": results, "config": {"model": "hf"}}


@pytest.fixture
def runs():
    # "step-50" lacks Italian perplexity: its cell must stay empty.
    return [
        (name, scores_from_results(lm_eval_results(k, with_it=name != "step-50")))
        for k, name in enumerate(CHECKPOINTS)
    ]


def test_scores_keep_metrics_drop_stderr_alias_and_none_filter():
    scores = scores_from_results(lm_eval_results(1))
    assert scores["apertus_mc"] == {"acc": 0.35, "acc_norm": 0.35}
    assert scores["apertus_ppl_de"] == {
        "word_perplexity": 500.0,
        "byte_perplexity": 29.0,
        "bits_per_byte": 3.9000000000000004,
    }
    assert scores["gsm8k"] == {
        "exact_match[strict-match]": 0.1,
        "exact_match[flexible-extract]": 0.2,
    }


def test_csv_has_a_row_per_checkpoint_in_order_and_exact_values(runs):
    rows = list(csv.reader(io.StringIO(table_csv(score_table(runs)))))
    header = rows[0]
    assert header[0] == "checkpoint"
    assert header[1:6] == [
        "apertus_mc/acc",
        "apertus_mc/acc_norm",
        "apertus_mc_de/acc",
        "apertus_mc_de/acc_norm",
        "apertus_mc_fr/acc",
    ]
    assert header.index("apertus_ppl/bits_per_byte") < header.index(
        "apertus_ppl_de/word_perplexity"
    )
    assert header[header.index("apertus_ppl_de/word_perplexity") :][:3] == [
        "apertus_ppl_de/word_perplexity",
        "apertus_ppl_de/byte_perplexity",
        "apertus_ppl_de/bits_per_byte",
    ]
    assert not any("stderr" in h or "alias" in h for h in header)
    assert [r[0] for r in rows[1:]] == list(CHECKPOINTS)
    for k, row in enumerate(rows[1:]):
        cells = dict(zip(header, row, strict=True))
        assert float(cells["apertus_mc/acc"]) == 0.25 + 0.1 * k
        assert float(cells["apertus_ppl_de/word_perplexity"]) == 1000.0 / (k + 1)
        assert float(cells["gsm8k/exact_match[strict-match]"]) == 0.1 * k
        assert cells["apertus_ppl_it/bits_per_byte"] == ("" if k == 1 else repr(5.1 - k))


def test_markdown_table(runs):
    lines = table_markdown(score_table(runs, metrics=["acc", "bits_per_byte"])).splitlines()
    assert lines[0] == (
        "| checkpoint | apertus_mc/acc | apertus_mc_de/acc | apertus_mc_fr/acc | "
        "apertus_ppl/bits_per_byte | apertus_ppl_de/bits_per_byte | "
        "apertus_ppl_it/bits_per_byte |"
    )
    assert lines[1] == "|---|---:|---:|---:|---:|---:|---:|"
    assert lines[2] == "| step-200 | 0.25 | 0.2 | 0.3 | 5 | 4.9 | 5.1 |"
    assert lines[3] == "| step-50 | 0.35 | 0.3 | 0.4 | 4 | 3.9 |  |"
    assert lines[4] == "| final | 0.45 | 0.4 | 0.5 | 3 | 2.9 | 3.1 |"
    assert len(lines) == 5


def test_written_files_and_plot(runs, tmp_path):
    summary = write_table(runs, tmp_path, metrics=["acc"])
    assert summary["checkpoints"] == list(CHECKPOINTS)
    assert summary["columns"] == ["apertus_mc/acc", "apertus_mc_de/acc", "apertus_mc_fr/acc"]
    assert (tmp_path / "scores.csv").read_text().startswith("checkpoint,apertus_mc/acc,")
    assert (tmp_path / "scores.md").read_text().startswith("| checkpoint | apertus_mc/acc |")
    png = (tmp_path / "scores.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = int.from_bytes(png[16:20], "big"), int.from_bytes(png[20:24], "big")
    assert (width, height) == (1200, 450)
    # The plot shows bits per byte per language (and the mean) and cloze accuracy, whatever
    # the table kept; Italian has no point at step-50.
    plotted = summary["plotted"]
    assert plotted == {"bits_per_byte": ["de", "it", "mean"], "acc": ["de", "fr", "mean"]}


def test_plotted_values_are_the_table_values(runs, tmp_path):
    from apertus.evaluate.table import plot_scores

    drawn = plot_scores(score_table(runs), tmp_path / "p.png", "word_perplexity")
    assert drawn["word_perplexity"] == {"de": [(0, 1000.0), (1, 500.0), (2, 1000.0 / 3)]}
    assert drawn["acc"]["mean"] == [(k, 0.25 + 0.1 * k) for k in range(3)]
    assert drawn["acc"]["fr"] == [(k, 0.3 + 0.1 * k) for k in range(3)]
    drawn = plot_scores(score_table(runs), tmp_path / "p.png", "bits_per_byte")
    assert drawn["bits_per_byte"]["it"] == [(0, 5.1), (2, 5.1 - 2)]


def write_results(path: Path, data: dict) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data))
    return path


def test_read_scores_from_a_run_output_a_cli_output_or_a_file(tmp_path):
    full = scores_from_results(lm_eval_results(0))
    mc = {k: v for k, v in lm_eval_results(0)["results"].items() if k.startswith("apertus_mc")}
    rest = {k: v for k, v in lm_eval_results(0)["results"].items() if k not in mc}
    run = tmp_path / "run"
    write_results(run / "lm_eval" / "results-0.json", {"results": mc})
    write_results(run / "lm_eval" / "results-1.json", {"results": rest})
    assert read_scores(run) == full
    cli = tmp_path / "cli"
    write_results(cli / "results-0_2026-01-01T00-00-00.json", {"results": mc})
    write_results(cli / "results-1_2026-01-01T00-00-01.json", {"results": rest})
    assert read_scores(cli) == full
    one = write_results(tmp_path / "one.json", lm_eval_results(0))
    assert read_scores(one) == full


@pytest.mark.parametrize(
    "files, message",
    [
        ({"results-0.json": "{oops"}, "results-0.json: cannot read"),
        ({"results-0.json": "[1, 2]"}, "not an lm-eval results JSON"),
        ({"results-0.json": '{"config": {}}'}, "no 'results' section"),
        ({"other.json": "{}"}, "no lm-eval results JSON"),
        (
            {"results-0.json": '{"results": {"t": {"acc,none": 1}}}',
             "results-1.json": '{"results": {"t": {"acc,none": 0}}}'},
            "task t appears in more than one",
        ),
    ],
)  # fmt: skip
def test_unreadable_results_are_errors_naming_the_file(tmp_path, files, message):
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    with pytest.raises(ApertusError, match=message):
        read_scores(tmp_path)


def test_duplicate_checkpoint_names_are_refused():
    with pytest.raises(ApertusError, match="unique"):
        score_table([("a", {"t": {"acc": 1.0}}), ("a", {"t": {"acc": 0.5}})])


def memorization_result(k: int) -> dict:
    """The parts of apertus.evaluate.memorization's memorization.json the table reads."""
    rows = [
        {"exposures": n, "rouge_l_mean": r + 0.01 * k, "exact_match_prefix_mean": e + k}
        for n, r, e in ((1, 0.2, 1.0), (16, 0.4, 5.0), (128, 0.9, 40.0))
    ]
    control = {"exposures": 0, "rouge_l_mean": 0.18, "exact_match_prefix_mean": 0.5}
    return {"curve": rows, "control": control, "suffix_tokens": 48}


def test_memorization_scores_per_exposure_count(tmp_path):
    from apertus.evaluate.table import memorization_scores

    write_results(tmp_path / "m" / "memorization.json", memorization_result(1))
    assert memorization_scores(tmp_path / "m") == {
        "memorization": {
            "rouge_l@1": 0.2 + 0.01,
            "exact_match_prefix@1": 2.0,
            "rouge_l@16": 0.4 + 0.01,
            "exact_match_prefix@16": 6.0,
            "rouge_l@128": 0.9 + 0.01,
            "exact_match_prefix@128": 41.0,
            "rouge_l@0": 0.18,
            "exact_match_prefix@0": 0.5,
        }
    }
    write_results(tmp_path / "bad" / "memorization.json", {"curve": [{"exposures": 1}]})
    with pytest.raises(ApertusError, match=r"not a memorization\.json"):
        memorization_scores(tmp_path / "bad")


def test_table_step_writes_files_and_manifest(tmp_path):
    flags = []
    for k, name in enumerate(CHECKPOINTS):
        write_results(tmp_path / name / "lm_eval" / "results-0.json", lm_eval_results(k))
        flags += ["--results", f"{name}={tmp_path / name}"]  # one flag each, as the rule does
        if name != "step-50":
            write_results(tmp_path / f"mem-{name}" / "memorization.json", memorization_result(k))
            flags += ["--memorization", f"{name}={tmp_path / f'mem-{name}'}"]
    config = json.dumps({"table": {"metrics": ["acc", "rouge_l"]}})
    manifest = tmp_path / "table.manifest.json"
    main(["table", "--config", config, "--manifest", str(manifest), *flags,
          "--output", str(tmp_path / "table")])  # fmt: skip
    rows = list(csv.reader((tmp_path / "table" / "scores.csv").open()))
    assert [r[0] for r in rows[1:]] == list(CHECKPOINTS)
    assert rows[0][-4:] == [
        "memorization/rouge_l@0",
        "memorization/rouge_l@1",
        "memorization/rouge_l@16",
        "memorization/rouge_l@128",
    ]
    assert [r[-1] for r in rows[1:]] == [repr(0.9), "", repr(0.9 + 0.02)]
    assert json.loads(manifest.read_text())["summary"]["checkpoints"] == list(CHECKPOINTS)


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--results", "final"], "NAME=DIR"),
        (["--results", "a=x", "--memorization", "b=y"], "not among --results"),
        (["--results", "a=x", "--instruct", "b=y"], "--instruct names b, not among"),
        ([], "at least one checkpoint"),
    ],
)
def test_table_step_refuses_bad_arguments(tmp_path, flags, message):
    with pytest.raises(ApertusError, match=message):
        main(["table", "--config", "{}", "--manifest", str(tmp_path / "m.json"), *flags,
              "--output", str(tmp_path / "t")])  # fmt: skip


def instruct_results(k: int) -> dict:
    """An instruct-suite results JSON (lm-eval 0.4.13's keys for IFEval and GSM8K)."""
    results = {
        "ifeval": {
            "prompt_level_strict_acc,none": 0.3 + 0.1 * k,
            "prompt_level_strict_acc_stderr,none": 0.02,
            "inst_level_loose_acc,none": 0.5,
        },
        "gsm8k": {"exact_match,strict-match": 0.4 + 0.1 * k, "exact_match,flexible-extract": 0.5},
    }
    return {"results": results, "config": {"model": "hf"}}


def test_instruct_results_are_rows_of_their_own(tmp_path):
    from apertus.release.card import read_scores as card_scores

    flags = []
    for k, name in enumerate(CHECKPOINTS):
        write_results(tmp_path / name / "lm_eval" / "results-0.json", lm_eval_results(k))
        flags += ["--results", f"{name}={tmp_path / name}"]
    for k, name in enumerate(CHECKPOINTS[1:]):  # the chat models: the last two
        write_results(tmp_path / f"chat-{name}" / "lm_eval" / "results-0.json", instruct_results(k))
        flags += ["--instruct", f"{name}={tmp_path / f'chat-{name}'}"]
    manifest = tmp_path / "table.manifest.json"
    main(["table", "--config", "{}", "--manifest", str(manifest), *flags,
          "--output", str(tmp_path / "table")])  # fmt: skip
    rows = list(csv.DictReader((tmp_path / "table" / "scores.csv").open()))
    assert [r["checkpoint"] for r in rows] == [
        *CHECKPOINTS,
        "step-50 (instruct)",
        "final (instruct)",
    ]
    # gsm8k is in both suites: the base rows keep their own numbers, the instruct rows theirs.
    gsm8k = [r["gsm8k/exact_match[strict-match]"] for r in rows]
    assert gsm8k == [repr(0.0), repr(0.1), repr(0.2), repr(0.4), repr(0.5)]
    assert [r["ifeval/prompt_level_strict_acc"] for r in rows] == ["", "", "", "0.3", "0.4"]
    assert all(r["apertus_mc/acc"] == "" for r in rows[3:])
    summary = json.loads(manifest.read_text())["summary"]
    assert summary["checkpoints"] == list(CHECKPOINTS)
    assert summary["instruct_rows"] == ["step-50 (instruct)", "final (instruct)"]
    markdown = (tmp_path / "table" / "scores.md").read_text()
    base, instruct = markdown.split("## Instruct suite")
    assert base.startswith("## Base suite") and "ifeval" not in base
    assert "| final (instruct) |" in instruct and "apertus_mc" not in instruct
    # The release card's reader looks checkpoints up by name: their rows are the base suite's.
    card = card_scores(tmp_path / "table" / "scores.csv")
    assert card["final"]["apertus_mc/acc"] == pytest.approx(0.45)
    assert card["final"]["ifeval/prompt_level_strict_acc"] is None
