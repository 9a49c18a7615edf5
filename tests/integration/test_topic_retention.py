"""Retention by time and size on real node processes under a steady load: the data
directories stop growing, the log start (ListOffsets earliest) moves, a reader below it
gets OFFSET_OUT_OF_RANGE and a consumer resets as configured (auto.offset.reset),
and a registered pipeline is not cut below its commit until its hard limit says so."""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
import time

import pytest

from sink.process_cluster import SinkProcessCluster
from sink.readapi import ERR_OFFSET_OUT_OF_RANGE, ReadApiClient
from tests.helpers.partition_groups import kafka_port, metadata

ck = pytest.importorskip("confluent_kafka")
from confluent_kafka import Consumer, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import (  # noqa: E402
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
)

VALUE = b"v" * 1000


def dir_bytes(path: str) -> int:
    total = 0
    for root, _d, files in os.walk(path):
        for f in files:
            with contextlib.suppress(FileNotFoundError):  # compacted meanwhile
                total += os.lstat(os.path.join(root, f)).st_blocks * 512
    return total


def wait_for(cond, what: str, timeout: float = 90.0):
    deadline = time.monotonic() + timeout
    while True:
        v = cond()
        if v:
            return v
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.2)


class SteadyLoad(threading.Thread):
    """~rate records/s of 1 KB to each topic until stopped."""

    def __init__(self, bootstrap: str, topics: list[str], rate: int) -> None:
        super().__init__(daemon=True)
        self.p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "acks": "all"})
        self.topics, self.rate = topics, rate
        self.halt = threading.Event()
        self.sent = 0

    def run(self) -> None:
        while not self.halt.is_set():
            for t in self.topics:
                for _ in range(self.rate // 10):
                    self.p.produce(t, VALUE)
                    self.sent += 1
            self.p.poll(0)
            self.halt.wait(0.1)
        self.p.flush(30)


def with_client(address: str, fn):
    """fn(client) run with a fresh read API client (gRPC aio: one per event loop)."""

    async def go():
        client = ReadApiClient(address)
        try:
            return await fn(client)
        finally:
            await client.close()

    return asyncio.run(go())


def leader_read_api(cluster: SinkProcessCluster, topic: str) -> str:
    """The read API of partition 0's leader, as Metadata names it. Each replica applies
    retention with its own clock, so log starts differ between replicas for a moment
    (with partition groups the controller's leader is often a follower of the topic);
    Kafka clients see the leader's, and so do the checks here."""
    for node in cluster.nodes:
        if cluster.exited():
            break
        with contextlib.suppress(Exception):
            leader = metadata(kafka_port(cluster, node), topic)[0][0]
            if leader in cluster.peers:
                return cluster.peers[leader].read_api
    raise AssertionError(f"no node names a leader of {topic}/0")


def offsets(cluster: SinkProcessCluster, topic: str) -> tuple[int, int]:
    """(log start, high watermark) of partition 0, read linearizably on its leader."""

    async def ask(client):
        r = await client.partitions([topic], linearizable=True)
        p = r.partitions[0]
        return p.log_start_offset, p.high_watermark

    return with_client(leader_read_api(cluster, topic), ask)


def test_time_and_size_retention_under_steady_load(tmp_path):
    cluster = SinkProcessCluster(
        str(tmp_path),
        extra_args=[
            "--topics-retention-check-ms",
            "300",
            "--retention-snapshot-every-entries",
            "100",
            "--storage-segment-bytes",
            str(1 << 20),
        ],
    )
    cluster.start()
    load = None
    try:
        leader = asyncio.run(cluster.wait_ready())
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
        futs = admin.create_topics(
            [
                NewTopic("timed", 1, config={"retention.ms": "4000"}),
                NewTopic("sized", 1, config={"retention.bytes": "200000"}),
                NewTopic("held", 1, config={"retention.ms": "2000"}),
            ]
        )
        for f in futs.values():
            f.result(60)
        read = cluster.peers[leader].read_api

        # A pipeline committing on "held" (registered later): retention may not pass it.
        def commit(offset: int) -> None:
            async def go(client):
                return await client.commit("pipe", {("held", 0): offset})

            r = with_client(read, go)
            assert r.error_code == 0, r.error

        load = SteadyLoad(cluster.bootstrap_servers, ["timed", "sized", "held"], 300)
        load.start()
        # Both retention rules move the log start under load.
        wait_for(lambda: offsets(cluster, "timed")[0] > 0, "time retention to move the start")
        wait_for(lambda: offsets(cluster, "sized")[0] > 0, "size retention to move the start")
        start, hw = offsets(cluster, "sized")
        assert (hw - start) * len(VALUE) < 200_000 * 3  # about retention.bytes kept
        # The data directories stop growing: sampled over a further stretch of load,
        # the last sample is no larger than the earlier maximum plus a segment or two.
        dirs = [n.data_dir for n in cluster.nodes.values()]
        samples = []
        for _ in range(6):
            before = load.sent
            wait_for(lambda b=before: load.sent >= b + 3000, "the load to progress")
            samples.append(max(dir_bytes(d) for d in dirs))
        assert samples[-1] <= max(samples[:3]) + 4 * (1 << 20), samples
        # A reader below the log start: OFFSET_OUT_OF_RANGE (the read API's Fetch) ...
        start, _ = offsets(cluster, "timed")

        async def fetch_below(client):
            return await client.fetch("timed", 0, 0, max_bytes=1 << 16)

        r = with_client(leader_read_api(cluster, "timed"), fetch_below)
        assert r.error_code == ERR_OFFSET_OUT_OF_RANGE and r.log_start_offset >= start > 0
        # ... and a Kafka consumer that fell behind resets to earliest as configured.
        c = Consumer(
            {
                "bootstrap.servers": cluster.bootstrap_servers,
                "group.id": "behind",
                "auto.offset.reset": "earliest",
                # The earliest record of a 4 s topic is always about to expire: a slow
                # client (500 ms back-off by default) would reset forever, as on Kafka.
                "fetch.error.backoff.ms": 10,
            }
        )
        c.assign([TopicPartition("timed", 0, 0)])
        msg = wait_for(lambda: (m := c.poll(1)) is not None and m.error() is None and m, "a record")
        assert msg.offset() >= start > 0
        c.close()
        # A pipeline commits on "held" at its current end: retention (2 s) stops there while
        # the pipeline commits no further; then the hard limit cuts it.
        held = offsets(cluster, "held")[1]
        commit(held)
        wait_for(lambda: offsets(cluster, "held")[0] == held, "retention up to the commit")
        for _ in range(3):  # retention runs every 300 ms: it keeps stopping there
            before = load.sent
            wait_for(lambda b=before: load.sent >= b + 1000, "the load to progress")
            assert offsets(cluster, "held")[0] == held  # still held at its commit
        res = ConfigResource(
            "topic",
            "held",
            incremental_configs=[
                ConfigEntry(
                    "raftsink.pipeline.hold.max.ms",
                    "3000",
                    incremental_operation=AlterConfigOpType.SET,
                )
            ],
        )
        admin.incremental_alter_configs([res])[res].result(60)
        wait_for(lambda: offsets(cluster, "held")[0] > held, "the hard limit to cut the hold")
        # Far more is written than is kept: the load goes on until twice the largest
        # directory sampled went through (each partition's group keeps its own segment
        # and snapshots, so partition groups keep more than one log did: the samples'
        # flatness above is the check that the space comes back).
        wait_for(
            lambda: load.sent * len(VALUE) > 2 * max(samples),
            "twice the kept bytes written",
            timeout=180,
        )
    finally:
        if load is not None:
            load.halt.set()
            load.join(60)
        cluster.stop()
