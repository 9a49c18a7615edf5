"""Kafka helpers of the container tests: a producer that remembers what was acknowledged,
and a consumer that reads partitions up to given end offsets."""

from __future__ import annotations

import time

from confluent_kafka import Consumer, Producer, TopicPartition


class AckingProducer:
    """An idempotent (acks=all) confluent-kafka producer; acked[p] = [(offset, value)]."""

    def __init__(self, bootstrap: str, topic: str, partitions: int, **conf) -> None:
        self.topic = topic
        self.partitions = partitions
        self.producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                "enable.idempotence": True,
                "acks": "all",
                "linger.ms": 2,
                "message.timeout.ms": 120_000,
                "socket.timeout.ms": 5_000,
                "metadata.max.age.ms": 1_000,
                "topic.metadata.refresh.interval.ms": 1_000,
                **conf,
            }
        )
        self.acked: dict[int, list[tuple[int, bytes]]] = {p: [] for p in range(partitions)}
        self.failed: list[tuple[bytes, str]] = []
        self.sent = 0

    def _on_delivery(self, err, msg) -> None:
        if err is not None:
            self.failed.append((msg.value(), str(err)))
        else:
            self.acked[msg.partition()].append((msg.offset(), msg.value()))

    def send(self, n: int, prefix: str = "v") -> None:
        for _ in range(n):
            value = f"{prefix}{self.sent}".encode()
            while True:
                try:
                    self.producer.produce(
                        self.topic,
                        key=f"k{self.sent % 97}".encode(),
                        value=value,
                        partition=self.sent % self.partitions,
                        on_delivery=self._on_delivery,
                    )
                    break
                except BufferError:
                    self.producer.poll(0.05)
            self.sent += 1
            self.producer.poll(0)

    def total_acked(self) -> int:
        return sum(len(v) for v in self.acked.values())

    def wait_acked(self, n: int, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while self.total_acked() < n:
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"only {self.total_acked()} of {n} acknowledged after {timeout} s; "
                    f"failed: {self.failed[:3]}"
                )
            self.producer.poll(0.05)

    def flush(self, timeout: float = 120) -> None:
        left = self.producer.flush(timeout)
        assert left == 0, f"{left} records still in flight after {timeout} s"


def consume_all(
    bootstrap: str, topic: str, expected: dict[int, int], timeout: float = 60, **conf
) -> dict[int, list[tuple[int, bytes]]]:
    """Every record of every partition from offset 0 up to the expected end offsets
    (conf: more client settings, e.g. SASL_SSL)."""
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"check-{topic}",
            "enable.auto.commit": False,
            "fetch.wait.max.ms": 100,
            **conf,
        }
    )
    try:
        c.assign([TopicPartition(topic, p, 0) for p in expected])
        got: dict[int, list[tuple[int, bytes]]] = {p: [] for p in expected}
        deadline = time.monotonic() + timeout
        while any(len(got[p]) < expected[p] for p in expected):
            if time.monotonic() > deadline:
                have = {p: len(v) for p, v in got.items()}
                raise AssertionError(f"consumer stuck at {have} of {expected}")
            msg = c.poll(0.2)
            if msg is None:
                continue
            assert msg.error() is None, msg.error()
            got[msg.partition()].append((msg.offset(), msg.value()))
        return got
    finally:
        c.close()


def check_exactly_once(
    acked: dict[int, list[tuple[int, bytes]]], got: dict[int, list[tuple[int, bytes]]]
) -> None:
    """Dense offsets, no duplicates, every acknowledged record at its acknowledged offset."""
    for p, records in got.items():
        offsets = [o for o, _ in records]
        assert offsets == list(range(len(offsets))), f"partition {p}: offsets not dense"
        values = [v for _, v in records]
        dups = len(values) - len(set(values))
        assert dups == 0, f"partition {p}: {dups} duplicate records"
        by_offset = dict(records)
        for off, v in acked[p]:
            assert by_offset.get(off) == v, (
                f"partition {p}: acknowledged {v!r} at offset {off}, found {by_offset.get(off)!r}"
            )
