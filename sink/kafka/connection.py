"""One client connection: framing, limits, dispatch, in-order responses.

Reader loop: 4-byte size (checked against max_frame_bytes BEFORE the body is
read), body, header + body parse with kio, dispatch. Each dispatch returns the
response bytes, a future of them, or None (acks=0); these go into a FIFO that
one writer task drains in order, so responses leave in request order
(kafka-python requires it) while Produce/Fetch wait concurrently.

Idleness: one lazily re-armed timer per connection (not a wait_for per read,
which costs a task and a timer handle per frame on the hot path). Reads only
move a deadline; the timer, when it fires, cancels the read loop if the
deadline really passed while it was waiting for input.

Back-pressure: the reader stops reading the socket while the connection has
max_inflight_requests unanswered requests or too many pending produce bytes
(per connection or server-wide). librdkafka ignores throttle_time.

Malformed input (framing, impossible lengths, unsupported versions) closes the
connection (after flushing the responses of earlier requests), as Kafka does; an
exception in a handler answers that request with UNKNOWN_SERVER_ERROR in its own
shape and the connection goes on. Nothing here can stop the node.
"""

from __future__ import annotations

import asyncio
import collections
import functools
import logging
import struct
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from kio.index import load_request_schema
from kio.schema.index import api_key_map
from kio.serial import entity_reader

from sink.kafka import errors as E
from sink.kafka.handlers import (
    API_VERSIONS_KEY,
    ERROR_RESPONSES,
    HANDLERS,
    SUPPORTED,
    encode_api_versions,
)
from sink.kafka.handlers.produce import PRODUCE
from sink.kafka.protocol import FrameError, NullError, request_checker, strip_unknown_tags

if TYPE_CHECKING:
    from sink.kafka.server import KafkaServer

log = logging.getLogger("sink.kafka")

_SIZE = struct.Struct(">i")
_HEAD = struct.Struct(">hhi")
_CLOSE = object()


class ProtocolError(Exception):
    """Input that ends the connection."""


class IdleTimeout(ProtocolError):
    """Nothing (or not enough) arrived within idle_timeout_s."""


def api_name(api_key: int) -> str:
    return f"{api_key_map.get(api_key, 'unknown')}({api_key})"


class _Request:
    """What an error answer needs to know of a dispatched request."""

    __slots__ = ("api_key", "corr", "req", "version")

    def __init__(self, api_key: int, version: int, corr: int, req: Any) -> None:
        self.api_key, self.version, self.corr, self.req = api_key, version, corr, req


@functools.lru_cache(maxsize=512)
def _request_readers(api_key: int, version: int) -> tuple[Callable, Callable]:
    """kio's (header, body) readers for one request version. kio resolves the
    schema module by name on every call; the cache takes that off each frame."""
    req_cls = load_request_schema(api_key, version)
    return entity_reader(req_cls.__header_schema__), entity_reader(req_cls)


class Connection:
    def __init__(
        self, server: KafkaServer, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        self.server = server
        self.limits = server.limits
        self.reader = reader
        self.writer = writer
        self.peer = writer.get_extra_info("peername")
        self._queue: collections.deque = collections.deque()
        self._queue_wake = asyncio.Event()
        self._room = asyncio.Event()
        self._inflight = 0
        self._pending_bytes = 0
        self.closed_reason: str | None = None
        # Idle watchdog state: what the read loop waits for ("size", "body" or
        # None while dispatching / waiting for room) and until when.
        self._waiting_for: str | None = None
        self._deadline = 0.0
        self._idle_timer: asyncio.TimerHandle | None = None
        self._idle_expired: str | None = None
        self._read_task: asyncio.Task | None = None
        # Who the client is, for log lines: the header's client id, and the
        # software name/version it sent in ApiVersions v3+.
        self.client_id: str | None = None
        self.client_software: str | None = None

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
                raise IdleTimeout(self._idle_expired) from None
        except IdleTimeout as exc:
            self.closed_reason = str(exc)
            log.info("kafka.close peer=%s reason=%s", self.peer, exc)
        except ProtocolError as exc:
            self.closed_reason = str(exc)
            log.warning("kafka.close peer=%s reason=%s", self.peer, exc)
        except (asyncio.IncompleteReadError, ConnectionError):
            self.closed_reason = "eof"
        except Exception as exc:  # a bug in a handler: drop the connection, keep the node
            self.closed_reason = f"internal error: {exc!r}"
            log.exception("kafka.internal_error peer=%s", self.peer)
        finally:
            if self._idle_timer is not None:
                self._idle_timer.cancel()
            # Flush the responses of earlier requests (bounded), then close.
            self._push(_CLOSE, 0)
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
            self._inflight < lim.max_inflight_requests
            and self._pending_bytes < lim.max_pending_produce_bytes
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

    async def _read_exactly(self, n: int, what: str) -> bytes:
        loop = asyncio.get_running_loop()
        self._deadline = loop.time() + self.limits.idle_timeout_s
        if self._idle_timer is None:
            self._idle_timer = loop.call_at(self._deadline, self._check_idle)
        self._waiting_for = what
        try:
            return await self.reader.readexactly(n)
        finally:
            self._waiting_for = None

    def _check_idle(self) -> None:
        """Timer callback: cancel the read loop if it has waited past its deadline."""
        loop = asyncio.get_running_loop()
        self._idle_timer = None
        what = self._waiting_for
        if what is None:
            return  # dispatching or blocked on back-pressure; the next read re-arms
        now = loop.time()
        if now < self._deadline or (what == "size" and self._inflight > 0):
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
        max_frame = self.limits.max_frame_bytes
        while True:
            await self._wait_for_room()
            try:
                head = await self._read_exactly(4, "size")
            except asyncio.IncompleteReadError as exc:
                if exc.partial:
                    raise ProtocolError("truncated frame size") from None
                return  # clean EOF
            (size,) = _SIZE.unpack(head)
            if size > max_frame:
                raise ProtocolError(f"frame of {size} bytes exceeds max_frame_bytes={max_frame}")
            if size < _HEAD.size + 2:
                raise ProtocolError(f"frame of {size} bytes is too short for a request header")
            try:
                frame = await self._read_exactly(size, "body")
            except asyncio.IncompleteReadError:
                raise ProtocolError("truncated frame body") from None
            await self._dispatch(frame)

    def client(self) -> str:
        """The client as log lines name it: software name/version (ApiVersions v3+),
        else the header's client id."""
        if self.client_software:
            return f"{self.client_software} (client_id={self.client_id!r})"
        return f"client_id={self.client_id!r}"

    async def _dispatch(self, frame: bytes) -> None:
        api_key, version, corr = _HEAD.unpack_from(frame, 0)
        if api_key == API_VERSIONS_KEY and not 0 <= version <= SUPPORTED[API_VERSIONS_KEY][1]:
            # Kafka's fallback: UNSUPPORTED_VERSION in a v0 body listing our APIs.
            log.info(
                "kafka.unsupported_version api=%s version=%d peer=%s %s: answered with the v0 "
                "fallback",
                api_name(api_key),
                version,
                self.peer,
                self.client(),
            )
            self._push(encode_api_versions(0, corr, SUPPORTED, E.UNSUPPORTED_VERSION), 0)
            return
        rng = SUPPORTED.get(api_key)
        if rng is None:
            raise ProtocolError(f"unsupported API {api_name(api_key)} from {self.client()}")
        if not rng[0] <= version <= rng[1]:
            # Kafka closes the connection (the client negotiated nothing, or ignored it).
            raise ProtocolError(
                f"unsupported version {version} of API {api_name(api_key)} (served "
                f"v{rng[0]}-v{rng[1]}) from {self.client()}"
            )
        # No length from the wire reaches kio's native reader unchecked: it would
        # allocate what the frame claims and abort the process on failure.
        try:
            shape = request_checker(api_key, version)(frame)
        except NullError as exc:
            # INVALID_REQUEST where the version's response can say so without the
            # request (a top-level error code); else a protocol error, as Kafka's.
            answer = ERROR_RESPONSES[api_key](version, corr, None, E.INVALID_REQUEST)
            if answer is None:
                raise ProtocolError(
                    f"malformed request (API {api_name(api_key)} v{version}): {exc}"
                ) from None
            log.warning(
                "kafka.invalid_request api=%s version=%d peer=%s %s: %s",
                api_name(api_key),
                version,
                self.peer,
                self.client(),
                exc,
            )
            self._push(answer, 0)
            return
        except FrameError as exc:
            raise ProtocolError(
                f"malformed request (API {api_name(api_key)} v{version}): {exc}"
            ) from None
        # KIP-482: unknown tagged fields are skipped (kio's reader refuses them).
        parsed = strip_unknown_tags(frame, shape.edits) if shape.edits else frame
        try:
            read_header, read_body = _request_readers(api_key, version)
            hdr, n = read_header(parsed, 0)
            req, _m = read_body(parsed, n)
        except Exception as exc:
            raise ProtocolError(
                f"malformed request (API {api_name(api_key)} v{version}): "
                f"{type(exc).__name__}: {exc}"
            ) from None
        self.client_id = hdr.client_id
        # Trailing bytes are tolerated: kio's reader leaves some (e.g. Metadata
        # v12 with topics=null from librdkafka's admin client) unconsumed.
        if api_key == API_VERSIONS_KEY:
            if version >= 3:
                self.client_software = f"{req.client_software_name}/{req.client_software_version}"
            self._push(encode_api_versions(version, corr, SUPPORTED), 0)
            return
        request = _Request(api_key, version, corr, req)
        try:
            result: Any = await HANDLERS[api_key](self.server.context, version, corr, req, frame)
        except Exception as exc:  # a bug: answer this request, keep the connection
            answer = self._error_answer(request, exc)
            if answer is _CLOSE:
                raise ProtocolError(f"no error answer for {api_name(api_key)} v{version}") from None
            if answer is not None:
                self._push(answer, 0)
            return
        if result is None:
            return
        cost = len(frame) if api_key == PRODUCE and isinstance(result, asyncio.Future) else 0
        self._push(result, cost, request)

    def _error_answer(self, request: _Request, exc: BaseException) -> Any:
        """UNKNOWN_SERVER_ERROR in the request's own shape for a handler that
        raised (Kafka's answer to an unexpected exception); logged with who asked,
        and counted. None: no answer (acks=0)."""
        self.server.handler_errors += 1
        log.error(
            "kafka.handler_error api=%s version=%d peer=%s %s: %r",
            api_name(request.api_key),
            request.version,
            self.peer,
            self.client(),
            exc,
            exc_info=exc,
        )
        try:
            return ERROR_RESPONSES[request.api_key](
                request.version, request.corr, request.req, E.UNKNOWN_SERVER_ERROR
            )
        except Exception:
            log.exception("kafka.error_response_failed api=%s", api_name(request.api_key))
            return _CLOSE

    def _push(self, item: Any, cost: int, request: _Request | None = None) -> None:
        if item is not _CLOSE:
            self._inflight += 1
            self._pending_bytes += cost
            self.server.pending_produce_bytes += cost
        self._queue.append((item, cost, request))
        self._queue_wake.set()

    # ------------------------------------------------------------- writing

    async def _write_loop(self) -> None:
        writer = self.writer
        while True:
            if not self._queue:
                self._queue_wake.clear()
                await self._queue_wake.wait()
                continue
            item, cost, request = self._queue.popleft()
            if item is _CLOSE:
                return
            try:
                if isinstance(item, asyncio.Future):
                    try:
                        data = await item
                    except Exception as exc:  # the handler's task failed: answer it
                        if request is None:
                            raise
                        data = self._error_answer(request, exc)
                else:
                    data = item
            finally:
                self._inflight -= 1
                self._pending_bytes -= cost
                self.server.release_produce_bytes(cost)
                self._room.set()
            if data is None:
                continue
            if data is _CLOSE:  # not even an error answer could be formed
                self.closed_reason = "no error answer could be formed"
                self.writer.close()
                return
            if isinstance(data, list):
                size = sum(len(p) for p in data)
                writer.write(_SIZE.pack(size))
                writer.writelines(data)
            else:
                writer.write(_SIZE.pack(len(data)) + data)
            await writer.drain()
            # A response is activity too: idleness counts from the later of the
            # last read started and the last response written (as Kafka's).
            self._deadline = asyncio.get_running_loop().time() + self.limits.idle_timeout_s

    def abort(self) -> None:
        """Server shutdown: drop the socket and stop writing at once."""
        transport = self.writer.transport
        if transport is not None:
            transport.abort()
        task = getattr(self, "_writer_task", None)
        if task is not None:
            task.cancel()
