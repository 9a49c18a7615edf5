"""Checks for a class written as several modules, one part each (RawNode, RaftHost,
RaftGroup, SimCluster, SinkNode, SinkService, the Kafka Connection): the parts hold no
state of their own, no name is defined by two of them (the MRO would silently pick
one), and every attribute a part uses is a method, property or constant of the class or
a field its field-setting methods assign, so a field renamed in one place and not
another fails in a unit test rather than on the first run that takes that path."""

from __future__ import annotations

import ast
import inspect
import textwrap
from collections.abc import Iterable

CONSTANT_TYPES = (int, float, str, bytes, tuple, frozenset)
"""What a part may define besides methods and properties (with constants allowed):
immutable UPPER-case values, not state."""


def own_names(cls: type) -> set[str]:
    return {n for n in vars(cls) if not (n.startswith("__") and n.endswith("__"))}


def self_attributes(tree: ast.AST) -> set[str]:
    """Every `self.NAME` read or written in tree."""
    return {
        n.attr
        for n in ast.walk(tree)
        if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == "self"
    }


def assigned(method: object) -> set[str]:
    """Every `self.NAME` the method assigns (also inside tuple targets)."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(method)))  # type: ignore[arg-type]
    out: set[str] = set()
    for n in ast.walk(tree):
        if isinstance(n, ast.Assign):
            targets = n.targets
        elif isinstance(n, ast.AnnAssign):
            targets = [n.target]
        else:
            continue
        for t in targets:
            out |= {
                s.attr
                for s in ast.walk(t)
                if isinstance(s, ast.Attribute)
                and isinstance(s.value, ast.Name)
                and s.value.id == "self"
            }
    return out


def assert_parts_hold_no_state(cls: type, parts: Iterable[type], constants: bool = False) -> None:
    """No part has an __init__ or a value other than a method or property (or, with
    constants, an immutable UPPER-case constant); no name is defined twice."""
    seen: dict[str, str] = {n: cls.__name__ for n in own_names(cls)}
    for part in parts:
        assert "__init__" not in vars(part), part
        for name in own_names(part):
            value = vars(part)[name]
            assert (
                callable(value)
                or isinstance(value, property)
                or (constants and type(value) in CONSTANT_TYPES and name.isupper())
            ), f"{part.__name__}.{name} is state"
            assert name not in seen, f"{name}: both {seen[name]} and {part.__name__}"
            seen[name] = part.__name__


def assert_every_attribute_is_known(
    cls: type, parts: Iterable[type], setters: Iterable[str] = ("__init__",)
) -> None:
    """Every `self.X` in a part (or the class) is an attribute of the class or a field
    one of `setters` assigns."""
    fields: set[str] = set()
    for setter in setters:
        fields |= assigned(getattr(cls, setter))
    for owner in (*parts, cls):
        used = self_attributes(ast.parse(inspect.getsource(owner)))
        unknown = {a for a in used if a not in fields and not hasattr(cls, a)}
        assert not unknown, f"{owner.__module__}.{owner.__name__}: {sorted(unknown)}"
