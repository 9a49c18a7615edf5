"""Per-partition offset index: Kafka offset -> Raft log index of its batch.

Two parallel array('q') columns (16 bytes per batch, no batch bytes in
memory): bases[i] is the base offset of the i-th applied batch and
log_index[i] the Raft entry holding it. Both are strictly increasing, so the
batch containing an offset is found by bisection.

Invariants: next_offset == bases[-1] + record count of the last batch (dense
offsets); next_offset never decreases; `first` is the position of the oldest
batch still readable (entries below the log's first index were compacted
away), and log_start_offset == bases[first] (or next_offset when empty).
"""

from __future__ import annotations

import base64
import bisect
import sys
from array import array


def _pack(a: array) -> str:
    if sys.byteorder == "big":  # snapshots are little-endian everywhere
        a = array("q", a)
        a.byteswap()
    return base64.b64encode(a.tobytes()).decode()


def _unpack(s: str) -> array:
    a = array("q")
    a.frombytes(base64.b64decode(s))
    if sys.byteorder == "big":
        a.byteswap()
    return a


class PartitionLog:
    __slots__ = ("bases", "first", "log_index", "log_start_offset", "next_offset")

    def __init__(self) -> None:
        self.bases = array("q")
        self.log_index = array("q")
        self.first = 0
        self.next_offset = 0
        self.log_start_offset = 0

    def append(self, log_index: int, count: int) -> int:
        """Record an applied batch of count records; returns its base offset."""
        base = self.next_offset
        self.bases.append(base)
        self.log_index.append(log_index)
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
            self.log_start_offset = self.bases[pos] if pos < n else self.next_offset
            # Drop the dead prefix once it dominates, keeping memory bounded.
            if self.first > 4096 and self.first * 2 > n:
                del self.bases[: self.first]
                del self.log_index[: self.first]
                self.first = 0

    def to_json(self) -> dict:
        return {
            "next": self.next_offset,
            "start": self.log_start_offset,
            "bases": _pack(self.bases[self.first :]),
            "idx": _pack(self.log_index[self.first :]),
        }

    @classmethod
    def from_json(cls, d: dict) -> PartitionLog:
        p = cls()
        p.next_offset = d["next"]
        p.log_start_offset = d["start"]
        p.bases = _unpack(d["bases"])
        p.log_index = _unpack(d["idx"])
        return p
