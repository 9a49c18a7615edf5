"""Retention against real node processes: a registered pipeline's uncommitted
data survives log compaction; committing releases it; the hard limit
overrides it and readers then see the data as lost (offset out of range)."""

from __future__ import annotations

import asyncio
import time

from confluent_kafka import Producer

from sink.process_cluster import SinkProcessCluster
from sink.readapi import ERR_NOT_LEADER, ERR_OFFSET_OUT_OF_RANGE, ReadApiClient

TOPIC = "ret"


def produce_entries(bootstrap: str, start: int, n: int) -> None:
    """n records, each flushed alone so each is its own Raft entry."""
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0})
    for i in range(start, start + n):
        p.produce(TOPIC, value=b"r%d" % i)
        assert p.flush(30) == 0


async def log_start(client: ReadApiClient) -> int:
    reply = await client.partitions([TOPIC], linearizable=True)
    return reply.partitions[0].log_start_offset


async def wait_log_start(client: ReadApiClient, cond, what: str, timeout: float = 30.0) -> int:
    deadline = time.monotonic() + timeout
    while True:
        start = await log_start(client)
        if cond(start):
            return start
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}; log start is {start}")
        await asyncio.sleep(0.1)


def test_pipeline_holds_retention_until_commit_and_hard_limit_wins(tmp_path):
    cluster = SinkProcessCluster(
        str(tmp_path),
        extra_args=[
            "--snapshot-every-entries",
            "25",
            "--retention-max-entries",
            "20",
            "--retention-hard-max-entries",
            "400",
        ],
    )
    cluster.start()
    try:
        leader = asyncio.run(cluster.wait_ready())
        produce_entries(cluster.bootstrap_servers, 0, 1)  # creates the topic
        follower = next(i for i in cluster.peers if i != leader)

        async def commit(offset: int) -> None:
            # Through a FOLLOWER: it forwards to the leader. Right after the topic's
            # creation the follower's replica of its data group may not know the group's
            # leader yet (CI: NOT_LEADER, "no leader of group 1 known here"): asked again,
            # as the Spark source does (it moves on to the next node).
            client = ReadApiClient(cluster.peers[follower].read_api)
            deadline = time.monotonic() + 30
            while True:
                reply = await client.commit("pipeline-a", {(TOPIC, 0): offset})
                if reply.error_code != ERR_NOT_LEADER or time.monotonic() > deadline:
                    break
                await asyncio.sleep(0.1)
            assert reply.error_code == 0, reply.error
            assert reply.partitions == 1
            await client.close()

        asyncio.run(commit(0))  # registers the pipeline: it holds everything
        produce_entries(cluster.bootstrap_servers, 1, 149)
        asyncio.run(commit(100))
        produce_entries(cluster.bootstrap_servers, 150, 150)

        async def check_hold() -> None:
            client = ReadApiClient(cluster.peers[leader].read_api)
            # Compaction runs (soft limit 20 entries) but stops at the batch
            # holding offset 100, which pipeline-a has not consumed yet.
            start = await wait_log_start(client, lambda s: s >= 100, "compaction up to offset 100")
            assert start == 100
            fetched = await client.fetch(TOPIC, 0, 100, max_bytes=1 << 20)
            assert fetched.error_code == 0 and fetched.batches[0].base_offset == 100
            # Committing further releases the data.
            assert (await client.commit("pipeline-a", {(TOPIC, 0): 250})).error_code == 0
            await client.close()

        asyncio.run(check_hold())
        produce_entries(cluster.bootstrap_servers, 300, 60)

        async def check_release() -> None:
            client = ReadApiClient(cluster.peers[leader].read_api)
            start = await wait_log_start(client, lambda s: s >= 250, "compaction up to offset 250")
            assert start == 250
            await client.close()

        asyncio.run(check_release())
        # A pipeline that stops consuming: the hard limit (400 entries) wins.
        produce_entries(cluster.bootstrap_servers, 360, 520)

        async def check_hard_limit() -> None:
            client = ReadApiClient(cluster.peers[leader].read_api)
            start = await wait_log_start(client, lambda s: s > 250, "the hard limit to compact")
            fetched = await client.fetch(TOPIC, 0, 250, max_bytes=1 << 20)
            assert fetched.error_code == ERR_OFFSET_OUT_OF_RANGE  # the reader sees data loss
            assert fetched.log_start_offset == start > 250
            await client.close()

        asyncio.run(check_hard_limit())
    finally:
        cluster.stop()
