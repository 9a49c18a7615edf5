"""Offsets: one next-offset (end exclusive) per topic-partition.

In memory an offset map is `dict[(topic, partition), int]`. Towards Spark it is the nested JSON
Spark's Kafka source uses, `{"topic": {"0": 42}}`, so a checkpoint's offsets can be pasted into
`startingOffsets`. Spark compares offsets as JSON strings, so to_json() always emits keys in the
order `json.dumps(sort_keys=True)` would (topics, then partition numbers as strings).

In startingOffsets / endingOffsets JSON, -2 means earliest and -1 means latest (as in Kafka).
Inside a running query the same sentinels mark a start that is not resolved yet (see stream.py).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from connectors.spark.errors import InvalidOptionError

TopicPartition = tuple[str, int]
OffsetMap = dict[TopicPartition, int]

EARLIEST = -2
LATEST = -1


def to_json(offsets: Mapping[TopicPartition, int]) -> dict[str, dict[str, int]]:
    """Nested dict with keys in sorted (string) order; json.dumps of it is canonical."""
    nested: dict[str, dict[str, int]] = {}
    for topic, part in sorted(offsets, key=lambda tp: (tp[0], str(tp[1]))):
        nested.setdefault(topic, {})[str(part)] = int(offsets[(topic, part)])
    return nested


def dumps(offsets: Mapping[TopicPartition, int]) -> str:
    return json.dumps(to_json(offsets), separators=(",", ":"))


def from_json(value: Any) -> OffsetMap:
    """Inverse of to_json; accepts the dict or its JSON text."""
    if isinstance(value, str):
        value = json.loads(value)
    if not isinstance(value, Mapping):
        raise ValueError(f"offsets must be a JSON object, got {value!r}")
    out: OffsetMap = {}
    for topic, parts in value.items():
        if not isinstance(parts, Mapping):
            raise ValueError(f"offsets of topic {topic!r} must be an object, got {parts!r}")
        for part, off in parts.items():
            if isinstance(off, bool) or not isinstance(off, int):
                raise ValueError(f"offset of {topic}/{part} must be an integer, got {off!r}")
            out[(str(topic), int(part))] = off
    return out


class OffsetSpec:
    """A parsed startingOffsets / endingOffsets option: 'earliest', 'latest' or per-partition."""

    def __init__(self, default: int, specific: OffsetMap | None = None) -> None:
        self.default = default  # EARLIEST or LATEST for partitions not listed
        self.specific = dict(specific or {})

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, OffsetSpec)
            and self.default == other.default
            and self.specific == other.specific
        )

    def __repr__(self) -> str:
        return f"OffsetSpec(default={self.default}, specific={self.specific})"

    def for_partition(self, tp: TopicPartition) -> int:
        """A concrete offset (>= 0) or a sentinel (EARLIEST / LATEST)."""
        return self.specific.get(tp, self.default)


def parse_offset_spec(name: str, text: str, default_for_unlisted: int) -> OffsetSpec:
    """Parse 'earliest' | 'latest' | JSON {"topic": {"0": offset}} (-2 earliest, -1 latest)."""
    t = text.strip()
    if t.lower() == "earliest":
        return OffsetSpec(EARLIEST)
    if t.lower() == "latest":
        return OffsetSpec(LATEST)
    try:
        specific = from_json(t)
    except (ValueError, json.JSONDecodeError) as exc:
        raise InvalidOptionError(
            f"option {name}={text!r}: expected 'earliest', 'latest' or JSON like "
            f'{{"topic": {{"0": 42, "1": -2}}}} (-2 = earliest, -1 = latest): {exc}'
        ) from None
    for tp, off in specific.items():
        if off < LATEST - 1:
            raise InvalidOptionError(f"option {name}: offset {off} of {tp[0]}/{tp[1]} is invalid")
    return OffsetSpec(default_for_unlisted, specific)
