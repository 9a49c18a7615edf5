"""sink.kafka.connection.Connection is one class in several modules (conn_input,
conn_memory, conn_dispatch, conn_responses), one part each: the parts hold no state
of their own, no name is defined by two of them (the MRO would silently pick one),
and every attribute a part uses is a method of Connection or a field connection_made
(or __init__) sets, so a field renamed in one place and not another fails here
rather than on the first connection that takes that path."""

from __future__ import annotations

import ast
import inspect
import textwrap

from sink.kafka import conn_dispatch, conn_input, conn_memory, conn_responses, connection
from sink.kafka.connection import Connection

PARTS = (
    (conn_input, conn_input.InputFlow),
    (conn_memory, conn_memory.MemoryShare),
    (conn_dispatch, conn_dispatch.Dispatcher),
    (conn_responses, conn_responses.ResponseQueue),
)


def _own_names(cls: type) -> set[str]:
    return {n for n in vars(cls) if not (n.startswith("__") and n.endswith("__"))}


def _self_attributes(tree: ast.AST) -> set[str]:
    """Every `self.NAME` read or written in tree."""
    return {
        n.attr
        for n in ast.walk(tree)
        if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == "self"
    }


def _fields() -> set[str]:
    """The fields Connection's __init__ and connection_made assign."""
    out: set[str] = set()
    for fn in (Connection.__init__, Connection.connection_made):
        tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
        for n in ast.walk(tree):
            targets = (
                n.targets
                if isinstance(n, ast.Assign)
                else [n.target]
                if isinstance(n, ast.AnnAssign)
                else []
            )
            for t in targets:
                for sub in ast.walk(t):
                    if (
                        isinstance(sub, ast.Attribute)
                        and isinstance(sub.value, ast.Name)
                        and sub.value.id == "self"
                    ):
                        out.add(sub.attr)
    return out


def test_connection_is_its_parts_and_asyncio_protocol():
    parts = [cls for _mod, cls in PARTS]
    assert Connection.__mro__[1 : 1 + len(parts)] == tuple(parts)
    assert issubclass(Connection, connection.asyncio.BufferedProtocol)


def test_parts_hold_no_state_and_define_disjoint_names():
    seen: dict[str, str] = {n: "Connection" for n in _own_names(Connection)}
    for _mod, cls in PARTS:
        assert "__init__" not in vars(cls), cls
        for name in _own_names(cls):
            assert callable(getattr(cls, name)), f"{cls.__name__}.{name} is state"
            assert name not in seen, f"{name}: both {seen[name]} and {cls.__name__}"
            seen[name] = cls.__name__


def test_every_attribute_a_part_uses_is_a_method_or_a_field():
    fields = _fields()
    for mod, cls in (*PARTS, (connection, Connection)):
        used = _self_attributes(ast.parse(inspect.getsource(cls)))
        unknown = {a for a in used if a not in fields and not hasattr(Connection, a)}
        assert not unknown, f"{mod.__name__}: {sorted(unknown)}"
