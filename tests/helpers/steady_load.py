"""A steady idempotent produce load (confluent-kafka, acks=all) for operations tests and
bench/operations.py: records every acknowledgement with its time, every failure, and
the longest gap between acknowledgements (a produce stall); then reads everything back
and checks exactly-once: every acknowledged record present once, offsets dense.
"""

from __future__ import annotations

import itertools
import threading
import time
from dataclasses import dataclass, field

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition


@dataclass
class LoadResult:
    sent: int = 0
    acked: dict[int, list[tuple[int, bytes]]] = field(default_factory=dict)
    """partition -> [(offset, value)] in acknowledgement order."""
    ack_times: list[float] = field(default_factory=list)
    latencies: list[float] = field(default_factory=list)
    sent_times: list[float] = field(default_factory=list)
    """When each acknowledged record was produced (ack_times[i] - sent_times[i] = latency)."""
    failed: list[str] = field(default_factory=list)

    def total_acked(self) -> int:
        return len(self.ack_times)

    def longest_gap(self, start: float | None = None, end: float | None = None) -> float:
        """Longest time without an acknowledgement within [start, end]."""
        times = [t for t in self.ack_times if (start is None or t >= start)]
        times = [t for t in times if end is None or t <= end]
        if len(times) < 2:
            return 0.0
        return max(b - a for a, b in itertools.pairwise(times))

    def acked_between(self, start: float, end: float) -> int:
        return sum(1 for t in self.ack_times if start <= t <= end)

    def latencies_between(self, start: float, end: float) -> list[float]:
        """Latencies of the records acknowledged within [start, end]."""
        return [
            lat for t, lat in zip(self.ack_times, self.latencies, strict=False) if start <= t <= end
        ]

    def first_ack_of_sent_after(self, t0: float) -> float | None:
        """When the first record produced at or after t0 was acknowledged (None: never)."""
        acks = [a for s, a in zip(self.sent_times, self.ack_times, strict=False) if s >= t0]
        return min(acks) if acks else None


class SteadyProducer:
    """Produces `rate` records/s (values "v<n>") round-robin over `partitions` in a
    thread until stop(); delivery callbacks fill a LoadResult."""

    def __init__(
        self, bootstrap: str, topic: str, partitions: int, rate: int = 500, size: int = 100
    ) -> None:
        self.topic, self.partitions, self.rate = topic, partitions, rate
        self.pad = b"x" * max(0, size - 12)
        self.result = LoadResult(acked={p: [] for p in range(partitions)})
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._sent_at: list[float] = []  # record n was produced at _sent_at[n]
        self.producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                "enable.idempotence": True,
                "acks": "all",
                "linger.ms": 2,
                "message.timeout.ms": 300_000,
                "socket.timeout.ms": 5_000,
                "metadata.max.age.ms": 2_000,
                "reconnect.backoff.max.ms": 500,
            }
        )
        self._thread = threading.Thread(target=self._run, daemon=True, name="steady-producer")

    def start(self) -> SteadyProducer:
        self._thread.start()
        return self

    def _on_delivery(self, err, msg) -> None:
        now = time.monotonic()
        with self._lock:
            r = self.result
            if err is not None:
                r.failed.append(str(err))
                return
            r.acked[msg.partition()].append((msg.offset(), msg.value()))
            r.ack_times.append(now)
            # delivery reports carry no headers: the value's "v<n>|" prefix finds the send time
            value = msg.value()
            sent_at = self._sent_at[int(value[1 : value.index(b"|")])]
            r.latencies.append(now - sent_at)
            r.sent_times.append(sent_at)

    def _run(self) -> None:
        interval = 1.0 / self.rate
        next_at = time.monotonic()
        n = 0
        while not self._stop.is_set():
            now = time.monotonic()
            if now < next_at:
                self.producer.poll(min(next_at - now, 0.05))
                continue
            value = f"v{n}|".encode() + self.pad
            try:
                self.producer.produce(
                    self.topic,
                    value=value,
                    partition=n % self.partitions,
                    on_delivery=self._on_delivery,
                )
            except BufferError:
                self.producer.poll(0.05)
                continue
            self._sent_at.append(now)
            n += 1
            self.result.sent = n
            next_at += interval
            if next_at < now - 1.0:  # far behind (a stall): do not burst to catch up
                next_at = now
            self.producer.poll(0)

    def wait_acked(self, count: int, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while self.result.total_acked() < count:
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"only {self.result.total_acked()} of {count} acknowledgements in {timeout} s"
                )
            time.sleep(0.05)

    def stop(self, flush_s: float = 180.0) -> LoadResult:
        self._stop.set()
        self._thread.join()
        left = self.producer.flush(flush_s)
        if left:
            self.result.failed.append(f"{left} records still in flight after {flush_s} s")
        return self.result


_MOVED = (
    KafkaError.NOT_LEADER_FOR_PARTITION,
    KafkaError.LEADER_NOT_AVAILABLE,
    # librdkafka's answer when its cached metadata names no leader (-1, LEADER_NOT_AVAILABLE
    # while a group elects or a partition moves) for every partition asked: the query
    # gives up at once instead of waiting for the election (rd_kafka_topic_partition_list
    # _query_leaders: "no leader(s) for partitions means all partitions are unknown").
    KafkaError._UNKNOWN_PARTITION,
)


def _high_watermark(c: Consumer, topic: str, partition: int, deadline: float) -> int:
    """The partition's high watermark. librdkafka's watermark query goes to the leader
    in its cached metadata and does not retry: after leadership moved (with partition
    groups a membership change or a restart moves the partitions its node led) it gets
    NOT_LEADER_FOR_PARTITION once, and its metadata refresh is under way; while a group
    elects, the metadata names no leader and the query fails with _UNKNOWN_PARTITION.
    Retried as a client would, until the deadline."""
    while True:
        try:
            return c.get_watermark_offsets(TopicPartition(topic, partition), timeout=30.0)[1]
        except KafkaException as exc:
            if exc.args[0].code() not in _MOVED or time.monotonic() > deadline:
                raise
            time.sleep(0.2)  # back-off before asking again (not a synchronisation)


def check_exactly_once(bootstrap: str, topic: str, result: LoadResult, timeout: float = 120.0):
    """Read every partition back; every acknowledged record present exactly once at its
    acknowledged offset, offsets dense. Returns the number of records read."""
    expected = {p: len(v) for p, v in result.acked.items()}
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "steady-load-check",
            "enable.auto.commit": False,
            "fetch.wait.max.ms": 100,
        }
    )
    got: dict[int, list[tuple[int, bytes]]] = {p: [] for p in expected}
    try:
        c.assign([TopicPartition(topic, p, 0) for p in expected])
        deadline = time.monotonic() + timeout
        for p in expected:  # read to the end: a duplicate past the acknowledged ones counts
            high = _high_watermark(c, topic, p, deadline)
            expected[p] = max(expected[p], high)
        while any(len(got[p]) < expected[p] for p in expected):
            if time.monotonic() > deadline:
                raise AssertionError(f"read back {[len(v) for v in got.values()]} of {expected}")
            msg = c.poll(0.2)
            if msg is None:
                continue
            assert msg.error() is None, msg.error()
            got[msg.partition()].append((msg.offset(), msg.value()))
    finally:
        c.close()
    for p, records in got.items():
        offsets = [o for o, _ in records]
        assert offsets == list(range(len(offsets))), f"partition {p}: offsets not dense"
        values = [v for _, v in records]
        assert len(values) == len(set(values)), f"partition {p}: duplicated records"
        by_offset = dict(records)
        present = set(values)
        for off, v in result.acked[p]:
            if off is None or off < 0:
                # librdkafka's implicit ack (rd_kafka_dr_implicit_ack): a request whose
                # outcome was unknown, proven written by a later one's success; no offset.
                assert v in present, f"partition {p}: an implicitly acknowledged record lost"
                continue
            assert by_offset.get(off) == v, f"partition {p}: acknowledged offset {off} lost"
    return sum(len(v) for v in got.values())
