"""The code digest of a step (apertus.core.codedigest): which files it covers, what counts as a
change (the syntax tree without docstrings), package versions, pins."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from importlib.metadata import version

import pytest

from apertus.audit.pins import set_pins
from apertus.core import ApertusError
from apertus.core.codedigest import (
    PACKAGE_ROOT,
    PINS_FILE,
    changed_files,
    code_changes,
    file_digest,
    module_closure,
    read_pins,
    step_code,
)
from apertus.core.diskcache import JsonCache
from apertus.core.manifest import write_manifest

SOURCE = textwrap.dedent(
    '''
    """Module doc."""
    import os

    LIMIT = 3  # a comment


    def f(x):
        """Function doc."""
        if x > LIMIT:
            return os.sep
        return None


    class C:
        """Class doc."""

        def g(self):
            """Only a docstring."""
    '''
)

# Edits that change no meaning: comments, docstrings, layout.
SAME = [
    SOURCE.replace("# a comment", "# another comment"),
    SOURCE.replace('"""Module doc."""', '"""Another module doc,\n\nover lines."""'),
    SOURCE.replace('"""Function doc."""', ""),
    SOURCE.replace("LIMIT = 3", "LIMIT  =  (3)"),
    SOURCE.replace("    if x > LIMIT:", "    if (\n        x > LIMIT\n    ):"),
    SOURCE.replace('"""Only a docstring."""', "pass"),
]
# Edits that do: a constant, a condition, a body, a name.
CHANGED = [
    SOURCE.replace("LIMIT = 3", "LIMIT = 4"),
    SOURCE.replace("x > LIMIT", "x >= LIMIT"),
    SOURCE.replace("return None", "return 0"),
    SOURCE.replace("def g(self)", "def h(self)"),
]


def digest_of(tmp_path, text, name="m.py"):
    path = tmp_path / name
    path.write_text(text)
    return file_digest(path)


@pytest.mark.parametrize("edited", SAME)
def test_comments_docstrings_and_layout_do_not_change_the_digest(tmp_path, edited):
    assert digest_of(tmp_path, edited, "b.py") == digest_of(tmp_path, SOURCE)


@pytest.mark.parametrize("edited", CHANGED)
def test_a_constant_a_condition_a_body_or_a_name_does(tmp_path, edited):
    assert digest_of(tmp_path, edited, "b.py") != digest_of(tmp_path, SOURCE)


def test_an_edit_after_a_digest_is_seen_and_bad_syntax_is_named(tmp_path):
    first = digest_of(tmp_path, SOURCE)
    assert digest_of(tmp_path, SOURCE + "\nX = 1\n") != first  # not served from the cache
    with pytest.raises(ApertusError, match=r"m\.py:2: syntax error"):
        digest_of(tmp_path, "x = 1\ndef (:\n")


def files_of(entry):
    return {path.relative_to(PACKAGE_ROOT).as_posix() for path in module_closure(entry)[0]}


def test_a_step_covers_what_it_uses_and_not_what_other_steps_use():
    select = files_of("apertus.data.select")
    assert {"data/select.py", "data/pipeline.py", "data/pii.py", "core/stage.py"} <= select
    assert {"__init__.py", "data/__init__.py", "core/__init__.py"} <= select  # packages run
    # data.filter imports data.pipeline too, but not the function that imports the PII code.
    assert "data/pipeline.py" in files_of("apertus.data.filter")
    assert "data/pii.py" not in files_of("apertus.data.filter")
    # Training runs torchtitan with `--module apertus.train.config_registry` (a string): what
    # that module uses is the stage's code too.
    train = files_of("apertus.train.stage")
    assert {"train/config_registry.py", "train/goldfish.py", "train/ademamix.py"} <= train
    assert "evaluate/lmeval.py" not in train
    assert "evaluate/lmeval.py" in files_of("apertus.evaluate.stage")
    with pytest.raises(ApertusError, match="not a module of the apertus package"):
        module_closure("apertus.no_such_module")


def test_key_packages_count_with_their_versions():
    train = step_code("apertus.train.stage")
    assert train["packages"]["torchtitan"] == version("torchtitan")
    assert train["packages"]["torch"] == version("torch")
    assert "lm_eval" not in train["packages"]
    assert step_code("apertus.evaluate.stage")["packages"]["lm_eval"] == version("lm_eval")
    assert step_code("apertus.release.hub")["packages"] == {}
    other = {**train, "packages": {**train["packages"], "torch": "0.0.1"}}
    assert changed_files(train, other) == ["torch==0.0.1"]


def test_pins_replace_a_files_digest_and_changes_are_named():
    code = step_code("apertus.data.select")
    pii = "apertus/data/pii.py"
    pinned = step_code("apertus.data.select", {pii: "0" * 64})
    assert pinned["digest"] != code["digest"] and pinned["pinned"] == [pii]
    assert changed_files(code, pinned) == [pii]
    assert step_code("apertus.data.select", {pii: code["files"][pii]})["digest"] == code["digest"]
    manifest = {"step_code": pinned}
    assert code_changes(manifest) == [pii]
    assert code_changes({"step_code": code}) == []
    assert code_changes({"step_code": None}) == []  # written before code digests existed
    gone = {"step_code": {**code, "entry": "apertus.gone"}}
    assert "not a module" in code_changes(gone)[0]


def test_pin_and_unpin_a_run(tmp_path, monkeypatch):
    run = tmp_path / "run"
    (run / "data").mkdir(parents=True)
    (run / "data" / "out.txt").write_text("x")
    # A manifest as `python -m apertus.data.select ...` writes it.
    monkeypatch.setattr("sys.orig_argv", ["python", "-m", "apertus.data.select", "--x"])
    monkeypatch.delenv("APERTUS_CODE_PINS", raising=False)
    import datetime as dt

    now = dt.datetime.now(dt.UTC)
    manifest = write_manifest(
        run / "data" / "corpus.manifest.json",
        stage="data", step="select", config={}, inputs=[], outputs=[run / "data" / "out.txt"],
        seed=None, started=now, ended=now,
    )  # fmt: skip
    assert manifest["step_code"] == step_code("apertus.data.select")
    pii = "apertus/data/pii.py"
    pins = set_pins(run, [pii], pin=True)
    assert pins == {pii: manifest["step_code"]["files"][pii]} == read_pins(run / PINS_FILE)
    with pytest.raises(ApertusError, match=r"no step of .* recorded this file"):
        set_pins(run, ["apertus/evaluate/lmeval.py"], pin=True)
    with pytest.raises(ApertusError, match="not a file of this repository"):
        set_pins(run, ["/etc/passwd"], pin=True)
    assert set_pins(run, [pii], pin=False) == {}
    with pytest.raises(ApertusError, match="not pinned"):
        set_pins(run, [pii], pin=False)
    (run / PINS_FILE).write_text(json.dumps({"files": ["x"]}))
    with pytest.raises(ApertusError, match="must map paths to digests"):
        read_pins(run / PINS_FILE)


def test_a_rerun_of_a_step_warns_when_its_code_changed():
    from apertus.audit.rerun import RerunReport, render_rerun

    report = RerunReport("data/select", "data/corpus.manifest.json", "/tmp/x", "rerun")
    report.code_changed = ["apertus/data/pii.py", "torch==9.9"]
    assert (
        "warning: the code differs from the code the step ran: apertus/data/pii.py, torch==9.9"
        in render_rerun(report)
    )
    report.code_changed = []
    assert "warning" not in render_rerun(report)


def _digests_in_a_new_process(cache: str) -> dict[str, str]:
    """The digests of two steps, computed by a fresh process with APERTUS_CODE_CACHE=`cache`."""
    script = (
        "import json; from apertus.core.codedigest import step_code; "
        "print(json.dumps({m: step_code(m)['digest'] for m in "
        "('apertus.data.select', 'apertus.train.launch')}))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        env={**os.environ, "APERTUS_CODE_CACHE": cache},
        check=True,
    )
    return json.loads(proc.stdout)


def test_the_facts_kept_on_disk_give_the_same_digests_and_bad_entries_are_redone(tmp_path):
    cache = tmp_path / "cache"
    computed = _digests_in_a_new_process("off")
    assert _digests_in_a_new_process(str(cache)) == computed  # written
    entries = sorted(cache.glob("*.json"))
    assert len(entries) > 10
    assert _digests_in_a_new_process(str(cache)) == computed  # read back
    # They are read, not computed again: whole entries with other digests give other digests.
    kept = {entry: entry.read_bytes() for entry in entries}
    for entry in entries:
        facts = JsonCache(cache).get(entry.stem)
        facts["digest"] = "0" * 64
        JsonCache(cache).put(entry.stem, facts)
    other = _digests_in_a_new_process(str(cache))
    assert all(other[step] != computed[step] for step in computed)
    for entry, data in kept.items():
        entry.write_bytes(data)
    # A flipped byte in every entry, one truncated, one emptied: each is computed again.
    for entry in entries:
        data = bytearray(entry.read_bytes())
        data[len(data) // 2] ^= 0x01
        entry.write_bytes(bytes(data))
    entries[0].write_bytes(entries[0].read_bytes()[:40])
    entries[1].write_bytes(b"")
    assert _digests_in_a_new_process(str(cache)) == computed
    assert all(JsonCache(cache).get(entry.stem) is not None for entry in entries)
    # An entry holding another file's facts under its name is not taken either.
    entries[3].write_bytes(entries[2].read_bytes())
    assert _digests_in_a_new_process(str(cache)) == computed
    # A cache folder that cannot be made costs only the time.
    (tmp_path / "file").write_text("")
    assert _digests_in_a_new_process(str(tmp_path / "file" / "cache")) == computed
