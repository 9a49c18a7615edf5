"""Committed consumer-group offsets: replicated state, applied from the Raft log.

    group -> (topic, partition) -> CommittedOffset(offset, leader_epoch, metadata,
                                                   commit_ms, expire_ms, index)

Written only by COMMIT_GROUP_OFFSETS and DELETE_GROUP_OFFSETS entries
(sink/state/offset_command.py), so the table is a pure function of the log: a node
that rebuilds it from a snapshot plus the log after it holds exactly what a node
that applied every entry live holds (tests/unit/sink/test_group_offsets.py checks
this, the divergence Redpanda fixed in PR 31483).

Invariants:
- an offset is stored only for a partition that existed when its entry applied
  (UNKNOWN_TOPIC_OR_PARTITION otherwise, nothing stored);
- `index` is the Raft index of the entry that wrote the offset; a conditional
  delete (expiry) removes it only if it is still that write;
- a group with no offsets left is removed (an empty dict is never kept), so memory
  is bounded by the offsets held, and expiry bounds those.
Reading never mutates. Apply never raises: an unreadable entry is logged, skipped.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable, Container, Iterable
from typing import Any, NamedTuple, Protocol

from kio.schema.errors import ErrorCode

from sink.state import offset_command as oc

log = logging.getLogger("sink.state")


class CommittedOffset(NamedTuple):
    offset: int
    leader_epoch: int
    """The epoch of the record before `offset` as the client saw it (-1: unknown);
    OffsetCommit v6+ sends it, OffsetFetch v5+ returns it (KIP-320)."""
    metadata: str | None
    commit_ms: int
    """When it was committed (the leader's clock, or the client's v1 commit timestamp)."""
    expire_ms: int
    """Explicit expiry time (OffsetCommit v2-v4 retention_time_ms); -1: the retention setting."""
    index: int
    """Raft index of the entry that wrote it."""


class GroupPresence(Protocol):
    """What expiry needs to know of a group the coordinator serves (sink.groups.GroupStatus)."""

    @property
    def empty(self) -> bool: ...
    @property
    def empty_since_ms(self) -> int: ...
    @property
    def subscribed(self) -> Container[str] | None: ...


HasPartition = Callable[[str, int], bool]
PresenceOf = Callable[[str], GroupPresence | None]


class GroupOffsetTable:
    __slots__ = ("_groups",)

    def __init__(self) -> None:
        self._groups: dict[str, dict[tuple[str, int], CommittedOffset]] = {}

    # ------------------------------------------------------------------ apply

    def apply_commit(
        self, data: bytes, index: int, has_partition: HasPartition
    ) -> list[list[ErrorCode]]:
        """A COMMIT_GROUP_OFFSETS entry -> per block (request), one code per item."""
        try:
            cmd = oc.decode_commit_group_offsets(data)
        except (ValueError, UnicodeDecodeError) as exc:
            log.error("sink.apply unreadable group offset commit index=%d: %r", index, exc)
            return []
        return [self._commit_block(g, items, index, has_partition) for g, items in cmd.blocks]

    def _commit_block(
        self, group: str, items: list[oc.OffsetCommitItem], index: int, has_partition: HasPartition
    ) -> list[ErrorCode]:
        out = []
        offsets = self._groups.get(group)
        for it in items:
            if not has_partition(it.topic, it.partition):
                out.append(ErrorCode.unknown_topic_or_partition)
                continue
            if offsets is None:
                offsets = self._groups[sys.intern(group)] = {}
            key = (sys.intern(it.topic), it.partition)
            offsets[key] = CommittedOffset(
                it.offset, it.leader_epoch, it.metadata, it.commit_ms, it.expire_ms, index
            )
            out.append(ErrorCode.none)
        return out

    def apply_delete(self, data: bytes, index: int) -> int:
        """A DELETE_GROUP_OFFSETS entry -> how many offsets it removed."""
        try:
            cmd = oc.decode_delete_group_offsets(data)
        except (ValueError, UnicodeDecodeError) as exc:
            log.error("sink.apply unreadable group offset delete index=%d: %r", index, exc)
            return 0
        removed = 0
        for group, parts in cmd.groups.items():
            offsets = self._groups.get(group)
            if offsets is None:
                continue
            for topic, partition, if_index in parts:
                cur = offsets.get((topic, partition))
                if cur is not None and (if_index < 0 or cur.index == if_index):
                    del offsets[(topic, partition)]
                    removed += 1
            if not offsets:
                del self._groups[group]
        return removed

    def delete_group(self, group: str) -> bool:
        """Drop every offset of group (for an applied DeleteGroups); True if it had any."""
        return self._groups.pop(group, None) is not None

    def drop_topic(self, topic: str) -> None:
        """Drop every group's offsets of topic (for an applied topic deletion)."""
        for group in list(self._groups):
            offsets = self._groups[group]
            for key in [k for k in offsets if k[0] == topic]:
                del offsets[key]
            if not offsets:
                del self._groups[group]

    # ------------------------------------------------------------------- read

    def get(self, group: str, topic: str, partition: int) -> CommittedOffset | None:
        offsets = self._groups.get(group)
        return None if offsets is None else offsets.get((topic, partition))

    def partitions(self, group: str) -> list[tuple[str, int]]:
        return list(self._groups.get(group, ()))

    def has_group(self, group: str) -> bool:
        return group in self._groups

    def groups(self) -> list[str]:
        return list(self._groups)

    def __len__(self) -> int:
        """Offsets held, over every group."""
        return sum(len(o) for o in self._groups.values())

    def __eq__(self, other: object) -> bool:
        return isinstance(other, GroupOffsetTable) and self._groups == other._groups

    __hash__ = None  # type: ignore[assignment]

    # ----------------------------------------------------------------- expiry

    def expired(
        self, now_ms: int, retention_ms: int, presence: PresenceOf, limit: int = 10_000
    ) -> dict[str, list[tuple[str, int, int]]]:
        """Offsets due to expire at now_ms -> group -> [(topic, partition, index)], at most
        limit of them (the rest next round). As Kafka (GroupMetadata.removeExpiredOffsets):
        - a group the coordinator does not know (simple consumers, offsets only): each
          offset retention_ms after its commit;
        - a known, empty group: retention_ms after the later of the group becoming empty
          and the commit (Kafka takes the group's time alone; the later one never expires
          a fresh commit);
        - a group with members: only offsets of topics it is known not to subscribe to,
          retention_ms after their commit; none if its subscription is unknown.
        An explicit expire_ms (OffsetCommit v2-v4 retention_time_ms) replaces the retention
        wherever an offset may expire at all."""
        out: dict[str, list[tuple[str, int, int]]] = {}
        count = 0
        for group, offsets in self._groups.items():
            status = presence(group)
            since = -1
            if status is not None:
                if status.empty:
                    since = status.empty_since_ms
                elif status.subscribed is None:
                    continue
            for (topic, partition), c in offsets.items():
                if status is not None and not status.empty and topic in status.subscribed:
                    continue
                if c.expire_ms >= 0:
                    due = now_ms >= c.expire_ms
                else:
                    due = now_ms - max(c.commit_ms, since) >= retention_ms
                if due:
                    out.setdefault(group, []).append((topic, partition, c.index))
                    count += 1
                    if count >= limit:
                        return out
        return out

    # -------------------------------------------------------------- snapshots

    def to_json(self) -> dict[str, list[list[Any]]]:
        return {
            group: [[t, p, *c] for (t, p), c in offsets.items()]
            for group, offsets in self._groups.items()
        }

    @classmethod
    def from_json(cls, d: dict[str, list[list[Any]]]) -> GroupOffsetTable:
        table = cls()
        for group, rows in d.items():
            table._groups[sys.intern(group)] = {
                (sys.intern(t), p): CommittedOffset(*rest) for t, p, *rest in rows
            }
        return table

    def items(self) -> Iterable[tuple[str, str, int, CommittedOffset]]:
        for group, offsets in self._groups.items():
            for (t, p), c in offsets.items():
                yield group, t, p, c
