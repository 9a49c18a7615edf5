"""One client connection: an asyncio BufferedProtocol driving sink.kafka.protocol's
ConnectionState, with no task of its own (issues 15 and 17: every loop wake-up and
task switch costs CPU on the leader's loop thread).

Connection is one class in several modules, one part each, holding no state of
their own (every field is set here, in connection_made), each module's docstring
stating its part's invariants:
- sink.kafka.conn_input (InputFlow): acting on the state machine's events, input
  flow control (blocking, pause/resume reading) and the idle and frame timers;
- sink.kafka.conn_memory (MemoryShare): the connection's share of the node's request
  and Fetch memory budgets (sink.kafka.budget);
- sink.kafka.conn_dispatch (Dispatcher): requests to their handlers (authorization,
  the inline dispatch step, SASL tokens) and the error answers of handlers that fail;
- sink.kafka.conn_responses (ResponseQueue): the ordered response queue and writing
  with its flow control (pause_writing), TLS runs.
This module keeps the protocol callbacks (asyncio's side of the connection:
admission, reading into lent buffers, EOF, write flow control, loss), the fields,
and the connection's end (closing after a flush, teardown).

Reading: the transport reads straight into a buffer the protocol lends (get_buffer):
a granted frame's own body buffer (ConnectionState.frame_view: no copy, also over
TLS, where Python 3.11's SSL layer decrypts into it), else the listener's shared
head buffer (read_buffer_bytes; copied out at once, so one buffer serves every
connection of the loop). buffer_updated() feeds the state machine and acts on its
events in the same callback (conn_input's _process).

Closing: a Close ends the connection after the responses of earlier requests are
written (at most CLOSE_FLUSH_S), as Kafka does; nothing more is read meanwhile.
Teardown (_teardown: loss, abort, the close's end) is idempotent and gives back
everything the connection holds: its queued responses' produce bytes, its memory
reservations, its admission slot; after it (self._over) callbacks only give back
what arrives late (a memory grant, a finished step's response).

Client quotas (sink.quotas, KIP-219): a response over a client's quota carries
throttle_time_ms and mutes the connection (self.quota's deadline); nothing more is
dispatched from it (nor read) until the deadline has passed (conn_input).
"""

from __future__ import annotations

import asyncio
import collections
import contextvars
import logging
from typing import TYPE_CHECKING, Any

from sink.kafka.conn_dispatch import Dispatcher
from sink.kafka.conn_input import InputFlow, ProtocolError
from sink.kafka.conn_memory import MemoryShare
from sink.kafka.conn_responses import ResponseQueue, consume
from sink.kafka.forward import FORWARD_TLS
from sink.kafka.handlers import ADVERTISED, API_VERSIONS_KEY, REGISTRY, SUPPORTED
from sink.kafka.handlers.api_versions import encode_api_versions
from sink.kafka.protocol.connection import CloseReason, ConnectionState
from sink.kafka.protocol.errors import ErrorCode
from sink.quotas import QuotaChannel
from sink.security.principal import tls_principal

if TYPE_CHECKING:
    from sink.kafka.server import KafkaServer

log = logging.getLogger("sink.kafka")

CLOSE_FLUSH_S = 5.0
"""Longest a closing connection waits for the responses of earlier requests."""


def _invalid_answer(api_key: int, version: int, corr: int) -> bytes | None:
    return REGISTRY[api_key].error_response(version, corr, None, ErrorCode.invalid_request)


def _fallback(corr: int) -> bytes:
    return encode_api_versions(0, corr, ADVERTISED, ErrorCode.unsupported_version)


class Connection(InputFlow, MemoryShare, Dispatcher, ResponseQueue, asyncio.BufferedProtocol):
    """One accepted connection (created by the listener's protocol factory). Its
    admission is decided in connection_made (after the TLS handshake, if any)."""

    def __init__(self, server: KafkaServer) -> None:
        self.server = server
        self.limits = server.limits
        self.memory = server.memory
        self.transport: asyncio.Transport | None = None
        self.peer: Any = None
        self.closed_reason: str | None = None
        self._admitted: str | None = None
        """The address admission counted this connection under (None: not admitted)."""
        self._over = False
        """Torn down: reservations released, the listener no longer counts it."""

    # ------------------------------------------------------------ lifecycle

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # asyncio's or uvloop's transport (uvloop's are not asyncio.Transport subclasses)
        self.transport = transport  # type: ignore[assignment]
        server = self.server
        loop = asyncio.get_running_loop()
        self._loop = loop
        self.peer = peer = transport.get_extra_info("peername")
        addr = peer[0] if isinstance(peer, tuple) else str(peer)
        if server.admission.admit(addr, loop.time()) is not None:
            self._over = True
            server.refuse(transport)
            return
        self._admitted = addr
        server.connections.add(self)
        self._tls = transport.get_extra_info("sslcontext") is not None
        """The listener speaks TLS: responses are written in runs (tls_runs)."""
        self._client_host = f"/{peer[0]}" if isinstance(peer, tuple) else ""
        self.sasl = server.new_sasl_session()
        """This connection's SASL state and principal (None: the listener needs no SASL)."""
        self.tls_principal = tls_principal(
            transport.get_extra_info("peercert"), server.principal_rules
        )
        """The verified client certificate's principal (None: no certificate)."""
        self.state = ConnectionState(
            max_frame_bytes=self.limits.max_frame_bytes,
            supported=SUPPORTED,
            api_versions_key=API_VERSIONS_KEY,
            invalid_answer=_invalid_answer,
            fallback=_fallback,
            budgeted=True,
            auth=self.sasl,
        )
        # Handlers run in this context (the dispatch step inline, its task, the tasks
        # it starts): relays to the leader find the listener's TLS there.
        self._ctx = contextvars.copy_context()
        self._ctx.run(FORWARD_TLS.set, server.forward_tls)
        self.quota = QuotaChannel()  # client quotas: who this is, muted until when
        self._closing = False
        """Ending: nothing more is read nor dispatched; the close waits for the flush."""
        self._close_timer: asyncio.TimerHandle | None = None
        self._task: asyncio.Task | None = None
        """A suspended dispatch step's task, or the memory waiter (at most one)."""
        # Reading and input flow control (conn_input).
        self._head = server.read_buffer
        self._into_frame = False
        """The last get_buffer lent the granted frame's own buffer (not the head's)."""
        self._blocked: str | None = None
        """Why nothing is dispatched nor read now: "step", "memory", "room", "quota"."""
        self._busy = False
        self._read_paused = False
        self._reading = False
        """Waiting for the client's input (idle and frame timers judge only then)."""
        self._deadline = loop.time() + self.limits.idle_timeout_s
        self._idle_timer: asyncio.TimerHandle | None = None
        self._frame_timer: asyncio.TimerHandle | None = None
        self._frame_deadline = 0.0
        self._quota_timer: asyncio.TimerHandle | None = None
        self._room_wake = self._on_server_room
        # Memory (conn_memory).
        self._held = 0
        """Request-memory bytes this connection holds (frames read and being read)."""
        self._fetch_held = 0
        """Fetch-memory bytes this connection's queued Fetch responses hold."""
        self._released = False
        """Everything held was given back (the connection ended)."""
        self._room = asyncio.Event()
        """Set when this connection releases request memory (its share's waiter)."""
        # Responses (conn_responses).
        # Entries: (response or future, produce cost, origin, reserved, fetch grant or -1).
        self._queue: collections.deque = collections.deque()
        self._head_wait: asyncio.Future | None = None
        """The queue's head future this connection has a done callback on."""
        self._write_paused = False
        self._process()

    def connection_lost(self, exc: Exception | None) -> None:
        if self._admitted is None:
            return  # refused at accept
        if self.closed_reason is None:
            self.closed_reason = CloseReason.EOF.value
        self._closing = True
        if self._task is not None and self._blocked == "memory":
            self._task.cancel()  # nothing to read into any more
        self._teardown()

    def eof_received(self) -> bool | None:
        if self._admitted is None or self._over:
            return None
        self.state.receive_data(b"")
        self._process()
        # Keep the transport open for the responses owed (a half-closed client still
        # reads them); the connection closes itself once they are written. (An SSL
        # transport closes anyway: asyncio's TLS has no half-close.)
        return None if self._tls else True

    def abort(self) -> None:
        """Server shutdown: drop the socket and stop writing at once."""
        if self._admitted is None:
            return
        self.state.close(CloseReason.SHUTDOWN)
        self.closed_reason = self.closed_reason or CloseReason.SHUTDOWN.value
        if self._task is not None:
            self._task.cancel()
        if self.transport is not None:
            self.transport.abort()
        self._teardown()

    def drain(self) -> None:
        """Graceful shutdown: read nothing more and close once the responses of the
        requests already dispatched are written (the queue, and a dispatch step still
        running): a produce in flight gets its outcome, not a cut connection that a
        client without idempotence would answer by sending the batch again. What was
        not dispatched (a frame partly read, requests waiting behind a step) is
        dropped: the client sends it again elsewhere. The server aborts what is still
        open after its grace (KafkaServer.drain)."""
        if self._admitted is None or self._over:
            return
        self.closed_reason = self.closed_reason or CloseReason.SHUTDOWN.value
        self._begin_close()
        if self._task is not None and self._blocked == "memory":
            self._task.cancel()  # a frame not read yet: it is dropped
        if not self._queue and self._blocked != "step":
            self._close_now()

    def _teardown(self) -> None:
        """The connection is over for the listener: stop its timers, give back what
        it holds (the queued responses' produce bytes, its memory reservations).
        Idempotent; the transport may still be flushing what was written."""
        if self._over:
            return
        self._over = True
        self._closing = True
        self._reading = False
        for timer in (self._idle_timer, self._frame_timer, self._quota_timer, self._close_timer):
            if timer is not None:
                timer.cancel()
        self._idle_timer = self._frame_timer = self._quota_timer = self._close_timer = None
        server = self.server
        server.room_waiters.discard(self._room_wake)
        for item, cost, _origin, _reserved, _grant in self._queue:
            server.release_produce_bytes(cost)
            if isinstance(item, asyncio.Future):
                item.add_done_callback(consume)
        self._queue.clear()
        self.state.drop_buffers()
        self._release_all()
        self._room.set()
        server.connections.discard(self)
        assert self._admitted is not None
        server.admission.release(self._admitted)
        server.connection_ended()

    # ------------------------------------------------------------- reading

    def get_buffer(self, sizehint: int) -> memoryview:
        st = self.state
        if st.frame_remaining and not self._over:
            self._into_frame = True
            return st.frame_view()
        self._into_frame = False
        return self._head

    def buffer_updated(self, nbytes: int) -> None:
        if self._over:
            return
        st = self.state
        if self._into_frame:
            st.frame_filled(nbytes)
        else:
            st.receive_data(bytes(self._head[:nbytes]))
        if self._closing:
            return  # flushing before close: input is dropped
        self._process()

    # ------------------------------------------------------------- closing

    def _protocol_error(self, exc: ProtocolError) -> None:
        """Input (or a timer) ended the connection: log it, write what is owed, close."""
        if self._closing:
            return
        self.closed_reason = str(exc)
        reason = exc.close.reason
        quiet = reason in (
            CloseReason.IDLE,
            CloseReason.SHUTDOWN,
            CloseReason.FRAME_TIMEOUT,  # counted (frame_timeouts); a flood would spam
        )
        if reason is CloseReason.FRAME_TIMEOUT:
            self.server.frame_timeouts += 1
        log.log(
            logging.INFO if quiet else logging.WARNING,
            "kafka.close peer=%s reason=%s: %s",
            self.peer,
            reason.value,
            exc,
        )
        self._begin_close()

    def _begin_close(self) -> None:
        """Read nothing more; close once the responses of earlier requests are
        written (_flush), or after CLOSE_FLUSH_S."""
        if self._closing:
            return
        self._closing = True
        self._reading = False
        for timer in (self._idle_timer, self._frame_timer, self._quota_timer):
            if timer is not None:
                timer.cancel()
        self._idle_timer = self._frame_timer = self._quota_timer = None
        self._pause_reading()
        self._close_timer = self._loop.call_later(CLOSE_FLUSH_S, self._close_now)

    def _close_now(self) -> None:
        """The close's flush took too long (or is done): close the transport (it
        still sends what it buffers) and end the connection."""
        self._close_timer = None
        if self._over:
            return
        self.transport.close()  # type: ignore[union-attr]
        self._teardown()

    # ------------------------------------------------------------- writing

    def pause_writing(self) -> None:
        self._write_paused = True

    def resume_writing(self) -> None:
        self._write_paused = False
        self._flush()
