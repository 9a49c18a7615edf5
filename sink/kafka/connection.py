"""One client connection: an asyncio BufferedProtocol driving sink.kafka.protocol's
ConnectionState, with no task of its own (issues 15 and 17: every loop wake-up and
task switch costs CPU on the leader's loop thread).

Reading: the transport reads straight into a buffer the protocol lends (get_buffer):
a granted frame's own body buffer (ConnectionState.frame_view: no copy, also over
TLS, where Python 3.11's SSL layer decrypts into it), else the listener's shared
head buffer (read_buffer_bytes; copied out at once, so one buffer serves every
connection of the loop). buffer_updated() feeds the state machine and acts on its
events in the same callback (_pump): a Request runs its handler's dispatch step
inline (sink.kafka.stepping); only a step that suspends is finished by a task, and
no further request of the connection is dispatched until it has (that keeps
Produce proposals in request order). An Answer (the ApiVersions fallback,
INVALID_REQUEST) and every handler's future go into a FIFO.

Writing: the FIFO's head is written with transport.write as soon as it is ready
(a done future: in the callback that made it; else from the future's done
callback), so responses leave in request order (kafka-python requires it) while
Produce/Fetch wait concurrently; whatever is ready together is written with one
call (over TLS, in runs of about one record: tls_runs). Flow control: while the
transport is over its high-water mark (pause_writing) nothing is written; the
responses stay queued, holding their memory and in-flight slots, so reading stops
too (below). A Close ends the connection after the responses of earlier requests
are written (at most CLOSE_FLUSH_S), as Kafka does.

Errors never cost the connection: a handler that raises, or whose future fails,
answers that request with UNKNOWN_SERVER_ERROR in its version's shape (its Api's
error_response), logged with who asked and counted (KafkaServer.handler_errors).

Back-pressure: the connection stops reading its socket (pause_reading; the client's
bytes stay in the kernel) while it has max_inflight_requests unanswered requests or
too many pending produce bytes (per connection or server-wide; which requests are
priced is each Api's `priced`), while a dispatch step is suspended, while a frame
waits for request memory, and while muted by a client quota. librdkafka ignores
throttle_time. Invariant: whenever the connection is not blocked and not closing,
its state machine has returned NEED_DATA and the transport is reading.

Idleness: one lazily re-armed timer per connection. Input and responses only move
a deadline; the timer, when it fires, closes the connection if the deadline really
passed while it was waiting for input (blocked on its own back-pressure is not
idleness, nor waiting for its own responses).

Memory (sink.kafka.budget argues the design): before a frame's body is read its
size is reserved from the node's request memory (NeedMemory); when the budget is
used up the connection stops reading and a task waits for the memory (the only
other task a connection may have). The reservation is released when the request's
response has been written, or when the connection ends (everything it still holds:
_held). A frame granted memory must arrive whole within frame_read_timeout_s. A
Fetch is granted response memory from the node's fetch budget and clamped to it;
its grant is settled to the response's size when built and released once written.

Authorization: each request carries the connection's principal (the SASL user, the
client certificate's, else ANONYMOUS; sink.security.principal); sink.kafka.authorize
refuses what the ACLs do not allow before the handler runs, or the handler refuses
single items.

SASL (a listener that requires it gives each connection a sink.security.SaslSession):
the state machine gates requests on it; after a failed authentication the answer
is flushed, then the connection is closed, as Kafka does. Raw v0 tokens
(SaslToken) are answered here with the raw challenge.

Client quotas (sink.quotas, KIP-219): a response over a client's quota carries
throttle_time_ms and mutes the connection (self.quota's deadline); nothing more is
dispatched from it (nor read) until the deadline has passed.
"""

from __future__ import annotations

import asyncio
import collections
import contextvars
import functools
import logging
import time
from typing import TYPE_CHECKING, Any

from kio.schema.fetch.v16.request import FetchRequest

from sink.kafka.authorize import gate
from sink.kafka.budget import clamp_fetch
from sink.kafka.forward import FORWARD_TLS
from sink.kafka.handlers import API_VERSIONS_KEY, REGISTRY, SUPPORTED, Api, Call
from sink.kafka.handlers.api_versions import encode_api_versions
from sink.kafka.protocol.connection import (
    NEED_DATA,
    Answer,
    Close,
    CloseReason,
    ConnectionState,
    NeedMemory,
    Request,
    SaslToken,
    api_name,
)
from sink.kafka.protocol.errors import ErrorCode
from sink.kafka.stepping import Suspended, first_step, resume
from sink.quotas import QuotaChannel
from sink.security.principal import connection_principal, tls_principal

if TYPE_CHECKING:
    from sink.kafka.server import KafkaServer

log = logging.getLogger("sink.kafka")

_CLOSE = object()
CLOSE_FLUSH_S = 5.0
"""Longest a closing connection waits for the responses of earlier requests."""
_TLS_RECORD = 1 << 14
"""The most plaintext one TLS record carries (RFC 8446 5.1): over TLS, a response's
parts are written in runs of about this size (tls_runs)."""
_FETCH_KEY = int(FetchRequest.__api_key__)
_NO_FETCH_LIMIT = 1 << 30  # a Fetch's max_bytes <= 0 (none): what the handler assumes


def _size_of(data: Any) -> int:
    if isinstance(data, list):
        return sum(len(p) for p in data)
    return len(data) if isinstance(data, (bytes, bytearray, memoryview)) else 0


def tls_runs(parts: list) -> list:
    """A response's wire parts regrouped for a TLS transport: the event loop's SSL
    layer (uvloop's and asyncio's sslproto) calls SSLObject.write once per part, and
    each call is at least one TLS record (header, AEAD tag, a cipher call). Small
    parts (the size prefix, a Fetch's headers and small record batches) are joined
    into runs of up to about one record's plaintext; a part of a record or more is
    passed on as it is (the SSL layer cuts it into full records, no copy here).
    Invariant: the concatenation of the result is that of parts, in order."""
    if len(parts) < 2:
        return parts
    out: list = []
    run: list = []
    size = 0
    for p in parts:
        n = len(p)
        if n >= _TLS_RECORD:
            if run:
                out.append(run[0] if len(run) == 1 else b"".join(run))
                run, size = [], 0
            out.append(p)
            continue
        run.append(p)
        size += n
        if size >= _TLS_RECORD:
            out.append(b"".join(run))
            run, size = [], 0
    if run:
        out.append(run[0] if len(run) == 1 else b"".join(run))
    return out


class ProtocolError(Exception):
    """Input that ends the connection."""

    def __init__(self, close: Close) -> None:
        super().__init__(close.detail or close.reason.value)
        self.close = close


def _invalid_answer(api_key: int, version: int, corr: int) -> bytes | None:
    return REGISTRY[api_key].error_response(version, corr, None, ErrorCode.invalid_request)


def _fallback(corr: int) -> bytes:
    return encode_api_versions(0, corr, SUPPORTED, ErrorCode.unsupported_version)


class Connection(asyncio.BufferedProtocol):
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
        self._head = server.read_buffer
        self._into_frame = False
        """The last get_buffer lent the granted frame's own buffer (not the head's)."""
        self._held = 0
        """Request-memory bytes this connection holds (frames read and being read)."""
        self._fetch_held = 0
        """Fetch-memory bytes this connection's queued Fetch responses hold."""
        self._released = False
        # Entries: (response or future, produce cost, origin, reserved, fetch grant or -1).
        self._queue: collections.deque = collections.deque()
        self._head_wait: asyncio.Future | None = None
        """The queue's head future this connection has a done callback on."""
        self._room = asyncio.Event()
        """Set when this connection releases request memory (its share's waiter)."""
        self._blocked: str | None = None
        """Why nothing is dispatched nor read now: "step", "memory", "room", "quota"."""
        self._busy = False
        self._read_paused = False
        self._write_paused = False
        self._closing = False
        self._reading = False
        """Waiting for the client's input (idle and frame timers judge only then)."""
        self._deadline = loop.time() + self.limits.idle_timeout_s
        self._idle_timer: asyncio.TimerHandle | None = None
        self._frame_timer: asyncio.TimerHandle | None = None
        self._frame_deadline = 0.0
        self._quota_timer: asyncio.TimerHandle | None = None
        self._close_timer: asyncio.TimerHandle | None = None
        self._task: asyncio.Task | None = None
        """A suspended dispatch step's task, or the memory waiter (at most one)."""
        self._room_wake = self._on_server_room
        self.quota = QuotaChannel()  # client quotas: who this is, muted until when
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
                item.add_done_callback(_consume)
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

    def _has_room(self) -> bool:
        lim = self.limits
        return (
            self.state.has_room(lim.max_inflight_requests, lim.max_pending_produce_bytes)
            and self.server.pending_produce_bytes < lim.max_pending_produce_bytes_total
        )

    def _process(self) -> None:
        """Act on what the state machine has, then write what is ready. Every
        callback that may unblock the connection ends here."""
        if self._busy or self._over:
            return
        self._busy = True
        try:
            if not self._closing:
                self._pump()
        except ProtocolError as exc:
            self._protocol_error(exc)
        except Exception:  # a bug here must not leave the connection half-alive
            log.exception("kafka.connection_error peer=%s", self.peer)
            self._protocol_error(
                ProtocolError(self.state.close(CloseReason.NO_ERROR_ANSWER, "internal error"))
            )
        finally:
            self._busy = False
        self._flush()

    def _pump(self) -> None:
        st = self.state
        while self._blocked is None and not self._closing:
            if not self._has_room():
                self._flush()  # what is ready frees its slot now
                if not self._has_room():
                    self._block("room")
                    self.server.room_waiters.add(self._room_wake)
                    return
            if self.quota.muted_for() > 0:  # client quotas: throttled, read nothing
                self._block("quota")
                self._quota_timer = self._loop.call_later(self.quota.muted_for(), self._unmute)
                return
            ev = st.next_event()
            if ev is NEED_DATA:
                if st.frame_started:
                    self._arm_frame_timer()
                self._want_input()
                return
            self._reading = False
            if isinstance(ev, NeedMemory):
                self._reserve(ev.size)
            elif isinstance(ev, Request):
                self._dispatch(ev)
            elif isinstance(ev, Answer):
                log.info("kafka.answer peer=%s %s", self.peer, ev.note)
                self._push(ev.data, 0, None, ev.reserved)
            elif isinstance(ev, SaslToken):
                self._raw_token(ev)
            else:
                assert isinstance(ev, Close)
                if ev.reason is CloseReason.EOF:
                    self.closed_reason = CloseReason.EOF.value
                    self._begin_close()
                    return
                raise ProtocolError(ev)

    def _want_input(self) -> None:
        """NEED_DATA: the transport reads, the idle timer watches."""
        self._reading = True
        self._deadline = self._loop.time() + self.limits.idle_timeout_s
        if self._idle_timer is None:
            self._idle_timer = self._loop.call_at(self._deadline, self._check_idle)
        if self._read_paused and not self.transport.is_closing():  # type: ignore[union-attr]
            self._read_paused = False
            self.transport.resume_reading()  # type: ignore[union-attr]

    def _block(self, why: str) -> None:
        """Stop dispatching and reading: what the client sends meanwhile stays in the
        kernel's socket buffer, not in this process."""
        self._blocked = why
        self._reading = False
        self._pause_reading()

    def _pause_reading(self) -> None:
        if not self._read_paused and not self.transport.is_closing():  # type: ignore[union-attr]
            self._read_paused = True
            self.transport.pause_reading()  # type: ignore[union-attr]

    def _unblock(self, why: str) -> None:
        if self._blocked == why:
            self._blocked = None
            self._process()

    def _on_server_room(self) -> None:
        """The listener released produce bytes (KafkaServer.release_produce_bytes)."""
        if self._blocked == "room":
            self._loop.call_soon(self._recheck_room)

    def _recheck_room(self) -> None:
        if self._blocked == "room" and self._has_room():
            self.server.room_waiters.discard(self._room_wake)
            self._unblock("room")

    def _unmute(self) -> None:
        self._quota_timer = None
        if self._blocked == "quota" and not self._over:
            self._unblock("quota")

    def _check_idle(self) -> None:
        """Timer callback: close the connection if it has waited past its deadline."""
        self._idle_timer = None
        if not self._reading or self._closing:
            return  # dispatching or blocked on back-pressure; the next NEED_DATA re-arms
        what = self.state.waiting_for
        now = self._loop.time()
        if now < self._deadline or (what == "size" and self.state.inflight > 0):
            # Not idle yet, or waiting on our own responses (which is not idleness).
            due = max(self._deadline, now + self.limits.idle_timeout_s / 4)
            self._idle_timer = self._loop.call_at(due, self._check_idle)
            return
        self._expire(
            CloseReason.IDLE,
            f"idle for {self.limits.idle_timeout_s}s waiting for the request {what}",
        )

    def _expire(self, reason: CloseReason, detail: str) -> None:
        self._protocol_error(ProtocolError(self.state.close(reason, detail)))
        self._flush()

    # ------------------------------------------------------------- memory

    def _reserve(self, size: int) -> None:
        """Reserve a frame's bytes from the node's request memory, then let the state
        read the body; when it cannot be had now, block and wait for it in a task."""
        mem = self.memory.requests
        if mem.ledger.too_large(size):
            sz = mem.sizes
            raise ProtocolError(
                self.state.close(
                    CloseReason.FRAME_TOO_LARGE,
                    f"frame of {size} bytes exceeds what the request memory budget can hold "
                    f"({sz.largest_frame} bytes of kafka.request_memory_bytes={sz.limit})",
                )
            )
        if mem.ledger.within_share(size, self._held) and mem.try_reserve(size):
            self._granted(size)
            return
        self._block("memory")
        self._task = self._loop.create_task(self._wait_for_memory(size))

    async def _wait_for_memory(self, size: int) -> None:
        mem = self.memory.requests
        try:
            while not mem.ledger.within_share(size, self._held):
                # Over this connection's share: wait for its own responses.
                self._room.clear()
                await self._room.wait()
                if self._over:
                    return
            await mem.reserve(size)
        finally:
            self._task = None
        if self._over:  # ended while it waited: nobody will release it
            mem.release(size)
            return
        self._granted(size)
        self._unblock("memory")

    def _granted(self, size: int) -> None:
        self._held += size
        self.state.grant(size)
        self._frame_deadline = self._loop.time() + self.limits.frame_read_timeout_s

    def _arm_frame_timer(self) -> None:
        if self._frame_timer is None:
            self._frame_timer = self._loop.call_at(self._frame_deadline, self._check_frame)

    def _check_frame(self) -> None:
        """Timer callback: close a connection whose granted frame is late."""
        self._frame_timer = None
        if not self.state.frame_started or self._closing:
            return  # that frame arrived; the next one arms its own timer
        now = self._loop.time()
        if now < self._frame_deadline:
            self._frame_timer = self._loop.call_at(self._frame_deadline, self._check_frame)
            return
        if not self._reading:  # held up by our own back-pressure, not by the client
            self._frame_deadline = now + self.limits.frame_read_timeout_s / 4
            self._frame_timer = self._loop.call_at(self._frame_deadline, self._check_frame)
            return
        self._expire(
            CloseReason.FRAME_TIMEOUT,
            f"request frame ({self.state.buffered} bytes in) not received whole within "
            f"frame_read_timeout_s={self.limits.frame_read_timeout_s}",
        )

    def _release(self, reserved: int, fetch: int) -> None:
        if self._released:
            return  # the connection already gave back everything it held
        if reserved:
            self._held -= reserved
            self.memory.requests.release(reserved)
            self._room.set()
        if fetch:
            self._fetch_held -= fetch
            self.memory.fetches.release(fetch)

    def _release_all(self) -> None:
        """The connection ended: give back the reservations it still holds."""
        if not self._released:
            self._release(self._held, self._fetch_held)
            self._released = True

    # ------------------------------------------------------------- dispatch

    def _dispatch(self, ev: Request) -> None:
        api = REGISTRY[ev.api_key]
        req, grant = ev.req, -1
        if ev.api_key == _FETCH_KEY:
            req, grant = self._fetch_grant(req)
        self.quota.client_id = self.state.client_id or ""
        # A priced (Produce) request is served from its parsed records: its frame is
        # dropped here, so what it holds until answered is about its reservation.
        call = Call(
            ev.version,
            ev.corr,
            req,
            b"" if api.priced else ev.frame,
            self.quota,
            len(ev.frame),
            self._client_host,
            self.sasl,
            connection_principal(self.sasl, self.tls_principal),
        )
        denied = gate(self.server.context, ev.api_key, call)
        if denied is not None:  # refused whole, in the API's own shape (sink.kafka.authorize)
            self._push(
                api.error_response(ev.version, ev.corr, req, denied), 0, None, ev.reserved, grant
            )
            return
        cost = len(ev.frame) if api.priced else 0
        started = time.perf_counter()
        step = first_step(self._ctx, api.handle(self.server.context, call))
        if not isinstance(step, Suspended):
            self._dispatched(api, call, ev.reserved, cost, grant, started, step.result, step.error)
            return
        # The step waits (a topic to create, a relay, a credential): a task finishes
        # it; nothing more of this connection is dispatched (nor read) until then.
        self._block("step")
        task = self._loop.create_task(resume(step), context=self._ctx)
        self._task = task
        task.add_done_callback(
            functools.partial(self._step_done, api, call, ev.reserved, cost, grant, started)
        )

    def _step_done(
        self,
        api: Api,
        call: Call,
        reserved: int,
        cost: int,
        grant: int,
        started: float,
        task: asyncio.Task,
    ) -> None:
        self._task = None
        if task.cancelled():
            return  # the connection was aborted
        exc = task.exception()
        if self._over:
            if exc is None:
                _consume_result(task.result())
            return
        result = task.result() if exc is None else None
        err = exc if isinstance(exc, Exception) or exc is None else RuntimeError(repr(exc))
        try:
            self._dispatched(api, call, reserved, cost, grant, started, result, err)
        except ProtocolError as pe:
            self._protocol_error(pe)
            self._flush()
            return
        self._unblock("step")

    def _dispatched(
        self,
        api: Api,
        call: Call,
        reserved: int,
        cost: int,
        grant: int,
        started: float,
        result: Any,
        exc: Exception | None,
    ) -> None:
        """The dispatch step ended: queue its future (or its error's answer)."""
        if exc is not None:  # a bug: answer this request, keep the connection
            answer = self._error_answer(api, call, exc)
            if answer is _CLOSE:
                raise ProtocolError(
                    self.state.close(CloseReason.NO_ERROR_ANSWER, f"{api.name} v{call.version}")
                )
            self._push(answer, 0, None, reserved, grant)
            return
        # client quotas: request_percentage counts the dispatch step's time
        self.server.context.quotas.record_request_time(self.quota, time.perf_counter() - started)
        self._push(result, cost, (api, call), reserved, grant)
        self._after_sasl()

    def _raw_token(self, ev: SaslToken) -> None:
        """A v0 raw SASL token: answer the raw challenge; a failure closes at once
        (no error can be framed without SaslAuthenticate, as in Kafka)."""
        assert self.sasl is not None
        step = self.sasl.authenticate(bytes(ev.token), 0)
        if self.sasl.failed:
            raise ProtocolError(
                self.state.close(CloseReason.AUTHENTICATION, step.message or "failed")
            )
        self._push(step.challenge, 0, None, ev.reserved)

    def _after_sasl(self) -> None:
        """A SASL request failed the session: its answer is queued; close after it."""
        if self.sasl is not None and self.sasl.failed:
            raise ProtocolError(
                self.state.close(
                    CloseReason.AUTHENTICATION,
                    f"{self.sasl.failure} ({self.state.client()})",
                )
            )

    def _fetch_grant(self, req: Any) -> tuple[Any, int]:
        """Reserve response memory for a Fetch; clamp it to what the budget grants."""
        # What the response can hold: max_bytes, and no more than the partitions' own
        # limits (a long-polling consumer of one partition holds 1 MiB, not 50 MB).
        max_bytes = getattr(req, "max_bytes", -1)  # absent before Fetch v3
        want = min(
            max_bytes if max_bytes > 0 else _NO_FETCH_LIMIT,
            sum(max(fp.partition_max_bytes, 0) for ft in req.topics for fp in ft.partitions),
        )
        grant = self.memory.fetches.grant(want)
        self._fetch_held += grant
        if grant < want or any(
            fp.partition_max_bytes > grant for ft in req.topics for fp in ft.partitions
        ):
            req = clamp_fetch(req, grant)
        return req, grant

    def _error_answer(self, api: Api, call: Call, exc: BaseException) -> Any:
        """UNKNOWN_SERVER_ERROR in the request's own shape for a handler that
        raised (Kafka's answer to an unexpected exception); logged with who asked,
        and counted. None: no answer (acks=0); _CLOSE: none could be formed."""
        self.server.handler_errors += 1
        log.error(
            "kafka.handler_error api=%s version=%d peer=%s %s: %r",
            api_name(api.key),
            call.version,
            self.peer,
            self.state.client(),
            exc,
            exc_info=exc,
        )
        try:
            answer = api.error_response(
                call.version, call.corr, call.req, ErrorCode.unknown_server_error
            )
        except Exception:
            log.exception("kafka.error_response_failed api=%s", api_name(api.key))
            return _CLOSE
        if answer is None and getattr(call.req, "acks", None) != 0:
            return _CLOSE
        return answer

    def _push(
        self,
        item: Any,
        cost: int,
        origin: tuple[Api, Call] | None,
        reserved: int = 0,
        grant: int = -1,
    ) -> None:
        self.state.admit(cost)
        self.server.pending_produce_bytes += cost
        self._queue.append((item, cost, origin, reserved, grant))

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

    def _on_head_done(self, fut: asyncio.Future) -> None:
        if self._head_wait is fut:
            self._head_wait = None
        self._flush()

    def _flush(self) -> None:
        """Write the queue's ready head responses, in order, with one call."""
        if self._over or self._write_paused:
            return
        try:
            self._write_ready()
        except Exception:  # a bug: never leave the loop's callback with it
            log.exception("kafka.write_error peer=%s", self.peer)
            self.closed_reason = self.closed_reason or "internal error"
            self.transport.abort()  # type: ignore[union-attr]
            self._teardown()
            return
        if self._closing and not self._queue and not self._over:
            self._close_now()
        elif self._blocked == "room" and self._has_room():
            self.server.room_waiters.discard(self._room_wake)
            self._unblock("room")

    def _write_ready(self) -> None:
        queue = self._queue
        st = self.state
        out: list = []
        freed: list[tuple[int, int]] = []
        close = False
        while queue:
            item, cost, origin, reserved, grant = queue[0]
            if isinstance(item, asyncio.Future):
                if not item.done():
                    if self._head_wait is not item:
                        self._head_wait = item
                        item.add_done_callback(self._on_head_done)
                    break
                if item.cancelled() or item.exception() is not None:
                    exc = asyncio.CancelledError() if item.cancelled() else item.exception()
                    assert exc is not None
                    data = self._error_answer(*origin, exc) if origin is not None else _CLOSE
                else:
                    data = item.result()
            else:
                data = item
            queue.popleft()
            parts = st.send(None if data is _CLOSE else data, cost)
            self.server.release_produce_bytes(cost)
            fetch_bytes = max(grant, 0)
            if grant >= 0:  # account the Fetch response's real size from now on
                fetch_bytes = _size_of(data)
                if not self._released:
                    self.memory.fetches.settle(grant, fetch_bytes)
                    self._fetch_held += fetch_bytes - grant
            freed.append((reserved, fetch_bytes))
            if data is _CLOSE:  # not even an error answer could be formed
                st.close(CloseReason.NO_ERROR_ANSWER)
                self.closed_reason = CloseReason.NO_ERROR_ANSWER.value
                close = True
                break
            out.extend(parts)
        transport = self.transport
        assert transport is not None
        if out and not transport.is_closing():
            transport.writelines(tls_runs(out) if self._tls else out)
            # A response is activity too: idleness counts from the later of the
            # last input and the last response written (as Kafka's).
            self._deadline = self._loop.time() + self.limits.idle_timeout_s
        for reserved, fetch_bytes in freed:
            self._release(reserved, fetch_bytes)
        if close:
            self._closing = True
            self._close_now()


def _consume(fut: asyncio.Future) -> None:
    """A response nobody will write (the connection ended): retrieve its outcome so
    that a failure is not reported as never retrieved."""
    if not fut.cancelled():
        fut.exception()


def _consume_result(result: Any) -> None:
    if isinstance(result, asyncio.Future):
        result.add_done_callback(_consume)
