"""The floor under issue 17's CPU target: what the fewest wake-ups of a replicated write cost.

Three Python processes on uvloop shaped like a raftsink partition group and nothing else:
a client sends a request (one frame, the size of a Produce request of the benchmark:
records_per_request records of 100 B) to a leader over TCP; the leader writes it to a
file, sends it to two followers on plain TCP connections (4-byte length framing,
asyncio Protocols: no gRPC, no streams, no tasks per message), fdatasyncs; each follower
writes, fdatasyncs and answers; the leader answers the client once its own write and one
follower's are durable (a majority of three). No Raft, no Kafka parsing, no CRC, no
state machine, no beats, no metrics: every process wakes only for the frames above. Its
CPU per request is a lower bound for any Python design of the produce path that keeps
the invariant "acknowledged only once durable on a majority", on the same machine.

    python -m bench.produce_floor                 # 200 requests/s for 10 s, 3 runs
    python -m bench.produce_floor --disk thread   # fdatasync on a writer thread (as raftlog)
    python -m bench.produce_floor --rate 200 --seconds 10 --runs 3 --records-per-request 5.4

`--disk inline` (the default) fdatasyncs on the event loop thread: the cheapest in CPU
(no thread hand-off), not what a server that must stay responsive can do; `--disk
thread` hands each write to one writer thread and back (call_soon_threadsafe), as
raftlog's disk queue does; `--disk nosync` writes without fdatasync, to show what the
three fdatasyncs per request cost (not a durable design). The client runs in this process and is not counted.
Reported: the three processes' CPU (utime + stime from /proc) over the phase, less their
idle rate measured just before, per request and per record, beside issue 17's target
(120 us of cluster CPU per record at 1,000 records/s); and the client's latency
(scheduled send to answer, open loop). Figures and what they mean: docs/performance.md
("The floor").
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import queue
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time

from bench.common import cpu_seconds, loadavg, machine, percentile

HEADER = struct.Struct(">I")
ACK = b"\x01"
RECORD_BYTES = 100
BATCH_OVERHEAD = 61
"""A Kafka record batch's header (v2); each record adds about 8 B of framing to its 100 B."""
TARGET_US_PER_RECORD = 120.0


class Framed(asyncio.Protocol):
    """4-byte length framing; on_frame(frame) for each complete frame."""

    def __init__(self, on_frame) -> None:
        self.buf = bytearray()
        self.on_frame = on_frame
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport) -> None:  # type: ignore[override]
        self.transport = transport
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def data_received(self, data: bytes) -> None:
        buf = self.buf
        buf += data
        while len(buf) >= 4:
            (n,) = HEADER.unpack_from(buf)
            if len(buf) < 4 + n:
                break
            frame = bytes(buf[4 : 4 + n])
            del buf[: 4 + n]
            self.on_frame(self, frame)

    def send(self, frame: bytes) -> None:
        assert self.transport is not None
        self.transport.write(HEADER.pack(len(frame)) + frame)


class Disk:
    """Appends to one file and fdatasyncs: inline on the loop, or on one writer thread."""

    def __init__(self, path: str, mode: str, loop: asyncio.AbstractEventLoop) -> None:
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self.mode, self.loop = mode, loop
        if mode == "thread":
            self.q: queue.SimpleQueue = queue.SimpleQueue()
            threading.Thread(target=self._writer, daemon=True).start()

    def write(self, data: bytes, done) -> None:
        """Make data durable, then call done() on the loop thread."""
        if self.mode != "thread":
            os.write(self.fd, data)
            if self.mode == "inline":
                os.fdatasync(self.fd)
            done()
        else:
            self.q.put((data, done))

    def _writer(self) -> None:
        while True:
            item = self.q.get()
            items = [item]
            while not self.q.empty():  # one fdatasync for all that waited (a disk round)
                items.append(self.q.get())
            os.write(self.fd, b"".join(d for d, _ in items))
            os.fdatasync(self.fd)
            for _, done in items:
                self.loop.call_soon_threadsafe(done)


async def follower(port: int, path: str, disk_mode: str) -> None:
    loop = asyncio.get_running_loop()
    disk = Disk(path, disk_mode, loop)

    def on_frame(conn: Framed, frame: bytes) -> None:
        seq = frame[:8]
        disk.write(frame, lambda: conn.send(seq))

    server = await loop.create_server(lambda: Framed(on_frame), "127.0.0.1", port)
    print("ready", flush=True)
    await server.serve_forever()


async def leader(port: int, follower_ports: list[int], path: str, disk_mode: str) -> None:
    loop = asyncio.get_running_loop()
    disk = Disk(path, disk_mode, loop)
    # seq -> [client connection, own write durable, follower answers]
    pending: dict[bytes, list] = {}

    def maybe_answer(seq: bytes) -> None:
        p = pending.get(seq)
        if p is not None and p[1] and p[2] >= 1:  # leader + one follower: a majority of 3
            del pending[seq]
            p[0].send(seq)

    def on_follower_ack(_conn: Framed, seq: bytes) -> None:
        p = pending.get(seq)
        if p is not None:
            p[2] += 1
            maybe_answer(seq)

    followers = []
    for fp in follower_ports:
        _, proto = await loop.create_connection(lambda: Framed(on_follower_ack), "127.0.0.1", fp)
        followers.append(proto)

    def on_request(conn: Framed, frame: bytes) -> None:
        seq = frame[:8]
        pending[seq] = [conn, False, 0]
        for f in followers:
            f.send(frame)

        def durable() -> None:
            p = pending.get(seq)
            if p is not None:
                p[1] = True
                maybe_answer(seq)

        disk.write(frame, durable)

    server = await loop.create_server(lambda: Framed(on_request), "127.0.0.1", port)
    print("ready", flush=True)
    await server.serve_forever()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _spawn(args: list[str]) -> subprocess.Popen:
    p = subprocess.Popen(
        [sys.executable, "-m", "bench.produce_floor", *args],
        stdout=subprocess.PIPE,
        text=True,
        cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
    )
    assert p.stdout is not None
    line = p.stdout.readline()
    if line.strip() != "ready":
        p.kill()
        raise RuntimeError(f"replica did not start: {line!r}")
    return p


async def _client(port: int, rate: float, seconds: float, size: int) -> list[float]:
    """Open loop: request i is due at start + i/rate; its latency counts from then."""
    loop = asyncio.get_running_loop()
    due: dict[bytes, float] = {}
    lat: list[float] = []
    done = asyncio.Event()
    total = int(rate * seconds)

    def on_answer(_conn: Framed, seq: bytes) -> None:
        lat.append(time.perf_counter() - due.pop(seq))
        if len(lat) == total:
            done.set()

    _, conn = await loop.create_connection(lambda: Framed(on_answer), "127.0.0.1", port)
    body = os.urandom(size - 8)
    start = time.perf_counter() + 0.05
    for i in range(total):
        t = start + i / rate
        delay = t - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        seq = struct.pack(">Q", i)
        due[seq] = t
        conn.send(seq + body)
    await asyncio.wait_for(done.wait(), timeout=60)
    return lat


def _user_system(pids: list[int]) -> tuple[float, float]:
    """The processes' user and system CPU seconds so far (/proc/<pid>/stat), idle included."""
    user = system = 0
    for pid in pids:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        user, system = user + int(fields[11]), system + int(fields[12])
    ticks = os.sysconf("SC_CLK_TCK")
    return user / ticks, system / ticks


def floor(
    rate: float,
    seconds: float,
    records_per_request: float,
    disk: str = "inline",
    base: str | None = None,
    keep: bool = False,
) -> dict:
    """One measured run: three replica processes, `rate` requests/s for `seconds` (after
    a second's warm-up at the same rate). keep: leave the replicas' files (l, f1, f2) in
    their produce-floor-* directory under base."""
    size = round(BATCH_OVERHEAD + records_per_request * (RECORD_BYTES + 8))
    ports = [_free_port() for _ in range(3)]
    d = tempfile.mkdtemp(prefix="produce-floor-", dir=base)
    try:
        return _measure(d, ports, rate, seconds, records_per_request, disk, size)
    finally:
        if not keep:
            shutil.rmtree(d, ignore_errors=True)


def _measure(
    d: str,
    ports: list[int],
    rate: float,
    seconds: float,
    records_per_request: float,
    disk: str,
    size: int,
) -> dict:
    def replica(role: str, port: int, path: str, *extra: str) -> subprocess.Popen:
        return _spawn(["--role", role, "--port", str(port), "--path", path, "--disk", disk, *extra])

    procs = [replica("follower", ports[i], f"{d}/f{i}") for i in (1, 2)]
    procs.insert(0, replica("leader", ports[0], f"{d}/l", "--followers", f"{ports[1]},{ports[2]}"))
    pids = [p.pid for p in procs]
    try:
        import uvloop

        uvloop.run(_client(ports[0], rate, 1.0, size))  # warm-up, not measured
        c0, t0 = cpu_seconds(pids), time.perf_counter()
        time.sleep(3.0)
        idle_rate = (cpu_seconds(pids) - c0) / (time.perf_counter() - t0)
        load0 = loadavg()
        t0, (ut0, st0) = time.perf_counter(), _user_system(pids)
        lat = uvloop.run(_client(ports[0], rate, seconds, size))
        wall, (ut1, st1) = time.perf_counter() - t0, _user_system(pids)
        cpu = (ut1 + st1) - (ut0 + st0)  # the same /proc fields cpu_seconds sums
    finally:
        for p in procs:
            p.kill()
            p.wait()
    n = len(lat)
    per_req = (cpu - idle_rate * wall) / n * 1e6
    return {
        "disk": disk,
        "rate": rate,
        "requests": n,
        "request_bytes": size,
        "records_per_request": records_per_request,
        "cpu_us_per_request": round(per_req, 1),
        "cpu_us_per_record": round(per_req / records_per_request, 1),
        "idle_cpu_pct": round(idle_rate * 100, 2),
        "user_us_per_request": round((ut1 - ut0) / n * 1e6, 1),
        "system_us_per_request": round((st1 - st0) / n * 1e6, 1),
        "p50_ms": round(percentile(lat, 0.5) * 1e3, 3),
        "p99_ms": round(percentile(lat, 0.99) * 1e3, 3),
        "p999_ms": round(percentile(lat, 0.999) * 1e3, 3),
        "loadavg": f"{load0} -> {loadavg()}",
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--rate",
        type=float,
        default=200.0,
        help="requests/s (default 200: bench/produce.py's rate at 1,000 records/s)",
    )
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument(
        "--records-per-request",
        type=float,
        default=5.4,
        help="records of 100 B per request (default 5.4, bench/produce.py's figure)",
    )
    ap.add_argument("--disk", choices=("inline", "thread", "nosync"), default="inline")
    ap.add_argument("--role", choices=("leader", "follower"), help=argparse.SUPPRESS)
    ap.add_argument("--port", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--path", help=argparse.SUPPRESS)
    ap.add_argument("--followers", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.role is not None:
        import uvloop

        if args.role == "leader":
            fps = [int(x) for x in args.followers.split(",")]
            uvloop.run(leader(args.port, fps, args.path, args.disk))
        else:
            uvloop.run(follower(args.port, args.path, args.disk))
        return
    print(f"# {machine()}", flush=True)
    budget = TARGET_US_PER_RECORD * args.records_per_request
    for i in range(args.runs):
        r = floor(args.rate, args.seconds, args.records_per_request, args.disk)
        print(
            f"run {i + 1}: {r['cpu_us_per_request']} us of CPU per request "
            f"({r['cpu_us_per_record']} per record at {args.records_per_request} records per "
            f"request; issue 17's target is {TARGET_US_PER_RECORD:.0f} per record, "
            f"{budget:.0f} per request; user {r['user_us_per_request']}, system "
            f"{r['system_us_per_request']} per request), p50 {r['p50_ms']} ms, p99 {r['p99_ms']} ms "
            f"(load {r['loadavg']})",
            flush=True,
        )
        print(json.dumps(r), flush=True)


if __name__ == "__main__":
    main()
