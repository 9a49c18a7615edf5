"""Round trips the way Raft uses them, without Raft: gRPC aio against the alternatives.

An append one way, its answer back on the peer's own stream (as
raftlog/transport/grpc_transport.py does: one stream_unary call per direction),
1 KiB out, 32 B back, at 150/s for 10 s; p50/p99 and both processes' CPU per round
trip (from /proc, so the pacing loop's own wake-ups are in every mode's figure).
Modes, each in its own pair of processes:

    aio   grpc.aio client streams (what raftlog runs; raftlog.grpc_env applied)
    sync  synchronous gRPC: a sender thread per peer feeding a blocking client stream,
          a thread-pool server handing each message to the event loop
          (call_soon_threadsafe), the "synchronous gRPC stream on a thread" of issue 17
    tcp   a plain asyncio TCP connection per direction with 4-byte length framing: the
          floor any transport on this event loop pays, not a transport raftlog offers

    python bench/grpc_rtt.py                 # aio
    python bench/grpc_rtt.py --mode all --runs 3
    GRPC_EXPERIMENTS= python bench/grpc_rtt.py   # gRPC's own defaults (EventEngine)

Measured figures and what they decided are in docs/performance.md ("What a message costs").
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import queue
import struct
import subprocess
import sys
import threading
import time
from concurrent import futures

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
# isort: off
import raftlog.grpc_env  # noqa: F401  (before grpc: gRPC reads its settings at import)
import grpc
from common import cpu_seconds, loadavg, machine, percentile
# isort: on

RATE, SECONDS, WARMUP = 150, 10.0, 20
MODES = ("aio", "sync", "tcp")
_SERVICE = "t.T"


def _handlers(send) -> tuple:
    h = grpc.stream_unary_rpc_method_handler(send)
    return (grpc.method_handlers_generic_handler(_SERVICE, {"Send": h}),)


async def _serve(mode: str, port: int, q: asyncio.Queue[bytes]) -> object:
    """A server that puts every message it reads on q (on the event loop)."""
    addr = f"127.0.0.1:{port}"
    if mode == "aio":

        async def send_aio(it, ctx) -> bytes:
            async for b in it:
                q.put_nowait(b)
            return b""

        s = grpc.aio.server()
        s.add_generic_rpc_handlers(_handlers(send_aio))
        s.add_insecure_port(addr)
        await s.start()
        return s
    loop = asyncio.get_running_loop()
    if mode == "sync":

        def send_sync(it, ctx) -> bytes:
            for b in it:
                loop.call_soon_threadsafe(q.put_nowait, b)
            return b""

        s = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        s.add_generic_rpc_handlers(_handlers(send_sync))
        s.add_insecure_port(addr)
        s.start()
        return s
    return await loop.create_server(lambda: _Framed(q), "127.0.0.1", port)


class _Framed(asyncio.Protocol):
    """Length-prefixed frames off a TCP connection, each put on q."""

    def __init__(self, q: asyncio.Queue[bytes]) -> None:
        self.q = q
        self.buf = bytearray()

    def data_received(self, data: bytes) -> None:
        buf = self.buf
        buf += data
        while len(buf) >= 4:
            (n,) = struct.unpack_from(">I", buf)
            if len(buf) < 4 + n:
                return
            self.q.put_nowait(bytes(buf[4 : 4 + n]))
            del buf[: 4 + n]


class _Sender:
    """One direction's stream to a peer: `await write(b)`."""

    async def start(self, mode: str, port: int) -> None:
        addr = f"127.0.0.1:{port}"
        self.mode = mode
        if mode == "aio":
            self.call = grpc.aio.insecure_channel(addr).stream_unary(f"/{_SERVICE}/Send")()
        elif mode == "sync":
            self.q: queue.SimpleQueue[bytes] = queue.SimpleQueue()
            call = grpc.insecure_channel(addr).stream_unary(f"/{_SERVICE}/Send")

            def requests():
                while True:
                    yield self.q.get()

            threading.Thread(target=lambda: call(requests()), daemon=True).start()
        else:
            loop = asyncio.get_running_loop()
            deadline = time.monotonic() + 10
            while True:
                try:
                    self.tr, _ = await loop.create_connection(asyncio.Protocol, "127.0.0.1", port)
                    return
                except OSError:
                    if time.monotonic() > deadline:
                        raise
                    await asyncio.sleep(0.05)

    async def write(self, b: bytes) -> None:
        if self.mode == "aio":
            await self.call.write(b)
        elif self.mode == "sync":
            self.q.put(b)
        else:
            self.tr.write(struct.pack(">I", len(b)) + b)


async def _peer(mode: str, port: int, back: int) -> None:
    """The follower: answers each message with its first 32 bytes on its own stream."""
    q: asyncio.Queue[bytes] = asyncio.Queue()
    _server = await _serve(mode, port, q)
    print("ready", flush=True)
    out = _Sender()
    await out.start(mode, back)
    while True:
        await out.write((await q.get())[:32])


async def _run(mode: str) -> dict:
    a, b = 24000 + os.getpid() % 500, 24600 + os.getpid() % 500
    p = subprocess.Popen(
        [sys.executable, __file__, "--peer", mode, str(b), str(a)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        q: asyncio.Queue[bytes] = asyncio.Queue()
        _server = await _serve(mode, a, q)
        assert p.stdout is not None
        p.stdout.readline()
        out = _Sender()
        await out.start(mode, b)
        payload = os.urandom(1024)
        for _ in range(WARMUP):
            await out.write(payload)
            await q.get()
        lat: list[float] = []
        c0, p0 = time.process_time(), cpu_seconds([p.pid])
        n = int(RATE * SECONDS)
        t0 = time.perf_counter()
        for k in range(n):
            delay = t0 + k / RATE - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            t = time.perf_counter()
            await out.write(payload)
            await q.get()
            lat.append(time.perf_counter() - t)
        cpu = time.process_time() - c0 + cpu_seconds([p.pid]) - p0
    finally:
        p.kill()
        p.wait()
    return {
        "mode": mode,
        "p50_ms": round(percentile(lat, 0.5) * 1e3, 2),
        "p99_ms": round(percentile(lat, 0.99) * 1e3, 2),
        "cpu_us_per_round_trip": round(cpu / n * 1e6),
        "load": loadavg(),
    }


def _one(mode: str) -> dict:
    """A mode in a fresh process pair (threads and gRPC state never carry over)."""
    out = subprocess.run(
        [sys.executable, __file__, "--child", mode], capture_output=True, text=True, check=True
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--mode", default="aio", choices=(*MODES, "all"))
    ap.add_argument("--runs", type=int, default=1, help="rounds over the modes (interleaved)")
    args = ap.parse_args()
    modes = MODES if args.mode == "all" else (args.mode,)
    print(machine())
    print(f"GRPC_EXPERIMENTS={os.environ.get('GRPC_EXPERIMENTS', '')!r}")
    for r in range(1, args.runs + 1):
        for m in modes:
            res = _one(m)
            print(
                f"run {r} {m:4}: p50 {res['p50_ms']:.2f} ms, p99 {res['p99_ms']:.2f} ms, "
                f"CPU per round trip {res['cpu_us_per_round_trip']} us "
                f"(both processes; load average {res['load']})",
                flush=True,
            )


if __name__ == "__main__":
    if sys.argv[1:2] == ["--peer"]:
        asyncio.run(_peer(sys.argv[2], int(sys.argv[3]), int(sys.argv[4])))
    elif sys.argv[1:2] == ["--child"]:
        print(json.dumps(asyncio.run(_run(sys.argv[2]))), flush=True)
        os._exit(0)  # the sync mode's sender thread blocks in gRPC forever
    else:
        main()
