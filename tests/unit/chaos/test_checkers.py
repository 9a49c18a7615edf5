"""Each checker on hand-made histories: it catches its anomaly, and a clean
history (with unknown outcomes, seeks, restarts) gives no false positive."""

from __future__ import annotations

import itertools

import pytest

from chaos import checkers
from chaos.checkers import ANOMALY_KINDS, check_all


class H:
    """Builds a history with explicit times."""

    def __init__(self) -> None:
        self.ops: list[dict] = []
        self.ids = itertools.count(1)
        self.t = 0.0

    def _tick(self, t: float | None) -> float:
        self.t = self.t + 0.01 if t is None else t
        return self.t

    def op(self, type_, f, process, t_inv=None, t_end=None, **fields):
        i = next(self.ids)
        self.ops.append(
            {"id": i, "type": "invoke", "f": f, "process": process, "time": self._tick(t_inv)}
        )
        self.ops.append(
            {"id": i, "type": type_, "f": f, "process": process, "time": self._tick(t_end)} | fields
        )

    def send(self, value, partition, offset=None, type_="ok", process="producer-0", **kw):
        fields = {"value": value, "partition": partition}
        if type_ == "ok":
            fields["offset"] = offset
        else:
            fields["error"] = "timed out"
        self.op(type_, "send", process, **kw, **fields)

    def seek(self, process, partition, offset):
        self.op("ok", "seek", process, partition=partition, offset=offset)

    def poll(self, process, records, source="kafka", **kw):
        self.op("ok", "poll", process, source=source, records=[list(r) for r in records], **kw)

    def caught_up(self, process, ends):
        self.op("ok", "caught_up", process, ends={str(p): e for p, e in ends.items()})

    def final(self, node, records, ends, complete=True):
        self.op(
            "ok",
            "final_read",
            f"final-node-{node}",
            source="read_api",
            node=node,
            complete=complete,
            ends={str(p): e for p, e in ends.items()},
            records=[list(r) for r in records],
        )

    def hw(self, source, partitions, node=0, gen=1, process=None, t_inv=None, t_end=None):
        self.op(
            "ok",
            "hw",
            process or f"hw-{source}-{node}",
            t_inv=t_inv,
            t_end=t_end,
            source=source,
            node=node,
            gen=gen,
            partitions={str(p): v for p, v in partitions.items()},
        )


def clean_history() -> H:
    """Two partitions, writes (one unknown that landed, one that did not), two
    consumers reading to the end (one re-seeking), final reads on 3 nodes."""
    h = H()
    h.send("a", 0, 0)
    h.send("b", 0, 1)
    h.send("c", 1, 0)
    h.send("u1", 1, type_="info")  # unknown, landed at offset 1
    h.send("u2", 0, type_="info")  # unknown, never landed
    h.send("d", 1, 2)
    for c in ("kafka-consumer-0", "read-api-0"):
        h.seek(c, 0, 0)
        h.seek(c, 1, 0)
    h.poll("kafka-consumer-0", [(0, 0, "a"), (1, 0, "c")])
    h.poll("kafka-consumer-0", [(0, 1, "b"), (1, 1, "u1"), (1, 2, "d")])
    h.poll("read-api-0", [(0, 0, "a")], source="read_api", node=2)
    h.poll("read-api-0", [(0, 1, "b")], source="read_api", node=3)
    h.seek("read-api-0", 0, 0)  # re-read after a reset: going back is legal after a seek
    h.poll("read-api-0", [(0, 0, "a"), (0, 1, "b")], source="read_api", node=1)
    h.poll("read-api-0", [(1, 0, "c"), (1, 1, "u1"), (1, 2, "d")], source="read_api", node=1)
    ends = {0: 2, 1: 3}
    h.caught_up("kafka-consumer-0", ends)
    h.caught_up("read-api-0", ends)
    recs = [(0, 0, "a"), (0, 1, "b"), (1, 0, "c"), (1, 1, "u1"), (1, 2, "d")]
    for n in (1, 2, 3):
        h.final(n, recs, ends)
    # high watermarks: per node rising; a restarted node (gen 2) starts low again
    h.hw("read_api", {0: 1, 1: 1}, node=1, gen=1)
    h.hw("read_api", {0: 2, 1: 3}, node=1, gen=1)
    h.hw("read_api", {0: 0, 1: 0}, node=1, gen=2)
    h.hw("read_api", {0: 2, 1: 3}, node=1, gen=2)
    h.hw("read_api_lin", {0: 2, 1: 3}, node=2)
    h.hw("read_api_lin", {0: 2, 1: 3}, node=3)
    h.hw("kafka", {0: 1}, process="kafka-hw")
    h.hw("kafka", {0: 2}, process="kafka-hw")
    return h


def kinds(found: dict) -> dict[str, int]:
    return {k: len(v) for k, v in found.items() if v}


def test_clean_history_has_no_anomaly():
    found = check_all(clean_history().ops)
    assert kinds(found) == {}
    assert set(found) == set(ANOMALY_KINDS)


def test_empty_history_has_no_anomaly():
    assert kinds(check_all([])) == {}


def test_lost_write_below_the_read_horizon():
    h = clean_history()
    h.send("lost", 0, 2)  # acknowledged at offset 2...
    h.poll("kafka-consumer-1", [(0, 3, "later")])  # ...readers got past it, never saw it
    found = checkers.lost_writes(h.ops)
    assert [a["value"] for a in found] == ["lost"]
    assert found[0]["acked_offset"] == 2


def test_lost_write_beyond_a_truncated_log():
    """Acknowledged at offset 5, but a complete final read ends at 2 (truncation)."""
    h = clean_history()
    h.send("gone", 0, 5)
    assert [a["value"] for a in checkers.lost_writes(h.ops)] == ["gone"]


def test_ack_without_an_offset_is_checked_by_value_against_complete_final_reads():
    """librdkafka can report a delivery with no offset (msg.offset() None; seed 7, once,
    at the final flush): it crashed every checker (None >= 0). Now: no position to check,
    but a complete final read of its partition must hold the value."""
    h = clean_history()
    h.send("no-offset-read", 0, None)
    h.poll("kafka-consumer-1", [(0, 3, "no-offset-read")])
    check_all(h.ops)  # no TypeError
    assert checkers.lost_writes(h.ops) == []
    h.send("no-offset-gone", 0, None)
    found = checkers.lost_writes(h.ops)
    assert [(a["value"], a["acked_offset"]) for a in found] == [("no-offset-gone", None)]


def test_unverifiable_ack_is_not_lost():
    h = H()
    h.send("x", 0, 7)  # no read reached offset 7, no complete final read
    h.poll("c", [(0, 0, "y")])
    assert checkers.lost_writes(h.ops) == []
    assert checkers.unverified_acks(h.ops) == 1


def test_unknown_send_never_read_is_fine_but_twice_is_a_duplicate():
    h = clean_history()
    assert checkers.duplicates(h.ops) == []
    h.poll("kafka-consumer-1", [(1, 3, "u1")])  # the unknown write again, at offset 3
    dups = checkers.duplicates(h.ops)
    assert [d["value"] for d in dups] == ["u1"]
    assert [p["offset"] for p in dups[0]["positions"]] == [1, 3]


def test_duplicate_between_ack_and_read():
    h = H()
    h.send("v", 0, 4)
    h.poll("c", [(0, 4, "w"), (0, 5, "v")])
    assert [d["value"] for d in checkers.duplicates(h.ops)] == ["v"]


def test_inconsistent_offsets_across_replicas():
    h = clean_history()
    h.final(2, [(1, 2, "other")], {1: 3}, complete=False)  # node 2 has another value at 1/2
    found = checkers.inconsistent_offsets(h.ops)
    assert len(found) == 1
    assert (found[0]["partition"], found[0]["offset"]) == (1, 2)
    assert set(found[0]["values"]) == {"d", "other"}


def test_inconsistent_offset_between_ack_and_read():
    h = H()
    h.send("mine", 0, 0)
    h.poll("c", [(0, 0, "theirs")])
    assert len(checkers.inconsistent_offsets(h.ops)) == 1


def test_poll_skip():
    h = clean_history()
    h.seek("kafka-consumer-1", 0, 0)
    h.poll("kafka-consumer-1", [(0, 0, "a")])
    h.poll("kafka-consumer-1", [(0, 2, "z")])  # offset 1 ("b") exists: skipped
    found = checkers.poll_order(h.ops)
    assert [a["kind"] for a in found] == ["poll_skip"]
    assert found[0]["skipped_known"] == [1]


def test_poll_skip_right_after_a_seek():
    h = clean_history()
    h.seek("kafka-consumer-1", 1, 0)
    h.poll("kafka-consumer-1", [(1, 1, "u1")])  # offset 0 ("c") jumped over
    assert [a["kind"] for a in checkers.poll_order(h.ops)] == ["poll_skip"]


def test_gap_without_known_values_is_not_a_skip():
    h = H()
    h.poll("c", [(0, 0, "a"), (0, 5, "f")])  # offsets 1-4 hold nothing anyone saw
    assert checkers.poll_order(h.ops) == []


def test_nonmonotonic_poll():
    h = clean_history()
    h.seek("kafka-consumer-1", 0, 0)
    h.poll("kafka-consumer-1", [(0, 0, "a"), (0, 1, "b")])
    h.poll("kafka-consumer-1", [(0, 1, "b")])  # the same offset again, no seek
    found = checkers.poll_order(h.ops)
    assert [a["kind"] for a in found] == ["nonmonotonic_poll"]
    assert (found[0]["previous_offset"], found[0]["offset"]) == (1, 1)


def test_nonmonotonic_poll_backwards_within_one_poll():
    h = H()
    h.poll("c", [(0, 3, "d"), (0, 2, "c")])
    assert [a["kind"] for a in checkers.poll_order(h.ops)] == ["nonmonotonic_poll"]


def test_unseen_by_a_consumer_that_read_to_the_end():
    h = clean_history()
    h.seek("kafka-consumer-1", 0, 0)
    h.poll("kafka-consumer-1", [(0, 0, "a")])
    h.seek("kafka-consumer-1", 0, 2)  # a reset past offset 1 (legal order, but "b" unseen)
    h.caught_up("kafka-consumer-1", {0: 2})
    found = checkers.unseen(h.ops)
    assert len(found) == 1
    assert found[0]["process"] == "kafka-consumer-1"
    assert found[0]["first"] == [{"offset": 1, "value": "b"}]
    assert checkers.poll_order(h.ops) == []  # not a skip: it is the unseen checker's catch


def test_hw_backwards_on_one_node():
    h = clean_history()
    h.hw("read_api", {0: 5}, node=3, gen=1)
    h.hw("read_api", {0: 4}, node=3, gen=1)
    found = checkers.hw_backwards(h.ops)
    assert len(found) == 1
    assert (found[0]["node"], found[0]["before"], found[0]["after"]) == (3, 5, 4)


def test_hw_lower_after_a_restart_is_fine():
    h = H()
    h.hw("read_api", {0: 5}, node=3, gen=1)
    h.hw("read_api", {0: 1}, node=3, gen=2)
    assert checkers.hw_backwards(h.ops) == []


def test_hw_backwards_in_real_time_across_nodes():
    h = H()
    h.hw("read_api_lin", {0: 10}, node=1, t_inv=1.0, t_end=2.0)
    h.hw("read_api_lin", {0: 9}, node=2, t_inv=3.0, t_end=3.5)  # began after 10 was seen
    found = checkers.hw_backwards(h.ops)
    assert len(found) == 1 and found[0]["source"] == "read_api_lin"


def test_concurrent_hw_reads_may_disagree():
    h = H()
    h.hw("read_api_lin", {0: 10}, node=1, t_inv=1.0, t_end=2.0)
    h.hw("read_api_lin", {0: 9}, node=2, t_inv=1.5, t_end=2.5)  # overlaps: either order
    assert checkers.hw_backwards(h.ops) == []


def test_kafka_list_offsets_backwards():
    h = H()
    h.hw("kafka", {2: 100}, process="kafka-hw", t_inv=1.0, t_end=1.1)
    h.hw("kafka", {2: 90}, process="kafka-hw", t_inv=1.2, t_end=1.3)
    found = checkers.hw_backwards(h.ops)
    assert [(a["source"], a["before"], a["after"]) for a in found] == [("kafka", 100, 90)]


def test_linearizable_hw_must_include_acknowledged_writes():
    h = H()
    h.send("v", 0, 9, t_inv=0.5, t_end=1.0)  # acknowledged at offset 9: hw >= 10 afterwards
    h.hw("read_api_lin", {0: 5}, node=2, t_inv=2.0, t_end=2.1)
    found = checkers.hw_backwards(h.ops)
    assert len(found) == 1 and found[0]["before"] == 10


def _with_anomaly(kind: str) -> H:
    h = clean_history()
    if kind == "lost_write":
        h.send("lost", 0, 2)
        h.poll("kafka-consumer-1", [(0, 3, "later")])
    elif kind == "duplicate":
        h.poll("kafka-consumer-1", [(1, 3, "u1")])
    elif kind == "inconsistent_offset":
        h.final(2, [(1, 2, "other")], {1: 3}, complete=False)
    elif kind == "unseen":
        h.seek("kafka-consumer-1", 0, 0)
        h.poll("kafka-consumer-1", [(0, 0, "a")])
        h.seek("kafka-consumer-1", 0, 2)
        h.caught_up("kafka-consumer-1", {0: 2})
    elif kind == "poll_skip":
        h.poll("read-api-1", [(0, 0, "a"), (0, 2, "z")])
    elif kind == "nonmonotonic_poll":
        h.poll("read-api-1", [(0, 1, "b"), (0, 0, "a")])
    elif kind == "hw_backwards":
        h.hw("kafka", {0: 1}, process="kafka-hw")  # after the clean history's 2
    return h


@pytest.mark.parametrize("kind", ANOMALY_KINDS)
def test_check_all_catches_each_kind(kind):
    found = check_all(_with_anomaly(kind).ops)
    assert found[kind], f"check_all missed {kind}"
