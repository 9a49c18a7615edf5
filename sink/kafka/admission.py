"""Which new connections a Kafka listener accepts (pure: the clock is passed in).

Three limits, checked in this order at accept, each refusal closing the new socket
at once (before any request is read or buffer allocated):
- total: kafka.max_connections open connections on the listener;
- per client address: kafka.max_connections_per_ip (Kafka's max.connections.per.ip),
  with per-address overrides (max.connections.per.ip.overrides);
- creation rate: kafka.max_connection_creation_rate new connections per second on the
  listener (KIP-612's max.connection.creation.rate), a token bucket holding one
  second's worth, so a burst up to the rate is accepted and a storm is cut to the rate.
  Kafka delays the accept instead; closing is cheaper for a node whose event loop is
  its only thread, and every client reconnects with back-off.

Refusals are counted by reason (metrics) and logged once per LOG_INTERVAL_S with the
counts, not once per connection: a storm of 20,000 attempts is a handful of lines.
"""

from __future__ import annotations

import collections
import enum

from sink.kafka.limits import KafkaLimits

LOG_INTERVAL_S = 10.0
"""Refused connections are logged at most once per this interval (with their count)."""


class RefuseReason(enum.Enum):
    TOTAL = "max_connections"
    PER_IP = "max_connections_per_ip"
    RATE = "connection_creation_rate"


class TokenBucket:
    """rate tokens per second, holding at most burst (starts full)."""

    def __init__(self, rate: float, burst: float, now: float) -> None:
        self.rate = rate
        self.burst = burst
        self.tokens = burst
        self.at = now

    def take(self, now: float) -> bool:
        """One token if there is one (the clock never runs backwards here)."""
        if now > self.at:
            self.tokens = min(self.burst, self.tokens + (now - self.at) * self.rate)
            self.at = now
        if self.tokens >= 1.0:
            self.tokens -= 1.0
            return True
        return False


class Admission:
    """Counts open connections per address and decides on each new one.

    Invariant: per_ip[a] is the number of admitted, not yet released connections
    from a (entries at 0 are removed); total == sum(per_ip.values())."""

    def __init__(self, limits: KafkaLimits, now: float) -> None:
        self.max_total = limits.max_connections
        self.max_per_ip = limits.max_connections_per_ip
        self.overrides = limits.per_ip_overrides()
        rate = limits.max_connection_creation_rate
        self.bucket = TokenBucket(rate, max(rate, 1.0), now)
        self.per_ip: collections.Counter[str] = collections.Counter()
        self.total = 0
        self.refused: collections.Counter[RefuseReason] = collections.Counter()
        self._unlogged: collections.Counter[RefuseReason] = collections.Counter()
        self._last_log = float("-inf")

    def limit_for(self, addr: str) -> int:
        return self.overrides.get(addr, self.max_per_ip)

    def admit(self, addr: str, now: float) -> RefuseReason | None:
        """None: admitted (release(addr) when it closes); else why it is refused."""
        if self.total >= self.max_total:
            reason = RefuseReason.TOTAL
        elif self.per_ip[addr] >= self.limit_for(addr):
            reason = RefuseReason.PER_IP
        elif not self.bucket.take(now):
            reason = RefuseReason.RATE
        else:
            self.per_ip[addr] += 1
            self.total += 1
            return None
        self.refused[reason] += 1
        self._unlogged[reason] += 1
        return reason

    def release(self, addr: str) -> None:
        self.total -= 1
        self.per_ip[addr] -= 1
        if self.per_ip[addr] <= 0:
            del self.per_ip[addr]

    def log_due(self, now: float) -> str | None:
        """The refusal line to log now (None: nothing new, or logged too recently);
        the caller calls again at next_log_at() to flush what is left."""
        if not self._unlogged or now - self._last_log < LOG_INTERVAL_S:
            return None
        counts = ", ".join(f"{n} by {r.value}" for r, n in sorted(self._unlogged.items(), key=str))
        total = sum(self._unlogged.values())
        self._unlogged.clear()
        self._last_log = now
        return (
            f"refused {total} connection(s) since the last report ({counts}; "
            f"limits: max_connections={self.max_total}, max_connections_per_ip="
            f"{self.max_per_ip}, max_connection_creation_rate={self.bucket.rate:g}/s)"
        )

    def next_log_at(self) -> float | None:
        """When the pending refusals may be logged (None: none pending)."""
        return self._last_log + LOG_INTERVAL_S if self._unlogged else None
