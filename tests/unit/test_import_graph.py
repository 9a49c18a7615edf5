"""The import graph of the source tree, read with `ast` (nothing is imported).

Every import that can run counts, eager or lazy (inside a function): a lazy import is still
a dependency, and the house rule is "no import cycles, not even lazy ones". Imports under
`if TYPE_CHECKING:` never run and are not edges (annotations only). An import of a module
also runs its parent packages' __init__, so those are edges too.

Layers (README, "Layout"): raftlog <- sink <- {connectors, tools}; connectors reach sink only
through the read API's thin client; the tools (chaos/, demos/) depend on the product, never
the reverse.
"""

from __future__ import annotations

import ast
import pathlib
from collections.abc import Iterable

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
PACKAGES = ("raftlog", "sink", "connectors", "chaos", "demos")
TOOLS = ("chaos", "demos")
THIN_CLIENT = (
    "sink",  # the namespace's __init__ runs first: it must stay empty
    "sink.readapi",
    "sink.readapi.client",
    "sink.readapi.wire",
    "sink.readapi.read_api_pb2",
)


def _module_name(path: pathlib.Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, pathlib.Path]:
    out = {}
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            out[_module_name(path)] = path
    return out


MODULES = _modules()


def _parents(name: str) -> Iterable[str]:
    parts = name.split(".")
    for k in range(1, len(parts)):
        yield ".".join(parts[:k])


def _resolve(name: str) -> str | None:
    """The longest prefix of `name` that is one of our modules (None: not ours)."""
    parts = name.split(".")
    for k in range(len(parts), 0, -1):
        candidate = ".".join(parts[:k])
        if candidate in MODULES:
            return candidate
    return None


def _is_type_checking(node: ast.AST) -> bool:
    if not isinstance(node, ast.If):
        return False
    t = node.test
    return (isinstance(t, ast.Name) and t.id == "TYPE_CHECKING") or (
        isinstance(t, ast.Attribute) and t.attr == "TYPE_CHECKING"
    )


def _runnable_nodes(tree: ast.AST) -> Iterable[ast.AST]:
    """Every node except the bodies of `if TYPE_CHECKING:` (their else branch runs)."""
    todo = [tree]
    while todo:
        node = todo.pop()
        yield node
        if _is_type_checking(node):
            todo.extend(node.orelse)  # type: ignore[attr-defined]
            continue
        todo.extend(ast.iter_child_nodes(node))


def _imports(name: str, path: pathlib.Path) -> set[str]:
    tree = ast.parse(path.read_text(), str(path))
    is_pkg = path.name == "__init__.py"
    found: set[str] = set()
    for node in _runnable_nodes(tree):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".")
                base = base if is_pkg else base[:-1]
                base = base[: len(base) - (node.level - 1)]
                mod = ".".join([*base, *([node.module] if node.module else [])])
            else:
                mod = node.module or ""
            # `from pkg import sub` imports the submodule pkg.sub when there is one.
            targets = [mod] + [f"{mod}.{a.name}" for a in node.names]
        else:
            continue
        for target in targets:
            resolved = _resolve(target)
            if resolved is None or resolved == name:
                continue
            # A module's own ancestors are initialised before it runs: no edge to them.
            own = set(_parents(name))
            found.update(
                m for m in (resolved, *_parents(resolved)) if m in MODULES and m not in own
            )
            found.discard(name)
    return found


GRAPH = {name: _imports(name, path) for name, path in MODULES.items()}


def _top(name: str) -> str:
    return name.split(".")[0]


def _violations(src_prefix: str, forbidden: tuple[str, ...]) -> list[str]:
    return sorted(
        f"{m} -> {t}"
        for m, targets in GRAPH.items()
        if _top(m) == src_prefix
        for t in targets
        if _top(t) in forbidden
    )


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one node (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            v, it = work[-1]
            advanced = False
            for w in it:
                if w not in graph:
                    continue
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                    advanced = True
                    break
                if w in on_stack:
                    low[v] = min(low[v], index[w])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return out


def _package_graph(prefix: str) -> dict[str, set[str]]:
    """Modules of `prefix` grouped by their first sub-level (sink.kafka.x -> sink.kafka)."""

    def unit(name: str) -> str:
        return ".".join(name.split(".")[:2])

    graph: dict[str, set[str]] = {}
    for m, targets in GRAPH.items():
        if _top(m) != prefix:
            continue
        edges = graph.setdefault(unit(m), set())
        edges.update(unit(t) for t in targets if _top(t) == prefix and unit(t) != unit(m))
    # The package itself (sink/__init__.py) is every module's parent, not a layer.
    graph.pop(prefix, None)
    for edges in graph.values():
        edges.discard(prefix)
    return graph


def test_the_graph_sees_known_edges():
    # A parser that found nothing would pass every rule below.
    assert "sink.readapi" in GRAPH["connectors.spark.cluster"]
    assert "sink.readapi.client" in GRAPH["sink.readapi"]
    assert "sink.readapi.wire" in GRAPH["sink.readapi.client"]
    assert "sink.process_cluster" in GRAPH["chaos.fault_cluster"]
    assert "raftlog.runtime" in GRAPH["sink.readapi.server"]


@pytest.mark.parametrize("prefix", ["sink", "raftlog", "connectors", "chaos", "demos"])
def test_no_module_cycles(prefix):
    sub = {m: {t for t in ts if _top(t) == prefix} for m, ts in GRAPH.items() if _top(m) == prefix}
    assert _cycles(sub) == []


def test_no_package_cycles_inside_sink():
    assert _cycles(_package_graph("sink")) == []


def test_raftlog_imports_nothing_above_it():
    assert _violations("raftlog", ("sink", "connectors", *TOOLS)) == []


def test_sink_imports_neither_connectors_nor_tools():
    assert _violations("sink", ("connectors", *TOOLS)) == []


def test_connectors_import_no_tools_and_no_raftlog():
    assert _violations("connectors", ("raftlog", *TOOLS)) == []


def test_connectors_use_only_the_thin_read_api_client_of_sink():
    bad = sorted(
        f"{m} -> {t}"
        for m, targets in GRAPH.items()
        if _top(m) == "connectors"
        for t in targets
        if _top(t) == "sink" and t not in THIN_CLIENT
    )
    assert bad == []


def test_tools_do_not_import_each_other():
    assert _violations("chaos", ("demos",)) == [] and _violations("demos", ("chaos",)) == []


def test_the_thin_client_closure_is_thin():
    """Everything importing the read API client pulls in, transitively."""
    seen: set[str] = set()
    todo = ["sink.readapi.client"]
    while todo:
        m = todo.pop()
        if m in seen:
            continue
        seen.add(m)
        todo.extend(GRAPH[m])
    assert seen <= set(THIN_CLIENT), sorted(seen - set(THIN_CLIENT))
