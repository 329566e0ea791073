"""Integrity at every read (apertus.core.provenance): a step refuses an input whose bytes
differ from what the step that wrote it recorded, naming the file and the writer, before it
reads anything; inputs from outside the run are only hashed."""

import json

import pytest

from apertus.core import ApertusError
from apertus.core.codedigest import PINS_VARIABLE
from apertus.core.stage import StepRun


@pytest.fixture
def run(tmp_path, monkeypatch):
    """A run folder with a tokenizer directory and an index file written by a `tokenize` step,
    whose manifest records them as the workflow does (paths relative to the job's cwd)."""
    monkeypatch.chdir(tmp_path)
    run_dir = tmp_path / "results" / "default"
    tokenizer = run_dir / "tokenize" / "tokenizer"
    tokenizer.mkdir(parents=True)
    (tokenizer / "tokenizer.json").write_text('{"vocab": [1, 2, 3]}')
    (tokenizer / "special.json").write_text("{}")
    index = run_dir / "tokenize" / "phases" / "p1" / "index.npz"
    index.parent.mkdir(parents=True)
    index.write_bytes(b"\x00" * 100)
    monkeypatch.setenv(PINS_VARIABLE, str(run_dir / "code-pins.json"))
    with StepRun(
        "tokenize",
        "tokenizer",
        {},
        inputs=[],
        outputs=[
            "results/default/tokenize/tokenizer",
            "results/default/tokenize/phases/p1/index.npz",
        ],
        manifest=run_dir / "tokenize" / "tokenizer.manifest.json",
    ):
        pass
    (tokenizer / ".snakemake_timestamp").write_text("")  # Snakemake's marker, touched after
    return run_dir


def read(run_dir, *inputs):
    with StepRun(
        "pretrain",
        "p1",
        {},
        inputs=list(inputs),
        outputs=[],
        manifest=run_dir / "pretrain" / "p1.manifest.json",
    ) as step:
        return step


def flip(path):
    data = bytearray(path.read_bytes())
    data[5] ^= 0x01
    path.write_bytes(bytes(data))


def test_unchanged_inputs_are_read_and_recorded(run):
    read(run, run / "tokenize" / "tokenizer", run / "tokenize" / "tokenizer" / "tokenizer.json")
    manifest = json.loads((run / "pretrain" / "p1.manifest.json").read_text())
    assert len(manifest["inputs"]) == 2 and "files" in manifest["inputs"][0]


@pytest.mark.parametrize("what", ["directory", "file in it", "file output"])
def test_a_flipped_byte_in_an_input_is_refused_naming_the_file_and_its_writer(run, what):
    target = {
        "directory": run / "tokenize" / "tokenizer",
        "file in it": run / "tokenize" / "tokenizer" / "tokenizer.json",
        "file output": run / "tokenize" / "phases" / "p1" / "index.npz",
    }[what]
    changed = target / "tokenizer.json" if target.is_dir() else target
    flip(changed)
    with pytest.raises(ApertusError) as refused:
        read(run, target)
    message = str(refused.value)
    assert message.startswith(f"input {changed.resolve()}: sha256 ")
    assert "but tokenize/tokenizer wrote" in message and "nothing was read" in message
    assert "snakemake --forcerun " + str(run.resolve() / "tokenize") in message
    assert not (run / "pretrain" / "p1.manifest.json").exists()


def test_a_removed_file_of_an_input_directory_is_refused(run):
    (run / "tokenize" / "tokenizer" / "special.json").unlink()
    with pytest.raises(ApertusError, match=r"special\.json: missing, written by tokenize/"):
        read(run, run / "tokenize" / "tokenizer")


def test_inputs_from_outside_the_run_and_steps_outside_the_workflow_are_only_hashed(
    run, tmp_path, monkeypatch
):
    outside = tmp_path / "user.txt"
    outside.write_text("mine")
    read(run, outside)
    flip(run / "tokenize" / "tokenizer" / "tokenizer.json")
    monkeypatch.delenv(PINS_VARIABLE)  # started by hand, not by the workflow: no run to ask
    read(run, run / "tokenize" / "tokenizer")
