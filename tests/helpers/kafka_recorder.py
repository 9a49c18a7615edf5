"""A recording TCP proxy in front of Kafka listeners: which API versions a client sends,
and what the server answers to each.

Each route listens on one port and forwards to one node's real Kafka port, so a node
advertises the proxy port in Metadata (`RAFTSINK_KAFKA_LISTEN` binds it elsewhere, see
RecordedSinkCluster) and every connection a client opens, bootstrap or not, passes through.
Bytes are forwarded unchanged; a copy is cut into frames on the side:
- client -> server: api key, version, correlation id and client id of every request;
- server -> client: the response with that correlation id, decoded strictly with kio's schema
  of the request's (api, version) (leftover bytes or a decode error are recorded), and the
  non-zero error codes anywhere in it.
A request still unanswered when the server closes the connection is recorded as such:
that is how a Kafka server refuses a version it does not serve.

The proxy runs its own event loop in a daemon thread; `exchanges()` is safe to call from
the test thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import enum
import struct
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field

from kio.serial import entity_reader

from sink.kafka.protocol import response_schema
from tests.helpers.kafka_wire import API_NAMES

NO_RESPONSE = "no response: server closed the connection"
CLIENT_CLOSED = "no response: client closed the connection"


@dataclass
class Exchange:
    """One request seen by the proxy and what came back."""

    node: int
    conn: int
    client_id: str | None
    api_key: int
    api_version: int
    correlation_id: int
    outcome: str = "pending"  # "response", NO_RESPONSE, CLIENT_CLOSED, "pending"
    errors: list[str] = field(default_factory=list)  # non-zero error codes in the response
    decode: str = ""  # "" when the response decoded strictly, else what went wrong
    request: bytes = b""  # the request frame as the client sent it (after the size prefix)

    @property
    def api(self) -> str:
        return API_NAMES.get(self.api_key, f"api{self.api_key}")

    def describe(self) -> str:
        what = self.outcome
        if self.errors:
            what += " errors=" + ",".join(sorted(set(self.errors)))
        if self.decode:
            what += f" decode: {self.decode}"
        return f"{self.api} v{self.api_version} (node {self.node}, {self.client_id}): {what}"


def _error_codes(entity: object) -> Iterator[str]:
    """Every non-zero error_code in a decoded kio response, by name."""
    if dataclasses.is_dataclass(entity):
        for f in dataclasses.fields(entity):
            value = getattr(entity, f.name)
            if f.name == "error_code" and value is not None and int(value) != 0:
                yield value.name if isinstance(value, enum.Enum) else str(value)
            else:
                yield from _error_codes(value)
    elif isinstance(entity, tuple | list):
        for item in entity:
            yield from _error_codes(item)


def decode_response(ex: Exchange, frame: bytes) -> None:
    """Decode `frame` (without its size prefix) as the answer to `ex`, strictly."""
    try:
        cls = response_schema(ex.api_key, ex.api_version)
        _hdr, n = entity_reader(cls.__header_schema__)(frame, 0)
        body, m = entity_reader(cls)(frame, n)
    except Exception as exc:  # any decode failure is a finding, recorded, not raised
        ex.decode = f"{type(exc).__name__}: {exc}"
        return
    if n + m != len(frame):
        ex.decode = f"{len(frame) - n - m} bytes left over"
    ex.errors = list(_error_codes(body))


def parse_request_header(frame: bytes) -> tuple[int, int, int, str | None]:
    """api key, version, correlation id, client id (request header v1/v2; v0 has none)."""
    api_key, version, corr = struct.unpack_from(">hhi", frame, 0)
    client_id = None
    if len(frame) >= 10:
        (n,) = struct.unpack_from(">h", frame, 8)
        if n >= 0:
            client_id = frame[10 : 10 + n].decode(errors="replace")
    return api_key, version, corr, client_id


class _Framer:
    """Cuts a byte stream into Kafka frames (4-byte big-endian size prefix)."""

    def __init__(self) -> None:
        self.buf = bytearray()

    def feed(self, data: bytes) -> Iterator[bytes]:
        self.buf += data
        while len(self.buf) >= 4:
            (size,) = struct.unpack_from(">i", self.buf, 0)
            if size < 0 or len(self.buf) < 4 + size:
                return
            frame = bytes(self.buf[4 : 4 + size])
            del self.buf[: 4 + size]
            yield frame


class KafkaRecorder:
    """Routes listen_port -> target_port (one per node); records every exchange."""

    def __init__(self, routes: dict[int, tuple[int, int]]) -> None:
        """routes: node id -> (listen port, target port), all on 127.0.0.1."""
        self.routes = routes
        self._lock = threading.Lock()
        self._exchanges: list[Exchange] = []
        self._conns = 0
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._servers: list[asyncio.Server] = []

    def start(self) -> None:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(10)

    async def _start(self) -> None:
        for node, (listen, target) in self.routes.items():
            self._servers.append(
                await asyncio.start_server(
                    lambda r, w, node=node, target=target: self._handle(node, target, r, w),
                    "127.0.0.1",
                    listen,
                )
            )

    def stop(self) -> None:
        async def close() -> None:
            for s in self._servers:
                s.close()
            for task in asyncio.all_tasks():
                if task is not asyncio.current_task():
                    task.cancel()

        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(close(), self._loop).result(5)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)

    def exchanges(self, client_id: str | None = None) -> list[Exchange]:
        with self._lock:
            return [
                dataclasses.replace(e, errors=list(e.errors))
                for e in self._exchanges
                if client_id is None or e.client_id == client_id
            ]

    def clear(self) -> None:
        with self._lock:
            self._exchanges.clear()

    async def _handle(
        self, node: int, target: int, cr: asyncio.StreamReader, cw: asyncio.StreamWriter
    ) -> None:
        with self._lock:
            self._conns += 1
            conn = self._conns
        pending: dict[int, Exchange] = {}
        try:
            sr, sw = await asyncio.open_connection("127.0.0.1", target)
        except OSError:
            cw.close()
            return
        closed_by: list[str] = []

        async def client_to_server() -> None:
            framer = _Framer()
            while data := await cr.read(65536):
                for frame in framer.feed(data):
                    key, ver, corr, cid = parse_request_header(frame)
                    ex = Exchange(node, conn, cid, key, ver, corr, request=bytes(frame))
                    with self._lock:
                        self._exchanges.append(ex)
                        pending[corr] = ex
                sw.write(data)
                await sw.drain()
            closed_by.append("client")

        async def server_to_client() -> None:
            framer = _Framer()
            while data := await sr.read(65536):
                for frame in framer.feed(data):
                    (corr,) = struct.unpack_from(">i", frame, 0)
                    with self._lock:
                        ex = pending.pop(corr, None)
                    if ex is not None:
                        decode_response(ex, frame)
                        with self._lock:
                            ex.outcome = "response"
                cw.write(data)
                await cw.drain()
            closed_by.append("server")

        tasks = [
            asyncio.ensure_future(client_to_server()),
            asyncio.ensure_future(server_to_client()),
        ]
        try:
            await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for t in tasks:
                t.cancel()
            with self._lock:
                # acks=0 Produce has no response by design; anything else unanswered is lost.
                why = NO_RESPONSE if closed_by[:1] == ["server"] else CLIENT_CLOSED
                for ex in pending.values():
                    ex.outcome = why
            for w in (cw, sw):
                with contextlib.suppress(Exception):
                    w.close()
