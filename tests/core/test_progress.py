"""Progress with an ETA: the log line and its parser, rate limiting, terminal redraws, reading
the last state of a log, cheap totals, and the long steps that write it (datatrove pipelines of
the data and tokenization stages, the torchtitan trainer's metrics)."""

from __future__ import annotations

import dataclasses
import gzip
import io
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from apertus.core.progress import (
    PROGRESS_EVERY_ENV,
    Progress,
    ProgressState,
    count_records,
    format_duration,
    format_progress,
    last_progress,
    parse_progress,
)


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def lines_of(text: str) -> list[ProgressState]:
    states = [parse_progress(line) for line in text.splitlines()]
    return [s for s in states if s is not None]


# ---------------------------------------------------------------------------------------------
# The line


def test_written_line_parses_back_to_the_same_state():
    clock, out = FakeClock(), io.StringIO()
    progress = Progress(290, "training phase1", "steps", out, every_s=0, clock=clock)
    clock.now += 65.4
    progress.update(120, loss=6.1234, tokens_per_s=2160.4, epoch=2, note="two words")
    line = out.getvalue().splitlines()[-1]
    assert line.startswith("progress: training phase1 120/290 steps (41.4%) 1.83 steps/s ")
    assert "elapsed 0:01:05 ETA 0:01:33" in line
    state = parse_progress(line)
    assert (state.what, state.done, state.total, state.unit) == (
        "training phase1",
        120,
        290,
        "steps",
    )
    assert state.fields == {"loss": 6.123, "tokens_per_s": 2160.4, "epoch": 2, "note": "two_words"}
    assert state.rate == pytest.approx(120 / 65.4, rel=1e-2)
    assert state.elapsed_s == 65 and state.eta_s == pytest.approx(170 / (120 / 65.4), abs=1)
    assert state.percent == pytest.approx(41.4, abs=0.05)
    # format_progress of a parsed state gives the same line back
    assert format_progress(state) == line


def test_a_name_with_digits_and_slashes_still_parses():
    state = ProgressState("sampling qrpo (T=1) 2/3", 7, 10, "completions", 0.5, 14.0, 6.0, {})
    back = parse_progress("2026-11-21 18:30:22 INFO apertus: " + format_progress(state))
    assert back == state


def test_durations_are_hours_minutes_seconds():
    assert format_duration(0) == "0:00:00"
    assert format_duration(59.6) == "0:01:00"
    assert format_duration(27 * 3600 + 61) == "27:01:01"
    assert format_duration(-5) == "0:00:00"
    with pytest.raises(ValueError, match="finite"):
        format_duration(float("inf"))


@pytest.mark.parametrize(
    "line",
    [
        "progress: step 15/30 (50.0%), ETA 0:00:10",  # the trainer's earlier format
        "Reading input file web.jsonl.gz, 1/1",
        "progress: filtering 12 documents fast documents/s elapsed 0:00:01",
        "",
    ],
)
def test_other_lines_are_not_progress(line):
    assert parse_progress(line) is None


def test_without_a_total_there_is_no_percentage_and_no_eta():
    clock, out = FakeClock(), io.StringIO()
    with Progress(None, "filtering web-0", "documents", out, every_s=30, clock=clock) as p:
        for _ in range(500):
            clock.now += 0.01
            p.update()
    last = out.getvalue().splitlines()[-1]
    assert "%" not in last and "ETA" not in last
    state = parse_progress(last)
    assert (state.done, state.total, state.eta_s) == (500, None, None)
    assert state.rate == 100


# ---------------------------------------------------------------------------------------------
# When lines are written


def test_log_lines_are_written_at_most_every_interval_plus_the_first_and_the_last():
    clock, out = FakeClock(), io.StringIO()
    with Progress(100, "memorization ctx256", "probes", out, every_s=30, clock=clock) as p:
        for _ in range(100):
            clock.now += 1
            p.update()
    states = lines_of(out.getvalue())
    assert [s.done for s in states] == [1, 31, 61, 91, 100]
    assert len(out.getvalue().splitlines()) == 5  # one line each, nothing else
    assert states[-1].eta_s == 0 and states[-1].percent == 100


def test_interval_comes_from_the_environment(monkeypatch):
    monkeypatch.setenv(PROGRESS_EVERY_ENV, "0")
    out = io.StringIO()
    with Progress(3, "tokenizing web", "documents", out, clock=FakeClock()) as p:
        for _ in range(3):
            p.update()
    assert [s.done for s in lines_of(out.getvalue())] == [1, 2, 3, 3]
    monkeypatch.setenv(PROGRESS_EVERY_ENV, "soon")
    with pytest.raises(ValueError, match=PROGRESS_EVERY_ENV):
        Progress(3, "x", stream=io.StringIO())


def test_eta_counts_only_this_runs_units_after_a_resume():
    clock, out = FakeClock(), io.StringIO()
    progress = Progress(200, "training phase2", "steps", out, every_s=0, initial=100, clock=clock)
    clock.now += 10
    progress.update(20)
    state = progress.state()
    assert state.rate == 2 and state.eta_s == 40 and state.done == 120


def test_a_failing_stream_never_stops_the_work():
    class Broken(io.StringIO):
        def write(self, text):
            raise BrokenPipeError

    with Progress(5, "sampling sft (greedy)", "completions", Broken(), every_s=0) as p:
        for _ in range(5):
            p.update()
    assert p.done == 5


def test_a_terminal_gets_one_line_redrawn_in_place_and_a_newline_at_the_end():
    clock, term = FakeClock(), Terminal()
    with Progress(40, "sampling qrpo (T=1)", "completions", term, every_s=30, clock=clock) as p:
        for _ in range(40):
            clock.now += 0.05
            p.update()
            assert "\n" not in term.getvalue()  # never a new line while running
    text = term.getvalue()
    assert text.startswith("\r") and text.endswith("\n") and text.count("\n") == 1
    # every_s is for logs; a terminal is redrawn a few times a second (40 updates in 2 s)
    assert 8 <= text.count("\r") <= 12
    assert text.count("\r") == text.count("\x1b[K")
    assert parse_progress(text.rsplit("\r", 1)[1]).done == 40


# ---------------------------------------------------------------------------------------------
# The last state of a log


def test_last_progress_of_a_log_with_text_redraws_and_a_long_tail(tmp_path):
    log = tmp_path / "filter.log"
    first = ProgressState("filtering web-0", 10, 100, "documents", 5.0, 2.0, 18.0, {})
    redraws = [dataclasses.replace(first, done=d) for d in (20, 30, 40)]
    with log.open("w", encoding="utf-8", newline="") as f:
        f.write("2026-11-21 18:30:22 INFO apertus: data/filter:web-0 started\n")
        f.write(format_progress(first) + "\n")
        f.write("".join("\r" + format_progress(s) + "\x1b[K" for s in redraws))
        f.write("\n" + "📉 Stats: {doc_len: 1443200 [min=100, max=2362]}\n" * 5000)
    assert log.stat().st_size > 3 * (1 << 16)  # several of the blocks it reads
    assert last_progress(log) == redraws[-1]
    assert last_progress(log, max_bytes=1 << 16) is None  # not within the bytes it may read


def test_last_progress_without_progress_is_none(tmp_path):
    assert last_progress(tmp_path / "missing.log") is None
    (tmp_path / "empty.log").write_text("")
    assert last_progress(tmp_path / "empty.log") is None
    (tmp_path / "plain.log").write_text("started\nprogress: of a kind\ndone\n")
    assert last_progress(tmp_path / "plain.log") is None


def test_last_progress_reads_a_log_written_by_progress(tmp_path):
    log = tmp_path / "step.log"
    with log.open("w") as f, Progress(3, "training qrpo", "steps", f, every_s=0) as p:
        f.write("a line of the step\n")
        p.update(loss=1.5)
        p.update(2, loss=0.25)
        f.flush()
        assert last_progress(log).fields == {"loss": 0.25}
    state = last_progress(log)
    assert (state.done, state.total, state.eta_s) == (3, 3, 0)


# ---------------------------------------------------------------------------------------------
# Cheap totals


def write_lines(path: Path, n: int, *, chars: int = 10, trailing_newline: bool = True) -> None:
    """`n` lines of 22 + `chars` bytes."""
    text = "\n".join(json.dumps({"id": i % 10, "text": "x" * chars}) for i in range(n))
    text += "\n" if trailing_newline else ""
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "wt", encoding="utf-8") as f:
        f.write(text)


def test_count_records_of_parquet_and_json_lines(tmp_path):
    pq.write_table(pa.table({"text": [f"t{i}" for i in range(7)]}), tmp_path / "a.parquet")
    write_lines(tmp_path / "b.jsonl.gz", 11)
    write_lines(tmp_path / "c.jsonl", 5, trailing_newline=False)
    paths = [tmp_path / n for n in ("a.parquet", "b.jsonl.gz", "c.jsonl")]
    assert count_records(paths) == 7 + 11 + 5
    assert count_records([]) == 0
    (tmp_path / "d.warc.gz").write_bytes(b"")
    assert count_records([*paths, tmp_path / "d.warc.gz"]) is None  # no cheap count
    assert count_records([tmp_path / "missing.jsonl"]) is None


def test_count_records_extrapolates_past_its_budget_by_file_size(tmp_path):
    write_lines(tmp_path / "a.jsonl", 2000, chars=10)
    for name in ("b.jsonl", "c.jsonl"):  # the same size as a.jsonl in half as many lines
        write_lines(tmp_path / name, 1000, chars=42)
    paths = sorted(tmp_path.glob("*.jsonl"))
    assert len({p.stat().st_size for p in paths}) == 1
    assert count_records(paths) == 4000
    # a.jsonl is read (one chunk), then the budget is spent: b and c are estimated from it.
    assert count_records(paths, budget_bytes=1000) == 6000


# ---------------------------------------------------------------------------------------------
# The long steps write it


def test_data_filter_pipeline_shows_documents_of_a_known_total_and_changes_nothing(tmp_path, capfd):
    """The real `data_filter` pipeline on two files in two tasks: each task's line counts its
    documents out of its file's, and the outputs and datatrove's stats are those of the same
    pipeline without the progress block."""
    from apertus.core.config import load_config
    from apertus.data.config import DataConfig
    from apertus.data.pipeline import DocumentProgress, filter_steps, run_pipeline
    from apertus.data.sample_corpus import make_sample_corpus

    raw = load_config()["data"]
    for section in ("robots", "quality", "toxicity"):
        raw[section]["enabled"] = False
    cfg = DataConfig.from_dict(raw)
    make_sample_corpus(tmp_path / "sample", seed=1, target_bytes=50_000)
    with gzip.open(tmp_path / "sample" / "web.jsonl.gz", "rt", encoding="utf-8") as f:
        lines = f.readlines()[:42]
    inputs = tmp_path / "in"
    inputs.mkdir()
    for name, part in (("a.jsonl.gz", lines[:30]), ("b.jsonl.gz", lines[30:])):
        with gzip.open(inputs / name, "wt", encoding="utf-8") as f:
            f.writelines(part)
    source = dataclasses.replace(cfg.source("web"), path=str(inputs), glob="*.jsonl.gz")

    def run(name: str, with_progress: bool) -> tuple[dict, list]:
        steps = filter_steps(
            cfg,
            source,
            snapshot=None,
            classifiers={},
            output_dir=tmp_path / name / "out",
            funnel_dir=tmp_path / name / "funnel",
            job="web-0",
        )
        assert isinstance(steps[1], DocumentProgress)  # right after the reader
        if not with_progress:
            steps.pop(1)
        run_pipeline(steps, logging_dir=tmp_path / name / "logs", tasks=2)
        outputs = {}
        for path in sorted((tmp_path / name / "out").rglob("*.jsonl.gz")):
            with gzip.open(path, "rt") as f:
                outputs[str(path.relative_to(tmp_path / name))] = f.read()
        stats = json.loads((tmp_path / name / "logs" / "stats.json").read_text())
        return outputs, [(entry["name"], entry["stats"]) for entry in stats]

    capfd.readouterr()
    shown = run("shown", with_progress=True)
    states = lines_of(capfd.readouterr().err)
    assert run("plain", with_progress=False) == shown
    assert shown[0]  # documents were written
    final = {s.what: s for s in states}  # the last line of each task
    assert {w: (s.done, s.total, s.unit) for w, s in final.items()} == {
        "filtering web-0 (task 1 of 2)": (30, 30, "documents"),
        "filtering web-0 (task 2 of 2)": (12, 12, "documents"),
    }
    assert all(s.eta_s is not None for s in states)


def test_tokenization_shows_documents_read_out_of_the_corpus_rows(tmp_path, capfd):
    from apertus.tokenize.shards import write_token_shards
    from tests.tokenize.test_shards import (
        bpe_tokenizer,
        corpus_row,
        save_tokenizer,
        write_jsonl_gz,
        write_parquet,
    )

    rows = [
        corpus_row(
            {"id": f"d{i}", "text": f"Grüezi mitenand, Dokument {i}.", "language": "de"},
            "web",
            "web",
        )
        for i in range(25)
    ]
    corpus = tmp_path / "corpus"
    write_parquet(corpus / "web" / "de" / "00000.parquet", rows[:15])
    write_jsonl_gz(corpus / "web" / "en" / "00000.jsonl.gz", rows[15:])
    tokenizer = save_tokenizer(bpe_tokenizer([r["text"] for r in rows]), tmp_path / "tok")
    capfd.readouterr()
    summary = write_token_shards(
        corpus,
        "web",
        tokenizer,
        tmp_path / "shards",
        exclude_ids={"d3"},
        seed=1,
        logging_dir=tmp_path / "logs",
    )
    state = lines_of(capfd.readouterr().err)[-1]
    assert (state.what, state.done, state.total) == ("tokenizing web", 25, 25)
    assert summary["documents_read"] == 25 and summary["documents"] == 24


def test_trainer_metrics_write_training_progress_with_loss_and_eta(monkeypatch, capsys):
    """`ApertusMetrics` as the trainer calls it each step (its torchtitan parts left out)."""
    from apertus.train.metrics import ApertusMetrics, run_name

    assert run_name("/w/pretrain/_work/phase1-0123456789abcdef/out") == "phase1"
    assert run_name("/tmp/run/out") == "run"
    monkeypatch.setenv(PROGRESS_EVERY_ENV, "0")
    metrics = object.__new__(ApertusMetrics)
    metrics.config = ApertusMetrics.Config(total_steps=4)
    metrics.run_name = "phase1"
    metrics.ntokens_since_last_log = 0
    eta = [metrics._progress(step, loss=6.0 - step) for step in (1, 2, 3, 4)]
    metrics.progress_line.close()
    assert eta[0] == {} and all(e["eta_s"] >= 0 for e in eta[1:]) and eta[-1]["eta_s"] == 0
    states = lines_of(capsys.readouterr().err)
    assert [s.done for s in states] == [1, 2, 3, 4, 4]
    assert states[-1].what == "training phase1" and states[-1].unit == "steps"
    assert states[-1].total == 4 and states[-1].fields == {"loss": 2}
