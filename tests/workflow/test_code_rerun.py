"""Partial re-execution that follows the code (issue 20), on the shared default run: an edit to
the code a step runs re-runs that step and what follows from its outputs, nothing upstream; a
comment, docstring or layout edit re-runs nothing; `apertus status` and `apertus explain` name
the file. The edits are made in a copy of the source (with Snakemake's records of the run), so
the checkout is never touched."""

import contextlib
import os
import re
import shutil

import pytest

from tests.conftest import REPO, run_tool

pytestmark = pytest.mark.slow

PII = "apertus/data/pii.py"
LMEVAL = "apertus/evaluate/lmeval.py"


@pytest.fixture(scope="module")
def copy(default_run, tmp_path_factory):
    """The repository's source and Snakemake's metadata of the default run, copied: the
    dry-runs below run the copy's code (PYTHONPATH)."""
    root = tmp_path_factory.mktemp("code") / "repo"
    skip = shutil.ignore_patterns(
        ".git", ".venv", "results", ".snakemake", "__pycache__", "rehearsal-inputs"
    )
    shutil.copytree(REPO, root, ignore=skip)
    # The rehearsal may be writing records of its own beside the default run's meanwhile.
    shutil.copytree(
        REPO / ".snakemake" / "metadata", root / ".snakemake" / "metadata", copy_function=_copy_kept
    )
    return root


def _copy_kept(source, target):
    with contextlib.suppress(FileNotFoundError):
        shutil.copy2(source, target)


def tool(copy, default_run, *args):
    env = {**os.environ, "PYTHONPATH": str(copy)}
    return run_tool(*args, cwd=copy, check=True, env=env)


def planned(copy, default_run, *extra):
    """Rule -> jobs a dry-run of the default run plans from the copy's code."""
    out = tool(
        copy, default_run, "snakemake", "-n", "--cores", "2", *extra,
        "--config", f"results_dir={default_run.parent}", f"run={default_run.name}",
    ).stdout  # fmt: skip
    counts = dict(re.findall(r"^(\w+)\s+(\d+)$", out, flags=re.M))
    return {rule: int(n) for rule, n in counts.items() if rule not in ("all", "total")}


def edit(copy, path, old, new):
    file = copy / path
    text = file.read_text()
    assert old in text, f"{path} no longer holds {old!r}: choose another edit"
    file.write_text(text.replace(old, new, 1))
    return text


def test_code_edits_rerun_exactly_the_steps_that_run_the_code(copy, default_run):
    before = planned(copy, default_run)  # nothing, unless an earlier test left a step stale
    # What re-running the corpus step and what follows from it means, by Snakemake's own DAG.
    after_select = planned(copy, default_run, "--forcerun", "data_select")
    after_evaluate = planned(
        copy, default_run, "--forcerun", "evaluate_tasks", "evaluate_checkpoint", "evaluate_table"
    )

    original = edit(copy, PII, '"email": "<email-pii>",', '"email": "<e-mail-pii>",')
    try:
        jobs = planned(copy, default_run)
        assert jobs == after_select
        assert jobs["data_select"] == 1 and jobs["pretrain_stage"] >= 1
        assert not {"data_sample", "data_robots", "data_classifiers", "data_filter"} & set(jobs)
        assert "data_dedup" not in jobs
        status = tool(
            copy, default_run, "python", "-m", "apertus", "status",
            "--results-dir", default_run.parent, "--run", default_run.name,
        ).stdout  # fmt: skip
        assert re.search(r"stale\s+data_select\s+.*\(code changed: apertus/data/pii\.py\)", status)
        explain = tool(
            copy, default_run, "python", "-m", "apertus", "explain",
            "--results-dir", default_run.parent, "--run", default_run.name,
        ).stdout  # fmt: skip
        assert re.search(r"data_select\s+data/corpus\s+params changed: code: " + PII, explain)
        assert f"{PII}: data_select" in explain
    finally:
        (copy / PII).write_text(original)

    original = edit(copy, LMEVAL, 'ROLLING = "loglikelihood_rolling"', 'ROLLING = "rolling"')
    try:
        jobs = planned(copy, default_run)
        assert jobs == after_evaluate
        assert not {"pretrain_stage", "posttrain_sft", "posttrain_qrpo", "export_checkpoint"} & set(
            jobs
        )
        assert {"evaluate_checkpoint", "evaluate_table", "release", "report_summary"} <= set(jobs)
    finally:
        (copy / LMEVAL).write_text(original)
    assert planned(copy, default_run) == before


def test_comments_docstrings_and_formatting_rerun_nothing(copy, default_run):
    edits = [
        (PII, '"email": "<email-pii>",', '"email": "<email-pii>",  # the recipe\'s placeholder'),
        (PII, '"""PII redaction', '"""Redaction of PII'),
        (
            LMEVAL,
            'ROLLING = "loglikelihood_rolling"',
            'ROLLING = (\n    "loglikelihood_rolling"\n)',
        ),
        ("apertus/train/goldfish.py", '"""Loss masks', '"""The loss masks'),
        ("apertus/core/stage.py", "\nimport ", "\n# how a step runs\nimport "),
    ]
    before = planned(copy, default_run)
    originals = {}
    try:
        for path, old, new in edits:
            originals.setdefault(path, (copy / path).read_text())
            edit(copy, path, old, new)
        assert planned(copy, default_run) == before
    finally:
        for path, text in originals.items():
            (copy / path).write_text(text)
