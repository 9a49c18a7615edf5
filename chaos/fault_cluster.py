"""The campaign's cluster: SinkProcessCluster with faults.

- Raft traffic goes through the fault-injecting proxy: node i's --peers
  string gives every OTHER node j the raft address 127.0.0.1:P_ij (a proxy
  port forwarding to j's real Raft port); its own entry is real. Kafka and
  read API addresses are real (clients reach every node directly).
- Nodes run `python -m chaos.node serve ...` (the disk-stall hook), through the
  launcher's public hooks (node_wrapper, peers_for, env_for).
- kill -9 / restart, SIGSTOP / SIGCONT, disk stalls; every start of a node
  increments its incarnation number (gen), used by the high-watermark checker.
"""

from __future__ import annotations

import contextlib
import os
import signal

from chaos.node import STALL_ENV
from chaos.proxy import ProxyControl
from raftlog.process_cluster import free_ports
from sink.config import Peer, format_peers
from sink.process_cluster import SinkProcessCluster
from sink.readapi import ReadApiClient


class ChaosReadClient(ReadApiClient):
    """ReadApiClient whose channel reconnects quickly after a node comes back
    (gRPC's default reconnect back-off grows to 120 s)."""

    def __init__(self, address: str) -> None:
        super().__init__(
            address,
            channel_options=[
                ("grpc.initial_reconnect_backoff_ms", 100),
                ("grpc.min_reconnect_backoff_ms", 100),
                ("grpc.max_reconnect_backoff_ms", 1000),
            ],
        )


NODE_WRAPPER = "chaos.node"
"""The module nodes run as: `raftsink serve` plus the disk-stall hook."""


def link(i: int, j: int) -> str:
    return f"{i}-{j}"


class ChaosCluster(SinkProcessCluster):
    def __init__(self, base_dir: str, n: int = 3, default_partitions: int = 1, **kw) -> None:
        # Nodes run through the disk-stall wrapper and reach each other via the proxy.
        super().__init__(
            base_dir, n=n, default_partitions=default_partitions, node_wrapper=NODE_WRAPPER, **kw
        )
        ids = sorted(self.peers)
        pairs = [(i, j) for i in ids for j in ids if i != j]
        ports = free_ports(len(pairs))
        self.link_ports = {link(i, j): ports[k] for k, (i, j) in enumerate(pairs)}
        self.gen = {i: 0 for i in ids}
        self.paused: set[int] = set()
        self.stalled: set[int] = set()
        self.proxy: ProxyControl | None = None

    # ----------------------------------------------------------- addresses

    def peers_for(self, i: int) -> str:
        """Node i's view: other nodes' Raft addresses are its proxy ports."""
        view = {
            j: p
            if j == i
            else Peer(j, f"127.0.0.1:{self.link_ports[link(i, j)]}", p.kafka, p.read_api)
            for j, p in self.peers.items()
        }
        return format_peers(view)

    def stall_file(self, i: int) -> str:
        return os.path.join(self.base_dir, f"node{i}.disk-stall")

    def start_proxy(self) -> None:
        links = {
            name: (port, int(self.peers[int(name.split("-")[1])].raft.rpartition(":")[2]))
            for name, port in self.link_ports.items()
        }
        self.proxy = ProxyControl(links, os.path.join(self.base_dir, "proxy.log"))

    # ----------------------------------------------------------- lifecycle

    def start(self, i: int | None = None) -> None:
        if self.proxy is None:
            self.start_proxy()
        super().start(i)
        for n in [self.nodes[i]] if i else self.nodes.values():
            self.gen[n.peer.id] += 1
            self.paused.discard(n.peer.id)

    def env_for(self, node_id: int) -> dict[str, str]:
        return {**os.environ, STALL_ENV: self.stall_file(node_id)}

    def kill(self, i: int) -> None:
        super().kill(i)
        self.paused.discard(i)

    def pause(self, i: int) -> bool:
        n = self.nodes[i]
        if n.proc is None or n.proc.poll() is not None:
            return False
        os.kill(n.proc.pid, signal.SIGSTOP)
        self.paused.add(i)
        return True

    def resume(self, i: int) -> None:
        n = self.nodes[i]
        if n.proc is not None and n.proc.poll() is None:
            os.kill(n.proc.pid, signal.SIGCONT)
        self.paused.discard(i)

    def stall_disk(self, i: int, mode: str = "stall") -> None:
        """mode: "stall" (fsync blocks until cleared) or seconds per fsync ("0.5")."""
        path = self.stall_file(i)
        with open(path + ".tmp", "w") as f:
            f.write(mode)
        os.replace(path + ".tmp", path)
        self.stalled.add(i)

    def clear_disk(self, i: int) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.remove(self.stall_file(i))
        self.stalled.discard(i)

    def heal_all(self) -> None:
        """Undo every fault: heal links, resume, clear stalls, restart dead nodes."""
        if self.proxy is not None:
            self.proxy.heal()
        for i in list(self.paused):
            self.resume(i)
        for i in list(self.stalled):
            self.clear_disk(i)
        for i, n in self.nodes.items():
            if n.proc is None or n.proc.poll() is not None:
                self.start(i)

    def stop(self, timeout: float = 15.0) -> None:
        for i in list(self.paused):
            self.resume(i)
        for i in list(self.stalled):
            self.clear_disk(i)
        super().stop(timeout)
        if self.proxy is not None:
            self.proxy.close()
            self.proxy = None

    def client(self, i: int) -> ChaosReadClient:
        return ChaosReadClient(self.peers[i].read_api)
