"""Issue 12's "Why", on three real `raftsink serve` processes (real gRPC, real fsync,
a real Kafka client):

1. follower F1 stalls (SIGSTOP), so acks=all records commit on the leader L and F2;
2. L and F2 crash (kill -9); one of them loses its data directory and starts again
   empty; F1 resumes (SIGCONT);
3. without node identity F2 votes for F1 and the acknowledged records are lost.

With identity the empty node never votes until the leader has caught it up and
admitted it again: F1 and the empty node elect nobody; once the other crashed
node is back every acknowledged record is read back, and the wiped node ends up
a voter again under its new incarnation (`raftsink status` shows it).
Variants: wipe the follower F2 or the leader L.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import time

import pytest

confluent_kafka = pytest.importorskip("confluent_kafka")

from confluent_kafka import Consumer, Producer, TopicPartition  # noqa: E402

from sink.process_cluster import SinkProcessCluster  # noqa: E402

TOPIC = "wipe"
BEFORE, DURING = 200, 12_000
# 1 KiB values: what L sends the stopped F1 must exceed the gRPC stream's flow-control
# window and the socket buffers (a few MB), or F1 reads it all after SIGCONT
PAD = b"x" * 1000
# F1 and the empty node must elect nobody for this long: 15 election timeouts
# of the default 300-600 ms (a window to observe, not a synchronisation)
QUIET_S = 9.0


def _wait(cond, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.1)


def _status(c: SinkProcessCluster, i: int) -> dict | None:
    return asyncio.run(c.status(i, timeout=3.0))


def _produce(producer: Producer, start: int, n: int, acked: list[bytes], failed: list) -> None:
    def on_delivery(err, msg) -> None:
        if err is not None:
            failed.append(str(err))
        else:
            acked.append(msg.value())

    for k in range(start, start + n):
        while True:
            try:
                producer.produce(TOPIC, value=b"rec-%06d" % k + PAD, on_delivery=on_delivery)
                break
            except BufferError:
                producer.poll(0.05)
        producer.poll(0)
    assert producer.flush(120) == 0, "records still in flight after 120 s"


def _read_all(bootstrap: str, n: int) -> list[bytes]:
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "wipe-check",
            "enable.auto.commit": False,
            "fetch.wait.max.ms": 100,
        }
    )
    c.assign([TopicPartition(TOPIC, 0, 0)])
    got: list[bytes] = []
    deadline = time.monotonic() + 90
    while len(got) < n:
        if time.monotonic() > deadline:
            raise AssertionError(f"read back only {len(got)} of {n} records")
        msg = c.poll(0.2)
        if msg is None:
            continue
        assert msg.error() is None, msg.error()
        got.append(msg.value())
    c.close()
    return got


def _read_to_end(bootstrap: str) -> list[bytes]:
    """Every record up to the partition's high watermark now."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "wipe-end"})
    deadline = time.monotonic() + 60
    while True:
        try:
            _, high = c.get_watermark_offsets(TopicPartition(TOPIC, 0), timeout=5, cached=False)
            break
        except Exception:
            if time.monotonic() > deadline:
                raise
    c.close()
    return _read_all(bootstrap, high)


@pytest.mark.parametrize("wiped", ["follower", "leader"])
def test_a_wiped_node_never_costs_an_acknowledged_record(tmp_path, wiped):
    _scenario(str(tmp_path), wiped, identity=True)


def test_without_identity_the_same_faults_lose_acknowledged_records(tmp_path):
    """The hazard is real: with `raft.identity` off (plain Raft) F1 and the empty
    F2 elect F1, and the records only L still holds are overwritten."""
    _scenario(str(tmp_path), "follower", identity=False)


@pytest.mark.parametrize("damage", ["index", "flip"])
def test_damaged_storage_never_costs_an_acknowledged_record(tmp_path, damage):
    """F2's storage is damaged while it is down instead of wiped: its LMDB index is
    deleted (the vote record goes with it), or a byte in the middle of its synced
    segment is flipped (a truncated segment: test_storage_repair.py). F2 comes back as a
    replacement (new incarnation, no vote until re-admitted) keeping its intact prefix,
    and is repaired from its peers once L is back; it never stops. No acknowledged
    record is lost (tests/integration/test_storage_repair.py: the same under load, on
    the leader too, and a deleted segment)."""
    _scenario(str(tmp_path), "follower", identity=True, damage=damage)


def _segments(data_dir: str) -> list[str]:
    out = []
    for root, _, files in os.walk(data_dir):
        out += [os.path.join(root, f) for f in files if f.endswith(".seg")]
    return sorted(out, key=os.path.getsize)


def _damage(data_dir: str, how: str) -> None:
    if how == "index":
        for root, _, files in os.walk(data_dir):
            if "data.mdb" in files:
                shutil.rmtree(root)
        return
    seg = _segments(data_dir)[-1]  # the largest: the records
    size = os.path.getsize(seg)
    if how == "truncate":
        os.truncate(seg, size // 2)
    else:
        with open(seg, "r+b") as f:
            f.seek(size // 2)
            b = f.read(1)
            f.seek(size // 2)
            f.write(bytes([b[0] ^ 0xFF]))
            f.flush()
            os.fsync(f.fileno())


def _never_stopped(cluster: SinkProcessCluster, victim: int, damage: str) -> None:
    """The damaged node repairs itself (storage.on_corruption "repair", the default): it
    never stops, not even when the damage is found only when an entry is read (it then
    restarts itself in place)."""
    code = cluster.exited().get(victim)
    assert code is None, f"damage={damage}: " + cluster.describe_exit(victim, code)


def _repair_flow(
    cluster: SinkProcessCluster, victim: int, other: int, acked: list[bytes], damage: str
) -> None:
    """After damage: the damaged node comes back as a replacement keeping its intact
    prefix (or, if its damage is found only when read, as itself until then, then
    restarts itself in place and repairs) and never stops; every acknowledged record
    is read back and the node ends up a healthy voter."""
    cluster.start(other)
    deadline = time.monotonic() + 180
    while True:
        _never_stopped(cluster, victim, damage)
        try:
            asyncio.run(cluster.wait_ready(timeout=20))
            break
        except (TimeoutError, RuntimeError):
            if time.monotonic() > deadline:
                raise
    got = _read_all(cluster.bootstrap_servers, len(acked))
    assert sorted(got) == sorted(acked), "acknowledged records lost or changed"

    def healthy() -> bool:
        _never_stopped(cluster, victim, damage)
        s = _status(cluster, victim)
        return bool(
            s
            and s["identity"]["may_vote"]
            and victim in s["membership"]["voters"]
            and s["identity"]["recorded"] == s["identity"]["incarnation"]
            and s["applied"] >= s["commit"] > 0
        )

    _wait(healthy, 120, "the damaged node healthy again")
    print(f"damage={damage}: node {victim} ends as {_status(cluster, victim)['identity']}")


def _scenario(base: str, wiped: str, identity: bool, damage: str = "") -> None:
    cluster = SinkProcessCluster(
        base,
        default_partitions=1,
        log_level="INFO",
        extra_args=[] if identity else ["--raft-identity", "false"],
    )
    cluster.start()
    stopped: int | None = None
    try:
        lead = asyncio.run(cluster.wait_ready(timeout=90))
        f1, f2 = (i for i in sorted(cluster.nodes) if i != lead)
        if identity:  # every node admitted under its first incarnation before the faults
            _wait(
                lambda: all(
                    (st := _status(cluster, i)) and st["identity"]["may_vote"] for i in (1, 2, 3)
                ),
                60,
                "every node may vote",
            )
        producer = Producer(
            {
                "bootstrap.servers": cluster.bootstrap_servers,
                "acks": "all",
                "enable.idempotence": True,
                "linger.ms": 5,
                "message.timeout.ms": 120_000,
            }
        )
        acked: list[bytes] = []
        failed: list[str] = []
        _produce(producer, 0, BEFORE, acked, failed)
        # 1. F1 stalls; the records commit on L and F2
        f1_proc = cluster.nodes[f1].proc
        assert f1_proc is not None
        os.kill(f1_proc.pid, signal.SIGSTOP)
        stopped = f1_proc.pid
        _produce(producer, BEFORE, DURING, acked, failed)
        assert not failed, failed[:3]
        producer.flush(5)
        assert len(acked) == BEFORE + DURING
        # 2. L and F2 crash; one of them comes back empty; F1 resumes
        victim, other = (f2, lead) if wiped == "follower" else (lead, f2)
        cluster.kill(lead)
        cluster.kill(f2)
        if damage:
            _damage(cluster.nodes[victim].data_dir, damage)
        else:
            shutil.rmtree(cluster.nodes[victim].data_dir)
        cluster.start(victim)
        os.kill(stopped, signal.SIGCONT)
        stopped = None
        _wait(
            lambda: _status(cluster, victim) is not None or victim in cluster.exited(),
            60,
            "the damaged node answers or stops",
        )
        if damage:
            _repair_flow(cluster, victim, other, acked, damage)
            return
        if not identity:
            _wait(
                lambda: any((s := _status(cluster, i)) and s["role"] == "leader" for i in (f1, f2)),
                60,
                "plain Raft elects F1 with the empty F2's vote",
            )
            cluster.start(other)
            asyncio.run(cluster.wait_ready(timeout=90))
            lost = set(acked) - set(_read_to_end(cluster.bootstrap_servers))
            print(f"plain Raft lost {len(lost)} of {len(acked)} acknowledged records")
            assert lost, "plain Raft kept every record: the scenario no longer shows the hazard"
            return
        # 3. F1 and the empty node elect nobody: the empty node refuses its vote
        deadline = time.monotonic() + QUIET_S
        while time.monotonic() < deadline:
            for i in (f1, victim):
                st = _status(cluster, i)
                assert st is None or st["role"] != "leader", f"node {i} leads: {st}"
            time.sleep(0.2)
        st = _status(cluster, victim)
        assert st is not None and not st["identity"]["may_vote"], st
        first_incarnation = st["identity"]["incarnation"]
        # the other crashed node returns: a leader with every acknowledged record
        cluster.start(other)
        asyncio.run(cluster.wait_ready(timeout=90))
        got = _read_all(cluster.bootstrap_servers, len(acked))
        assert sorted(got) == sorted(acked), "acknowledged records lost or changed"
        assert len(got) == len(set(got)), "duplicates"

        # the wiped node is a voter again under its new incarnation
        def readmitted() -> bool:
            s = _status(cluster, victim)
            return bool(
                s
                and s["identity"]["may_vote"]
                and victim in s["membership"]["voters"]
                and s["identity"]["recorded"] == s["identity"]["incarnation"]
            )

        _wait(readmitted, 90, "the wiped node re-admitted")
        assert _status(cluster, victim)["identity"]["incarnation"] == first_incarnation
    finally:
        if stopped is not None:
            os.kill(stopped, signal.SIGCONT)
        cluster.stop()
