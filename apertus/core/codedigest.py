"""The code a step runs, as a digest that follows its meaning, not its bytes.

A step is ``python -m apertus.<module>``. Its code is that entry module and the ``apertus``
modules it uses, transitively: a static import graph of the package, read from the source files'
syntax trees (:func:`module_closure`). Module-level imports always count (importing
``apertus.a.b`` also runs the ``__init__`` of ``apertus`` and ``apertus.a``); an import inside a
function counts when that function is used, so a module imported for one helper does not bring
everything its other functions import. Each file is reduced to its normalized syntax tree:
comments, formatting and docstrings do not exist there, so editing them, or running the
formatter, changes nothing; a changed constant, condition, name or function body changes the
file's digest. The key third-party packages the modules import (torch, torchtitan, datatrove,
transformers, lm-eval, tokenizers) count with their installed versions: upgrading one changes the
digest of the steps that import it.

:func:`step_code` gives ``{"entry", "digest", "files", "packages", "pinned"}``. The workflow
puts the digest in each rule's params (Snakemake then re-runs the step, and everything downstream
of its outputs, when it changes); each step's manifest records the whole record
(``step_code``), so ``apertus status`` and ``apertus explain`` can name the files that changed.

Pinning: ``apertus code pin FILE`` (`apertus.audit.pins`) records, in the run's
``code-pins.json``, the digest the run's manifests hold for FILE; the workflow and the steps then
count FILE with that digest, so a typo fixed in a log message re-trains nothing. ``apertus code
unpin FILE`` ends it.

Computed once per file and process (keyed by path, size and modification time), so building a
large DAG parses each of the package's files at most once; and kept between processes in
``$XDG_CACHE_HOME/apertus/codedigest`` (``~/.cache``; ``APERTUS_CODE_CACHE`` names another
folder, ``off`` turns it off), keyed by the file's bytes, its module name and the Python
version, so each SLURM job's and each step's workflow parse reads the facts instead of walking
the syntax trees again. An entry that does not read back whole (a flipped byte, a truncated
write) is computed again and replaced.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import json
import os
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from apertus.core import ApertusError
from apertus.core.diskcache import JsonCache, user_cache

__all__ = [
    "CODE_PARAM_PREFIX",
    "DIGEST_VERSION",
    "PACKAGE_ROOT",
    "PINS_FILE",
    "PINS_VARIABLE",
    "changed_files",
    "code_changes",
    "file_digest",
    "manifest_code_changes",
    "module_closure",
    "pins_of_run",
    "read_pins",
    "step_code",
]

DIGEST_VERSION = 1
PACKAGE_ROOT = Path(__file__).resolve().parent.parent  # .../apertus
REPO_ROOT = PACKAGE_ROOT.parent
# Import name -> the distributions whose version counts for a module importing it.
KEY_IMPORTS = {
    "torch": ("torch",),
    "torchtitan": ("torchtitan", "torch"),
    "datatrove": ("datatrove",),
    "transformers": ("transformers", "tokenizers"),
    "tokenizers": ("tokenizers",),
    "lm_eval": ("lm_eval",),
}
# The workflow names the run's pins file here for its jobs (`apertus code pin`).
PINS_VARIABLE = "APERTUS_CODE_PINS"
PINS_FILE = "code-pins.json"
# A rule's `code` param is this prefix and the step's digest (never mistaken for config JSON).
CODE_PARAM_PREFIX = "code sha256:"


def _strip_docstrings(tree: ast.AST) -> ast.AST:
    """Remove the docstring (a leading string expression) of the module, every class and every
    function; a body left empty gets ``pass``, as the docstring-only function means."""
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if (
                body
                and isinstance(body[0], ast.Expr)
                and isinstance(body[0].value, ast.Constant)
                and isinstance(body[0].value.value, str)
            ):
                node.body = body[1:] or [ast.Pass()]
    return tree


def _parse(path: Path, source: bytes) -> ast.Module:
    try:
        return ast.parse(source, filename=str(path))
    except SyntaxError as e:
        raise ApertusError(f"{path}:{e.lineno}: syntax error: {e.msg}") from None


@dataclass(frozen=True)
class _Scope:
    """What one piece of code needs: modules it imports (absolute names, run when it runs),
    names it binds from imports (local name -> (module, attribute or None)), and the bare and
    dotted names it refers to."""

    imports: tuple[tuple[str, str | None], ...]
    bindings: Mapping[str, tuple[str, str | None]]
    names: frozenset[str]
    attributes: frozenset[tuple[str, str]]
    strings: frozenset[str]


@dataclass(frozen=True)
class _ModuleFacts:
    digest: str
    top: _Scope  # module-level code (class bodies included; not function bodies)
    functions: Mapping[str, _Scope]  # top-level function or class -> its bodies


def _scope(nodes: Iterable[ast.AST], module: str, is_package: bool, skip_defs: bool) -> _Scope:
    """The needs of `nodes` (walked whole, or without the bodies of functions when
    `skip_defs`), with the import bindings they make."""
    imports: list[tuple[str, str | None]] = []
    bindings: dict[str, tuple[str, str | None]] = {}
    names: set[str] = set()
    attributes: set[tuple[str, str]] = set()
    strings: set[str] = set()
    stack = list(nodes)
    while stack:
        node = stack.pop()
        if isinstance(node, ast.Import):
            for alias in node.names:
                imports.append((alias.name, None))
                if alias.asname:
                    bindings[alias.asname] = (alias.name, None)
                else:
                    bindings[alias.name.split(".")[0]] = (alias.name.split(".")[0], None)
        elif isinstance(node, ast.ImportFrom):
            base = _absolute(node.module or "", node.level, module, is_package)
            for alias in node.names:
                imports.append((base, alias.name))
                bindings[alias.asname or alias.name] = (base, alias.name)
        elif isinstance(node, ast.Name):
            names.add(node.id)
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            attributes.add((node.value.id, node.attr))
        elif (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and node.value.startswith("apertus.")
            and node.value.replace(".", "_").isidentifier()
        ):
            strings.add(node.value)
        if skip_defs and isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            stack.extend(getattr(node, "decorator_list", []))
            stack.extend(ast.walk(node.args))
            continue
        stack.extend(ast.iter_child_nodes(node))
    return _Scope(
        tuple(imports), bindings, frozenset(names), frozenset(attributes), frozenset(strings)
    )


@functools.cache
def _file_facts(path: Path, _size: int, _mtime_ns: int) -> _ModuleFacts:
    """Digest of the normalized tree and what the module's code needs. Cached on the file's size
    and modification time in this process, and on its bytes on disk (`_FactsCache`)."""
    try:
        source = path.read_bytes()
    except OSError as e:
        raise ApertusError(f"{path}: unreadable: {e}") from None
    module, is_package = _module_name(path), path.name == "__init__.py"
    cache = _facts_cache()
    if cache is None:
        return _compute_facts(path, source, module, is_package)
    key = cache.key(source, module, is_package)
    facts = cache.get(key)
    if facts is None:
        facts = _compute_facts(path, source, module, is_package)
        cache.put(key, facts)
    return facts


def _compute_facts(path: Path, source: bytes, module: str, is_package: bool) -> _ModuleFacts:
    tree = _parse(path, source)
    top_nodes, functions = [], {}
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            functions[node.name] = _scope(node.body, module, is_package, False)
            top_nodes.extend([*node.decorator_list, node.args])
        elif isinstance(node, ast.ClassDef):
            # The class body runs at import; its methods when the class is used.
            functions[node.name] = _scope(node.body, module, is_package, False)
            top_nodes.append(node)
        else:
            top_nodes.append(node)
    top = _scope(top_nodes, module, is_package, True)
    dump = ast.dump(_strip_docstrings(tree), annotate_fields=True, include_attributes=False)
    return _ModuleFacts(hashlib.sha256(dump.encode()).hexdigest(), top, functions)


def _scope_record(scope: _Scope) -> dict[str, Any]:
    return {
        "imports": [list(pair) for pair in scope.imports],
        "bindings": {name: list(pair) for name, pair in sorted(scope.bindings.items())},
        "names": sorted(scope.names),
        "attributes": sorted(list(pair) for pair in scope.attributes),
        "strings": sorted(scope.strings),
    }


def _scope_of_record(record: dict[str, Any]) -> _Scope:
    return _Scope(
        tuple((module, attribute) for module, attribute in record["imports"]),
        {name: (module, attribute) for name, (module, attribute) in record["bindings"].items()},
        frozenset(record["names"]),
        frozenset((owner, attribute) for owner, attribute in record["attributes"]),
        frozenset(record["strings"]),
    )


class _FactsCache:
    """Module facts kept on disk between processes (`apertus.core.diskcache`), keyed by the
    sha256 of the digest format, the Python version, the module's name and the file's bytes."""

    FORMAT = 2  # bump when _ModuleFacts, _scope or the normalized dump changes

    def __init__(self, entries: JsonCache) -> None:
        self.entries = entries

    def key(self, source: bytes, module: str, is_package: bool) -> str:
        head = f"{DIGEST_VERSION}.{self.FORMAT} {sys.version_info[:2]} {module} {is_package}\n"
        return hashlib.sha256(head.encode() + source).hexdigest()

    def get(self, key: str) -> _ModuleFacts | None:
        facts = self.entries.get(key)
        try:
            return _ModuleFacts(
                facts["digest"],
                _scope_of_record(facts["top"]),
                {name: _scope_of_record(scope) for name, scope in facts["functions"].items()},
            )
        except (ValueError, KeyError, TypeError, AttributeError):
            return None

    def put(self, key: str, facts: _ModuleFacts) -> None:
        record = {
            "digest": facts.digest,
            "top": _scope_record(facts.top),
            "functions": {name: _scope_record(s) for name, s in facts.functions.items()},
        }
        self.entries.put(key, record)


@functools.cache
def _facts_cache() -> _FactsCache | None:
    """The on-disk cache: ``APERTUS_CODE_CACHE`` (``off``: none), else the user's cache folder."""
    entries = user_cache("codedigest", "APERTUS_CODE_CACHE")
    return None if entries is None else _FactsCache(entries)


def _facts(path: Path) -> _ModuleFacts:
    stat = path.stat()
    return _file_facts(path, stat.st_size, stat.st_mtime_ns)


def file_digest(path: str | os.PathLike[str]) -> str:
    """sha256 of the file's syntax tree without docstrings (comments and layout are not in it)."""
    return _facts(Path(path).resolve()).digest


@functools.cache
def _module_file(name: str) -> Path | None:
    """The source file of module `name` of the apertus package (None: not one of its modules)."""
    parts = name.split(".")
    if parts[0] != "apertus":
        return None
    base = PACKAGE_ROOT.joinpath(*parts[1:])
    for candidate in (base / "__init__.py", base.with_suffix(".py")):
        if candidate.is_file():
            return candidate
    return None


def _module_name(path: Path) -> str:
    """The dotted name of a file of the package (a file elsewhere: its stem)."""
    if not path.is_relative_to(PACKAGE_ROOT):
        return path.stem
    relative = path.relative_to(PACKAGE_ROOT.parent).with_suffix("")
    parts = list(relative.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _absolute(name: str, level: int, module: str, is_package: bool) -> str:
    """`name` imported with `level` leading dots from `module`, as an absolute name."""
    if not level:
        return name
    package = module.split(".") if is_package else module.split(".")[:-1]
    package = package[: len(package) - (level - 1)]
    return ".".join([*package, name] if name else package)


def module_closure(entry: str) -> tuple[list[Path], set[str]]:
    """The apertus source files `entry` runs, and the top-level names of the other modules
    they import.

    Module-level code always runs; a function's or class's body counts only when the code
    that runs refers to it (by name in its module, as ``from m import f``, as ``m.f``, or as
    ``"apertus.m"`` in a string: a module started by name, e.g. by torchrun). So a module
    imported only for one helper does not bring the imports hidden in its other functions."""
    if _module_file(entry) is None:
        raise ApertusError(f"{entry}: not a module of the apertus package ({PACKAGE_ROOT})")
    modules: dict[str, Path] = {}
    done: set[tuple[str, str | None]] = set()
    external: set[str] = set()
    pending: list[tuple[str, str | None]] = [(entry, None)]

    def need(module: str, attribute: str | None) -> None:
        """Code refers to `module` (its attribute `attribute`, or the module itself)."""
        if attribute is not None and _module_file(f"{module}.{attribute}") is not None:
            module, attribute = f"{module}.{attribute}", None
        if _module_file(module) is None:
            if module and not module.startswith("apertus"):
                external.add(module.split(".")[0])
            return
        parts = module.split(".")
        for i in range(1, len(parts) + 1):  # importing a.b.c runs a, a.b and a.b.c
            pending.append((".".join(parts[:i]), None))
        if attribute is not None:
            pending.append((module, attribute))

    def run(module: str, facts: _ModuleFacts, scope: _Scope) -> None:
        # Names bound by the scope's own imports (a function's lazy ones) over the module's.
        local = {**facts.top.bindings, **scope.bindings}
        for imported, attribute in scope.imports:
            need(imported, attribute)
        for name in scope.names:  # `owner.attr` walks `owner` as a name too
            if name in facts.functions:
                pending.append((module, name))
            elif name in local:
                need(*local[name])
        for owner, attribute in scope.attributes:  # `module.function`
            if owner in local and local[owner][1] is None:
                need(local[owner][0], attribute)
        for text in scope.strings:
            if _module_file(text) is not None:
                need(text, None)

    while pending:
        module, name = pending.pop()
        if (module, name) in done:
            continue
        done.add((module, name))
        path = _module_file(module)
        facts = _facts(path)
        modules[module] = path
        if name is None:
            run(module, facts, facts.top)
            if module == entry:  # a step's entry module runs as a script: all of it counts
                for function in facts.functions:
                    pending.append((module, function))
        elif name in facts.functions:
            run(module, facts, facts.functions[name])
        elif name in facts.top.bindings:  # re-exported: `from apertus.b import f` in module a
            need(*facts.top.bindings[name])
    return sorted(set(modules.values())), external


@functools.cache  # a version lookup reads the environment's metadata: ~2 ms, 80 per parse
def _installed(distribution: str) -> str | None:
    try:
        return version(distribution)
    except PackageNotFoundError:
        return None


def read_pins(path: str | os.PathLike[str] | None) -> dict[str, str]:
    """The pins file (``{"files": {path: digest}}``); empty when `path` is None or missing."""
    if path is None or not Path(path).is_file():
        return {}
    try:
        files = json.loads(Path(path).read_text(encoding="utf-8"))["files"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise ApertusError(f"{path}: not a code pins file ({e})") from None
    if not isinstance(files, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in files.items()
    ):
        raise ApertusError(f"{path}: 'files' must map paths to digests")
    return files


def pins_of_run() -> dict[str, str]:
    """The pins of the run a step belongs to (the workflow names its pins file in
    ``APERTUS_CODE_PINS``); empty outside the workflow."""
    return read_pins(os.environ.get(PINS_VARIABLE) or None)


def step_code(entry: str, pins: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The code of the step whose entry module is `entry`: ``files`` (repository-relative path
    -> file digest), ``packages`` (distribution -> installed version, for the key packages its
    modules import) and ``digest`` (sha256 over both and the digest format). A file in `pins`
    counts with its pinned digest (``pinned`` lists those whose current digest differs)."""
    paths, external = module_closure(entry)
    files: dict[str, str] = {}
    pinned: list[str] = []
    for path in paths:
        relative = path.relative_to(REPO_ROOT).as_posix()
        files[relative] = file_digest(path)
        if pins and relative in pins and pins[relative] != files[relative]:
            files[relative] = pins[relative]
            pinned.append(relative)
    packages = {
        distribution: _installed(distribution)
        for name in sorted(external & set(KEY_IMPORTS))
        for distribution in KEY_IMPORTS[name]
    }
    packages = dict(sorted(packages.items()))
    text = "\n".join(
        [f"apertus-code-digest {DIGEST_VERSION}"]
        + [f"{path} {digest}" for path, digest in files.items()]
        + [f"{name}=={ver}" for name, ver in packages.items()]
    )
    return {
        "entry": entry,
        "digest": hashlib.sha256(text.encode()).hexdigest(),
        "files": files,
        "packages": packages,
        "pinned": pinned,
    }


def changed_files(recorded: Mapping[str, Any], current: Mapping[str, Any]) -> list[str]:
    """What differs between two `step_code` records: the files whose digest changed, appeared or
    went, then ``package==version`` for each key package whose version changed."""
    old_files, new_files = recorded.get("files") or {}, current.get("files") or {}
    changed = sorted(
        path
        for path in set(old_files) | set(new_files)
        if old_files.get(path) != new_files.get(path)
    )
    old_packages, new_packages = recorded.get("packages") or {}, current.get("packages") or {}
    changed += [
        f"{name}=={new_packages.get(name)}"
        for name in sorted(set(old_packages) | set(new_packages))
        if old_packages.get(name) != new_packages.get(name)
    ]
    return changed


def manifest_code_changes(
    manifest_path: str | os.PathLike[str], pins: Mapping[str, str] | None = None
) -> list[str] | None:
    """`code_changes` of the step manifest at `manifest_path`; None when it cannot be read."""
    try:
        manifest = json.loads(Path(manifest_path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return code_changes(manifest, pins) if isinstance(manifest, dict) else None


def code_changes(manifest: Mapping[str, Any], pins: Mapping[str, str] | None = None) -> list[str]:
    """What changed in the code of a step since its manifest was written (`changed_files` of
    its recorded ``step_code`` against today's, with `pins`); empty when nothing did, or when
    the manifest records no code (a step run by hand, or before code digests existed)."""
    recorded = manifest.get("step_code")
    if not isinstance(recorded, Mapping) or not isinstance(recorded.get("entry"), str):
        return []
    try:
        current = step_code(recorded["entry"], pins)
    except ApertusError as e:  # the module is gone, or does not parse
        return [str(e)]
    return changed_files(recorded, current)
