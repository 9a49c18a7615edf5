"""KafkaLimits: typed, validated front-end limits, every default documented."""

from __future__ import annotations

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
    """asyncio stream buffer per connection (bounds memory of idle connections)."""
    max_fetch_wait_ms: int = 30_000
    """Upper bound applied to a Fetch request's max_wait."""

    def __post_init__(self) -> None:
        for name in (
            "max_frame_bytes",
            "max_connections",
            "max_inflight_requests",
            "max_pending_produce_bytes",
            "max_pending_produce_bytes_total",
            "read_buffer_bytes",
        ):
            if getattr(self, name) <= 0:
                raise ValueError(f"KafkaLimits.{name} must be positive")
        if self.max_frame_bytes < 64:
            raise ValueError("KafkaLimits.max_frame_bytes must be at least 64")
        if self.idle_timeout_s <= 0:
            raise ValueError("KafkaLimits.idle_timeout_s must be positive")
        if self.max_fetch_wait_ms < 0:
            raise ValueError("KafkaLimits.max_fetch_wait_ms must be >= 0")
