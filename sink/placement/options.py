"""BalancerOptions: the leader balancer's settings, validated at construction.

Defaults follow Redpanda's leader balancer (enable_leader_balancer = true,
leader_balancer_mute_timeout = 5 min) and the partition-groups notes (b6: every 10 s, a
replica live and caught up for 30 s, at most 4 transfers in flight). The `cluster`
configuration section (sink.config, `cluster.leader_balance*`) exposes each of them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

DEFAULT_ENABLED = True
DEFAULT_INTERVAL_S = 10.0
DEFAULT_RETURN_DELAY_S = 30.0
DEFAULT_MAX_IN_FLIGHT = 4
DEFAULT_MUTE_S = 300.0
DEFAULT_TRANSFER_TIMEOUT_S = 10.0


@dataclass(frozen=True, slots=True)
class BalancerOptions:
    enabled: bool = DEFAULT_ENABLED
    """Off: plan() starts no transfer (it still tracks those in flight)."""
    interval_s: float = DEFAULT_INTERVAL_S
    """How often the driver calls plan() (with jitter); the planner itself only sees `now`."""
    return_delay_s: float = DEFAULT_RETURN_DELAY_S
    """A replica must have been live and caught up this long before leadership moves
    to it (back to a restarted node only once it has proved itself)."""
    max_in_flight: int = DEFAULT_MAX_IN_FLIGHT
    """At most this many transfers outstanding at once (per balancer instance)."""
    mute_s: float = DEFAULT_MUTE_S
    """A group whose transfer failed or timed out gets no transfer for this long."""
    transfer_timeout_s: float = DEFAULT_TRANSFER_TIMEOUT_S
    """A transfer whose target is not leader after this long counts as failed."""

    def __post_init__(self) -> None:
        if not isinstance(self.enabled, bool):
            raise ValueError(f"BalancerOptions.enabled must be a bool, got {self.enabled!r}")
        for name, minimum, strict in (
            ("interval_s", 0.0, True),
            ("return_delay_s", 0.0, False),
            ("mute_s", 0.0, False),
            ("transfer_timeout_s", 0.0, True),
        ):
            value = getattr(self, name)
            if not math.isfinite(value) or value < minimum or (strict and value == minimum):
                bound = "> 0" if strict else ">= 0"
                raise ValueError(f"BalancerOptions.{name} must be {bound}, got {value!r}")
        if isinstance(self.max_in_flight, bool) or self.max_in_flight < 1:
            raise ValueError(
                f"BalancerOptions.max_in_flight must be >= 1, got {self.max_in_flight!r}"
            )
