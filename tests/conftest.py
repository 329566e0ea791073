import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent

# Nothing in the tests may reach the network.
os.environ.update(HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", TRANSFORMERS_OFFLINE="1")


def run_tool(*args, cwd=REPO, check=False, **kwargs):
    """Run a tool from this environment's bin/ (snakemake, snakefmt, ruff...), capturing output."""
    cmd = [str(BIN / args[0]), *map(str, args[1:])]
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, **kwargs)
    if check and proc.returncode != 0:
        pytest.fail(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return proc


@pytest.fixture
def repo():
    return REPO


@pytest.fixture(scope="session")
def default_run(tmp_path_factory):
    """The whole default pipeline, run once per test session through Snakemake on 2 cores into
    a scratch results directory; tests of each stage read its outputs. Returns the run dir."""
    results = tmp_path_factory.mktemp("results")
    run_tool(
        "snakemake",
        "--cores",
        "2",
        "--config",
        f"results_dir={results}",
        "run=e2e",
        check=True,
        timeout=1800,
    )
    return results / "e2e"


def planned_jobs(run_dir, tmp_path, override_yaml: str) -> dict[str, int]:
    """Jobs (rule -> count) a dry-run of `run_dir` would execute with `override_yaml` merged
    over the config: what a change would re-run."""
    override = tmp_path / "override.yaml"
    override.write_text(override_yaml)
    proc = run_tool(
        "snakemake",
        "-n",
        "--cores",
        "2",
        "--configfile",
        override,
        "--config",
        f"results_dir={run_dir.parent}",
        f"run={run_dir.name}",
        check=True,
    )
    counts = dict(re.findall(r"^(\w+)\s+(\d+)$", proc.stdout, flags=re.M))
    return {rule: int(n) for rule, n in counts.items() if rule not in ("all", "total")}
