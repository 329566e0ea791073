"""The 8B rehearsal's whole run (tests/rehearsal/test_rehearsal.py), started in a thread when the
test session starts (`rehearsal_run` in tests/conftest.py), so that its SLURM jobs, which spend
much of their time waiting on the scheduler, overlap the tests that need no cluster. The
two-node cluster is the rehearsal's alone until it ends: the session runs the tests that use a
cluster after it (`pytest_collection_modifyitems`)."""

from __future__ import annotations

import os
import re
from pathlib import Path

import yaml

from apertus.core.files import sha256_file
from tests.conftest import BIN, REPO, BackgroundRun, local_cluster, run_tool

PRESET = REPO / "config" / "presets" / "apertus-8b.yaml"
OVERLAY = REPO / "config" / "rehearsal" / "apertus-8b.yaml"
TIMEOUT = 4800  # seconds for the whole pipeline (about 28 min alone on a slow CI machine)
# The rehearsal's profile: profiles/slurm-local with the small steps sharing SLURM jobs
# (Snakemake's job groups, the profile's `groups`).
PROFILE = REPO / "profiles" / "slurm-rehearsal"
# The grouped rules' steps, by their manifests' paths in the run.
GROUPED_STEPS = re.compile(
    r"^(data/(classifiers/|probes\.|filtered/|dedup\.|corpus\.)|posttrain/instructions\."
    r"|tokenize/|posttrain/sft_data\.|evaluate/tasks\."
    r"|posttrain/qrpo_(samples|scored_shards)/"
    r"|export/|evaluate/lm_eval|evaluate/memorization/)"
)
# lm-eval's side data (`evaluate.*.data_home`), which the run must read and not write.
DATA_HOME = REPO / "rehearsal-inputs" / "eval-home"


def digests(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): sha256_file(p) for p in sorted(root.rglob("*")) if p.is_file()
    }


def offline_env(scratch: Path) -> dict[str, str]:
    """The environment of the rehearsal's Snakemake, which its SLURM jobs inherit: a home and a
    Hugging Face home of their own (no cache or NLTK data of this machine's), every HTTP(S)
    connection refused at once, no bytecode written (the data home stays as built). The run
    then shows that it needs nothing but the stand-ins."""
    env = {
        **os.environ,
        "HOME": str(scratch / "home"),
        "HF_HOME": str(scratch / "hf"),
        "HTTP_PROXY": "http://127.0.0.1:9",
        "HTTPS_PROXY": "http://127.0.0.1:9",
        "NO_PROXY": "",
        "PYTHONDONTWRITEBYTECODE": "1",
    }
    for name in ("NLTK_DATA", "HF_MODULES_CACHE", "HF_DATASETS_CACHE", "XDG_CACHE_HOME"):
        env.pop(name, None)
    return env


class Rehearsal(BackgroundRun):
    def __init__(self, results: Path):
        command = [
            str(BIN / "snakemake"),
            "--workflow-profile",
            str(PROFILE.relative_to(REPO)),
            "--configfile",
            str(PRESET),
            str(OVERLAY),
            "--config",
            f"results_dir={results}",
        ]
        run = yaml.safe_load(OVERLAY.read_text())["run"]
        super().__init__("rehearsal", results, run, command, TIMEOUT, env=offline_env(results))
        self.data_home: dict[str, str] = {}  # DATA_HOME's digests before the run

    def prepare(self) -> None:
        # The overlay reads its stand-ins from rehearsal-inputs/ in the working directory.
        run_tool("python", "-m", "apertus.rehearsal", "rehearsal-inputs", check=True,
                 timeout=600)  # fmt: skip
        self.data_home = digests(DATA_HOME)

    def around(self):
        return local_cluster(2)  # stopped after the run, which then cancelled its jobs
