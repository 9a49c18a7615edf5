"""The one schema lookup: (api_key, version) -> the request / response dataclass.

kio's index (generated from Kafka 4.x) lacks the versions KIP-896 removed; the
hand-written ones in legacy_schemas fill them in. Every place that needs a schema
(the frame checker, the connection's readers, response building, the test
harnesses) goes through this module, so an old version is checked, parsed, built
and fuzzed exactly like a generated one.
"""

from __future__ import annotations

import functools

from kio.index import UnknownEntity, load_request_schema, load_response_schema

from sink.kafka.protocol.legacy_schemas import LEGACY, legacy_request, legacy_response

__all__ = ["LEGACY", "UnknownEntity", "request_schema", "response_schema"]


@functools.cache
def request_schema(api_key: int, version: int) -> type:
    """The request class of (api_key, version); raises kio's UnknownEntity (or
    UnknownAPIKey) when neither kio nor legacy_schemas knows it."""
    cls = legacy_request(api_key, version)
    return cls if cls is not None else load_request_schema(api_key, version)


@functools.cache
def response_schema(api_key: int, version: int) -> type:
    """The response class of (api_key, version); raises like request_schema."""
    cls = legacy_response(api_key, version)
    return cls if cls is not None else load_response_schema(api_key, version)
