"""What every handler gets: the service, the state machine and the limits."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from sink.kafka.limits import KafkaLimits

if TYPE_CHECKING:
    from sink.service import SinkService
    from sink.state import SinkStateMachine


@dataclass(slots=True)
class HandlerContext:
    service: SinkService
    limits: KafkaLimits

    @property
    def fsm(self) -> SinkStateMachine:
        return self.service.fsm
