"""One client connection: framing, limits, dispatch, in-order responses.

Reader loop: 4-byte size (checked against max_frame_bytes BEFORE the body is
read), body, header + body parse with kio, dispatch. Each dispatch returns the
response bytes, a future of them, or None (acks=0); these go into a FIFO that
one writer task drains in order, so responses leave in request order
(kafka-python requires it) while Produce/Fetch wait concurrently.

Back-pressure: the reader stops reading the socket while the connection has
max_inflight_requests unanswered requests or too many pending produce bytes
(per connection or server-wide). librdkafka ignores throttle_time.

Any malformed input closes the connection (after flushing the responses of
earlier requests); nothing here can stop the node.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import struct
from typing import TYPE_CHECKING, Any

from kio.index import load_request_schema
from kio.serial import entity_reader

from sink.kafka import errors as E
from sink.kafka.handlers import API_VERSIONS_KEY, HANDLERS, SUPPORTED, encode_api_versions
from sink.kafka.handlers.produce import PRODUCE

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

    async def run(self) -> None:
        writer_task = self._writer_task = asyncio.create_task(self._write_loop())
        try:
            await self._read_loop()
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
        idle = self.limits.idle_timeout_s
        while True:
            try:
                return await asyncio.wait_for(self.reader.readexactly(n), idle)
            except TimeoutError:
                # readexactly consumes nothing until it has n bytes, so retrying is safe.
                if what == "size" and self._inflight > 0:
                    continue  # waiting on our own responses is not idleness
                raise IdleTimeout(f"idle for {idle}s waiting for the request {what}") from None

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

    async def _dispatch(self, frame: bytes) -> None:
        api_key, version, corr = _HEAD.unpack_from(frame, 0)
        if api_key == API_VERSIONS_KEY and not 0 <= version <= SUPPORTED[API_VERSIONS_KEY][1]:
            # Kafka's fallback: UNSUPPORTED_VERSION in a v0 body listing our APIs.
            self._push(encode_api_versions(0, corr, SUPPORTED, E.UNSUPPORTED_VERSION), 0)
            return
        rng = SUPPORTED.get(api_key)
        if rng is None:
            raise ProtocolError(f"unsupported API key {api_key}")
        if not rng[0] <= version <= rng[1]:
            raise ProtocolError(f"unsupported version {version} of API {api_key}")
        try:
            req_cls = load_request_schema(api_key, version)
            _hdr, n = entity_reader(req_cls.__header_schema__)(frame, 0)
            req, _m = entity_reader(req_cls)(frame, n)
        except KeyError as exc:  # kio: unknown tagged field (KIP-482 says skip; we refuse)
            raise ProtocolError(f"unparseable request (API {api_key} v{version}): {exc}") from None
        except Exception as exc:
            raise ProtocolError(
                f"malformed request (API {api_key} v{version}): {type(exc).__name__}: {exc}"
            ) from None
        # Trailing bytes are tolerated: kio's reader leaves some (e.g. Metadata
        # v12 with topics=null from librdkafka's admin client) unconsumed.
        if api_key == API_VERSIONS_KEY:
            self._push(encode_api_versions(version, corr, SUPPORTED), 0)
            return
        result: Any = await HANDLERS[api_key](self.server.context, version, corr, req, frame)
        if result is None:
            return
        cost = len(frame) if api_key == PRODUCE and isinstance(result, asyncio.Future) else 0
        self._push(result, cost)

    def _push(self, item: Any, cost: int) -> None:
        if item is not _CLOSE:
            self._inflight += 1
            self._pending_bytes += cost
            self.server.pending_produce_bytes += cost
        self._queue.append((item, cost))
        self._queue_wake.set()

    # ------------------------------------------------------------- writing

    async def _write_loop(self) -> None:
        writer = self.writer
        while True:
            if not self._queue:
                self._queue_wake.clear()
                await self._queue_wake.wait()
                continue
            item, cost = self._queue.popleft()
            if item is _CLOSE:
                return
            try:
                data = await item if isinstance(item, asyncio.Future) else item
            finally:
                self._inflight -= 1
                self._pending_bytes -= cost
                self.server.release_produce_bytes(cost)
                self._room.set()
            if data is None:
                continue
            if isinstance(data, list):
                size = sum(len(p) for p in data)
                writer.write(_SIZE.pack(size))
                writer.writelines(data)
            else:
                writer.write(_SIZE.pack(len(data)) + data)
            await writer.drain()

    def abort(self) -> None:
        """Server shutdown: drop the socket and stop writing at once."""
        transport = self.writer.transport
        if transport is not None:
            transport.abort()
        task = getattr(self, "_writer_task", None)
        if task is not None:
            task.cancel()
