"""SinkNode (sink.node.assemble) and SinkService (sink.service) are each one class in
several modules, one part each: the parts hold no state of their own, no name is
defined by two of them (the MRO would silently pick one), and every attribute a part
uses is a method or property of the class or a field its __init__ sets, so a field
renamed in one place and not another fails here rather than on the first request or
node start that takes that path (partition groups, SASL, TLS, an admin API).
sink.kafka.connection.Connection's parts: test_kafka_connection_parts.py."""

from __future__ import annotations

import ast
import inspect
import textwrap

import pytest

from sink import service, service_admin
from sink.node import assemble, assemble_groups, assemble_listeners, assemble_security

CLASSES: list[tuple[type, tuple[type, ...]]] = [
    (
        assemble.SinkNode,
        (
            assemble_groups.GroupsWiring,
            assemble_security.SecurityWiring,
            assemble_listeners.ListenerWiring,
        ),
    ),
    (service.SinkService, (service_admin.AdminOps,)),
]
IDS = [cls.__name__ for cls, _parts in CLASSES]


def _own_names(cls: type) -> set[str]:
    return {n for n in vars(cls) if not (n.startswith("__") and n.endswith("__"))}


def _self_attributes(tree: ast.AST) -> set[str]:
    """Every `self.NAME` read or written in tree."""
    return {
        n.attr
        for n in ast.walk(tree)
        if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == "self"
    }


def _fields(cls: type) -> set[str]:
    """The fields cls.__init__ assigns."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(cls.__init__)))
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


@pytest.mark.parametrize(("cls", "parts"), CLASSES, ids=IDS)
def test_the_class_is_its_parts(cls, parts):
    assert cls.__mro__[1:] == (*parts, object)


@pytest.mark.parametrize(("cls", "parts"), CLASSES, ids=IDS)
def test_parts_hold_no_state_and_define_disjoint_names(cls, parts):
    seen: dict[str, str] = {n: cls.__name__ for n in _own_names(cls)}
    for part in parts:
        assert "__init__" not in vars(part), part
        for name in _own_names(part):
            value = vars(part)[name]
            assert callable(value) or isinstance(value, property), f"{part.__name__}.{name}"
            assert name not in seen, f"{name}: both {seen[name]} and {part.__name__}"
            seen[name] = part.__name__


@pytest.mark.parametrize(("cls", "parts"), CLASSES, ids=IDS)
def test_every_attribute_a_part_uses_is_a_method_or_a_field(cls, parts):
    fields = _fields(cls)
    for owner in (*parts, cls):
        used = _self_attributes(ast.parse(inspect.getsource(owner)))
        unknown = {a for a in used if a not in fields and not hasattr(cls, a)}
        assert not unknown, f"{owner.__module__}.{owner.__name__}: {sorted(unknown)}"
