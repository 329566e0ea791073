"""The workflow as a user meets it: dry-run, config errors before any job, lint and format."""

from pathlib import Path

import pytest
import yaml

from tests.conftest import REPO, run_tool

pytestmark = pytest.mark.slow


def test_dry_run_shows_the_dag(tmp_path):
    proc = run_tool("snakemake", "-n", "--config", f"results_dir={tmp_path}", check=True)
    out = proc.stdout + proc.stderr
    for rule in ("data_sample", "data_robots", "data_filter", "data_dedup", "data_select", "all"):
        assert f"rule {rule}:" in out


@pytest.mark.parametrize(
    ("config", "named"),
    [
        ({"offlien": True}, "unknown key 'offlien' (did you mean 'offline'?)"),
        ({"resources": {"default": {"mem_mbb": 8}}}, "unknown key 'resources.default.mem_mbb'"),
        ({"resources": {"default": {"threads": "four"}}}, "key 'resources.default.threads'"),
        ({"offline": "sometimes"}, "key 'offline' must be of type boolean"),
        ({"run": "has space"}, "key 'run' is 'has space'"),
        # Cross-field checks (apertus.plan_check), made by common.smk right after the schema's.
        ({"pretrain": {"global_batch": 12}}, "key 'pretrain.global_batch' is 12: not divisible"),
        (
            {"pretrain": {"phases": ["phase1", "phase1"], "goldfish_control": None}},
            "key 'pretrain.phases[1]' is 'phase1', already at 'pretrain.phases[0]'",
        ),
    ],
)
def test_bad_config_fails_before_any_job_naming_the_key(tmp_path, config, named):
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(config))
    proc = run_tool("snakemake", "-n", "--configfile", bad)
    assert proc.returncode != 0
    output = proc.stdout + proc.stderr
    assert named in output
    assert str(bad) in output
    assert "rule all:" not in output  # no job was planned


def test_configfile_given_twice_is_refused_not_half_used(tmp_path):
    """Snakemake keeps only the last `--configfile`'s files: the preset of `--configfile
    preset.yaml --configfile overlay.yaml` would be dropped without a word."""
    overlay = tmp_path / "overlay.yaml"
    overlay.write_text("run: mine\n")
    preset = REPO / "config" / "presets" / "apertus-8b.yaml"
    proc = run_tool("snakemake", "-n", "--configfile", preset, "--configfile", overlay)
    assert proc.returncode != 0
    assert "--configfile is given 2 times" in proc.stdout + proc.stderr
    assert "rule all:" not in proc.stdout + proc.stderr


# The one lint kept on purpose: rules name no conda environment, because jobs run in the
# environment that runs Snakemake (README: Installing; .snakemake-workflow-catalog.yml).
NO_SOFTWARE_ENV_LINT = "Specify a conda environment or container for each rule."


def test_lint_is_clean_but_for_the_software_environment():
    proc = run_tool("snakemake", "--lint")
    output = proc.stdout + proc.stderr
    assert proc.returncode in (0, 1), output
    lints = [line.strip() for line in output.splitlines() if line.startswith("    * ")]
    assert lints, output  # the rules were linted
    assert {lint.removeprefix("* ").removesuffix(":") for lint in lints} == {
        NO_SOFTWARE_ENV_LINT
    }, output
    assert "Lints for snakefile" not in output, output


def test_snakefmt_is_clean():
    rules = sorted((REPO / "workflow" / "rules").glob("*.smk"))
    run_tool("snakefmt", "--check", "workflow/Snakefile", *rules, check=True)


def test_ruff_is_clean():
    run_tool("ruff", "check", ".", check=True)
    run_tool("ruff", "format", "--check", ".", check=True)


def test_a_second_snakemake_on_a_results_folder_in_use_is_refused_before_any_job(tmp_path):
    """Two clones sharing a `results_dir`: the second Snakemake that would run jobs there is
    refused, naming the holder (here this test process); a dry run is not."""
    import os

    from apertus.core.lifetime import hold_lock

    fd = hold_lock(tmp_path / "default" / ".snakemake.lock", "a test")
    try:
        run_tool("snakemake", "-n", "--config", f"results_dir={tmp_path}", check=True)
        proc = run_tool("snakemake", "--cores", "1", "--config", f"results_dir={tmp_path}")
    finally:
        os.close(fd)
    assert proc.returncode != 0
    assert (
        f"the results folder {tmp_path / 'default'} is in use by PID {os.getpid()} on "
        f"{os.uname().nodename}"
    ) in proc.stderr
    assert not (tmp_path / "default" / "data").exists()  # no job ran


def test_a_killed_apertus_run_stops_its_jobs_and_releases_the_results_folder(tmp_path):
    """`kill` of `apertus run` (what `quickstart.sh run` execs) mid-run: its jobs get one
    SIGTERM, as a preempted SLURM job (a training step saves a checkpoint first: tried by hand,
    bench/RESULTS.md), Snakemake a SIGINT, and it returns once they have ended: no process of
    the run is left and the results folder's lock is free (issue 44). A SIGTERM of Snakemake
    alone would let its jobs run on."""
    import os
    import signal
    import subprocess
    import time

    from apertus.core.lifetime import hold_lock
    from tests.conftest import BIN

    results = tmp_path / "results"
    proc = subprocess.Popen(
        [BIN / "apertus", "run", f"results_dir={results}", "--", "--cores", "1"],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        start_new_session=True,
    )  # fmt: skip
    logs = results / "default" / "logs" / "data"
    deadline = time.monotonic() + 300
    while not (logs.is_dir() and any(logs.glob("filter-*.log"))):  # a filter job has started
        assert proc.poll() is None and time.monotonic() < deadline, proc.stdout.read()
        time.sleep(0.2)
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=300)
    assert proc.returncode != 0, out
    assert "apertus run: SIGTERM: stopping Snakemake and its jobs" in out
    left = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmdline = (Path("/proc") / pid / "cmdline").read_bytes().replace(b"\0", b" ")
        except OSError:
            continue
        if str(results).encode() in cmdline:
            left.append(cmdline.decode(errors="replace")[:200])
    assert not left, left
    fd = hold_lock(results / "default" / ".snakemake.lock", "the test")  # raises if held
    if fd is not None:
        os.close(fd)
    assert not (results / "default" / "data" / "dedup.manifest.json").exists()  # stopped early
