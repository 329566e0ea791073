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
TIMEOUT = 3600  # seconds for the whole pipeline (about 28 min alone on a slow CI machine)
# Small steps share SLURM jobs (Snakemake's job groups). Each SLURM job costs a submission, a
# workflow parse in its job script and the scheduler's polling before the next step can start,
# more than the toy-size steps themselves spend; inside a job, each step still runs through
# `srun`. One job makes the data (classifiers, probes, instructions, every source filtered,
# deduplicated, selected), one tokenizes it (split, tokenizer, held-out set, shards, phases, SFT
# data, task files), one samples and scores QRPO's completions, one per checkpoint exports and
# evaluates it. The preset's own profile (profiles/slurm) keeps a job per step.
GROUPS = {
    "data": ("data_classifiers", "data_probes", "posttrain_instructions", "data_filter",
             "data_dedup", "data_select"),
    "tokenize": ("tokenize_split", "tokenize_tokenizer", "tokenize_heldout", "tokenize_shards",
                 "tokenize_phase", "posttrain_sft_data", "evaluate_tasks"),
    "sample": ("posttrain_qrpo_sample", "posttrain_qrpo_score_shard"),
    "checkpoint": ("export_checkpoint", "evaluate_checkpoint", "evaluate_memorization",
                   "evaluate_instruct"),
}  # fmt: skip
# Unconnected steps of a group that share a job: all of them (a checkpoint's are connected).
GROUP_COMPONENTS = {"data": 100, "tokenize": 100, "sample": 100}
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
            "profiles/slurm-local",
            "--configfile",
            str(PRESET),
            str(OVERLAY),
            "--config",
            f"results_dir={results}",
            "--groups",
            *(f"{rule}={group}" for group, rules in GROUPS.items() for rule in rules),
            "--group-components",
            *(f"{group}={n}" for group, n in GROUP_COMPONENTS.items()),
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
