"""The Kafka source's timestamp options: startingTimestamp, startingOffsetsByTimestamp,
endingTimestamp, endingOffsetsByTimestamp and startingOffsetsByTimestampStrategy.

Semantics as Spark's Kafka source (docs/spark.md): a timestamp names, per partition,
the first record whose timestamp is >= it (Kafka's offsetsForTimes; raftsink answers
the exact record through the read API's OffsetsForTimes). Precedence: startingTimestamp
over startingOffsetsByTimestamp over startingOffsets (the same for ending*).
...ByTimestamp must name every partition the query reads (Spark asserts the same).
When no record is that late: a starting offset fails the query ("No offset matched",
strategy "error", the default) or starts at the latest offset (strategy "latest"); an
ending offset is the latest offset. Streaming queries use the starting options only when
a new query starts (the offsets are resolved once, like startingOffsets); ending
options are for batch queries.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from connectors.spark.errors import InvalidOptionError, OffsetOutOfRangeError, TopicNotFoundError
from connectors.spark.offsets import LATEST, OffsetMap, OffsetSpec, TopicPartition

STRATEGIES = ("error", "latest")


@dataclass(frozen=True)
class TimeSpec:
    """A timestamp for every partition (everywhere), or one per listed partition."""

    option: str
    everywhere: int | None = None
    specific: dict[TopicPartition, int] = field(default_factory=dict)

    def for_partition(self, tp: TopicPartition) -> int | None:
        return self.everywhere if self.everywhere is not None else self.specific.get(tp)


def _timestamp(name: str, text: str) -> int:
    try:
        ts = int(text.strip())
    except ValueError:
        raise InvalidOptionError(
            f"option {name}={text!r}: expected a timestamp in milliseconds since the epoch"
        ) from None
    if ts < 0:
        raise InvalidOptionError(f"option {name}: timestamp {ts} must be >= 0")
    return ts


def _by_partition(name: str, text: str) -> dict[TopicPartition, int]:
    try:
        raw = json.loads(text)
        if not isinstance(raw, dict) or not raw:
            raise ValueError("expected a non-empty JSON object")
        out: dict[TopicPartition, int] = {}
        for topic, parts in raw.items():
            if not isinstance(parts, dict):
                raise ValueError(f"topic {topic!r} must map partitions to timestamps")
            for p, ts in parts.items():
                if isinstance(ts, bool) or not isinstance(ts, int):
                    raise ValueError(f"timestamp of {topic}/{p} must be an integer, got {ts!r}")
                if ts < 0:
                    raise ValueError(f"timestamp of {topic}/{p} must be >= 0, got {ts}")
                out[(str(topic), int(p))] = ts
    except (ValueError, json.JSONDecodeError) as exc:
        raise InvalidOptionError(
            f"option {name}={text!r}: expected JSON like "
            f'{{"topic": {{"0": 1700000000000}}}} (milliseconds since the epoch): {exc}'
        ) from None
    return out


def parse_time_spec(opts: Mapping[str, str], which: str) -> TimeSpec | None:
    """which: "starting" | "ending"; opts with lower-cased keys."""
    single, per = f"{which}Timestamp", f"{which}OffsetsByTimestamp"
    if single.lower() in opts:
        return TimeSpec(single, everywhere=_timestamp(single, opts[single.lower()]))
    if per.lower() in opts:
        return TimeSpec(per, specific=_by_partition(per, opts[per.lower()]))
    return None


def parse_strategy(opts: Mapping[str, str]) -> str:
    value = opts.get("startingoffsetsbytimestampstrategy", "error").strip().lower()
    if value not in STRATEGIES:
        raise InvalidOptionError(
            f"option startingOffsetsByTimestampStrategy={value!r}: expected 'error' or 'latest'"
        )
    return value


Lookup = Callable[[dict[TopicPartition, int]], dict[TopicPartition, int]]
"""{tp: timestamp} -> {tp: offset of the first record at or after it, -1: none}."""


def resolve_times(
    spec: TimeSpec,
    selected: Mapping[TopicPartition, object],
    lookup: Lookup,
    *,
    ending: bool,
    strategy: str = "error",
) -> OffsetSpec:
    """Concrete offsets (or LATEST where no record matched and that is the rule) for every
    selected partition, as an OffsetSpec the offset paths already handle."""
    if spec.everywhere is None:
        unknown = sorted(tp for tp in spec.specific if tp not in selected)
        if unknown:
            raise TopicNotFoundError(
                f"{spec.option} names {', '.join(f'{t}/{p}' for t, p in unknown)}, which the"
                " cluster or the subscription does not have"
            )
        missing = sorted(tp for tp in selected if tp not in spec.specific)
        if missing:
            raise InvalidOptionError(
                f"{spec.option} must give a timestamp for every partition the query reads;"
                f" missing: {', '.join(f'{t}/{p}' for t, p in missing)}"
            )
    queries = {tp: spec.for_partition(tp) for tp in selected}
    found = lookup({tp: ts for tp, ts in queries.items() if ts is not None})
    out: OffsetMap = {}
    for tp, ts in queries.items():
        offset = found.get(tp, -1)
        if offset >= 0:
            out[tp] = offset
        elif ending or strategy == "latest":
            out[tp] = LATEST
        else:
            raise OffsetOutOfRangeError(
                f"No offset matched from request of topic-partition {tp[0]}-{tp[1]} and"
                f" timestamp {ts} ({spec.option}). Set startingOffsetsByTimestampStrategy"
                " to 'latest' to start at the latest offset instead."
            )
    return OffsetSpec(LATEST, out)
