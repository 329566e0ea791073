"""The import graph of the package has no cycles (STYLE.md: "no two modules import each other,
not even inside a function").

The graph is read from the source with `ast`, never by importing: every ``import`` and
``from ... import`` anywhere in a module counts, inside functions and under ``if TYPE_CHECKING``
too (a type-only import still ties the two modules together, and it is one edit away from a
run-time one). ``from package import name`` counts as importing the submodule ``package.name``
when there is one, otherwise the package itself. Importing ``a.b.c`` does not count as importing
the packages ``a`` and ``a.b``: Python runs their ``__init__`` first, but no source says so, and
a package's ``__init__`` importing its own submodules would otherwise always be a cycle.
"""

from __future__ import annotations

import ast
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path

import pytest

import apertus

PACKAGE_DIR = Path(apertus.__file__).resolve().parent


@dataclass(frozen=True)
class ImportEdge:
    """`source` imports `target`, first at `path`:`line`."""

    source: str
    target: str
    path: Path
    line: int


def module_files(package_dir: Path) -> dict[str, Path]:
    """Each module of the package under `package_dir`, by dotted name (a package by the name of
    its ``__init__``)."""
    root = package_dir.parent
    modules = {}
    for path in sorted(package_dir.rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        modules[".".join(parts)] = path
    return modules


def _imported_names(node: ast.Import | ast.ImportFrom, module: str, is_package: bool) -> list[str]:
    """The dotted names an import statement in `module` asks for: a module, or for
    ``from X import a`` the candidates ``X.a`` (when `a` is a submodule) and ``X``."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if node.level:
        # A relative import is relative to the module's package: itself for an __init__.
        package = module.split(".") if is_package else module.split(".")[:-1]
        keep = len(package) - (node.level - 1)
        if keep <= 0:
            return []  # beyond the top-level package: not ours
        base = ".".join(package[:keep] + ([node.module] if node.module else []))
    else:
        base = node.module or ""
    return [base] + [f"{base}.{alias.name}" for alias in node.names if alias.name != "*"]


def import_graph(package_dir: Path) -> dict[str, dict[str, ImportEdge]]:
    """For each module of the package under `package_dir`, the modules of the same package it
    imports, each with the first place it does (see the module docstring for what counts)."""
    modules = module_files(package_dir)
    graph: dict[str, dict[str, ImportEdge]] = {name: {} for name in modules}
    for module, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        is_package = path.name == "__init__.py"
        for node in ast.walk(tree):
            if not isinstance(node, ast.Import | ast.ImportFrom):
                continue
            names = _imported_names(node, module, is_package)
            if isinstance(node, ast.ImportFrom) and names:
                # `from X import a, b`: each submodule it names, else the module X itself.
                base, candidates = names[0], names[1:]
                submodules = [n for n in candidates if n in modules]
                names = submodules if len(submodules) == len(candidates) else [base, *submodules]
            for name in names:
                target = _longest_known_prefix(name, modules)
                if target is None or target == module:
                    continue
                if target not in graph[module] or node.lineno < graph[module][target].line:
                    graph[module][target] = ImportEdge(module, target, path, node.lineno)
    return graph


def _longest_known_prefix(name: str, modules: Mapping[str, Path]) -> str | None:
    parts = name.split(".")
    for end in range(len(parts), 0, -1):
        prefix = ".".join(parts[:end])
        if prefix in modules:
            return prefix
    return None


def strongly_connected_components(graph: Mapping[str, Iterable[str]]) -> list[list[str]]:
    """Tarjan's algorithm (iterative, so deep graphs do not hit the recursion limit): the
    strongly connected components of `graph`, each sorted, in a stable order."""
    index: dict[str, int] = {}
    lowlink: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    components: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = lowlink[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, successors = work[-1]
            for succ in successors:
                if succ not in index:
                    index[succ] = lowlink[succ] = len(index)
                    stack.append(succ)
                    on_stack.add(succ)
                    work.append((succ, iter(sorted(graph.get(succ, ())))))
                    break
                if succ in on_stack:
                    lowlink[node] = min(lowlink[node], index[succ])
            else:
                work.pop()
                if work:
                    parent = work[-1][0]
                    lowlink[parent] = min(lowlink[parent], lowlink[node])
                if lowlink[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    components.append(sorted(component))
    return sorted(components)


def _shortest_path(graph: Mapping[str, Iterable[str]], start: str, goal: str, within: set[str]):
    previous: dict[str, str | None] = {start: None}
    queue = deque([start])
    while queue:
        node = queue.popleft()
        if node == goal:
            path = [node]
            while previous[path[-1]] is not None:
                path.append(previous[path[-1]])
            return path[::-1]
        for succ in sorted(graph[node]):
            if succ in within and succ not in previous:
                previous[succ] = node
                queue.append(succ)
    return None


def import_cycles(graph: Mapping[str, Iterable[str]]) -> list[list[str]]:
    """Cycles that between them use every import inside each strongly connected component,
    each as a chain ``[a, b, ..., a]``: the shortest cycle through the first import not yet
    shown, and so on. A component of many modules gives several short chains, each of which
    can be read (and cut) on its own."""
    cycles = []
    for component in strongly_connected_components(graph):
        members = set(component)
        if len(component) == 1 and component[0] not in graph[component[0]]:
            continue
        shown: set[tuple[str, str]] = set()
        for source in component:
            for target in sorted(graph[source]):
                if target not in members or (source, target) in shown:
                    continue
                back = _shortest_path(graph, target, source, members)
                cycle = [source, *back]
                shown.update(pairwise(cycle))
                cycles.append(cycle)
    return cycles


def describe_cycle(cycle: list[str], graph: Mapping[str, Mapping[str, ImportEdge]]) -> str:
    """``a -> b -> a`` and, below it, where each of those imports is."""
    root = PACKAGE_DIR.parent
    lines = [" -> ".join(cycle)]
    for source, target in pairwise(cycle):
        edge = graph[source][target]
        where = edge.path.relative_to(root) if edge.path.is_relative_to(root) else edge.path
        lines.append(f"    {where}:{edge.line} imports {target}")
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------


def test_no_module_imports_one_that_imports_it_back():
    graph = import_graph(PACKAGE_DIR)
    cycles = import_cycles(graph)
    if cycles:
        pytest.fail(
            f"{len(cycles)} import cycle(s) in the apertus package; move what both sides need "
            "into a module below both (STYLE.md):\n"
            + "\n".join(describe_cycle(cycle, graph) for cycle in cycles),
            pytrace=False,
        )


@pytest.fixture
def toy_package(tmp_path):
    """Write a package from {relative path: source} and return its directory."""

    def write(files: dict[str, str]) -> Path:
        for relative, source in files.items():
            path = tmp_path / "toy" / relative
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(source, encoding="utf-8")
        return tmp_path / "toy"

    return write


def test_imports_inside_functions_and_type_checking_blocks_count(toy_package):
    package = toy_package(
        {
            "__init__.py": "",
            "a.py": "def f():\n    from toy import b\n",
            "b.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import toy.a\n",
        }
    )
    graph = import_graph(package)
    assert set(graph["toy.a"]) == {"toy.b"}
    assert set(graph["toy.b"]) == {"toy.a"}
    assert import_cycles(graph) == [["toy.a", "toy.b", "toy.a"]]


def test_relative_imports_resolve_to_the_module_they_name(toy_package):
    package = toy_package(
        {
            "__init__.py": "from .sub import leaf\n",
            "top.py": "from . import sub\nfrom .sub.leaf import X\n",
            "sub/__init__.py": "from . import leaf\nfrom .. import other\n",
            "other.py": "",
            "sub/leaf.py": "from ..top import Y\n",
        }
    )
    graph = import_graph(package)
    assert set(graph["toy"]) == {"toy.sub.leaf"}
    assert set(graph["toy.top"]) == {"toy.sub", "toy.sub.leaf"}
    assert set(graph["toy.sub"]) == {"toy.sub.leaf", "toy.other"}
    assert set(graph["toy.sub.leaf"]) == {"toy.top"}


def test_from_package_import_a_name_counts_the_package_not_its_submodules(toy_package):
    package = toy_package(
        {
            "__init__.py": "class Error(Exception): ...\n",
            "core.py": "from toy import Error\n",
            "stage.py": "from toy import Error, core\nimport json\n",
        }
    )
    graph = import_graph(package)
    assert set(graph["toy.core"]) == {"toy"}
    assert set(graph["toy.stage"]) == {"toy", "toy.core"}
    assert import_cycles(graph) == []


def test_every_import_of_a_larger_cycle_is_shown_in_a_short_chain(toy_package):
    package = toy_package(
        {
            "__init__.py": "",
            "a.py": "import toy.b\nimport toy.c\n",
            "b.py": "import toy.a\n",
            "c.py": "import toy.d\n",
            "d.py": "import toy.a\n",
            "e.py": "import toy.a\n",
        }
    )
    graph = import_graph(package)
    assert strongly_connected_components(graph) == [
        ["toy"],
        ["toy.a", "toy.b", "toy.c", "toy.d"],
        ["toy.e"],
    ]
    cycles = import_cycles(graph)
    assert cycles == [["toy.a", "toy.b", "toy.a"], ["toy.a", "toy.c", "toy.d", "toy.a"]]
    text = describe_cycle(cycles[0], graph)
    assert text.splitlines()[0] == "toy.a -> toy.b -> toy.a"
    assert text.splitlines()[1].endswith("a.py:1 imports toy.b")
