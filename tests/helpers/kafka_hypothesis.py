"""Hypothesis strategies for kio request classes, bounded so that no drawn
request can legitimately hold a node for long or make it allocate a lot:
`requests(cls)` is `st.from_type(cls)` (kio registers strategies for its
primitive types) with records drawn from valid and garbage batches, waits and
timeouts clamped to 0-100 ms, partition counts and replication factors to
-1..3, and acks=0 (which has no answer) turned into acks=-1.
"""

from __future__ import annotations

import dataclasses
import datetime
from typing import Any

from hypothesis import strategies as st
from kio.static.primitive import Records

from tests.helpers.kafka_schema import field_specs
from tests.unit.sink.batches import make_batch

st.register_type_strategy(
    Records,
    st.one_of(st.just(make_batch([b"h"])), st.binary(max_size=64)).map(Records),
)

_MAX_WAIT = datetime.timedelta(milliseconds=100)
_SMALL = {"num_partitions", "replication_factor"}


def bound(entity: Any) -> Any:
    """entity with every field that could hold or load a node clamped."""
    changes: dict[str, Any] = {}
    for spec in field_specs(type(entity)):
        v = getattr(entity, spec.name)
        if v is None:
            continue
        if spec.kind == "entity":
            changes[spec.name] = bound(v)
        elif spec.kind == "entity_array":
            changes[spec.name] = tuple(bound(x) for x in v)
        elif isinstance(v, datetime.timedelta):
            changes[spec.name] = min(max(v, datetime.timedelta(0)), _MAX_WAIT)
        elif spec.name in _SMALL and isinstance(v, int):
            changes[spec.name] = min(max(v, -1), 3)
        elif spec.name == "acks" and v == 0:
            changes[spec.name] = -1
    return dataclasses.replace(entity, **changes) if changes else entity


def requests(cls: type) -> st.SearchStrategy[Any]:
    return st.from_type(cls).map(bound)
