"""Start, kill and restart raftlog node processes on 127.0.0.1.

Used by the multi-process tests, bench/raft.py and bench/scale_host.py. Each
node is a real process (`python -m raftlog.node_process`, or
`raftlog.host_process` hosting many groups) with its own data directory; kill()
sends SIGKILL, stop() SIGTERM.
"""

from __future__ import annotations

import asyncio
import os
import random
import signal
import socket
import subprocess
import sys
from dataclasses import dataclass

from raftlog.node_process import control_call


def _ephemeral_range() -> tuple[int, int]:
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            lo, hi = (int(x) for x in f.read().split())
        return lo, hi
    except (OSError, ValueError):
        return 32768, 60999


_HANDED_OUT: dict[int, None] = {}
"""The last _REMEMBER ports this process handed out, oldest first: a port is free from
the moment its probe socket closes until its listener binds it, and a second call in
that window (the chaos harness's proxies right after its nodes' ports, say) must not
get it again. Older ones are bound by now, or abandoned."""
_REMEMBER = 1024


def _stripe() -> tuple[int, int]:
    """(this pytest-xdist worker's index, worker count), or (0, 1) outside xdist: each
    worker takes only ports p with p % count == index, so two workers never race for
    one port either."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    try:
        count = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
        index = int(worker[2:]) if worker.startswith("gw") else 0
    except ValueError:
        return 0, 1
    return (index % count, count) if count > 1 else (0, 1)


def free_ports(n: int) -> list[int]:
    """n distinct free TCP ports on 127.0.0.1 for listeners, none handed out before by
    this process.

    Chosen BELOW the kernel's ephemeral range: ports from there are also the
    source ports of outgoing connections (clients retrying old addresses), so
    one could be taken between choosing it and the node binding it.
    """
    lo, _ = _ephemeral_range()
    index, count = _stripe()
    rng = random.Random()
    ports: list[int] = []
    socks = []
    attempts = 0
    while len(ports) < n and attempts < 10_000:
        attempts += 1
        port = rng.randrange(20_000, max(20_001, lo - 1))
        port -= (port - index) % count
        if port < 20_000 or port in ports or port in _HANDED_OUT:
            continue
        s = socket.socket()
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            s.close()
            continue
        socks.append(s)
        ports.append(port)
    for s in socks:
        s.close()
    if len(ports) < n:  # fall back to the kernel's choice
        ports += [_kernel_port() for _ in range(n - len(ports))]
    for port in ports:
        _HANDED_OUT[port] = None
    while len(_HANDED_OUT) > _REMEMBER:
        del _HANDED_OUT[next(iter(_HANDED_OUT))]
    return ports


def _kernel_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


@dataclass
class NodeProc:
    id: int
    raft: str
    control: str
    data_dir: str
    proc: subprocess.Popen | None = None


class RaftProcessCluster:
    def __init__(
        self,
        base_dir: str,
        n: int = 3,
        tick_ms: int | None = None,
        election_ticks: int | None = None,
        log_level: str = "WARNING",
        module: str = "raftlog.node_process",
        extra_args: tuple[str, ...] = (),
    ) -> None:
        """module: the process to run (raftlog.node_process, or raftlog.host_process
        for many groups per process); extra_args are appended to its command line."""
        ports = free_ports(2 * n)
        self.nodes = {
            i: NodeProc(
                i,
                f"127.0.0.1:{ports[2 * (i - 1)]}",
                f"127.0.0.1:{ports[2 * (i - 1) + 1]}",
                os.path.join(base_dir, f"node{i}"),
            )
            for i in range(1, n + 1)
        }
        self.peers = ",".join(f"{i}={nd.raft}" for i, nd in self.nodes.items())
        self.extra: list[str] = []
        if tick_ms is not None:
            self.extra += ["--tick-ms", str(tick_ms)]
        if election_ticks is not None:
            self.extra += ["--election-ticks", str(election_ticks)]
        self.extra += list(extra_args)
        self.module = module
        self.log_level = log_level
        self.base_dir = base_dir

    def start(self, i: int | None = None) -> None:
        for nd in [self.nodes[i]] if i else self.nodes.values():
            os.makedirs(nd.data_dir, exist_ok=True)
            log = open(os.path.join(self.base_dir, f"node{nd.id}.log"), "ab")  # noqa: SIM115
            nd.proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    self.module,
                    "--id",
                    str(nd.id),
                    "--raft",
                    nd.raft,
                    "--control",
                    nd.control,
                    "--peers",
                    self.peers,
                    "--data-dir",
                    nd.data_dir,
                    "--log-level",
                    self.log_level,
                    *self.extra,
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
            )
            log.close()

    def kill(self, i: int) -> None:
        """SIGKILL node i and reap it."""
        nd = self.nodes[i]
        if nd.proc is not None and nd.proc.poll() is None:
            nd.proc.send_signal(signal.SIGKILL)
            nd.proc.wait()
        nd.proc = None

    def stop_all(self) -> None:
        for nd in self.nodes.values():
            if nd.proc is not None and nd.proc.poll() is None:
                nd.proc.send_signal(signal.SIGTERM)
        for nd in self.nodes.values():
            if nd.proc is not None:
                try:
                    nd.proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    nd.proc.kill()
                    nd.proc.wait()
                nd.proc = None

    def alive(self) -> list[int]:
        return [i for i, nd in self.nodes.items() if nd.proc is not None and nd.proc.poll() is None]

    async def call(
        self, i: int, method: str, req: dict | None = None, timeout: float = 30.0
    ) -> dict:
        return await control_call(self.nodes[i].control, method, req or {}, timeout)

    async def status(self, i: int) -> dict | None:
        try:
            return await self.call(i, "Status", timeout=2.0)
        except Exception:
            return None

    async def statuses(self) -> dict[int, dict]:
        """The Status of every live node that answers (a node that does not is left out)."""
        out = {}
        for i in self.alive():
            st = await self.status(i)
            if st is not None:
                out[i] = st
        return out

    async def wait_leader(self, timeout: float = 30.0, exclude: int = 0) -> int:
        """The id of the node that leads (as every live node agrees), within timeout."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while loop.time() < deadline:
            leads = set()
            for i in self.alive():
                st = await self.status(i)
                if st is not None and st["role"] == "leader" and i != exclude:
                    leads.add(i)
            if len(leads) == 1:
                return leads.pop()
            await asyncio.sleep(0.05)
        raise TimeoutError(f"no leader within {timeout} s")
