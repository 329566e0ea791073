"""Writing beside, then swapping in: a file through a name (`atomic_path`) or a file object
(`atomic_open`), and a whole directory (`building_directory`). Readers see the old or the whole
new output; an error leaves the old one and no temporary behind."""

from __future__ import annotations

import hashlib
import os
import stat

import pytest

from apertus.core import ApertusError
from apertus.core.files import (
    atomic_path,
    atomic_write_bytes,
    atomic_write_text,
    building_directory,
)


def _mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def test_a_writer_that_wants_a_name_replaces_the_file_when_done(tmp_path):
    path = tmp_path / "deep" / "model.bin"
    atomic_write_bytes(path, b"old")
    with atomic_path(path) as tmp:
        assert tmp.parent == path.parent and tmp.name.startswith(".model.bin.")
        tmp.write_bytes(b"new weights")
        assert path.read_bytes() == b"old"  # not yet swapped in
    assert path.read_bytes() == b"new weights"
    assert [p.name for p in path.parent.iterdir()] == ["model.bin"]


def test_a_failed_writer_keeps_the_old_file_and_leaves_no_temporary(tmp_path):
    path = tmp_path / "scores.png"
    atomic_write_bytes(path, b"old plot")
    with pytest.raises(RuntimeError, match="plot failed"), atomic_path(path) as tmp:
        tmp.write_bytes(b"half a plo")
        raise RuntimeError("plot failed")
    assert path.read_bytes() == b"old plot"
    assert [p.name for p in tmp_path.iterdir()] == ["scores.png"]


def test_atomic_files_get_the_permissions_of_a_plain_new_file(tmp_path):
    # mkstemp makes 0600 files; outputs must be as readable as ones written with open().
    plain = tmp_path / "plain.txt"
    plain.write_text("x")
    text, blob = tmp_path / "a.txt", tmp_path / "b.bin"
    atomic_write_text(text, "x")
    atomic_write_bytes(blob, b"x")
    with atomic_path(tmp_path / "c.bin") as tmp:
        tmp.write_bytes(b"x")
    assert _mode(text) == _mode(blob) == _mode(tmp_path / "c.bin") == _mode(plain)


def test_a_built_directory_replaces_the_old_one_whole(tmp_path):
    target = tmp_path / "out" / "tokenizer"
    with building_directory(target) as built:
        (built / "a.json").write_text("1")
    with building_directory(target) as built:
        assert built.parent == target.parent and built.is_dir()
        assert not any(built.iterdir())
        (built / "b.json").write_text("2")
        assert (target / "a.json").read_text() == "1"  # the old one until the block ends
    assert sorted(p.name for p in target.iterdir()) == ["b.json"]
    assert [p.name for p in target.parent.iterdir()] == ["tokenizer"]


def test_a_failed_build_keeps_the_old_directory_and_leaves_no_temporary(tmp_path):
    target = tmp_path / "release"
    target.mkdir()
    (target / "README.md").write_text("old")
    with pytest.raises(ValueError, match="bad card"), building_directory(target) as built:
        (built / "README.md").write_text("new")
        raise ValueError("bad card")
    assert (target / "README.md").read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["release"]


def test_leftovers_of_a_killed_build_are_removed_by_the_next_build(tmp_path):
    target = tmp_path / "step-9"
    killed = tmp_path / f".step-9.{'a' * 32}.tmp"
    half_swapped = tmp_path / f".step-9.{'b' * 32}.old"
    other_target = tmp_path / f".step-9.foo.{'c' * 32}.tmp"  # a build of "step-9.foo"
    for path in (killed, half_swapped, other_target):
        (path / "shard").mkdir(parents=True)
    with building_directory(target) as built:
        (built / "metadata").write_text("{}")
    assert sorted(p.name for p in tmp_path.iterdir()) == [other_target.name, "step-9"]


# ---------------------------------------------------------------------------------------------
# verify_checksums: every byte read is the recorded one


def recorded(path):
    from apertus.core.files import Checksummed

    data = path.read_bytes()
    return Checksummed(path, hashlib.sha256(data).hexdigest(), len(data))


def test_verify_checksums_names_a_flipped_byte_and_a_wrong_size(tmp_path):
    from apertus.core.files import verify_checksums

    files = []
    for i in range(3):
        (tmp_path / f"{i}.ds").write_bytes(bytes(range(256)) * (i + 1))
        files.append(recorded(tmp_path / f"{i}.ds"))
    assert verify_checksums(files, "the shards")["bytes_hashed"] == 256 * 6
    data = bytearray((tmp_path / "1.ds").read_bytes())
    data[100] ^= 0x01
    (tmp_path / "1.ds").write_bytes(bytes(data))
    with pytest.raises(ApertusError, match=r"the shards: .*1\.ds: sha256 [0-9a-f]{64}, its record"):
        verify_checksums(files, "the shards")
    (tmp_path / "2.ds").write_bytes(b"short")
    with pytest.raises(ApertusError, match=r"2\.ds: 5 bytes, its record says 768.* \(and 1 more\)"):
        verify_checksums(files, "the shards")
