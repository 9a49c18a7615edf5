"""A node that hits ENOSPC anyway (its reserve switched off, its volume filled from
outside) stops only itself, loudly: exit code 3 and one log line naming its data
directory and the errno; the other two keep committing. `raftsink local` reports a
node process that exits (code, meaning, last log lines) and keeps the others running.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import threading
import time

import pytest
from confluent_kafka import Producer

from sink.node import EXIT_STORAGE_FAILURE
from sink.process_cluster import SinkProcessCluster
from tests.helpers.volumes import can_mount, tmpfs_volumes

MiB = 1 << 20


def _wait(cond, timeout: float, what: str, step: float = 0.1) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(step)


class _NoReserveOn(SinkProcessCluster):
    """Node `bare` runs without a reserve; the others keep the default guard."""

    bare = 0

    def env_for(self, node_id: int) -> dict[str, str] | None:
        if node_id != self.bare:
            return None
        return {
            **os.environ,
            "RAFTSINK_STORAGE_RESERVE_BYTES": "0",
            "RAFTSINK_STORAGE_RESERVE_PERCENT": "0",
        }


@pytest.mark.skipif(can_mount() is not None, reason="needs to mount a tmpfs (root)")
def test_enospc_stops_only_that_node(tmp_path):
    cluster = _NoReserveOn(str(tmp_path))
    with tmpfs_volumes([n.data_dir for n in cluster.nodes.values()], 256 * MiB) as vols:
        cluster.start()
        try:
            leader = asyncio.run(cluster.wait_ready())
            bare = next(i for i in cluster.nodes if i != leader)
            # env_for is read at start: restart that one follower without a reserve.
            cluster.kill(bare)
            cluster.bare = bare
            cluster.start(bare)
            asyncio.run(cluster.wait_ready())
            vols[bare - 1].fill_to(2 * MiB)
            p = Producer(
                {
                    "bootstrap.servers": cluster.bootstrap_servers,
                    "acks": "all",
                    "enable.idempotence": True,
                    "message.timeout.ms": 60000,
                }
            )
            value = b"v" * 64 * 1024
            for _ in range(100):  # 6.4 MiB: more than the bare node has left
                p.produce("enospc", value=value)
            assert p.flush(60) == 0
            try:
                _wait(lambda: bare in cluster.exited(), 30, f"node {bare} to stop")
            except AssertionError as exc:  # say what the node was doing
                raise AssertionError(
                    f"{exc}; its log ends:\n{cluster.log_tail(bare, 4000)}"
                ) from None
            assert cluster.exited() == {bare: EXIT_STORAGE_FAILURE}
            tail = cluster.log_tail(bare, 20000)
            stopped = [line for line in tail.splitlines() if "raftsink.node_stopped" in line]
            assert len(stopped) == 1, tail[-3000:]
            assert "errno=ENOSPC" in stopped[0] and cluster.nodes[bare].data_dir in stopped[0]
            # what it had started was stopped before its event loop closed
            assert "Exception ignored" not in tail, tail[-3000:]
            # The other two go on committing.
            for _ in range(20):
                p.produce("enospc", value=b"after")
            assert p.flush(60) == 0
            assert sorted(cluster.alive()) == sorted(i for i in cluster.nodes if i != bare)
        finally:
            cluster.stop()


def _node_pid(data_dir: str) -> int | None:
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                args = f.read().split(b"\0")
        except OSError:
            continue
        if b"serve" in args and data_dir.encode() in args:
            return int(pid)
    return None


def test_local_reports_a_node_that_exits(tmp_path):
    base = str(tmp_path / "local")
    proc = subprocess.Popen(
        [sys.executable, "-m", "sink.cli", "local", "--data-dir", base],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(proc.stderr), daemon=True)
    reader.start()
    try:
        _wait(lambda: os.path.exists(os.path.join(base, "cluster.json")), 60, "the cluster")
        with open(os.path.join(base, "cluster.json")) as f:
            assert len(json.load(f)["nodes"]) == 3
        pid = _node_pid(os.path.join(base, "node2"))
        assert pid is not None
        os.kill(pid, signal.SIGKILL)
        _wait(lambda: "node 2 exited" in "".join(lines), 20, "the report")
        said = "".join(lines)
        assert "node 2 exited with code -9 (killed by signal SIGKILL)" in said, said
        assert "2 of 3 nodes still running" in said
        assert proc.poll() is None  # the other two keep running
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
