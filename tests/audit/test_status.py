"""`apertus status` from its parts: Snakemake's summary table grouped into steps, the
running / interrupted markers, stage states, and training's last step, loss and ETA. The
real thing, on a half-finished run while it trains and after a config change, is exercised in
tests/train/test_pretrain_stage.py::test_interrupted_pipeline_resumes_training_from_the_last_checkpoint
and on the default run below."""

import base64
import json

import pytest

from apertus.audit import status as st
from apertus.cli import run as cli

SUMMARY = "\n".join(
    [
        "Building DAG of jobs...",
        "output_file\tdate\trule\tlog-file(s)\tstatus\tplan",
        "R/data/sample/a.gz\tMon\tdata_sample\tR/logs/data/sample.log\tok\tno update",
        "R/data/sample/manifest.json\tMon\tdata_sample\tR/logs/data/sample.log\tok\tno update",
        "R/data/filtered/web/0\tMon\tdata_filter\tL1\tparams changed\tupdate pending",
        "R/data/filtered/web/0.manifest.json\tMon\tdata_filter\tL1\tparams changed\tupdate pending",
        "R/data/filtered/edu/0\t-\tdata_filter\t-\tmissing\tupdate pending",
        "R/data/filtered/edu/0.manifest.json\t-\tdata_filter\t-\tmissing\tupdate pending",
        "R/pretrain/phase1\tMon\tpretrain_stage\tR/logs/pretrain/phase1.log\tok\tupdate pending",
        "R/pretrain/phase1.manifest.json\t-\tpretrain_stage\tR/logs/p.log\tmissing\tupdate pending",
        "R/release.manifest.json\t-\trelease\t-\tmissing\tupdate pending",
    ]
)


def test_summary_rows_group_into_steps_closed_by_their_manifest():
    steps = st.group_steps(st.parse_summary(SUMMARY))
    assert [[row[0].split("/")[-1] for row in step] for step in steps] == [
        ["a.gz", "manifest.json"],
        ["0", "0.manifest.json"],
        ["0", "0.manifest.json"],
        ["phase1", "phase1.manifest.json"],
        ["release.manifest.json"],
    ]


def test_states_from_the_summary_and_snakemakes_markers(tmp_path):
    run_dir = tmp_path / "R"
    rows = st.group_steps(st.parse_summary(SUMMARY.replace("R/", f"{run_dir}/")))
    phase1 = str(run_dir / "pretrain" / "phase1")
    states = [st.step_status(r, run_dir, set(), set(), tmp_path) for r in rows]
    assert [(s.stage, s.state, s.why) for s in states] == [
        ("data", "done", ""),
        ("data", "stale", "its config changed"),
        ("data", "missing", ""),
        ("pretrain", "missing", ""),
        ("release", "missing", ""),
    ]
    running = st.step_status(rows[3], run_dir, {phase1}, {phase1}, tmp_path)
    assert running.state == "running" and running.log == str(run_dir / "logs/pretrain/phase1.log")
    # Marked incomplete but held by no Snakemake: a killed run.
    assert st.step_status(rows[3], run_dir, {phase1}, set(), tmp_path).state == "interrupted"
    counts = st.RunStatus(str(run_dir), states).stages()
    assert {k: st.stage_state(v) for k, v in counts.items()} == {
        "data": "stale",
        "pretrain": "missing",
        "release": "missing",
    }
    assert st.stage_state({**dict.fromkeys(st.STATES, 0), "done": 2, "missing": 1}) == "partial"


def test_relative_paths_are_read_from_snakemakes_working_directory(tmp_path, monkeypatch):
    monkeypatch.chdir("/")  # not where Snakemake ran
    (rows,) = st.group_steps(st.parse_summary("\n".join(SUMMARY.splitlines()[:4])))
    step = st.step_status(rows, tmp_path / "R", set(), set(), tmp_path)
    assert step.stage == "data" and step.outputs[-1] == str(
        tmp_path / "R/data/sample/manifest.json"
    )
    assert step.log == str(tmp_path / "R/logs/data/sample.log")


def test_markers_are_read_from_snakemakes_directories(tmp_path):
    incomplete, locks = tmp_path / "incomplete", tmp_path / "locks"
    incomplete.mkdir()
    locks.mkdir()
    (incomplete / base64.urlsafe_b64encode(b"/r/pretrain/phase1").decode()).touch()
    (incomplete / "not-base64!").touch()
    (locks / "0.output.lock").write_text("/r/pretrain/phase1\n/r/x\n")
    (locks / "0.input.lock").write_text("/r/in\n")
    assert st._marked_paths(incomplete) == {"/r/pretrain/phase1"}
    assert st._locked_outputs(locks) == {"/r/pretrain/phase1", "/r/x"}
    assert st._marked_paths(tmp_path / "none") == set()


def test_training_status_gives_the_last_step_loss_and_eta(tmp_path):
    work = tmp_path / "pretrain" / "_work" / "phase2-abc"
    (work / "out").mkdir(parents=True)
    (work / "spec.json").write_text(json.dumps({"steps": 200}))
    # Steps 101..150 at 2 steps per second (phase 2 continues phase 1's step count), the
    # last line half written.
    lines = [json.dumps({"step": s, "time": 1000 + (s - 101) / 2, "loss": 9 - s / 100})
             for s in range(101, 151)]  # fmt: skip
    (work / "out" / "metrics.jsonl").write_text("\n".join(lines) + '\n{"step": 15')
    metrics = work / "out" / "metrics.jsonl"
    now = metrics.stat().st_mtime + 6
    status = st.training_status("phase2", metrics, work / "spec.json", now=now)
    assert (status.step, status.steps) == (150, 200)
    assert status.loss == pytest.approx(7.5)
    assert status.eta_s == pytest.approx(25.0)  # 50 steps left at 2 per second
    assert status.seconds_since_update == pytest.approx(6.0)
    (found,) = st._training(tmp_path)
    assert (found.stage, found.step) == ("phase2", 150)


def test_status_of_a_run_that_never_ran_says_so(tmp_path, capsys):
    with pytest.raises(Exception, match="no such run"):
        cli(["status", "--results-dir", str(tmp_path), "--run", "nothing"])
