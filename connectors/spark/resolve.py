"""From cluster partition states to offsets: subscription matching, starting/ending offsets,
and the end offset of the next micro-batch. Pure functions (the cluster is queried by callers).

How a streaming query starts without ever re-resolving 'latest' or 'earliest' differently:
initialOffset() returns the sentinels (-1 latest, -2 earliest) for unresolved partitions. The
first latestOffset() turns them into concrete offsets and advances nothing, so batch 0 reads no
data and its end offsets, written to the checkpoint's offset log, are the resolved starting
point. Spark calls initialOffset() again on a restart before batch 0 committed; the sentinels
it gets then plan an empty batch 0 again against the same logged end, so the starting point is
resolved exactly once per query. Partitions that appear later (new topics matching the
subscription) enter the same way, at their log start offset (Kafka: "earliest").
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from connectors.spark.cluster import PartitionState
from connectors.spark.errors import DataLossError, OffsetOutOfRangeError, TopicNotFoundError
from connectors.spark.offsets import EARLIEST, LATEST, OffsetMap, OffsetSpec, TopicPartition
from connectors.spark.options import Subscription
from connectors.spark.planning import rate_limit

log = logging.getLogger("connectors.spark")
States = Mapping[TopicPartition, PartitionState]


def select(sub: Subscription, states: States) -> dict[TopicPartition, PartitionState]:
    """The partitions the subscription reads, sorted by (topic, partition)."""
    return {tp: states[tp] for tp in sorted(states) if sub.matches(tp)}


def check_exists(sub: Subscription, states: States, nodes: tuple[str, ...] = ()) -> None:
    """Raise TopicNotFoundError for subscribed topics / assigned partitions the cluster lacks."""
    topics = {t for t, _ in states}
    if sub.kind == "subscribe":
        missing = [t for t in sub.topics if t not in topics]
    elif sub.kind == "assign":
        missing = [f"{t}/{p}" for t, p in sub.assigned if (t, p) not in states]
    else:
        return
    if missing:
        where = f" (asked {', '.join(nodes)})" if nodes else ""
        raise TopicNotFoundError(
            f"not found in the raftsink cluster{where}: {', '.join(missing)}. Create the"
            " topic first (produce to it, or `raftsink` topic creation) or fix the"
            f" subscription {sub.describe()}."
        )


def resolve_one(value: int, st: PartitionState) -> int:
    if value == EARLIEST:
        return st.log_start_offset
    if value == LATEST:
        return st.high_watermark
    return value


def initial_offsets(spec: OffsetSpec, sub: Subscription, states: States) -> OffsetMap:
    """Starting offsets of a new streaming query: concrete values or sentinels, per partition.

    Concrete offsets above the high watermark are rejected (they would wait for data that may
    never come); offsets below the log start are reported as data loss when read.
    """
    out: OffsetMap = {}
    selected = select(sub, states)
    for tp in spec.specific:
        if tp not in selected:
            raise TopicNotFoundError(
                f"startingOffsets names {tp[0]}/{tp[1]}, which is not in the cluster or not"
                f" in the subscription {sub.describe()}"
            )
    for tp, st in selected.items():
        value = spec.for_partition(tp)
        if value >= 0 and value > st.high_watermark:
            raise OffsetOutOfRangeError(
                f"startingOffsets {tp[0]}/{tp[1]}={value} is beyond the high watermark"
                f" {st.high_watermark}"
            )
        out[tp] = value
    return out


def next_end(
    start: Mapping[TopicPartition, int],
    sub: Subscription,
    states: States,
    target: Mapping[TopicPartition, int] | None = None,
    max_records: int | None = None,
) -> tuple[OffsetMap, OffsetMap]:
    """(end offsets of the next batch, latest available offsets) for latestOffset().

    - Unresolved starts (sentinels) are resolved and nothing advances (see module doc).
    - Never moves backwards: a lagging replica's high watermark below `start` is ignored.
    - A partition the answering node does not list keeps its offset (a node that is still
      catching up may not know a topic yet; raftsink does not delete topics).
    - With a target (Trigger.AvailableNow) no partition goes past it; partitions not in the
      target do not advance.
    - max_records is the ReadMaxRows admission limit (maxOffsetsPerTrigger).
    """
    selected = select(sub, states)
    if any(v < 0 for v in start.values()):
        end: OffsetMap = {}
        for tp, v in start.items():
            end[tp] = resolve_one(v, selected[tp]) if (v < 0 and tp in selected) else v
        for tp, st in selected.items():
            end.setdefault(tp, st.log_start_offset)
        if any(v < 0 for v in end.values()):
            raise TopicNotFoundError(
                "cannot resolve the starting offsets of "
                + ", ".join(f"{t}/{p}" for (t, p), v in end.items() if v < 0)
                + ": the answering node does not know these partitions"
            )
        return end, dict(end)
    available: OffsetMap = {}
    for tp, off in start.items():
        st = selected.get(tp)
        hw = off if st is None else max(off, st.high_watermark)
        if target is not None:
            hw = max(off, min(hw, target.get(tp, off)))
        available[tp] = hw
    end = rate_limit(start, available, max_records) if max_records else dict(available)
    for tp, st in selected.items():
        if tp not in start:  # a new partition enters at its log start; reads from next batch
            end[tp] = st.log_start_offset
            available[tp] = st.high_watermark
    return end, available


def batch_range(
    opts_starting: OffsetSpec,
    opts_ending: OffsetSpec,
    sub: Subscription,
    states: States,
    fail_on_data_loss: bool,
) -> tuple[OffsetMap, OffsetMap]:
    """Concrete (start, end) offsets of a batch query; validates them against the log."""
    selected = select(sub, states)
    for spec, name in ((opts_starting, "startingOffsets"), (opts_ending, "endingOffsets")):
        for tp in spec.specific:
            if tp not in selected:
                raise TopicNotFoundError(
                    f"{name} names {tp[0]}/{tp[1]}, which is not in the cluster or not in the"
                    f" subscription {sub.describe()}"
                )
    start: OffsetMap = {}
    end: OffsetMap = {}
    for tp, st in selected.items():
        s = resolve_one(opts_starting.for_partition(tp), st)
        e = resolve_one(opts_ending.for_partition(tp), st)
        if e > st.high_watermark:
            raise OffsetOutOfRangeError(
                f"endingOffsets {tp[0]}/{tp[1]}={e} is beyond the high watermark {st.high_watermark}"
            )
        if s > e:
            raise OffsetOutOfRangeError(
                f"startingOffsets {tp[0]}/{tp[1]}={s} is after endingOffsets {e}"
            )
        if s < st.log_start_offset:
            msg = (
                f"data loss in {tp[0]}/{tp[1]}: startingOffsets {s} is below the log start"
                f" {st.log_start_offset}"
            )
            if fail_on_data_loss:
                raise DataLossError(msg + " (set failOnDataLoss=false to start at the log start)")
            log.warning("%s; starting at %d", msg, st.log_start_offset)
            s = min(e, st.log_start_offset)
        start[tp], end[tp] = s, e
    return start, end
