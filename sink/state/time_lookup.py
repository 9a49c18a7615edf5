"""ListOffsets by timestamp over one partition: the exact record, not its batch.

The TimeIndex (sink/state/time_index.py) finds the first retained batch whose
maxTimestamp reaches the target; that one batch is read back from the Raft log and
its records decoded (decompressed if need be) to return the first record, in
offset order, with timestamp >= target and offset >= the log start (KIP-79: the
earliest such offset). Redpanda's published bugs are the cases covered: the batch
start instead of the record, records skipped by comparing with a batch's first
timestamp, non-monotonic CreateTime, lookups after the start was removed.

A batch whose header promised a timestamp its records do not have (a client that
wrote a wrong maxTimestamp) is passed over: the search goes on with the next batch
that qualifies, so a wrong header costs a read, never a wrong answer.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

from raftlog.entry import LogEntry
from sink.kafka.protocol.record_times import record_timestamps
from sink.state import commands as cmd
from sink.state.partitions import PartitionLog

ReadEntry = Callable[[int], LogEntry]
"""Raft log index -> its entry (raises LogRangeError once compacted away)."""


class TimeMatch(NamedTuple):
    offset: int
    timestamp: int
    leader_epoch: int  # the term of the entry holding the record's batch


def _records(part: PartitionLog, pos: int, read: ReadEntry) -> tuple[list[tuple[int, int]], int]:
    """[(offset, timestamp)] of the batch at pos, and the entry's term."""
    e = read(part.log_index[pos])
    data = memoryview(e.data)[cmd.produce_batch_offset(e.data) :]
    base = part.bases[pos]
    return [(base + delta, ts) for delta, ts in record_timestamps(data)], e.term


def offset_for_time(part: PartitionLog, ts: int, read: ReadEntry) -> TimeMatch | None:
    """The first retained record with timestamp >= ts; None when there is none."""
    times, n = part.times, len(part.bases)
    pos = times.first_at_or_after(ts, part.first)
    start = part.log_start_offset
    while pos < n:
        records, term = _records(part, pos, read)
        for offset, rec_ts in records:
            if offset >= start and rec_ts >= ts:
                return TimeMatch(offset, rec_ts, term)
        pos = times.first_at_or_after(ts, pos + 1)
    return None


def offset_of_max_time(part: PartitionLog, read: ReadEntry) -> TimeMatch | None:
    """The retained record with the largest timestamp (the first such one); None when
    the partition holds no records (ListOffsets -3, KIP-734)."""
    pos = part.times.position_of_max(part.first)
    if pos < 0:
        return None
    records, term = _records(part, pos, read)
    best: tuple[int, int] | None = None
    for offset, rec_ts in records:
        if offset >= part.log_start_offset and (best is None or rec_ts > best[1]):
            best = (offset, rec_ts)
    if best is None:  # every record of that batch is below the log start (DeleteRecords)
        return None
    return TimeMatch(best[0], best[1], term)
