"""Installation: one pinned dependency list in two formats, a stack that imports together, and
a README quickstart that CI runs verbatim."""

import re
import subprocess
import sys
import tomllib

import pytest
import yaml
from packaging.requirements import Requirement

from tests.conftest import BIN, REPO


def pyproject():
    return tomllib.loads((REPO / "pyproject.toml").read_text())


def pyproject_requirements():
    project = pyproject()["project"]
    return [*project["dependencies"], *project["optional-dependencies"]["test"]]


def environment_pip_requirements():
    env = yaml.safe_load((REPO / "environment.yml").read_text())
    pip = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict) and "pip" in d)
    return [r for r in pip if not r.startswith("-e")], env


def normalised(requirements):
    out = {}
    for text in requirements:
        req = Requirement(text)
        out[re.sub(r"[-_.]+", "-", req.name).lower()] = str(req.specifier)
    return out


def test_environment_yml_mirrors_pyproject():
    pip, env = environment_pip_requirements()
    assert normalised(pip) == normalised(pyproject_requirements())
    assert "python=3.11" in env["dependencies"]
    assert "-e ." in next(d["pip"] for d in env["dependencies"] if isinstance(d, dict))


def test_every_dependency_is_pinned_exactly():
    for name, spec in normalised(pyproject_requirements()).items():
        assert spec.startswith("==") and "," not in spec, f"{name} is not pinned: {spec!r}"


def test_torch_is_the_pinned_cpu_build_here():
    # A looser pin would let pip pull the newest CUDA build on these machines.
    assert normalised(pyproject()["project"]["dependencies"])["torch"] == "==2.13.0"
    import torch

    assert torch.__version__.startswith("2.13.0")


@pytest.mark.slow
def test_the_pinned_stack_imports_together():
    code = (
        "import torchtitan.train, datatrove.pipeline.readers, datatrove.pipeline.tokens, lm_eval,"
        " transformers, snakemake, huggingface_hub, spacy, fasttext, tldextract, ahocorasick,"
        " orjson, protego, sacrebleu, accelerate, xxhash, trafilatura, warcio, matplotlib;"
        " from transformers import ApertusForCausalLM;"
        " xxhash.xxh64('datatrove hashes str');"  # xxhash 4 rejects str and breaks datatrove dedup
        " trafilatura.extract('<html><body><p>main text</p></body></html>')"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]


def test_console_script_is_installed():
    proc = subprocess.run([BIN / "apertus", "--help"], capture_output=True, text=True)
    assert proc.returncode == 0
    assert "config" in proc.stdout


def quickstart_commands():
    readme = (REPO / "README.md").read_text()
    section = readme.split("## Quickstart", 1)[1].split("\n## ", 1)[0]
    block = re.search(r"```(?:bash|sh)\n(.*?)```", section, flags=re.S).group(1)
    return [line.split("#")[0].strip() for line in block.splitlines() if line.strip()]


def test_readme_quickstart_is_two_commands_and_ci_runs_the_test_one():
    commands = quickstart_commands()
    assert len(commands) == 2, commands
    run, test = commands
    assert run.endswith(" run") and test.endswith(" test")
    ci = [line.strip() for line in (REPO / ".ci" / "run").read_text().splitlines()]
    assert test in ci, ".ci/run must run the README's test command itself"
