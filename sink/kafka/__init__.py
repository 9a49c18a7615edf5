"""The Kafka protocol front end.

Public surface:
    KafkaServer     asyncio listener serving one node (its SinkService)
    KafkaLimits     typed, validated limits (frame size, connections, idle timeout, back-pressure)
    SUPPORTED       API key -> (min, max) versions served and advertised
    NodeMemory      the node's request and Fetch response memory budgets, shared by its
                    listeners (budget.py; connection admission is admission.py)

Layout: protocol/ is the sans-I/O leaf (framing and the connection state machine,
the frame checker, record batches, encoders, response building, error codes; it
imports nothing of the server, so sink.state may import it); handlers/ holds one
module per API behind small service interfaces; connection.py (with its parts,
conn_*.py) and server.py are the asyncio drivers. sink.kafka imports nothing of
sink.state or sink.service.
"""

from __future__ import annotations

from sink.kafka.budget import NodeMemory
from sink.kafka.handlers import SUPPORTED
from sink.kafka.limits import KafkaLimits
from sink.kafka.server import KafkaServer

__all__ = ["SUPPORTED", "KafkaLimits", "KafkaServer", "NodeMemory"]
