"""What a SinkNode serves (a part of sink.node.assemble.SinkNode, holding no state of
its own: every field is SinkNode's, set in its __init__).

The Kafka listener(s), drawing on one memory budget; the read API (gRPC, with the
Members call); the Prometheus /metrics endpoint. Each starts only once the
SinkService exists (start order steps 3-5, sink.node.assemble).
"""

from __future__ import annotations

from typing import Any

import grpc
from prometheus_client import start_http_server

from raftlog.latency import LatencyHistogram
from sink.config import parse_hostport
from sink.kafka import NodeMemory
from sink.kafka.server import KafkaServer
from sink.members.drain import Drainer
from sink.members.rpc import MembersEndpoint
from sink.metrics import (
    HistogramCollector,
    KafkaCollector,
    NodeCollector,
    QuotaCollector,
    make_registry,
)
from sink.node import observe
from sink.node.balance_driver import BalancerCollector
from sink.readapi.server import ReadApiService
from sink.security.principal import parse_rules

READ_API_MAX_MESSAGE_BYTES = 128 * 1024 * 1024
"""Largest read-API response (a Fetch of many batches)."""


class ListenerWiring:
    """The listeners part of SinkNode (no state of its own)."""

    async def _start_kafka(self) -> None:
        cfg = self.config
        host, port = parse_hostport("kafka.listen", cfg.listen("kafka"))
        # One memory budget for the node: every listener draws on it.
        memory = NodeMemory.of(cfg.kafka.limits)
        ssl_context = self.tls.kafka if self.tls is not None else None
        policy, relay = self._sasl()
        security = {
            "ssl_context": ssl_context,
            "forward_tls": (lambda: ssl_context.forward) if ssl_context is not None else None,
            "sasl": policy,
            "relay_login": relay,
            "principal_rules": parse_rules(cfg.authorization.tls_principal_rules),
        }
        self.kafka = KafkaServer(
            self.service, host, port, cfg.kafka.limits, memory=memory, **security
        )
        await self.kafka.start()
        if cfg.kafka.external_listen:
            ehost, eport = parse_hostport("kafka.external_listen", cfg.kafka.external_listen)
            advertised = {
                i: parse_hostport("kafka.external_addresses", a)
                for i, a in cfg.kafka.external_addresses.items()
            }
            self.kafka_external = KafkaServer(
                self.service,
                ehost,
                eport,
                cfg.kafka.limits,
                advertised=advertised,
                memory=memory,
                **security,
            )
            await self.kafka_external.start()

    def _members_endpoint(self) -> MembersEndpoint:
        assert self.members is not None and self.member_watch is not None
        self.members_endpoint = MembersEndpoint(
            self.members,
            self._read_api_of,
            self.member_watch.retire,
            client_credentials=self.read_api_client_credentials,
            moves=self.move_ops,
            drainer=(
                Drainer(self.move_ops, self._voter_hosts, self._peers_down)
                if self.move_ops is not None
                else None
            ),
        )
        return self.members_endpoint

    async def _start_read_api(self) -> None:
        cfg = self.config
        routing = self.service.routing if self.service is not None else None
        read_api = ReadApiService(
            self.node,
            self.reads,
            self._wait_for_data,
            leader_read_api=self._read_api_of,
            extra_status=self._extra_status,
            members=self._members_endpoint(),
            client_credentials=self.read_api_client_credentials,
            roles=self.service,
            pipeline_commits=self.pipeline_commits,
            roles_version=routing.roles_version if routing is not None else None,
        )
        server = grpc.aio.server(
            options=[("grpc.max_send_message_length", READ_API_MAX_MESSAGE_BYTES)]
        )
        server.add_generic_rpc_handlers((read_api.handler(),))
        if self.tls is not None and self.tls.grpc is not None and cfg.tls.read_api:
            creds = self.tls.grpc.read_api_server_credentials()
            self.read_api_port = server.add_secure_port(cfg.listen("read_api"), creds)
        else:
            self.read_api_port = server.add_insecure_port(cfg.listen("read_api"))
        if self.read_api_port == 0:
            raise OSError(f"cannot listen on {cfg.listen('read_api')} (read API)")
        await server.start()
        self._read_server = server

    def _read_api_of(self, node_id: int) -> str | None:
        """A member's read API address: the log's, else the `peers` setting's."""
        addr = self.members.address_of(node_id) if self.members else None
        return addr.read_api if addr else None

    def _kafka_servers(self) -> list[KafkaServer]:
        return [k for k in (self.kafka, self.kafka_external) if k is not None]

    def _start_metrics(self) -> None:
        cfg = self.config
        if not cfg.node.metrics_listen:
            return
        host, port = parse_hostport("node.metrics_listen", cfg.node.metrics_listen)
        assert self.service is not None
        registry = make_registry(
            NodeCollector(
                self.node, self.transport, self._extra_metrics, gauges=self._extra_gauges
            ),
            KafkaCollector(cfg.node_id, self.kafka_stats),
            HistogramCollector(cfg.node_id, self._latency_histograms),
            QuotaCollector(str(cfg.node_id), self.service.quotas),
            *(
                [BalancerCollector(cfg.node_id, self.balancer.stats)]
                if self.balancer is not None
                else []
            ),
        )
        self._metrics_server, _ = start_http_server(port, addr=host, registry=registry)
        self.metrics_port = self._metrics_server.server_port

    def _extra_metrics(self) -> dict[str, float]:
        return observe.extra_metrics(self)

    def kafka_stats(self) -> dict[str, float]:
        """The Kafka listeners' overload figures (sink/node/observe.py)."""
        return observe.kafka_stats(self)

    def _latency_histograms(self) -> list[tuple[str, str, dict[str, str], LatencyHistogram]]:
        return observe.latency_histograms(self)

    def _extra_gauges(self) -> list[tuple[str, str, dict[str, str], float]]:
        return observe.extra_gauges(self)

    def _extra_status(self) -> dict[str, Any]:
        return observe.extra_status(self)
