"""A tiny real run directory: three cheap steps of the pipeline started exactly as their rules
start them (`python -m apertus... --config ... --manifest ...`, from the repository root), so
their manifests record a command `apertus audit --rerun` can replay."""

import hashlib
import json
import shutil
import subprocess
import sys

import pytest

from apertus.core import REPO_ROOT
from apertus.core.config import load_config
from apertus.core.files import canonical_json


def _step(*args: str) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", *args], cwd=REPO_ROOT, capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr


@pytest.fixture(scope="session")
def built_run(tmp_path_factory):
    """results/tiny with data/sample, data/robots (reads the sample and config/robots) and
    posttrain/instructions, each with its manifest."""
    run = tmp_path_factory.mktemp("results") / "tiny"
    config = load_config()
    data = config["data"]
    _step(
        "apertus.data.make_sample",
        "--config",
        canonical_json({"sample": data["sample"]}),
        "--manifest",
        str(run / "data/sample/manifest.json"),
        "--output-dir",
        str(run / "data/sample"),
    )
    _step(
        "apertus.data.robots_snapshot",
        "--config",
        canonical_json({"sources": data["sources"], "robots": data["robots"]}),
        "--manifest",
        str(run / "data/robots/manifest.json"),
        "--output",
        str(run / "data/robots/snapshot.json"),
        "--sample-dir",
        str(run / "data/sample"),
        "--datatrove-logs",
        str(run / "logs/data/datatrove/robots"),
    )
    _step(
        "apertus.posttrain.instructions",
        "--config",
        canonical_json(config["posttrain"]["instructions"]),
        "--manifest",
        str(run / "posttrain/instructions.manifest.json"),
        "--output",
        str(run / "posttrain/instructions"),
    )
    return run


@pytest.fixture
def tiny_run(built_run, tmp_path):
    """A private copy of the tiny run, at the same depth (results/tiny), free to corrupt."""
    run = tmp_path / "results" / "tiny"
    shutil.copytree(built_run, run)
    return run


def sha256(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def flip_byte(path, at: int | None = None) -> None:
    data = bytearray(path.read_bytes())
    at = len(data) // 2 if at is None else at
    data[at] ^= 0x01
    path.write_bytes(bytes(data))


def read_json(path):
    return json.loads(path.read_text())
