"""A SinkProcessCluster (real `raftsink serve` processes) whose Kafka traffic all passes
through a KafkaRecorder.

Each node advertises its proxy port (its `--peers` Kafka address, so Metadata hands clients
the proxy) and binds its real listener on a hidden port (`RAFTSINK_KAFKA_LISTEN` in the
node's environment). Every connection a client opens, the bootstrap one and those to the
leaders it learns from Metadata, is therefore recorded.
"""

from __future__ import annotations

import asyncio
import os
import socket
import struct

from kio.serial import entity_reader

from raftlog.process_cluster import free_ports
from sink.kafka.protocol import response_schema
from sink.process_cluster import SinkProcessCluster
from tests.helpers.kafka_recorder import KafkaRecorder
from tests.helpers.kafka_wire import recv_exact


def _port(addr: str) -> int:
    return int(addr.rpartition(":")[2])


class RecordedSinkCluster(SinkProcessCluster):
    def __init__(self, base_dir: str, n: int = 3, **kw) -> None:
        super().__init__(base_dir, n=n, **kw)
        advertised = {_port(p.kafka) for p in self.peers.values()}
        hidden = free_ports(n)
        while advertised & set(hidden):  # both sets are free now; neither is bound yet
            hidden = free_ports(n)
        self.hidden_kafka = {i: hidden[k] for k, i in enumerate(sorted(self.peers))}
        self.recorder = KafkaRecorder(
            {i: (_port(p.kafka), self.hidden_kafka[i]) for i, p in self.peers.items()}
        )

    def env_for(self, node_id: int) -> dict[str, str]:
        return {**os.environ, "RAFTSINK_KAFKA_LISTEN": f"127.0.0.1:{self.hidden_kafka[node_id]}"}

    def start_all(self, timeout: float = 60.0) -> int:
        """Start the proxy and every node; wait for one leader; returns its id."""
        self.recorder.start()
        self.start()
        return asyncio.run(self.wait_ready(timeout))

    def stop_all(self) -> None:
        self.stop()
        self.recorder.stop()

    def node_logs(self) -> str:
        out = []
        for i, n in self.nodes.items():
            try:
                with open(n.log_path, errors="replace") as f:
                    out.append(f"--- node {i}\n{f.read()}")
            except OSError:
                pass
        return "\n".join(out)


def served_versions(port: int, timeout: float = 5.0) -> dict[int, tuple[int, int]]:
    """The (min, max) per API key a node advertises: one ApiVersions v0 request, sent raw
    (request header v1, client id "window-test", empty body) and decoded with kio."""
    client_id = b"window-test"
    body = struct.pack(">hhih", 18, 0, 1, len(client_id)) + client_id
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(struct.pack(">i", len(body)) + body)
        (size,) = struct.unpack(">i", recv_exact(s, 4))
        frame = recv_exact(s, size)
    cls = response_schema(18, 0)
    _hdr, n = entity_reader(cls.__header_schema__)(frame, 0)
    resp, _ = entity_reader(cls)(frame, n)
    assert int(resp.error_code) == 0, resp.error_code
    return {int(k.api_key): (int(k.min_version), int(k.max_version)) for k in resp.api_keys}
