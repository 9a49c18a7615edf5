"""KafkaLimits: typed, validated front-end limits, every default documented.

Memory and connection limits (issue 21) are explained, with how to size them, in
docs/operations.md ("Overload: memory and connections"); the budgets' accounting is
sink.kafka.budget, the connection admission sink.kafka.admission.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

MiB = 1 << 20


@dataclass(frozen=True, slots=True)
class KafkaLimits:
    max_frame_bytes: int = 16 * MiB
    """Largest request frame accepted. Checked against the 4-byte size prefix
    BEFORE the body is read or allocated; a larger frame closes the connection.
    (librdkafka's message.max.bytes defaults to 1 MB.)"""
    max_connections: int = 10_000
    """Open client connections; a connection beyond this is closed at accept."""
    idle_timeout_s: float = 600.0
    """A connection with no request in flight that sends nothing for this long
    is closed (Kafka's connections.max.idle.ms is 10 minutes). Also bounds how
    long a started frame may take to arrive."""
    max_inflight_requests: int = 500
    """Requests read from one connection whose responses are not yet written;
    the socket is not read beyond this (per-connection memory bound)."""
    max_pending_produce_bytes: int = 64 * MiB
    """Produce payload bytes of one connection waiting for commit; the socket is
    not read while above (back-pressure: librdkafka ignores throttle_time)."""
    max_pending_produce_bytes_total: int = 256 * MiB
    """As max_pending_produce_bytes, summed over all connections of the server."""
    read_buffer_bytes: int = 64 * 1024
    """The largest read between frames: the listener's one head buffer, shared by its
    connections (each copies what it read out at once, so an idle connection holds
    nothing; a granted frame's body is read into its own buffer)."""
    max_fetch_wait_ms: int = 30_000
    """Upper bound applied to a Fetch request's max_wait."""
    request_memory_bytes: int = 0
    """Node-wide budget of request bytes being read and queued (Kafka's
    queued.max.request.bytes): a frame's announced size is reserved when its size
    prefix is read, before its body is buffered, and released when its response is
    written; when used up the node stops reading sockets. 0: sized from the node's
    memory, 10% of min(MemTotal, cgroup memory.max), between 64 MiB and 1 GiB."""
    request_memory_small_frame_bytes: int = 1 * MiB
    """Frames up to this size are "small": they may use the budget's reserved slice
    (request_memory_small_reserve_bytes), so ordinary producers keep getting through
    while large frames hold the rest."""
    request_memory_small_reserve_bytes: int = 0
    """Part of request_memory_bytes only small frames may use; 0: an eighth of the
    budget, at least 4 small frames."""
    request_memory_per_connection_bytes: int = 0
    """Reserved request bytes one connection may hold; beyond it the connection is not
    read until its own responses release memory (its first frame is always allowed).
    0: a quarter of the budget."""
    frame_read_timeout_s: float = 60.0
    """A request frame whose size was read must arrive whole within this long, or the
    connection is closed (frees its memory reservation: a client trickling a large
    frame cannot hold the budget for ever)."""
    fetch_response_memory_bytes: int = 0
    """Node-wide budget of Fetch response bytes being built and queued for writing;
    when short, a Fetch's max_bytes (and partition_max_bytes) is clamped to what is
    left (at least one batch is still returned, KIP-74). 0: equal to the request
    memory budget."""
    max_connections_per_ip: int = 1_000
    """Open connections from one client address (Kafka's max.connections.per.ip);
    a connection beyond it is closed at accept."""
    max_connections_per_ip_overrides: str = ""
    """Per-address exceptions to max_connections_per_ip: `ADDR=COUNT,...` with IP
    addresses (Kafka's max.connections.per.ip.overrides), e.g. `10.0.0.7=5000`."""
    max_connection_creation_rate: float = 1_000.0
    """New connections accepted per second on one listener (KIP-612), a token bucket
    holding one second's worth; a connection beyond it is closed at accept."""

    def __post_init__(self) -> None:
        for name in (
            "max_frame_bytes",
            "max_connections",
            "max_inflight_requests",
            "max_pending_produce_bytes",
            "max_pending_produce_bytes_total",
            "read_buffer_bytes",
            "request_memory_small_frame_bytes",
            "max_connections_per_ip",
        ):
            if getattr(self, name) <= 0:
                raise ValueError(f"KafkaLimits.{name} must be positive")
        if self.max_frame_bytes < 64:
            raise ValueError("KafkaLimits.max_frame_bytes must be at least 64")
        if self.idle_timeout_s <= 0:
            raise ValueError("KafkaLimits.idle_timeout_s must be positive")
        if self.max_fetch_wait_ms < 0:
            raise ValueError("KafkaLimits.max_fetch_wait_ms must be >= 0")
        for name in (
            "request_memory_bytes",
            "request_memory_small_reserve_bytes",
            "request_memory_per_connection_bytes",
            "fetch_response_memory_bytes",
        ):
            if getattr(self, name) < 0:
                raise ValueError(f"KafkaLimits.{name} must be >= 0 (0: automatic)")
        if self.frame_read_timeout_s <= 0:
            raise ValueError("KafkaLimits.frame_read_timeout_s must be positive")
        if self.max_connection_creation_rate <= 0:
            raise ValueError("KafkaLimits.max_connection_creation_rate must be positive")
        self.per_ip_overrides()  # validates the syntax

    def per_ip_overrides(self) -> dict[str, int]:
        """max_connections_per_ip_overrides parsed: normalised address -> limit."""
        out: dict[str, int] = {}
        for item in filter(
            None, (p.strip() for p in self.max_connections_per_ip_overrides.split(","))
        ):
            addr, sep, count = item.partition("=")
            try:
                if not sep:
                    raise ValueError("missing =COUNT")
                ip = str(ipaddress.ip_address(addr.strip()))
                n = int(count)
                if n < 0:
                    raise ValueError("negative count")
            except ValueError as exc:
                raise ValueError(
                    "KafkaLimits.max_connections_per_ip_overrides: expected ADDR=COUNT,... "
                    f"with IP addresses, got {item!r} ({exc})"
                ) from None
            out[ip] = n
        return out
