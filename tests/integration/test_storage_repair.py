"""Damaged storage is repaired, not fatal (issue 12), on three real `raftsink serve`
processes under an idempotent acks=all produce load.

One node at a time is killed, its storage damaged while it is down, and started again:
  flip      a byte flipped in the middle of a sealed (synced) segment: found when the
            entry is read (the node reads its whole log back through its read API),
            the node re-executes itself and recovery repairs it;
  truncate  the tail of a sealed segment cut off: found at start;
  segment   a sealed segment deleted: found at start;
  index     the LMDB index deleted (the vote record with it): rebuilt from the segments.
Each time the node must come back by itself (never exit), under a NEW incarnation (it
cannot vouch for what it acknowledged or voted), and be re-admitted as a voter; at the
end every acknowledged record is read back, exactly once. Variants: the damaged node is
a follower each time, or the leader each time (it loses leadership, repairs, and the
next round damages the new leader). One cluster per variant keeps CI's cost down.

A damaged BASE snapshot (what the log was compacted to: nothing on the node can rebuild
that state) makes the node discard its whole storage (set aside, not deleted) and come
back as a replacement, rebuilt by a snapshot from the leader.

The clusters here run ONE Raft group (`partition_groups=False`): the damage is done to
that layout's files (DATA_DIR/log, DATA_DIR/snapshots). With partition groups every
group's log repairs itself the same way, one group at a time (the host's groups share
the LogEnvironment): tests/unit/runtime/test_repair_runtime.py.
"""

from __future__ import annotations

import asyncio
import functools
import os
import random
import shutil
import threading
import time

import pytest

confluent_kafka = pytest.importorskip("confluent_kafka")

from confluent_kafka import Consumer, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from raftlog.storage import LogStore  # noqa: E402
from sink.process_cluster import SinkProcessCluster  # noqa: E402
from sink.readapi import ReadApiClient  # noqa: E402
from tests.integration.test_identity_wipe import _status, _wait  # noqa: E402

TOPIC = "repair"
DAMAGES = ("flip", "truncate", "segment", "index")
VALUE = b"r" * 300


class Load:
    """An idempotent acks=all producer in a thread, until stop(); records what was acked."""

    def __init__(self, bootstrap: str) -> None:
        self.acked: list[bytes] = []
        self.failed: list[str] = []
        self._stop = threading.Event()
        self._producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                "acks": "all",
                "enable.idempotence": True,
                "linger.ms": 2,
                "message.timeout.ms": 120_000,
            }
        )
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _on_delivery(self, err, msg) -> None:
        if err is not None:
            self.failed.append(str(err))
        else:
            self.acked.append(msg.value())

    def _run(self) -> None:
        k = 0
        while not self._stop.is_set():
            try:
                self._producer.produce(
                    TOPIC, value=b"%08d" % k + VALUE, on_delivery=self._on_delivery
                )
                k += 1
            except BufferError:
                self._producer.poll(0.05)
            self._producer.poll(0)
            if k % 20 == 0:
                time.sleep(0.01)  # at most about 2,000 records/s: a steady, cheap load

    def wait_acked(self, n: int, timeout: float) -> None:
        _wait(lambda: len(self.acked) >= n, timeout, f"{n} acknowledged records")

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)
        assert self._producer.flush(120) == 0, "records still in flight after 120 s"


def _read_back(bootstrap: str, n: int) -> list[bytes]:
    c = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "repair-check", "enable.auto.commit": False}
    )
    c.assign([TopicPartition(TOPIC, 0, 0)])
    got: list[bytes] = []
    deadline = time.monotonic() + 90
    while len(got) < n:
        assert time.monotonic() < deadline, f"read back only {len(got)} of {n} records"
        msg = c.poll(0.2)
        if msg is not None:
            assert msg.error() is None, msg.error()
            got.append(msg.value())
    c.close()
    return got


async def _read_whole_log(address: str) -> bool:
    """Ask node's read API for every record it holds (reads every log entry): True if it
    answered all of it (False while it is restarting or repairing)."""
    client = ReadApiClient(address)
    try:
        (info,) = (await client.partitions([TOPIC], timeout=5.0)).partitions
        pos = info.log_start_offset
        while pos < info.high_watermark:
            reply = await client.fetch(TOPIC, 0, pos, max_bytes=4 << 20, timeout=5.0)
            if reply.error_code or not reply.batches:
                return False
            pos = max(pos + 1, _next_offset(reply.batches))
        return True
    except Exception:
        return False
    finally:
        await client.close()


def _next_offset(batches) -> int:
    """The offset after the last record of the last v2 batch the reply holds (a reply's
    data may hold several batches back to back: base offset, length, ..., last delta)."""
    raw = b"".join(bytes(b.data) for b in batches)
    pos, nxt = 0, 0
    while pos + 27 <= len(raw):
        base = int.from_bytes(raw[pos : pos + 8], "big")
        length = int.from_bytes(raw[pos + 8 : pos + 12], "big")
        nxt = base + int.from_bytes(raw[pos + 23 : pos + 27], "big") + 1
        pos += 12 + length
    return nxt


def _log_dir(data_dir: str) -> str:
    return os.path.join(data_dir, "log")


def _damage(data_dir: str, how: str, rng: random.Random) -> str:
    """Damage a stopped node's storage; returns what was done (for the failure message)."""
    log_dir = _log_dir(data_dir)
    if how == "index":
        shutil.rmtree(os.path.join(log_dir, "index"))
        return "deleted the LMDB index"
    seg_dir = os.path.join(log_dir, "segments")
    segs = sorted(os.path.join(seg_dir, n) for n in os.listdir(seg_dir) if n.endswith(".seg"))
    assert len(segs) >= 3, f"want sealed segments to damage, have {segs}"
    victim = segs[rng.randrange(0, len(segs) - 1)]  # a sealed one (not the active last)
    size = os.path.getsize(victim)
    if how == "segment":
        os.unlink(victim)
        return f"deleted {victim}"
    if how == "truncate":
        os.truncate(victim, size // 2)
        return f"cut {victim} from {size} to {size // 2} bytes"
    at = rng.randrange(size // 4, 3 * size // 4)
    with open(victim, "r+b") as f:
        f.seek(at)
        b = f.read(1)
        f.seek(at)
        f.write(bytes([b[0] ^ 0xFF]))
    return f"flipped byte {at} of {victim}"


def _voter_again(c: SinkProcessCluster, i: int, old_incarnation: int) -> bool:
    s = _status(c, i)
    return bool(
        s
        and s["identity"]["may_vote"]
        and i in s["membership"]["voters"]
        and s["identity"]["recorded"] == s["identity"]["incarnation"] != old_incarnation
        and s["applied"] >= s["commit"] > 0
    )


def _repaired(c: SinkProcessCluster, victim: int, damage: str, old_incarnation: int) -> bool:
    assert victim not in c.exited(), c.describe_exit(victim, c.exited()[victim])
    if damage == "flip":  # found when read: make the node read its log
        asyncio.run(_read_whole_log(c.peers[victim].read_api))
    return _voter_again(c, victim, old_incarnation)


@pytest.mark.crash
@pytest.mark.parametrize("role", ["follower", "leader"])
def test_damaged_storage_is_repaired_from_the_peers(tmp_path, role):
    seed = int(os.environ.get("RAFTSINK_REPAIR_SEED", random.randrange(1 << 30)))
    print(f"\nrepair test: role={role} seed={seed} (RAFTSINK_REPAIR_SEED replays the choices)")
    rng = random.Random(seed)
    c = SinkProcessCluster(
        str(tmp_path),
        default_partitions=1,
        log_level="INFO",
        extra_args=["--storage-segment-bytes", str(128 * 1024)],
        partition_groups=False,  # the one-group layout's files are damaged
    )
    c.start()
    load: Load | None = None
    try:
        leader = asyncio.run(c.wait_ready(timeout=90))
        _wait(
            lambda: all((s := _status(c, i)) and s["identity"]["may_vote"] for i in c.nodes),
            60,
            "every node may vote",
        )
        load = Load(c.bootstrap_servers)
        load.wait_acked(3000, 90)  # a few sealed segments on every node
        for damage in DAMAGES:
            victim = leader if role == "leader" else rng.choice([i for i in c.nodes if i != leader])
            before = _status(c, victim)
            assert before is not None
            c.kill(victim)
            what = _damage(c.nodes[victim].data_dir, damage, rng)
            print(f"damage={damage} node={victim} ({role}): {what}")
            acked = len(load.acked)
            c.start(victim)
            load.wait_acked(acked + 500, 90)  # the others go on meanwhile

            _wait(
                functools.partial(_repaired, c, victim, damage, before["identity"]["incarnation"]),
                120,
                f"node {victim} repaired and a voter again after {what}",
            )
            tail = c.log_tail(victim, 200_000)
            if damage != "index":
                assert "storage.repair " in tail and "raft.repair_waiting" in tail, tail[-3000:]
            assert asyncio.run(_read_whole_log(c.peers[victim].read_api))
            leader = asyncio.run(c.wait_ready(timeout=60))
        load.stop()
        assert not load.failed, load.failed[:3]
        got = _read_back(c.bootstrap_servers, len(load.acked))
        assert len(got) == len(set(got)), "duplicates"
        assert set(got) == set(load.acked), "acknowledged records lost"
        print(f"{len(got)} acknowledged records read back after {len(DAMAGES)} repairs")
    finally:
        if load is not None and not load._stop.is_set():
            load._stop.set()
        c.stop()


async def _values_served(address: str) -> tuple[int, list[bytes]]:
    """(log start, every record value from it) as node's read API serves TOPIC/0."""
    from aiokafka.record.memory_records import MemoryRecords

    client = ReadApiClient(address)
    try:
        (info,) = (await client.partitions([TOPIC], timeout=5.0)).partitions
        pos, out = info.log_start_offset, []
        while pos < info.high_watermark:
            reply = await client.fetch(TOPIC, 0, pos, max_bytes=4 << 20, timeout=5.0)
            assert not reply.error_code, (address, pos, reply.error_code, reply.error)
            records = MemoryRecords(b"".join(bytes(b.data) for b in reply.batches))
            while records.has_next():
                for rec in records.next_batch():
                    if rec.offset >= pos:
                        out.append(bytes(rec.value))
                        pos = rec.offset + 1
        return info.log_start_offset, out
    finally:
        await client.close()


@pytest.mark.crash
def test_a_damaged_base_snapshot_is_discarded_and_rebuilt_from_the_peers(tmp_path):
    """A stopped follower's base snapshot damaged: it sets its storage aside, runs blank
    under a new incarnation, is sent a snapshot and re-admitted as a voter; every
    acknowledged record is read back, from the cluster and from that node itself."""
    pytest.importorskip("aiokafka")
    c = SinkProcessCluster(
        str(tmp_path),
        default_partitions=1,
        log_level="INFO",
        extra_args=[
            "--retention-snapshot-every-entries",
            "10",
            "--topics-retention-check-ms",
            "200",
        ],
        partition_groups=False,  # the one-group layout's files are damaged
    )
    c.start()
    load: Load | None = None
    try:
        asyncio.run(c.wait_ready(timeout=90))
        _wait(
            lambda: all((s := _status(c, i)) and s["identity"]["may_vote"] for i in c.nodes),
            60,
            "every node may vote",
        )
        # Entries that hold no record (topics created), so that snapshots exist below the
        # first record and the log is cut there with every record kept (retention keeps
        # records for 7 days: the log cannot be cut past the first one).
        admin = AdminClient({"bootstrap.servers": c.bootstrap_servers})
        for k in range(30):
            (fut,) = admin.create_topics([NewTopic(f"pad-{k}", 1, 3)]).values()
            fut.result(30)
        (fut,) = admin.create_topics([NewTopic(TOPIC, 1, 3)]).values()
        fut.result(30)
        load = Load(c.bootstrap_servers)
        load.wait_acked(2000, 90)
        leader = asyncio.run(c.wait_ready(timeout=60))
        victim = next(i for i in c.nodes if i != leader)
        _wait(
            lambda: _status(c, victim).get("first_index", 1) > 1,
            60,
            f"node {victim}'s log cut at a snapshot",
        )
        before = _status(c, victim)
        c.kill(victim)
        data_dir = c.nodes[victim].data_dir
        store = LogStore.open(_log_dir(data_dir))
        base = store.first_index() - 1
        store.close()
        snap_dir = os.path.join(data_dir, "snapshots")
        (name,) = [n for n in os.listdir(snap_dir) if n.startswith(f"snapshot-{base:020d}-")]
        with open(os.path.join(snap_dir, name), "r+b") as f:
            f.seek(-3, os.SEEK_END)
            f.write(b"XYZ")
        print(f"damaged base snapshot {name} of node {victim} (log compacted to {base})")
        acked = len(load.acked)
        restarted = time.monotonic()
        c.start(victim)
        _wait(
            lambda: (
                victim not in c.exited()
                and _voter_again(c, victim, before["identity"]["incarnation"])
            ),
            120,
            f"node {victim} rebuilt and a voter again",
        )
        print(f"node {victim} a voter again {time.monotonic() - restarted:.1f} s after its start")
        load.wait_acked(acked + 500, 90)  # the load went on throughout
        assert victim not in c.exited(), c.describe_exit(victim, c.exited()[victim])
        tail = c.log_tail(victim, 200_000)
        assert "raft.storage_discarded" in tail, tail[-3000:]
        names = os.listdir(data_dir)
        assert any(n.startswith("log.damaged-") for n in names), names
        assert any(n.startswith("snapshots.damaged-") for n in names), names
        load.stop()
        assert not load.failed, load.failed[:3]
        got = _read_back(c.bootstrap_servers, len(load.acked))
        assert len(got) == len(set(got)), "duplicates"
        assert set(got) == set(load.acked), "acknowledged records lost"

        # the rebuilt node itself serves every one of them (once it has applied them all)
        def served_all() -> bool:
            start, values = asyncio.run(_values_served(c.peers[victim].read_api))
            return start == 0 and set(load.acked) <= set(values)

        _wait(served_all, 60, f"node {victim} serving every acknowledged record")
        _start, values = asyncio.run(_values_served(c.peers[victim].read_api))
        assert len(values) == len(set(values)), "duplicates on the rebuilt node"
        print(f"{len(load.acked)} acknowledged records read back after the discard")
    finally:
        if load is not None and not load._stop.is_set():
            load._stop.set()
        c.stop()
