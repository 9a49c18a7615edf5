"""Every served (API, version) can answer any request with an error in its own shape,
and response building refuses a missing required field."""

from __future__ import annotations

import dataclasses

import pytest
from kio.schema.errors import ErrorCode
from kio.serial import entity_reader

from sink.kafka.handlers import REGISTRY, SUPPORTED
from sink.kafka.protocol import request_schema, response_schema
from sink.kafka.protocol.build import BuildError, build, encode_response
from tests.unit.sink.requests import valid_request

SERVED = [(k, v) for k, (lo, hi) in sorted(SUPPORTED.items()) for v in range(lo, hi + 1)]


def parse_request(api_key: int, version: int):
    frame = valid_request(api_key, version)
    cls = request_schema(api_key, version)
    _hdr, n = entity_reader(cls.__header_schema__)(frame, 0)
    return entity_reader(cls)(frame, n)[0]


def decode_strictly(api_key: int, version: int, data) -> tuple[int, object]:
    raw = b"".join(bytes(p) for p in data) if isinstance(data, list) else data
    cls = response_schema(api_key, version)
    hdr, n = entity_reader(cls.__header_schema__)(raw, 0)
    body, m = entity_reader(cls)(raw, n)
    assert n + m == len(raw), "bytes left over after the response"
    return hdr.correlation_id, body


def error_codes(entity) -> list[int]:
    """Every error_code anywhere in a decoded response."""
    out = []
    for name in getattr(entity, "__dataclass_fields__", {}):
        v = getattr(entity, name)
        if name == "error_code":
            out.append(int(v))
        elif isinstance(v, tuple):
            for x in v:
                out += error_codes(x)
        elif hasattr(v, "__dataclass_fields__"):
            out += error_codes(v)
    return out


@pytest.mark.parametrize("api_key, version", SERVED)
def test_error_response_mirrors_the_request(api_key, version):
    req = parse_request(api_key, version)
    data = REGISTRY[api_key].error_response(version, 41, req, ErrorCode.unknown_server_error)
    corr, body = decode_strictly(api_key, version, data)
    assert corr == 41
    codes = error_codes(body)
    assert codes and set(codes) == {-1}, codes
    if api_key == 1:  # Fetch: every partition asked for is answered
        assert sum(len(t.partitions) for t in body.responses) == 4


@pytest.mark.parametrize("api_key, version", SERVED)
def test_error_response_without_a_request(api_key, version):
    """No request (it could not be read): an answer only where the version has a
    top-level error code; None otherwise (the connection is closed instead)."""
    data = REGISTRY[api_key].error_response(version, 5, None, ErrorCode.invalid_request)
    if data is None:
        return
    corr, body = decode_strictly(api_key, version, data)
    assert corr == 5 and int(body.error_code) == 42


def test_produce_acks_0_gets_no_error_answer():
    req = parse_request(0, 9)
    acks0 = dataclasses.replace(req, acks=0)
    assert REGISTRY[0].error_response(9, 1, acks0, -1) is None


def test_build_refuses_a_missing_required_field():
    cls = response_schema(19, 7)  # CreateTopics v7: topic_id is required
    topic = {
        "name": "t",
        "error_code": 41,
        "error_message": None,
        "num_partitions": 1,
        "replication_factor": 1,
        "configs": [],
    }
    with pytest.raises(BuildError, match="topic_id"):
        build(cls, {"throttle_time": 0, "topics": [topic]})
    with pytest.raises(BuildError, match="throttle_time"):
        encode_response(22, 4, 1, {"error_code": 0, "producer_id": 1, "producer_epoch": 0})
    # the same dict without topic_id builds for v6, which has no such field
    build(response_schema(19, 6), {"throttle_time": 0, "topics": [topic]})
