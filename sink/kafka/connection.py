"""One client connection: the asyncio driver of sink.kafka.protocol's ConnectionState.

Reader loop: read what the socket has, feed it to the state machine, act on its
events: a Request is dispatched to its API's handler (the await is the dispatch
step, so Produce proposals keep request order); an Answer (the ApiVersions
fallback, INVALID_REQUEST) and every handler's future go into a FIFO that one
writer task drains in order, so responses leave in request order (kafka-python
requires it) while Produce/Fetch wait concurrently. A Close ends the connection
(after flushing the responses of earlier requests), as Kafka does.

Errors never cost the connection: a handler that raises, or whose future fails,
answers that request with UNKNOWN_SERVER_ERROR in its version's shape (its Api's
error_response), logged with who asked and counted (KafkaServer.handler_errors).

Idleness: one lazily re-armed timer per connection (not a wait_for per read,
which costs a task and a timer handle per read on the hot path). Reads only move
a deadline; the timer, when it fires, cancels the read loop if the deadline
really passed while it was waiting for input.

Back-pressure: the reader stops reading the socket while the connection has
max_inflight_requests unanswered requests or too many pending produce bytes (per
connection or server-wide; which requests are priced is each Api's `priced`).
librdkafka ignores throttle_time.

Memory (sink.kafka.budget argues the design): before a frame's body is read its
size is reserved from the node's request memory (NeedMemory); the reader waits
there, not reading, when the budget is used up. The reservation is released when
the request's response has been written, or when the connection ends (everything
it still holds: _held). A frame granted memory must arrive whole within
frame_read_timeout_s. A Fetch is granted response memory from the node's fetch
budget and clamped to it; its grant is settled to the response's size when built
and released once written.

Authorization: each request carries the connection's principal (the SASL user, the
client certificate's, else ANONYMOUS; sink.security.principal); sink.kafka.authorize
refuses what the ACLs do not allow before the handler runs, or the handler refuses
single items.

SASL (a listener that requires it gives each connection a sink.security.SaslSession):
the state machine gates requests on it; after a failed authentication the answer
is flushed, then the connection is closed, as Kafka does. Raw v0 tokens
(SaslToken) are answered here with the raw challenge.

Client quotas (sink.quotas, KIP-219): a response over a client's quota carries
throttle_time_ms and mutes the connection (self.quota's deadline); the reader
dispatches nothing more from it until the deadline has passed.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import time
from typing import TYPE_CHECKING, Any

from kio.schema.fetch.v16.request import FetchRequest

from sink.kafka.authorize import gate
from sink.kafka.budget import clamp_fetch
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
from sink.quotas import QuotaChannel
from sink.security.principal import connection_principal, tls_principal

if TYPE_CHECKING:
    from sink.kafka.server import KafkaServer

log = logging.getLogger("sink.kafka")

_CLOSE = object()
_READ_CHUNK = 1 << 18
"""Largest read into a granted frame's buffer."""
_HEAD_READ = 1 << 16
"""Largest read between frames (several small frames, or the head of a large one):
what a connection may hold before its next frame has memory is small."""
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


class Connection:
    def __init__(
        self, server: KafkaServer, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        self.server = server
        self.limits = server.limits
        self.reader = reader
        self.writer = writer
        self.peer = writer.get_extra_info("peername")
        self._tls = writer.get_extra_info("sslcontext") is not None
        """The listener speaks TLS: responses are written in runs (tls_runs)."""
        self._client_host = f"/{self.peer[0]}" if isinstance(self.peer, tuple) else ""
        self.sasl = server.new_sasl_session()
        """This connection's SASL state and principal (None: the listener needs no SASL)."""
        self.tls_principal = tls_principal(
            writer.get_extra_info("peercert"), server.principal_rules
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
        self.memory = server.memory
        self._held = 0
        """Request-memory bytes this connection holds (frames read and being read)."""
        self._fetch_held = 0
        """Fetch-memory bytes this connection's queued Fetch responses hold."""
        self._released = False
        self._frame_timer: asyncio.TimerHandle | None = None
        self._frame_deadline = 0.0
        # Entries: (response or future, produce cost, origin, reserved, fetch grant or -1).
        self._queue: collections.deque = collections.deque()
        self._queue_wake = asyncio.Event()
        self._room = asyncio.Event()
        self.closed_reason: str | None = None
        self._reading = False
        self._deadline = 0.0
        self._idle_timer: asyncio.TimerHandle | None = None
        self._idle_expired: tuple[CloseReason, str] | None = None
        self._read_task: asyncio.Task | None = None
        self.quota = QuotaChannel()  # client quotas: who this is, muted until when

    async def run(self) -> None:
        writer_task = self._writer_task = asyncio.create_task(self._write_loop())
        self._read_task = asyncio.current_task()
        try:
            try:
                await self._read_loop()
            except asyncio.CancelledError:
                if self._idle_expired is None:
                    raise
                t = asyncio.current_task()
                if t is not None:
                    t.uncancel()
                raise ProtocolError(self.state.close(*self._idle_expired)) from None
        except ProtocolError as exc:
            self.closed_reason = str(exc)
            quiet = exc.close.reason in (
                CloseReason.IDLE,
                CloseReason.SHUTDOWN,
                CloseReason.FRAME_TIMEOUT,  # counted (frame_timeouts); a flood would spam
            )
            if exc.close.reason is CloseReason.FRAME_TIMEOUT:
                self.server.frame_timeouts += 1
            level = logging.INFO if quiet else logging.WARNING
            log.log(
                level,
                "kafka.close peer=%s reason=%s: %s",
                self.peer,
                exc.close.reason.value,
                exc,
            )
        except ConnectionError:
            self.closed_reason = CloseReason.EOF.value
        finally:
            if self._idle_timer is not None:
                self._idle_timer.cancel()
            if self._frame_timer is not None:
                self._frame_timer.cancel()
            # Flush the responses of earlier requests (bounded), then close.
            self._queue.append((_CLOSE, 0, None, 0, -1))
            self._queue_wake.set()
            if not writer_task.done():
                done, _ = await asyncio.wait({writer_task}, timeout=5.0)
                if not done:
                    writer_task.cancel()
            if writer_task.done() and not writer_task.cancelled() and writer_task.exception():
                log.debug("kafka.writer_error peer=%s error=%r", self.peer, writer_task.exception())
            self.writer.close()
            self.state.drop_buffers()
            self._release_all()

    # ------------------------------------------------------------- reading

    def _has_room(self) -> bool:
        lim = self.limits
        return (
            self.state.has_room(lim.max_inflight_requests, lim.max_pending_produce_bytes)
            and self.server.pending_produce_bytes < lim.max_pending_produce_bytes_total
        )

    async def _wait_for_room(self) -> None:
        while not self._has_room():
            self._room.clear()
            self.server.room_waiters.add(self._room)
            try:
                await self._room.wait()
            finally:
                self.server.room_waiters.discard(self._room)

    async def _read_some(self) -> bytes:
        loop = asyncio.get_running_loop()
        self._deadline = loop.time() + self.limits.idle_timeout_s
        if self._idle_timer is None:
            self._idle_timer = loop.call_at(self._deadline, self._check_idle)
        self._reading = True
        try:
            left = self.state.frame_remaining
            return await self.reader.read(min(left, _READ_CHUNK) if left else _HEAD_READ)
        finally:
            self._reading = False

    def _check_idle(self) -> None:
        """Timer callback: cancel the read loop if it has waited past its deadline."""
        loop = asyncio.get_running_loop()
        self._idle_timer = None
        if not self._reading:
            return  # dispatching or blocked on back-pressure; the next read re-arms
        what = self.state.waiting_for
        now = loop.time()
        if now < self._deadline or (what == "size" and self.state.inflight > 0):
            # Not idle yet, or waiting on our own responses (which is not idleness).
            due = max(self._deadline, now + self.limits.idle_timeout_s / 4)
            self._idle_timer = loop.call_at(due, self._check_idle)
            return
        self._idle_expired = (
            CloseReason.IDLE,
            f"idle for {self.limits.idle_timeout_s}s waiting for the request {what}",
        )
        if self._read_task is not None:
            self._read_task.cancel()

    # ------------------------------------------------------------- memory

    async def _reserve(self, size: int) -> None:
        """Reserve a frame's bytes from the node's request memory (waiting, without
        reading, while it is used up), then let the state read the body."""
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
        if not mem.ledger.within_share(size, self._held) or not mem.try_reserve(size):
            # Waiting: stop the transport too, so that what the client sends meanwhile
            # stays in the kernel's socket buffer, not in this process.
            transport = self.writer.transport
            transport.pause_reading()
            try:
                while not mem.ledger.within_share(size, self._held):
                    # Over this connection's share: wait for its own responses.
                    self._room.clear()
                    await self._room.wait()
                await mem.reserve(size)
            finally:
                # Unless the stream paused it itself (its buffer is full: it resumes it
                # when read; resuming under it would let its buffer grow unchecked).
                if not transport.is_closing() and not getattr(self.reader, "_paused", False):
                    transport.resume_reading()
        self._held += size
        self.state.grant(size)
        self._frame_deadline = asyncio.get_running_loop().time() + self.limits.frame_read_timeout_s

    def _arm_frame_timer(self) -> None:
        if self._frame_timer is None:
            loop = asyncio.get_running_loop()
            self._frame_timer = loop.call_at(self._frame_deadline, self._check_frame)

    def _check_frame(self) -> None:
        """Timer callback: close a connection whose granted frame is late."""
        loop = asyncio.get_running_loop()
        self._frame_timer = None
        if not self.state.frame_started:
            return  # that frame arrived; the next one arms its own timer
        now = loop.time()
        if now < self._frame_deadline:
            self._frame_timer = loop.call_at(self._frame_deadline, self._check_frame)
            return
        if not self._reading:  # held up by our own back-pressure, not by the client
            self._frame_deadline = now + self.limits.frame_read_timeout_s / 4
            self._frame_timer = loop.call_at(self._frame_deadline, self._check_frame)
            return
        self._idle_expired = (
            CloseReason.FRAME_TIMEOUT,
            f"request frame ({self.state.buffered} bytes in) not received whole within "
            f"frame_read_timeout_s={self.limits.frame_read_timeout_s}",
        )
        if self._read_task is not None:
            self._read_task.cancel()

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

    async def _read_loop(self) -> None:
        st = self.state
        while True:
            await self._wait_for_room()
            while self.quota.muted_for() > 0:  # client quotas: throttled, read nothing
                await asyncio.sleep(self.quota.muted_for())
            ev = st.next_event()
            if ev is NEED_DATA:
                if st.frame_started:
                    self._arm_frame_timer()
                st.receive_data(await self._read_some())
            elif isinstance(ev, NeedMemory):
                await self._reserve(ev.size)
            elif isinstance(ev, Request):
                await self._dispatch(ev)
            elif isinstance(ev, Answer):
                log.info("kafka.answer peer=%s %s", self.peer, ev.note)
                self._push(ev.data, 0, None, ev.reserved)
            elif isinstance(ev, SaslToken):
                self._raw_token(ev)
            else:
                assert isinstance(ev, Close)
                if ev.reason is CloseReason.EOF:
                    self.closed_reason = CloseReason.EOF.value
                    return
                raise ProtocolError(ev)

    async def _dispatch(self, ev: Request) -> None:
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
        try:
            result = await api.handle(self.server.context, call)
            # client quotas: request_percentage counts the dispatch step's time
            self.server.context.quotas.record_request_time(
                self.quota, time.perf_counter() - started
            )
        except Exception as exc:  # a bug: answer this request, keep the connection
            answer = self._error_answer(api, call, exc)
            if answer is _CLOSE:
                raise ProtocolError(
                    self.state.close(CloseReason.NO_ERROR_ANSWER, f"{api.name} v{ev.version}")
                ) from None
            self._push(answer, 0, None, ev.reserved, grant)
            return
        self._push(result, cost, (api, call), ev.reserved, grant)
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
        self.state.admit(0)
        self._queue.append((step.challenge, 0, None, ev.reserved, -1))
        self._queue_wake.set()

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
        self._queue_wake.set()

    # ------------------------------------------------------------- writing

    async def _write_loop(self) -> None:
        writer = self.writer
        st = self.state
        while True:
            if not self._queue:
                self._queue_wake.clear()
                await self._queue_wake.wait()
                continue
            item, cost, origin, reserved, grant = self._queue.popleft()
            if item is _CLOSE:
                return
            fetch_bytes = max(grant, 0)
            data: Any = None
            try:
                if isinstance(item, asyncio.Future):
                    try:
                        data = await item
                    except Exception as exc:  # the handler's future failed: answer it
                        if origin is None:
                            raise
                        data = self._error_answer(*origin, exc)
                else:
                    data = item
            finally:
                parts = st.send(None if data is _CLOSE else data, cost)
                self.server.release_produce_bytes(cost)
                self._room.set()
                if grant >= 0:  # account the Fetch response's real size from now on
                    fetch_bytes = _size_of(data)
                    if not self._released:
                        self.memory.fetches.settle(grant, fetch_bytes)
                        self._fetch_held += fetch_bytes - grant
            try:
                if data is _CLOSE:  # not even an error answer could be formed
                    st.close(CloseReason.NO_ERROR_ANSWER)
                    self.closed_reason = CloseReason.NO_ERROR_ANSWER.value
                    self.writer.close()
                    return
                if not parts:
                    continue
                writer.writelines(tls_runs(parts) if self._tls else parts)
                transport = writer.transport
                if transport.get_write_buffer_size() or transport.is_closing():
                    # Only a transport holding unsent bytes can be paused (its
                    # buffer above the high-water mark), and a closing one raises
                    # here: otherwise drain() would return at once, for two frames
                    # of coroutine machinery per response.
                    await writer.drain()
            finally:
                self._release(reserved, fetch_bytes)
            # A response is activity too: idleness counts from the later of the
            # last read started and the last response written (as Kafka's).
            self._deadline = asyncio.get_running_loop().time() + self.limits.idle_timeout_s

    def abort(self) -> None:
        """Server shutdown: drop the socket and stop writing at once."""
        self.state.close(CloseReason.SHUTDOWN)
        transport = self.writer.transport
        if transport is not None:
            transport.abort()
        task = getattr(self, "_writer_task", None)
        if task is not None:
            task.cancel()
        if self._read_task is not None and not self._reading:
            # Waiting for memory or for room: no socket event would wake it now.
            self._read_task.cancel()
