"""The campaign's own harness: a dead or silent worker is reported, never read as success.

Found by 10-minute campaigns: both Kafka consumer threads died on seek() (_STATE) after an offset
reset and the run still said VALID, with only the poll counts showing it.
"""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from confluent_kafka import KafkaError, KafkaException, TopicPartition

from chaos import report
from chaos.campaign import reader_outcomes
from chaos.history import History, completions
from chaos.workload import Control, KafkaConsumerWorker, Worker, final_read_node


class Boom(Worker):
    def work(self) -> None:
        raise RuntimeError("broken client")


def test_worker_exception_is_kept_and_recorded():
    h = History()
    w = Boom("boom-0", h)
    w.start()
    w.join(10)
    assert w.crash == "RuntimeError: broken client"
    (op,) = completions(h.ops)
    assert (op["f"], op["process"], op["error"]) == ("worker_crash", "boom-0", w.crash)


class FakeConsumer:
    def __init__(self, seek_fails: bool) -> None:
        self.seek_fails = seek_fails
        self.seeks: list[tuple[int, int]] = []
        self.assigned: list[tuple[int, int]] = []

    def seek(self, tp: TopicPartition) -> None:
        if self.seek_fails:
            raise KafkaException(KafkaError(KafkaError._STATE, "Erroneous state"))
        self.seeks.append((tp.partition, tp.offset))

    def assign(self, tps: list[TopicPartition]) -> None:
        self.assigned = [(tp.partition, tp.offset) for tp in tps]


def seeks(h: History) -> list[tuple[int, int]]:
    return [(op["partition"], op["offset"]) for op in completions(h.ops, "seek")]


def test_resume_after_offset_reset_seeks_one_partition():
    h = History()
    w = KafkaConsumerWorker(0, "127.0.0.1:1", "t", 3, h, Control())
    c = FakeConsumer(seek_fails=False)
    w._resume_at(c, 1, {0: 5, 1: 7, 2: 9})
    assert c.seeks == [(1, 7)] and not c.assigned
    assert seeks(h) == [(1, 7)]


def test_resume_when_seek_is_refused_reassigns_every_partition():
    h = History()
    w = KafkaConsumerWorker(0, "127.0.0.1:1", "t", 3, h, Control())
    c = FakeConsumer(seek_fails=True)
    w._resume_at(c, 1, {0: 5, 1: 7, 2: 9})
    assert c.assigned == [(0, 5), (1, 7), (2, 9)]
    assert seeks(h) == [(0, 5), (1, 7), (2, 9)]
    assert w.errors == {"seek:_STATE": 1}


def test_reader_that_never_reported_is_not_caught_up():
    ops = [{"process": "read-api-0", "f": "caught_up", "type": "ok"}]
    readers = ["kafka-consumer-0", "read-api-0"]
    assert reader_outcomes(ops, readers, {0: 10}) == {
        "read-api-0": True,
        "kafka-consumer-0": False,
    }
    assert reader_outcomes(ops, readers, {}) == {"read-api-0": True}


def build(**over):
    kw = dict(
        anomalies={},
        crashes=[],
        caught_up={"kafka-consumer-0": True},
        final_reads={"final-kafka": True},
        worker_crashes={},
    )
    kw.update(over)
    return report.build(**kw)


def test_verdict_is_unknown_when_a_worker_crashed_or_fell_silent():
    assert build()["verdict"] == "VALID"
    crashed = build(worker_crashes={"kafka-consumer-1": "KafkaException: _STATE"})
    assert crashed["verdict"] == "UNKNOWN"
    assert crashed["liveness"] == ["kafka-consumer-1 crashed (KafkaException: _STATE)"]
    silent = build(caught_up={"kafka-consumer-0": False})
    assert silent["verdict"] == "UNKNOWN"
    assert silent["liveness"] == ["kafka-consumer-0 did not read to the end"]


class OutOfRangeClient:
    """A read API whose log starts at 5 (a replica rebuilt without the first records)."""

    async def fetch(self, topic, partition, offset, **kw):
        return SimpleNamespace(
            error_code=1, error=f"offset {offset} is outside [5, 10]", batches=[]
        )


def test_final_read_of_a_node_missing_early_records_is_incomplete_and_says_why():
    h = History()
    done = asyncio.run(final_read_node(2, OutOfRangeClient(), "t", {0: 10, 1: 0}, h, 0.3))
    assert done is False
    (op,) = [op for op in completions(h.ops) if op["f"] == "final_read"]
    assert op["complete"] is False
    assert op["why"] == "p0 at 0 of 10: error 1: offset 0 is outside [5, 10]"
    data = build(final_reads={"final-node-2": False}, final_read_why={"final-node-2": op["why"]})
    assert data["verdict"] == "UNKNOWN"
    assert data["liveness"] == [f"final-node-2 final read incomplete ({op['why']})"]
