"""Overload drivers for the tests and bench/overload.py (issue 21): a memory flood of
connections announcing huge frames and trickling them, a connection storm, an
ordinary confluent-kafka producer timing its acknowledgements, and a sampler of a
process's resident memory (VmRSS from /proc/<pid>/status).

Everything here is a client of a real node process over 127.0.0.1.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import json
import os
import socket
import struct
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field

_LINGER_RESET = struct.pack("ii", 1, 0)


def vm_rss_bytes(pid: int) -> int:
    """Resident set size of pid (VmRSS), in bytes."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for pid {pid}")


class RssSampler:
    """Samples a process's VmRSS every interval_s in a thread; max_bytes is the peak."""

    def __init__(self, pid: int, interval_s: float = 0.05) -> None:
        self.pid = pid
        self.interval_s = interval_s
        self.samples: list[int] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.samples.append(vm_rss_bytes(self.pid))
            except (OSError, RuntimeError):
                return
            self._stop.wait(self.interval_s)

    def __enter__(self) -> RssSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)

    @property
    def max_bytes(self) -> int:
        return max(self.samples, default=0)


def produce_frame_header(frame_bytes: int, corr: int = 1) -> bytes:
    """The first bytes of a Produce v9 frame announcing frame_bytes of body: size prefix,
    request header (api key, version, correlation id, client id), nothing more."""
    return struct.pack(">ihhih", frame_bytes, 0, 9, corr, 5) + b"flood"


@dataclass
class FloodStats:
    connections: int = 0
    """Connections opened (reconnects included)."""
    closed_by_node: int = 0
    bytes_sent: int = 0
    errors: dict[str, int] = field(default_factory=dict)


async def flood(
    host: str,
    port: int,
    *,
    connections: int,
    frame_bytes: int,
    duration_s: float,
    chunk_bytes: int = 1 << 20,
    pause_s: float = 0.1,
    sndbuf: int = 64 * 1024,
) -> FloodStats:
    """connections clients each announce a frame_bytes Produce frame and trickle its
    body (chunk_bytes then pause_s, never the last byte) until duration_s; a client the
    node closes (frame read timeout) reconnects and starts again, so the flood lasts."""
    stats = FloodStats()
    chunk = memoryview(bytes(chunk_bytes))  # one shared buffer: the flooder stays small
    loop = asyncio.get_running_loop()
    end = loop.time() + duration_s

    async def one(i: int) -> None:
        while loop.time() < end:
            try:
                sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, sndbuf)
                sock.setblocking(False)
                await loop.sock_connect(sock, (host, port))
            except OSError as exc:
                sock.close()
                stats.errors[type(exc).__name__] = stats.errors.get(type(exc).__name__, 0) + 1
                await asyncio.sleep(pause_s)
                continue
            stats.connections += 1
            left = frame_bytes + 4 - 1  # never the last byte
            try:
                head = produce_frame_header(frame_bytes, corr=i)
                await asyncio.wait_for(loop.sock_sendall(sock, head), end - loop.time())
                left -= len(head)
                while left > 0 and loop.time() < end:
                    n = min(left, len(chunk))
                    await asyncio.wait_for(
                        loop.sock_sendall(sock, chunk[:n]), max(0.01, end - loop.time())
                    )
                    stats.bytes_sent += n
                    left -= n
                    await asyncio.sleep(pause_s)
                if left <= 0:  # all but the last byte: hold on until the end
                    await asyncio.sleep(max(0.0, end - loop.time()))
            except TimeoutError:
                pass
            except OSError:
                stats.closed_by_node += 1
            finally:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _LINGER_RESET)
                sock.close()

    await asyncio.gather(*(one(i) for i in range(connections)))
    return stats


@dataclass
class StormStats:
    attempts: int = 0
    accepted: int = 0
    """Connections still open after the probe (the node kept them)."""
    refused: int = 0
    """Closed by the node right after connecting (reset or EOF)."""
    connect_failed: int = 0
    """No connection at all (timeout: the accept queue was full; refused by the kernel)."""
    max_held: int = 0
    still_open: int = 0
    """Held connections still open when the storm ended (accepted and kept)."""
    seconds: float = 0.0
    connect_errors: dict[str, int] = field(default_factory=dict)


async def storm(
    host: str,
    port: int,
    *,
    attempts: int,
    concurrency: int = 1000,
    probe_s: float = 0.3,
    connect_timeout_s: float = 2.0,
) -> StormStats:
    """attempts connections from one address, concurrency at a time: each connects and
    waits probe_s for the node to close it; a connection still open then is held (an
    accepted one) until the storm ends. Sockets close with a reset (no TIME_WAIT)."""
    stats = StormStats()
    loop = asyncio.get_running_loop()
    held: list[socket.socket] = []
    started = loop.time()
    todo = iter(range(attempts))

    async def worker() -> None:
        for _ in todo:
            stats.attempts += 1
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.setblocking(False)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _LINGER_RESET)
            try:
                await asyncio.wait_for(loop.sock_connect(sock, (host, port)), connect_timeout_s)
            except (OSError, TimeoutError) as exc:
                stats.connect_failed += 1
                name = type(exc).__name__
                stats.connect_errors[name] = stats.connect_errors.get(name, 0) + 1
                sock.close()
                continue
            try:
                data = await asyncio.wait_for(loop.sock_recv(sock, 1), probe_s)
            except TimeoutError:
                held.append(sock)  # still open: accepted
                stats.accepted += 1
                stats.max_held = max(stats.max_held, len(held))
                continue
            except OSError:
                data = b""
            assert data == b"", "the node sent bytes unasked"
            stats.refused += 1
            sock.close()

    try:
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        stats.seconds = loop.time() - started
        for s in held:  # a late refusal shows as EOF or a reset; open ones would block
            try:
                s.recv(1, socket.MSG_PEEK)  # b"" (EOF) or data: not an open, idle one
            except BlockingIOError:
                stats.still_open += 1
            except OSError:
                pass
    finally:
        for s in held:
            s.close()
    return stats


class AckProbe:
    """An ordinary confluent-kafka producer (acks=all) sending one small record every
    interval_s in a thread and timing each acknowledgement (produce() to delivery)."""

    def __init__(self, bootstrap: str, topic: str, interval_s: float = 0.05) -> None:
        from confluent_kafka import Producer  # the test dependency, only where used

        self.topic = topic
        self.interval_s = interval_s
        self.producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                "acks": "all",
                "linger.ms": 0,
                "enable.idempotence": True,
                "message.timeout.ms": 30_000,
                "statistics.interval.ms": 200,
                "stats_cb": self._on_stats,
            }
        )
        self._stats: tuple[float, dict] | None = None  # (when received, librdkafka's stats)
        self.latencies: list[float] = []
        self.ack_times: list[float] = []
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        seq = 0
        while not self._stop.is_set():
            sent = time.monotonic()

            def done(err: object, _msg: object, sent: float = sent) -> None:
                now = time.monotonic()
                if err is not None:
                    self.errors.append(str(err))
                else:
                    self.latencies.append(now - sent)
                    self.ack_times.append(now)

            self.producer.produce(self.topic, value=b"probe-%d" % seq, on_delivery=done)
            seq += 1
            self.producer.poll(self.interval_s)
        self.producer.flush(30)

    def start(self) -> AckProbe:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(60)

    def wait_acks(self, n: int, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while len(self.latencies) < n:
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"{len(self.latencies)} acks of {n} within {timeout_s}s; errors {self.errors[:3]}"
                )
            time.sleep(0.02)

    def _on_stats(self, raw: str) -> None:
        self._stats = (time.monotonic(), json.loads(raw))

    def broker_disconnects(self, since: float, timeout_s: float = 10.0) -> dict[str, int]:
        """Disconnects of the producer's broker connections (the ones metadata named,
        not the bootstrap connection librdkafka may close itself) per broker, from
        librdkafka's statistics emitted after since (waited for)."""
        deadline = time.monotonic() + timeout_s
        while self._stats is None or self._stats[0] <= since:
            if time.monotonic() > deadline:
                raise AssertionError(f"no producer statistics after {since} within {timeout_s}s")
            time.sleep(0.02)
        brokers = self._stats[1]["brokers"].values()
        return {b["name"]: b["disconnects"] for b in brokers if b["nodeid"] >= 0}

    def max_gap(self, since: float, until: float) -> float:
        """Longest time without an acknowledgement within [since, until]."""
        times = [since, *(t for t in self.ack_times if since <= t <= until), until]
        return max(b - a for a, b in itertools.pairwise(times))


def run_in_process(kind: str, host: str, port: int, **kw: float) -> FloodStats | StormStats:
    """flood() or storm() in a child process (its own interpreter: the probe's thread in
    this one does not compete with it for the GIL, so its latencies are the node's)."""
    argv = [sys.executable, "-m", "tests.helpers.overload", kind, host, str(port), json.dumps(kw)]
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    out = subprocess.run(argv, capture_output=True, text=True, timeout=600, check=False, cwd=root)
    if out.returncode != 0:
        raise RuntimeError(f"{kind} process failed ({out.returncode}): {out.stderr[-2000:]}")
    cls = FloodStats if kind == "flood" else StormStats
    return cls(**json.loads(out.stdout.strip().splitlines()[-1]))


def _main(argv: list[str]) -> None:
    kind, host, port, kw = argv[0], argv[1], int(argv[2]), json.loads(argv[3])
    fn = flood if kind == "flood" else storm
    stats = asyncio.run(fn(host, port, **kw))
    print(json.dumps(dataclasses.asdict(stats)))


if __name__ == "__main__":
    _main(sys.argv[1:])
