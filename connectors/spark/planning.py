"""Partition planning and admission control; pure functions over offset maps.

Invariants: every function here is deterministic in its inputs (Spark re-plans a batch after a
crash from the offsets in its checkpoint and must get the same ranges back), ranges are half-open
[start, end), and their union is exactly the requested offsets.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Protocol

from pyspark.sql.datasource import InputPartition

from connectors.spark.offsets import OffsetMap, TopicPartition


@dataclass
class OffsetRange(InputPartition):
    """One read() task: offsets [start, end) of one topic-partition. Pickled to executors."""

    topic: str
    partition: int
    start: int
    end: int
    replicas: tuple[str, ...] = ()
    """Read API addresses to read from, in order (assign_replicas); the reader tries
    them first, then the source's other nodes. Empty: the nodes only."""

    @property
    def size(self) -> int:
        return self.end - self.start


def _sort_key(tp: TopicPartition) -> tuple[str, int]:
    return (tp[0], tp[1])


def split_range(r: OffsetRange, parts: int) -> list[OffsetRange]:
    """Split r into `parts` contiguous ranges whose sizes differ by at most one."""
    parts = max(1, min(parts, r.size))
    base, extra = divmod(r.size, parts)
    out, pos = [], r.start
    for i in range(parts):
        n = base + (1 if i < extra else 0)
        out.append(OffsetRange(r.topic, r.partition, pos, pos + n, r.replicas))
        pos += n
    return out


def plan_ranges(
    start: Mapping[TopicPartition, int],
    end: Mapping[TopicPartition, int],
    min_partitions: int | None = None,
    max_records_per_partition: int | None = None,
) -> list[OffsetRange]:
    """The InputPartitions of the batch (start, end].

    - Partitions absent from `start`, or with a negative (unresolved) start, read nothing: their
      `end` value is their starting point (see stream.py: resolution is a batch of its own).
    - Partitions absent from `end` (deleted) read nothing.
    - Like Spark's Kafka source, with minPartitions larger than the number of non-empty ranges,
      ranges are split in proportion to their size; maxRecordsPerPartition caps every range.
    """
    ranges: list[OffsetRange] = []
    for tp in sorted(end, key=_sort_key):
        s = start.get(tp)
        e = end[tp]
        if s is None or s < 0:
            continue
        if e < s:
            raise ValueError(f"offsets of {tp[0]}/{tp[1]} go backwards: start {s} > end {e}")
        if e > s:
            ranges.append(OffsetRange(tp[0], tp[1], s, e))
    if min_partitions and 0 < len(ranges) < min_partitions:
        total = sum(r.size for r in ranges)
        split: list[OffsetRange] = []
        for r in ranges:
            split.extend(split_range(r, max(1, round(r.size / total * min_partitions))))
        ranges = split
    if max_records_per_partition:
        capped: list[OffsetRange] = []
        for r in ranges:
            n = -(-r.size // max_records_per_partition)
            capped.extend(split_range(r, n))
        ranges = capped
    return ranges


def rate_limit(
    start: Mapping[TopicPartition, int],
    available: Mapping[TopicPartition, int],
    max_records: int,
) -> OffsetMap:
    """End offsets admitting at most max_records in total, shared in proportion to backlog.

    Each partition gets floor(max_records * backlog / total); the remainder goes one record at a
    time to partitions in sorted order that still have backlog, so the result is deterministic,
    the total is min(max_records, total backlog) and every query with backlog makes progress.
    """
    backlog = {tp: max(0, available[tp] - start.get(tp, available[tp])) for tp in available}
    total = sum(backlog.values())
    if total <= max_records:
        return dict(available)
    grant = {tp: max_records * b // total for tp, b in backlog.items()}
    left = max_records - sum(grant.values())
    while left > 0:
        for tp in sorted(backlog, key=_sort_key):
            if left and grant[tp] < backlog[tp]:
                grant[tp] += 1
                left -= 1
    return {tp: start.get(tp, available[tp]) + grant[tp] for tp in available}


class ReplicaInfo(Protocol):
    """What assign_replicas reads of a partition (cluster.PartitionState has it)."""

    @property
    def leader(self) -> int: ...

    @property
    def replicas(self) -> tuple[tuple[int, str], ...]: ...


def replica_order(leader: int, replicas: Sequence[tuple[int, str]], slot: int) -> tuple[str, ...]:
    """Where to read one range: the followers first, rotated by `slot` (so the ranges of a
    batch spread over them), then the leader; replicas of unknown address are left out.

    Any replica serves the same bytes below the high watermark the driver saw (only
    committed, applied data is served), so the choice is about load and liveness only: a
    follower spares the leader, which carries the writes; one that is down or has not
    applied that far yet is passed over at read time (fetch.read_range)."""
    followers = sorted((n, a) for n, a in replicas if a and n != leader)
    if followers:
        k = slot % len(followers)
        followers = followers[k:] + followers[:k]
    leads = [a for n, a in replicas if a and n == leader]
    out: list[str] = []
    for a in [a for _, a in followers] + leads:
        if a not in out:
            out.append(a)
    return tuple(out)


def assign_replicas(
    ranges: Sequence[OffsetRange], states: Mapping[TopicPartition, ReplicaInfo]
) -> list[OffsetRange]:
    """ranges, each with the replicas to read it from: replica_order (slot: its place in
    the batch), then the followers stably sorted by how many earlier ranges read first
    from them, so the batch's first choices spread over the nodes whichever replicas lead
    (with partition groups each partition has its own leader: rotating each partition's
    followers alone could put every range of two partitions led by nodes 1 and 3 on node
    2). With one leader for every partition this is replica_order's rotation itself.
    Deterministic in its inputs; the offsets are left as they are, so a batch re-planned
    after a crash reads the same records whichever replicas serve them."""
    out = []
    first_reads: Counter[str] = Counter()
    for slot, r in enumerate(ranges):
        st = states.get((r.topic, r.partition))
        order = replica_order(st.leader, st.replicas, slot) if st is not None else ()
        if st is not None and order:
            leads = {a for n, a in st.replicas if n == st.leader}
            followers = sorted((a for a in order if a not in leads), key=first_reads.__getitem__)
            order = tuple(followers) + tuple(a for a in order if a in leads)
            first_reads[order[0]] += 1
        out.append(replace(r, replicas=order))
    return out
