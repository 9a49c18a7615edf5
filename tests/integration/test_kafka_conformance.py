"""Conformance harness: every API key and every version the nodes advertise in
ApiVersions, against a real 3-node cluster of `raftsink serve` processes.

No list of APIs here: the (API, version) pairs come from the server, so an API
joins by being advertised. Requests are generated from kio's request schemas
(tests/helpers/kafka_values.py): the valid request, seeded random requests
and hypothesis-drawn ones (tests/helpers/kafka_hypothesis.py),
the error paths Kafka defines (unknown topic, not leader / not coordinator /
not controller by asking a follower, invalid values, oversize frames,
unsupported versions) and unknown tagged fields in flexible versions. Every
answer is checked by tests/helpers/kafka_conformance.Checker (correlation id,
strict decode with nothing left over, error codes, connection still usable).
Requests go where a Kafka client sends them (kafka_conformance.Routes): partition
requests to the partition's leader by Metadata (once more after NOT_LEADER_OR_FOLLOWER
and a new Metadata), the rest to the controller; with partition groups
(RAFTSINK_CLUSTER_PARTITION_GROUPS=true) the two differ.

Each test collects every failing case and reports them together, so one run
lists every defect. RAFTSINK_CONFORMANCE_SEED sets the random requests' seed.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import random
import struct
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import hypothesis as hyp
import pytest
from hypothesis import strategies as st

from sink.kafka.protocol import request_schema
from tests.helpers.kafka_conformance import (
    CORRUPT_MESSAGE,
    INVALID_PARTITIONS,
    INVALID_REPLICATION_FACTOR,
    INVALID_REQUEST,
    INVALID_REQUIRED_ACKS,
    INVALID_TOPIC_EXCEPTION,
    NONE,
    OFFSET_OUT_OF_RANGE,
    TOPIC_ALREADY_EXISTS,
    UNKNOWN_TOPIC_ID,
    UNKNOWN_TOPIC_OR_PARTITION,
    UNSUPPORTED_VERSION,
    Checker,
    Expect,
    Routes,
    describe,
    raft_partition_leader,
)
from tests.helpers.kafka_harness import (
    MAX_FRAME,
    Harness,
    advertised,
    parse_api_versions_v0,
    running_cluster,
)
from tests.helpers.kafka_hypothesis import requests
from tests.helpers.kafka_schema import (
    encode_body,
    encode_header,
    encode_request,
    field_specs,
    frame,
    inject_tag,
    landmarks,
)
from tests.helpers.kafka_values import Context, random_request, valid_request
from tests.unit.sink.batches import make_batch

SEED = int(os.environ.get("RAFTSINK_CONFORMANCE_SEED", random.randrange(1 << 32)))
RANDOM_PER_VERSION = 6
HYPOTHESIS_EXAMPLES = 400
PHASES = [
    p for p in hyp.Phase if os.environ.get("RAFTSINK_HYPOTHESIS_SHRINK") or p != hyp.Phase.shrink
]


@pytest.fixture(scope="module")
def harness(tmp_path_factory) -> Iterator[Harness]:
    with running_cluster(str(tmp_path_factory.mktemp("conformance"))) as h:
        yield h


@pytest.fixture(scope="module")
def routes(harness: Harness) -> Routes:
    """Where requests go; the harness topic's leader settled (creation hand-off done)."""
    r = Routes(harness, harness.ctx.topic, harness.ctx.partition)
    r.settle()
    return r


@pytest.fixture()
def checker(harness: Harness, routes: Routes) -> Iterator[Checker]:
    if harness.restart_dead():
        routes.settle()
    routes.refresh()
    c = Checker(harness, routes)
    yield c
    c.close()


def versions(h: Harness) -> list[tuple[int, int]]:
    """Every (API key, version) the leader advertises."""
    return [
        (k, v)
        for k, (lo, hi) in sorted(advertised(h.port(h.leader)).items())
        for v in range(lo, hi + 1)
    ]


def schema(checker: Checker, api_key: int, version: int) -> type | None:
    try:
        return request_schema(api_key, version)
    except Exception as e:  # a missing schema is a finding
        checker.failures.append(
            f"{describe(api_key, version)}: advertised, no schema (kio or legacy_schemas) ({e!r})"
        )
        return None


def fresh_topic_ctx(h: Harness, tag: str) -> Context:
    """The harness context, but a topic name nobody has used (for CreateTopics)."""
    return dataclasses.replace(h.ctx, topic=f"t-{tag}-{uuid.uuid4().hex[:8]}")


# APIs that change or remove the topic they name (DeleteTopics, DeleteRecords,
# CreatePartitions): aimed at a topic nobody uses (and a fresh id), never at the shared one.
DESTRUCTIVE = (20, 21, 37)


def ctx_for(h: Harness, api_key: int, tag: str) -> Context:
    if api_key in DESTRUCTIVE:
        return dataclasses.replace(fresh_topic_ctx(h, tag), topic_id=uuid.uuid4())
    return fresh_topic_ctx(h, tag) if api_key == 19 else h.ctx


# ------------------------------------------------------------------ tests


def test_nodes_advertise_the_same_apis(harness: Harness) -> None:
    seen = {n: advertised(harness.port(n)) for n in harness.nodes}
    first = seen[harness.leader]
    assert 18 in first and first[18][0] == 0
    assert all(v == first for v in seen.values()), seen


def test_valid_request_every_version(harness: Harness, routes: Routes, checker: Checker) -> None:
    """The success path on the leader (of the partition for partition requests, else the
    controller); the same request on each other node gets the answer Kafka gives there
    (NOT_LEADER_OR_FOLLOWER, NOT_COORDINATOR, ...)."""
    for api_key, version in versions(harness):
        cls = schema(checker, api_key, version)
        if cls is None:
            continue
        what = f"{describe(api_key, version)} valid request"
        lead = routes.node_for(api_key)
        for node in [lead, *(n for n in harness.nodes if n != lead)]:
            req = valid_request(cls, ctx_for(harness, api_key, f"{node}-{version}"))
            if node == lead:  # where a client sends it (once more if the leader moved)
                checker.exchange_routed(
                    api_key,
                    version,
                    lambda corr, req=req: encode_request(req, corr),
                    what,
                    lambda n, k=api_key: routes.expect(k, n),
                )
                continue
            corr = checker.next_corr()
            checker.exchange(
                node,
                api_key,
                version,
                encode_request(req, corr),
                corr,
                what,
                routes.expect(api_key, node),
            )
    checker.assert_clean()


# Kafka's answer to a request naming a topic that does not exist (auto-creation off).
UNKNOWN_TOPIC: dict[int, Callable[[int], Expect]] = {
    0: lambda v: Expect.error(UNKNOWN_TOPIC_OR_PARTITION),
    1: lambda v: (
        Expect.error(UNKNOWN_TOPIC_ID) if v >= 13 else Expect.error(UNKNOWN_TOPIC_OR_PARTITION)
    ),
    2: lambda v: Expect.error(UNKNOWN_TOPIC_OR_PARTITION),
    3: lambda v: Expect.error(UNKNOWN_TOPIC_OR_PARTITION),
    8: lambda v: Expect.error(UNKNOWN_TOPIC_OR_PARTITION),
    9: lambda v: Expect.of(NONE, UNKNOWN_TOPIC_OR_PARTITION),  # Kafka: offset -1, no error
}


def _set_deep(entity: Any, name: str, value: Any) -> Any:
    """entity with every field called `name`, at any depth, set to value."""
    changes = {}
    for spec in field_specs(type(entity)):
        cur = getattr(entity, spec.name)
        if spec.name == name:
            changes[spec.name] = value
        elif spec.kind == "entity" and cur is not None:
            changes[spec.name] = _set_deep(cur, name, value)
        elif spec.kind == "entity_array" and cur:
            changes[spec.name] = tuple(_set_deep(x, name, value) for x in cur)
    return dataclasses.replace(entity, **changes)


def _has_field(cls: type, name: str) -> bool:
    for spec in field_specs(cls):
        if spec.name == name or (spec.nested is not None and _has_field(spec.nested, name)):
            return True
    return False


def _bad_crc(batch: bytes) -> bytes:
    return batch[:-1] + bytes([batch[-1] ^ 0xFF])


# Invalid values and what Kafka answers: (case, applies to (api, version), change, expect).
INVALID: list[tuple[str, int, Callable[[type], bool], Callable[[Any], Any], Expect]] = [
    (
        "acks=2",
        0,
        lambda cls: True,
        lambda r: dataclasses.replace(r, acks=2),
        Expect.error(INVALID_REQUIRED_ACKS),
    ),
    (
        "partition 7 of a 1-partition topic",
        0,
        lambda cls: True,
        lambda r: _set_deep(r, "index", 7),
        Expect.error(UNKNOWN_TOPIC_OR_PARTITION),
    ),
    (
        "batch with a bad CRC",
        0,
        lambda cls: True,
        lambda r: _set_deep(r, "records", _bad_crc(make_batch([b"x"]))),
        Expect.error(CORRUPT_MESSAGE),
    ),
    (
        "fetch_offset far above the high watermark",
        1,
        lambda cls: True,
        lambda r: _set_deep(r, "fetch_offset", 10**12),
        Expect.error(OFFSET_OUT_OF_RANGE),
    ),
    (
        "partition 7 of a 1-partition topic",
        1,
        lambda cls: True,
        lambda r: _set_deep(r, "partition", 7),
        Expect.error(UNKNOWN_TOPIC_OR_PARTITION),
    ),
    (
        "the zero topic id",  # kio reads the all-zero uuid as None
        1,
        lambda cls: cls.__version__ >= 13,
        lambda r: _set_deep(r, "topic_id", uuid.UUID(int=0)),
        Expect.error(UNKNOWN_TOPIC_ID),
    ),
    (
        "partition 7 of a 1-partition topic",
        2,
        lambda cls: True,
        lambda r: _set_deep(r, "partition_index", 7),
        Expect.error(UNKNOWN_TOPIC_OR_PARTITION),
    ),
    (
        "num_partitions=0",
        19,
        lambda cls: True,
        lambda r: _set_deep(r, "num_partitions", 0),
        Expect.error(INVALID_PARTITIONS),
    ),
    (
        "replication_factor=0",
        19,
        lambda cls: True,
        lambda r: _set_deep(r, "replication_factor", 0),
        Expect.error(INVALID_REPLICATION_FACTOR),
    ),
    (
        "topic name with a slash",
        19,
        lambda cls: True,
        lambda r: _set_deep(r, "name", "bad/name"),
        Expect.error(INVALID_TOPIC_EXCEPTION),
    ),
    (
        "topic that already exists",
        19,
        lambda cls: True,
        lambda r: _set_deep(r, "name", "harness"),
        Expect.error(TOPIC_ALREADY_EXISTS),
    ),
    (
        "key_type=7",
        10,
        lambda cls: _has_field(cls, "key_type"),
        lambda r: dataclasses.replace(r, key_type=7),
        Expect.error(INVALID_REQUEST),
    ),
]


def test_error_paths(harness: Harness, checker: Checker) -> None:
    """Unknown topics and invalid values, on the leader a client sends them to (the
    harness topic's partition leader for partition requests, else the controller;
    other nodes answer NOT_LEADER / NOT_COORDINATOR / NOT_CONTROLLER first, covered
    above)."""
    h = harness
    for api_key, version in versions(h):
        cls = schema(checker, api_key, version)
        if cls is None:
            continue
        name = describe(api_key, version)
        unknown = dataclasses.replace(h.ctx, topic="no-such-topic", topic_id=uuid.uuid4())
        if api_key != 19 and valid_request(cls, unknown) != valid_request(cls, h.ctx):
            exp = UNKNOWN_TOPIC[api_key](version) if api_key in UNKNOWN_TOPIC else None
            req = valid_request(cls, unknown)
            checker.exchange_routed(
                api_key,
                version,
                lambda corr, req=req: encode_request(req, corr),
                f"{name} unknown topic",
                lambda _node, exp=exp: exp,
            )
        for case, key, applies, change, exp in INVALID:
            if key != api_key or not applies(cls):
                continue
            req = change(valid_request(cls, ctx_for(h, api_key, f"inv-{version}")))
            checker.exchange_routed(
                api_key,
                version,
                lambda corr, req=req: encode_request(req, corr),
                f"{name} {case}",
                lambda _node, exp=exp: exp,
            )
    checker.assert_clean()


def test_random_requests(harness: Harness, checker: Checker) -> None:
    """Seeded random requests of every advertised version, drawn from the
    schema: any answer must be well formed and keep the connection."""
    print(f"RAFTSINK_CONFORMANCE_SEED={SEED}")
    rng = random.Random(SEED)
    for api_key, version in versions(harness):
        cls = schema(checker, api_key, version)
        if cls is None:
            continue
        for i in range(RANDOM_PER_VERSION):
            node = harness.nodes[i % len(harness.nodes)]
            ctx = harness.ctx
            if api_key in DESTRUCTIVE:  # a random DeleteTopics must not delete the shared topic
                ctx = ctx_for(harness, api_key, f"rnd-{version}-{i}")
            req = random_request(cls, rng, ctx)
            corr = rng.randrange(1 << 30)
            checker.exchange(
                node,
                api_key,
                version,
                encode_request(req, corr),
                corr,
                f"{describe(api_key, version)} random #{i} (seed {SEED}): {req!r}"[:600],
            )
    checker.assert_clean()


def _tagged_frame(cls: type, req: Any, api_key: int, version: int, where: str, corr: int) -> bytes:
    """req's frame with an unknown tag in the header, the body or a nested struct
    (callers check a nested struct exists)."""
    head = encode_header(api_key, version, corr)
    body = encode_body(req)
    if where == "header":
        hm = [m for m in landmarks(cls.__header_schema__, head) if m.kind == "tags"]
        head = inject_tag(head, hm[-1])
    else:
        bm = [m for m in landmarks(cls, body) if m.kind == "tags"]
        nested = [m for m in bm if m.path.count(".") > 1]
        body = inject_tag(body, nested[0] if where == "nested" else bm[-1])
    return frame(head + body)


def test_unknown_tagged_fields(harness: Harness, routes: Routes, checker: Checker) -> None:
    """KIP-482: an unknown tag in the header, in the body, and in a nested
    struct of every flexible version is skipped and the request answered."""
    h = harness
    for api_key, version in versions(h):
        cls = schema(checker, api_key, version)
        if cls is None or not cls.__flexible__:
            continue
        for where in ("header", "body", "nested"):
            req = valid_request(cls, ctx_for(h, api_key, f"tag-{version}"))
            if where == "nested":
                marks = landmarks(cls, encode_body(req))
                if not [m for m in marks if m.kind == "tags" and m.path.count(".") > 1]:
                    continue
            checker.exchange_routed(
                api_key,
                version,
                lambda corr, c=cls, r=req, k=api_key, v=version, w=where: _tagged_frame(
                    c, r, k, v, w, corr
                ),
                f"{describe(api_key, version)} unknown tag in the {where}",
                lambda n, k=api_key: routes.expect(k, n),
            )
    checker.assert_clean()


def test_unsupported_versions(harness: Harness, checker: Checker) -> None:
    """One past each advertised range, and keys not advertised: Kafka closes the
    connection (ApiVersions instead answers v0 with UNSUPPORTED_VERSION)."""
    h = harness
    adv = advertised(h.port(h.leader))
    cases = [(k, hi + 1) for k, (_lo, hi) in adv.items()]
    cases += [(k, lo - 1) for k, (lo, _hi) in adv.items() if lo > 0]
    cases += [(k, 0) for k in (11, 23, 60, 71, 1000) if k not in adv]
    for api_key, version in sorted(cases):
        corr = checker.next_corr()
        body = struct.pack(">hhih", api_key, version, corr, 1) + b"x"
        try:
            payload = encode_request(valid_request(request_schema(api_key, version), h.ctx), corr)
        except Exception:  # no schema at that version: send the header only
            payload = frame(body)
        what = f"{describe(api_key, version)} (not advertised)"
        if api_key == 18:
            c = checker.conn(h.leader)
            c.send(payload)
            got, err, keys = parse_api_versions_v0(c.recv_frame())
            if (got, err) != (corr, UNSUPPORTED_VERSION) or keys != adv:
                checker.fail(h.leader, what, f"answer {got}/{err}/{keys}")
            continue
        for node in h.nodes:
            checker.exchange(node, api_key, version, payload, corr, what, closes=True)
    checker.assert_clean()


def test_oversize_frame_closes(harness: Harness, checker: Checker) -> None:
    """A Produce frame past the node's frame limit: Kafka closes the connection;
    the node goes on serving."""
    h = harness
    _lo, hi = advertised(h.port(h.leader))[0]
    cls = request_schema(0, hi)
    big = make_batch([b"x" * (MAX_FRAME + 1024)])
    for node in h.nodes:
        corr = checker.next_corr()
        req = _set_deep(valid_request(cls, h.ctx), "records", big)
        checker.exchange(
            node, 0, hi, encode_request(req, corr), corr, "Produce oversize", closes=True
        )
    checker.assert_clean()


def test_hypothesis_requests(harness: Harness) -> None:
    """Requests drawn by hypothesis from every advertised version's schema
    (tests/helpers/kafka_hypothesis.py): each answer passes the generic checks.
    A failure shrinks to a small request; the seed is RAFTSINK_CONFORMANCE_SEED."""
    pairs = versions(harness)

    @hyp.seed(SEED)
    @hyp.settings(
        max_examples=HYPOTHESIS_EXAMPLES,
        deadline=None,
        database=None,
        suppress_health_check=list(hyp.HealthCheck),
        # Shrinking a failure replays hundreds of exchanges (minutes when each one
        # draws a traceback): off in CI, RAFTSINK_HYPOTHESIS_SHRINK=1 turns it on.
        phases=PHASES,
    )
    @hyp.given(data=st.data())
    def check(data: st.DataObject) -> None:
        api_key, version = data.draw(st.sampled_from(pairs), label="api, version")
        req = data.draw(requests(request_schema(api_key, version)), label="request")
        node = data.draw(st.sampled_from(harness.nodes), label="node")
        checker = Checker(harness)
        try:
            corr = data.draw(st.integers(0, (1 << 31) - 1), label="correlation id")
            checker.exchange(
                node, api_key, version, encode_request(req, corr), corr, describe(api_key, version)
            )
        finally:
            checker.close()
        checker.assert_clean(check_leader=False)  # generic checks only: roles do not matter

    print(f"RAFTSINK_CONFORMANCE_SEED={SEED}")
    check()


def test_metadata_and_leader_hints(harness: Harness, checker: Checker) -> None:
    """Metadata of every version on every node names all brokers, itself as controller
    (it relays controller requests, KIP-590) and the partition's leader as its leader (with partition groups the
    replica its data group's Raft state says leads, read from the nodes' Status, not
    from Metadata; with one group the Raft leader), and (v10+) one stable non-zero
    topic id; Produce v10+ on a node not leading the partition carries the KIP-951
    leader hints naming that leader."""
    h = harness
    ids: set[uuid.UUID] = set()
    leader = asyncio.run(raft_partition_leader(h, h.ctx.topic, h.ctx.partition))
    assert leader in h.cluster.nodes, f"no Raft leader of {h.ctx.topic}/{h.ctx.partition}"
    for api_key, version in versions(h):
        if api_key not in (0, 3):
            continue
        cls = request_schema(api_key, version)
        for node in h.nodes:
            if api_key == 0 and (version < 10 or node == leader):
                continue
            corr = checker.next_corr()
            what = f"{describe(api_key, version)} hints"
            body = checker.exchange(
                node, api_key, version, encode_request(valid_request(cls, h.ctx), corr), corr, what
            )
            if body is None:
                continue
            if api_key == 0:
                part = body.responses[0].partition_responses[0]
                if part.current_leader.leader_id != leader or not body.node_endpoints:
                    checker.fail(
                        node, what, f"no KIP-951 leader hint: {part}, {body.node_endpoints}"
                    )
                continue
            brokers = {b.node_id for b in body.brokers}
            if brokers != set(h.cluster.nodes):
                checker.fail(node, what, f"brokers {sorted(brokers)}")
            # controller_id: the answering node, which relays controller requests (KIP-590)
            if version >= 1 and body.controller_id != node:
                checker.fail(node, what, f"controller_id {body.controller_id}, not itself")
            topic = body.topics[0]
            if topic.partitions[0].leader_id != leader:
                checker.fail(
                    node,
                    what,
                    f"partition leader {topic.partitions[0].leader_id}, Raft says {leader}",
                )
            if version >= 10:
                ids.add(topic.topic_id)
    if ids and (len(ids) != 1 or uuid.UUID(int=0) in ids):
        checker.failures.append(f"Metadata v10+: topic ids of one topic {sorted(map(str, ids))}")
    checker.assert_clean()
