"""The replicated part of consumer groups: each group's last completed generation.

Applied from GROUP_GENERATION ("G") and DELETE_GROUPS ("g") entries
(sink.groups.records), carried in snapshots under the key "groups". A new
coordinator (the next Raft leader) loads its groups from here. Apply is a pure
function of the log, so state rebuilt from a snapshot plus replay equals the state
built live (tests/unit/groups/test_group_store.py checks both).
"""

from __future__ import annotations

import logging

from sink.groups.records import (
    GroupRecord,
    decode_delete,
    decode_generation,
)

log = logging.getLogger("sink.state")


class GroupStore:
    def __init__(self) -> None:
        self.groups: dict[str, GroupRecord] = {}

    def apply_generation(self, data: bytes, index: int = 0) -> bool:
        """Keep the record unless an older generation (a stale writer): True if kept.
        An unreadable entry is logged and skipped, never a crashed node."""
        try:
            r = decode_generation(data)
        except Exception as exc:
            log.error("sink.apply unreadable group entry index=%d: %r", index, exc)
            return False
        current = self.groups.get(r.group_id)
        if current is not None and current.generation > r.generation:
            return False
        self.groups[r.group_id] = r
        return True

    def apply_delete(self, data: bytes, index: int = 0) -> int:
        """Forget the groups named; returns how many existed."""
        try:
            ids = decode_delete(data)
        except Exception as exc:
            log.error("sink.apply unreadable delete-groups entry index=%d: %r", index, exc)
            return 0
        return sum(self.groups.pop(g, None) is not None for g in ids)

    def records(self) -> list[GroupRecord]:
        return list(self.groups.values())

    def to_json(self) -> list:
        return [r.to_json() for r in self.groups.values()]

    @classmethod
    def from_json(cls, data: list) -> GroupStore:
        store = cls()
        for d in data:
            r = GroupRecord.from_json(d)
            store.groups[r.group_id] = r
        return store
