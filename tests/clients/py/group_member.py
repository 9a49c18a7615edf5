"""One consumer-group member with a Python Kafka client, for the client-matrix tests.

    python group_member.py --client confluent|kafka-python|aiokafka --brokers B --topic T
        --group G [--instance-id I] [--strategy S] [--session-ms N]

It subscribes to one topic, reads from the earliest offset when the group has no committed
offset, commits synchronously after every non-empty poll (the offset after the last record of
each partition it read) and reports on stdout, one JSON object per line, flushed at once:

    {"ev": "ready"}                              subscribed
    {"ev": "assignment", "parts": [0, 3]}        its assignment changed (checked after each poll)
    {"ev": "recs", "recs": [[p, offset], ...]}   records read by one poll, before their commit
    {"ev": "commit", "offs": {"p": next}}        a commit the coordinator acknowledged
    {"ev": "commit_failed", "error": "..."}      a commit refused (e.g. during a rebalance)
    {"ev": "error", "error": "..."}              any other client error (the member goes on)
    {"ev": "closed"}                             after a clean close on SIGTERM

SIGTERM closes the consumer the client's normal way (a dynamic member sends LeaveGroup; a
static member, with --instance-id, does not) and exits 0. The test side is
tests/helpers/group_members.py.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sys
import threading

STOP = threading.Event()


def emit(ev: str, **kw: object) -> None:
    sys.stdout.write(json.dumps({"ev": ev, **kw}) + "\n")
    sys.stdout.flush()


class Reporter:
    """Emits an assignment line only when the assignment changed."""

    def __init__(self) -> None:
        self.parts: list[int] | None = None

    def assignment(self, parts: list[int]) -> None:
        parts = sorted(parts)
        if parts != self.parts:
            self.parts = parts
            emit("assignment", parts=parts)


def run_confluent(a: argparse.Namespace) -> None:
    from confluent_kafka import Consumer, KafkaException, TopicPartition

    conf = {
        "bootstrap.servers": a.brokers,
        "group.id": a.group,
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
        "session.timeout.ms": a.session_ms,
        "heartbeat.interval.ms": max(100, a.session_ms // 10),
        "fetch.wait.max.ms": 100,
        "topic.metadata.refresh.interval.ms": 2000,
    }
    if a.strategy:
        conf["partition.assignment.strategy"] = a.strategy
    if a.instance_id:
        conf["group.instance.id"] = a.instance_id
    c = Consumer(conf)
    c.subscribe([a.topic])
    emit("ready")
    rep = Reporter()
    try:
        while not STOP.is_set():
            msgs = c.consume(num_messages=500, timeout=0.2)
            recs, ends = [], {}
            for m in msgs:
                if m.error():
                    emit("error", error=str(m.error()))
                    continue
                recs.append([m.partition(), m.offset()])
                ends[m.partition()] = m.offset() + 1
            rep.assignment([tp.partition for tp in c.assignment()])
            if not recs:
                continue
            emit("recs", recs=recs)
            offs = [TopicPartition(a.topic, p, o) for p, o in ends.items()]
            try:
                c.commit(offsets=offs, asynchronous=False)
                emit("commit", offs={str(p): o for p, o in ends.items()})
            except KafkaException as e:
                emit("commit_failed", error=str(e))
    finally:
        c.close()
    emit("closed")


def run_kafka_python(a: argparse.Namespace) -> None:
    from kafka import KafkaConsumer
    from kafka.errors import KafkaError
    from kafka.structs import OffsetAndMetadata

    kw: dict = {}
    if a.instance_id:
        kw["group_instance_id"] = a.instance_id
    if a.strategy:
        from kafka.coordinator.assignors.range import RangePartitionAssignor
        from kafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor
        from kafka.coordinator.assignors.sticky.sticky_assignor import StickyPartitionAssignor

        kw["partition_assignment_strategy"] = [
            {
                "range": RangePartitionAssignor,
                "roundrobin": RoundRobinPartitionAssignor,
                "sticky": StickyPartitionAssignor,
            }[a.strategy]
        ]
    c = KafkaConsumer(
        a.topic,
        bootstrap_servers=a.brokers.split(","),
        group_id=a.group,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        session_timeout_ms=a.session_ms,
        heartbeat_interval_ms=max(100, a.session_ms // 10),
        fetch_max_wait_ms=100,
        **kw,
    )
    emit("ready")
    rep = Reporter()
    try:
        while not STOP.is_set():
            try:
                batches = c.poll(timeout_ms=200, max_records=500)
            except KafkaError as e:
                emit("error", error=repr(e))
                continue
            rep.assignment([tp.partition for tp in c.assignment()])
            recs, ends = [], {}
            for tp, ms in batches.items():
                for m in ms:
                    recs.append([tp.partition, m.offset])
                    ends[tp] = m.offset + 1
            if not recs:
                continue
            emit("recs", recs=recs)
            try:
                c.commit({tp: OffsetAndMetadata(o, "", -1) for tp, o in ends.items()})
                emit("commit", offs={str(tp.partition): o for tp, o in ends.items()})
            except KafkaError as e:
                emit("commit_failed", error=repr(e))
    finally:
        c.close()
    emit("closed")


async def run_aiokafka(a: argparse.Namespace) -> None:
    from aiokafka import AIOKafkaConsumer
    from aiokafka.errors import KafkaError

    kw: dict = {}
    if a.instance_id:
        kw["group_instance_id"] = a.instance_id
    if a.strategy:
        from aiokafka.coordinator.assignors.range import RangePartitionAssignor
        from aiokafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor
        from aiokafka.coordinator.assignors.sticky.sticky_assignor import (
            StickyPartitionAssignor,
        )

        kw["partition_assignment_strategy"] = (
            {
                "range": RangePartitionAssignor,
                "roundrobin": RoundRobinPartitionAssignor,
                "sticky": StickyPartitionAssignor,
            }[a.strategy],
        )
    c = AIOKafkaConsumer(
        a.topic,
        bootstrap_servers=a.brokers,
        group_id=a.group,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        session_timeout_ms=a.session_ms,
        heartbeat_interval_ms=max(100, a.session_ms // 10),
        fetch_max_wait_ms=100,
        **kw,
    )
    # start() already waits for the coordinator: let SIGTERM end that wait too.
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    starting = asyncio.ensure_future(c.start())
    stopping = asyncio.ensure_future(stop.wait())
    await asyncio.wait([starting, stopping], return_when=asyncio.FIRST_COMPLETED)
    if not starting.done():
        starting.cancel()
        await c.stop()
        emit("closed")
        return
    starting.result()
    emit("ready")
    rep = Reporter()
    try:
        while not stop.is_set():
            try:
                batches = await c.getmany(timeout_ms=200, max_records=500)
            except KafkaError as e:
                emit("error", error=repr(e))
                continue
            rep.assignment([tp.partition for tp in c.assignment()])
            recs, ends = [], {}
            for tp, ms in batches.items():
                for m in ms:
                    recs.append([tp.partition, m.offset])
                    ends[tp] = m.offset + 1
            if not recs:
                continue
            emit("recs", recs=recs)
            try:
                await c.commit(ends)
                emit("commit", offs={str(tp.partition): o for tp, o in ends.items()})
            except KafkaError as e:
                emit("commit_failed", error=repr(e))
    finally:
        await c.stop()
    emit("closed")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--client", required=True, choices=["confluent", "kafka-python", "aiokafka"])
    p.add_argument("--brokers", required=True)
    p.add_argument("--topic", required=True)
    p.add_argument("--group", required=True)
    p.add_argument("--instance-id", default="")
    p.add_argument("--strategy", default="")
    p.add_argument("--session-ms", type=int, default=10000)
    a = p.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: STOP.set())
    signal.signal(signal.SIGINT, lambda *_: STOP.set())
    if a.client == "confluent":
        run_confluent(a)
    elif a.client == "kafka-python":
        run_kafka_python(a)
    else:
        asyncio.run(run_aiokafka(a))


if __name__ == "__main__":
    main()
