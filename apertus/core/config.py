"""Run configuration: one JSON schema holds every key, its type, allowed values, default, meaning.

The schema (``workflow/schemas/config.schema.yaml``) is the single source of defaults and of the
key reference in ``config/README.md``. :func:`validate_config` fills the defaults and rejects a
wrong key, type or value with a message naming the key path and what is allowed, before any job
runs. Unknown keys are rejected everywhere (the schema says ``additionalProperties: false``), so a
typo never passes silently.
"""

from __future__ import annotations

import copy
import difflib
import math
import os
import re
from collections.abc import Hashable, Iterable, Sequence
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from apertus.core import REPO_ROOT, ApertusError

SCHEMA_PATH = REPO_ROOT / "workflow" / "schemas" / "config.schema.yaml"
DEFAULT_CONFIG = REPO_ROOT / "config" / "config.yaml"


def checkout_root(directory: str | os.PathLike | None = None) -> Path:
    """The checkout whose config/config.yaml and schema a run uses: `directory` (by default the
    current one) when it is a checkout of the pipeline (a workflow/Snakefile and
    config/config.yaml), else the workflow this package was installed with (`REPO_ROOT`)."""
    here = Path(directory) if directory is not None else Path.cwd()
    if (here / "workflow" / "Snakefile").is_file() and (here / "config" / "config.yaml").is_file():
        return here
    return REPO_ROOT


def shipped_path(path: str | os.PathLike) -> Path:
    """An input path of the config, relative ones as Snakemake's jobs see them (from the working
    directory); one missing there but shipped with the workflow (`config/robots`, in a checkout
    or the installed package) is that copy: a run outside a checkout finds the default inputs."""
    path = Path(path)
    if path.is_absolute() or path.exists():
        return path
    shipped = REPO_ROOT / path
    return shipped if shipped.exists() else path


_JSON_TYPES = {
    bool: "boolean",
    int: "integer",
    float: "number",
    str: "string",
    list: "array",
    dict: "object",
    type(None): "null",
}


class ConfigError(ApertusError):
    """The configuration does not match the schema; the message lists every problem by key path."""


class _UniqueKeyLoader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # libyaml's parser: ~10x
    """YAML's safe loader, refusing a key given twice in one mapping (YAML says keys are
    unique; PyYAML keeps the last one and drops the first without a word). Keys a merge
    (``<<: *base``) brings in may still be overridden."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        seen: dict[Any, yaml.Node] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue  # `<<: *base`: its keys may be overridden, by design
            key = self.construct_object(key_node, deep=True)
            if isinstance(key, Hashable) and key in seen:
                raise yaml.constructor.ConstructorError(
                    None,
                    None,
                    f"key {key!r} appears twice in one mapping (first on line "
                    f"{seen[key].start_mark.line + 1}); YAML keeps only the last",
                    key_node.start_mark,
                )
            if isinstance(key, Hashable):
                seen[key] = key_node
        return super().construct_mapping(node, deep=deep)


_UniqueKeyLoader.add_constructor(
    yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _UniqueKeyLoader.construct_mapping
)


def load_yaml(path: str | os.PathLike, what: str = "config file") -> Any:
    """Parse a YAML file, turning a syntax error into a ConfigError that names the file and line."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise ConfigError(f"cannot read {what} {path}: {e.strerror}") from None
    try:
        return yaml.load(text, Loader=_UniqueKeyLoader)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"{path}, line {mark.line + 1}" if mark else str(path)
        problem = getattr(e, "problem", None) or str(e)
        raise ConfigError(f"{what} {where}: invalid YAML: {problem}") from None


def load_schema(path: str | os.PathLike = SCHEMA_PATH) -> dict[str, Any]:
    return load_yaml(path, what="config schema")


def resolve_ref(schema: dict[str, Any], root: dict[str, Any]) -> dict[str, Any]:
    """Follow a local ``$ref`` (``#/$defs/name``); the schema uses no other kind."""
    while "$ref" in schema:
        node: Any = root
        for part in schema["$ref"].removeprefix("#/").split("/"):
            node = node[part]
        schema = {**node, **{k: v for k, v in schema.items() if k != "$ref"}}
    return schema


def apply_defaults(
    instance: Any, schema: dict[str, Any], root: dict[str, Any] | None = None
) -> None:
    """Fill missing keys from the schema's defaults, in place, at every depth.

    A missing object with properties is created empty and then filled, so only leaves need a
    ``default`` in the schema. Values of the wrong type are left for validation to report.
    """
    root = schema if root is None else root
    schema = resolve_ref(schema, root)
    if isinstance(instance, dict) and "anyOf" in schema:
        # `null or mapping` style keys: fill the mapping option's defaults.
        for option in schema["anyOf"]:
            if resolve_ref(option, root).get("type") == "object":
                apply_defaults(instance, option, root)
        return
    if isinstance(instance, dict):
        properties = schema.get("properties", {})
        for key, sub in properties.items():
            sub = resolve_ref(sub, root)
            if key not in instance:
                if "default" in sub:
                    instance[key] = copy.deepcopy(sub["default"])
                elif sub.get("type") == "object":
                    instance[key] = {}
            if key in instance:
                apply_defaults(instance[key], sub, root)
        extra = schema.get("additionalProperties")
        if isinstance(extra, dict):
            for key, value in instance.items():
                if key not in properties:
                    apply_defaults(value, extra, root)
    elif isinstance(instance, list) and isinstance(schema.get("items"), dict):
        for item in instance:
            apply_defaults(item, schema["items"], root)


def key_path(parts: Iterable[Any]) -> str:
    """``['data', 'sources', 2, 'reader']`` -> ``data.sources[2].reader``."""
    out = ""
    for part in parts:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _json_type(value: Any) -> str:
    return _JSON_TYPES.get(type(value), type(value).__name__)


def _text_hint(text: str) -> str:
    """Why a value meant as a number or boolean arrived as text, and how to write it."""
    if isinstance(yaml.safe_load(text) if text.strip() else None, bool | int | float):
        # A config file would have read it as a number or boolean: it came through Snakemake's
        # --config, which reads `x=false` and every nested value as text.
        return (
            " (Snakemake's --config passes this as text: write booleans as True/False,"
            " and set nested keys in a --configfile)"
        )
    try:
        float(text)
    except ValueError:
        return ""
    # PyYAML (YAML 1.1) reads 1e-4 as a string; Snakemake reads config files the same way.
    return " (YAML reads exponents without a dot as text: write e.g. 1.0e-4)"


def _describe(error: jsonschema.ValidationError) -> list[str]:
    """Turn one jsonschema error into messages that name the key and what is allowed."""
    where = key_path(error.absolute_path)
    label = f"key '{where}'" if where else "the top level"
    kind, expected, value = error.validator, error.validator_value, error.instance
    if kind in ("anyOf", "oneOf") and error.context:
        # A `null or mapping` key given a mapping: explain what is wrong with the mapping.
        relevant = [
            e for e in error.context if not (e.validator == "type" and e.validator_value == "null")
        ]
        if relevant and value is not None:
            return [message for e in relevant for message in _describe(e)]
    if kind == "additionalProperties":
        allowed = sorted(error.schema.get("properties", {}))
        unknown = sorted(set(value) - set(allowed))
        messages = []
        for key in unknown:
            full = key_path([*error.absolute_path, key])
            hint = difflib.get_close_matches(str(key), allowed, n=1)
            suggestion = f" (did you mean '{hint[0]}'?)" if hint else ""
            messages.append(
                f"unknown key '{full}'{suggestion}; allowed under {label}: {', '.join(allowed)}"
            )
        return messages
    if kind == "type":
        wanted = " or ".join(expected) if isinstance(expected, list) else expected
        hint = _text_hint(value) if isinstance(value, str) else ""
        return [f"{label} must be of type {wanted}, got {_json_type(value)} {value!r}{hint}"]
    if kind == "enum":
        return [f"{label} is {value!r}; allowed values: {', '.join(map(repr, expected))}"]
    if kind == "required":
        missing = [k for k in expected if k not in value]
        return [f"missing key '{key_path([*error.absolute_path, k])}'" for k in missing]
    if kind in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"):
        bound = {
            "minimum": ">=",
            "maximum": "<=",
            "exclusiveMinimum": ">",
            "exclusiveMaximum": "<",
        }[kind]
        return [f"{label} is {value!r}; it must be {bound} {expected}"]
    if kind == "pattern":
        return [f"{label} is {value!r}; it must match the pattern {expected}"]
    if kind in ("minLength", "minItems"):
        return [f"{label} is {value!r}; it must have at least {expected} element(s)"]
    return [f"{label}: {error.message}"]


def _not_finite(value: Any, path: list[Any]) -> Iterable[str]:
    """Key paths of NaN and infinite numbers (YAML's .nan, .inf), which compare false with every
    bound, so a schema's minimum and maximum let them through."""
    if isinstance(value, float) and not math.isfinite(value):
        yield f"key '{key_path(path)}' is {value}; it must be a finite number"
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _not_finite(item, [*path, key])
    elif isinstance(value, list):
        for i, item in enumerate(value):
            yield from _not_finite(item, [*path, i])


def config_errors(config: Any, schema: dict[str, Any]) -> list[str]:
    """Every problem of `config` against `schema`, one message each, ordered by key path."""
    validator_cls = jsonschema.validators.validator_for(schema)
    validator = validator_cls(schema)
    errors = sorted(validator.iter_errors(config), key=lambda e: [str(p) for p in e.absolute_path])
    return [message for error in errors for message in _describe(error)] + list(
        _not_finite(config, [])
    )


def validate_config(
    config: dict[str, Any],
    schema: dict[str, Any] | None = None,
    sources: Sequence[str | os.PathLike] = (),
) -> dict[str, Any]:
    """Fill defaults into `config` in place and check it; raise ConfigError listing every problem.

    `sources` (the config files that were merged) only make the message easier to act on.
    """
    schema = load_schema() if schema is None else schema
    if not isinstance(config, dict):
        raise ConfigError(f"the configuration must be a mapping of keys, got {_json_type(config)}")
    apply_defaults(config, schema)
    problems = config_errors(config, schema)
    if problems:
        raise ConfigError(problems_message(problems, sources))
    return config


def problems_message(problems: Sequence[str], sources: Sequence[str | os.PathLike] = ()) -> str:
    """The text of a ConfigError listing `problems` (one per line) of the configuration merged
    from `sources`; the schema's and the cross-field checks (`apertus.plan_check`) read alike."""
    origin = f" (merged from {', '.join(map(str, sources))})" if sources else ""
    lines = "\n".join(f"  - {p}" for p in problems)
    return (
        f"invalid configuration{origin}:\n{lines}\n"
        "Every key, its type and allowed values: config/README.md"
    )


def deep_merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    """Merge `override` into `base` in place, recursing into mappings (as Snakemake does)."""
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(base.get(key), dict):
            deep_merge(base[key], value)
        else:
            base[key] = copy.deepcopy(value)
    return base


_EXPONENT = re.compile(r"[-+]?\d+(\.\d*)?[eE][-+]?\d+")


def parse_override(item: str) -> dict[str, Any]:
    """``train.lr=1e-4`` -> ``{'train': {'lr': 0.0001}}``; the value is read as YAML."""
    key, sep, raw = item.partition("=")
    if not sep or not key:
        raise ConfigError(f"override {item!r} must look like KEY=VALUE (dotted keys allowed)")
    value = yaml.safe_load(raw) if raw else ""
    if isinstance(value, str) and _EXPONENT.fullmatch(value):
        value = float(value)  # YAML 1.1 reads 1e-4 as text; on a command line it is a number
    for part in reversed(key.split(".")):
        value = {part: value}
    return value


def merge_overrides(overrides: Sequence[str]) -> dict[str, Any]:
    """``KEY=VALUE`` overrides (dotted keys) as one nested mapping, later ones winning: what a
    config file holding them would hold (Snakemake's own --config takes no dotted keys)."""
    merged: dict[str, Any] = {}
    for item in overrides:
        deep_merge(merged, parse_override(item))
    return merged


def dotted_config_args(snakemake_args: Sequence[str]) -> None:
    """Refuse dotted keys in Snakemake's own ``--config KEY=VALUE`` (``--config
    pretrain.lr.peak=1e-3``): Snakemake rejects them with a traceback before it reads the
    Snakefile, so the workflow cannot name them; `apertus run` and the quickstart call this
    first."""
    dotted, taking = [], False
    for arg in snakemake_args:
        if arg in ("--config", "-C"):
            taking = True
            continue
        if arg.startswith("--config="):
            arg, taking = arg.removeprefix("--config="), True
        elif arg.startswith("-"):
            taking = False
        if taking and "." in arg.partition("=")[0]:
            dotted.append(arg)
    if dotted:
        listed = " ".join(dotted)
        raise ConfigError(
            f"--config {listed}: Snakemake's --config takes no dotted keys; write "
            f"`apertus run {listed}` (KEY=VALUE with dotted keys, checked first) or set the "
            "keys as nested YAML in a file given with --configfile"
        )


def config_sources(
    configfiles: Sequence[str | os.PathLike] = (),
    overrides: Sequence[str] = (),
    directory: str | os.PathLike | None = None,
) -> list[str]:
    """Where `load_config` takes the configuration from, in merge order (for messages)."""
    default = checkout_root(directory) / "config" / "config.yaml"
    return [str(path) for path in (default, *configfiles)] + list(overrides)


def load_config(
    configfiles: Sequence[str | os.PathLike] = (),
    overrides: Sequence[str] = (),
    schema: dict[str, Any] | None = None,
    directory: str | os.PathLike | None = None,
) -> dict[str, Any]:
    """The run's configuration as Snakemake sees it in the checkout `directory`
    (`checkout_root`): its config/config.yaml, then each extra file (presets), then KEY=VALUE
    overrides, merged in that order, defaults filled and validated against its schema."""
    root = checkout_root(directory)
    if schema is None and (root / "workflow" / "schemas" / "config.schema.yaml").is_file():
        schema = load_schema(root / "workflow" / "schemas" / "config.schema.yaml")
    sources = [root / "config" / "config.yaml", *configfiles]
    config: dict[str, Any] = {}
    for path in sources:
        data = load_yaml(path)
        if data is None:
            # An empty file (or only comments) is almost always the wrong file or a failed write.
            raise ConfigError(f"config file {path}: empty (it holds no keys)")
        if not isinstance(data, dict):
            raise ConfigError(
                f"config file {path} must hold a mapping of keys, got {_json_type(data)}"
            )
        deep_merge(config, data)
    deep_merge(config, merge_overrides(overrides))
    return validate_config(config, schema, sources=[*sources, *overrides])


def _allowed(schema: dict[str, Any]) -> str:
    notes = []
    if "enum" in schema:
        notes.append("one of " + ", ".join(f"`{v}`" for v in schema["enum"]))
    for key, sign in (
        ("minimum", ">="),
        ("exclusiveMinimum", ">"),
        ("maximum", "<="),
        ("exclusiveMaximum", "<"),
    ):
        if key in schema:
            notes.append(f"{sign} {schema[key]}")
    if "pattern" in schema:
        notes.append(f"matches `{schema['pattern']}`")
    return "; ".join(notes)


def _type_name(schema: dict[str, Any]) -> str:
    if "anyOf" in schema:
        return " or ".join(_type_name(option) for option in schema["anyOf"])
    if "$ref" in schema:
        return "mapping"
    kind = schema.get("type", "any")
    if kind == "array" and isinstance(schema.get("items"), dict):
        return f"array of {schema['items'].get('type', 'any')}"
    return " or ".join(kind) if isinstance(kind, list) else kind


def _rows(schema: dict[str, Any], root: dict[str, Any], prefix: list[str]) -> list[str]:
    rows = []
    for key, sub in schema.get("properties", {}).items():
        sub = resolve_ref(sub, root)
        path = [*prefix, key]
        if sub.get("type") == "object" and "properties" in sub:
            rows += _rows(sub, root, path)
            continue
        default = f"`{canonical_yaml(sub['default'])}`" if "default" in sub else "required"
        description = " ".join(sub.get("description", "").split())
        allowed = _allowed(sub)
        if allowed:
            description += f" Allowed: {allowed}."
        rows.append(f"| `{key_path(path)}` | {_type_name(sub)} | {default} | {description} |")
    return rows


def canonical_yaml(value: Any) -> str:
    """A value as it would be written in config.yaml, on one line."""
    return yaml.safe_dump(value, default_flow_style=True, width=10**6).strip().removesuffix("\n...")


def render_reference(schema: dict[str, Any] | None = None) -> str:
    """config/README.md: every key of the schema with its type, default, allowed values, meaning."""
    schema = load_schema() if schema is None else schema
    out = [
        "# Configuration reference",
        "",
        "<!-- Generated from workflow/schemas/config.schema.yaml by `apertus config docs --write`;"
        " do not edit by hand (tests/core/test_config.py checks it is current). -->",
        "",
        " ".join(schema.get("description", "").split()),
        "",
    ]
    header = ["| key | type | default | meaning |", "|---|---|---|---|"]
    sections = {k: resolve_ref(v, schema) for k, v in schema.get("properties", {}).items()}
    scalars = {k: v for k, v in sections.items() if "properties" not in v}
    out += ["## Run", "", *header, *_rows({"properties": scalars}, schema, []), ""]
    for key, sub in sections.items():
        if key in scalars:
            continue
        out += [f"## `{key}`", "", " ".join(sub.get("description", "").split()), "", *header]
        out += [*_rows(sub, schema, [key]), ""]
    return "\n".join(out)
