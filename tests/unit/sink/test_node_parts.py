"""sink.node.assemble.SinkNode is one class in several modules (assemble_groups,
assemble_security, assemble_listeners), one part each: the parts hold no state of
their own, no name is defined by two of them (the MRO would silently pick one), and
every attribute a part uses is a method or property of SinkNode or a field its
__init__ sets, so a field renamed in one place and not another fails here rather than
on the first node start that takes that path (partition groups, SASL, TLS)."""

from __future__ import annotations

import ast
import inspect
import textwrap

from sink.node import assemble, assemble_groups, assemble_listeners, assemble_security
from sink.node.assemble import SinkNode

PARTS = (
    (assemble_groups, assemble_groups.GroupsWiring),
    (assemble_security, assemble_security.SecurityWiring),
    (assemble_listeners, assemble_listeners.ListenerWiring),
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
    """The fields SinkNode.__init__ assigns."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(SinkNode.__init__)))
    out: set[str] = set()
    for n in ast.walk(tree):
        targets = (
            n.targets
            if isinstance(n, ast.Assign)
            else [n.target]
            if isinstance(n, ast.AnnAssign)
            else []
        )
        for t in targets:
            if (
                isinstance(t, ast.Attribute)
                and isinstance(t.value, ast.Name)
                and t.value.id == "self"
            ):
                out.add(t.attr)
    return out


def test_sink_node_is_its_parts():
    assert SinkNode.__mro__[1:] == (*(cls for _mod, cls in PARTS), object)


def test_parts_hold_no_state_and_define_disjoint_names():
    seen: dict[str, str] = {n: "SinkNode" for n in _own_names(SinkNode)}
    for _mod, cls in PARTS:
        assert "__init__" not in vars(cls), cls
        for name in _own_names(cls):
            assert callable(getattr(cls, name)), f"{cls.__name__}.{name} is state"
            assert name not in seen, f"{name}: both {seen[name]} and {cls.__name__}"
            seen[name] = cls.__name__


def test_every_attribute_a_part_uses_is_a_method_or_a_field():
    fields = _fields()
    for mod, cls in (*PARTS, (assemble, SinkNode)):
        used = _self_attributes(ast.parse(inspect.getsource(cls)))
        unknown = {a for a in used if a not in fields and not hasattr(SinkNode, a)}
        assert not unknown, f"{mod.__name__}: {sorted(unknown)}"
