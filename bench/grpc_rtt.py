"""gRPC aio round trips the way Raft uses them, without Raft.

An append one way, its answer back on the peer's own client stream (as
raftlog/transport/grpc_transport.py does: one stream_unary call per direction),
1 KiB out, 32 B back, at 150/s for 10 s; p50/p99 and both processes' CPU per round
trip. For A/B of gRPC settings (docs/performance.md, "The replication path"):

    python bench/grpc_rtt.py
    GRPC_EXPERIMENTS=-event_engine_client,-event_engine_listener,-event_engine_for_all_other_endpoints \\
        python bench/grpc_rtt.py

raftlog/grpc_env.py sets the second in Raft processes; this script does not import it.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time

import grpc

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import cpu_seconds, loadavg, percentile

RATE, SECONDS, WARMUP = 150, 10.0, 20


async def _serve(port: int) -> tuple[grpc.aio.Server, asyncio.Queue[bytes]]:
    """A server whose one stream_unary method puts every message it reads on a queue."""
    q: asyncio.Queue[bytes] = asyncio.Queue()

    async def send(it, ctx) -> bytes:
        async for b in it:
            q.put_nowait(b)
        return b""

    s = grpc.aio.server()
    handler = grpc.stream_unary_rpc_method_handler(send)
    s.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("t.T", {"Send": handler}),))
    s.add_insecure_port(f"127.0.0.1:{port}")
    await s.start()
    return s, q


async def _peer(port: int, back: int) -> None:
    """The follower: answers each message with its first 32 bytes on its own stream."""
    _server, q = await _serve(port)
    print("ready", flush=True)
    call = grpc.aio.insecure_channel(f"127.0.0.1:{back}").stream_unary("/t.T/Send")()
    while True:
        b = await q.get()
        await call.write(b[:32])


async def _main() -> None:
    a, b = 24000 + os.getpid() % 500, 24600 + os.getpid() % 500
    p = subprocess.Popen(
        [sys.executable, __file__, "peer", str(b), str(a)], stdout=subprocess.PIPE, text=True
    )
    try:
        _server, q = await _serve(a)
        assert p.stdout is not None
        p.stdout.readline()
        call = grpc.aio.insecure_channel(f"127.0.0.1:{b}").stream_unary("/t.T/Send")()
        payload = os.urandom(1024)
        for _ in range(WARMUP):
            await call.write(payload)
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
            await call.write(payload)
            await q.get()
            lat.append(time.perf_counter() - t)
        cpu = time.process_time() - c0 + cpu_seconds([p.pid]) - p0
    finally:
        p.kill()
        p.wait()
    label = os.environ.get("GRPC_EXPERIMENTS") or "(gRPC defaults)"
    print(
        f"{label}: p50 {percentile(lat, 0.5) * 1e3:.2f} ms, p99 {percentile(lat, 0.99) * 1e3:.2f} ms, "
        f"CPU per round trip {cpu / n * 1e6:.0f} us (both processes; load average {loadavg()})"
    )


if __name__ == "__main__":
    if sys.argv[1:2] == ["peer"]:
        asyncio.run(_peer(int(sys.argv[2]), int(sys.argv[3])))
    else:
        asyncio.run(_main())
