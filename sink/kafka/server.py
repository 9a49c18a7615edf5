"""KafkaServer: the asyncio TCP listener speaking the Kafka protocol."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import TYPE_CHECKING

from sink.kafka.connection import Connection
from sink.kafka.handlers import SUPPORTED, Advertised, HandlerContext
from sink.kafka.limits import KafkaLimits

if TYPE_CHECKING:  # only typed against: sink.kafka imports nothing of sink.service
    from sink.service import SinkService

log = logging.getLogger("sink.kafka")


class KafkaServer:
    """Serves one SinkService on host:port (port 0: ephemeral, see bound_port).

    advertised: the broker addresses this listener's Metadata names (node id ->
    (host, port)); None means the service's own (internal) ones. A node may run
    several listeners over one service, e.g. one for a container network.
    """

    def __init__(
        self,
        service: SinkService,
        host: str,
        port: int,
        limits: KafkaLimits | None = None,
        advertised: dict[int, tuple[str, int]] | None = None,
    ) -> None:
        self.service = service
        self.host = host
        self.port = port
        self.limits = limits or KafkaLimits()
        if advertised is None:
            adv = Advertised(service.brokers, forwarded_replies_usable=True)  # shared, not copied
        else:
            if set(advertised) != set(service.brokers):
                raise ValueError("advertised addresses must name every node")
            adv = Advertised(dict(advertised), forwarded_replies_usable=False)
        self.context = HandlerContext.of_node(service, service.fsm, self.limits, adv, SUPPORTED)
        self.bound_port = 0
        self.pending_produce_bytes = 0
        self.room_waiters: set[asyncio.Event] = set()
        self.connections: set[Connection] = set()
        self.rejected_connections = 0
        self.handler_errors = 0
        """Requests answered UNKNOWN_SERVER_ERROR because their handler raised (bugs)."""
        self._server: asyncio.base_events.Server | None = None
        self._tasks: set[asyncio.Task] = set()

    async def start(self) -> None:
        self._server = await asyncio.start_server(
            self._on_client, self.host, self.port, limit=self.limits.read_buffer_bytes
        )
        self.bound_port = self._server.sockets[0].getsockname()[1]
        log.info("kafka.listen host=%s port=%d", self.host, self.bound_port)

    async def _on_client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if len(self.connections) >= self.limits.max_connections:
            self.rejected_connections += 1
            log.warning("kafka.reject max_connections=%d reached", self.limits.max_connections)
            writer.close()
            return
        conn = Connection(self, reader, writer)
        self.connections.add(conn)
        task = asyncio.current_task()
        if task is not None:
            self._tasks.add(task)
        try:
            await conn.run()
        finally:
            self.connections.discard(conn)
            if task is not None:
                self._tasks.discard(task)

    def release_produce_bytes(self, n: int) -> None:
        if n:
            self.pending_produce_bytes -= n
            for ev in list(self.room_waiters):
                ev.set()

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        for conn in list(self.connections):
            conn.abort()
        if self._tasks:  # connection tasks end on their own once their socket is gone
            _, pending = await asyncio.wait(set(self._tasks), timeout=2.0)
            for t in pending:
                t.cancel()
        if self._server is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 2.0)
            self._server = None
