"""Prometheus metrics of a node, read from live status at scrape time.

Operators look here, not at logs: Raft role/term/indexes, proposal backlog,
disk batches and fsyncs, transport traffic, and the Kafka front end's counters.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector, CollectorRegistry

from raftlog.latency import LatencyHistogram
from raftlog.runtime import RaftNode
from sink.quotas import ClientQuotaManager


class NodeCollector(Collector):
    """Reads `node.status()` (the runtime's public status) and `transport.stats` at
    each scrape; `extra()` adds counters of the node's other parts (Kafka front end)."""

    def __init__(
        self,
        node: RaftNode,
        transport: Any,
        extra: Callable[[], dict[str, float]] | None = None,
        gauges: Callable[[], list[tuple[str, str, dict[str, str], float]]] | None = None,
    ) -> None:
        self.node = node
        self.transport = transport
        self.extra = extra
        # gauges() -> (name, help, extra labels, value): levels of the node's other
        # parts, e.g. free bytes per data volume (labels {"dir": path}).
        self.gauges = gauges

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
            "raftsink_transport_sent_batches",
            "gRPC writes of Raft message batches (sent_messages / sent_batches: messages per write)",
            ts.sent_batches,
        )
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
        yield counter(
            "raftsink_transport_handler_errors",
            "Received Raft message runs whose group handler raised (dropped; the link stays up)",
            ts.handler_errors,
        )
        yield counter(
            "raftsink_transport_tls_failures",
            "Raft sends refused in the TLS handshake (peer of another CA, expired certificate)",
            ts.tls_failures,
        )
        for name, value in (self.extra() if self.extra else {}).items():
            yield counter(f"raftsink_{name}", name.replace("_", " "), value)
        families: dict[str, GaugeMetricFamily] = {}
        for name, doc, extra_labels, value in self.gauges() if self.gauges else []:
            fam = families.get(name)
            if fam is None:
                fam = families[name] = GaugeMetricFamily(
                    f"raftsink_{name}", doc, labels=[*labels, *extra_labels]
                )
            fam.add_metric([node, *extra_labels.values()], value)
        yield from families.values()


class HistogramCollector(Collector):
    """Latency histograms (raftlog.latency: bounds 100 us x sqrt(2)^k) read at each
    scrape: read() -> (name, help, extra labels, histogram), e.g.
    raftsink_kafka_request_seconds{api="Produce"} and raftsink_disk_round_seconds."""

    def __init__(
        self,
        node_id: int,
        read: Callable[[], list[tuple[str, str, dict[str, str], LatencyHistogram]]],
    ) -> None:
        self.node = str(node_id)
        self.read = read

    def collect(self) -> Iterator[Any]:
        families: dict[str, HistogramMetricFamily] = {}
        for name, doc, extra_labels, hist in self.read():
            fam = families.get(name)
            if fam is None:
                fam = families[name] = HistogramMetricFamily(
                    f"raftsink_{name}", doc, labels=["node", *extra_labels]
                )
            fam.add_metric([self.node, *extra_labels.values()], list(hist.cumulative()), hist.sum_s)
        yield from families.values()


class KafkaCollector(Collector):
    """The Kafka front end's overload limits (issue 21), from `stats()` at each scrape
    (the node's listeners summed, their shared memory budgets once):

    - raftsink_kafka_request_memory_{used,limit,high_water}_bytes, _waiting (gauges)
      and _waits, _waited_bytes, _wait_seconds (counters): the request memory budget,
      how often and how long readers waited for it;
    - raftsink_kafka_fetch_memory_{used,limit}_bytes (gauges), _clamped (counter):
      the Fetch response budget and the Fetches answered with less data;
    - raftsink_kafka_refused_connections{reason} (counter): connections closed at
      accept by reason (max_connections, max_connections_per_ip,
      connection_creation_rate); raftsink_kafka_frame_timeouts (counter).
    """

    GAUGES = (
        "request_memory_used_bytes",
        "request_memory_limit_bytes",
        "request_memory_high_water_bytes",
        "request_memory_waiting",
        "fetch_memory_used_bytes",
        "fetch_memory_limit_bytes",
    )
    COUNTERS = (
        "request_memory_waits",
        "request_memory_waited_bytes",
        "request_memory_wait_seconds",
        "fetch_memory_clamped",
        "frame_timeouts",
    )
    REFUSED = "refused_connections_"

    def __init__(self, node_id: int, stats: Callable[[], dict[str, float]]) -> None:
        self.node = str(node_id)
        self.stats = stats

    def collect(self) -> Iterator[Any]:
        st = self.stats()
        for name in self.GAUGES:
            g = GaugeMetricFamily(f"raftsink_kafka_{name}", name.replace("_", " "), labels=["node"])
            g.add_metric([self.node], st.get(name, 0))
            yield g
        for name in self.COUNTERS:
            c = CounterMetricFamily(
                f"raftsink_kafka_{name}", name.replace("_", " "), labels=["node"]
            )
            c.add_metric([self.node], st.get(name, 0))
            yield c
        refused = CounterMetricFamily(
            "raftsink_kafka_refused_connections",
            "Connections closed at accept, by the limit that refused them",
            labels=["node", "reason"],
        )
        for key, value in sorted(st.items()):
            if key.startswith(self.REFUSED):
                refused.add_metric([self.node, key.removeprefix(self.REFUSED)], value)
        yield refused


class QuotaCollector(Collector):
    """Client quotas per client id (at most quotas.max_client_metrics labels, the rest
    summed under client_id="__other__"): throttle time given and current measured rate,
    for clients a quota applies to."""

    def __init__(self, node: str, quotas: ClientQuotaManager) -> None:
        self.node = node
        self.quotas = quotas

    def collect(self) -> Iterator[Any]:
        labels = ["node", "quota", "client_id"]
        throttled = CounterMetricFamily(
            "raftsink_quota_throttle_seconds",
            "Throttle time given to clients over a quota (their connection muted)",
            labels=labels,
        )
        for (key, client), ms in sorted(self.quotas.throttled_ms_by_client().items()):
            throttled.add_metric([self.node, key, client], ms / 1000.0)
        yield throttled
        rates = GaugeMetricFamily(
            "raftsink_quota_rate",
            "Measured rate of a client under a quota (bytes/s; request_percentage: percent)",
            labels=labels,
        )
        for (key, client), value in sorted(self.quotas.rates_by_client().items()):
            rates.add_metric([self.node, key, client], value)
        yield rates


def make_registry(collector: Collector, *more: Collector) -> CollectorRegistry:
    """A registry holding only the given collectors (no process/platform defaults)."""
    reg = CollectorRegistry(auto_describe=False)
    reg.register(collector)
    for c in more:
        reg.register(c)
    return reg
