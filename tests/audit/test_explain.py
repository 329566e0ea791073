"""`apertus explain`: which jobs a config change re-runs, and why, from Snakemake's dry run."""

import re
import shutil
from pathlib import Path

import pytest

from apertus.audit.explain import (
    Plan,
    attribute_changes,
    explain_changes,
    parse_dry_run,
    render_plan,
    split_reasons,
    workflow_arguments,
)
from apertus.cli import main
from apertus.core import REPO_ROOT
from apertus.core.config import load_config

DATA = Path(__file__).parent / "data"
# Captured from snakemake 9.27.1: `snakemake -n` over a finished default run with
# tokenize.tokenizer.min_frequency 2 -> 3, with evaluate.suite.batch_size 8 -> 4, and unchanged.
TOKENIZER_CHANGE = (DATA / "dry_run_tokenizer_min_frequency.txt").read_text()
EVALUATE_CHANGE = (DATA / "dry_run_evaluate_batch_size.txt").read_text()
UNCHANGED = (DATA / "dry_run_unchanged.txt").read_text()
# What follows every stage: the release (when there) and the report's summary.
DOWNSTREAM_RULES = {"release", "release_upload", "report_summary"}


def job_stats(text: str) -> dict[str, int]:
    """Snakemake's own "Job stats" table, read independently of the parser under test."""
    table = text.split("Job stats:")[1].split("total")[0]
    counts = {rule: int(n) for rule, n in re.findall(r"^(\w+)\s+(\d+)$", table, flags=re.M)}
    counts.pop("all", None)
    return counts


def test_parser_finds_every_job_of_the_dry_run_with_its_reason():
    jobs = parse_dry_run(TOKENIZER_CHANGE)
    assert Plan("/tmp/run2/e2e", jobs).counts() == job_stats(TOKENIZER_CHANGE)
    assert all(job.reasons for job in jobs) and "all" not in {j.rule for j in jobs}
    (tokenizer,) = [j for j in jobs if j.rule == "tokenize_tokenizer"]
    assert tokenizer.reasons[0].startswith("Params have changed since last execution")
    shards = {j.wildcards["source"] for j in jobs if j.rule == "tokenize_shards"}
    assert shards == {"web", "edu", "code", "probes"}
    web = next(j for j in jobs if j.wildcards == {"source": "web"})
    assert web.reasons == ["Input files updated by another job: /tmp/run2/e2e/tokenize/tokenizer"]
    assert web.output[0] == "/tmp/run2/e2e/tokenize/shards/web"


def test_params_change_is_placed_at_its_config_key():
    config = load_config()
    (tokenizer,) = [j for j in parse_dry_run(TOKENIZER_CHANGE) if j.rule == "tokenize_tokenizer"]
    [(change)] = attribute_changes(tokenizer, config)
    assert (change.key, change.before, change.now) == ("tokenize.tokenizer.min_frequency", 2, 3)
    jobs = parse_dry_run(EVALUATE_CHANGE)
    for job in jobs:
        job.changes = attribute_changes(job, config)
    plan = Plan("/tmp/run2/e2e", jobs)
    assert plan.rules_by_key() == {"evaluate.suite.batch_size": ["evaluate_checkpoint"]}
    assert Plan("/tmp/run2/e2e", jobs).counts() == job_stats(EVALUATE_CHANGE)


def test_several_reasons_of_one_job_are_split_but_a_semicolon_inside_params_is_not():
    reasons = split_reasons(
        "Missing output files: /r/release.manifest.json; Input files updated by another job: "
        "/r/a, /r/b; Params have changed since last execution: Union of exclusive params "
        'before and now across all output: before: \'{"x":"a; b"}\' now: \'{"x":"c"}\' '
    )
    assert [r.split(":")[0] for r in reasons] == [
        "Missing output files",
        "Input files updated by another job",
        "Params have changed since last execution",
    ]
    assert "a; b" in reasons[2]


def test_unchanged_run_has_no_jobs():
    assert parse_dry_run(UNCHANGED) == []
    assert render_plan(Plan("/r/e2e", [])).startswith("nothing to do")


def test_bad_override_is_exit_2_naming_the_key(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["explain", "tokenize.tokenizer.no_such_key=1"])
    assert exit_.value.code == 2
    assert "no_such_key" in capsys.readouterr().err


@pytest.mark.slow
def test_tokenizer_change_reruns_tokenization_and_what_follows_never_data(default_run, capsys):
    args = ["--results-dir", str(default_run.parent), "--run", default_run.name]
    plan = explain_changes(
        overrides=["tokenize.tokenizer.min_frequency=3"],
        results_dir=str(default_run.parent),
        run=default_run.name,
    )
    rules = set(plan.counts())
    assert {"tokenize_tokenizer", "tokenize_shards", "tokenize_heldout", "tokenize_phase"} <= rules
    assert {"pretrain_stage", "export_checkpoint", "evaluate_checkpoint"} <= rules
    assert not {r for r in rules if r.startswith("data_")}
    assert all(job.reasons for job in plan.jobs)
    assert plan.rules_by_key() == {"tokenize.tokenizer.min_frequency": ["tokenize_tokenizer"]}

    with pytest.raises(SystemExit) as exit_:
        main(["explain", "tokenize.tokenizer.min_frequency=3", *args])
    assert exit_.value.code == 0
    out = capsys.readouterr().out
    assert "params changed: tokenize.tokenizer.min_frequency: 2 -> 3" in out
    assert "tokenize.tokenizer.min_frequency: tokenize_tokenizer" in out


@pytest.mark.slow
def test_evaluation_change_reruns_only_evaluation(default_run):
    plan = explain_changes(
        overrides=["evaluate.suite.batch_size=4"],
        results_dir=str(default_run.parent),
        run=default_run.name,
    )
    rules = set(plan.counts())
    evaluate = {r for r in rules if r.startswith("evaluate_")}
    assert "evaluate_checkpoint" in evaluate and rules - evaluate <= DOWNSTREAM_RULES
    assert plan.counts()["evaluate_checkpoint"] == 6  # every exported checkpoint


@pytest.mark.slow
def test_unchanged_config_has_nothing_to_do(default_run, capsys):
    plan = explain_changes(results_dir=str(default_run.parent), run=default_run.name)
    assert plan.jobs == []
    assert "nothing to do" in render_plan(plan)


def copy_checkout(target: Path) -> Path:
    """The workflow of this repository (Snakefile, rules, config, profiles), elsewhere."""
    ignore = shutil.ignore_patterns("__pycache__")
    target.mkdir()
    for name in ("workflow", "config", "profiles"):
        shutil.copytree(REPO_ROOT / name, target / name, ignore=ignore)
    return target


def test_explain_dry_runs_the_workflow_of_the_current_directory(tmp_path, monkeypatch):
    """Not the checkout the package was installed from: a rule only the other checkout has is
    planned there, and its .snakemake/ is the one written."""
    checkout = copy_checkout(tmp_path / "checkout")
    with open(checkout / "workflow" / "Snakefile", "a") as snakefile:
        snakefile.write('\n\nrule only_in_this_checkout:\n    output:\n        "here.txt"\n')
    monkeypatch.chdir(checkout)
    plan = explain_changes(extra=["here.txt"])
    assert [job.rule for job in plan.jobs] == ["only_in_this_checkout"]
    assert (checkout / ".snakemake").is_dir()
    monkeypatch.chdir(tmp_path)
    plan = explain_changes(extra=["here.txt"], cwd=checkout)  # apertus explain --directory
    assert [job.rule for job in plan.jobs] == ["only_in_this_checkout"]


def test_a_directory_without_a_workflow_runs_the_installed_one(tmp_path):
    """Outside a checkout Snakemake gets the package's workflow and its workflow profile (it
    would look for profiles only in the working directory and beside the Snakefile)."""
    args = workflow_arguments(tmp_path, ["-n", "--workflow-profile", "profiles/slurm"])
    assert args[:2] == ["--snakefile", str(REPO_ROOT / "workflow" / "Snakefile")]
    assert args[-1] == str(REPO_ROOT / "profiles" / "slurm")
    assert workflow_arguments(tmp_path)[-1] == str(REPO_ROOT / "profiles" / "default")
    assert workflow_arguments(REPO_ROOT, ["-n"]) == ["-n"]  # a checkout: Snakemake finds both
    sbatch = workflow_arguments(REPO_ROOT, [], profile="slurm")
    assert sbatch == ["--workflow-profile", str(REPO_ROOT / "profiles" / "slurm")]
