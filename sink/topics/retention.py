"""Retention by time and size, per topic, over the one shared Raft log.

Applied state (`RetentionIndex`, in the snapshot): per partition, for every applied
batch still retained, its Raft log index, its max timestamp (attributes bit 3 set:
the leader's LogAppendTime stamp) and its size. 24 bytes per batch; no batch bytes.

The decision (`apply_retention`, each node on its own clock every
log.retention.check.interval.ms, and at once when the disk guard refuses writes):
for each partition, the first batch to keep is the later of
  - time:  the first batch, from the start, whose max timestamp is >= now - retention.ms
           (Kafka's rule per segment, here per batch: a batch with an old timestamp behind
           a newer one waits for it, never skipped);
  - size:  batches leave from the start while what remains is still >= retention.bytes
           (Kafka's rule: the partition keeps at least retention.bytes);
unless a registered pipeline (COMMIT entries) has not consumed a removed batch: then the
partition keeps from that pipeline's batch, but never older than
raftsink.pipeline.hold.max.ms nor more than raftsink.pipeline.hold.max.bytes (the hard
limit; the reader then reports data loss per failOnDataLoss).
The partition's log start offset moves there (Kafka: ListOffsets earliest, Fetch below it
OFFSET_OUT_OF_RANGE). The Raft log may then be compacted (after a snapshot) below the
smallest first-kept log index over all partitions that retain something: that is the
compaction limit returned. docs/storage.md ("Retention") has the design and its limits.

Invariant: a partition's log start only moves forward; retention never removes a batch
that the size and time rules both keep unless a hard limit says so.
"""

from __future__ import annotations

import bisect
import struct
from array import array
from collections.abc import Mapping
from typing import Any, Protocol

from sink.topics.columns import pack_i64, unpack_i64
from sink.topics.configs import TopicPolicy

_MAX_TS = struct.Struct(">q")
_MAX_TS_AT = 35  # maxTimestamp's byte position in a RecordBatch v2 (as record_times.py;
# not imported from sink.kafka: sink.topics stays a leaf below it)


def batch_max_timestamp(batch: bytes | memoryview) -> int:
    return _MAX_TS.unpack_from(batch, _MAX_TS_AT)[0]


class PartitionRetention:
    """One partition's retained batches: log index, max timestamp, cumulative end bytes.
    Positions below `first` are removed (kept until they dominate, then deleted)."""

    __slots__ = ("cum", "first", "log_index", "max_ts")

    def __init__(self) -> None:
        self.log_index = array("q")
        self.max_ts = array("q")
        self.cum = array("q")  # cum[i]: bytes of batches 0..i (since the arrays' start)
        self.first = 0

    def append(self, log_index: int, max_ts: int, size: int) -> None:
        self.log_index.append(log_index)
        self.max_ts.append(max_ts)
        self.cum.append((self.cum[-1] if self.cum else 0) + size)

    def retained_bytes(self, pos: int | None = None) -> int:
        """Bytes of the batches from position pos (default: first) to the end."""
        pos = self.first if pos is None else pos
        if pos >= len(self.cum):
            return 0
        before = self.cum[pos - 1] if pos > 0 else 0
        return self.cum[-1] - before

    def keep_from(self, now_ms: int, retention_ms: int, retention_bytes: int) -> int:
        """Position of the first batch the time and size rules keep (len: none)."""
        n = len(self.log_index)
        pos = self.first
        if retention_ms >= 0:
            cutoff = now_ms - retention_ms
            while pos < n and self.max_ts[pos] < cutoff:
                pos += 1
        if retention_bytes >= 0:
            remaining = self.retained_bytes(pos)
            while pos < n:
                size = self.cum[pos] - (self.cum[pos - 1] if pos > 0 else 0)
                if remaining - size < retention_bytes:
                    break
                remaining -= size
                pos += 1
        return pos

    def position_of(self, log_index: int) -> int:
        """Position of the first batch at or after log_index."""
        return bisect.bisect_left(self.log_index, log_index, self.first, len(self.log_index))

    def trim_to(self, pos: int) -> None:
        if pos <= self.first:
            return
        self.first = pos
        n = len(self.log_index)
        if self.first > 4096 and self.first * 2 > n:
            for a in (self.log_index, self.max_ts, self.cum):
                del a[: self.first]
            self.first = 0

    def to_json(self) -> dict[str, Any]:
        f = self.first
        base = self.cum[f - 1] if f > 0 else 0
        cum = array("q", (c - base for c in self.cum[f:]))
        return {
            "idx": pack_i64(self.log_index[f:]),
            "ts": pack_i64(self.max_ts[f:]),
            "cum": pack_i64(cum),
        }

    @classmethod
    def from_json(cls, d: Mapping[str, str]) -> PartitionRetention:
        p = cls()
        p.log_index, p.max_ts, p.cum = (
            unpack_i64(d["idx"]),
            unpack_i64(d["ts"]),
            unpack_i64(d["cum"]),
        )
        return p


class OffsetIndex(Protocol):
    """What retention needs of sink.state.PartitionLog."""

    next_offset: int
    log_start_offset: int
    log_index: Any
    first: int

    def position(self, offset: int) -> int: ...
    def trim_below(self, first_log_index: int) -> None: ...


class RetentionIndex:
    """(topic, partition) -> PartitionRetention, fed by the state machine's apply."""

    def __init__(self) -> None:
        self.parts: dict[tuple[str, int], PartitionRetention] = {}

    def on_append(self, topic: str, partition: int, log_index: int, batch: memoryview) -> None:
        pr = self.parts.get((topic, partition))
        if pr is None:
            pr = self.parts[(topic, partition)] = PartitionRetention()
        pr.append(log_index, batch_max_timestamp(batch), len(batch))

    def drop_topic(self, topic: str) -> None:
        for key in [k for k in self.parts if k[0] == topic]:
            del self.parts[key]

    def to_json(self) -> list[list[Any]]:
        return [[t, p, pr.to_json()] for (t, p), pr in self.parts.items()]

    def load_json(self, d: list[list[Any]]) -> None:
        self.parts = {(t, p): PartitionRetention.from_json(x) for t, p, x in d}

    def partition_bytes(self, topic: str, partition: int) -> int:
        """Bytes of the partition's retained batches (DescribeLogDirs-like figures)."""
        pr = self.parts.get((topic, partition))
        return pr.retained_bytes() if pr is not None else 0


def _hold_log_index(part: OffsetIndex, holders: list[int]) -> int | None:
    """Log index of the oldest batch a pipeline still needs (None: no pipeline holds)."""
    oldest = None
    for offset in holders:
        if offset >= part.next_offset:
            continue
        pos = part.position(max(offset, part.log_start_offset))
        if pos < len(part.log_index):
            li = part.log_index[pos]
            oldest = li if oldest is None else min(oldest, li)
    return oldest


def apply_retention(
    index: RetentionIndex,
    parts: Mapping[tuple[str, int], OffsetIndex],
    pipelines: Mapping[str, Mapping[tuple[str, int], int]],
    policy_of: Any,
    now_ms: int,
) -> tuple[int | None, int]:
    """Move every partition's log start to what retention keeps (see the module doc).
    policy_of(topic) -> TopicPolicy. Returns (compaction limit, batches removed): the
    highest Raft log index no partition retains (None: every partition retains nothing,
    any applied index may go)."""
    holds: dict[tuple[str, int], list[int]] = {}
    for offsets in pipelines.values():
        for key, offset in offsets.items():
            holds.setdefault(key, []).append(offset)
    limit: int | None = None
    removed = 0
    for key, part in parts.items():
        pr = index.parts.get(key)
        first_li = part.log_index[part.first] if part.first < len(part.log_index) else None
        if pr is None or (
            first_li is not None
            and (pr.first >= len(pr.log_index) or pr.log_index[pr.first] > first_li)
        ):
            # Batches this index never saw (a snapshot from before it existed): they are
            # kept, and they pin the log, rather than guessed at.
            if first_li is not None:
                limit = first_li - 1 if limit is None else min(limit, first_li - 1)
            if pr is None:
                continue
        policy: TopicPolicy = policy_of(key[0])
        # Entries the log already compacted (hard entry limit) are gone for retention too.
        if part.first < len(part.log_index):
            pr.trim_to(pr.position_of(part.log_index[part.first]))
        else:
            pr.trim_to(len(pr.log_index))
        pos = pr.keep_from(now_ms, policy.retention_ms, policy.retention_bytes)
        if pos > pr.first and key in holds:
            hold = _hold_log_index(part, holds[key])
            if hold is not None:
                hold_pos = pr.position_of(hold)
                if hold_pos < pos:
                    hard = pr.keep_from(now_ms, policy.hold_max_ms, policy.hold_max_bytes)
                    pos = max(hold_pos, hard)
        n = len(pr.log_index)
        if pos > pr.first:
            removed += pos - pr.first
            part.trim_below(pr.log_index[pos] if pos < n else pr.log_index[-1] + 1)
            pr.trim_to(pos)
        if pr.first < n:
            keep = pr.log_index[pr.first] - 1
            limit = keep if limit is None else min(limit, keep)
    return limit, removed
