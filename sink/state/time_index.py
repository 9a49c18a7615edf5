"""Per-partition timestamp and size columns, parallel to PartitionLog's offset index.

Three array('q') columns, one row per applied batch (24 bytes per batch, no record
bytes in memory):

  max_ts[i]   the batch's maxTimestamp as stored (RecordBatch v2 header bytes 35-42:
              the producer's CreateTime maximum, or the append time a LogAppendTime
              topic stamped there)
  prefix[i]   max(max_ts[first..i]): a running maximum, so "the first batch holding
              a record at or after T" is a bisection even when CreateTime is not
              monotonic (producers with skewed clocks, replays, out-of-order sends)
  end_bytes[i] total stored batch bytes of rows 0..i (DescribeLogDirs' size of the
              retained part is end_bytes[-1] - end_bytes[first - 1])

Invariants: the three columns have PartitionLog.bases' length and are trimmed with
it; prefix is non-decreasing and prefix[i] >= max_ts[i]. The first batch whose own
max_ts >= T is at or after bisect_left(prefix, T) and, among the rows from there on,
the first whose max_ts >= T: lookups scan max_ts forward from the bisection point,
so an inflated prefix (a trimmed outlier) can make a lookup slower, never wrong.
prefix is recomputed from max_ts when a trimmed prefix is dropped and when a
snapshot is loaded, so every node answers the same for the same retained rows.
"""

from __future__ import annotations

import bisect
from array import array

NO_TIMESTAMP = -1


class TimeIndex:
    __slots__ = ("end_bytes", "max_ts", "prefix")

    def __init__(self) -> None:
        self.max_ts = array("q")
        self.prefix = array("q")
        self.end_bytes = array("q")

    def append(self, max_timestamp: int, size: int) -> None:
        """One more batch (call with PartitionLog.append)."""
        top = self.prefix[-1] if self.prefix else NO_TIMESTAMP
        self.max_ts.append(max_timestamp)
        self.prefix.append(max(top, max_timestamp))
        self.end_bytes.append((self.end_bytes[-1] if self.end_bytes else 0) + size)

    def drop_prefix(self, n: int) -> None:
        """Rows 0..n-1 are gone (PartitionLog dropped its dead prefix)."""
        del self.max_ts[:n]
        del self.end_bytes[:n]
        self.prefix = running_max(self.max_ts)

    def first_at_or_after(self, ts: int, first: int) -> int:
        """Position (>= first) of the first batch whose maxTimestamp >= ts; len() if none."""
        n = len(self.max_ts)
        pos = max(bisect.bisect_left(self.prefix, ts, 0, n), first)
        max_ts = self.max_ts
        while pos < n and max_ts[pos] < ts:
            pos += 1
        return pos

    def position_of_max(self, first: int) -> int:
        """Position (>= first) of the first batch holding the largest maxTimestamp of the
        retained rows; -1 when there are none."""
        n = len(self.max_ts)
        if first >= n:
            return -1
        cand = self.first_at_or_after(self.prefix[-1], first)
        if cand < n:  # common case: the overall maximum is retained
            return cand
        best, at = self.max_ts[first], first
        for i in range(first + 1, n):  # the maximum was trimmed away: scan what is left
            if self.max_ts[i] > best:
                best, at = self.max_ts[i], i
        return at

    def retained_bytes(self, first: int) -> int:
        """Stored batch bytes of rows first.. (0 when none)."""
        if not self.end_bytes or first >= len(self.end_bytes):
            return 0
        return self.end_bytes[-1] - (self.end_bytes[first - 1] if first > 0 else 0)


def running_max(values: array) -> array:
    out = array("q")
    top = NO_TIMESTAMP
    for v in values:
        if v > top:
            top = v
        out.append(top)
    return out
