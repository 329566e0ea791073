"""The stage contract, end to end through Snakemake, on two toy stages built from the real
common.smk and schema: outputs under results/{run}/<stage>/, a manifest per step, params holding
exactly the stage's config subtree (so changing it re-runs that stage and its descendants, and
nothing else), resources that re-run nothing, and offline jobs."""

import json
import re
import shutil
import textwrap

import pytest
import yaml

from apertus.core.manifest import config_hash
from tests.conftest import REPO, run_tool

pytestmark = pytest.mark.slow

TOY_RULES = """
rule toy_a:
    output:
        text=stage_path("toy_a", "text.txt"),
        manifest=stage_path("toy_a", "manifest.json"),
    params:
        config=stage_config("toy_a"),
    log:
        log_path("toy_a", "text"),
    benchmark:
        benchmark_path("toy_a", "text")
    threads: stage_threads("toy_a")
    resources:
        **stage_job_resources("toy_a"),
    shell:
        "python -m toy_stage a --config {params.config:q} --manifest {output.manifest} "
        "--output {output.text} > {log} 2>&1"


rule toy_b:
    input:
        text=rules.toy_a.output.text,
    output:
        text=stage_path("toy_b", "text.txt"),
        manifest=stage_path("toy_b", "manifest.json"),
    params:
        config=stage_config("toy_b"),
    log:
        log_path("toy_b", "text"),
    benchmark:
        benchmark_path("toy_b", "text")
    threads: stage_threads("toy_b")
    resources:
        **stage_job_resources("toy_b"),
    shell:
        "python -m toy_stage b --config {params.config:q} --manifest {output.manifest} "
        "--input {input.text} --output {output.text} > {log} 2>&1"


TARGETS.append(rules.toy_b.output.manifest)
"""

TOY_STAGE = """
import os
import sys
from pathlib import Path

from apertus.core import ApertusError
from apertus.core.stage import StepRun, run_main, stage_parser


def main(argv):
    parser = stage_parser("toy", "a toy stage")
    parser.add_argument("which", choices=["a", "b"])
    parser.add_argument("--input", type=Path)
    parser.add_argument("--output", type=Path, required=True)
    args = parser.parse_args(argv)
    stage = f"toy_{args.which}"
    inputs = [args.input] if args.input else []
    with StepRun(stage, "text", args.config, inputs=inputs, outputs=[args.output],
                 manifest=args.manifest, seed=args.config.get("seed")) as step:
        if args.config.get("greeting") == "FAIL":
            raise ApertusError("toy_a refuses the greeting 'FAIL'")
        if args.which == "a":
            offline = os.environ.get("HF_HUB_OFFLINE", "")
            text = f"{args.config['greeting']} offline={offline}\\n"
        else:
            text = args.input.read_text() * args.config["repeat"]
        args.output.write_text(text)
        step.summary["chars"] = len(text)


run_main(main, sys.argv[1:])
"""


@pytest.fixture
def toy_workflow(tmp_path):
    """A copy of the real workflow spine with two toy stages added, as a stage issue would."""
    shutil.copytree(REPO / "workflow", tmp_path / "workflow")
    shutil.copytree(REPO / "config", tmp_path / "config")
    schema_path = tmp_path / "workflow" / "schemas" / "config.schema.yaml"
    schema = yaml.safe_load(schema_path.read_text())
    for stage, key, kind, default in (
        ("toy_a", "greeting", "string", "hello"),
        ("toy_b", "repeat", "integer", 2),
    ):
        schema["properties"][stage] = {
            "type": "object",
            "additionalProperties": False,
            "description": stage,
            "properties": {key: {"type": kind, "default": default, "description": key}},
        }
    schema_path.write_text(yaml.safe_dump(schema))
    (tmp_path / "workflow" / "rules" / "toy.smk").write_text(textwrap.dedent(TOY_RULES))
    (tmp_path / "workflow" / "Snakefile").write_text(
        'include: "rules/common.smk"\n'
        'include: "rules/toy.smk"\n\n\n'
        "check_stage_contract()\n\n\n"
        "rule all:\n    default_target: True\n    input:\n        TARGETS,\n"
    )
    (tmp_path / "toy_stage.py").write_text(TOY_STAGE)
    return tmp_path


def snakemake(workdir, *args, dry=False):
    flags = ["--cores", "1", *(["-n"] if dry else [])]
    return run_tool("snakemake", *flags, *args, cwd=workdir, check=True)


def planned_jobs(workdir, *args):
    """Rules a dry-run would execute, from Snakemake's job-stats table."""
    out = snakemake(workdir, *args, dry=True).stdout
    return set(re.findall(r"^(toy_\w+)\s+\d+$", out, flags=re.M))


def config_file(workdir, name, data):
    path = workdir / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data))
    return str(path)


def test_stage_contract(toy_workflow):
    wd = toy_workflow
    snakemake(wd)

    run_dir = wd / "results" / "default"
    a = json.loads((run_dir / "toy_a" / "manifest.json").read_text())
    b = json.loads((run_dir / "toy_b" / "manifest.json").read_text())
    assert (run_dir / "toy_b" / "text.txt").read_text() == "hello offline=1\n" * 2
    assert a["config"] == {"greeting": "hello"}
    assert a["config_sha256"] == config_hash({"greeting": "hello"})
    # b's recorded input is exactly a's recorded output
    assert b["inputs"][0]["sha256"] == a["outputs"][0]["sha256"]
    assert b["summary"] == {"chars": 32}
    for stage in ("toy_a", "toy_b"):
        assert (run_dir / "logs" / stage / "text.log").exists()
        assert (run_dir / "benchmarks" / stage / "text.tsv").exists()

    assert planned_jobs(wd) == set(), "an unchanged config must re-run nothing"

    # resources decide where a job runs, never what it computes
    more_memory = config_file(wd, "mem", {"resources": {"default": {"mem_mb": 9999}}})
    assert planned_jobs(wd, "--configfile", more_memory) == set()

    # a downstream stage's subtree re-runs only that stage
    three = config_file(wd, "b3", {"toy_b": {"repeat": 3}})
    assert planned_jobs(wd, "--configfile", three) == {"toy_b"}

    # an upstream stage's subtree re-runs it and everything after it
    hi = config_file(wd, "hi", {"toy_a": {"greeting": "hi"}})
    assert planned_jobs(wd, "--configfile", hi) == {"toy_a", "toy_b"}

    snakemake(wd, "--configfile", three)
    assert json.loads((run_dir / "toy_a" / "manifest.json").read_text()) == a
    b3 = json.loads((run_dir / "toy_b" / "manifest.json").read_text())
    assert b3["config"] == {"repeat": 3}
    assert (run_dir / "toy_b" / "text.txt").read_text() == "hello offline=1\n" * 3

    # another run name writes a separate tree
    snakemake(wd, "--config", "run=second")
    assert (wd / "results" / "second" / "toy_b" / "manifest.json").exists()


def test_failing_step_leaves_no_outputs_and_one_clear_error_in_its_log(toy_workflow):
    wd = toy_workflow
    refused = config_file(wd, "refused", {"toy_a": {"greeting": "FAIL"}})
    proc = run_tool("snakemake", "--cores", "1", "--configfile", refused, cwd=wd)
    assert proc.returncode != 0
    run_dir = wd / "results" / "default"
    assert not (run_dir / "toy_a" / "manifest.json").exists()
    assert not (run_dir / "toy_a" / "text.txt").exists()
    log = (run_dir / "logs" / "toy_a" / "text.log").read_text()
    assert "error: toy_a refuses the greeting 'FAIL'" in log
    assert "Traceback" not in log


def test_rule_without_log_or_benchmark_is_refused_at_parse_time(toy_workflow):
    wd = toy_workflow
    with (wd / "workflow" / "rules" / "toy.smk").open("a") as rules:
        rules.write(
            '\n\nrule careless:\n    output:\n        "x.txt",\n'
            '    shell:\n        "touch {output}"\n'
        )
    proc = run_tool("snakemake", "--cores", "1", "-n", cwd=wd)
    assert proc.returncode != 0
    assert (
        'rule careless lacks log:, benchmark:, params: config=stage_config("<stage>")'
        in proc.stdout + proc.stderr
    )


def test_rule_running_apertus_code_without_its_code_digest_is_refused(toy_workflow):
    """A rule running `python -m apertus.X` must re-run when X's code changes: its params hold
    `code=step_code("apertus.X")`, of that very module."""
    wd = toy_workflow
    rule = (
        "\n\nrule {name}:\n    output:\n        stage_path('toy_a', '{name}.txt'),\n"
        "    params:\n        config=stage_config('toy_a'),{code}\n"
        "    log:\n        log_path('toy_a', '{name}'),\n"
        "    benchmark:\n        benchmark_path('toy_a', '{name}')\n"
        "    shell:\n        'python -m apertus.data.funnel --output {{output}} > {{log}}'\n"
    )
    with (wd / "workflow" / "rules" / "toy.smk").open("a") as rules:
        rules.write(rule.format(name="forgetful", code=""))
        rules.write(
            rule.format(name="mistaken", code='\n        code=step_code("apertus.data.select"),')
        )
        rules.write(
            rule.format(name="careful", code='\n        code=step_code("apertus.data.funnel"),')
        )
    proc = run_tool("snakemake", "--cores", "1", "-n", cwd=wd)
    assert proc.returncode != 0
    output = proc.stdout + proc.stderr
    assert 'rule forgetful lacks params: code=step_code("apertus.data.funnel")' in output
    assert 'rule mistaken lacks params: code=step_code("apertus.data.funnel")' in output
    assert "rule careful" not in output
