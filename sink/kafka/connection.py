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
"""

from __future__ import annotations

import asyncio
import collections
import logging
from typing import TYPE_CHECKING, Any

from sink.kafka.handlers import API_VERSIONS_KEY, REGISTRY, SUPPORTED, Api, Call
from sink.kafka.handlers.api_versions import encode_api_versions
from sink.kafka.protocol.connection import (
    NEED_DATA,
    Answer,
    Close,
    CloseReason,
    ConnectionState,
    Request,
    api_name,
)
from sink.kafka.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from sink.kafka.server import KafkaServer

log = logging.getLogger("sink.kafka")

_CLOSE = object()
_READ_CHUNK = 1 << 18


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
        self.state = ConnectionState(
            max_frame_bytes=self.limits.max_frame_bytes,
            supported=SUPPORTED,
            api_versions_key=API_VERSIONS_KEY,
            invalid_answer=_invalid_answer,
            fallback=_fallback,
        )
        self._queue: collections.deque = collections.deque()
        self._queue_wake = asyncio.Event()
        self._room = asyncio.Event()
        self.closed_reason: str | None = None
        self._reading = False
        self._deadline = 0.0
        self._idle_timer: asyncio.TimerHandle | None = None
        self._idle_expired: str | None = None
        self._read_task: asyncio.Task | None = None

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
                raise ProtocolError(
                    self.state.close(CloseReason.IDLE, self._idle_expired)
                ) from None
        except ProtocolError as exc:
            self.closed_reason = str(exc)
            quiet = exc.close.reason in (CloseReason.IDLE, CloseReason.SHUTDOWN)
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
            # Flush the responses of earlier requests (bounded), then close.
            self._queue.append((_CLOSE, 0, None))
            self._queue_wake.set()
            if not writer_task.done():
                done, _ = await asyncio.wait({writer_task}, timeout=5.0)
                if not done:
                    writer_task.cancel()
            if writer_task.done() and not writer_task.cancelled() and writer_task.exception():
                log.debug("kafka.writer_error peer=%s error=%r", self.peer, writer_task.exception())
            self.writer.close()

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
            return await self.reader.read(_READ_CHUNK)
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
            f"idle for {self.limits.idle_timeout_s}s waiting for the request {what}"
        )
        if self._read_task is not None:
            self._read_task.cancel()

    async def _read_loop(self) -> None:
        st = self.state
        while True:
            await self._wait_for_room()
            ev = st.next_event()
            if ev is NEED_DATA:
                st.receive_data(await self._read_some())
            elif isinstance(ev, Request):
                await self._dispatch(ev)
            elif isinstance(ev, Answer):
                log.info("kafka.answer peer=%s %s", self.peer, ev.note)
                self._push(ev.data, 0, None)
            else:
                assert isinstance(ev, Close)
                if ev.reason is CloseReason.EOF:
                    self.closed_reason = CloseReason.EOF.value
                    return
                raise ProtocolError(ev)

    async def _dispatch(self, ev: Request) -> None:
        api = REGISTRY[ev.api_key]
        call = Call(ev.version, ev.corr, ev.req, ev.frame)
        try:
            result = await api.handle(self.server.context, call)
        except Exception as exc:  # a bug: answer this request, keep the connection
            answer = self._error_answer(api, call, exc)
            if answer is _CLOSE:
                raise ProtocolError(
                    self.state.close(CloseReason.NO_ERROR_ANSWER, f"{api.name} v{ev.version}")
                ) from None
            self._push(answer, 0, None)
            return
        self._push(result, len(ev.frame) if api.priced else 0, (api, call))

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

    def _push(self, item: Any, cost: int, origin: tuple[Api, Call] | None) -> None:
        self.state.admit(cost)
        self.server.pending_produce_bytes += cost
        self._queue.append((item, cost, origin))
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
            item, cost, origin = self._queue.popleft()
            if item is _CLOSE:
                return
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
            if data is _CLOSE:  # not even an error answer could be formed
                st.close(CloseReason.NO_ERROR_ANSWER)
                self.closed_reason = CloseReason.NO_ERROR_ANSWER.value
                self.writer.close()
                return
            if not parts:
                continue
            writer.writelines(parts)
            await writer.drain()
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
