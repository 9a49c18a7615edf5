"""A 3-node raftsink cluster of containers (testcontainers) for the container tests.

Layout (see docs/docker.md):
- one user-defined network; node i has the network alias `node{i}` and every node reaches
  the others by alias (Raft on :7001, internal Kafka listener on :9092, read API on :7101);
- the EXTERNAL Kafka listener (:9093) and the read API are published on 127.0.0.1 on FIXED
  host ports picked once per cluster, so a restarted container keeps its host ports and the
  advertised external addresses (`RAFTSINK_EXTERNAL_KAFKA`) stay true;
- fault injection: `docker kill` (SIGKILL) / `docker start`, and a partition made of iptables
  DROP rules inside one container's network namespace (`nsenter -t PID -n`), which cuts it
  off from the other nodes while the host can still reach its published ports.

Secure variant (`secure_dir`, docs/docker.md): the settings of docker/secure.env (the
compose file's secure variant reads the same file), node i mounting `secure_dir/node{i}`
(docker/make-secure.sh's output) at /certs: TLS on every listener, SASL_SSL SCRAM-SHA-512,
authorization on with the super user admin; status() then dials the read API with the
client certificate.

Cleanup: `ContainerCluster` is used through an ExitStack (network first, containers after,
removed in reverse order); every step of the teardown runs even when an earlier one fails.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import subprocess
import time
from collections.abc import Callable

# Both must be set before testcontainers is imported (conftest.py sets them too).
os.environ.setdefault("TESTCONTAINERS_RYUK_DISABLED", "true")
os.environ.setdefault("TESTCONTAINERS_CONNECTION_MODE", "docker_host")

from testcontainers.core.container import DockerContainer
from testcontainers.core.network import Network

from sink.readapi import ReadApiClient

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SECURE_ENV = os.path.join(ROOT, "docker", "secure.env")
MAKE_SECURE = os.path.join(ROOT, "docker", "make-secure.sh")
RAFT_PORT, KAFKA_PORT, EXTERNAL_KAFKA_PORT, READ_API_PORT = 7001, 9092, 9093, 7101


def free_ports(n: int) -> list[int]:
    """n distinct free TCP ports on 127.0.0.1 (held open together so they differ)."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def read_env_file(path: str) -> dict[str, str]:
    """KEY=VALUE lines of a compose env_file (# comments, blank lines skipped)."""
    env = {}
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line and not line.startswith("#"):
                key, _, value = line.partition("=")
                env[key.strip()] = value.strip()
    return env


def wait_for(cond: Callable[[], object], timeout: float, what: str, interval: float = 0.05):
    """Poll cond() until it returns a truthy value (returned) or the deadline passes."""
    deadline = time.monotonic() + timeout
    while True:
        value = cond()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(interval)


# Cluster-wide switches a test run sets on the host (as `raftsink serve` children of the
# process clusters inherit them): every container of the cluster gets the same value, since a
# mixed cluster is not supported (docs/partition-groups.md, "The switch").
FORWARDED_SWITCHES = ("RAFTSINK_CLUSTER_PARTITION_GROUPS",)


def _forwarded_switches() -> dict[str, str]:
    return {k: os.environ[k] for k in FORWARDED_SWITCHES if k in os.environ}


class ContainerCluster:
    def __init__(
        self,
        stack: contextlib.ExitStack,
        image: str,
        n: int = 3,
        partitions: int = 1,
        env: dict[str, str] | None = None,
        secure_dir: str | None = None,
    ) -> None:
        """secure_dir: docker/make-secure.sh's output: the secure variant (module doc)."""
        self.stack = stack
        self.secure_dir = secure_dir
        self.image = image
        self.n = n
        ports = free_ports(2 * n)
        self.kafka_ports = {i: ports[2 * (i - 1)] for i in range(1, n + 1)}
        self.read_ports = {i: ports[2 * (i - 1) + 1] for i in range(1, n + 1)}
        self.peers = ",".join(
            f"{i}=node{i}:{RAFT_PORT}/node{i}:{KAFKA_PORT}/node{i}:{READ_API_PORT}"
            for i in range(1, n + 1)
        )
        self.external = ",".join(f"{i}={self.kafka_addr(i)}" for i in range(1, n + 1))
        self.env = {
            "RAFTSINK_PEERS": self.peers,
            "RAFTSINK_KAFKA_EXTERNAL_LISTEN": f"0.0.0.0:{EXTERNAL_KAFKA_PORT}",
            "RAFTSINK_EXTERNAL_KAFKA": self.external,
            "RAFTSINK_DEFAULT_PARTITIONS": str(partitions),
            "RAFTSINK_LOG_LEVEL": "INFO",
            "RAFTSINK_AUTHORIZATION_ENABLED": "false",  # the plain cluster: no ACLs
            **(read_env_file(SECURE_ENV) if secure_dir else {}),
            **_forwarded_switches(),
            **(env or {}),
        }
        self.read_api_credentials = None
        if secure_dir:
            from sink.readapi.client import tls_credentials

            client = os.path.join(secure_dir, "client")
            self.read_api_credentials = tls_credentials(
                *(os.path.join(client, f) for f in ("ca.pem", "client.pem", "client.key"))
            )
        self.network: Network | None = None
        self.nodes: dict[int, DockerContainer] = {}
        self.partitioned: set[int] = set()

    # -- addresses -------------------------------------------------------------------
    def kafka_addr(self, i: int) -> str:
        """Node i's external Kafka address, as advertised to host clients."""
        return f"127.0.0.1:{self.kafka_ports[i]}"

    def read_api(self, i: int) -> str:
        return f"127.0.0.1:{self.read_ports[i]}"

    @property
    def bootstrap_servers(self) -> str:
        return ",".join(self.kafka_addr(i) for i in self.nodes)

    @property
    def read_api_nodes(self) -> str:
        return ",".join(self.read_api(i) for i in self.nodes)

    # -- lifecycle -------------------------------------------------------------------
    def start(self) -> ContainerCluster:
        """Create the network, then the containers; teardown is registered on the stack."""
        self.network = self.stack.enter_context(Network())
        for i in range(1, self.n + 1):
            c = (
                DockerContainer(self.image)
                .with_network(self.network)
                .with_network_aliases(f"node{i}")
                .with_envs(**self.env, RAFTSINK_NODE_ID=str(i))
                .with_name(f"raftsink-test-{self.network.name[:8]}-node{i}")
            )
            if self.secure_dir:
                c.with_volume_mapping(os.path.join(self.secure_dir, f"node{i}"), "/certs", "ro")
            # Fixed host ports on 127.0.0.1 (docker-py accepts (ip, port) tuples).
            c.ports[f"{EXTERNAL_KAFKA_PORT}/tcp"] = ("127.0.0.1", self.kafka_ports[i])
            c.ports[f"{READ_API_PORT}/tcp"] = ("127.0.0.1", self.read_ports[i])
            self.stack.enter_context(c)
            self.nodes[i] = c
        return self

    def container(self, i: int):
        return self.nodes[i].get_wrapped_container()

    def kill(self, i: int) -> None:
        """docker kill (SIGKILL): a crash; the container's file system (data) survives."""
        self.container(i).kill(signal="SIGKILL")
        wait_for(lambda: self._state(i) == "exited", 30, f"node {i} to exit")

    def restart(self, i: int) -> None:
        """docker start a stopped node (same host ports: they are fixed in its config)."""
        self.container(i).start()
        wait_for(lambda: self.status(i) is not None, 60, f"node {i} to serve its read API")

    def _state(self, i: int) -> str:
        c = self.container(i)
        c.reload()
        return c.attrs["State"]["Status"]

    def logs(self, i: int, tail: int = 60) -> str:
        try:
            return self.container(i).logs(tail=tail).decode(errors="replace")
        except Exception as exc:  # the container may be gone
            return f"<no logs: {exc}>"

    # -- partitions --------------------------------------------------------------------
    def ip(self, i: int) -> str:
        c = self.container(i)
        c.reload()
        assert self.network is not None
        return c.attrs["NetworkSettings"]["Networks"][self.network.name]["IPAddress"]

    def _nsenter_iptables(self, i: int, *args: str) -> None:
        c = self.container(i)
        c.reload()
        pid = str(c.attrs["State"]["Pid"])
        subprocess.run(
            ["nsenter", "-t", pid, "-n", "iptables", "-w", *args],
            check=True,
            capture_output=True,
            text=True,
        )

    def partition(self, i: int) -> None:
        """Cut node i off from every other node (both directions); the host still reaches it."""
        for j in self.nodes:
            if j != i:
                ip = self.ip(j)
                self._nsenter_iptables(i, "-I", "INPUT", "-s", ip, "-j", "DROP")
                self._nsenter_iptables(i, "-I", "OUTPUT", "-d", ip, "-j", "DROP")
        self.partitioned.add(i)

    def heal(self, i: int) -> None:
        self._nsenter_iptables(i, "-F", "INPUT")
        self._nsenter_iptables(i, "-F", "OUTPUT")
        self.partitioned.discard(i)

    # -- status ----------------------------------------------------------------------
    def status(self, i: int, timeout: float = 2.0) -> dict | None:
        async def ask() -> dict | None:
            client = ReadApiClient(self.read_api(i), credentials=self.read_api_credentials)
            try:
                return await client.status(timeout=timeout)
            except Exception:
                return None
            finally:
                await client.close()

        return asyncio.run(ask())

    def statuses(self, nodes=None) -> dict[int, dict | None]:
        return {i: self.status(i) for i in nodes or self.nodes}

    def wait_leader(self, nodes=None, exclude: int = 0, timeout: float = 60.0) -> int:
        """Wait until the given nodes (default all) answer and agree on one leader among them."""
        nodes = list(nodes or self.nodes)
        last: dict = {}

        def agreed() -> int:
            nonlocal last
            sts = self.statuses(nodes)
            last = sts
            if any(st is None for st in sts.values()):
                return 0
            leaders = {st["leader"] for st in sts.values()}
            if len(leaders) != 1:
                return 0
            leader = leaders.pop()
            if leader in (0, exclude) or leader not in sts:
                return 0
            return leader if sts[leader]["role"] == "leader" else 0

        try:
            return wait_for(agreed, timeout, f"one leader among nodes {nodes}")
        except AssertionError as exc:
            raise AssertionError(f"{exc}; last status: {last}") from None

    def wait_converged(self, timeout: float = 60.0) -> dict[int, dict]:
        """Wait until every node answers with the same commit/applied index, partition high
        watermarks and log end; returns the statuses."""
        last: dict = {}

        def same() -> dict | None:
            nonlocal last
            sts = self.statuses()
            last = sts
            if any(st is None for st in sts.values()):
                return None
            keys = {
                (
                    st["commit"],
                    st["applied"],
                    st["last_index"],
                    tuple(sorted(st["partitions"].items())),
                )
                for st in sts.values()
            }
            if len(keys) == 1 and all(st["applied"] == st["commit"] for st in sts.values()):
                return sts
            return None

        try:
            return wait_for(same, timeout, "every node to have the same log and applied state")
        except AssertionError as exc:
            raise AssertionError(f"{exc}; last status: {last}") from None
