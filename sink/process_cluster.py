"""The sink's process cluster: `raftsink serve` processes on 127.0.0.1.

The embedded default behind `raftsink local`, the demos, the fault campaign, the
multi-process tests and the benchmarks: the one public launcher of node processes (the
raftlog-only one is raftlog.process_cluster, the container one tests/containers). Each node
is a real process with its own data directory and three listeners (Raft, Kafka, read API) on
free ports.

Hooks for tools (the fault campaign uses all three), so no tool needs sink.cli's internals:
- `node_wrapper` (constructor): a module run as `python -m MODULE serve ARGS` instead of
  `sink.cli`; it installs its hooks in the node process and then hands ARGS to
  `sink.cli.main` (the `raftsink` command's entry point);
- `peers_for(node_id)`: the --peers string a node starts with (e.g. routed through a proxy);
- `env_for(node_id)`: the node's environment.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from typing import Any

from raftlog.process_cluster import free_ports
from sink.config import Peer, env_value, format_peers
from sink.readapi import ReadApiClient


@dataclass
class SinkProc:
    peer: Peer
    data_dir: str
    log_path: str
    proc: subprocess.Popen | None = None
    extra_args: list[str] = field(default_factory=list)
    """Flags of this node only (a node added later runs with --node-join)."""


class SinkProcessCluster:
    def __init__(
        self,
        base_dir: str,
        n: int = 3,
        default_partitions: int = 1,
        extra_args: list[str] | None = None,
        log_level: str = "WARNING",
        node_wrapper: str | None = None,
        read_api_credentials: Any = None,
        authorization: bool = False,
        processes_per_host: int | None = None,
        partition_groups: bool | None = None,
    ) -> None:
        """node_wrapper: module each node runs as (`python -m node_wrapper serve ...`);
        default sink.cli. It must end by calling sink.cli.main(argv).
        read_api_credentials: gRPC channel credentials for the nodes' read API when it
        is TLS (sink.readapi.client.tls_credentials); None: plaintext.
        authorization: leave ACL checks on (`raftsink serve`'s default). Off by default
        here: this launcher is `raftsink local`'s, the demos', the benchmarks' and the
        tests', whose clients have no ACLs (authorization.enabled; docs/security.md).
        processes_per_host: K node processes per emulated host: nodes 1..K get
        --node-host h1, K+1..2K h2, ... (placement keeps a group's replicas on different
        hosts); None: no label, every node its own host (node.host's default).
        partition_groups: start every node with cluster.partition_groups on (a Raft
        group per partition plus the controller; docs/partition-groups.md) or off (one
        group); None: what a node started here would pick, the
        RAFTSINK_CLUSTER_PARTITION_GROUPS variable else the option's default (on). Every
        node gets it as an explicit flag, and `partition_groups` holds the value."""
        if n < 1:
            raise ValueError(f"n must be >= 1, got {n}")
        if processes_per_host is not None and processes_per_host < 1:
            raise ValueError(f"processes_per_host must be >= 1, got {processes_per_host}")
        self.processes_per_host = processes_per_host
        self.read_api_credentials = read_api_credentials
        self.node_module = node_wrapper or "sink.cli"
        self.base_dir = os.path.abspath(base_dir)
        os.makedirs(self.base_dir, exist_ok=True)
        ports = free_ports(3 * n)
        self.peers = {
            i: Peer(
                i,
                f"127.0.0.1:{ports[3 * (i - 1)]}",
                f"127.0.0.1:{ports[3 * (i - 1) + 1]}",
                f"127.0.0.1:{ports[3 * (i - 1) + 2]}",
            )
            for i in range(1, n + 1)
        }
        self.nodes = {
            i: SinkProc(
                p,
                os.path.join(self.base_dir, f"node{i}"),
                os.path.join(self.base_dir, f"node{i}.log"),
            )
            for i, p in self.peers.items()
        }
        self.args = [
            "--default-partitions",
            str(default_partitions),
            "--log-level",
            log_level,
            *(extra_args or []),
        ]
        if not authorization:
            self.args.append("--no-authorization-enabled")
        if partition_groups is None:
            partition_groups = bool(env_value("cluster.partition_groups"))
        self.partition_groups = partition_groups
        on = "--cluster-partition-groups" if partition_groups else "--no-cluster-partition-groups"
        self.args.append(on)

    def host_of(self, node_id: int) -> str:
        """Node `node_id`'s host label: h1 for nodes 1..K, h2 for K+1..2K, ...; without
        processes_per_host its id as text (node.host's default)."""
        k = self.processes_per_host
        return f"h{(node_id - 1) // k + 1}" if k else str(node_id)

    def command_for(self, node_id: int) -> list[str]:
        """The `serve` command line node `node_id` starts with."""
        n = self.nodes[node_id]
        host = ["--node-host", self.host_of(node_id)] if self.processes_per_host else []
        return [
            sys.executable,
            "-m",
            self.node_module,
            "serve",
            "--node-id",
            str(node_id),
            "--data-dir",
            n.data_dir,
            "--peers",
            self.peers_for(node_id),
            *host,
            *self.args,
            *n.extra_args,
        ]

    @property
    def bootstrap_servers(self) -> str:
        return ",".join(p.kafka for p in self.peers.values())

    def write_cluster_file(self) -> str:
        path = os.path.join(self.base_dir, "cluster.json")
        with open(path, "w") as f:
            json.dump(
                {
                    "bootstrap_servers": self.bootstrap_servers,
                    "nodes": {
                        str(i): {
                            "raft": p.raft,
                            "kafka": p.kafka,
                            "read_api": p.read_api,
                            "host": self.host_of(i),
                        }
                        for i, p in self.peers.items()
                    },
                },
                f,
                indent=2,
            )
        return path

    # The hooks' names before they became public: a subclass still overriding one would be
    # silently ignored, so defining it is an error that names the new hook.
    _RENAMED_HOOKS = {
        "_node_env": "env_for",
        "_node_peers": "peers_for",
        "node_module": "node_wrapper",
    }

    def __init_subclass__(cls, **kw: object) -> None:
        super().__init_subclass__(**kw)
        for old, new in SinkProcessCluster._RENAMED_HOOKS.items():
            if old in cls.__dict__:
                raise TypeError(
                    f"{cls.__name__}.{old}: SinkProcessCluster's hook is now {new!r} "
                    "(see sink/process_cluster.py)"
                )

    def peers_for(self, node_id: int) -> str:
        """Hook: the --peers a node is started with (a subclass may route them elsewhere)."""
        return format_peers(self.peers)

    def env_for(self, node_id: int) -> dict[str, str] | None:
        """Hook: the node's environment; None: this process's."""
        return None

    def log_tail(self, node_id: int, n: int = 2000) -> str:
        """The last n bytes of a node's stderr log (for error reports)."""
        return _tail(self.nodes[node_id].log_path, n)

    def start(self, i: int | None = None) -> None:
        for n in [self.nodes[i]] if i else self.nodes.values():
            nid = n.peer.id
            os.makedirs(n.data_dir, exist_ok=True)
            with open(n.log_path, "ab") as log:
                n.proc = subprocess.Popen(
                    self.command_for(nid),
                    stdout=subprocess.DEVNULL,
                    stderr=log,
                    env=self.env_for(nid),
                    start_new_session=True,  # Ctrl-C in a terminal reaches only the parent
                )

    def add_node(self, i: int | None = None) -> Peer:
        """A new node (not started): its own free ports and data directory, started with
        --node-join (it waits for `raftsink members add`). Returns its addresses."""
        i = i if i is not None else max(self.nodes) + 1
        if i in self.nodes:
            raise ValueError(f"node {i} exists")
        ports = free_ports(3)
        peer = Peer(i, *(f"127.0.0.1:{p}" for p in ports))
        self.peers[i] = peer
        self.nodes[i] = SinkProc(
            peer,
            os.path.join(self.base_dir, f"node{i}"),
            os.path.join(self.base_dir, f"node{i}.log"),
            extra_args=["--node-join"],
        )
        return peer

    def wipe_data(self, i: int) -> None:
        """Delete a stopped node's data directory (a lost disk); it restarts with
        --node-join, as a replacement to be added by `raftsink members replace`."""
        n = self.nodes[i]
        if n.proc is not None and n.proc.poll() is None:
            raise RuntimeError(f"node {i} is running")
        shutil.rmtree(n.data_dir, ignore_errors=True)
        if "--node-join" not in n.extra_args:
            n.extra_args.append("--node-join")

    def forget_node(self, i: int) -> None:
        """Drop a stopped, removed node from this harness (its files stay)."""
        n = self.nodes.pop(i)
        if n.proc is not None and n.proc.poll() is None:
            raise RuntimeError(f"node {i} is running")
        del self.peers[i]

    def terminate(self, i: int, timeout: float = 30.0) -> int:
        """SIGTERM node i (graceful: a leader hands leadership over first) and wait;
        SIGKILL if it does not stop in time. Returns the exit code."""
        n = self.nodes[i]
        code = 0
        if n.proc is not None and n.proc.poll() is None:
            n.proc.send_signal(signal.SIGTERM)
            try:
                code = n.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                n.proc.kill()
                code = n.proc.wait()
        n.proc = None
        return code

    def __enter__(self) -> SinkProcessCluster:
        """`with SinkProcessCluster(...) as c:` starts every node and waits until they
        serve (wait_ready's default bound); the block's end stops them, whatever
        happened (a start that fails stops what it started)."""
        self.start()
        try:
            asyncio.run(self.wait_ready())
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def kill(self, i: int) -> None:
        """SIGKILL node i (a crash)."""
        n = self.nodes[i]
        if n.proc is not None and n.proc.poll() is None:
            n.proc.send_signal(signal.SIGKILL)
            n.proc.wait()
        n.proc = None

    def stop(self, timeout: float = 15.0) -> None:
        """SIGTERM every node and wait; SIGKILL what does not stop in time."""
        for n in self.nodes.values():
            if n.proc is not None and n.proc.poll() is None:
                n.proc.send_signal(signal.SIGTERM)
        for n in self.nodes.values():
            if n.proc is not None:
                try:
                    n.proc.wait(timeout=timeout)
                except subprocess.TimeoutExpired:
                    n.proc.kill()
                    n.proc.wait()
                n.proc = None

    def alive(self) -> list[int]:
        return [i for i, n in self.nodes.items() if n.proc is not None and n.proc.poll() is None]

    def exited(self) -> dict[int, int]:
        """Nodes whose process ended, with exit codes (a node should not exit on its own)."""
        return {
            i: n.proc.returncode
            for i, n in self.nodes.items()
            if n.proc is not None and n.proc.poll() is not None
        }

    def describe_exit(self, i: int, code: int, lines: int = 5) -> str:
        """What an operator needs about node i's exit: code, meaning, last log lines."""
        meaning = _EXIT_MEANINGS.get(code, "unexpected")
        if code < 0:
            meaning = f"killed by signal {signal.Signals(-code).name}"
        tail = self.log_tail(i, 8000).splitlines()[-lines:]
        text = "\n".join(f"    {line}" for line in tail) or "    (empty log)"
        alive = len(self.alive())
        return (
            f"raftsink local: node {i} exited with code {code} ({meaning}); "
            f"{alive} of {len(self.nodes)} nodes still running; log {self.nodes[i].log_path}, "
            f"last lines:\n{text}"
        )

    async def status(self, i: int, timeout: float = 2.0) -> dict | None:
        client = ReadApiClient(self.peers[i].read_api, credentials=self.read_api_credentials)
        try:
            return await client.status(timeout=timeout)
        except Exception:
            return None
        finally:
            await client.close()

    async def wait_ready(self, timeout: float = 60.0, exclude: int = 0) -> int:
        """Wait until every live node answers and they agree on one leader; returns it."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        last = None
        while loop.time() < deadline:
            bad = self.exited()
            if bad:
                logs = {i: _tail(self.nodes[i].log_path) for i in bad}
                raise RuntimeError(f"node(s) exited: {bad}; log tails: {logs}")
            sts = {i: await self.status(i) for i in self.alive()}
            last = sts
            leaders = {st["leader"] for st in sts.values() if st}
            if (
                sts
                and all(st is not None for st in sts.values())
                and len(leaders) == 1
                and 0 not in leaders
                and leaders != {exclude}
            ):
                leader = leaders.pop()
                if sts.get(leader, {}) and sts[leader]["role"] == "leader":
                    return leader
            await asyncio.sleep(0.05)
        raise TimeoutError(f"cluster not ready within {timeout} s; last status: {last}")

    async def wait_settled(self, timeout: float = 300.0) -> int:
        """Wait until every live node has durably stored and applied the same last
        entry (followers caught up, nothing in flight); returns that index.
        Benchmarks call it between phases so one phase's backlog (a follower still
        catching up) does not load the next phase's measurement."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        last = None
        while loop.time() < deadline:
            sts = [await self.status(i) for i in self.alive()]
            last = sts
            if sts and all(st is not None for st in sts):
                ends = {(st["applied"], st["durable_index"], st["last_index"]) for st in sts}
                if len(ends) == 1:
                    applied, durable, last_index = ends.pop()
                    if applied == durable == last_index:
                        return applied
            await asyncio.sleep(0.1)
        raise TimeoutError(f"cluster did not settle within {timeout} s; last status: {last}")


_EXIT_MEANINGS = {
    0: "stopped",
    1: "error at start (see the log)",
    2: "configuration error",
    3: "stopped itself on a storage failure (ENOSPC, EIO, corrupt data)",
    4: "a graceful stop did not finish in time (raftsink.stop_incomplete in the log)",
}
"""Exit codes of `raftsink serve` (3 is sink.node.EXIT_STORAGE_FAILURE)."""


def _tail(path: str, n: int = 2000) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - n))
            return f.read().decode(errors="replace")
    except OSError:
        return ""
