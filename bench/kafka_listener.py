"""The Kafka listener alone: CPU per request of one node process's Kafka front end.

A node process runs only a KafkaServer over tests/unit/sink's in-memory node (no Raft,
no disk: a Produce is applied at once), on uvloop as `raftsink serve` does; this
process sends it pipelined requests on one connection (plaintext or TLS) and reads
the node's CPU (utime+stime from /proc) over the run. What it isolates is the
connection's own cost (reads, framing, dispatch, response writes, TLS: sink/kafka/
connection.py and its parts, conn_*.py), without the replication path's noise.

    python bench/kafka_listener.py [--tls] [--requests N] [--window W] [--tree DIR]

Workloads: Metadata v12 naming no topic (next to nothing but the connection), Produce v9 acks=1 of one
1 KiB record (the benchmark's record size, one record per request: the per-request
cost). --null-handlers: both answer a constant at once, leaving the connection's own
cost (the parse included). Last line: one JSON object. --tree: the node runs that tree's sink (A/B of
two worktrees with one script).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import ssl
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

_TICKS = os.sysconf("SC_CLK_TCK")
_META_FLAGS = {"allow_auto_topic_creation": False, "include_topic_authorized_operations": False}


def _null_handlers() -> None:
    """Metadata and Produce answer a constant at once: what is left is the connection's
    own cost (read, framing, checks and parse, dispatch, write), not the handlers'."""
    from sink.kafka import handlers
    from sink.kafka.handlers import answered

    for key in (0, 3):
        api = handlers.REGISTRY[key]

        async def handle(ctx, call, _answer=b"\x00" * 64):
            return answered(_answer)

        object.__setattr__(api, "handle", handle)


def serve(certs: str | None, tree: str, null: bool) -> None:
    sys.path.insert(0, tree)  # the tree under test (this script may be another tree's)
    import asyncio

    import uvloop

    from sink.kafka import KafkaLimits
    from sink.kafka.server import KafkaServer
    from tests.unit.sink.memory_services import MemoryNode

    if null:
        _null_handlers()

    async def main() -> None:
        ctx = None
        if certs:
            ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            ctx.load_cert_chain(f"{certs}/node1.pem", f"{certs}/node1.key")
        server = KafkaServer(MemoryNode(), "127.0.0.1", 0, limits=KafkaLimits(), ssl_context=ctx)
        await server.start()
        import sink

        print(server.bound_port, sink.__file__, flush=True)
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
        await server.stop()

    uvloop.run(main())


def cpu_s(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICKS


def recv_exact(s: socket.socket, n: int) -> bytes:
    out = bytearray()
    while len(out) < n:
        chunk = s.recv(n - len(out))
        if not chunk:
            raise ConnectionError("closed")
        out += chunk
    return bytes(out)


def drive(s: socket.socket, frames: list[bytes], window: int) -> None:
    """Send every frame with at most window unanswered; read every response."""
    sent = got = 0
    while got < len(frames):
        burst = []
        while sent < len(frames) and sent - got < window:
            burst.append(frames[sent])
            sent += 1
        if burst:
            s.sendall(b"".join(burst))
        size = int.from_bytes(recv_exact(s, 4), "big", signed=True)
        recv_exact(s, size)
        got += 1


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--certs", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--tls", action="store_true", help="TLS on the listener")
    ap.add_argument(
        "--null-handlers", action="store_true", help="handlers answer a constant at once"
    )
    ap.add_argument("--tree", default=ROOT, help="the source tree whose sink the node runs")
    ap.add_argument("--requests", type=int, default=20_000)
    ap.add_argument("--window", type=int, default=8, help="requests in flight")
    args = ap.parse_args()
    if args.serve:
        serve(args.certs, args.tree, args.null_handlers)
        return 0

    from tests.helpers.kafka_wire import encode_request
    from tests.unit.sink.batches import make_batch
    from tests.unit.sink.requests import request_values

    certs = None
    if args.tls:
        certs = tempfile.mkdtemp(prefix="kafka-listener-certs-")
        subprocess.run(
            [os.path.join(ROOT, "scripts/make-certs.sh"), certs, "node1"],
            check=True,
            capture_output=True,
        )
    tree = os.path.abspath(args.tree)
    cmd = [sys.executable, os.path.abspath(__file__), "--serve", "--tree", tree]
    if args.null_handlers:
        cmd.append("--null-handlers")
    if certs:
        cmd += ["--certs", certs]
    proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, cwd=tree, text=True)
    try:
        assert proc.stdout is not None
        port_text, sink_file = proc.stdout.readline().split()
        port = int(port_text)
        raw = socket.create_connection(("127.0.0.1", port))
        raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        s: socket.socket = raw
        if certs:
            cctx = ssl.create_default_context(cafile=f"{certs}/ca.pem")
            s = cctx.wrap_socket(raw, server_hostname="localhost")
        record = make_batch([b"x" * 1024])
        produce = request_values(0, record) | {"acks": 1}
        workloads = {
            "metadata_none": [
                encode_request(3, 12, i, {"topics": [], **_META_FLAGS})
                for i in range(args.requests)
            ],
            "produce_1k": [encode_request(0, 9, i, produce) for i in range(args.requests)],
        }
        drive(s, workloads["produce_1k"][:100], args.window)  # creates the topic; warms up
        out: dict = {
            "sink": sink_file,
            "tls": bool(certs),
            "null_handlers": args.null_handlers,
            "requests": args.requests,
            "window": args.window,
        }
        for name, frames in workloads.items():
            c0, t0 = cpu_s(proc.pid), time.perf_counter()
            drive(s, frames, args.window)
            c1, t1 = cpu_s(proc.pid), time.perf_counter()
            out[f"{name}_node_cpu_us_per_request"] = round((c1 - c0) / len(frames) * 1e6, 2)
            out[f"{name}_requests_per_s"] = round(len(frames) / (t1 - t0))
            print(
                f"{name}: {out[f'{name}_node_cpu_us_per_request']} us of node CPU per request, "
                f"{out[f'{name}_requests_per_s']} requests/s",
                flush=True,
            )
        s.close()
    finally:
        if proc.stdin is not None:
            proc.stdin.close()
        proc.wait(timeout=10)
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
