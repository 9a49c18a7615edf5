"""What a node reports beyond its collectors: the counters and gauges added to `/metrics`
and the sections added to the read API's Status (`raftsink status`). Functions of a
started SinkNode (sink/node/assemble.py), reading only its public parts."""

from __future__ import annotations

from typing import Any

from raftlog.latency import LatencyHistogram
from raftlog.runtime import stall_watch


def extra_metrics(node: Any) -> dict[str, float]:
    """The node's own counters beside the registry's collectors (`/metrics`)."""
    kafka, svc = node.kafka, node.service
    assert kafka is not None and svc is not None
    return {
        "kafka_connections": len(kafka.connections),
        "kafka_rejected_connections": kafka.rejected_connections,
        # requests answered UNKNOWN_SERVER_ERROR because a handler raised (a bug: see the log)
        "kafka_handler_errors": kafka.handler_errors,
        "produce_inflight_duplicates": svc.inflight_duplicates,
        "produce_committed_duplicates": svc.committed_duplicates,
        "produce_sequence_gaps_retried": svc.sequence_gaps.retried,
        "produce_sequence_gaps_refused": svc.sequence_gaps.refused,
        # consumer-group offsets removed by this node's expiry entries
        "group_offsets_expired": svc.offsets.expired_total,
        # consumer groups coordinated here (sink.groups): live groups, rebalances
        # started and members evicted by this node since it started
        "groups": len(svc.groups.core.groups),
        "group_rebalances": svc.groups.core.rebalances,
        "group_evictions": svc.groups.core.evictions,
        **(node.disk.counters() if node.disk is not None else {}),
        **(node.retention.counters() if node.retention is not None else {}),
        "disk_refused_appends": node.transport.refused_appends,
        "disk_refused_transfers": node.transport.refused_transfers,
        "tls_reloads": node.tls.reloads if node.tls is not None else 0,
        "tls_failed_reloads": node.tls.failed_reloads if node.tls is not None else 0,
        # gc pauses and event-loop lag (raftlog.runtime.stall_watch; `raftsink serve`)
        **(watch.counters() if (watch := stall_watch.installed()) else {}),
    }


def kafka_stats(node: Any) -> dict[str, float]:
    """The Kafka listeners' overload figures: their shared memory budgets, and
    connections and refusals summed over the listeners (metrics, status)."""
    servers = [k for k in (node.kafka, node.kafka_external) if k is not None]
    if not servers:
        return {}
    out = dict(servers[0].memory.stats())
    for k in servers:
        for name, value in k.stats().items():
            out[name] = out.get(name, 0) + value
    return out


def request_latencies(node: Any) -> dict[str, LatencyHistogram]:
    """API name -> its requests' latency on this node, every Kafka listener's together."""
    out: dict[str, LatencyHistogram] = {}
    for k in (node.kafka, node.kafka_external):
        for name, hist in k.request_seconds.items() if k is not None else ():
            out[name] = out[name].plus(hist) if name in out else hist.snapshot()
    return out


def latency_histograms(node: Any) -> list[tuple[str, str, dict[str, str], LatencyHistogram]]:
    """(name, help, labels, histogram) for /metrics (sink.metrics.HistogramCollector)."""
    out = [
        (
            "kafka_request_seconds",
            "Kafka requests from dispatch until the response is handed to the socket",
            {"api": name},
            hist,
        )
        for name, hist in sorted(request_latencies(node).items())
    ]
    if node.host is not None and node.host.writer is not None:
        out.append(
            (
                "disk_round_seconds",
                "Disk writer rounds: the writes of every group and their fsync round",
                {},
                node.host.writer.stats.round_seconds,
            )
        )
    return out


def extra_gauges(node: Any) -> list[tuple[str, str, dict[str, str], float]]:
    """The node's gauges beside the registry's collectors (`/metrics`)."""
    out = node.disk.gauges() if node.disk is not None else []
    if node.fsm is not None:
        held = len(node.fsm.group_offsets)
        out.append(("group_offsets_committed", "Consumer-group offsets held", {}, held))
    return out


def extra_status(node: Any) -> dict[str, Any]:
    """Added to the read API's Status (`raftsink status`): the Kafka listeners'
    overload figures and, when storage is guarded, the disk guard's state."""
    out: dict[str, Any] = {"kafka": kafka_stats(node)}
    # p50/p99/p99.9/max per API, and the counts a client differences (bench/produce_cpu.py)
    out["kafka_requests"] = {
        name: {**hist.summary_ms(), "histogram": hist.to_json()}
        for name, hist in sorted(request_latencies(node).items())
    }
    if (watch := stall_watch.installed()) is not None:
        out["stalls"] = watch.status()
    if node.service is not None:
        out["quotas"] = node.service.quota_status()
    if node.disk is not None:
        out["disk_guard"] = node.disk.status()
    if node.data_groups is not None and node.host is not None:
        out["data_groups"] = node.data_groups.status()
        if node.balancer is not None:
            out["leader_balance"] = node.balancer.stats()
        out["host"] = node.host.status()
    if node.pipeline_commits is not None:
        out["pipeline_commits"] = {
            "proposed": node.pipeline_commits.proposed,
            "forwarded": node.pipeline_commits.forwarded,
        }
    if node.group_expiry is not None:
        out["producer_expiry_groups"] = {
            "groups": len(node.group_expiry.per_group),
            "expired": node.group_expiry.expired_total,
            "failed": node.group_expiry.failed_rounds,
        }
    if node.leader_poller is not None and node.leaders is not None:
        out["leaders_table"] = {
            "rows": len(node.leaders.rows),
            "polls": node.leader_poller.polls,
            "polls_skipped": node.leader_poller.skipped,  # every group hosted here
            "answers_unchanged": node.leader_poller.unchanged,  # no rows: nothing changed
            "failures": node.leader_poller.failures,
        }
    return out
