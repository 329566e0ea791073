import os
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
