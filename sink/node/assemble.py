"""SinkNode: the one place a raftsink node is assembled from its configuration.

    RaftNode (raftlog) --on_apply--> SinkStateMachine (sink.state)
         ^                                   |
    SinkService (produce/fetch glue)  <------+  read side
         ^                    ^
    KafkaServer(s)        ReadApiService (gRPC, connectors)      /metrics (Prometheus)

`raftsink serve` (sink.node.serve) and the in-process test cluster
(tests/helpers/sink_cluster.py) both build nodes here; nothing else wires one.
A caller may inject the Raft transport (tests: a LocalNetwork's) and the RNG
seed; everything else comes from the SinkConfig.

Start order and why:
  1. storage + Raft node: the state machine's read side needs the node's log;
  2. SinkService over node + state machine;
  3. Kafka listener(s), 4. read API, 5. metrics: each serves only once the
     service exists, so no request ever meets a half-built node.
stop() runs the reverse, so no listener outlives the node it answers for.
"""

from __future__ import annotations

import asyncio
import logging
import os
from typing import Any

import grpc
from prometheus_client import start_http_server

from raftlog.runtime import RaftNode
from raftlog.transport import GrpcTransport, TransportOptions
from sink.config import SinkConfig, parse_hostport
from sink.kafka.server import KafkaServer
from sink.metrics import NodeCollector, make_registry
from sink.readapi.server import ReadApiService
from sink.service import SinkService
from sink.state import SinkStateMachine

log = logging.getLogger("sink.node")

READ_API_MAX_MESSAGE_BYTES = 128 * 1024 * 1024
"""Largest read-API response (a Fetch of many batches)."""


class SinkNode:
    """One raftsink node. Attributes are valid after start(): node (RaftNode), fsm,
    service, kafka (the main listener), kafka_external (or None), transport,
    read_api_port and metrics_port (bound ports; 0 when not served)."""

    def __init__(
        self, config: SinkConfig, *, transport: Any | None = None, seed: int | None = None
    ) -> None:
        self.config = config
        self._transport_override = transport
        self._seed = seed
        self.node: RaftNode | None = None
        self.fsm: SinkStateMachine | None = None
        self.service: SinkService | None = None
        self.kafka: KafkaServer | None = None
        self.kafka_external: KafkaServer | None = None
        self.transport: Any = None
        self.read_api_port = 0
        self.metrics_port = 0
        self._read_server: grpc.aio.Server | None = None
        self._metrics_server: Any = None

    @property
    def server(self) -> KafkaServer | None:
        """The main Kafka listener (the name the in-process tests use)."""
        return self.kafka

    # ------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        cfg = self.config
        os.makedirs(cfg.data_dir, exist_ok=True)
        self.transport = self._transport_override or self._grpc_transport()
        self.fsm = SinkStateMachine(
            default_partitions=cfg.kafka.default_partitions,
            auto_create_topics=cfg.kafka.auto_create_topics,
        )
        self.node = RaftNode(
            cfg.node_id,
            cfg.data_dir,
            {i: p.raft for i, p in cfg.peers.items()},
            self.fsm,
            self.transport,
            cfg.node_options(),
            seed=self._seed,
            compaction_limit=self._compaction_limit,
        )
        await self.node.start()
        # The state machine serves batches from the committed Raft log (applying
        # starts on the next loop turn, so it is attached before any apply).
        self.fsm.attach_log(self.node.read_committed, self.node.first_index)
        self.service = SinkService(
            self.node,
            self.fsm,
            node_id=cfg.node_id,
            brokers={i: parse_hostport("node.peers", p.kafka) for i, p in cfg.peers.items()},
            cluster_id=cfg.kafka.cluster_id,
            options=cfg.kafka.service,
        )
        await self._start_kafka()
        await self._start_read_api()
        self._start_metrics()
        log.warning(
            "sink.ready node=%d kafka=%s raft=%s read_api=%s",
            cfg.node_id,
            cfg.me.kafka,
            cfg.listen("raft"),
            cfg.listen("read_api"),
        )

    def _grpc_transport(self) -> GrpcTransport:
        cfg = self.config
        others = {i: p.raft for i, p in cfg.peers.items() if i != cfg.node_id}
        options: TransportOptions = cfg.transport
        return GrpcTransport(cfg.node_id, cfg.listen("raft"), others, options=options)

    async def _start_kafka(self) -> None:
        cfg = self.config
        host, port = parse_hostport("kafka.listen", cfg.listen("kafka"))
        self.kafka = KafkaServer(self.service, host, port, cfg.kafka.limits)
        await self.kafka.start()
        if cfg.kafka.external_listen:
            ehost, eport = parse_hostport("kafka.external_listen", cfg.kafka.external_listen)
            advertised = {
                i: parse_hostport("kafka.external_addresses", a)
                for i, a in cfg.kafka.external_addresses.items()
            }
            self.kafka_external = KafkaServer(
                self.service, ehost, eport, cfg.kafka.limits, advertised=advertised
            )
            await self.kafka_external.start()

    async def _start_read_api(self) -> None:
        cfg = self.config
        read_api = ReadApiService(
            self.node,
            self.fsm,
            self._wait_for_data,
            leader_read_api=lambda i: cfg.peers[i].read_api if i in cfg.peers else None,
        )
        server = grpc.aio.server(
            options=[("grpc.max_send_message_length", READ_API_MAX_MESSAGE_BYTES)]
        )
        server.add_generic_rpc_handlers((read_api.handler(),))
        self.read_api_port = server.add_insecure_port(cfg.listen("read_api"))
        if self.read_api_port == 0:
            raise OSError(f"cannot listen on {cfg.listen('read_api')} (read API)")
        await server.start()
        self._read_server = server

    def _start_metrics(self) -> None:
        cfg = self.config
        if not cfg.node.metrics_listen:
            return
        host, port = parse_hostport("node.metrics_listen", cfg.node.metrics_listen)
        registry = make_registry(NodeCollector(self.node, self.transport, self._extra_metrics))
        self._metrics_server, _ = start_http_server(port, addr=host, registry=registry)
        self.metrics_port = self._metrics_server.server_port

    def _extra_metrics(self) -> dict[str, float]:
        kafka, svc = self.kafka, self.service
        assert kafka is not None and svc is not None
        return {
            "kafka_connections": len(kafka.connections),
            "kafka_rejected_connections": kafka.rejected_connections,
            # requests answered UNKNOWN_SERVER_ERROR because a handler raised (a bug: see the log)
            "kafka_handler_errors": kafka.handler_errors,
            "produce_inflight_duplicates": svc.inflight_duplicates,
            "produce_committed_duplicates": svc.committed_duplicates,
        }

    async def stop(self) -> None:
        for kafka in (self.kafka, self.kafka_external):
            if kafka is not None:
                await kafka.stop()
        if self._read_server is not None:
            await self._read_server.stop(grace=0.5)
        if self._metrics_server is not None:
            self._metrics_server.shutdown()
        if self.node is not None:
            await self.node.stop()

    @property
    def fatal_error(self) -> BaseException | None:
        """The storage failure that stopped the Raft node, if any."""
        return self.node.fatal_error if self.node is not None else None

    # ---------------------------------------------------- policies of the node

    def _compaction_limit(self) -> int | None:
        """Retention: compact to retention.max_entries, never past data a registered
        pipeline still needs, unless retention.hard_max_entries forces it."""
        retention, node, fsm = self.config.retention, self.node, self.fsm
        assert node is not None and fsm is not None
        applied = node.applied
        limit = applied - retention.max_entries
        floor = fsm.retention_floor_index()
        if floor is not None:
            limit = min(limit, floor)
        if retention.hard_max_entries:
            limit = max(limit, applied - retention.hard_max_entries)
        return limit

    async def _wait_for_data(self, topic: str, partition: int, offset: int, timeout: float) -> None:
        """Long poll of the read API: until data past offset is applied, or timeout."""
        fsm = self.fsm
        assert fsm is not None
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while fsm.high_watermark(topic, partition) <= offset:
            remaining = deadline - loop.time()
            if remaining <= 0:
                return
            event = fsm.data_event()
            try:
                await asyncio.wait_for(event.wait(), remaining)
            except TimeoutError:
                return
