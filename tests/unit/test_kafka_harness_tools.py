"""The harness's own tools (tests/helpers/kafka_schema, kafka_values,
kafka_mutate) checked against kio, so that a conformance or fuzz finding is the
server's and not the harness's: the bounds walk agrees with kio's reader on
every schema kio knows, refuses every truncation and every huge length without
allocating, and the tag injection and mutants are reproducible."""

from __future__ import annotations

import random

import pytest
from kio.serial import entity_reader

from sink.kafka.protocol import request_schema, response_schema
from tests.helpers.kafka_mutate import HUGE_UVARINTS, build_corpus, mutate
from tests.helpers.kafka_schema import (
    WireError,
    encode_body,
    encode_request,
    header_length,
    inject_tag,
    landmarks,
    strict_decode,
    walk,
)
from tests.helpers.kafka_values import Context, random_request, valid_request

SEED = random.randrange(1 << 32)


def all_schemas(loader) -> list[type]:
    out = []
    for api_key in range(100):
        for version in range(20):
            try:
                out.append(loader(api_key, version))
            except Exception:  # kio has no schema for this pair
                continue
    return out


REQUESTS = all_schemas(request_schema)
RESPONSES = all_schemas(response_schema)


def test_walk_agrees_with_kio_on_every_request_schema() -> None:
    print(f"seed {SEED}")
    rng = random.Random(SEED)
    assert len(REQUESTS) > 200
    for cls in REQUESTS:
        for req in (valid_request(cls, Context()), random_request(cls, rng, Context())):
            payload = encode_request(req, 7)[4:]
            start = header_length(cls.__api_key__, cls.__version__, payload)
            value, used = entity_reader(cls)(payload, start)
            assert walk(cls, payload, start) == start + used == len(payload), cls
            assert value == strict_decode(cls, payload, start)


def test_walk_agrees_with_kio_on_every_response_schema() -> None:
    """Responses drawn by the same random generator (schema-valid values)."""
    rng = random.Random(SEED)
    for cls in RESPONSES:
        body = encode_body(random_request(cls, rng, Context()))
        _value, used = entity_reader(cls)(body, 0)
        assert walk(cls, body) == used == len(body), cls


@pytest.mark.parametrize("api_key, version", [(0, 9), (1, 12), (3, 12), (19, 7), (8, 2)])
def test_walk_refuses_every_truncation_and_huge_length(api_key: int, version: int) -> None:
    cls = request_schema(api_key, version)
    payload = encode_request(valid_request(cls, Context()), 7)[4:]
    start = header_length(api_key, version, payload)
    for cut in range(start, len(payload)):
        with pytest.raises(WireError):
            walk(cls, payload[:cut], start)
    for m in landmarks(cls, payload, start):
        if m.kind == "uvarint":
            for huge in HUGE_UVARINTS:
                bad = payload[: m.pos] + huge + payload[m.pos + m.width :]
                with pytest.raises(WireError):
                    walk(cls, bad, start)


def test_injected_unknown_tag_is_skipped_by_the_walk_and_refused_by_kio() -> None:
    """kio's reader refuses unknown tags (KeyError): the injected tag is really there."""
    cls = request_schema(3, 12)
    body = encode_body(valid_request(cls, Context()))
    for m in [m for m in landmarks(cls, body) if m.kind == "tags"]:
        tagged = inject_tag(body, m)
        assert walk(cls, tagged) == len(tagged) == len(body) + 6  # tag 1000: 2 bytes, size, 3 bytes
        with pytest.raises(KeyError):
            entity_reader(cls)(tagged, 0)


def test_mutants_are_reproducible_from_seed_and_index() -> None:
    adv = {0: (3, 10), 1: (4, 12), 3: (0, 12), 18: (0, 4)}
    corpus = build_corpus(adv, Context(), 5)
    again = build_corpus(adv, Context(), 5)
    a = [mutate(corpus, adv, 5, i) for i in range(300)]
    b = [mutate(again, adv, 5, i) for i in reversed(range(300))][::-1]
    assert a == b
    assert len({m.kind for m in a}) >= 10
    assert len({m.wire for m in a}) > 250
