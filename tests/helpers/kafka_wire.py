"""Raw Kafka requests for tests that need one exact request to one exact node."""

from __future__ import annotations

import socket
import struct

from kio.schema.index import api_key_map
from kio.serial import entity_reader

from sink.kafka.protocol import response_schema
from sink.kafka.protocol.build import encode_request as build_request

API_NAMES: dict[int, str] = {
    key: "".join(part.title() for part in name.split("_")) for key, name in api_key_map.items()
}
"""API key -> Kafka's name of the API ("InitProducerId"), for every API kio knows."""


def encode_request(api_key: int, version: int, corr: int, values: dict) -> bytes:
    """The size-prefixed frame of one request (client id "t")."""
    body = build_request(api_key, version, corr, "t", values)
    return struct.pack(">i", len(body)) + body


def recv_exact(s: socket.socket, n: int) -> bytes:
    out = b""
    while len(out) < n:
        chunk = s.recv(n - len(out))
        if not chunk:
            raise ConnectionError("closed")
        out += chunk
    return out


def read_response(s: socket.socket, api_key: int, version: int):
    (size,) = struct.unpack(">i", recv_exact(s, 4))
    frame = recv_exact(s, size)
    cls = response_schema(api_key, version)
    hdr, n = entity_reader(cls.__header_schema__)(frame, 0)
    resp, _ = entity_reader(cls)(frame, n)
    return hdr, resp


def request(port: int, api_key: int, version: int, values: dict, corr: int = 1):
    """One request on a fresh connection to 127.0.0.1:port; returns the response body."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(encode_request(api_key, version, corr, values))
        _hdr, resp = read_response(s, api_key, version)
    return resp


def metadata_of(port: int, topic: str):
    """Metadata v8 for one topic (no auto-creation, no authorized operations) as the
    node at 127.0.0.1:port answers it: the response body."""
    return request(
        port,
        3,
        8,
        {
            "topics": [{"name": topic}],
            "allow_auto_topic_creation": False,
            "include_cluster_authorized_operations": False,
            "include_topic_authorized_operations": False,
        },
    )


def topic_ready_at(port: int, topic: str, partitions: int) -> bool:
    """True when the node at 127.0.0.1:port answers Metadata for topic with every partition
    led. A node learns a created topic when it applies the entry, which on a follower may be
    after CreateTopics answered (as on Kafka, where brokers learn metadata asynchronously): a
    client that treats UNKNOWN_TOPIC_OR_PARTITION as fatal (kcat -G) waits for this first."""
    try:
        md = metadata_of(port, topic)
    except OSError:
        return False
    return any(
        t.name == topic
        and t.error_code == 0
        and len(t.partitions) == partitions
        and all(p.error_code == 0 and p.leader_id >= 0 for p in t.partitions)
        for t in md.topics
    )
