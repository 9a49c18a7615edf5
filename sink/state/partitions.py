"""Per-partition offset index: Kafka offset -> Raft log index of its batch.

Two parallel array('q') columns (16 bytes per batch, no batch bytes in
memory): bases[i] is the base offset of the i-th applied batch and
log_index[i] the Raft entry holding it. Both are strictly increasing, so the
batch containing an offset is found by bisection.

Invariants: next_offset == bases[-1] + record count of the last batch (dense
offsets); next_offset never decreases; `first` is the position of the oldest
batch still readable (entries below the log's first index were compacted
away, or DeleteRecords moved the start), and bases[first] <= log_start_offset <=
next_offset: the start is the first retained batch's base after compaction, or
any offset inside a batch after DeleteRecords (Kafka's log start may fall inside a
batch; a Fetch from it gets that whole batch and the client skips the rest).

`times` (sink/state/time_index.py) keeps each batch's max timestamp and size in
rows parallel to bases, for ListOffsets by timestamp and DescribeLogDirs.
"""

from __future__ import annotations

import bisect
from array import array

from sink.state.time_index import TimeIndex
from sink.topics.columns import pack_i64, unpack_i64

UNKNOWN_TS = (1 << 63) - 1


class PartitionLog:
    __slots__ = ("bases", "first", "log_index", "log_start_offset", "next_offset", "times")

    def __init__(self) -> None:
        self.bases = array("q")
        self.log_index = array("q")
        self.first = 0
        self.next_offset = 0
        self.log_start_offset = 0
        self.times = TimeIndex()

    def append(self, log_index: int, count: int, max_timestamp: int = -1, size: int = 0) -> int:
        """Record an applied batch of count records (its header's maxTimestamp and its
        stored size in bytes); returns its base offset."""
        base = self.next_offset
        self.bases.append(base)
        self.log_index.append(log_index)
        self.times.append(max_timestamp, size)
        self.next_offset = base + count
        return base

    def position(self, offset: int) -> int:
        """Position of the batch containing offset (offset < next_offset)."""
        pos = bisect.bisect_right(self.bases, offset) - 1
        return max(pos, self.first)

    def trim_below(self, first_log_index: int) -> None:
        """Entries below first_log_index were compacted: move log_start_offset."""
        n = len(self.bases)
        pos = bisect.bisect_left(self.log_index, first_log_index, self.first, n)
        if pos > self.first:
            self.first = pos
            start = self.bases[pos] if pos < n else self.next_offset
            self.log_start_offset = max(self.log_start_offset, start)
            self._drop_dead_prefix()

    def advance_start(self, offset: int) -> int:
        """DeleteRecords: the log starts at offset from now on (never moves back; at
        most next_offset). Returns the new log start (the low watermark)."""
        offset = min(offset, self.next_offset)
        if offset > self.log_start_offset:
            self.log_start_offset = offset
            if offset >= self.next_offset:
                pos = len(self.bases)
            else:
                pos = bisect.bisect_right(self.bases, offset) - 1
            if pos > self.first:
                self.first = pos
                self._drop_dead_prefix()
        return self.log_start_offset

    def retained_bytes(self) -> int:
        """Stored batch bytes from the first retained batch on (an estimate of the
        partition's size: Raft framing and the command header are not counted)."""
        return self.times.retained_bytes(self.first)

    def _drop_dead_prefix(self) -> None:
        """Drop the dead prefix once it dominates, keeping memory bounded."""
        if self.first > 4096 and self.first * 2 > len(self.bases):
            del self.bases[: self.first]
            del self.log_index[: self.first]
            self.times.drop_prefix(self.first)
            self.first = 0

    def to_json(self) -> dict:
        return {
            "next": self.next_offset,
            "start": self.log_start_offset,
            "bases": pack_i64(self.bases[self.first :]),
            "idx": pack_i64(self.log_index[self.first :]),
            "ts": pack_i64(self.times.max_ts[self.first :]),
            "sz": pack_i64(_sizes(self.times.end_bytes, self.first)),
        }

    @classmethod
    def from_json(cls, d: dict) -> PartitionLog:
        p = cls()
        p.next_offset = d["next"]
        p.log_start_offset = d["start"]
        p.bases = unpack_i64(d["bases"])
        p.log_index = unpack_i64(d["idx"])
        n = len(p.bases)
        # Snapshots from before the time index: timestamps unknown, so every old batch
        # may qualify (UNKNOWN_TS: lookups read it and compare its records), no sizes.
        max_ts = unpack_i64(d["ts"]) if "ts" in d else array("q", [UNKNOWN_TS] * n)
        sizes = unpack_i64(d["sz"]) if "sz" in d else array("q", [0] * n)
        for ts, size in zip(max_ts, sizes, strict=True):
            p.times.append(ts, size)
        return p


def _sizes(end_bytes: array, first: int) -> array:
    """Per-row sizes of rows first.. from the cumulative column."""
    out = array("q")
    prev = end_bytes[first - 1] if first > 0 else 0
    for v in end_bytes[first:]:
        out.append(v - prev)
        prev = v
    return out
