"""A config subtree as frozen dataclasses (apertus.core.typed): defaults from the schema only,
unknown and missing keys named by their path, leaves of the right JSON type."""

from __future__ import annotations

import copy
import dataclasses
import importlib
from dataclasses import dataclass
from typing import Any

import pytest

from apertus.core import ApertusError
from apertus.core.config import ConfigError, load_schema
from apertus.core.typed import Config, is_integer, subschema, typed

# A small run config schema: a section with a nested mapping, a list of mappings with a required
# key, an optional mapping and a shared definition reached through $ref.
SCHEMA: dict[str, Any] = {
    "type": "object",
    "$defs": {
        "limits": {
            "type": "object",
            "properties": {"low": {"type": "integer", "default": 1}},
        }
    },
    "properties": {
        "shop": {
            "type": "object",
            "properties": {
                "name": {"type": "string", "default": "corner"},
                "open": {"type": "boolean", "default": True},
                "rate": {"type": "number", "default": 0.5},
                "tags": {"type": "array", "items": {"type": "string"}, "default": ["a", "b"]},
                "prices": {
                    "type": "object",
                    "additionalProperties": {"type": "number"},
                    "default": {"tea": 2},
                },
                "owner": {"type": ["string", "null"], "default": None},
                "till": {
                    "type": "object",
                    "properties": {
                        "coins": {"type": "integer", "default": 20},
                        "notes": {"type": "array", "items": {"type": "integer"}, "default": [5]},
                    },
                },
                "limits": {"$ref": "#/$defs/limits"},
                "items": {
                    "type": "array",
                    "default": [{"sku": "x1"}],
                    "items": {
                        "type": "object",
                        "required": ["sku"],
                        "properties": {
                            "sku": {"type": "string"},
                            "count": {"type": "integer", "default": 1},
                        },
                    },
                },
                "extra": {
                    "anyOf": [
                        {"type": "null"},
                        {
                            "type": "object",
                            "properties": {"size": {"type": "integer", "default": 3}},
                        },
                    ],
                    "default": None,
                },
            },
        }
    },
}


@dataclass(frozen=True)
class Till:
    coins: int
    notes: tuple[int, ...]


@dataclass(frozen=True)
class Limits:
    low: int


@dataclass(frozen=True)
class Item:
    sku: str
    count: int


@dataclass(frozen=True)
class Extra:
    size: int


@dataclass(frozen=True)
class Shop:
    name: str
    open: bool
    rate: float
    tags: tuple[str, ...]
    prices: dict[str, float]
    owner: str | None
    till: Till
    limits: Limits
    items: tuple[Item, ...]
    extra: Extra | None


def shop(data: dict[str, Any] | None) -> Shop:
    return typed(Shop, data, where="shop", schema=SCHEMA)


def test_an_empty_subtree_is_built_from_the_schema_defaults_at_every_depth():
    assert shop({}) == Shop(
        name="corner",
        open=True,
        rate=0.5,
        tags=("a", "b"),
        prices={"tea": 2},
        owner=None,
        till=Till(coins=20, notes=(5,)),
        limits=Limits(low=1),
        items=(Item(sku="x1", count=1),),
        extra=None,
    )
    assert shop(None) == shop({})


def test_given_keys_win_and_the_missing_ones_around_them_are_filled():
    built = shop(
        {
            "till": {"coins": 3},
            "items": [{"sku": "y"}, {"sku": "z", "count": 4}],
            "extra": {},
            "rate": 2,
        }
    )
    assert built.till == Till(coins=3, notes=(5,))
    assert built.items == (Item("y", 1), Item("z", 4))
    assert built.extra == Extra(size=3)  # a `null or mapping` key given a mapping: filled
    assert built.rate == 2 and isinstance(built.rate, int)  # an integer is a number, as written


def test_the_given_mapping_is_left_as_it_was():
    data = {"till": {"coins": 3}, "items": [{"sku": "y"}]}
    before = copy.deepcopy(data)
    shop(data)
    assert data == before


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"nmae": "x"}, r"^shop: unknown key 'shop\.nmae' \(did you mean 'name'\?\); allowed: "),
        ({"till": {"coin": 1}}, r"shop\.till: unknown key 'shop\.till\.coin'"),
        ({"items": [{"sku": "a"}, {"sku": "b", "n": 1}]}, r"unknown key 'shop\.items\[1\]\.n'"),
        ({"extra": {"sizes": 1}}, r"unknown key 'shop\.extra\.sizes'"),
        ({"a": 1, "b": 2}, r"unknown keys 'shop\.a', 'shop\.b'"),
    ],
)
def test_an_unknown_key_is_refused_with_its_full_path(data, message):
    with pytest.raises(ConfigError, match=message):
        shop(data)


def test_a_required_key_without_a_default_is_named_missing():
    with pytest.raises(ConfigError, match=r"shop\.items\[0\]: missing key 'shop\.items\[0\]\.sku'"):
        shop({"items": [{"count": 2}]})


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"till": {"coins": True}}, r"shop\.till\.coins must be an integer, got True"),
        ({"till": {"coins": 2.5}}, r"shop\.till\.coins must be an integer, got 2\.5"),
        ({"rate": False}, r"shop\.rate must be a number, got False"),
        ({"open": "yes"}, r"shop\.open must be true or false, got 'yes'"),
        ({"name": 3}, r"shop\.name must be a string"),
        ({"owner": 3}, r"shop\.owner must be a string or null, got 3"),
        ({"tags": "a"}, r"shop\.tags must be a list, got 'a'"),
        ({"till": {"notes": [5, True]}}, r"shop\.till\.notes must be a list of integers"),
        ({"till": 3}, r"shop\.till must be a mapping, got 3"),
        ({"items": [{"sku": "a", "count": "2"}]}, r"shop\.items\[0\]\.count must be an integer"),
        ({"prices": {"tea": "2"}}, r"shop\.prices\.tea must be a number"),
        ({"extra": 3}, r"shop\.extra must be a mapping or null, got 3"),
    ],
)
def test_a_value_of_the_wrong_json_type_is_refused_naming_its_path(data, message):
    """The schema checks a real run's config first; a dict that never met the schema (a test, a
    step run by hand) is still not typed wrongly. A bool is never taken for an integer."""
    with pytest.raises(ConfigError, match=message):
        shop(data)


def test_a_subtree_that_is_not_a_mapping_is_refused():
    with pytest.raises(ConfigError, match=r"shop must be a mapping, got \[1\]"):
        shop([1])  # type: ignore[arg-type]


def test_is_integer_refuses_bools():
    assert is_integer(3) and is_integer(0)
    assert not is_integer(True) and not is_integer(3.0) and not is_integer("3")


def test_key_paths_find_the_schema_of_list_items_and_optional_mappings():
    assert subschema(SCHEMA, "shop.items[]")["required"] == ["sku"]
    assert subschema(SCHEMA, "shop.items[3].count")["default"] == 1
    assert subschema(SCHEMA, "shop.extra.size")["default"] == 3
    assert subschema(SCHEMA, "shop.limits.low")["type"] == "integer"  # through $ref
    with pytest.raises(ValueError, match="no key"):
        subschema(SCHEMA, "shop.till.cash")


# --- the Config base and the run's schema ---------------------------------------------------


@dataclass(frozen=True)
class Dedup(Config, key="data.dedup"):
    minhash: bool
    ngrams: int
    buckets: int
    hashes_per_bucket: int
    exact: bool

    def __post_init__(self) -> None:
        if self.ngrams > 100:
            raise ApertusError("data.dedup.ngrams is too large")


def test_a_config_class_types_its_subtree_of_the_run_schema():
    schema = load_schema()["properties"]["data"]["properties"]["dedup"]["properties"]
    built = Dedup.from_dict({"ngrams": 7})
    assert built.ngrams == 7
    assert built.buckets == schema["buckets"]["default"]
    assert Dedup.from_dict() == Dedup.from_dict({})
    with pytest.raises(ConfigError, match=r"data\.dedup: unknown key 'data\.dedup\.n_grams'"):
        Dedup.from_dict({"n_grams": 7})
    with pytest.raises(ApertusError, match="too large"):  # the class's own invariant
        Dedup.from_dict({"ngrams": 101})


def test_a_config_class_without_a_key_cannot_be_built_alone():
    @dataclass(frozen=True)
    class Nowhere(Config):
        x: int

    with pytest.raises(TypeError, match="no config key"):
        Nowhere.from_dict({})


# Each stage's config class, built from nothing but the schema's defaults: a schema key the class
# lacks would be an unknown key, a field the schema lacks a missing one.
STAGE_CONFIGS = [
    "apertus.data.config:DataConfig",
    "apertus.evaluate.stage:EvaluateConfig",
    "apertus.export.stage:ExportConfig",
    "apertus.release.config:ReleaseConfig",
    "apertus.posttrain.instructions:InstructionConfig",
    "apertus.posttrain.sft_data:SFTConfig",
    "apertus.posttrain.sampling:SamplingConfig",
    "apertus.posttrain.qrpo_train:QRPOConfig",
    "apertus.posttrain.sft:SFTTrainingConfig",
    "apertus.train.config:PretrainConfig",
]


@pytest.mark.parametrize("name", STAGE_CONFIGS)
def test_each_stage_config_matches_its_schema_section_key_for_key(name):
    module, _, cls_name = name.partition(":")
    cls = getattr(importlib.import_module(module), cls_name)
    built = cls.from_dict({})
    section = subschema(load_schema(), cls.config_key)
    assert {f.name for f in dataclasses.fields(built)} == set(section["properties"])
