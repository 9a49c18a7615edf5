"""Test doubles: RecordBatch v2 bytes built with aiokafka, and an in-memory read API."""

from __future__ import annotations

from concurrent.futures import Future
from dataclasses import dataclass, field

from aiokafka.record.default_records import DefaultRecordBatchBuilder

from connectors.spark.cluster import PartitionState, ReadCluster
from sink.readapi import ERR_OFFSET_OUT_OF_RANGE, ERR_UNKNOWN_TOPIC_OR_PARTITION
from sink.readapi import read_api_pb2 as pb

CODECS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}


@dataclass
class Rec:
    key: bytes | None
    value: bytes | None
    timestamp: int
    headers: list[tuple[str, bytes | None]] = field(default_factory=list)


def build_batch(base_offset: int, recs: list[Rec], codec: int = 0) -> bytes:
    """A RecordBatch v2 as a producer would send it, with baseOffset patched like the sink."""
    b = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=codec,
        is_transactional=0,
        producer_id=7,
        producer_epoch=0,
        base_sequence=0,
        batch_size=1 << 30,
    )
    for i, r in enumerate(recs):
        b.append(i, timestamp=r.timestamp, key=r.key, value=r.value, headers=r.headers)
    data = bytearray(b.build())
    data[0:8] = base_offset.to_bytes(8, "big", signed=True)
    return bytes(data)


class FakeLog:
    """One replica's applied log: batches per partition, a log start and a high watermark."""

    def __init__(self) -> None:
        self.batches: dict[tuple[str, int], list[tuple[int, bytes]]] = {}
        self.log_start: dict[tuple[str, int], int] = {}
        self.hw: dict[tuple[str, int], int] = {}

    def append(self, topic: str, partition: int, recs: list[Rec], codec: int = 0) -> None:
        tp = (topic, partition)
        base = self.hw.setdefault(tp, 0)
        self.log_start.setdefault(tp, 0)
        self.batches.setdefault(tp, []).append((base, build_batch(base, recs, codec)))
        self.hw[tp] = base + len(recs)

    def truncate_prefix(self, tp: tuple[str, int], new_start: int) -> None:
        """Retention: drop whole batches below new_start."""
        self.log_start[tp] = new_start
        self.batches[tp] = [
            (b, d) for b, d in self.batches[tp] if b >= new_start or _last(b, d) >= new_start
        ]

    def fetch(self, topic: str, partition: int, offset: int, max_bytes: int) -> pb.FetchReply:
        tp = (topic, partition)
        if tp not in self.hw:
            return pb.FetchReply(error_code=ERR_UNKNOWN_TOPIC_OR_PARTITION, error="unknown")
        start, hw = self.log_start[tp], self.hw[tp]
        if offset < start or offset > hw:
            return pb.FetchReply(
                high_watermark=hw, log_start_offset=start, error_code=ERR_OFFSET_OUT_OF_RANGE
            )
        out, size = [], 0
        for base, data in self.batches[tp]:
            if _last(base, data) < offset or base >= hw:
                continue
            if out and size + len(data) > max_bytes:
                break
            out.append(pb.Batch(base_offset=base, data=data))
            size += len(data)
        return pb.FetchReply(batches=out, high_watermark=hw, log_start_offset=start)


def _last(base: int, data: bytes) -> int:
    return base + int.from_bytes(data[23:27], "big")  # lastOffsetDelta


class FakeCluster(ReadCluster):
    """ReadCluster whose nodes are FakeLogs (or None for a dead node); no sockets."""

    def __init__(self, logs: dict[str, FakeLog | None], retry_timeout_s: float = 0.2) -> None:
        super().__init__(list(logs), request_timeout_s=1.0, retry_timeout_s=retry_timeout_s)
        self.logs = logs
        self.calls: list[str] = []
        self.prefetches = 0

    def fetch(self, address, topic, partition, offset, max_bytes):  # type: ignore[override]
        self.calls.append(address)
        node = self.logs[address]
        if node is None:
            raise ConnectionError(f"connection refused: {address}")
        return node.fetch(topic, partition, offset, max_bytes)

    def fetch_soon(self, address, topic, partition, offset, max_bytes):  # type: ignore[override]
        """Run the fetch now; the future carries its result or error (as the real one)."""
        self.prefetches += 1
        fut: Future = Future()
        try:
            fut.set_result(self.fetch(address, topic, partition, offset, max_bytes))
        except Exception as exc:
            fut.set_exception(exc)
        return fut

    def partitions(self, topics=None, linearizable=False, deadline_s=None):  # type: ignore[override]
        for i in self.order():
            node = self.logs[self.nodes[i]]
            if node is not None:
                return {
                    tp: PartitionState(node.log_start[tp], hw)
                    for tp, hw in sorted(node.hw.items())
                    if not topics or tp[0] in topics
                }
        raise ConnectionError("all down")
