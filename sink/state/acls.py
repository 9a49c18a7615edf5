"""ACL bindings, replicated through the Raft log (ALTER_ACLS entries, tag "L";
the format is sink.security.acl_ops's).

Every op of an entry is checked when applied, in order, and answered on its own
(as CreateAcls / DeleteAcls answer per creation / filter): a create of an invalid
binding gets INVALID_REQUEST and the others still apply; creating a binding that
exists changes nothing (Kafka's CreateAcls is idempotent too); a delete removes
every binding its filter matches and answers them. An entry that cannot be read is
skipped and logged by the state machine: never a crashed node. The table is in the
snapshot ("acls").

Invariant: `version` grows with every change, so a reader's cache of decisions
(sink.security.authorizer) is valid while the version it was made at is current.
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from sink.security.acl import AclBinding, AclError, ResourceType
from sink.security.acl_ops import decode_alter_acls, filter_from_json

ALTER_ACLS = 0x4C  # "L"


class AclTable:
    """The stored bindings, in creation order, by resource type."""

    def __init__(self) -> None:
        self._by_type: dict[ResourceType, list[AclBinding]] = {}
        self.version = 0

    def bindings(self, rtype: ResourceType | None = None) -> list[AclBinding]:
        if rtype is not None:
            return self._by_type.get(rtype, [])
        return [b for bs in self._by_type.values() for b in bs]

    def __len__(self) -> int:
        return sum(len(bs) for bs in self._by_type.values())

    def apply(self, data: bytes) -> list[Any]:
        """An ALTER_ACLS entry -> per op: (error, message) for a create, a list of the
        removed bindings' JSON rows for a delete (ValueError if unreadable)."""
        out = [self._apply_op(op) for op in decode_alter_acls(data)]
        self.version += 1
        return out

    def _apply_op(self, op: dict) -> Any:
        kind = op.get("op")
        try:
            if kind == "create":
                b = AclBinding.from_json(op["acl"])
                b.validate()
                mine = self._by_type.setdefault(b.resource_type, [])
                if b not in mine:
                    mine.append(b)
                return int(ErrorCode.none), None
            if kind == "delete":
                f = filter_from_json(op["filter"])
                removed: list[AclBinding] = []
                for rtype, bs in self._by_type.items():
                    keep = [b for b in bs if not f.matches(b)]
                    removed += [b for b in bs if f.matches(b)]
                    self._by_type[rtype] = keep
                return [b.to_json() for b in removed]
        except (AclError, KeyError, ValueError, TypeError) as exc:
            return int(ErrorCode.invalid_request), str(exc)
        return int(ErrorCode.invalid_request), f"unknown op {kind!r}"

    def to_json(self) -> list:
        return [b.to_json() for b in self.bindings()]

    @classmethod
    def from_json(cls, rows: list) -> AclTable:
        t = cls()
        for row in rows:
            b = AclBinding.from_json(row)
            t._by_type.setdefault(b.resource_type, []).append(b)
        return t
