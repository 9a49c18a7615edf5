"""Fetch above a node's high watermark: who may say OFFSET_OUT_OF_RANGE.

A consumer told OFFSET_OUT_OF_RANGE resets its position (earliest: re-reads; latest: skips
records), so a node that merely lags the cluster must not say it. The chaos campaign found this:
a lagging node's OUT_OF_RANGE for an offset the consumer had already read elsewhere.
"""

from types import SimpleNamespace

import pytest

from sink.kafka.handlers.fetch import _collect
from sink.kafka.protocol.errors import ErrorCode
from sink.state import OffsetOutOfRange

HW, START = 100, 10


class FakeFsm:
    def has_partition(self, name: str, idx: int) -> bool:
        return True

    def high_watermark(self, name: str, idx: int) -> int:
        return HW

    def log_start_offset(self, name: str, idx: int) -> int:
        return START

    def read_parts(self, name: str, idx: int, offset: int, max_bytes: int) -> list:
        if offset < START or offset > HW:
            raise OffsetOutOfRange(offset)
        return [] if offset == HW else [(offset, b"p" * 16, memoryview(b"r" * 50))]


TERM = 7


def ctx(leader: bool, ready: bool = True, applied_all: bool = True) -> SimpleNamespace:
    svc = SimpleNamespace(
        fsm=FakeFsm(),
        is_leader=lambda: leader,
        leader_ready=lambda: leader and ready,
        applied_all_committed=lambda: applied_all,
        leader_epoch=lambda: TERM,
    )
    return SimpleNamespace(service=svc, fsm=svc.fsm)


def fetch(offset: int, max_bytes: int = 1 << 20, epoch: int = -1) -> SimpleNamespace:
    part = SimpleNamespace(
        partition=0, fetch_offset=offset, partition_max_bytes=1 << 20, current_leader_epoch=epoch
    )
    return SimpleNamespace(
        max_bytes=max_bytes, topics=[SimpleNamespace(topic="t", partitions=[part])]
    )


def answer(c: SimpleNamespace, offset: int, max_bytes: int = 1 << 20, epoch: int = -1):
    topics, _, any_error = _collect(c, fetch(offset, max_bytes, epoch))
    ((_name, (part,)),) = topics
    return part, any_error


@pytest.mark.parametrize(
    ("leader", "applied_all", "error", "hw"),
    [
        (True, True, ErrorCode.offset_out_of_range, HW),  # the offset surely does not exist
        (True, False, ErrorCode.none, HW),  # committed entries not applied yet: wait (long poll)
        (False, True, ErrorCode.not_leader_or_follower, -1),  # a follower may lag: go to the leader
    ],
)
def test_fetch_above_high_watermark(leader, applied_all, error, hw):
    part, any_error = answer(ctx(leader, applied_all=applied_all), HW + 5)
    assert (part.error, part.high_watermark, part.size) == (error, hw, 0)
    assert any_error == (error != ErrorCode.none)


@pytest.mark.parametrize("leader", [True, False])
def test_fetch_below_log_start_is_out_of_range_everywhere(leader):
    part, any_error = answer(ctx(leader), START - 1)
    assert part.error == ErrorCode.offset_out_of_range and any_error
    assert (part.high_watermark, part.log_start_offset) == (HW, START)


@pytest.mark.parametrize("leader", [True, False])
def test_fetch_within_range_is_served_by_any_replica(leader):
    part, any_error = answer(ctx(leader), 50)
    assert part.error == ErrorCode.none and part.size == 66 and not any_error
    part, _ = answer(ctx(leader), HW)  # at the high watermark: empty, no error
    assert part.error == ErrorCode.none and part.size == 0


def test_new_leader_not_ready_sends_clients_away():
    part, any_error = answer(ctx(True, ready=False), 50)
    assert part.error == ErrorCode.not_leader_or_follower and any_error


@pytest.mark.parametrize(
    ("epoch", "error"),
    [
        (-1, ErrorCode.offset_out_of_range),  # no epoch sent (Fetch < v9, or unknown)
        (TERM - 1, ErrorCode.offset_out_of_range),
        (TERM, ErrorCode.offset_out_of_range),
        # The client saw a later leader: this one may be deposed without knowing it, and the
        # offset may exist there. Not an offset reset: refresh Metadata and retry.
        (TERM + 1, ErrorCode.unknown_leader_epoch),
    ],
)
def test_leader_with_an_older_epoch_than_the_client_does_not_say_out_of_range(epoch, error):
    part, any_error = answer(ctx(True), HW + 5, epoch=epoch)
    assert part.error == error and any_error
    part, _ = answer(ctx(True), 50, epoch=TERM + 1)  # committed data: served in any term
    assert part.error == ErrorCode.none and part.size == 66
