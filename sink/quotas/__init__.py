"""Client quotas (Kafka KIP-13 / KIP-124 / KIP-546 semantics), pure: no I/O, no asyncio.

Public surface:
    QuotaTable, Entity, Alteration, Op   the replicated configuration (entity -> key -> value)
    entity_of, alteration_of, QuotaError validation of what clients send
    ClientQuotaManager, QuotaChannel     per-node rates, throttle times, muting deadlines
    QuotaOptions                         the `quotas` configuration section
    SampledRate, throttle_time_ms        Kafka's sampled rate and throttle maths
    NO_QUOTAS                            a manager that never throttles (empty table)

Imports nothing of sink: the state machine (sink.state), the Kafka handlers and the
CLI all depend on it, never the reverse.
"""

from sink.quotas.entities import (
    ANONYMOUS,
    CLIENT_ID,
    CONSUMER_BYTE_RATE,
    ENTITY_TYPES,
    PRODUCER_BYTE_RATE,
    QUOTA_KEYS,
    REQUEST_PERCENTAGE,
    USER,
    Alteration,
    Entity,
    Op,
    QuotaError,
    QuotaTable,
    Resolved,
    alteration_of,
    entity_of,
    entity_text,
)
from sink.quotas.manager import (
    NO_QUOTAS,
    OTHER_CLIENTS,
    ClientQuotaManager,
    QuotaChannel,
    QuotaOptions,
)
from sink.quotas.rate import SampledRate, bounded_throttle_time_ms, throttle_time_ms

__all__ = [
    "ANONYMOUS",
    "CLIENT_ID",
    "CONSUMER_BYTE_RATE",
    "ENTITY_TYPES",
    "NO_QUOTAS",
    "OTHER_CLIENTS",
    "PRODUCER_BYTE_RATE",
    "QUOTA_KEYS",
    "REQUEST_PERCENTAGE",
    "USER",
    "Alteration",
    "ClientQuotaManager",
    "Entity",
    "Op",
    "QuotaChannel",
    "QuotaError",
    "QuotaOptions",
    "QuotaTable",
    "Resolved",
    "SampledRate",
    "alteration_of",
    "bounded_throttle_time_ms",
    "entity_of",
    "entity_text",
    "throttle_time_ms",
]
