"""Installation: one pinned dependency list in two formats, a stack that imports together, and
a README quickstart that CI runs verbatim."""

import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tomllib
from pathlib import Path

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


@pytest.mark.slow
def test_a_wheel_installed_outside_the_checkout_runs_the_pipeline(tmp_path):
    """`pip install .` (not editable): the installed `apertus` finds the workflow, the schema,
    the default config, presets and robots.txt snapshot inside the package, from a directory
    that is no checkout. The wheel goes into a fresh venv that sees this environment's
    packages through a .pth line (nothing is downloaded) but not its editable apertus."""
    source = tmp_path / "source"  # built from a copy: the build leaves build/ behind
    source.mkdir()
    for name in ("pyproject.toml", "setup.py", "MANIFEST.in", "README.md"):
        shutil.copy2(REPO / name, source / name)
    for name in ("apertus", "workflow", "config", "profiles"):
        shutil.copytree(REPO / name, source / name, ignore=shutil.ignore_patterns("__pycache__"))
    wheels = tmp_path / "wheels"
    pip_wheel = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation"]
    subprocess.run([*pip_wheel, "-q", "-w", wheels, source], check=True, capture_output=True)
    (wheel,) = wheels.glob("apertus-*.whl")

    venv = tmp_path / "venv"
    base_python = Path(sys.base_prefix) / "bin" / "python3"
    subprocess.run([base_python, "-m", "venv", "--without-pip", venv], check=True)
    (site,) = (venv / "lib").glob("python3.*/site-packages")
    (site / "stack.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    python = venv / "bin" / "python"
    install = [python, "-m", "pip", "install", "-q", "--no-deps", wheel]
    subprocess.run(install, check=True, capture_output=True)

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()

    def apertus(*args, returncode=0, env=None):
        proc = subprocess.run(
            [venv / "bin" / "apertus", *args],
            cwd=elsewhere,
            capture_output=True,
            text=True,
            env=env,
        )
        assert proc.returncode == returncode, proc.stdout + proc.stderr
        return proc.stdout + proc.stderr

    where = subprocess.run(
        [python, "-c", "import apertus.core as c; print(c.REPO_ROOT)"],
        capture_output=True,
        text=True,
        check=True,
        cwd=elsewhere,
    ).stdout.strip()
    assert Path(where).is_relative_to(site), where  # the wheel's copy, not this checkout
    assert "configuration is valid" in apertus("config", "check")
    preset = Path(where) / "config" / "presets" / "apertus-8b.yaml"
    # The preset's one input that is not shipped (the quality head) is named before any job.
    # The preset runs online (this suite sets HF_HUB_OFFLINE, which would refuse its Hub
    # sources); online, the check only looks at names and local paths: nothing is downloaded.
    online = {k: v for k, v in os.environ.items() if not k.endswith("_OFFLINE")}
    refused = apertus("config", "check", "--configfile", str(preset), returncode=2, env=online)
    assert "key 'data.quality.head' is 'models/quality-head.safetensors'" in refused
    assert refused.count("  - key ") == 1, refused
    plan = apertus("run", "--", "-n")
    assert f"workflow specific profile {where}/profiles/default" in plan
    assert re.search(r"^total\s+\d+", plan, flags=re.M), plan[-2000:]
    assert "data_robots" in plan and "release" in plan
    assert (elsewhere / ".snakemake").is_dir()
    # One real step that reads shipped inputs: the robots.txt snapshot from config/robots.
    apertus("run", "--", "--cores", "1", "results/default/data/robots/manifest.json")
    snapshot = elsewhere / "results" / "default" / "data" / "robots" / "snapshot.json"
    shipped = {path.stem for path in (Path(where) / "config" / "robots").glob("*.txt")}
    assert shipped <= set(json.loads(snapshot.read_text())["hosts"])
