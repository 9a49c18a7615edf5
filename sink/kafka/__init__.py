"""The Kafka protocol front end.

Public surface:
    KafkaServer     asyncio listener serving one SinkService
    KafkaLimits     typed, validated limits (frame size, connections, idle timeout, back-pressure)
    SUPPORTED       API key -> (min, max) versions served and advertised

Attributes load lazily so that sink.kafka.protocol can be imported by
sink.state and sink.service without importing the server (no import cycle).
"""

from __future__ import annotations

from typing import Any

__all__ = ["SUPPORTED", "KafkaLimits", "KafkaServer"]


def __getattr__(name: str) -> Any:
    if name == "KafkaServer":
        from sink.kafka.server import KafkaServer

        return KafkaServer
    if name == "KafkaLimits":
        from sink.kafka.limits import KafkaLimits

        return KafkaLimits
    if name == "SUPPORTED":
        from sink.kafka.handlers import SUPPORTED

        return SUPPORTED
    raise AttributeError(name)
