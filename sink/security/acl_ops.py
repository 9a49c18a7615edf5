"""ACL changes as the log carries them (sink.state.acls applies them): plain dicts
built here and the ALTER_ACLS entry's encoding, so that the Kafka handlers, the CLI
and the ACL service need nothing of sink.state.

    ALTER_ACLS  b"L" | JSON {"ops": [op, ...]}
      op  {"op": "create", "acl": binding}       binding: AclBinding.to_json()
          {"op": "delete", "filter": filter}     filter: filter_to_json()

A delete carries the filter, not the bindings it found: the bindings it removes are
those of the applied table when the entry is applied, the same on every node.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from sink.security.acl import (
    AclBinding,
    AclFilter,
    Operation,
    PatternType,
    Permission,
    ResourceType,
)

Op = dict[str, Any]


def create_op(binding: AclBinding) -> Op:
    return {"op": "create", "acl": binding.to_json()}


def delete_op(f: AclFilter) -> Op:
    return {"op": "delete", "filter": filter_to_json(f)}


def filter_to_json(f: AclFilter) -> list:
    return [
        int(f.resource_type),
        f.name,
        int(f.pattern_type),
        f.principal,
        f.host,
        int(f.operation),
        int(f.permission),
    ]


def filter_from_json(row: list) -> AclFilter:
    rt, name, pt, principal, host, op, perm = row
    return AclFilter(
        ResourceType(rt),
        name,
        PatternType(pt),
        principal,
        host,
        Operation(op),
        Permission(perm),
    )


def encode_alter_acls(ops: Sequence[Op]) -> bytes:
    return b"L" + json.dumps({"ops": list(ops)}, separators=(",", ":")).encode()


def decode_alter_acls(data: bytes) -> list[Op]:
    if data[:1] != b"L":
        raise ValueError("not an ALTER_ACLS entry")
    ops = json.loads(data[1:])["ops"]
    if not isinstance(ops, list) or not all(isinstance(o, dict) for o in ops):
        raise ValueError("ALTER_ACLS: ops must be a list of objects")
    return ops
