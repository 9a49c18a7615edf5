"""KafkaServer: the asyncio TCP listener speaking the Kafka protocol.

Each new connection passes the listener's Admission (total, per address, creation
rate; sink.kafka.admission) before anything is read from it; a refused one is
closed at once (reset: no TIME_WAIT left behind), counted by reason, and logged
once per interval with the count. Every listener of a node shares one NodeMemory
(request and Fetch response budgets, sink.kafka.budget).

With an SSLContext the listener speaks TLS only (a plaintext client's bytes fail the
handshake and the connection is closed; nothing reaches the Kafka codec). The context
is asked for every new connection, so a reloadable one (sink.security.KafkaContext)
serves rotated certificates to new connections without a restart.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import ssl
import struct
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from raftlog.latency import LatencyHistogram
from sink.kafka.admission import Admission, RefuseReason
from sink.kafka.authorize import gate
from sink.kafka.budget import NodeMemory
from sink.kafka.connection import Connection
from sink.kafka.handlers import ADVERTISED, REGISTRY, Advertised, Call, HandlerContext, Response
from sink.kafka.limits import KafkaLimits
from sink.security.sasl import SaslPolicy, SaslSession

if TYPE_CHECKING:  # only typed against: sink.kafka imports nothing of sink.service
    from sink.service import SinkService

log = logging.getLogger("sink.kafka")

TLS_HANDSHAKE_TIMEOUT_S = 10.0
"""Longest TLS handshake of a Kafka connection before it is closed."""


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
        memory: NodeMemory | None = None,
        ssl_context: ssl.SSLContext | None = None,
        forward_tls: Callable[[], ssl.SSLContext] | None = None,
        sasl: SaslPolicy | None = None,
        relay_login: object = None,
        principal_rules: tuple = (),
    ) -> None:
        """memory: the node's budgets, shared by its listeners (None: this listener's own).
        ssl_context: TLS on this listener (None: plaintext). forward_tls: () -> the client
        context to relay a request to the leader's listener (sink.kafka.forward).
        sasl: this listener requires SASL with that policy (SASL_PLAINTEXT, or SASL_SSL
        over a TLS listener); None: open. relay_login: the login (sink.security.
        sasl_client.Login) a follower's relays to the leader authenticate with."""
        self.sasl = sasl
        self.service = service
        self.ssl_context = ssl_context
        self.forward_tls = forward_tls
        self.host = host
        self.port = port
        self.limits = limits or KafkaLimits()
        if advertised is None:
            adv = Advertised(service.brokers, forwarded_replies_usable=True)  # shared, not copied
        else:
            if set(advertised) != set(service.brokers):
                raise ValueError("advertised addresses must name every node")
            adv = Advertised(dict(advertised), forwarded_replies_usable=False)
        # Partition reads: the applied state, or with partition groups the data groups'
        # (SinkService.partition_reads; sink.node.routed_reads).
        reads = getattr(service, "partition_reads", None) or service.fsm
        self.context = HandlerContext.of_node(service, reads, self.limits, adv, ADVERTISED)
        self.context.relay_login = relay_login
        self.context.relayed = self._run_relayed
        self.principal_rules = principal_rules
        """How a client certificate's subject becomes a principal (sink.security.principal)."""
        self.bound_port = 0
        self.pending_produce_bytes = 0
        self.room_waiters: set[Callable[[], None]] = set()
        """Connections blocked on the server-wide produce bytes: called on release."""
        self.connections: set[Connection] = set()
        self.read_buffer = memoryview(bytearray(self.limits.read_buffer_bytes))
        """The head buffer every connection of this listener reads into between
        frames (sink.kafka.connection: copied out at once; the loop is one thread)."""
        self._all_closed: asyncio.Event | None = None
        self.memory = memory or NodeMemory.of(self.limits)
        self.admission = Admission(self.limits, 0.0)
        self.frame_timeouts = 0
        """Connections closed because a frame granted memory did not arrive in time."""
        self._refusal_log: asyncio.TimerHandle | None = None
        self.handler_errors = 0
        """Requests answered UNKNOWN_SERVER_ERROR because their handler raised (bugs)."""
        self.request_seconds: dict[str, LatencyHistogram] = {}
        """API name -> how long its requests took here, from dispatch until the response
        was handed to the socket (a Produce's includes its commit on a majority, a
        Fetch's its long-poll wait): the server's share of a client's latency."""
        self._server: asyncio.base_events.Server | None = None

    async def start(self) -> None:
        tls: dict[str, object] = {}
        if self.ssl_context is not None:
            # A client that opens TCP and never finishes the handshake holds its
            # socket at most this long (asyncio's default is 60 s); admission counts
            # a connection once its handshake is done.
            tls = {"ssl": self.ssl_context, "ssl_handshake_timeout": TLS_HANDSHAKE_TIMEOUT_S}
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(
            lambda: Connection(self), self.host, self.port, **tls
        )
        self.bound_port = self._server.sockets[0].getsockname()[1]
        log.info(
            "kafka.listen host=%s port=%d tls=%s",
            self.host,
            self.bound_port,
            "on" if self.ssl_context is not None else "off",
        )

    @property
    def rejected_connections(self) -> int:
        """Connections refused at accept, every reason."""
        return sum(self.admission.refused.values())

    def refuse(self, transport: asyncio.BaseTransport) -> None:
        """Close a connection admission refused (Connection.connection_made)."""
        sock = transport.get_extra_info("socket")
        with contextlib.suppress(OSError, AttributeError):
            # Reset instead of FIN: a storm leaves no TIME_WAIT sockets on the node.
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        transport.abort()
        self._log_refusals()

    def _log_refusals(self) -> None:
        loop = asyncio.get_running_loop()
        line = self.admission.log_due(loop.time())
        if line is not None:
            log.warning("kafka.refused port=%d %s", self.bound_port, line)
        due = self.admission.next_log_at()
        if due is not None and self._refusal_log is None:

            def flush() -> None:
                self._refusal_log = None
                self._log_refusals()

            self._refusal_log = loop.call_at(due, flush)

    def connection_ended(self) -> None:
        """A connection left self.connections (stop() waits for the last one)."""
        if not self.connections and self._all_closed is not None:
            self._all_closed.set()

    def new_sasl_session(self) -> SaslSession | None:
        """A new connection's SASL state (None: this listener requires no SASL). Its
        credentials are the applied users' (the service's UserService)."""
        if self.sasl is None:
            return None
        users = self.context.users
        lookup = users.credential if users is not None else (lambda _u, _m: None)
        return SaslSession(self.sasl, lookup)  # type: ignore[arg-type]

    async def _run_relayed(self, api_key: int, call: Call) -> Response:
        """An Envelope's inner request (sink.kafka.handlers.envelope): the gate, then its
        handler, as the client the envelope names."""
        api = REGISTRY[api_key]
        denied = gate(self.context, api_key, call)
        if denied is not None:
            return api.error_response(call.version, call.corr, call.req, denied)
        return await (await api.handle(self.context, call))

    def stats(self) -> dict[str, float]:
        """Counters and gauges of this listener (metrics, status)."""
        refused = self.admission.refused
        out: dict[str, float] = {
            "connections": len(self.connections),
            "rejected_connections": self.rejected_connections,
            "frame_timeouts": self.frame_timeouts,
        }
        for reason in RefuseReason:
            out[f"refused_connections_{reason.name.lower()}"] = refused[reason]
        return out

    def count_latencies(self, done: Iterable[tuple[Any, Any, float]]) -> None:
        """(api, call, dispatched at) of responses just written -> request_seconds."""
        now = time.perf_counter()
        for api, _call, started in done:
            hist = self.request_seconds.get(api.name)
            if hist is None:
                hist = self.request_seconds[api.name] = LatencyHistogram()
            hist.observe(now - started)

    def release_produce_bytes(self, n: int) -> None:
        if n:
            self.pending_produce_bytes -= n
            for wake in list(self.room_waiters):
                wake()

    async def drain(self, grace_s: float) -> int:
        """Graceful shutdown's step before stop(): accept no more connections, read no
        more requests, and let each connection close once it has answered what it
        already read (Connection.drain), waiting at most grace_s. Returns how many
        were still open then (stop() aborts them)."""
        if self._server is not None:
            self._server.close()
        # Fetch long-polls answer now with what they have: set() wakes every current
        # waiter and clear() leaves the event as it was for later ones (the read API's
        # long polls wait on it too, and a left-set event would make them spin).
        self.context.draining = True
        with contextlib.suppress(AttributeError):  # contexts without partition reads
            ev = self.context.partitions.data_event()
            ev.set()
            ev.clear()
        for conn in list(self.connections):
            conn.drain()
        if self.connections and grace_s > 0:
            self._all_closed = asyncio.Event()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._all_closed.wait(), grace_s)
        return len(self.connections)

    async def stop(self) -> None:
        if self._refusal_log is not None:
            self._refusal_log.cancel()
        if self._server is not None:
            self._server.close()
        for conn in list(self.connections):
            conn.abort()  # ends it now (its reservations released, uncounted)
        if self.connections:  # not expected: abort() ends each one
            self._all_closed = asyncio.Event()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._all_closed.wait(), 2.0)
        if self._server is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 2.0)
            self._server = None
