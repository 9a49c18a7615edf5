"""Fetch above a node's high watermark: who may say OFFSET_OUT_OF_RANGE.

A consumer told OFFSET_OUT_OF_RANGE resets its position (earliest: re-reads; latest: skips
records), so a node that merely lags the cluster must not say it. The chaos campaign found this:
a lagging node's OUT_OF_RANGE for an offset the consumer had already read elsewhere.

The Fetch handler runs against a real in-memory node (tests/unit/sink/memory_services.py): a
partition holding offsets 10..99 (0..9 compacted away), high watermark 100.
"""

import uuid

import pytest

from sink.kafka.protocol.errors import ErrorCode
from sink.state import commands
from tests.unit.sink.batches import make_batch
from tests.unit.sink.memory_services import MemoryNode
from tests.unit.sink.requests import request_values
from tests.unit.sink.test_handlers import call

HW, START = 100, 10
TERM = 7


def node(leader: bool, ready: bool = True, applied_all: bool = True) -> MemoryNode:
    n = MemoryNode(node_id=1, leader_id=1, term=TERM)
    n.apply(commands.encode_create_topic("t", 1, uuid.uuid4()))
    for values in ([b"a"] * START, [b"b"] * (HW - START)):
        batch = make_batch(values)
        n.apply(commands.encode_produce("t", 0, -1, -1, -1, batch))
    n.log.compact(3)  # entry 2 (offsets 0..9) compacted: the partition starts at 10
    n.lead = 1 if leader else 2
    n.ready, n.caught_up = ready, applied_all
    return n


def answer(n: MemoryNode, offset: int, epoch: int = -1):
    values = request_values(1) | {"max_wait": 0}
    part = values["topics"][0]["partitions"][0] | {
        "fetch_offset": offset,
        "current_leader_epoch": epoch,
    }
    values["topics"] = [{"topic": "t", "topic_id": uuid.UUID(int=0), "partitions": [part]}]
    resp = call(n, 1, 12, values)
    (p,) = resp.responses[0].partitions
    return p


@pytest.mark.parametrize(
    ("leader", "applied_all", "error", "hw"),
    [
        (True, True, ErrorCode.offset_out_of_range, HW),  # the offset surely does not exist
        (True, False, ErrorCode.none, HW),  # committed entries not applied yet: wait (long poll)
        (False, True, ErrorCode.not_leader_or_follower, -1),  # a follower may lag: go to the leader
    ],
)
def test_fetch_above_high_watermark(leader, applied_all, error, hw):
    part = answer(node(leader, applied_all=applied_all), HW + 5)
    assert (part.error_code, part.high_watermark, part.records) == (error, hw, b"")


@pytest.mark.parametrize("leader", [True, False])
def test_fetch_below_log_start_is_out_of_range_everywhere(leader):
    part = answer(node(leader), START - 1)
    assert part.error_code == ErrorCode.offset_out_of_range
    assert (part.high_watermark, part.log_start_offset) == (HW, START)


@pytest.mark.parametrize("leader", [True, False])
def test_fetch_within_range_is_served_by_any_replica(leader):
    part = answer(node(leader), 50)
    assert part.error_code == ErrorCode.none and len(part.records) > 0
    part = answer(node(leader), HW)  # at the high watermark: empty, no error
    assert part.error_code == ErrorCode.none and part.records == b""


def test_new_leader_not_ready_sends_clients_away():
    part = answer(node(True, ready=False), 50)
    assert part.error_code == ErrorCode.not_leader_or_follower


@pytest.mark.parametrize(
    ("epoch", "error"),
    [
        (-1, ErrorCode.offset_out_of_range),  # no epoch sent (Fetch < v9, or unknown)
        # An older epoch is fenced before any offset question (Kafka's rule): the client
        # refreshes Metadata; it is not told to reset.
        (TERM - 1, ErrorCode.fenced_leader_epoch),
        (TERM, ErrorCode.offset_out_of_range),
        # The client saw a later leader: this one may be deposed without knowing it, and the
        # offset may exist there. Not an offset reset: refresh Metadata and retry.
        (TERM + 1, ErrorCode.unknown_leader_epoch),
    ],
)
def test_leader_with_an_older_epoch_than_the_client_does_not_say_out_of_range(epoch, error):
    part = answer(node(True), HW + 5, epoch=epoch)
    assert part.error_code == error
    part = answer(node(True), 50, epoch=TERM + 1)  # committed data: served in any term
    assert part.error_code == ErrorCode.none and len(part.records) > 0
