"""`raftsink serve` as a real process, configured from a sectioned TOML file, a
RAFTSINK_* variable and flags at once: each source reaches the part it configures
(the Kafka frame limit, Metadata's cluster id, the /metrics listener)."""

from __future__ import annotations

import os
import re
import socket
import struct
import subprocess
import sys
import threading
import time
import urllib.request

from tests.helpers.kafka_wire import request

READY_TIMEOUT_S = 30.0


def _free_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def _wait_for_line(proc: subprocess.Popen, prefix: str, timeout: float) -> str:
    """The first stdout line starting with prefix, or AssertionError at the deadline."""
    found: list[str] = []
    done = threading.Event()

    def reader() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            if line.startswith(prefix):
                found.append(line)
                done.set()
                return
        done.set()

    threading.Thread(target=reader, daemon=True).start()
    if not done.wait(timeout) or not found:
        raise AssertionError(f"no {prefix!r} line within {timeout}s (exit code {proc.poll()})")
    return found[0]


def test_serve_takes_each_setting_from_file_env_and_flags(tmp_path):
    raft, kafka, read_api, metrics = _free_ports(4)
    config = tmp_path / "node.toml"
    config.write_text(
        "[node]\n"
        "id = 1\n"
        f'data_dir = "{tmp_path / "data"}"\n'
        f'peers = "1=127.0.0.1:{raft}/127.0.0.1:{kafka}/127.0.0.1:{read_api}"\n'
        f'metrics_listen = "127.0.0.1:{metrics}"\n'
        "[kafka]\n"
        "max_frame_bytes = 1024\n"
        'cluster_id = "from-file"\n'
    )
    env = {**os.environ, "RAFTSINK_RAFT_TICK_MS": "20", "RAFTSINK_LOG_LEVEL": "WARNING"}
    argv = [sys.executable, "-m", "sink.cli", "serve", "--config", str(config)]
    argv += ["--kafka-cluster-id", "from-flag", "--node-event-loop", "asyncio"]
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, text=True)
    try:
        line = _wait_for_line(proc, "ready", READY_TIMEOUT_S)
        assert f"kafka=127.0.0.1:{kafka}" in line
        # flag > file: Metadata reports the flag's cluster id.
        meta = request(kafka, 3, 4, {"topics": [], "allow_auto_topic_creation": False})
        assert meta.cluster_id == "from-flag"
        # file: the frame limit reached the Kafka listener; a larger frame is refused
        # before its body is read (the connection is closed).
        with socket.create_connection(("127.0.0.1", kafka), timeout=5) as s:
            s.sendall(struct.pack(">i", 2048) + b"\0" * 16)
            deadline = time.monotonic() + 5
            closed = False
            while not closed and time.monotonic() < deadline:
                try:
                    closed = s.recv(1024) == b""
                except ConnectionResetError:
                    closed = True
            assert closed
        # file: the node's /metrics listener is up.
        with urllib.request.urlopen(f"http://127.0.0.1:{metrics}/metrics", timeout=5) as resp:
            body = resp.read()
        for name in (
            b"raftsink_raft_term",
            b"raftsink_kafka_handler_errors",  # a handler that raised: a bug, counted
            b"raftsink_transport_unknown_group_messages",  # messages for groups not hosted
            b"raftsink_transport_handler_errors",  # a group handler raised: dropped alone
            b"raftsink_kafka_request_memory_limit_bytes",  # the request memory budget
            b'raftsink_kafka_refused_connections_total{node="1",reason="per_ip"}',
            b"raftsink_group_offsets_committed",  # consumer-group offsets held
            b"raftsink_group_offsets_expired",
            b"raftsink_gc_pause_seconds_gen2",  # the process's stalls (stall_watch)
            b"raftsink_loop_lags_over_100ms",
            b"raftsink_disk_round_seconds_bucket",  # disk rounds (writes + fsyncs)
        ):
            assert name in body, name
        # the Metadata request above, in its API's latency histogram
        count = re.search(
            rb'raftsink_kafka_request_seconds_count\{api="Metadata",node="1"\} (\S+)', body
        )
        assert count is not None and float(count.group(1)) >= 1, body[:2000]
    finally:
        proc.terminate()
        proc.wait(timeout=20)
    assert proc.returncode == 0


def test_serve_names_the_bad_setting_and_its_source(tmp_path):
    env = {**os.environ, "RAFTSINK_KAFKA_MAX_FRAME_BYTES": "10"}
    argv = [sys.executable, "-m", "sink.cli", "serve", "--node-id", "1"]
    argv += ["--data-dir", str(tmp_path), "--peers", "1=127.0.0.1:1/127.0.0.1:2/127.0.0.1:3"]
    out = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 2
    assert (
        "kafka.max_frame_bytes must be at least 64 (from env RAFTSINK_KAFKA_MAX_FRAME_BYTES)"
        in out.stderr
    )
