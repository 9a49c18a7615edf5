"""Prometheus metrics of a node, read from live status at scrape time.

Operators look here, not at logs: Raft role/term/indexes, proposal backlog,
disk batches and fsyncs, transport traffic, and the Kafka front end's counters.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector, CollectorRegistry

from raftlog.runtime import RaftNode


class NodeCollector(Collector):
    """Reads `node.status()` (the runtime's public status) and `transport.stats` at
    each scrape; `extra()` adds counters of the node's other parts (Kafka front end)."""

    def __init__(
        self,
        node: RaftNode,
        transport: Any,
        extra: Callable[[], dict[str, float]] | None = None,
    ) -> None:
        self.node = node
        self.transport = transport
        self.extra = extra

    def collect(self) -> Iterator[Any]:
        st = self.node.status()
        labels = ["node"]
        node = str(st["id"])

        def gauge(name: str, doc: str, value: float) -> GaugeMetricFamily:
            g = GaugeMetricFamily(name, doc, labels=labels)
            g.add_metric([node], value)
            return g

        def counter(name: str, doc: str, value: float) -> CounterMetricFamily:
            c = CounterMetricFamily(name, doc, labels=labels)
            c.add_metric([node], value)
            return c

        yield gauge("raftsink_raft_term", "Current Raft term", st["term"])
        yield gauge(
            "raftsink_raft_is_leader", "1 if this node leads", 1 if st["role"] == "leader" else 0
        )
        yield gauge("raftsink_raft_leader_id", "Known leader (0: none)", st["leader"])
        yield gauge("raftsink_raft_commit_index", "Commit index", st["commit"])
        yield gauge("raftsink_raft_applied_index", "Applied index", st["applied"])
        yield gauge("raftsink_raft_last_index", "Last log index", st["last_index"])
        yield gauge("raftsink_raft_durable_index", "Last index durable here", st["durable_index"])
        yield gauge(
            "raftsink_raft_pending_proposals", "Proposals not yet applied", st["pending_proposals"]
        )
        disk = st.get("disk", {})
        yield counter("raftsink_disk_batches", "Disk queue write batches", disk.get("batches", 0))
        yield counter("raftsink_disk_fsyncs", "fdatasync calls", disk.get("fsyncs", 0))
        yield counter(
            "raftsink_disk_busy_seconds",
            "Time spent writing and syncing",
            disk.get("busy_seconds", 0),
        )
        ts = self.transport.stats
        yield counter("raftsink_transport_sent_messages", "Raft messages sent", ts.sent_messages)
        yield counter(
            "raftsink_transport_dropped_messages", "Raft messages dropped", ts.dropped_messages
        )
        yield counter(
            "raftsink_transport_received_messages", "Raft messages received", ts.received_messages
        )
        yield counter(
            "raftsink_transport_rejected_batches",
            "Invalid Raft batches rejected",
            ts.rejected_batches,
        )
        yield counter(
            "raftsink_transport_unknown_group_messages",
            "Raft messages dropped because their group is not hosted here",
            ts.unknown_group_messages,
        )
        for name, value in (self.extra() if self.extra else {}).items():
            yield counter(f"raftsink_{name}", name.replace("_", " "), value)


def make_registry(collector: Collector) -> CollectorRegistry:
    """A registry holding only `collector` (no process/platform defaults)."""
    reg = CollectorRegistry(auto_describe=False)
    reg.register(collector)
    return reg
