"""The `data:` section as DataConfig: every default from the schema, so a step given part of the
section (or a test given a partial dict) filters exactly as a full run would."""

from __future__ import annotations

import pytest
from datatrove.data import Document

from apertus.core import ApertusError
from apertus.core.config import load_schema
from apertus.data.config import DataConfig
from apertus.data.pii import PIIFormatter
from apertus.data.pipeline import select_steps

DATA_SCHEMA = load_schema()["properties"]["data"]["properties"]


def schema_default(section: str, key: str):
    return DATA_SCHEMA[section]["properties"][key]["default"]


def test_a_partial_data_config_redacts_pii_as_a_full_run_does(tmp_path):
    """A dict naming only the output format still gets the schema's PII kinds, and the select
    pipeline built from it replaces an email (a config with an empty kinds list would not)."""
    cfg = DataConfig.from_dict(
        {"output": "jsonl.gz", "quality": {"enabled": False}, "toxicity": {"enabled": False}}
    )
    assert cfg.pii.kinds == tuple(schema_default("pii", "kinds")) != ()
    assert cfg.pii.exempt_kinds == tuple(schema_default("pii", "exempt_kinds"))
    steps = select_steps(
        cfg,
        input_root=tmp_path / "in",
        thresholds={},
        output_dir=tmp_path / "out",
        funnel_dir=tmp_path / "funnel",
    )
    (pii,) = [step for step in steps if isinstance(step, PIIFormatter)]
    doc = Document(text="Write to anna@example.org today.", id="1", metadata={"kind": "web"})
    (redacted,) = pii.run(iter([doc]))
    assert redacted.text == "Write to <email-pii> today."


def test_a_partial_data_config_takes_robots_agents_and_heuristic_families_from_the_schema():
    cfg = DataConfig.from_dict({"dedup": {"ngrams": 3}})
    assert cfg.dedup.ngrams == 3
    assert cfg.robots.agents == tuple(schema_default("robots", "agents"))
    assert cfg.heuristics.families == tuple(schema_default("heuristics", "families"))
    assert cfg.language.exempt_kinds == tuple(schema_default("language", "exempt_kinds"))
    assert [s.name for s in cfg.sources] == [s["name"] for s in DATA_SCHEMA["sources"]["default"]]


def test_quality_keeps_the_top_and_toxicity_drops_the_top_of_their_fractions():
    cfg = DataConfig.from_dict(
        {"quality": {"keep_fraction": 0.3}, "toxicity": {"drop_fraction": 0.1}}
    )
    quality, toxicity = cfg.quality, cfg.toxicity
    assert (quality.task, quality.keep, quality.fraction) == ("quality", "top", 0.3)
    assert (toxicity.task, toxicity.keep, toxicity.fraction) == ("toxicity", "bottom", 0.1)
    assert cfg.quality.score_key == "quality_score"


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"pii": {"kind": ["email"]}}, r"unknown key 'data\.pii\.kind' \(did you mean 'kinds'\?\)"),
        ({"sources": [{"name": "web"}]}, r"missing keys 'data\.sources\[0\]\.reader'"),
        ({"dedup": {"ngrams": True}}, r"data\.dedup\.ngrams must be an integer, got True"),
        ({"probes": {"words": 3}}, r"data\.probes\.words must be an integer >= 8"),
    ],
)
def test_a_bad_data_config_is_refused_naming_the_key(data, message):
    with pytest.raises(ApertusError, match=message):
        DataConfig.from_dict(data)
