"""The session's split into two streams of tests (`second_stream_items` in tests/conftest.py)."""

from types import SimpleNamespace

import pytest

from tests.conftest import second_stream_items


def item(nodeid: str, *fixtures: str, slurm: bool = False):
    marker = object() if slurm else None
    return SimpleNamespace(
        nodeid=nodeid,
        fixturenames=list(fixtures),
        get_closest_marker=lambda name: marker if name == "slurm" else None,
    )


ITEMS = [
    item("tests/train/test_torchtitan.py::test_a"),
    item("tests/train/test_pretrain_stage.py::test_b", "default_run_phase2"),
    item("tests/posttrain/test_qrpo_train.py::test_c", "slurm_cluster", slurm=True),
    item("tests/data/test_quality.py::test_d[x y]"),
    item("tests/audit/test_checksums.py::test_e"),
    item("tests/evaluate/test_lmeval.py::test_f", "default_run"),
    item("tests/rehearsal/test_rehearsal.py::test_g", "rehearsal", slurm=True),
]


@pytest.fixture
def streams(monkeypatch):
    monkeypatch.delenv("APERTUS_TEST_STREAM", raising=False)
    monkeypatch.delenv("APERTUS_TEST_STREAMS", raising=False)
    return monkeypatch


def test_the_second_stream_takes_its_folders_tests_that_read_no_run_and_use_no_cluster(streams):
    second = second_stream_items(ITEMS)
    assert [i.nodeid for i in second] == [
        "tests/train/test_torchtitan.py::test_a",
        "tests/data/test_quality.py::test_d[x y]",
    ]


def test_no_second_stream_without_a_background_run_in_itself_or_when_turned_off(streams):
    alone = [i for i in ITEMS if not {"default_run", "default_run_phase2", "rehearsal"}
             & set(i.fixturenames)]  # fmt: skip
    assert second_stream_items(alone) == []
    streams.setenv("APERTUS_TEST_STREAMS", "2")
    assert len(second_stream_items(alone)) == 2
    streams.setenv("APERTUS_TEST_STREAMS", "1")
    assert second_stream_items(ITEMS) == []
    streams.delenv("APERTUS_TEST_STREAMS")
    streams.setenv("APERTUS_TEST_STREAM", "second")
    assert second_stream_items(ITEMS) == []


def test_a_bad_number_of_streams_is_a_usage_error(streams):
    streams.setenv("APERTUS_TEST_STREAMS", "3")
    with pytest.raises(pytest.UsageError, match="APERTUS_TEST_STREAMS='3'"):
        second_stream_items(ITEMS)
