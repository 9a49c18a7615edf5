"""Shared parts of the Kafka fuzzer and conformance harness: a real 3-node
cluster of `raftsink serve` processes, a blocking connection that reads frames
with a deadline, ApiVersions parsed by hand (no native reader on anything the
server sends before it is bounds-checked), and the node-log scan.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import re
import socket
import struct
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from sink.kafka.protocol import request_schema
from sink.process_cluster import SinkProcessCluster
from tests.helpers.kafka_schema import WireError, decode_response, encode_request, frame
from tests.helpers.kafka_values import Context, valid_request

MAX_FRAME = 1 << 20  # the nodes' --max-frame-bytes: the oversize cases go past it
PROBE_CORR = 0x7FFF0000  # correlation ids of ApiVersions probes start here


class Closed(ConnectionError):
    """The server closed the connection."""


class Conn:
    """One blocking TCP connection; every read has a deadline."""

    def __init__(self, port: int, timeout: float = 10.0) -> None:
        self.port = port
        self.timeout = timeout
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.buf = b""

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def _fill(self, n: int, deadline: float) -> None:
        while len(self.buf) < n:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"no answer from port {self.port} in {self.timeout} s")
            self.sock.settimeout(left)
            try:
                chunk = self.sock.recv(1 << 16)
            except (ConnectionResetError, BrokenPipeError) as e:
                raise Closed(str(e)) from e
            if not chunk:
                raise Closed("EOF")
            self.buf += chunk

    def recv_frame(self) -> bytes:
        """One response payload (after the size prefix)."""
        deadline = time.monotonic() + self.timeout
        self._fill(4, deadline)
        (size,) = struct.unpack_from(">i", self.buf)
        if size < 4 or size > 64 * MAX_FRAME:
            raise WireError(f"response size prefix {size}")
        self._fill(4 + size, deadline)
        payload, self.buf = self.buf[4 : 4 + size], self.buf[4 + size :]
        return payload

    def is_closed(self) -> bool:
        """True once the server has closed (waits up to the timeout for EOF)."""
        try:
            while True:
                self.recv_frame()
        except (Closed, OSError):
            return True
        except (TimeoutError, WireError):
            return False

    def close(self) -> None:
        self.sock.close()


def api_versions_frame(corr: int) -> bytes:
    """ApiVersions v0, header v1 (client id "probe"): no body."""
    return frame(struct.pack(">hhih", 18, 0, corr, 5) + b"probe")


def parse_api_versions_v0(payload: bytes) -> tuple[int, int, dict[int, tuple[int, int]]]:
    """(correlation id, error code, {api_key: (min, max)}), bounds-checked by hand."""
    if len(payload) < 10:
        raise WireError(f"ApiVersions v0 answer of {len(payload)} bytes")
    corr, err, n = struct.unpack_from(">ihi", payload)
    if n < 0 or 10 + 6 * n != len(payload):
        raise WireError(f"ApiVersions v0: {n} entries in {len(payload)} bytes")
    keys = {}
    for i in range(n):
        k, lo, hi = struct.unpack_from(">hhh", payload, 10 + 6 * i)
        keys[k] = (lo, hi)
    return corr, err, keys


def advertised(port: int) -> dict[int, tuple[int, int]]:
    """The (API key -> version range) the node on `port` advertises."""
    c = Conn(port)
    try:
        c.send(api_versions_frame(1))
        corr, err, keys = parse_api_versions_v0(c.recv_frame())
        assert corr == 1 and err == 0, (corr, err)
        return keys
    finally:
        c.close()


def probe(conn: Conn, corr: int) -> None:
    """ApiVersions on conn answers (skipping earlier answers still queued)."""
    conn.send(api_versions_frame(corr))
    while True:
        payload = conn.recv_frame()
        if struct.unpack_from(">i", payload)[0] == corr:
            _corr, err, keys = parse_api_versions_v0(payload)
            assert err == 0 and 18 in keys, (err, keys)
            return


def call(conn: Conn, entity: object, corr: int) -> tuple[object, object]:
    """Send one request on conn; (header, body) of its answer, strictly decoded."""
    conn.send(encode_request(entity, corr))
    payload = conn.recv_frame()
    return decode_response(entity.__api_key__, entity.__version__, payload)


LOG_PROBLEM = re.compile(r"Traceback|internal_error|Fatal Python error|panicked|memory allocation")


def log_problems(cluster: SinkProcessCluster) -> dict[int, list[str]]:
    """Lines in each node's log that show a crash or an unexpected exception."""
    out: dict[int, list[str]] = {}
    for i, n in cluster.nodes.items():
        try:
            with open(n.log_path, errors="replace") as f:
                lines = f.read().splitlines()
        except OSError:
            continue
        hits = [ln for ln in lines if LOG_PROBLEM.search(ln)]
        if hits:
            out[i] = hits
    return out


def log_sizes(cluster: SinkProcessCluster) -> dict[int, int]:
    return {i: os.path.getsize(n.log_path) for i, n in cluster.nodes.items()}


def new_problems(cluster: SinkProcessCluster, since: dict[int, int]) -> dict[int, str]:
    """What each node logged after `since` (from log_sizes), for the nodes whose
    new log shows a problem (at most the first 4 MB of it)."""
    out = {}
    for i, n in cluster.nodes.items():
        with open(n.log_path, "rb") as f:
            f.seek(since.get(i, 0))
            text = f.read(4 << 20).decode(errors="replace")
        if LOG_PROBLEM.search(text):
            out[i] = text
    return out


@dataclass
class Harness:
    """A running cluster plus what the tests refer to."""

    cluster: SinkProcessCluster
    leader: int
    followers: list[int]
    ctx: Context

    def port(self, node: int) -> int:
        return int(self.cluster.peers[node].kafka.rsplit(":", 1)[1])

    @property
    def nodes(self) -> list[int]:
        return [self.leader, *self.followers]

    def restart_dead(self) -> list[int]:
        """Restart nodes that died (a previous test killed them); returns their ids."""
        dead = list(self.cluster.exited())
        for i in dead:
            self.cluster.nodes[i].proc = None
            self.cluster.start(i)
        if dead:
            self.leader = asyncio.run(self.cluster.wait_ready(60))
            self.followers = [i for i in self.cluster.nodes if i != self.leader]
        return dead


def create_topic(port: int, topic: str, partitions: int = 1) -> int:
    """CreateTopics v2 on the leader; the error code (0 or 36 already exists)."""
    req = valid_request(request_schema(19, 2), Context(topic=topic))
    t = dataclasses.replace(req.topics[0], num_partitions=partitions)
    req = dataclasses.replace(req, topics=(t,))
    c = Conn(port)
    try:
        _, resp = call(c, req, 3)
    finally:
        c.close()
    return int(resp.topics[0].error_code)


def topic_id(port: int, topic: str) -> uuid.UUID:
    """The topic's id from Metadata v10+ (zero when the node serves no v10+):
    requests of versions that name topics by id (Fetch v13+) refer to it."""
    hi = advertised(port)[3][1]
    if hi < 10:
        return uuid.UUID(int=0)
    req = valid_request(request_schema(3, hi), Context(topic=topic))
    c = Conn(port)
    try:
        _, resp = call(c, req, 4)
    finally:
        c.close()
    (t,) = resp.topics
    assert int(t.error_code) == 0, t
    return t.topic_id


@contextmanager
def running_cluster(base: str, topics: tuple[str, ...] = ("harness",)) -> Iterator[Harness]:
    """A 3-node SinkProcessCluster (no auto-created topics, 1 MiB frames) with `topics`.

    The election timeout is 50 ticks (1.5-3 s) instead of 10: the tests expect
    one leader throughout, and a 2-core machine under fuzzing load can stall a
    node long enough for a 0.3 s timeout to start an election. Time retention is off:
    the harness's batches carry 1970 timestamps (tests/unit/sink/batches.py), which the
    default 7-day retention.ms removes at the next retention check, as Kafka would.
    New connections are not rate-limited (100,000/s): the fuzzer opens one per closed
    mutant, over 1,000 a second per node on a quiet machine, and the listener's default
    limit (1,000/s; tests/unit/sink/test_admission.py tests it) then refused the
    harness's liveness probe, which read as a dead node (session 15, fresh-clone CI)."""
    cluster = SinkProcessCluster(
        base,
        3,
        extra_args=[
            "--topics-retention-ms",
            "-1",
            "--no-auto-create-topics",
            "--max-frame-bytes",
            str(MAX_FRAME),
            "--election-ticks",
            "50",
            "--kafka-max-connection-creation-rate",
            "100000",
        ],
    )
    cluster.start()
    try:
        leader = asyncio.run(cluster.wait_ready(60))
        h = Harness(cluster, leader, [i for i in cluster.nodes if i != leader], Context())
        for t in topics:
            err = create_topic(h.port(leader), t)
            assert err in (0, 36), f"CreateTopics {t}: error {err}"
        asyncio.run(cluster.wait_settled(60))
        h.ctx = dataclasses.replace(h.ctx, topic_id=topic_id(h.port(leader), h.ctx.topic))
        yield h
    finally:
        cluster.stop()
