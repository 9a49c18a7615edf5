"""Disk full, against real node processes whose data directories are small tmpfs volumes.

1. Every node on a 64 MiB volume with a 16 MiB reserve: a producer writes until produce
   answers KAFKA_STORAGE_ERROR; no node exits, every node reports its guard in
   `status`, a consumer reads every acknowledged record; the volumes grow (remount) and
   produce is acknowledged again, by the same processes.
2. The leader's volume alone is filled from outside (a filler file, below half its
   reserve): it hands leadership off and stops appending, the cluster keeps committing
   with the other two, and once the filler is gone it catches up by itself.
"""

from __future__ import annotations

import asyncio
import os
import time

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from sink.process_cluster import SinkProcessCluster
from tests.helpers.volumes import can_mount, tmpfs_volumes

MiB = 1 << 20
VOLUME = 64 * MiB
RESERVE = 16 * MiB
VALUE = 32 * 1024
TOPIC = "full"

_why_not = can_mount()
pytestmark = pytest.mark.skipif(_why_not is not None, reason=_why_not or "")


def _cluster(base: str) -> SinkProcessCluster:
    return SinkProcessCluster(
        base,
        extra_args=[
            "--storage-reserve-bytes",
            str(RESERVE),
            "--storage-reserve-percent",
            "0",
            "--storage-space-check-ms",
            "100",
        ],
    )


def _status(cluster: SinkProcessCluster, i: int) -> dict:
    st = asyncio.run(cluster.status(i))
    assert st is not None, f"node {i} does not answer status"
    return st


def _part(cluster: SinkProcessCluster, i: int) -> dict:
    """Node i's replica of TOPIC/0: role, commit, last_index, applied. With partition
    groups that is the partition's data group (its row in status), else the one group."""
    st = _status(cluster, i)
    if not cluster.partition_groups:
        return st
    rows = [g for g in st["data_groups"]["groups"] if g["topic"] == TOPIC and g["partition"] == 0]
    assert rows, f"node {i} hosts no replica of {TOPIC}/0: {st['data_groups']}"
    return rows[0]


def _part_leader(cluster: SinkProcessCluster) -> int | None:
    return next((i for i in cluster.nodes if _part(cluster, i)["role"] == "leader"), None)


def _wait(cond, timeout: float, what: str, step: float = 0.1) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(step)


def _value(n: int) -> bytes:
    head = b"rec-%08d|" % n
    return head + b"x" * (VALUE - len(head))


def _consume_all(bootstrap: str) -> dict[int, bytes]:
    """offset -> value of everything in TOPIC/0 up to the high watermark."""
    c = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "disk-full", "enable.auto.commit": False}
    )
    try:
        deadline = time.monotonic() + 60
        while True:  # a leadership hand-off may be under way: ask again
            try:
                _, high = c.get_watermark_offsets(TopicPartition(TOPIC, 0), timeout=10)
                break
            except KafkaException:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        c.assign([TopicPartition(TOPIC, 0, 0)])
        out: dict[int, bytes] = {}
        deadline = time.monotonic() + 60
        while len(out) < high and time.monotonic() < deadline:
            m = c.poll(1.0)
            if m is None or m.error():
                continue
            out[m.offset()] = m.value()
        return out
    finally:
        c.close()


def test_produce_until_the_reserve_then_grow_the_volumes(tmp_path):
    cluster = _cluster(str(tmp_path))
    paths = [n.data_dir for n in cluster.nodes.values()]
    with tmpfs_volumes(paths, VOLUME) as vols:
        cluster.start()
        try:
            asyncio.run(cluster.wait_ready())
            procs = {i: n.proc for i, n in cluster.nodes.items()}
            acked: dict[int, int] = {}  # record number -> offset
            errors: list[int] = []

            def report(err, msg) -> None:
                if err is None:
                    acked[int(msg.value()[4:12])] = msg.offset()
                else:
                    errors.append(err.code())

            # retries=0: each refusal reaches the delivery report as the broker's code.
            p = Producer(
                {
                    "bootstrap.servers": cluster.bootstrap_servers,
                    "acks": "all",
                    "retries": 0,
                    "linger.ms": 2,
                    "message.timeout.ms": 60000,
                }
            )

            def all_tripped() -> bool:
                return all(
                    _status(cluster, i)["disk_guard"]["level"] != "ok" for i in cluster.nodes
                )

            # Until every node is below its reserve: a leader that trips first hands
            # leadership to a node that still has room, which then takes writes.
            n = 0
            deadline = time.monotonic() + 180
            while True:
                assert time.monotonic() < deadline, (
                    f"not every node tripped in time: {len(acked)} acked, errors {errors[-10:]}"
                )
                p.produce(TOPIC, value=_value(n), on_delivery=report)
                n += 1
                p.poll(0)
                if len(p) > 64:
                    p.flush(30)
                refusing = errors[-20:].count(KafkaError.KAFKA_STORAGE_ERROR) == 20
                if n % 32 == 0 and refusing and all_tripped():
                    break
            assert p.flush(60) == 0
            print(
                f"{len(acked)} acked, {len(errors)} refused, free {[v.free_bytes() for v in vols]}"
            )
            # Every refusal is the documented retriable error, never a crash or timeout
            # (a leadership hand-off between nodes may answer NOT_LEADER_OR_FOLLOWER).
            allowed = {KafkaError.KAFKA_STORAGE_ERROR, KafkaError.NOT_LEADER_FOR_PARTITION}
            assert set(errors) <= allowed, errors
            assert len(acked) > 500, len(acked)  # 16+ MiB went in before the reserve
            assert cluster.exited() == {}
            for vol in vols:  # the reserve held: nothing came near ENOSPC
                assert vol.free_bytes() > RESERVE // 4

            # Consumers read everything acknowledged (fetch is served below the reserve).
            got = _consume_all(cluster.bootstrap_servers)
            for rec, off in acked.items():
                assert got.get(off, b"")[:13] == _value(rec)[:13], (rec, off)

            # Space returns: the same processes take writes again, without a restart.
            for vol in vols:
                vol.resize(4 * VOLUME)
            t0 = time.monotonic()
            q = Producer(
                {
                    "bootstrap.servers": cluster.bootstrap_servers,
                    "acks": "all",
                    "message.timeout.ms": 30000,
                }
            )
            done: list = []
            q.produce(TOPIC, value=b"after", on_delivery=lambda e, m: done.append(e))
            q.flush(35)
            resume_s = time.monotonic() - t0
            print(f"produce acknowledged {resume_s:.2f} s after the volumes grew")
            assert done == [None], done
            assert resume_s < 10
            _wait(
                lambda: all(
                    _status(cluster, i)["disk_guard"]["level"] == "ok" for i in cluster.nodes
                ),
                10,
                "every guard to clear",
            )
            assert cluster.exited() == {}
            assert {i: n.proc for i, n in cluster.nodes.items()} == procs
        finally:
            cluster.stop()


def test_one_node_full_the_others_commit(tmp_path):
    cluster = _cluster(str(tmp_path))
    paths = [n.data_dir for n in cluster.nodes.values()]
    with tmpfs_volumes(paths, VOLUME) as vols:
        cluster.start()
        try:
            asyncio.run(cluster.wait_ready())
            p = Producer(
                {
                    "bootstrap.servers": cluster.bootstrap_servers,
                    "acks": "all",
                    "enable.idempotence": True,
                    "message.timeout.ms": 60000,
                }
            )
            p.produce(TOPIC, value=b"first")  # creates the topic
            assert p.flush(30) == 0
            # The node leading TOPIC/0 (with partition groups, its data group's leader;
            # the controller's may be another node, and is handed off the same way).
            _wait(lambda: _part_leader(cluster) is not None, 30, f"a leader of {TOPIC}/0")
            leader = _part_leader(cluster)
            assert leader is not None
            full = vols[leader - 1]
            full.fill_to(RESERVE // 4)  # below half the reserve: no appends at all

            _wait(
                lambda: _status(cluster, leader)["disk_guard"]["level"] == "appends_refused",
                10,
                "the full node's guard",
            )
            # It hands leadership to a node with room, and the others commit without it.
            _wait(lambda: _part(cluster, leader)["role"] != "leader", 15, "a hand-off")
            _wait(lambda: _status(cluster, leader)["role"] != "leader", 15, "the controller's")
            acked: list = []
            for n in range(200):
                p.produce(
                    TOPIC,
                    value=_value(n),
                    on_delivery=lambda e, m: acked.append(m.offset() if e is None else e),
                )
            assert p.flush(60) == 0
            assert len(acked) == 200 and all(isinstance(a, int) for a in acked), acked[:5]
            others = [i for i in cluster.nodes if i != leader]
            commit = max(_part(cluster, i)["commit"] for i in others)
            stuck = _part(cluster, leader)
            assert stuck["last_index"] < commit  # it did not append the new records
            assert full.free_bytes() > 0 and cluster.exited() == {}

            # Space returns on that volume: it catches up by itself.
            full.remove_filler()
            _wait(
                lambda: _part(cluster, leader)["applied"] >= commit,
                30,
                "the full node to catch up",
            )
            assert _status(cluster, leader)["disk_guard"]["level"] == "ok"
            assert cluster.exited() == {}
        finally:
            cluster.stop()
        assert os.path.ismount(full.path)  # still mounted here; the context unmounts it
