"""The idempotence rules, table-driven (facts note section 4)."""

import pytest

from sink.kafka.protocol.errors import ErrorCode
from sink.state.producers import ACCEPT, ProducerTable, Verdict

OUT_OF_ORDER_SEQUENCE_NUMBER = Verdict(ErrorCode.out_of_order_sequence_number)
INVALID_PRODUCER_EPOCH = Verdict(ErrorCode.invalid_producer_epoch)


def DUPLICATE(base: int) -> Verdict:
    return Verdict(ErrorCode.none, base, True)


T, P = "t", 0


def table_with(batches, epoch=0, pid=1):
    tab = ProducerTable()
    for i, (f, last) in enumerate(batches):
        tab.record(pid, T, P, epoch, f, last, i * 100)
    return tab


CASES = [
    # (name, history [(first,last)], history epoch, batch epoch, first, last, expected)
    ("unknown pid, any sequence", None, 0, 3, 777, 780, ACCEPT),
    ("next in order", [(0, 4)], 0, 0, 5, 9, ACCEPT),
    ("duplicate of last -> original offset", [(0, 4), (5, 9)], 0, 0, 5, 9, DUPLICATE(100)),
    (
        "duplicate of oldest cached",
        [(0, 0), (1, 1), (2, 2), (3, 3), (4, 4)],
        0,
        0,
        0,
        0,
        DUPLICATE(0),
    ),
    (
        "evicted (6th back) is out of order",
        [(0, 0), (1, 1), (2, 2), (3, 3), (4, 4), (5, 5)],
        0,
        0,
        0,
        0,
        OUT_OF_ORDER_SEQUENCE_NUMBER,
    ),
    ("gap", [(0, 4)], 0, 0, 6, 9, OUT_OF_ORDER_SEQUENCE_NUMBER),
    ("rewind not cached", [(0, 4), (5, 9)], 0, 0, 3, 9, OUT_OF_ORDER_SEQUENCE_NUMBER),
    ("epoch+1 from seq 0", [(0, 4)], 0, 1, 0, 3, ACCEPT),
    ("higher epoch, seq != 0", [(0, 4)], 0, 1, 5, 6, OUT_OF_ORDER_SEQUENCE_NUMBER),
    ("lower epoch", [(0, 4)], 2, 1, 5, 6, INVALID_PRODUCER_EPOCH),
    ("wrap 2^31-1 -> 0", [(2**31 - 3, 2**31 - 1)], 0, 0, 0, 4, ACCEPT),
]


@pytest.mark.parametrize(
    "name, hist, hepoch, epoch, first, last, expected", CASES, ids=[c[0] for c in CASES]
)
def test_rules(name, hist, hepoch, epoch, first, last, expected):
    tab = ProducerTable() if hist is None else table_with(hist, hepoch)
    assert tab.check(1, T, P, epoch, first, last) == expected


def test_epoch_bump_clears_batches_and_partitions_are_independent():
    tab = table_with([(0, 4)])
    tab.record(1, T, P, 1, 0, 2, 500)
    assert tab.check(1, T, P, 1, 0, 2) == DUPLICATE(500)
    assert tab.check(1, T, P, 0, 0, 4) == INVALID_PRODUCER_EPOCH
    assert tab.check(1, T, 1, 0, 9, 9) == ACCEPT  # other partition: unknown


def test_json_round_trip():
    tab = table_with([(0, 1), (2, 3)])
    again = ProducerTable.from_json(tab.to_json())
    assert again.check(1, T, P, 0, 2, 3) == DUPLICATE(100)
    assert again.check(1, T, P, 0, 4, 4) == ACCEPT
