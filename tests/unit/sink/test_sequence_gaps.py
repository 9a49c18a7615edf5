"""SequenceGaps: an OUT_OF_ORDER verdict is answered NOT_LEADER_OR_FOLLOWER until the
gap has lasted the grace, per (pid, topic, partition, epoch); an accepted batch closes
the gap, so the next one starts its own grace."""

import logging

from sink.kafka.protocol.errors import ErrorCode
from sink.lifecycle.sequence_gaps import MAX_TRACKED, SequenceGaps

OOO = ErrorCode.out_of_order_sequence_number
RETRY = ErrorCode.not_leader_or_follower
KEY = (1000, "t", 0, 0)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_gap_is_retriable_until_the_grace_ends_then_out_of_order(caplog):
    clock = Clock()
    gaps = SequenceGaps(30_000, clock)
    assert gaps.answer(KEY, OOO) == RETRY
    clock.now += 29.9
    assert gaps.answer(KEY, OOO) == RETRY
    assert not caplog.records
    clock.now += 0.1
    with caplog.at_level(logging.WARNING, logger="sink.produce"):
        assert gaps.answer(KEY, OOO) == OOO
    assert (gaps.retried, gaps.refused) == (2, 1)
    # The refusal is logged: a client will bump its epoch, and its deliveries may fail.
    (rec,) = caplog.records
    assert "producer 1000 epoch 0 on t/0 lasted 30.0 s" in rec.getMessage()


def test_an_accepted_batch_closes_the_gap():
    clock = Clock()
    gaps = SequenceGaps(1000, clock)
    assert gaps.answer(KEY, OOO) == RETRY
    clock.now += 5
    assert gaps.answer(KEY, ErrorCode.none) == ErrorCode.none
    assert gaps.answer(KEY, OOO) == RETRY  # a new gap: its own grace


def test_gaps_are_per_producer_partition_and_epoch():
    clock = Clock()
    gaps = SequenceGaps(1000, clock)
    gaps.answer(KEY, OOO)
    clock.now += 2
    assert gaps.answer(KEY, OOO) == OOO
    for other in ((1001, "t", 0, 0), (1000, "t", 1, 0), (1000, "u", 0, 0), (1000, "t", 0, 1)):
        assert gaps.answer(other, OOO) == RETRY, other


def test_other_errors_pass_through_and_zero_grace_is_kafkas_answer():
    gaps = SequenceGaps(0, Clock())
    assert gaps.answer(KEY, OOO) == OOO
    for err in (ErrorCode.none, ErrorCode.invalid_producer_epoch, ErrorCode.request_timed_out):
        assert gaps.answer(KEY, err) == err


def test_tracking_is_bounded():
    gaps = SequenceGaps(1000, Clock())
    for pid in range(MAX_TRACKED + 10):
        gaps.answer((pid, "t", 0, 0), OOO)
    assert len(gaps._first_seen) == MAX_TRACKED
