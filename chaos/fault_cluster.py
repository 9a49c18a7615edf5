"""The campaign's cluster: SinkProcessCluster with faults.

- Raft traffic goes through the fault-injecting proxy: node i's --peers
  string gives every OTHER node j the raft address 127.0.0.1:P_ij (a proxy
  port forwarding to j's real Raft port); its own entry is real. Kafka and
  read API addresses are real (clients reach every node directly).
- Nodes run `python -m chaos.node serve ...` (the disk-stall hook), through the
  launcher's public hooks (node_wrapper, peers_for, env_for).
- kill -9 / restart, SIGSTOP / SIGCONT, disk stalls; every start of a node
  increments its incarnation number (gen), used by the high-watermark checker.
- storage faults (issue 12): wipe a node's data directory, or flip a byte in the
  middle of its largest synced segment, while it is down. A damaged node that
  stops itself (exit 3, "move ... away ... replacement") is repaired the way the
  message says (`repair`): its directory moved aside, started empty.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import threading

from chaos.node import STALL_ENV
from chaos.proxy import ProxyControl
from chaos.secure import SecureSetup
from raftlog.process_cluster import free_ports
from sink.config import Peer, format_peers
from sink.process_cluster import SinkProcessCluster
from sink.readapi import ReadApiClient


class ChaosReadClient(ReadApiClient):
    """ReadApiClient whose channel reconnects quickly after a node comes back
    (gRPC's default reconnect back-off grows to 120 s)."""

    def __init__(self, address: str, credentials: object = None) -> None:
        super().__init__(
            address,
            credentials=credentials,  # type: ignore[arg-type]
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
    def __init__(
        self,
        base_dir: str,
        n: int = 3,
        default_partitions: int = 1,
        secure: bool = False,
        partition_groups: bool | None = None,
        **kw,
    ) -> None:
        """secure: TLS everywhere, SASL_SSL clients, authorization on (chaos/secure.py);
        `self.security` then holds the certificates and the clients' settings.
        partition_groups: a Raft group per partition plus the controller
        (docs/partition-groups.md; None: the nodes' default, see SinkProcessCluster);
        every pair of nodes gets its proxy links either way."""
        self.security: SecureSetup | None = None
        if secure:
            os.makedirs(base_dir, exist_ok=True)
            self.security = SecureSetup.make(base_dir, n)
            kw["extra_args"] = [*self.security.node_args(), *(kw.get("extra_args") or [])]
            kw["read_api_credentials"] = self.security.read_api_credentials()
            kw["authorization"] = True
        # Nodes run through the disk-stall wrapper and reach each other via the proxy.
        super().__init__(
            base_dir,
            n=n,
            default_partitions=default_partitions,
            node_wrapper=NODE_WRAPPER,
            partition_groups=partition_groups,
            **kw,
        )
        if self.security is not None:
            for i, node in self.nodes.items():
                node.extra_args += self.security.node_pair_args(i)
        ids = sorted(self.peers)
        pairs = [(i, j) for i in ids for j in ids if i != j]
        ports = free_ports(len(pairs))
        self.link_ports = {link(i, j): ports[k] for k, (i, j) in enumerate(pairs)}
        self.gen = {i: 0 for i in ids}
        self.paused: set[int] = set()
        self.stalled: set[int] = set()
        self.damaged: set[int] = set()  # corrupted while down, not repaired yet
        self.repairs = 0
        self._repair_lock = threading.Lock()  # the monitor and the nemesis both repair
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

    def wipe(self, i: int) -> None:
        """kill -9 node i, delete its data directory, start it empty (a replaced disk)."""
        self.kill(i)
        shutil.rmtree(self.nodes[i].data_dir, ignore_errors=True)
        self.start(i)

    def corrupt(self, i: int, fraction: float = 0.5) -> str:
        """kill -9 node i, flip one byte of its largest segment at `fraction` of the
        file (synced data: the node had fsynced it), start it again. Returns the file."""
        self.kill(i)
        segs = []
        for root, _, files in os.walk(self.nodes[i].data_dir):
            segs += [os.path.join(root, f) for f in files if f.endswith(".seg")]
        if segs:
            seg = max(segs, key=os.path.getsize)
            pos = max(64, int(os.path.getsize(seg) * fraction))
            with open(seg, "r+b") as f:
                f.seek(pos)
                b = f.read(1)
                if b:
                    f.seek(pos)
                    f.write(bytes([b[0] ^ 0xFF]))
                    f.flush()
                    os.fsync(f.fileno())
            self.damaged.add(i)
        self.start(i)
        return seg if segs else ""

    def stopped_on_damage(self, i: int) -> bool:
        """Node i exited with code 3 telling the operator to start it as a replacement."""
        if self.exited().get(i) != 3:
            return False
        tail = self.log_tail(i, 8000)
        return "move" in tail and "replacement" in tail

    def verify_and_repair(self, i: int) -> str:
        """Stop node i and `raftsink verify --repair` its log as an operator would:
        damage verify finds is scheduled for repair (the REPAIR marker), so the start
        keeps the intact prefix and fetches the rest from the peers (issue 12), instead
        of losing the whole directory. Only storage verify cannot read as a log at all
        is moved aside (the node starts empty). Returns what it did."""
        from raftlog.storage import schedule_repair, verify_data_dir

        with self._repair_lock:
            if i not in self.damaged:
                return "already repaired"
            if self.partition_groups:
                # `raftsink verify` reads the one-group layout (DATA_DIR/log with its own
                # index); with partition groups every group's segments share one LMDB
                # index (DATA_DIR/index), which it cannot check. The node stays as it is
                # (still `damaged`: if it stops on the damage later, the monitor repairs
                # it as its message says) and finds the damage itself when it reads it.
                return "verify not run: it does not read the partition-groups layout"
            self.kill(i)
            log_dir = os.path.join(self.nodes[i].data_dir, "log")
            report = verify_data_dir(log_dir) if os.path.isdir(log_dir) else None
            if report is not None and report.repair_plan() is not None:
                self.repairs += 1
                at = schedule_repair(log_dir, report)
                what = f"verify found damage: repair from entry {at} scheduled ({report.repair()})"
            elif report is not None and not report.ok:
                data_dir = self.nodes[i].data_dir
                self.repairs += 1
                shutil.move(data_dir, f"{data_dir}.damaged-{self.repairs}")
                what = f"verify found {len(report.problems)} problem(s), no log to keep: replaced"
            else:
                what = "verify found nothing (damage cut as a torn tail or compacted)"
            self.damaged.discard(i)
            self.start(i)
            return what

    def repair_if_stopped(self, i: int) -> bool:
        """If node i stopped on damaged storage, do what its message says: move its
        data directory aside and start it empty (it rejoins as a replacement)."""
        with self._repair_lock:
            if not self.stopped_on_damage(i):
                return False
            data_dir = self.nodes[i].data_dir
            self.repairs += 1
            shutil.move(data_dir, f"{data_dir}.damaged-{self.repairs}")
            self.nodes[i].proc = None
            self.damaged.discard(i)
            self.start(i)
            return True

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
        return ChaosReadClient(self.peers[i].read_api, self.read_api_credentials)

    @property
    def kafka_conf(self) -> dict[str, str]:
        """Settings every Kafka client of the campaign adds to its own (SASL_SSL as the
        workload user on a secure cluster; nothing on a plain one)."""
        return self.security.kafka_conf() if self.security is not None else {}
