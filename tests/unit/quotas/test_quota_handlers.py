"""DescribeClientQuotas / AlterClientQuotas handlers against an in-memory node (real
state machine), the ALTER_QUOTAS command's encoding and snapshots, and the throttle
time Produce/Fetch responses carry."""

from __future__ import annotations

import asyncio
import struct

import pytest
from kio.index import load_response_schema
from kio.serial import entity_reader

from sink.kafka.handlers import REGISTRY, Call
from sink.quotas import (
    ClientQuotaManager,
    QuotaChannel,
    QuotaError,
    QuotaOptions,
    alteration_of,
    entity_of,
)
from sink.state import SinkStateMachine, quota_command
from tests.unit.sink.batches import make_batch
from tests.unit.sink.memory_services import MemoryNode
from tests.unit.sink.requests import encode, request_values
from tests.unit.sink.test_handlers import call, produce_values


def _alter(node: MemoryNode, entries: list, validate_only: bool = False, version: int = 1):
    values = {
        "entries": [
            {
                "entity": [{"entity_type": t, "entity_name": n} for t, n in entity],
                "ops": [{"key": k, "value": v, "remove": r} for k, v, r in ops],
            }
            for entity, ops in entries
        ],
        "validate_only": validate_only,
    }
    return [(int(e.error_code), e.error_message) for e in call(node, 49, version, values).entries]


def _describe(node: MemoryNode, components: list, strict: bool = False, version: int = 1):
    values = {
        "components": [{"entity_type": t, "match_type": m, "match": n} for t, m, n in components],
        "strict": strict,
    }
    return call(node, 48, version, values)


@pytest.mark.parametrize("version", [0, 1])
def test_alter_then_describe(version: int) -> None:
    node = MemoryNode()
    got = _alter(
        node,
        [
            ([("client-id", "a")], [("producer_byte_rate", 1000.0, False)]),
            ([("client-id", "b")], [("bogus", 1.0, False)]),
            ([("user", None), ("client-id", None)], [("request_percentage", 25.0, False)]),
        ],
        version=version,
    )
    assert got[0] == (0, None) and got[2] == (0, None)
    assert got[1][0] == 42 and "unknown quota key 'bogus'" in got[1][1]
    r = _describe(node, [], version=version)
    assert int(r.error_code) == 0
    found = {
        tuple((e.entity_type, e.entity_name) for e in entry.entity): {
            v.key: v.value for v in entry.values
        }
        for entry in r.entries
    }
    assert found == {
        (("client-id", "a"),): {"producer_byte_rate": 1000.0},
        (("client-id", None), ("user", None)): {"request_percentage": 25.0},
    }
    r = _describe(node, [("client-id", 7, None)], version=version)
    assert int(r.error_code) == 42 and "unknown match type" in r.error_message


def test_validate_only_and_follower() -> None:
    node = MemoryNode()
    entry = ([("client-id", "a")], [("consumer_byte_rate", 10.0, False)])
    assert _alter(node, [entry], validate_only=True) == [(0, None)]
    assert not node.fsm.quotas
    follower = MemoryNode(node_id=2, leader_id=1)
    assert _alter(follower, [entry])[0][0] == 41  # NOT_CONTROLLER
    assert _alter(node, [([("ip", None)], [("consumer_byte_rate", 1.0, False)])])[0][0] == 42


def test_command_round_trip_snapshot_and_unreadable_entry() -> None:
    alts = [
        alteration_of(
            entity_of([("user", "u"), ("client-id", None)]),
            [("producer_byte_rate", 5.0, False), ("request_percentage", 0.0, True)],
        )
    ]
    data = quota_command.encode_alter_quotas(alts)
    assert quota_command.decode_alter_quotas(data) == alts
    with pytest.raises((ValueError, struct.error, QuotaError)):
        quota_command.decode_alter_quotas(data[:-3])
    node = MemoryNode()
    assert int(node.apply(data)) == 0
    assert int(node.apply(data[:-3])) == 42  # INVALID_REQUEST result; the node lives on
    copy = SinkStateMachine()
    copy.on_snapshot_load(node.fsm.on_snapshot_save())
    assert copy.quotas.quotas == node.fsm.quotas.quotas


class _Clock:
    t = 100.0

    def __call__(self) -> float:
        return self.t


def _throttled_call(
    node: MemoryNode, mgr: ClientQuotaManager, api_key: int, version: int, values: dict, ch
):
    frame = encode(api_key, version, values, corr=9)
    from kio.index import load_request_schema

    cls = load_request_schema(api_key, version)
    _h, n = entity_reader(cls.__header_schema__)(frame, 0)
    req = entity_reader(cls)(frame, n)[0]
    ctx = node.context()
    ctx.quotas = mgr

    async def run():
        fut = await REGISTRY[api_key].handle(ctx, Call(version, 9, req, frame, ch))
        return await fut

    data = asyncio.run(run())
    raw = b"".join(bytes(p) for p in data) if isinstance(data, list) else data
    rcls = load_response_schema(api_key, version)
    _hdr, n = entity_reader(rcls.__header_schema__)(raw, 0)
    return entity_reader(rcls)(raw, n)[0], ctx


def test_produce_and_fetch_carry_throttle_time_and_mute() -> None:
    node = MemoryNode()
    _alter(
        node,
        [
            ([("client-id", "p")], [("producer_byte_rate", 10.0, False)]),
            ([("client-id", "p")], [("consumer_byte_rate", 10.0, False)]),
        ],
    )
    clock = _Clock()
    mgr = ClientQuotaManager(lambda: node.fsm.quotas, QuotaOptions(), clock)
    ch = QuotaChannel(clock)
    ch.client_id = "p"
    values = produce_values(make_batch([b"x" * 500]))
    resp, _ = _throttled_call(node, mgr, 0, 9, values, ch)
    assert int(resp.responses[0].partition_responses[0].error_code) == 0
    ms = resp.throttle_time.total_seconds() * 1000
    assert ms > 0 and ch.muted_for() == pytest.approx(ms / 1000)
    # Fetch: the response that goes over carries data and the throttle time; one asked
    # while already over (another connection of the client) is empty, as Kafka's.
    fetch_values = request_values(1) | {"max_wait": 0}
    resp, _ = _throttled_call(node, mgr, 1, 12, fetch_values, ch)
    assert resp.throttle_time.total_seconds() > 0 and resp.responses[0].partitions[0].records
    resp, _ = _throttled_call(node, mgr, 1, 12, fetch_values, ch)
    assert resp.throttle_time.total_seconds() > 0 and resp.responses == ()
    # Unthrottled client: no throttle time, data served.
    free = QuotaChannel(clock)
    free.client_id = "other"
    resp, _ = _throttled_call(node, mgr, 1, 12, fetch_values, free)
    assert resp.throttle_time.total_seconds() == 0 and resp.responses
