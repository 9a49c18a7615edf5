"""What every handler gets: the service, the state machine, the limits, and
what this listener advertises."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from sink.kafka.limits import KafkaLimits

if TYPE_CHECKING:
    from sink.service import SinkService
    from sink.state import SinkStateMachine


@dataclass(frozen=True, slots=True)
class Advertised:
    """The cluster as one Kafka listener shows it to its clients."""

    brokers: dict[int, tuple[str, int]]
    """node id -> (host, port) clients of this listener connect to, every node."""
    forwarded_replies_usable: bool
    """A follower relays some requests to the leader's INTERNAL listener; its
    reply names internal addresses, so it is relayed as is only on a listener
    that advertises those same addresses (else answered from local state)."""


@dataclass(slots=True)
class HandlerContext:
    service: SinkService
    limits: KafkaLimits
    advertised: Advertised

    @property
    def fsm(self) -> SinkStateMachine:
        return self.service.fsm

    @property
    def brokers(self) -> dict[int, tuple[str, int]]:
        return self.advertised.brokers

    def leader_id(self) -> int:
        """Raft leader as a broker id of this listener, -1 if none is known."""
        lead = self.service.leader_id()
        return lead if lead in self.advertised.brokers else -1

    def leader_hint(self) -> int:
        """SinkService.leader_hint as a broker id of this listener (-1: none)."""
        hint = self.service.leader_hint()
        return hint if hint in self.advertised.brokers else -1

    def leader_endpoint(self) -> tuple[int, str, int] | None:
        """(id, host, port) of the leader as this listener's clients reach it."""
        lead = self.leader_id()
        if lead < 0:
            return None
        host, port = self.advertised.brokers[lead]
        return lead, host, port
