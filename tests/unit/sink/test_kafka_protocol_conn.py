"""The Kafka connection as a BufferedProtocol (sink.kafka.connection), driven through
get_buffer/buffer_updated on a fake transport (no socket): what it answers inline,
how it splits frames however they arrive, and every bound it keeps."""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import struct

import pytest
from kio.serial import entity_reader

from sink.kafka import KafkaLimits
from sink.kafka.connection import Connection
from sink.kafka.protocol import response_schema
from sink.kafka.server import KafkaServer
from tests.helpers.kafka_wire import encode_request
from tests.unit.sink.batches import make_batch
from tests.unit.sink.memory_services import MemoryNode
from tests.unit.sink.requests import request_values

API_VERSIONS = 18


class FakeTransport:
    """What the connection uses of a transport; records what it is asked."""

    def __init__(self) -> None:
        self.out = bytearray()
        self.writes = 0
        self.paused = False
        self.closed = False
        self.aborted = False

    def get_extra_info(self, name: str, default: object = None) -> object:
        return {"peername": ("127.0.0.1", 40000)}.get(name, default)

    def write(self, data: bytes) -> None:
        self.out += data
        self.writes += 1

    def writelines(self, parts: list) -> None:
        for p in parts:
            self.out += p
        self.writes += 1

    def pause_reading(self) -> None:
        self.paused = True

    def resume_reading(self) -> None:
        self.paused = False

    def is_closing(self) -> bool:
        return self.closed or self.aborted

    def close(self) -> None:
        self.closed = True

    def abort(self) -> None:
        self.aborted = True


def feed(conn: Connection, data: bytes, chunk: int | None = None) -> None:
    """data into the connection as the transport would: into the buffers it lends."""
    while data:
        buf = conn.get_buffer(-1)
        n = min(len(buf), len(data), chunk or len(data))
        buf[:n] = data[:n]
        data = data[n:]
        conn.buffer_updated(n)


def responses(out: bytes | bytearray) -> list[bytes]:
    frames, pos = [], 0
    while pos + 4 <= len(out):
        (size,) = struct.unpack_from(">i", out, pos)
        frames.append(bytes(out[pos + 4 : pos + 4 + size]))
        pos += 4 + size
    assert pos == len(out), "a partial response was written"
    return frames


def api_versions(corr: int) -> bytes:
    return encode_request(
        API_VERSIONS, 3, corr, {"client_software_name": "t", "client_software_version": "1"}
    )


def corr_of(frame: bytes) -> int:
    return struct.unpack_from(">i", frame, 0)[0]


def decode_api_versions(frame: bytes):
    cls = response_schema(API_VERSIONS, 3)
    hdr, n = entity_reader(cls.__header_schema__)(frame, 0)
    return hdr, entity_reader(cls)(frame, n)[0]


def open_conn(limits: KafkaLimits | None = None) -> tuple[KafkaServer, Connection, FakeTransport]:
    server = KafkaServer(MemoryNode(), "127.0.0.1", 0, limits=limits or KafkaLimits())
    conn = Connection(server)
    t = FakeTransport()
    conn.connection_made(t)  # type: ignore[arg-type]
    return server, conn, t


@contextlib.contextmanager
def api_versions_handled_by(make):
    """ApiVersions' handler replaced for the block: make(real) -> the handler (an async
    function of (ctx, call)); real is the registered one, to answer with."""
    from sink.kafka import handlers

    api = handlers.REGISTRY[API_VERSIONS]
    real = api.handle
    object.__setattr__(api, "handle", make(real))
    try:
        yield
    finally:
        object.__setattr__(api, "handle", real)


def gated(gate: asyncio.Event, calls: list | None = None):
    """make() for api_versions_handled_by: each call waits for gate, then answers."""

    def make(real):
        async def handle(ctx, call):
            if calls is not None:
                calls.append(call)
            await gate.wait()
            return await real(ctx, call)

        return handle

    return make


def run(coro_fn):
    """Run an async test body on a fresh loop (the connection needs a running one)."""
    return asyncio.run(coro_fn())


def test_api_versions_answered_inline_without_a_task():
    async def body():
        server, conn, t = open_conn()
        before = len(asyncio.all_tasks())
        feed(conn, api_versions(7))
        # Answered in the callback that read it: no task, no loop iteration.
        assert len(asyncio.all_tasks()) == before
        (frame,) = responses(t.out)
        hdr, resp = decode_api_versions(frame)
        assert hdr.correlation_id == 7 and resp.error_code == 0
        assert server.connections == {conn} and not t.paused
        conn.connection_lost(None)
        assert not server.connections and server.admission.total == 0

    run(body)


def test_frames_split_anyhow_are_answered_in_order():
    seed = int(os.environ.get("SEED", random.randrange(1 << 30)))
    print(f"seed={seed}")
    rng = random.Random(seed)

    async def body():
        _server, conn, t = open_conn()
        wire = b"".join(api_versions(c) for c in range(50))
        pos = 0
        while pos < len(wire):  # random cuts: inside sizes, headers, bodies
            n = rng.randint(1, 300)
            feed(conn, wire[pos : pos + n], chunk=rng.randint(1, n))
            pos += n
        got = [corr_of(f) for f in responses(t.out)]
        assert got == list(range(50))
        # Whatever was ready together went out in one write.
        assert t.writes <= 50

    run(body)


def test_pipelined_frames_in_one_read_are_written_with_one_call():
    async def body():
        _server, conn, t = open_conn()
        feed(conn, b"".join(api_versions(c) for c in range(20)))
        assert [corr_of(f) for f in responses(t.out)] == list(range(20))
        assert t.writes == 1

    run(body)


def test_oversize_prefix_closes_before_any_allocation():
    async def body():
        _server, conn, t = open_conn(KafkaLimits(max_frame_bytes=1 << 20))
        for prefix in (struct.pack(">i", (1 << 20) + 1), struct.pack(">i", -1)):
            server2, conn2, t2 = open_conn(KafkaLimits(max_frame_bytes=1 << 20))
            feed(conn2, prefix + b"\x00" * 8)
            assert conn2.state.frame_remaining == 0  # no body buffer was made
            assert t2.closed and not server2.connections
            assert server2.memory.requests.used == 0
        feed(conn, b"\x00\x00")  # half a size prefix: waits, nothing allocated
        assert not t.closed and conn.state.buffered == 2

    run(body)


def test_granted_frame_is_read_into_its_own_buffer():
    async def body():
        server, conn, t = open_conn()
        frame = api_versions(3)
        feed(conn, frame[:10])
        # Memory was reserved from the size prefix; the body goes straight into the
        # frame's buffer (get_buffer lends exactly what is missing).
        size = len(frame) - 4
        assert server.memory.requests.used == size
        assert len(conn.get_buffer(-1)) == conn.state.frame_remaining == size - 6
        feed(conn, frame[10:])
        assert [corr_of(f) for f in responses(t.out)] == [3]
        assert server.memory.requests.used == 0  # released once written

    run(body)


def test_write_pause_holds_responses_and_back_pressure_stops_reading():
    async def body():
        _server, conn, t = open_conn(KafkaLimits(max_inflight_requests=4))
        conn.pause_writing()  # a client that does not read its responses
        feed(conn, b"".join(api_versions(c) for c in range(10)))
        assert t.out == b""
        assert t.paused, "reading must stop at max_inflight_requests"
        assert conn.state.inflight == 4
        conn.resume_writing()
        # Written in order; the rest is read and answered once there is room.
        await asyncio.sleep(0)  # the room recheck is a loop callback
        assert [corr_of(f) for f in responses(t.out)] == list(range(10))
        assert not t.paused

    run(body)


def test_eof_after_requests_writes_their_answers_then_closes():
    async def body():
        server, conn, t = open_conn()
        feed(conn, api_versions(1) + api_versions(2))
        assert conn.eof_received() is True
        assert [corr_of(f) for f in responses(t.out)] == [1, 2]
        assert t.closed and conn.closed_reason == "eof" and not server.connections

    run(body)


def test_truncated_frame_at_eof_and_garbage_close_the_connection():
    async def body():
        for data in (api_versions(1)[:-3], b"\x00\x00\x00\x08" + b"\xff" * 8):
            server, conn, t = open_conn()
            feed(conn, data)
            conn.eof_received()
            assert t.closed and not server.connections
            assert server.memory.requests.used == 0

    run(body)


def test_idle_connection_is_closed_by_its_timer():
    async def body():
        server, conn, t = open_conn(KafkaLimits(idle_timeout_s=0.05))
        feed(conn, api_versions(1)[:3])
        deadline = asyncio.get_running_loop().time() + 10
        while not t.closed:
            assert asyncio.get_running_loop().time() < deadline, "idle timer never fired"
            await asyncio.sleep(0.01)
        assert conn.closed_reason is not None and "idle" in conn.closed_reason
        assert not server.connections

    run(body)


def test_handler_that_suspends_finishes_in_a_task_and_blocks_the_next_request():
    async def body():
        server, conn, t = open_conn()
        gate = asyncio.Event()
        with api_versions_handled_by(gated(gate)):  # a dispatch step that waits
            feed(conn, api_versions(1) + api_versions(2))
            assert t.out == b"" and t.paused  # step 1 waits; request 2 is not dispatched
            gate.set()
            deadline = asyncio.get_running_loop().time() + 10
            while len(responses(t.out)) < 2:
                assert asyncio.get_running_loop().time() < deadline
                await asyncio.sleep(0)
            assert [corr_of(f) for f in responses(t.out)] == [1, 2]
            assert not t.paused
        conn.connection_lost(None)
        assert not server.connections

    run(body)


def test_handler_error_is_answered_and_the_connection_kept():
    async def body():
        server, conn, t = open_conn()

        async def broken(ctx, call):
            raise RuntimeError("boom")

        with api_versions_handled_by(lambda real: broken):
            feed(conn, api_versions(1))
        feed(conn, api_versions(2))
        frames = responses(t.out)
        assert [corr_of(f) for f in frames] == [1, 2]
        assert decode_api_versions(frames[0])[1].error_code != 0
        assert server.handler_errors == 1 and not t.closed

    run(body)


@pytest.mark.parametrize("stop", [True, False])
def test_abort_and_loss_release_everything(stop):
    async def body():
        server, conn, t = open_conn()
        frame = api_versions(1)
        feed(conn, frame[:8])  # a granted frame, half read
        assert server.memory.requests.used > 0
        if stop:
            await server.stop()
            assert t.aborted
        else:
            conn.connection_lost(ConnectionResetError())
        assert server.memory.requests.used == 0 and not server.connections
        assert server.admission.total == 0

    run(body)


def test_drain_answers_what_was_read_then_closes_and_reads_nothing_more():
    """Graceful shutdown (KafkaServer.drain): a request already read is answered, even
    one whose handler is still waiting (a produce waiting for its outcome after a
    hand-off); a later request is never dispatched; each connection closes once it
    owes nothing, an idle one at once."""

    async def body():
        server, busy, t = open_conn()
        idle = Connection(server)
        t_idle = FakeTransport()
        idle.connection_made(t_idle)  # type: ignore[arg-type]
        gate = asyncio.Event()
        calls: list = []
        with api_versions_handled_by(gated(gate, calls)):
            feed(busy, api_versions(1))
            assert t.out == b"" and len(calls) == 1
            drained = asyncio.ensure_future(server.drain(10.0))
            await asyncio.sleep(0)
            assert t_idle.closed and idle not in server.connections  # owed nothing
            assert not t.closed and busy in server.connections  # owes an answer
            feed(busy, api_versions(2))  # after the drain began: dropped
            gate.set()
            assert await drained == 0
        assert [corr_of(f) for f in responses(t.out)] == [1]
        assert len(calls) == 1 and t.closed and not t.aborted
        assert not server.connections and server.admission.total == 0
        assert busy.closed_reason == "server shutdown"

    run(body)


def test_drain_cuts_what_is_still_owed_after_its_grace():
    async def body():
        server, conn, t = open_conn()
        gate = asyncio.Event()
        with api_versions_handled_by(gated(gate)):
            feed(conn, api_versions(1))
            assert await server.drain(0.05) == 1
            await server.stop()
        gate.set()
        assert t.aborted and not server.connections
        assert server.memory.requests.used == 0 and server.admission.total == 0

    run(body)


def test_drain_answers_a_fetch_long_poll_at_once():
    """A consumer's Fetch waiting out its max_wait (KafkaJS: 5 s) would hold the drain
    for its whole grace: the drain answers it with what there is."""

    async def body():
        server, conn, t = open_conn()
        loop = asyncio.get_running_loop()
        feed(conn, encode_request(0, 9, 1, request_values(0, make_batch([b"a"]))))
        deadline = loop.time() + 10
        while len(responses(t.out)) < 1:  # the produce, applied at once here
            assert loop.time() < deadline
            await asyncio.sleep(0)
        fetch = request_values(1) | {"max_wait": 30_000}
        part = fetch["topics"][0]["partitions"][0] | {"fetch_offset": 1}  # the high watermark
        fetch["topics"] = [fetch["topics"][0] | {"partitions": [part]}]
        feed(conn, encode_request(1, 12, 2, fetch))
        for _ in range(20):
            await asyncio.sleep(0)
        assert len(responses(t.out)) == 1  # the Fetch waits for data
        t0 = loop.time()
        assert await server.drain(10.0) == 0
        assert loop.time() - t0 < 5.0, "the long poll held the drain"
        assert [corr_of(f) for f in responses(t.out)] == [1, 2] and t.closed

    run(body)
