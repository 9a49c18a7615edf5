"""The read API against broken requests: clear error codes, the node keeps serving."""

from __future__ import annotations

import asyncio

import grpc
import pytest
from confluent_kafka import Producer

from sink.process_cluster import SinkProcessCluster
from sink.readapi import (
    ERR_INVALID_REQUEST,
    ERR_OFFSET_OUT_OF_RANGE,
    ERR_UNKNOWN_TOPIC_OR_PARTITION,
    ReadApiClient,
)


def test_broken_read_api_requests(tmp_path):
    cluster = SinkProcessCluster(str(tmp_path))
    cluster.start()
    try:
        leader = asyncio.run(cluster.wait_ready())
        p = Producer({"bootstrap.servers": cluster.bootstrap_servers, "log_level": 2})
        p.produce("t", b"x")
        assert p.flush(30) == 0
        address = cluster.peers[leader].read_api

        async def applied_here() -> None:
            # With partition groups this node may be a follower of t/0's group: its
            # replica applies the record a moment after the leader acknowledged it.
            c = ReadApiClient(address)
            deadline = asyncio.get_running_loop().time() + 30
            while (await c.status())["partitions"].get("t/0") != 1:
                assert asyncio.get_running_loop().time() < deadline, "t/0 not applied here"
                await asyncio.sleep(0.05)
            await c.close()

        async def scenario() -> None:
            c = ReadApiClient(address)
            assert (await c.fetch("nope", 0, 0)).error_code == ERR_UNKNOWN_TOPIC_OR_PARTITION
            assert (await c.fetch("t", -1, 0)).error_code == ERR_UNKNOWN_TOPIC_OR_PARTITION
            assert (await c.fetch("t", 7, 0)).error_code == ERR_UNKNOWN_TOPIC_OR_PARTITION
            assert (await c.fetch("t", 0, 99)).error_code == ERR_OFFSET_OUT_OF_RANGE
            assert (await c.fetch("t", 0, -5)).error_code == ERR_OFFSET_OUT_OF_RANGE
            huge = await c.fetch("t", 0, 0, max_bytes=2**31 - 1)  # capped, still served
            assert huge.error_code == 0 and len(huge.batches) == 1
            assert (await c.commit("", {("t", 0): 1})).error_code == ERR_INVALID_REQUEST
            # Not a protobuf at all: a gRPC error, not a crash.
            async with grpc.aio.insecure_channel(address) as ch:
                raw = ch.unary_unary("/raftsink.SinkRead/Fetch")
                with pytest.raises(grpc.aio.AioRpcError):
                    await raw(b"\xff\xff\xff\xff garbage")
            st = await c.status()
            assert st["role"] == "leader" and st["partitions"]["t/0"] == 1
            await c.close()

        asyncio.run(applied_here())
        asyncio.run(scenario())
        assert not cluster.exited()
    finally:
        cluster.stop()
