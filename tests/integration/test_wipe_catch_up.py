"""A wiped node, rebuilt from its peers, serves through its read API every record the
others still hold (real `raftsink serve` processes, real storage, real snapshots).

The chaos campaign (seed 20240607) ended UNKNOWN with "final-node-2 final read
incomplete": node 2, wiped while the leader's Raft log was compacted behind its newest
snapshot, was sent that snapshot and then only the entries after it; its log started
thousands of entries after the leader's, so its read API answered OFFSET_OUT_OF_RANGE
for every offset its peers still served. The leader now cuts its log only at a snapshot
it keeps and sends that one (raftlog/runtime/snapshots.py), so a rebuilt node receives
every entry the leader's log holds.

Two retention settings: the default (records kept for 7 days: the wiped node must serve
everything from offset 0), and retention.bytes (the log start moves: the wiped node must
serve from the same log start as the others).

The cluster runs ONE Raft group (`partition_groups=False`): the test watches that
group's applied index and snapshots. A wiped node of a partition-groups cluster is
test_identity_wipe.py's (it passes with groups on).
"""

from __future__ import annotations

import asyncio
import os
import shutil
import time

import pytest

pytest.importorskip("confluent_kafka")
pytest.importorskip("aiokafka")

from aiokafka.record.memory_records import MemoryRecords
from confluent_kafka import Producer

from sink.process_cluster import SinkProcessCluster
from sink.readapi import ReadApiClient

TOPIC = "wiped"
RECORDS = 1500
VALUE = b"v" * 200


def _wait(cond, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.1)


def _status(c: SinkProcessCluster, i: int) -> dict:
    return asyncio.run(c.status(i, timeout=3.0)) or {}


def _produce(bootstrap: str, start: int, n: int) -> None:
    """n records, a few per produce request (so the Raft log gets many entries)."""
    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 0})
    failed: list[str] = []
    for k in range(start, start + n):
        p.produce(
            TOPIC,
            value=b"%06d" % k + VALUE,
            on_delivery=lambda err, _m: failed.append(str(err)) if err else None,
        )
        if k % 5 == 4:
            p.flush(30)
    assert p.flush(60) == 0 and not failed, failed


async def _read_node(address: str) -> tuple[int, int, list[int]]:
    """(log start, high watermark, record numbers from the log start) via the read API."""
    client = ReadApiClient(address)
    try:
        (info,) = (await client.partitions([TOPIC], timeout=5.0)).partitions
        pos, out = info.log_start_offset, []
        while pos < info.high_watermark:
            reply = await client.fetch(TOPIC, 0, pos, max_bytes=1 << 20, timeout=5.0)
            assert not reply.error_code, (address, pos, reply.error_code, reply.error)
            records = MemoryRecords(bytes(b"".join(bytes(b.data) for b in reply.batches)))
            while records.has_next():
                for rec in records.next_batch():
                    if rec.offset >= pos:
                        out.append(int(rec.value[:6]))
                        pos = rec.offset + 1
        return info.log_start_offset, info.high_watermark, out
    finally:
        await client.close()


@pytest.mark.crash
@pytest.mark.parametrize(
    "retention",
    [[], ["--topics-retention-bytes", "60000"]],
    ids=["keep-everything", "retention-bytes"],
)
def test_a_wiped_node_serves_every_record_its_peers_hold(tmp_path, retention):
    c = SinkProcessCluster(
        str(tmp_path),
        extra_args=[
            "--retention-snapshot-every-entries",
            "100",
            "--topics-retention-check-ms",
            "200",
            *retention,
        ],
        partition_groups=False,  # the one group's applied index is what the test watches
    )
    c.start()
    try:
        leader = asyncio.run(c.wait_ready(timeout=60))
        _produce(c.bootstrap_servers, 0, RECORDS)
        # the leader has snapshotted, and (retention-bytes) cut its log behind the newest
        _wait(lambda: _status(c, leader).get("applied", 0) > 300, 60, "entries applied")
        if retention:
            _wait(lambda: _status(c, leader).get("first_index", 1) > 1, 60, "a log cut")
        victim = next(i for i in c.nodes if i != leader)
        c.kill(victim)
        shutil.rmtree(c.nodes[victim].data_dir)
        os.makedirs(c.nodes[victim].data_dir)
        _produce(c.bootstrap_servers, RECORDS, 100)  # while it is gone
        c.start(victim)
        total = RECORDS + 100

        def caught_up() -> bool:
            st = _status(c, victim)
            return st.get("partitions", {}).get(f"{TOPIC}/0") == total and bool(
                st.get("identity", {}).get("may_vote")
            )

        _wait(caught_up, 120, "the wiped node to be rebuilt and admitted")
        # Retention runs on each node's own clock: wait until both apply it to the same
        # data (a function of the applied log), then compare.
        reads: dict[int, tuple[int, int, list[int]]] = {}

        def same_start() -> bool:
            for i in (leader, victim):
                reads[i] = asyncio.run(_read_node(c.peers[i].read_api))
            return reads[leader][0] == reads[victim][0]

        try:
            _wait(same_start, 60, "the same log start on the leader and the wiped node")
        except AssertionError as exc:
            raise AssertionError(
                f"{exc}: (log start, high watermark) leader {reads[leader][:2]}, "
                f"wiped node {reads[victim][:2]}"
            ) from None
        start, high, got = reads[victim]
        assert high == total
        assert got == list(range(start, total)), (start, got[:3], len(got))
        assert reads[leader] == reads[victim]
        if not retention:
            assert start == 0  # every record kept: all of them served by the wiped node
        else:
            assert start > 0  # the leader's log was really cut
    finally:
        c.stop()
