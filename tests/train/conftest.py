"""What several training test modules share, built once per session: the synthetic phase of
test_torchtitan and its 30-step 1-process run, the reference of test_torchtitan's FSDP, resume
and new-stage tests and of test_tensor_parallel's TP run."""

from pathlib import Path

import pytest

from tests.train.test_torchtitan import build_phase, run_ok, write_spec


@pytest.fixture(scope="session")
def phase(tmp_path_factory) -> Path:
    return build_phase(tmp_path_factory.mktemp("data"))


@pytest.fixture(scope="session")
def one_process_run(phase, tmp_path_factory):
    directory = tmp_path_factory.mktemp("run1")
    proc = run_ok(write_spec(directory, phase), 1)
    return directory, proc
