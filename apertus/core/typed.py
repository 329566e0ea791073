"""A config subtree as the stage's frozen dataclasses: the one typing step at a stage's boundary.

A step receives its config subtree as JSON (the rule passes it already validated and defaulted by
``workflow/schemas/config.schema.yaml``); :func:`typed` turns it into the dataclass the stage's
code works with, and a config dataclass inherits :class:`Config` to get ``from_dict``::

    @dataclass(frozen=True)
    class PII(Config, key="data.pii"):
        kinds: tuple[str, ...]
        exempt_kinds: tuple[str, ...]

    PII.from_dict({"kinds": ["email"]})  # exempt_kinds from the schema: ("code", "math")

What it does, whatever the subtree:

- Defaults come from the schema, never from the dataclass: the missing keys of the subtree at
  `where` are filled as the workflow fills them (:func:`apertus.core.config.apply_defaults`), so a
  partial dict (a test, a step run by hand, a rule passing one part of a section) gets exactly
  the values a real run gets. A config field therefore has no default; a field may keep one only
  where the schema has none to give (an optional key such as ``evaluate.suite.tasks[].limit``).
- A key the dataclass lacks is refused with its full key path (``data.pii.kind``) and the
  closest known key; a key the schema does not default and the dataclass needs is reported
  missing, with its path.
- Values are built along the field annotations: a dataclass from a mapping, ``tuple[X, ...]``
  and ``list[X]`` from a list, ``dict[str, X]`` from a mapping, ``X | None``. Leaves are checked
  for their JSON type only (a bool is neither an integer nor a number; an integer is a number,
  kept as written): ranges and allowed values are the schema's business, and a class checks
  its own invariants in ``__post_init__``.
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
import functools
import numbers
import re
import types
import typing
from collections.abc import Callable, Mapping
from typing import Any, ClassVar, TypeVar

from apertus.core import ApertusError
from apertus.core.config import ConfigError, apply_defaults, load_schema, resolve_ref

T = TypeVar("T")

_PATH_PART = re.compile(r"([^.\[\]]+)|\[(\d*)\]")


def is_integer(value: Any) -> bool:
    """An integer that is not a bool (``True`` is an ``int`` in Python); numpy's integers count."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def is_number(value: Any) -> bool:
    """A real number that is not a bool; numpy's numbers count, as in `is_integer`."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


# Leaf types: the check, and how a message names what was expected (alone, and in a list).
_LEAVES: dict[type, tuple[Callable[[Any], bool], str, str]] = {
    bool: (lambda v: isinstance(v, bool), "true or false", "booleans"),
    int: (is_integer, "an integer", "integers"),
    float: (is_number, "a number", "numbers"),
    str: (lambda v: isinstance(v, str), "a string", "strings"),
}


class _WrongType(Exception):
    """A value of the wrong kind at `path`; becomes a ConfigError once its message is known."""

    def __init__(self, path: str, expected: str, value: Any):
        super().__init__(path)
        self.path, self.expected, self.value = path, expected, value

    def error(self) -> ConfigError:
        what = self.path or "the record"
        return ConfigError(f"{what} must be {self.expected}, got {self.value!r}")


class Config:
    """Base of a config dataclass: ``Cls.from_dict(data)`` is ``typed(Cls, data, where=key)``.

    `key` is the key path of the class's subtree in the run config (``data.pii``; ``[]`` stands
    for the items of a list, as in ``data.sources[]``), given in the class statement:
    ``class PII(Config, key="data.pii")``.
    """

    config_key: ClassVar[str]

    def __init_subclass__(cls, key: str | None = None, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if key is not None:
            cls.config_key = key

    @classmethod
    def from_dict(cls: type[T], data: Mapping[str, Any] | None = None) -> T:
        """The subtree `data` (None = all defaults) as this class; see :func:`typed`."""
        key = getattr(cls, "config_key", None)
        if key is None:
            raise TypeError(f"{cls.__name__} has no config key: declare it with Config, key=...")
        return typed(cls, data, where=key)


@functools.cache
def _run_schema() -> dict[str, Any]:
    # Read once per process; apply_defaults copies what it takes, so it is never changed.
    return load_schema()


def typed(
    cls: type[T],
    data: Mapping[str, Any] | None,
    *,
    where: str,
    schema: dict[str, Any] | None = None,
) -> T:
    """The config subtree `data` at key path `where` as `cls`, a (frozen) dataclass.

    `where` (``"data"``, ``"posttrain.qrpo_data.reward"``, ``"data.sources[0]"``) both finds the
    subtree's schema, whose defaults fill the keys `data` lacks, and names keys in errors.
    `schema` is the whole config schema (default: ``workflow/schemas/config.schema.yaml``).
    `data` is not changed; None stands for an empty mapping (every key defaulted). Raises
    ConfigError for an unknown key, a missing required key or a value of the wrong type.
    """
    root = _run_schema() if schema is None else schema
    if data is None:
        data = {}
    if not isinstance(data, Mapping):
        raise ConfigError(f"{where} must be a mapping, got {data!r}")
    filled = copy.deepcopy(dict(data))
    apply_defaults(filled, subschema(root, where), root)
    try:
        return _convert(cls, filled, where)
    except _WrongType as e:
        raise e.error() from None


def build(cls: type[T], data: Any, *, label: str) -> T:
    """`data`, a whole JSON record that is not a config subtree (a training run's spec.json),
    as `cls`, converted as `typed` converts a subtree but with no schema: the dataclass's own
    defaults fill missing keys. Key paths in errors start at the record's root (``lr.peak``);
    every error, the classes' own ``__post_init__`` checks included, is an ApertusError
    prefixed with `label` (``run spec results/.../spec.json``)."""
    try:
        return _convert(cls, data, "")
    except _WrongType as e:
        raise ConfigError(f"{label}: {e.error()}") from None
    except ApertusError as e:
        raise ConfigError(f"{label}: {e}") from None


def _key(path: str, key: Any) -> str:
    """The key path of `key` inside the mapping at `path` ("" is the root)."""
    return f"{path}.{key}" if path else str(key)


def _at(path: str) -> str:
    """The prefix naming where a mapping's error is ("" at the root)."""
    return f"{path}: " if path else ""


def subschema(root: dict[str, Any], where: str) -> dict[str, Any]:
    """The schema of the subtree at key path `where` (``[N]`` or ``[]``: a list's items)."""
    node: dict[str, Any] = root
    for match in _PATH_PART.finditer(where):
        node = _object_schema(node, root)
        key = match.group(1)
        if key is None:
            items = node.get("items")
            if not isinstance(items, dict):
                raise ValueError(f"config key path {where!r}: not a list at {match.group(0)}")
            node = items
        elif key in node.get("properties", {}):
            node = node["properties"][key]
        elif isinstance(node.get("additionalProperties"), dict):
            node = node["additionalProperties"]
        else:
            raise ValueError(f"the config schema has no key {where!r} (at {key!r})")
    return node


def _object_schema(node: dict[str, Any], root: dict[str, Any]) -> dict[str, Any]:
    """`node` resolved; of a `null or mapping` choice, the mapping."""
    node = resolve_ref(node, root)
    for option in node.get("anyOf", ()):
        option = resolve_ref(option, root)
        if option.get("type") in ("object", "array"):
            return option
    return node


@functools.cache
def _field_types(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _convert(tp: Any, value: Any, path: str) -> Any:
    """`value` (at key path `path`) as type `tp`."""
    if tp is Any or tp is object:
        return value
    origin = typing.get_origin(tp)
    if origin is typing.Union or origin is types.UnionType:
        return _convert_union(tp, value, path)
    if not _has_shape(tp, value):
        raise _WrongType(path, _expected(tp), value)
    if dataclasses.is_dataclass(tp):
        return _build(tp, value, path)
    if origin is tuple or origin is list:
        return _convert_list(tp, origin, value, path)
    if tp is dict or origin in (dict, Mapping):
        args = typing.get_args(tp)
        item = args[1] if args else Any
        return {k: _convert(item, v, _key(path, k)) for k, v in value.items()}
    return value  # a leaf or a Literal, checked by _has_shape


def _has_shape(tp: Any, value: Any) -> bool:
    """Whether `value` is the JSON kind `tp` is built from (a leaf: of its type)."""
    if tp is Any or tp is object:
        return True
    if tp is type(None):
        return value is None
    origin = typing.get_origin(tp)
    if origin is typing.Union or origin is types.UnionType:
        return any(_has_shape(member, value) for member in typing.get_args(tp))
    if dataclasses.is_dataclass(tp) or tp is dict or origin in (dict, Mapping):
        return isinstance(value, Mapping)
    if origin is tuple or origin is list:
        return isinstance(value, list | tuple)
    if origin is typing.Literal:
        return value in typing.get_args(tp)
    if tp in _LEAVES:
        return _LEAVES[tp][0](value)
    raise TypeError(f"config fields cannot be of type {tp!r}")


def _expected(tp: Any) -> str:
    """What a message says a value of type `tp` must be."""
    if tp is type(None):
        return "null"
    origin = typing.get_origin(tp)
    if origin is typing.Union or origin is types.UnionType:
        return " or ".join(_expected(member) for member in typing.get_args(tp))
    if dataclasses.is_dataclass(tp) or tp is dict or origin in (dict, Mapping):
        return "a mapping"
    if origin is tuple or origin is list:
        return "a list"
    if origin is typing.Literal:
        return "one of " + ", ".join(map(repr, typing.get_args(tp)))
    return _LEAVES[tp][1] if tp in _LEAVES else getattr(tp, "__name__", str(tp))


def _convert_union(tp: Any, value: Any, path: str) -> Any:
    # The first member the value has the shape of decides (`int | str`: 3 is an int, "auto" a
    # string); what is wrong inside it is then reported as that member's error.
    for member in typing.get_args(tp):
        if _has_shape(member, value):
            return None if value is None else _convert(member, value, path)
    raise _WrongType(path, _expected(tp), value)


def _convert_list(tp: Any, origin: type, value: Any, path: str) -> Any:
    args = typing.get_args(tp)
    if origin is tuple and args and args[-1] is not Ellipsis:
        if len(value) != len(args):
            raise _WrongType(path, f"a list of {len(args)} elements", value)
        item_types = list(args)
    else:
        item_types = [args[0] if args else Any] * len(value)
    items = []
    for i, (item_type, item) in enumerate(zip(item_types, value, strict=True)):
        try:
            items.append(_convert(item_type, item, f"{path}[{i}]"))
        except _WrongType as e:
            if e.path != f"{path}[{i}]" or item_type not in _LEAVES:
                raise
            # A leaf of the wrong type: name the list, as one writes it in the config.
            raise _WrongType(path, f"a list of {_LEAVES[item_type][2]}", value) from None
    return origin(items)


def _build(cls: type, value: Mapping[str, Any], path: str) -> Any:
    known = [f.name for f in dataclasses.fields(cls) if f.init]
    unknown = [key for key in value if key not in known]
    if unknown:
        named = []
        for key in unknown:
            hint = difflib.get_close_matches(str(key), known, n=1)
            named.append(f"'{_key(path, key)}'" + (f" (did you mean '{hint[0]}'?)" if hint else ""))
        raise ConfigError(
            f"{_at(path)}unknown key{'s' if len(unknown) > 1 else ''} {', '.join(named)}; "
            f"allowed: {', '.join(sorted(known))}"
        )
    missing = [
        f.name
        for f in dataclasses.fields(cls)
        if f.init
        and f.name not in value
        and f.default is dataclasses.MISSING
        and f.default_factory is dataclasses.MISSING
    ]
    if missing:
        raise ConfigError(
            f"{_at(path)}missing key{'s' if len(missing) > 1 else ''} "
            + ", ".join(f"'{_key(path, name)}'" for name in missing)
        )
    types_ = _field_types(cls)
    return cls(**{key: _convert(types_[key], item, _key(path, key)) for key, item in value.items()})
