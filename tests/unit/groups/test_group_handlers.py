"""The group APIs through their handlers against a real in-memory node
(tests/unit/sink/memory_services.py): requests encoded with kio for each version,
responses decoded strictly with the version's schema. One event loop per test, so
the coordinator's timer runs between requests."""

from __future__ import annotations

import asyncio
import uuid

from kio.schema.errors import ErrorCode
from kio.serial import entity_reader

from sink.groups import GroupOptions, GroupRuntime
from sink.kafka.handlers import REGISTRY, Call
from sink.kafka.protocol import request_schema, response_schema
from sink.state import commands
from tests.unit.sink.memory_services import MemoryNode
from tests.unit.sink.requests import SUBSCRIPTION, encode, request_values

JOIN, HEARTBEAT, LEAVE, SYNC, DESCRIBE, LIST, DELETE, FIND = 11, 12, 13, 14, 15, 16, 42, 10
COMMIT = 8


async def call(node: MemoryNode, api_key: int, version: int, values: dict | None = None):
    values = request_values(api_key) | (values or {})
    frame = encode(api_key, version, values, corr=9)
    cls = request_schema(api_key, version)
    _h, n = entity_reader(cls.__header_schema__)(frame, 0)
    req = entity_reader(cls)(frame, n)[0]
    fut = await REGISTRY[api_key].handle(
        node.context(), Call(version, 9, req, frame, None, 0, "/h")
    )
    raw = await asyncio.wait_for(fut, 30)
    rcls = response_schema(api_key, version)
    hdr, n = entity_reader(rcls.__header_schema__)(raw, 0)
    body, m = entity_reader(rcls)(raw, n)
    assert hdr.correlation_id == 9 and n + m == len(raw)
    return body


async def join(node, version: int, member: str = "", **kw):
    return await call(node, JOIN, version, {"member_id": member} | kw)


async def joined(node, version: int, **kw):
    """A full join in the version's style (two steps from v4)."""
    r = await join(node, version, **kw)
    if version >= 4 and not kw.get("group_instance_id"):
        assert r.error_code == ErrorCode.member_id_required and r.member_id
        r = await join(node, version, r.member_id, **kw)
    return r


def test_every_version_joins_syncs_heartbeats_and_leaves():
    async def run():
        for jv in range(10):
            node = MemoryNode()
            r = await joined(node, jv, group_id=f"g{jv}")
            assert (r.error_code, r.generation_id, r.leader) == (ErrorCode.none, 1, r.member_id)
            assert [m.metadata for m in r.members] == [SUBSCRIPTION]
            mid = r.member_id
            for sv in range(6):
                s = await call(
                    node,
                    SYNC,
                    sv,
                    {
                        "group_id": f"g{jv}",
                        "generation_id": 1,
                        "member_id": mid,
                        "assignments": [{"member_id": mid, "assignment": b"A"}],
                    },
                )
                assert (s.error_code, s.assignment) == (ErrorCode.none, b"A")
            for hv in range(5):
                h = await call(
                    node,
                    HEARTBEAT,
                    hv,
                    {"group_id": f"g{jv}", "generation_id": 1, "member_id": mid},
                )
                assert h.error_code == ErrorCode.none
            lv = min(jv, 5)
            lr = await call(
                node,
                LEAVE,
                lv,
                {
                    "group_id": f"g{jv}",
                    "member_id": mid,
                    "members": [{"member_id": mid, "group_instance_id": None, "reason": None}],
                },
            )
            assert lr.error_code == ErrorCode.none
            if lv >= 3:
                assert [int(m.error_code) for m in lr.members] == [0]

    asyncio.run(run())


def test_describe_list_delete_all_versions():
    async def run():
        node = MemoryNode()
        r = await joined(node, 9)
        mid = r.member_id
        await call(
            node,
            SYNC,
            5,
            {"member_id": mid, "assignments": [{"member_id": mid, "assignment": b"A"}]},
        )
        for v in range(6):
            d = await call(node, DESCRIBE, v, {"groups": ["g", "nope"]})
            g, nope = d.groups
            assert (g.group_state, g.protocol_type, g.protocol_data) == (
                "Stable",
                "consumer",
                "range",
            )
            assert [(m.member_id, m.client_host, m.member_assignment) for m in g.members] == [
                (mid, "/h", b"A")
            ]
            assert nope.group_state == "Dead" and nope.error_code == ErrorCode.none
        for v in range(6):
            lg = await call(node, LIST, v)
            assert [(x.group_id, x.protocol_type) for x in lg.groups] == [("g", "consumer")]
        assert (await call(node, LIST, 4, {"states_filter": ["Empty"]})).groups == ()
        for v in range(3):
            dr = await call(node, DELETE, v, {"groups_names": ["g", "nope"]})
            assert [(x.group_id, int(x.error_code)) for x in dr.results] == [
                ("g", ErrorCode.non_empty_group),
                ("nope", ErrorCode.group_id_not_found),
            ]
        await call(node, LEAVE, 0, {"member_id": mid})
        dr = await call(node, DELETE, 2, {"groups_names": ["g"]})
        assert dr.results[0].error_code == ErrorCode.none
        assert "g" not in node.fsm.groups.groups

    asyncio.run(run())


def test_bad_input_answers():
    async def run():
        node = MemoryNode()
        r = await join(node, 5, "ghost")
        assert r.error_code == ErrorCode.unknown_member_id
        r = await join(node, 5, group_id="")
        assert r.error_code == ErrorCode.invalid_group_id
        r = await join(node, 5, session_timeout=1)
        assert r.error_code == ErrorCode.invalid_session_timeout
        big = [{"name": "range", "metadata": b"x" * ((1 << 20) + 1)}]
        r = await join(node, 5, protocols=big)
        assert r.error_code == ErrorCode.invalid_request
        r = await joined(node, 5)
        r2 = await join(node, 5, protocols=[{"name": "other", "metadata": b""}])
        assert r2.error_code == ErrorCode.inconsistent_group_protocol
        h = await call(node, HEARTBEAT, 3, {"generation_id": 5, "member_id": r.member_id})
        assert h.error_code == ErrorCode.illegal_generation
        h = await call(node, HEARTBEAT, 3, {"group_id": "nope", "member_id": r.member_id})
        assert h.error_code == ErrorCode.unknown_member_id
        s = await call(node, SYNC, 3, {"generation_id": 1, "member_id": "ghost"})
        assert s.error_code == ErrorCode.unknown_member_id
        s = await call(
            node, SYNC, 5, {"generation_id": 1, "member_id": r.member_id, "protocol_name": "x"}
        )
        assert s.error_code == ErrorCode.inconsistent_group_protocol

    asyncio.run(run())


def test_not_coordinator_and_loading():
    async def run():
        node = MemoryNode(leader_id=2)
        assert (await joined(node, 3)).error_code == ErrorCode.not_coordinator
        assert (await call(node, HEARTBEAT, 4)).error_code == ErrorCode.not_coordinator
        d = await call(node, DESCRIBE, 5)
        assert d.groups[0].error_code == ErrorCode.not_coordinator
        lg = await call(node, LIST, 4)
        assert (lg.error_code, lg.groups) == (ErrorCode.none, ())  # a follower coordinates none
        node.lead, node.ready = 1, False
        assert (await joined(node, 3)).error_code == ErrorCode.coordinator_load_in_progress
        node.ready = True
        assert (await joined(node, 3)).error_code == ErrorCode.none

    asyncio.run(run())


def test_find_coordinator_places_groups_on_the_slot_owner():
    async def run():
        node = MemoryNode(leader_id=2)
        for v in range(4):
            r = await call(node, FIND, v, {"key": "g", "key_type": 0})
            assert (r.error_code, r.node_id, r.port) == (ErrorCode.none, 2, 9093)
        r = await call(node, FIND, 4, {"key_type": 0, "coordinator_keys": ["a", "b", "c"]})
        assert [(c.key, c.node_id) for c in r.coordinators] == [("a", 2), ("b", 2), ("c", 2)]
        r = await call(node, FIND, 4, {"key_type": 7, "coordinator_keys": ["a"]})
        assert r.coordinators[0].error_code == ErrorCode.invalid_request
        node.lead = -1
        r = await call(node, FIND, 2, {"key": "g", "key_type": 0})
        assert r.error_code == ErrorCode.coordinator_not_available

    asyncio.run(run())


def test_new_leader_loads_groups_without_a_rebalance():
    """A failover: a second coordinator over the same applied state (the new leader)
    knows the generation; members keep heartbeating without rejoining."""

    async def run():
        node = MemoryNode()
        r1 = await joined(node, 5, session_timeout=6000)
        mid = r1.member_id
        await call(
            node,
            SYNC,
            3,
            {"member_id": mid, "assignments": [{"member_id": mid, "assignment": b"A"}]},
        )
        node.groups.close()
        node.groups = GroupRuntime(
            GroupOptions(),
            propose=node._propose_group,
            is_leader=node.is_leader,
            ready_term=lambda: node.term,
            records=lambda: node.fsm.groups.records(),
            slot_owner=lambda _s: node.lead,
        )
        h = await call(node, HEARTBEAT, 3, {"generation_id": 1, "member_id": mid})
        assert h.error_code == ErrorCode.none
        s = await call(node, SYNC, 3, {"generation_id": 1, "member_id": mid})
        assert s.assignment == b"A"
        assert node.groups.check_commit("g", 1, mid, None) == ErrorCode.none
        assert node.groups.loads == 1

    asyncio.run(run())


def test_session_expiry_runs_on_the_loop_timer():
    async def run():
        node = MemoryNode()
        node.groups.core.options = GroupOptions(
            initial_rebalance_delay_ms=0, min_session_timeout_ms=50
        )
        r = await joined(node, 4, session_timeout=200)
        await call(node, SYNC, 3, {"member_id": r.member_id})
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 30
        while node.groups.core.state_of("g") != "Empty":
            assert loop.time() < deadline, "member never evicted"
            await asyncio.sleep(0.05)
        assert node.fsm.groups.groups["g"].members == ()

    asyncio.run(run())


def test_groups_with_only_committed_offsets_are_listed_described_and_deleted_as_empty():
    """Kafka loads a group that only has committed offsets (an assign() consumer's, an
    admin tool's) as an Empty group without a protocol type: ListGroups lists it with
    protocol_type "", DescribeGroups describes it Empty, DeleteGroups deletes it and its
    offsets. A group with members is listed beside it as before."""

    async def run():
        node = MemoryNode()
        node.apply(commands.encode_create_topic("t", 2, uuid.uuid4()))
        commit = {
            "group_id": "simple",
            "generation_id_or_member_epoch": -1,
            "member_id": "",
            "topics": [
                {
                    "name": "t",
                    "partitions": [
                        {
                            "partition_index": 1,
                            "committed_offset": 7,
                            "committed_leader_epoch": -1,
                            "commit_timestamp": -1,
                            "committed_metadata": "",
                        }
                    ],
                }
            ],
        }
        r = await call(node, COMMIT, 8, commit)
        assert r.topics[0].partitions[0].error_code == ErrorCode.none
        await joined(node, 9)  # "g": a group with a member (PreparingRebalance/Stable)
        for v in range(6):
            lg = await call(node, LIST, v)
            listed = {x.group_id: x for x in lg.groups}
            assert set(listed) == {"g", "simple"}, v
            assert listed["simple"].protocol_type == ""
            assert listed["g"].protocol_type == "consumer"
            if v >= 4:
                assert listed["simple"].group_state == "Empty"
        only_empty = await call(node, LIST, 4, {"states_filter": ["empty"]})
        assert [x.group_id for x in only_empty.groups] == ["simple"]
        stable = await call(node, LIST, 4, {"states_filter": ["Stable"]})
        assert "simple" not in [x.group_id for x in stable.groups]
        classic = await call(node, LIST, 5, {"types_filter": ["classic"]})
        assert "simple" in [x.group_id for x in classic.groups]
        assert (await call(node, LIST, 5, {"types_filter": ["consumer"]})).groups == ()
        for v in range(6):
            (d,) = (await call(node, DESCRIBE, v, {"groups": ["simple"]})).groups
            assert (int(d.error_code), d.group_state, d.protocol_type, d.protocol_data) == (
                ErrorCode.none,
                "Empty",
                "",
                "",
            )
            assert d.members == ()
        dr = await call(node, DELETE, 2, {"groups_names": ["simple", "nope"]})
        assert [(x.group_id, int(x.error_code)) for x in dr.results] == [
            ("simple", ErrorCode.none),
            ("nope", ErrorCode.group_id_not_found),
        ]
        assert not node.fsm.group_offsets.has_group("simple")
        lg = await call(node, LIST, 3)
        assert [x.group_id for x in lg.groups] == ["g"]
        (d,) = (await call(node, DESCRIBE, 5, {"groups": ["simple"]})).groups
        assert d.group_state == "Dead"

    asyncio.run(run())
