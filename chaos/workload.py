"""The campaign's clients, every operation recorded in the History.

- ProducerWorker (thread): an idempotent confluent-kafka producer (acks=all)
  sending unique values "producer-K-SEQ" at a steady rate to seeded partitions.
  Invoke at produce(), ok (with the offset) or info (error: unknown outcome)
  at the delivery report; fail only when produce() refused to queue it.
- KafkaConsumerWorker (thread): a confluent-kafka Consumer, assign() to every
  partition from offset 0 (auto.offset.reset=error, so a reset is visible and
  recorded as a seek), polling; at the end it drains to the final high
  watermarks and records caught_up.
- read_api_reader (coroutine): Fetch through the read API from a random node
  each time (followers too), whole RecordBatches decoded with aiokafka's
  MemoryRecords, records below the position dropped.
- hw_watcher (coroutine): read API Partitions on every node (plain: per node
  incarnation; linearizable=true: real time), and KafkaHwWatcher (thread):
  ListOffsets latest through a real client.
- final_reads: every node's whole log through its read API, and a fresh Kafka
  consumer from 0 to the end.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import threading
import time
from collections import Counter
from dataclasses import dataclass, field

import grpc
from aiokafka.record.memory_records import MemoryRecords
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from chaos.fault_cluster import ChaosCluster, ChaosReadClient
from chaos.history import History

# librdkafka logs every refused connection at level 3; the campaign counts
# client errors itself (error_cb, message errors), so only critical ones print.
RDKAFKA_LOG_LEVEL = 2

log = logging.getLogger("chaos")

READER_PROCESS = "read-api-{}"  # the history's process name of read-API reader k


class Worker(threading.Thread):
    """A workload thread. An exception escaping work() is a finding, not a silent stop: it is
    kept in `crash`, recorded in the history, and the campaign reports it (a worker that died
    early would otherwise only show as fewer records read)."""

    def __init__(self, proc: str, history: History) -> None:
        super().__init__(name=proc, daemon=True)
        self.proc, self.history = proc, history
        self.crash: str | None = None

    def run(self) -> None:
        try:
            self.work()
        except Exception as exc:
            self.crash = f"{type(exc).__name__}: {exc}"
            self.history.record("info", "worker_crash", self.proc, error=self.crash)
            log.error("%s crashed", self.proc, exc_info=True)

    def work(self) -> None:
        raise NotImplementedError


@dataclass
class Control:
    """Shared by the workers: stop producing, the ends to drain to, hard stop."""

    stop_producing: threading.Event = field(default_factory=threading.Event)
    ends: dict[int, int] | None = None
    drain_deadline: float = 0.0  # monotonic
    hard_stop: threading.Event = field(default_factory=threading.Event)


def decode_batches(batches, position: int) -> list[list]:
    """[[offset, value], ...] of the records at or above position."""
    out = []
    for b in batches:
        records = MemoryRecords(bytes(b.data))
        while records.has_next():
            batch = records.next_batch()
            for rec in batch:
                if rec.offset >= position:
                    out.append([rec.offset, rec.value.decode() if rec.value is not None else None])
    return out


class ProducerWorker(Worker):
    def __init__(
        self,
        k: int,
        bootstrap: str,
        topic: str,
        partitions: int,
        rate: float,
        seed: int,
        history: History,
        ctl: Control,
        max_inflight: int = 2000,
        kafka_conf: dict[str, str] | None = None,
    ) -> None:
        """kafka_conf: settings added to the client's (SASL_SSL on a secure cluster)."""
        super().__init__(f"producer-{k}", history)
        self.bootstrap, self.topic, self.partitions = bootstrap, topic, partitions
        self.kafka_conf = dict(kafka_conf or {})
        self.rate, self.ctl = rate, ctl
        self.rng = random.Random(f"producer-{seed}-{k}")
        self.max_inflight = max_inflight
        self.errors: Counter[str] = Counter()
        self.fatal: list[str] = []
        self._fatal_now = False
        self.unflushed = 0
        self.producers_created = 0

    def _new_producer(self) -> Producer:
        self.producers_created += 1
        return Producer(
            {
                "bootstrap.servers": self.bootstrap,
                "log_level": RDKAFKA_LOG_LEVEL,
                "enable.idempotence": True,
                "acks": "all",
                "linger.ms": 5,
                "message.timeout.ms": 120_000,
                # A produce request unanswered for 5 s (a frozen leader) is given up
                # and retried elsewhere: the idempotent retry path gets exercised,
                # and producers fail over instead of waiting for SIGCONT.
                "request.timeout.ms": 5_000,
                "socket.timeout.ms": 10_000,
                "metadata.max.age.ms": 1_000,
                "topic.metadata.refresh.interval.ms": 1_000,
                "retry.backoff.ms": 100,
                "error_cb": self._on_error,
                **self.kafka_conf,
            }
        )

    def _on_error(self, err: KafkaError) -> None:
        self.errors[err.name()] += 1
        if err.fatal():
            self.fatal.append(str(err))
            self._fatal_now = True

    def _callback(self, op: int, value: str, partition: int):
        def on_delivery(err, msg) -> None:
            if err is None:
                self.history.complete(
                    op,
                    "ok",
                    "send",
                    self.proc,
                    value=value,
                    partition=msg.partition(),
                    offset=msg.offset(),
                )
            else:
                self.errors["delivery:" + err.name()] += 1
                self.history.complete(
                    op, "info", "send", self.proc, value=value, partition=partition, error=str(err)
                )

        return on_delivery

    def work(self) -> None:
        producer = self._new_producer()
        seq = 0
        interval = 1.0 / self.rate
        next_t = time.monotonic()
        while not self.ctl.stop_producing.is_set():
            if self._fatal_now:
                # A fatal error (e.g. an out-of-order sequence) ends this producer
                # instance: its pending sends get reports, then a new PID takes over.
                producer.flush(10)
                self._fatal_now = False
                producer = self._new_producer()
            now = time.monotonic()
            if now < next_t or len(producer) >= self.max_inflight:
                producer.poll(min(max(next_t - now, 0.005), 0.05))
                continue
            next_t = max(next_t + interval, now - 1.0)
            value = f"{self.proc}-{seq}"
            seq += 1
            part = self.rng.randrange(self.partitions)
            op = self.history.invoke("send", self.proc, value=value, partition=part)
            try:
                producer.produce(
                    self.topic,
                    value=value.encode(),
                    partition=part,
                    on_delivery=self._callback(op, value, part),
                )
            except (BufferError, KafkaException) as exc:
                self.history.complete(
                    op, "fail", "send", self.proc, value=value, partition=part, error=repr(exc)
                )
            producer.poll(0)
        deadline = time.monotonic() + 120
        while len(producer) and time.monotonic() < deadline and not self.ctl.hard_stop.is_set():
            producer.flush(1)
        self.unflushed = len(producer)


class KafkaConsumerWorker(Worker):
    def __init__(
        self,
        k: int,
        bootstrap: str,
        topic: str,
        partitions: int,
        history: History,
        ctl: Control,
        process: str | None = None,
        as_final: bool = False,
        kafka_conf: dict[str, str] | None = None,
    ) -> None:
        super().__init__(process or f"kafka-consumer-{k}", history)
        self.bootstrap, self.topic, self.partitions = bootstrap, topic, partitions
        self.kafka_conf = dict(kafka_conf or {})
        self.ctl = ctl
        self.as_final = as_final
        self.errors: Counter[str] = Counter()
        self.caught_up = False
        self.final_records: list[list] = []

    def _resume_at(self, c: Consumer, p: int, pos: dict[int, int]) -> None:
        """Fetch partition p again from pos[p] after an offset reset error. seek() refuses a
        partition in the error state (_STATE, seen in campaigns); assign() of every partition
        at its position always works. Each move is recorded as a seek."""
        try:
            c.seek(TopicPartition(self.topic, p, pos[p]))
            moved = [p]
        except KafkaException as exc:
            self.errors[f"seek:{exc.args[0].name() if exc.args else 'error'}"] += 1
            c.assign([TopicPartition(self.topic, q, o) for q, o in pos.items()])
            moved = list(pos)
        if not self.as_final:
            for q in moved:
                self.history.record("ok", "seek", self.proc, partition=q, offset=pos[q])

    def work(self) -> None:
        c = Consumer(
            {
                "bootstrap.servers": self.bootstrap,
                "log_level": RDKAFKA_LOG_LEVEL,
                "group.id": f"chaos-{self.proc}",  # chaos/secure.py: GROUP_PREFIX
                "enable.auto.commit": False,
                "auto.offset.reset": "error",
                "fetch.wait.max.ms": 200,
                "socket.timeout.ms": 10_000,
                "metadata.max.age.ms": 1_000,
                "topic.metadata.refresh.interval.ms": 1_000,
                **self.kafka_conf,
            }
        )
        pos = {p: 0 for p in range(self.partitions)}
        c.assign([TopicPartition(self.topic, p, 0) for p in pos])
        if not self.as_final:
            for p in pos:
                self.history.record("ok", "seek", self.proc, partition=p, offset=0)
        last_error_record = 0.0
        t_start = self.history.now()
        try:
            while not self.ctl.hard_stop.is_set():
                ends = self.ctl.ends
                if ends is not None:
                    if all(pos[p] >= ends[p] for p in pos):
                        self.caught_up = True
                        break
                    if time.monotonic() > self.ctl.drain_deadline:
                        break
                t_inv = self.history.now()
                msgs = c.consume(num_messages=500, timeout=0.2)
                recs = []
                for m in msgs:
                    err = m.error()
                    if err is not None:
                        self.errors[err.name()] += 1
                        now = time.monotonic()
                        if (
                            err.code() == KafkaError._AUTO_OFFSET_RESET
                            and m.partition() is not None
                        ):
                            p = m.partition()
                            self.history.record(
                                "fail", "poll", self.proc, source="kafka", error=str(err)
                            )
                            self._resume_at(c, p, pos)
                        elif now - last_error_record > 1.0:
                            last_error_record = now
                            self.history.record(
                                "fail", "poll", self.proc, source="kafka", error=str(err)
                            )
                        continue
                    p, o = m.partition(), m.offset()
                    v = m.value().decode() if m.value() is not None else None
                    recs.append([p, o, v])
                    pos[p] = max(pos[p], o + 1)
                if self.as_final:
                    self.final_records.extend(recs)
                elif recs or msgs:
                    self.history.record_span(
                        t_inv, "ok", "poll", self.proc, source="kafka", records=recs
                    )
            if self.as_final:
                self.history.record_span(
                    t_start,
                    "ok",
                    "final_read",
                    self.proc,
                    source="kafka",
                    node=0,
                    complete=self.caught_up,
                    ends={str(p): e for p, e in (self.ctl.ends or {}).items()},
                    records=self.final_records,
                )
            elif self.ctl.ends is not None:
                self.history.record(
                    "ok" if self.caught_up else "info",
                    "caught_up",
                    self.proc,
                    ends={str(p): e for p, e in self.ctl.ends.items()},
                    positions={str(p): o for p, o in pos.items()},
                )
        finally:
            c.close()


async def read_api_reader(
    k: int,
    clients: dict[int, ChaosReadClient],
    topic: str,
    partitions: int,
    history: History,
    ctl: Control,
    seed: int,
    result: dict,
    hosts: dict[int, list[int]] | None = None,
) -> None:
    """hosts: partition -> the nodes hosting it (partition groups: a node answers -1 for a
    partition it does not host); None: every node hosts every partition."""
    proc = READER_PROCESS.format(k)
    rng = random.Random(f"reader-{seed}-{k}")
    pos = {p: 0 for p in range(partitions)}
    for p in pos:
        history.record("ok", "seek", proc, partition=p, offset=0)
    ids = sorted(clients)
    errors: Counter[str] = Counter()
    i = 0
    caught_up = False
    while not ctl.hard_stop.is_set():
        ends = ctl.ends
        if ends is not None:
            if all(pos[p] >= ends[p] for p in pos):
                caught_up = True
                break
            if time.monotonic() > ctl.drain_deadline:
                break
            behind = [p for p in pos if pos[p] < ends[p]]
            p = behind[i % len(behind)]
        else:
            p = i % partitions
        i += 1
        node = rng.choice((hosts or {}).get(p) or ids)
        t_inv = history.now()
        try:
            reply = await clients[node].fetch(
                topic, p, pos[p], max_bytes=512 * 1024, max_wait_ms=100, timeout=1.5
            )
        except grpc.aio.AioRpcError as exc:
            errors[f"node{node}:{exc.code().name}"] += 1
            history.record_span(
                t_inv, "fail", "poll", proc, source="read_api", node=node, error=exc.code().name
            )
            await asyncio.sleep(0.05)
            continue
        if reply.error_code:
            errors[f"node{node}:error{reply.error_code}"] += 1
            history.record_span(
                t_inv,
                "fail",
                "poll",
                proc,
                source="read_api",
                node=node,
                error=f"{reply.error_code}: {reply.error}",
            )
            await asyncio.sleep(0.02)
            continue
        recs = decode_batches(reply.batches, pos[p])
        history.record_span(
            t_inv,
            "ok",
            "poll",
            proc,
            source="read_api",
            node=node,
            records=[[p, o, v] for o, v in recs],
        )
        if recs:
            pos[p] = recs[-1][0] + 1
    if ctl.ends is not None:
        history.record(
            "ok" if caught_up else "info",
            "caught_up",
            proc,
            ends={str(p): e for p, e in ctl.ends.items()},
            positions={str(p): o for p, o in pos.items()},
        )
    result[proc] = {"errors": dict(errors), "caught_up": caught_up}


async def replica_map(
    clients: dict[int, ChaosReadClient], topic: str, partitions: int, partition_groups: bool
) -> dict[int, list[int]]:
    """partition -> the ids of the nodes hosting a replica of it: from the read API's
    Partitions (its replicas field) with partition groups, every node otherwise."""
    ids = sorted(clients)
    if not partition_groups:
        return {p: ids for p in range(partitions)}
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        for client in clients.values():
            try:
                reply = await client.partitions([topic], timeout=2)
            except grpc.aio.AioRpcError:
                continue
            out = {pi.partition: sorted(r.node_id for r in pi.replicas) for pi in reply.partitions}
            if len(out) == partitions and all(out.values()):
                return out
        await asyncio.sleep(0.3)
    raise TimeoutError(f"no node answered the replicas of every partition of {topic}")


async def hw_watcher(
    cluster: ChaosCluster,
    clients: dict[int, ChaosReadClient],
    topic: str,
    history: History,
    stop: asyncio.Event,
    errors: Counter,
    period: float = 0.3,
) -> None:
    async def one(i: int) -> None:
        client = clients[i]
        for lin in (False, True):
            gen = cluster.gen[i]
            t_inv = history.now()
            try:
                reply = await client.partitions([topic], linearizable=lin, timeout=1.5)
            except grpc.aio.AioRpcError as exc:
                errors[f"node{i}:{'lin' if lin else 'plain'}:{exc.code().name}"] += 1
                continue
            if cluster.gen[i] != gen or not reply.partitions:
                continue
            # -1: a partition this node does not host (partition groups); every other
            # row of a linearizable Partitions is checked in real time, on every replica
            # (a ReadIndex on each data group serving it here, sink/readapi/server.py)
            parts = {
                str(pi.partition): pi.high_watermark
                for pi in reply.partitions
                if pi.high_watermark >= 0
            }
            if not parts:
                continue
            history.record_span(
                t_inv,
                "ok",
                "hw",
                f"hw-node-{i}",
                source="read_api_lin" if lin else "read_api",
                node=i,
                gen=gen,
                partitions=parts,
            )

    while not stop.is_set():
        await asyncio.gather(*(one(i) for i in clients if i not in cluster.paused))
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), period)


class KafkaHwWatcher(Worker):
    """ListOffsets (latest) through a real client, every partition, in a loop."""

    def __init__(
        self,
        bootstrap: str,
        topic: str,
        partitions: int,
        history: History,
        kafka_conf: dict[str, str] | None = None,
    ) -> None:
        super().__init__("kafka-hw", history)
        self.topic, self.partitions = topic, partitions
        self.consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "log_level": RDKAFKA_LOG_LEVEL,
                "group.id": "chaos-hw-watch",
                "enable.auto.commit": False,
                "socket.timeout.ms": 10_000,
                "metadata.max.age.ms": 1_000,
                **(kafka_conf or {}),
            }
        )
        self.stop = threading.Event()
        self.errors: Counter[str] = Counter()

    def work(self) -> None:
        try:
            while not self.stop.is_set():
                for p in range(self.partitions):
                    t_inv = self.history.now()
                    try:
                        _, high = self.consumer.get_watermark_offsets(
                            TopicPartition(self.topic, p), timeout=1.5, cached=False
                        )
                    except KafkaException as exc:
                        self.errors[exc.args[0].name() if exc.args else "error"] += 1
                        continue
                    self.history.record_span(
                        t_inv,
                        "ok",
                        "hw",
                        "kafka-hw",
                        source="kafka",
                        partitions={str(p): high},
                    )
                self.stop.wait(0.3)
        finally:
            self.consumer.close()


async def final_read_node(
    i: int,
    client: ChaosReadClient,
    topic: str,
    ends: dict[int, int],
    history: History,
    timeout: float = 60.0,
) -> bool:
    """Node i's whole log of every partition up to ends (waiting for it to catch up).

    Every partition is read from offset 0: the campaign's topic keeps everything (7-day
    retention), so a node whose log start is above 0 lacks records the others hold (a
    replica rebuilt without them), which is incomplete, not "compacted". When incomplete,
    the op's `why` says where each unfinished partition stopped and the last error there
    (e.g. the read API's OFFSET_OUT_OF_RANGE with the node's [log start, high watermark])."""
    proc = f"final-node-{i}"
    t_inv = history.now()
    deadline = time.monotonic() + timeout
    records: list[list] = []
    complete = True
    why: list[str] = []
    for p, end in sorted(ends.items()):
        history.record("ok", "seek", proc, partition=p, offset=0)
        pos = 0
        last_error = ""
        while pos < end:
            if time.monotonic() > deadline:
                break
            try:
                reply = await client.fetch(
                    topic, p, pos, max_bytes=4 * 1024 * 1024, max_wait_ms=200, timeout=5.0
                )
            except grpc.aio.AioRpcError as exc:
                last_error = exc.code().name
                await asyncio.sleep(0.2)
                continue
            if reply.error_code:
                last_error = f"error {reply.error_code}: {reply.error}"
                await asyncio.sleep(0.1)  # behind (out of range) or not yet created
                continue
            recs = decode_batches(reply.batches, pos)
            records.extend([p, o, v] for o, v in recs)
            if recs:
                pos = recs[-1][0] + 1
        if pos < end:
            complete = False
            why.append(f"p{p} at {pos} of {end}" + (f": {last_error}" if last_error else ""))
    history.record_span(
        t_inv,
        "ok",
        "final_read",
        proc,
        source="read_api",
        node=i,
        complete=complete,
        ends={str(p): e for p, e in ends.items()},
        records=records,
        **({"why": "; ".join(why)} if why else {}),
    )
    return complete
