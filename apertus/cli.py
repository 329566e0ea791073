"""The `apertus` command: configuration checks and the project's own facts.

    apertus config check [-c PRESET.yaml ...] [KEY=VALUE ...]   validate a run's configuration
    apertus config show  [-c PRESET.yaml ...] [KEY=VALUE ...]   print it with every default filled
    apertus config docs  [--check]                              regenerate config/README.md
    apertus version                                             code and package versions

Stages are run by Snakemake (`snakemake`, see README.md), not by this command.
"""

from __future__ import annotations

import argparse
import json
import sys

import yaml

from apertus.core import REPO_ROOT, ApertusError
from apertus.core.config import load_config, render_reference
from apertus.core.files import atomic_write_text
from apertus.core.manifest import code_version, package_versions

CONFIG_REFERENCE = REPO_ROOT / "config" / "README.md"


def _add_config_sources(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "-c",
        "--configfile",
        action="append",
        default=[],
        metavar="FILE",
        help="config file merged over config/config.yaml, like snakemake --configfile (repeatable)",
    )
    parser.add_argument(
        "overrides", nargs="*", metavar="KEY=VALUE", help="single keys, dotted for nesting"
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="apertus", description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)

    config = commands.add_parser("config", help="check, show or document the run configuration")
    config_commands = config.add_subparsers(dest="action", required=True)
    check = config_commands.add_parser("check", help="validate config/config.yaml plus overrides")
    _add_config_sources(check)
    show = config_commands.add_parser("show", help="print the resolved config with defaults")
    _add_config_sources(show)
    docs = config_commands.add_parser("docs", help="write config/README.md from the schema")
    docs.add_argument(
        "--check", action="store_true", help="only report whether config/README.md is current"
    )

    commands.add_parser("version", help="print the code version and key package versions")
    return parser


def _config_docs(check: bool) -> int:
    text = render_reference()
    current = CONFIG_REFERENCE.read_text(encoding="utf-8") if CONFIG_REFERENCE.exists() else ""
    if check:
        if current != text:
            print(f"{CONFIG_REFERENCE} is out of date: run `apertus config docs`", file=sys.stderr)
            return 1
        print(f"{CONFIG_REFERENCE} is current")
        return 0
    atomic_write_text(CONFIG_REFERENCE, text)
    print(f"wrote {CONFIG_REFERENCE}")
    return 0


def run(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "version":
        print(json.dumps({"code": code_version(), "packages": package_versions()}, indent=2))
        return 0
    if args.action == "docs":
        return _config_docs(args.check)
    config = load_config(args.configfile, args.overrides)
    if args.action == "show":
        print(yaml.safe_dump(config, sort_keys=False), end="")
    else:
        print("configuration is valid")
    return 0


def main(argv: list[str] | None = None) -> None:
    try:
        sys.exit(run(argv))
    except ApertusError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
