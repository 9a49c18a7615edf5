"""The Spark source's timestamp options (connectors/spark/timestamps.py): parsing,
precedence and resolution against a lookup, with Spark's Kafka source semantics."""

from __future__ import annotations

import pytest

from connectors.spark.errors import InvalidOptionError, OffsetOutOfRangeError, TopicNotFoundError
from connectors.spark.offsets import LATEST
from connectors.spark.options import parse_options
from connectors.spark.timestamps import resolve_times

BASE = {"raftsink.nodes": "127.0.0.1:1", "subscribe": "t"}
SELECTED = {("t", 0): None, ("t", 1): None}


def lookup_table(table):
    calls = []

    def lookup(queries):
        calls.append(dict(queries))
        return {tp: table.get((tp, ts), -1) for tp, ts in queries.items()}

    return lookup, calls


def test_precedence_and_parsing():
    o = parse_options(
        BASE
        | {
            "startingTimestamp": "1000",
            "startingOffsetsByTimestamp": '{"t": {"0": 5}}',
            "startingOffsets": "earliest",
        },
        streaming=True,
    )
    assert (o.starting_times.option, o.starting_times.everywhere) == ("startingTimestamp", 1000)
    o = parse_options(BASE | {"startingOffsetsByTimestamp": '{"t": {"0": 5, "1": 7}}'}, False)
    assert o.starting_times.specific == {("t", 0): 5, ("t", 1): 7}
    assert o.timestamp_strategy == "error"
    o = parse_options(
        BASE | {"endingTimestamp": "9", "startingOffsetsByTimestampStrategy": "LATEST"}, False
    )
    assert o.ending_times.everywhere == 9 and o.timestamp_strategy == "latest"


@pytest.mark.parametrize(
    "opts, streaming, words",
    [
        ({"startingTimestamp": "soon"}, True, "milliseconds"),
        ({"startingTimestamp": "-5"}, True, ">= 0"),
        ({"startingOffsetsByTimestamp": "[1]"}, True, "JSON"),
        ({"startingOffsetsByTimestamp": '{"t": {"0": "x"}}'}, True, "integer"),
        ({"endingOffsetsByTimestamp": '{"t": {"0": 1}}'}, True, "batch queries only"),
        ({"endingTimestamp": "1"}, True, "batch queries only"),
        ({"startingOffsetsByTimestampStrategy": "maybe"}, True, "'error' or 'latest'"),
    ],
)
def test_bad_options_are_refused_with_a_clear_error(opts, streaming, words):
    with pytest.raises(InvalidOptionError, match=words):
        parse_options(BASE | opts, streaming)


def test_resolution_matches_and_misses():
    o = parse_options(BASE | {"startingTimestamp": "100"}, streaming=False)
    lookup, calls = lookup_table({(("t", 0), 100): 3, (("t", 1), 100): 0})
    spec = resolve_times(o.starting_times, SELECTED, lookup, ending=False)
    assert spec.specific == {("t", 0): 3, ("t", 1): 0}
    assert calls == [{("t", 0): 100, ("t", 1): 100}]
    # No record that late: the starting side fails by default ...
    lookup, _ = lookup_table({(("t", 0), 100): 3})
    with pytest.raises(OffsetOutOfRangeError, match=r"No offset matched .* t-1"):
        resolve_times(o.starting_times, SELECTED, lookup, ending=False)
    # ... or starts at the latest offset; the ending side is the latest offset.
    spec = resolve_times(o.starting_times, SELECTED, lookup, ending=False, strategy="latest")
    assert spec.specific == {("t", 0): 3, ("t", 1): LATEST}
    spec = resolve_times(o.starting_times, SELECTED, lookup, ending=True)
    assert spec.specific[("t", 1)] == LATEST


def test_by_partition_must_cover_every_partition_read():
    o = parse_options(BASE | {"startingOffsetsByTimestamp": '{"t": {"0": 5}}'}, False)
    lookup, _ = lookup_table({})
    with pytest.raises(InvalidOptionError, match="missing: t/1"):
        resolve_times(o.starting_times, SELECTED, lookup, ending=False)
    o = parse_options(
        BASE | {"startingOffsetsByTimestamp": '{"t": {"0": 5, "1": 5, "9": 5}}'}, False
    )
    with pytest.raises(TopicNotFoundError, match="t/9"):
        resolve_times(o.starting_times, SELECTED, lookup, ending=False)
