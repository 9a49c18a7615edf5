"""One raftsink node: Raft group + Kafka listener + read API + metrics.

    RaftNode (raftlog) --on_apply--> SinkStateMachine (sink.state)
         ^                                   |
    SinkService (produce/fetch glue)  <------+  read side
         ^                    ^
    KafkaServer           ReadApiService (gRPC, connectors)

`raftsink serve` runs `serve(config)`; SIGTERM and SIGINT stop it cleanly.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
from collections.abc import Coroutine
from typing import Any, TypeVar

import grpc
from prometheus_client import start_http_server

from raftlog.runtime import NodeOptions, RaftNode
from raftlog.runtime.gc_tuning import tune_gc_for_latency
from raftlog.storage import StorageOptions
from raftlog.transport import GrpcTransport
from sink.config import SinkConfig
from sink.metrics import NodeCollector, make_registry
from sink.readapi.server import ReadApiService

T = TypeVar("T")

log = logging.getLogger("sink.server")


def _hostport(value: str) -> tuple[str, int]:
    host, _, port = value.rpartition(":")
    return host, int(port)


class SinkNodeServer:
    def __init__(self, config: SinkConfig) -> None:
        self.config = config
        self.node: RaftNode | None = None
        self.kafka = None
        self._read_server: grpc.aio.Server | None = None
        self._metrics_server = None

    async def start(self) -> None:
        from sink.kafka import KafkaLimits, KafkaServer
        from sink.service import SinkService
        from sink.state import SinkStateMachine

        cfg = self.config
        os.makedirs(cfg.data_dir, exist_ok=True)
        others = {i: p.raft for i, p in cfg.peers.items() if i != cfg.node_id}
        self.transport = GrpcTransport(cfg.node_id, cfg.listen("raft"), others)
        self.fsm = SinkStateMachine(
            default_partitions=cfg.default_partitions, auto_create_topics=cfg.auto_create_topics
        )
        options = NodeOptions(
            tick_ms=cfg.tick_ms,
            election_ticks=cfg.election_ticks,
            storage=StorageOptions(write_caching=cfg.write_caching),
            snapshot_every_entries=cfg.snapshot_every_entries,
            snapshot_keep_entries=0,  # retention decides, in _compaction_limit
        )
        self.node = RaftNode(
            cfg.node_id,
            cfg.data_dir,
            {i: p.raft for i, p in cfg.peers.items()},
            self.fsm,
            self.transport,
            options,
            compaction_limit=self._compaction_limit,
        )
        node = self.node
        await node.start()
        # The FSM serves batches from the Raft log (the queue exists once the
        # node has opened its storage; applying starts on the next loop turn).
        self.fsm.attach_log(node.queue.read, node.queue.first_index)
        self.service = SinkService(
            node,
            self.fsm,
            node_id=cfg.node_id,
            brokers={i: _hostport(p.kafka) for i, p in cfg.peers.items()},
            cluster_id=cfg.cluster_id,
        )
        host, port = _hostport(cfg.listen("kafka"))
        self.kafka = KafkaServer(
            self.service, host, port, KafkaLimits(max_frame_bytes=cfg.max_frame_bytes)
        )
        await self.kafka.start()
        self.kafka_external = None
        if cfg.kafka_external_listen:
            ehost, eport = _hostport(cfg.kafka_external_listen)
            self.kafka_external = KafkaServer(
                self.service,
                ehost,
                eport,
                KafkaLimits(max_frame_bytes=cfg.max_frame_bytes),
                advertised={i: _hostport(a) for i, a in cfg.external_kafka.items()},
            )
            await self.kafka_external.start()
        read_api = ReadApiService(
            node,
            self.fsm,
            self._wait_for_data,
            leader_read_api=lambda i: cfg.peers[i].read_api if i in cfg.peers else None,
        )
        self._read_server = grpc.aio.server(
            options=[("grpc.max_send_message_length", 128 * 1024 * 1024)]
        )
        self._read_server.add_generic_rpc_handlers((read_api.handler(),))
        if self._read_server.add_insecure_port(cfg.listen("read_api")) == 0:
            raise OSError(f"cannot listen on {cfg.listen('read_api')} (read API)")
        await self._read_server.start()
        if cfg.metrics_listen:
            mhost, mport = _hostport(cfg.metrics_listen)
            svc = self.service

            def extra() -> dict[str, float]:
                return {
                    "kafka_connections": len(self.kafka.connections),
                    "kafka_rejected_connections": self.kafka.rejected_connections,
                    "produce_inflight_duplicates": svc.inflight_duplicates,
                    "produce_committed_duplicates": svc.committed_duplicates,
                }

            registry = make_registry(NodeCollector(node, self.transport, extra))
            self._metrics_server, _ = start_http_server(mport, addr=mhost, registry=registry)
        log.warning(
            "sink.ready node=%d kafka=%s raft=%s read_api=%s",
            cfg.node_id,
            cfg.me.kafka,
            cfg.listen("raft"),
            cfg.listen("read_api"),
        )

    def _compaction_limit(self) -> int | None:
        """Retention: compact to retention_max_entries, never past data a
        registered pipeline still needs, unless the hard limit forces it."""
        cfg, node = self.config, self.node
        applied = node.applied
        limit = applied - cfg.retention_max_entries
        floor = self.fsm.retention_floor_index()
        if floor is not None:
            limit = min(limit, floor)
        if cfg.retention_hard_max_entries:
            limit = max(limit, applied - cfg.retention_hard_max_entries)
        return limit

    async def _wait_for_data(self, topic: str, partition: int, offset: int, timeout: float) -> None:
        """Long poll of the read API: until data past offset is applied, or timeout."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while self.fsm.high_watermark(topic, partition) <= offset:
            remaining = deadline - loop.time()
            if remaining <= 0:
                return
            event = self.fsm.data_event()
            try:
                await asyncio.wait_for(event.wait(), remaining)
            except TimeoutError:
                return

    async def stop(self) -> None:
        for kafka in (self.kafka, getattr(self, "kafka_external", None)):
            if kafka is not None:
                await kafka.stop()
        if self._read_server is not None:
            await self._read_server.stop(grace=0.5)
        if self._metrics_server is not None:
            self._metrics_server.shutdown()
        if self.node is not None:
            await self.node.stop()


def run_on_event_loop(kind: str, main: Coroutine[Any, Any, T]) -> T:
    """Run main on the configured event loop ("uvloop" or "asyncio", see SinkConfig)."""
    if kind == "uvloop":
        import uvloop

        return uvloop.run(main)
    return asyncio.run(main)


async def serve(config: SinkConfig, ready_line: bool = True) -> None:
    """Run a node until SIGTERM/SIGINT; prints one 'ready' line on stdout when serving."""
    server = SinkNodeServer(config)
    await server.start()
    tune_gc_for_latency()
    if ready_line:
        print(
            f"ready node={config.node_id} kafka={config.me.kafka} read_api={config.me.read_api}",
            flush=True,
        )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    fatal = asyncio.ensure_future(_watch_fatal(server))
    await asyncio.wait(
        [asyncio.ensure_future(stop.wait()), fatal], return_when=asyncio.FIRST_COMPLETED
    )
    await server.stop()
    if server.node is not None and server.node.fatal_error is not None:
        raise SystemExit(
            f"node {config.node_id} stopped on a fatal error: {server.node.fatal_error!r}"
        )


async def _watch_fatal(server: SinkNodeServer) -> None:
    """A storage failure stops the node: exit loudly instead of serving half-dead."""
    while server.node is not None and server.node.fatal_error is None:
        await asyncio.sleep(0.5)
