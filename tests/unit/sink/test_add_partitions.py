"""CreatePartitions of a placed topic (partition groups): the controller command
ADD_PARTITIONS (sink/state/placement_table.py) -- its strict decoding, its apply through
SinkStateMachine, replay and snapshots --, the decision of the new partitions' replica
lists (sink/node/grow_topic.py), and PartitionRouting.create_partitions over a real
state machine with a fake Raft node (sink/node/routing.py)."""

from __future__ import annotations

import asyncio
import json
import os
import random
import uuid
import zlib
from types import SimpleNamespace

import pytest

from raftlog.entry import EntryType, LogEntry
from raftlog.runtime import LeaderChangedError
from sink.kafka.protocol.errors import ErrorCode
from sink.node import grow_topic
from sink.node.routing import PartitionRouting
from sink.placement import PlacementError, Topology, count_load, place_partitions
from sink.service import SinkOptions
from sink.state import SinkStateMachine, admin_commands, commands
from sink.state.placement_table import (
    ADD_PARTITIONS,
    PLACE_TOPIC,
    decode_add_partitions,
    encode_add_partitions,
    encode_place_topic,
)
from tests.helpers.state_log import StateLog
from tests.unit.sink.memory_services import MemoryNode
from tests.unit.sink.test_handlers import call

T = uuid.UUID(int=0xA1)
U = uuid.UUID(int=0xB2)


Ctl = StateLog


def state_of(fsm: SinkStateMachine) -> dict:
    """Everything a snapshot holds (the comparison of two machines)."""
    return json.loads(zlib.decompress(fsm.on_snapshot_save()))


# ------------------------------------------------------------------ encoding


def test_encoding_round_trips_and_the_tag_is_unique():
    data = encode_add_partitions("t", T, 5, [(1, 2, 3), (2, 3, 1)])
    assert data[0] == ADD_PARTITIONS == ord("N")
    c = decode_add_partitions(data)
    assert (c.name, c.topic_id, c.partitions, c.replicas) == ("t", T, 5, [(1, 2, 3), (2, 3, 1)])
    assert c.first == 3
    # No entry of any other command can be read as this one, or the reverse.
    from sink.groups import records as group_records
    from sink.state import acls, members, offset_command, quota_command, users
    from sink.state import data_commands as dcmd
    from sink.topics import state as topic_state

    tags = [
        commands.PRODUCE, commands.CREATE_TOPIC, commands.ALLOC_PID, commands.COMMIT_OFFSETS,
        *admin_commands.TAGS, quota_command.ALTER_QUOTAS, offset_command.COMMIT_GROUP_OFFSETS,
        offset_command.DELETE_GROUP_OFFSETS, topic_state.ALTER_CONFIGS,
        topic_state.CREATE_TOPIC_WITH_CONFIGS, group_records.GROUP_GENERATION,
        group_records.DELETE_GROUPS, members.MEMBER_ADDRESSES, users.ALTER_USERS,
        acls.ALTER_ACLS, dcmd.PRODUCE_TO, dcmd.DELETE_RECORDS_AT, dcmd.PIPELINE_COMMIT,
        dcmd.SERVE, dcmd.DROP, dcmd.CONFIGS, PLACE_TOPIC, ADD_PARTITIONS,
    ]  # fmt: skip
    assert len(tags) == len(set(tags)) == 26


def _raw(**body) -> bytes:
    base = {"name": "t", "topic_id": T.hex, "partitions": 3, "replicas": [[1, 2], [2, 1]]}
    base.update(body)
    return b"N" + json.dumps({k: v for k, v in base.items() if v is not ...}).encode()


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"W{}",  # another command's tag
        b"N",
        b"N{not json",
        b"N\xff\xfe",
        b'N["a list"]',
        _raw(name=...),  # a key missing
        _raw(extra=1),  # a key too many
        _raw(name=""),
        _raw(name=7),
        _raw(topic_id="zz" * 16),
        _raw(topic_id=T.hex[:-2]),
        _raw(topic_id=None),
        _raw(partitions="3"),
        _raw(partitions=True),
        _raw(partitions=3.0),
        _raw(partitions=2),  # two new partitions cannot make 2
        _raw(partitions=2**31),  # beyond int32
        _raw(replicas=[]),
        _raw(replicas=[[]]),
        _raw(replicas=[[1, 1], [2, 1]]),  # a node twice
        _raw(replicas=[[0, 1], [2, 1]]),  # node ids start at 1
        _raw(replicas=[[-1, 1], [2, 1]]),
        _raw(replicas=[[1, 2], [3]]),  # lists of different lengths
        _raw(replicas=[[1, True], [2, 1]]),
        _raw(replicas=[["1", 2], [2, 1]]),
        _raw(replicas=[1, 2]),
        _raw(replicas={"0": [1, 2]}),
        _raw(incarnations=[1, 2]),  # the optional sealed start, malformed
        _raw(incarnations={"x": 5}),
        _raw(incarnations={"0": 5}),
        _raw(incarnations={"1": 0}),
        _raw(incarnations={"1": 2**63}),
        _raw(incarnations={"1": "5"}),
        _raw(incarnations={"1": True}),
    ],
)
def test_decoding_refuses_every_malformed_entry(data):
    with pytest.raises(ValueError):
        decode_add_partitions(data)


# --------------------------------------------------------------------- apply


def placed(partitions: int = 3) -> Ctl:
    c = Ctl()
    lists = [tuple((p + r) % 3 + 1 for r in range(3)) for p in range(partitions)]
    assert c.apply(encode_place_topic("t", partitions, T, None, lists)).error == ErrorCode.none
    return c


def test_apply_adds_the_partitions_and_their_groups_in_one_entry():
    c = placed(3)
    res = c.apply(encode_add_partitions("t", T, 5, [(1, 2, 3), (3, 1, 2)]))
    assert res.error == ErrorCode.none
    assert (res.topic.name, res.topic.partitions, res.topic.topic_id) == ("t", 5, T)
    assert c.fsm.topic("t").partitions == 5 and c.fsm.topic("t").topic_id == T
    table = c.fsm.placement
    rows = [(g.group, g.partition, g.replicas) for g in table.of_topic(T.hex)]
    assert rows[3:] == [(4, 3, (1, 2, 3)), (5, 4, (3, 1, 2))]
    assert [g for g, _, _ in rows] == [1, 2, 3, 4, 5] and table.next_group_id == 6
    assert c.fsm.has_partition("t", 4) and not c.fsm.has_partition("t", 5)
    assert c.fsm.data.parts == {}  # the records live in the data groups


def test_a_replayed_or_stale_entry_changes_nothing():
    c = placed(3)
    entry = encode_add_partitions("t", T, 5, [(1, 2, 3), (3, 1, 2)])
    assert c.apply(entry).error == ErrorCode.none
    before = state_of(c.fsm)
    again = c.apply(entry)  # a duplicate (a retried proposal, a replay)
    assert again.error == ErrorCode.invalid_partitions and again.topic.partitions == 5
    # Placed from a stale count (3) but asking for more: refused too, nothing allocated.
    stale = c.apply(encode_add_partitions("t", T, 6, [(1, 2, 3)] * 3))
    assert stale.error == ErrorCode.invalid_partitions
    after = state_of(c.fsm)
    assert {k: v for k, v in after.items() if k != "applied"} == {
        k: v for k, v in before.items() if k != "applied"
    }


def test_refusals_unknown_topic_wrong_id_unplaced_topic_unreadable_entry():
    c = placed(1)
    assert c.apply(encode_add_partitions("t", U, 2, [(1, 2, 3)])).error == (
        ErrorCode.unknown_topic_or_partition
    )
    assert c.apply(encode_add_partitions("u", T, 2, [(1, 2, 3)])).error == (
        ErrorCode.unknown_topic_or_partition
    )
    c.apply(commands.encode_create_topic("one", 1, U))  # a one-group topic: not placed
    res = c.apply(encode_add_partitions("one", U, 2, [(1, 2, 3)]))
    assert res.error == ErrorCode.invalid_request and c.fsm.topic("one").partitions == 1
    assert c.apply(b"N{").error == ErrorCode.invalid_request
    assert c.fsm.placement.next_group_id == 2 and c.fsm.topic("t").partitions == 1


def test_group_ids_stay_never_reused_across_growth_and_deletion():
    c = placed(2)
    c.apply(encode_add_partitions("t", T, 3, [(2, 3, 1)]))
    assert c.apply(admin_commands.encode_delete_topic("t", T)) == ErrorCode.none
    assert len(c.fsm.placement) == 0 and c.fsm.placement.next_group_id == 4
    c.apply(encode_place_topic("t", 1, U, None, [(1, 2, 3)]))
    assert c.apply(encode_add_partitions("t", U, 2, [(3, 1, 2)])).error == ErrorCode.none
    assert [g.group for g in c.fsm.placement.of_topic(U.hex)] == [4, 5]
    # The old id's entry, replayed, does not touch the topic now under that name.
    assert c.apply(encode_add_partitions("t", T, 4, [(1, 2, 3)])).error == (
        ErrorCode.unknown_topic_or_partition
    )


def test_snapshot_round_trip_includes_the_added_groups():
    c = placed(3)
    c.apply(encode_add_partitions("t", T, 6, [(1, 2, 3), (2, 3, 1), (3, 1, 2)]))
    loaded = SinkStateMachine()
    loaded.on_snapshot_load(c.fsm.on_snapshot_save())
    assert loaded.placement.to_json() == c.fsm.placement.to_json()
    assert loaded.placement.next_group_id == 7 and loaded.topic("t").partitions == 6
    assert loaded.placement.group_of(T.hex, 5).replicas == (3, 1, 2)
    assert state_of(loaded) == state_of(c.fsm)


def _random_history(rng: random.Random, steps: int) -> list[bytes]:
    """Creations, growths (some stale or duplicated), deletions of a few topics."""
    out: list[bytes] = []
    live: dict[str, tuple[uuid.UUID, int]] = {}
    for _ in range(steps):
        name = rng.choice("abc")
        nodes = rng.sample(range(1, 6), 3)
        roll = rng.random()
        if name not in live or roll < 0.1:
            tid = uuid.UUID(int=rng.getrandbits(128))
            n = rng.randint(1, 4)
            out.append(encode_place_topic(name, n, tid, None, [tuple(nodes)] * n))
            live.setdefault(name, (tid, n))
        elif roll < 0.25:
            tid, _ = live.pop(name)
            out.append(admin_commands.encode_delete_topic(name, tid))
        else:
            tid, n = live[name]
            add = rng.randint(1, 3)
            stale = rng.random() < 0.2  # placed from an old count: refused at apply
            base = max(1, n - 1) if stale else n
            out.append(encode_add_partitions(name, tid, base + add, [tuple(nodes)] * add))
            if not stale:
                live[name] = (tid, base + add)
            if rng.random() < 0.2:
                out.append(out[-1])  # a duplicate
    return out


def test_seeded_snapshot_plus_tail_equals_full_replay():
    seed = int(os.environ.get("RAFTSINK_ADDPARTS_SEED", random.randrange(2**32)))
    print(f"seed={seed}")
    rng = random.Random(seed)
    for case in range(40):
        history = _random_history(rng, rng.randint(5, 40))
        full = Ctl()
        for d in history:
            full.apply(d)
        cut = rng.randint(0, len(history))
        head = Ctl()
        for d in history[:cut]:
            head.apply(d)
        resumed = SinkStateMachine()
        resumed.on_snapshot_load(head.fsm.on_snapshot_save())
        for i, d in enumerate(history[cut:], start=cut + 1):
            resumed.on_apply([LogEntry(i, 1, EntryType.DATA, d)])
        assert state_of(resumed) == state_of(full.fsm), f"seed={seed} case={case} cut={cut}"
        # Invariant: every topic's partitions are exactly its placed rows 0..P-1.
        for info in full.fsm.topics().values():
            rows = full.fsm.placement.of_topic(info.topic_id.hex)
            assert [g.partition for g in rows] == list(range(info.partitions)), f"seed={seed}"
        ids = [g.group for g in full.fsm.placement]
        assert len(ids) == len(set(ids)) and all(
            0 < g < full.fsm.placement.next_group_id for g in ids
        )


# ------------------------------------------------------------- the decision


def test_added_partitions_continue_the_stripe_with_one_replica_per_host():
    # 3 hosts x 2 processes; a topic of 3 partitions at RF 3 grown to 6.
    hosts = {1: "h1", 2: "h1", 3: "h2", 4: "h2", 5: "h3", 6: "h3"}
    topo = Topology(hosts)
    first = place_partitions(topo, 3, 3, topic="grow")
    topo = grow_topic.topology_of(hosts, first)
    more = grow_topic.added_replicas(topo, "grow", first, 6, None, 1024)
    assert len(more) == 3
    for replicas in more:
        assert len({hosts[n] for n in replicas}) == 3, more  # one replica per host
    # The topic's preferred leaders: one per process over the 6 partitions, and its
    # replicas 3 per process (what placing 6 at once gives: the stripe continued).
    load = count_load(first + more)
    assert sorted(v.preferred for v in load.values()) == [1] * 6, first + more
    assert sorted(v.replicas for v in load.values()) == [3] * 6, first + more


def test_added_partitions_on_one_node_per_host_match_kraft_stripes():
    nodes = {n: None for n in range(1, 6)}
    first = place_partitions(Topology(nodes), 3, 3, topic="g", seed=0)
    more = grow_topic.added_replicas(grow_topic.topology_of(nodes, first), "g", first, 10, None, 99)
    # Preferred leaders within one of each other (2 each of 10 on 5 nodes).
    assert sorted(count_load(first + more)[n].preferred for n in nodes) == [2] * 5
    assert all(len(set(r)) == 3 for r in more)


def test_the_load_of_nodes_no_longer_voters_is_left_out():
    topo = grow_topic.topology_of({1: None, 2: None}, [(1, 2), (2, 9)])
    assert set(topo.load) == {1, 2} and topo.load_of(2).replicas == 2


@pytest.mark.parametrize(
    ("count", "message"),
    [
        (3, "Topic already has 3 partition(s)."),
        (2, "The topic t currently has 3 partition(s); 2 would not be an increase."),
        (2000, "2000 partitions is more than kafka.max_create_partitions (1024)"),
    ],
)
def test_counts_that_do_not_grow_are_refused_with_kafkas_message(count, message):
    topo = Topology.of([1, 2, 3])
    with pytest.raises(PlacementError) as err:
        grow_topic.added_replicas(topo, "t", [(1, 2, 3)] * 3, count, None, 1024)
    assert (err.value.code, str(err.value)) == (ErrorCode.invalid_partitions, message)


def test_explicit_assignments_are_honoured_as_given():
    topo = Topology({1: "a", 2: "b", 3: "c", 4: "c"})
    out = grow_topic.added_replicas(topo, "t", [(1, 2)], 3, [[4, 1], [2, 3]], 99)
    assert out == [(4, 1), (2, 3)]


@pytest.mark.parametrize(
    ("assignments", "needle"),
    [
        ([[1, 2]], "Attempted to add 2 additional partition(s), but only 1 assignment(s)"),
        ([[1, 2], [2, 1], [1, 2]], "Attempted to add 2 additional partition(s), but only 3"),
        ([[1, 2], []], "includes an empty replica list"),
        ([[1, 2], [1, 2, 3]], "a partition with 3 replica(s), but this is not consistent"),
        ([[1, 2], [2, 7]], "unknown node(s) [7]"),
        ([[1, 2], [2, 2]], "node 2 is named twice"),
        ([[1, 2], [3, 4]], "share host 'c'"),
    ],
)
def test_bad_explicit_assignments_are_invalid_replica_assignment(assignments, needle):
    topo = Topology({1: "a", 2: "b", 3: "c", 4: "c"})
    with pytest.raises(PlacementError) as err:
        grow_topic.added_replicas(topo, "t", [(1, 2)], 3, assignments, 99)
    assert err.value.code == ErrorCode.invalid_replica_assignment
    assert needle in str(err.value), str(err.value)


def test_a_replication_factor_above_the_live_hosts_is_refused():
    topo = Topology.of([1, 2])  # the topic was placed at RF 3 when there were 3 hosts
    with pytest.raises(PlacementError) as err:
        grow_topic.added_replicas(topo, "t", [(1, 2, 3)], 2, None, 99)
    assert err.value.code == ErrorCode.invalid_replication_factor


# ----------------------------------------------------------------- routing


class FakeNode:
    """The controller's Raft node: apply() commits at once into the state machine."""

    def __init__(self, ctl: Ctl) -> None:
        self.ctl = ctl
        self.leader = True
        self.proposed: list[bytes] = []

    def is_leader(self) -> bool:
        return self.leader

    def incarnations(self) -> dict[int, int]:
        return {1: 11, 2: 22, 3: 33}

    async def apply(self, data: bytes, timeout: float):
        self.proposed.append(data)
        await asyncio.sleep(0)  # another request may run meanwhile
        if not self.leader:
            raise LeaderChangedError("term moved on")
        return SimpleNamespace(result=self.ctl.apply(data))


def routing_over(ctl: Ctl, hosts: dict[int, str | None]) -> tuple[PartitionRouting, FakeNode]:
    node = FakeNode(ctl)
    service = SimpleNamespace(fsm=ctl.fsm, node=node, options=SinkOptions(), brokers={})
    groups = SimpleNamespace(wakes=0)
    groups.wake = lambda: setattr(groups, "wakes", groups.wakes + 1)
    routing = PartitionRouting(service, groups, None, None, lambda: hosts, 0)  # type: ignore[arg-type]
    return routing, node


def test_routing_grows_a_placed_topic_through_one_entry():
    ctl = placed(3)
    routing, node = routing_over(ctl, {1: None, 2: None, 3: None})

    async def run():
        assert await routing.create_partitions("t", 6, True) == (ErrorCode.none, None)
        assert node.proposed == [] and ctl.fsm.topic("t").partitions == 3  # validate only
        assert await routing.create_partitions("t", 6, False) == (ErrorCode.none, None)
        assert [d[0] for d in node.proposed] == [ADD_PARTITIONS]
        assert routing.groups.wakes == 1
        assert await routing.create_partitions("t", 4, False) == (
            ErrorCode.invalid_partitions,
            "The topic t currently has 6 partition(s); 4 would not be an increase.",
        )
        assert (await routing.create_partitions("nope", 4, False))[0] == (
            ErrorCode.unknown_topic_or_partition
        )
        node.leader = False
        assert (await routing.create_partitions("t", 9, False))[0] == ErrorCode.not_controller

    asyncio.run(run())
    rows = ctl.fsm.placement.of_topic(T.hex)
    assert [g.partition for g in rows] == list(range(6)) and len(node.proposed) == 1
    # the new groups start sealed with the controller's recorded incarnations
    assert all(g.incarnation_map() == {1: 11, 2: 22, 3: 33} for g in rows[3:])
    assert all(sorted(g.replicas) == [1, 2, 3] for g in rows)


def test_routing_honours_or_refuses_explicit_assignments():
    ctl = placed(3)
    routing, node = routing_over(ctl, {1: None, 2: None, 3: None})

    async def run():
        bad = await routing.create_partitions("t", 4, False, [[1, 2, 5]])
        assert bad[0] == ErrorCode.invalid_replica_assignment and "unknown node" in bad[1]
        assert node.proposed == []
        assert await routing.create_partitions("t", 4, False, [[3, 2, 1]]) == (
            ErrorCode.none,
            None,
        )

    asyncio.run(run())
    assert ctl.fsm.placement.group_of(T.hex, 3).replicas == (3, 2, 1)


def test_concurrent_requests_are_decided_one_after_the_other():
    ctl = placed(3)
    routing, node = routing_over(ctl, {1: None, 2: None, 3: None})

    async def run():
        return await asyncio.gather(
            routing.create_partitions("t", 6, False), routing.create_partitions("t", 6, False)
        )

    first, second = asyncio.run(run())
    assert first == (ErrorCode.none, None)
    assert second == (ErrorCode.invalid_partitions, "Topic already has 6 partition(s).")
    assert len(node.proposed) == 1 and ctl.fsm.topic("t").partitions == 6


def test_a_leader_lost_while_committing_answers_not_controller():
    ctl = placed(3)
    routing, node = routing_over(ctl, {1: None, 2: None, 3: None})

    async def run():
        task = asyncio.ensure_future(routing.create_partitions("t", 6, False))
        await asyncio.sleep(0)  # the proposal is in flight
        node.leader = False
        return await task

    assert asyncio.run(run()) == (ErrorCode.not_controller, None)
    assert ctl.fsm.topic("t").partitions == 3


# ------------------------------------------------------------------ handler


def test_the_handler_passes_the_requests_assignments_on():
    node = MemoryNode()
    seen: list[tuple] = []

    async def create_partitions(name, count, validate_only, assignments=None, settle_by=None):
        seen.append((name, count, validate_only, assignments))
        return ErrorCode.none, None

    node.create_partitions = create_partitions
    values = {
        "topics": [
            {"name": "a", "count": 3, "assignments": [{"broker_ids": [2, 1]}]},
            {"name": "b", "count": 2, "assignments": None},
        ],
        "timeout": 1000,
        "validate_only": True,
    }
    r = call(node, 37, 3, values)
    assert [int(x.error_code) for x in r.results] == [0, 0]
    assert seen == [("a", 3, True, [[2, 1]]), ("b", 2, True, None)]


def test_the_one_group_grow_entry_is_refused_for_a_placed_topic():
    """Only ADD_PARTITIONS grows a placed topic (it places the new groups); the
    one-group entry would add partitions that no data group hosts."""
    c = placed(3)
    before = state_of(c.fsm)
    res = c.apply(admin_commands.encode_create_partitions("t", 5))
    assert res.error == ErrorCode.invalid_request
    assert c.fsm.topic("t").partitions == 3 and not c.fsm.has_partition("t", 3)
    after = state_of(c.fsm)
    assert {k: v for k, v in after.items() if k != "applied"} == {
        k: v for k, v in before.items() if k != "applied"
    }
