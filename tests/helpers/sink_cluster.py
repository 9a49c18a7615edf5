"""An in-process raftsink cluster for tests: one `sink.node.SinkNode` per node (the
same wiring as `raftsink serve`) over a LocalNetwork, each Kafka listener and read
API on 127.0.0.1 with an ephemeral port (the Kafka port advertised in Metadata).

The nodes run ONE Raft group (cluster.partition_groups off), not the default partition
groups: peers' read API addresses are only labels here (":0"), and partition groups find
each partition's leader through the peers' read APIs (sink/node/leaders.py), so
tests of the partition-groups layout use real processes (SinkProcessCluster, whose
default is the node's). The suites on this cluster are about the Kafka front end, which
is the same code in both layouts, and they keep the one-group layout tested.

SinkCluster runs its event loop in a background thread so that blocking
clients (confluent-kafka, kafka-python, kcat subprocesses) can be used from
the test thread; call() runs a coroutine on the cluster's loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
import time
from collections.abc import Callable, Coroutine, Iterator
from typing import Any

from raftlog.runtime import NodeOptions
from raftlog.transport import LocalNetwork
from sink.config import (
    ClusterSection,
    KafkaSection,
    NodeSection,
    Peer,
    RaftSection,
    RetentionSection,
    SinkConfig,
)
from sink.kafka import KafkaLimits
from sink.node import SinkNode
from sink.security.authz_options import AuthorizationOptions
from sink.service import SinkOptions

FAST = NodeOptions(tick_ms=10, election_ticks=10)

STEADY = NodeOptions(tick_ms=50, election_ticks=20)
"""A one-second election timeout: on the shared 2-core machine at a load of 15+, FAST's
100 ms lets elections flap, so every admin call meets a leader change."""


class SinkCluster:
    def __init__(
        self,
        base: str,
        n: int = 3,
        *,
        options: NodeOptions = FAST,
        auto_create_topics: bool = True,
        default_partitions: int = 1,
        limits: KafkaLimits | None = None,
        sink_options: SinkOptions | None = None,
    ) -> None:
        self.base = base
        self.ids = list(range(1, n + 1))
        self.options = options
        self.auto_create = auto_create_topics
        self.default_partitions = default_partitions
        self.limits = limits
        self.sink_options = sink_options
        self.net = LocalNetwork()
        self.nodes: dict[int, SinkNode] = {}
        self.ports: dict[int, int] = {}
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self.loop.run_forever, name="sink-cluster", daemon=True
        )

    # ----------------------------------------------------------- threading

    def call(self, coro: Coroutine, timeout: float = 60.0) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def run(self, fn: Callable[[], Any], timeout: float = 10.0) -> Any:
        """Run a plain function on the cluster loop (to read node state safely)."""

        async def wrap() -> Any:
            return fn()

        return self.call(wrap(), timeout)

    # ------------------------------------------------------------ lifecycle

    def start(self) -> None:
        self._thread.start()
        self.call(self._start())

    async def _start(self) -> None:
        for i in self.ids:
            await self.start_node(i)

    def config(self, i: int) -> SinkConfig:
        """Node i's configuration: Raft over the in-process network (addresses are
        only labels there), Kafka and read API on ephemeral 127.0.0.1 ports. Peers'
        read API addresses stay ":0", so a follower's read API cannot forward to
        the leader here; the process clusters cover that."""
        peers = {
            j: Peer(j, f"local:{j}", f"127.0.0.1:{self.ports.get(j, 0)}", "127.0.0.1:0")
            for j in self.ids
        }
        return SinkConfig(
            node=NodeSection(id=i, data_dir=os.path.join(self.base, f"n{i}"), peers=peers),
            kafka=KafkaSection(
                cluster_id="raftsink-test",
                default_partitions=self.default_partitions,
                auto_create_topics=self.auto_create,
                limits=self.limits or KafkaLimits(),
                service=self.sink_options or SinkOptions(),
            ),
            raft=RaftSection(options=self.options),
            storage=self.options.storage,
            retention=RetentionSection(snapshot_every_entries=self.options.snapshot_every_entries),
            cluster=ClusterSection(partition_groups=False),  # see the module's docstring
            # Plain test clusters: no ACL checks (`raftsink serve` checks by default).
            authorization=AuthorizationOptions(enabled=False),
        )

    async def start_node(self, i: int) -> SinkNode:
        # The one node wiring (sink.node), with the in-process transport injected.
        sn = SinkNode(self.config(i), transport=self.net.transport(i), seed=i)
        await sn.start()
        assert sn.kafka is not None
        self.ports[i] = sn.kafka.bound_port
        self.nodes[i] = sn
        # Every service advertises every node's (now known) Kafka address.
        for other in self.nodes.values():
            assert other.service is not None
            for j, port in self.ports.items():
                other.service.brokers[j] = ("127.0.0.1", port)
        return sn

    async def stop_node(self, i: int) -> None:
        await self.nodes.pop(i).stop()

    def stop(self) -> None:
        async def stop_all() -> None:
            for i in list(self.nodes):
                await self.stop_node(i)

        try:
            self.call(stop_all())
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(10)

    # -------------------------------------------------------------- queries

    @property
    def bootstrap(self) -> str:
        return ",".join(f"127.0.0.1:{self.ports[i]}" for i in sorted(self.nodes))

    def leader_id(self, timeout: float = 20.0, exclude: int = 0) -> int:
        """Wait for one ready leader (own-term entry applied) and return its id."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:

            def find() -> int:
                ready = [
                    i for i, sn in self.nodes.items() if sn.service.leader_ready() and i != exclude
                ]
                return ready[0] if len(ready) == 1 else 0

            lead = self.run(find)
            if lead:
                return lead
            time.sleep(0.01)
        raise AssertionError("timed out waiting for a ready leader")

    def wait_for(
        self, cond: Callable[[], bool], timeout: float = 20.0, what: str = "condition"
    ) -> None:
        deadline = time.monotonic() + timeout
        while not self.run(cond):
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting for {what}")
            time.sleep(0.01)


@contextlib.contextmanager
def steady_cluster(base: str, **kw: Any) -> Iterator[SinkCluster]:
    """A started 3-node SinkCluster on STEADY options with a ready leader; stopped after."""
    c = SinkCluster(base, options=STEADY, **kw)
    c.start()
    try:
        c.leader_id()
        yield c
    finally:
        c.stop()
