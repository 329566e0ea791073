"""A pathological line in a posttrain JSON Lines file (SFT conversations, prompts) is refused,
naming its file, line and the limit, after a read that never holds the whole line."""

import json
import tracemalloc

import pytest

from apertus.core import ApertusError
from apertus.core.files import MAX_LINE_BYTES, read_jsonl
from apertus.posttrain.instructions import read_conversations


def conversation(i: int, content: str = "") -> dict:
    return {
        "id": f"c{i}",
        "language": "en",
        "messages": [
            {"role": "user", "content": f"question {i}"},
            {"role": "assistant", "content": content or f"answer {i}"},
        ],
    }


@pytest.fixture
def long_line_file(tmp_path):
    """Two good conversations, a 50 MB one on line 3, then one more."""
    path = tmp_path / "conversations.jsonl"
    with open(path, "w", encoding="utf-8") as f:
        for i in range(2):
            f.write(json.dumps(conversation(i)) + "\n")
        f.write(json.dumps(conversation(2, "x" * 50_000_000)) + "\n")
        f.write(json.dumps(conversation(3)) + "\n")
    return path


def test_a_line_over_the_limit_is_refused_by_file_line_and_limit(long_line_file):
    tracemalloc.start()
    try:
        with pytest.raises(ApertusError) as refused:
            read_conversations(long_line_file)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert f"{long_line_file}, line 3: 47.7 MiB long, over the limit of 16.0 MiB" in str(
        refused.value
    )
    assert peak < 2 * MAX_LINE_BYTES + (4 << 20), f"reading held {peak / 2**20:.1f} MiB"


def test_lines_up_to_the_limit_are_read(long_line_file):
    rows = read_jsonl(long_line_file, max_line_bytes=60_000_000)
    assert [row["id"] for _, row in rows] == ["c0", "c1", "c2", "c3"]
