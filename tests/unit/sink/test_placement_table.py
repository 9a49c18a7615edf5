"""The controller's placement command (PLACE_TOPIC, sink/state/placement_table.py):
apply through SinkStateMachine, refusals, DeleteTopics dropping the topic's groups,
group ids never reused, and snapshot round trips (old snapshots still load)."""

from __future__ import annotations

import json
import uuid
import zlib

import pytest

from sink.kafka.protocol.errors import ErrorCode
from sink.state import SinkStateMachine, admin_commands, commands
from sink.state.placement_table import (
    PLACE_TOPIC,
    PlacementTable,
    decode_add_partitions,
    decode_place_topic,
    encode_add_partitions,
    encode_move,
    encode_move_done,
    encode_place_topic,
)
from tests.helpers.state_log import StateLog

T = uuid.UUID(int=0xA1)
U = uuid.UUID(int=0xB2)


Ctl = StateLog


def test_encoding_round_trips_and_refuses_inconsistent_lists():
    data = encode_place_topic("t", 2, T, {"retention.ms": "1000"}, [(1, 2, 3), (2, 3, 1)])
    assert data[0] == PLACE_TOPIC
    c = decode_place_topic(data)
    assert (c.name, c.partitions, c.topic_id) == ("t", 2, T)
    assert c.configs == {"retention.ms": "1000"} and c.replicas == [(1, 2, 3), (2, 3, 1)]
    with pytest.raises(ValueError):  # one list for two partitions
        decode_place_topic(encode_place_topic("t", 2, T, None, [(1, 2)]))
    with pytest.raises(ValueError):  # a node twice in one list
        decode_place_topic(encode_place_topic("t", 1, T, None, [(1, 1)]))


def test_apply_creates_the_topic_with_its_groups_and_no_local_partition_data():
    c = Ctl()
    res = c.apply(encode_place_topic("t", 3, T, {"retention.ms": "5000"}, [(1, 2), (2, 3), (3, 1)]))
    assert res.error == ErrorCode.none and res.topic.partitions == 3
    table = c.fsm.placement
    assert [(g.group, g.partition, g.replicas) for g in table.of_topic(T.hex)] == [
        (1, 0, (1, 2)),
        (2, 1, (2, 3)),
        (3, 2, (3, 1)),
    ]
    assert table.next_group_id == 4
    # The partitions exist (offset commits check this) but their data is the groups'.
    assert c.fsm.has_partition("t", 2) and not c.fsm.has_partition("t", 3)
    assert c.fsm.data.parts == {}
    assert c.fsm.topic_configs.overrides("t") == {"retention.ms": "5000"}


def test_a_refused_entry_allocates_nothing():
    c = Ctl()
    c.apply(encode_place_topic("t", 1, T, None, [(1, 2)]))
    again = c.apply(encode_place_topic("t", 1, U, None, [(2, 3)]))
    assert again.error == ErrorCode.topic_already_exists
    bad_config = c.apply(encode_place_topic("u", 1, U, {"retention.ms": "x"}, [(2, 3)]))
    assert bad_config.error == ErrorCode.invalid_config and c.fsm.topic("u") is None
    unreadable = c.apply(b"W{not json")
    assert unreadable.error == ErrorCode.invalid_config
    assert c.fsm.placement.next_group_id == 2 and len(c.fsm.placement) == 1


def test_delete_topic_drops_its_groups_and_ids_are_never_reused():
    c = Ctl()
    c.apply(encode_place_topic("t", 2, T, None, [(1, 2), (2, 1)]))
    assert c.apply(admin_commands.encode_delete_topic("t", T)) == ErrorCode.none
    assert len(c.fsm.placement) == 0 and c.fsm.placement.next_group_id == 3
    c.apply(encode_place_topic("t", 1, U, None, [(1, 2)]))
    assert [g.group for g in c.fsm.placement] == [3]  # a new id for the new topic


def _snapshot(fsm: SinkStateMachine) -> dict:
    return json.loads(zlib.decompress(fsm.on_snapshot_save()))


def test_snapshot_round_trip_keeps_the_placement_and_the_id_counter():
    c = Ctl()
    c.apply(encode_place_topic("t", 2, T, None, [(1, 2, 3), (2, 3, 1)]))
    c.apply(encode_place_topic("u", 1, U, None, [(3, 1, 2)]))
    c.apply(admin_commands.encode_delete_topic("t", T))
    loaded = SinkStateMachine()
    loaded.on_snapshot_load(c.fsm.on_snapshot_save())
    assert loaded.placement.to_json() == c.fsm.placement.to_json()
    assert loaded.placement.next_group_id == 4
    assert loaded.placement.group_of(U.hex, 0).replicas == (3, 1, 2)
    assert loaded.has_partition("u", 0) and loaded.topic("t") is None


def test_a_one_group_snapshot_has_no_placement_key_and_old_snapshots_load_empty():
    c = Ctl()
    c.apply(commands.encode_create_topic("t", 1, T))
    state = _snapshot(c.fsm)
    assert "placement" not in state  # the one-group format is unchanged
    loaded = SinkStateMachine()
    loaded.on_snapshot_load(c.fsm.on_snapshot_save())
    assert len(loaded.placement) == 0 and loaded.placement.next_group_id == 1
    assert PlacementTable.from_json(None).to_json() == PlacementTable().to_json()


# ------------------------------------------------- sealed start (incarnations)


def test_placement_records_the_replicas_incarnations_for_a_sealed_start():
    """Each new group keeps the incarnations of ITS replicas (a node's host incarnation,
    as the controller recorded it); nodes the entry does not know are left out, and an
    entry without the key (older nodes) places founded groups as before."""
    incs = {1: 11, 2: 22, 3: 33, 9: 99}
    data = encode_place_topic("t", 2, T, None, [(1, 2), (2, 3)], incs)
    assert json.loads(data[1:])["incarnations"] == {"1": 11, "2": 22, "3": 33}
    assert decode_place_topic(data).incarnations == {1: 11, 2: 22, 3: 33}
    c = Ctl()
    c.apply(data)
    g1, g2 = c.fsm.placement.of_topic(T.hex)
    assert g1.incarnation_map() == {1: 11, 2: 22} and g2.incarnation_map() == {2: 22, 3: 33}
    c.apply(encode_add_partitions("t", T, 3, [(3, 1)], {3: 33}))  # node 1 unknown: left out
    assert c.fsm.placement.group_of(T.hex, 2).incarnation_map() == {3: 33}
    assert decode_add_partitions(encode_add_partitions("t", T, 3, [(3, 1)])).incarnations == {}
    c.apply(encode_place_topic("u", 1, U, None, [(1, 2)]))
    assert c.fsm.placement.group_of(U.hex, 0).incarnations == ()


def test_incarnations_survive_moves_and_snapshots():
    c = Ctl()
    c.apply(encode_place_topic("t", 1, T, None, [(1, 2, 3)], {1: 11, 2: 22, 3: 33}))
    c.apply(encode_place_topic("u", 1, U, None, [(1, 2, 3)]))  # founded (no map)
    g = c.fsm.placement.group_of(T.hex, 0)
    c.apply(encode_move(g.group, (1, 2, 3), (1, 2, 4)))
    c.apply(encode_move_done(g.group, (1, 2, 4)))
    g = c.fsm.placement.group_of(T.hex, 0)
    assert g.replicas == (1, 2, 4) and g.incarnation_map() == {1: 11, 2: 22, 3: 33}
    state = _snapshot(c.fsm)["placement"]
    assert state["incarnations"] == {str(g.group): [[1, 11], [2, 22], [3, 33]]}
    loaded = SinkStateMachine()
    loaded.on_snapshot_load(c.fsm.on_snapshot_save())
    assert loaded.placement.to_json() == c.fsm.placement.to_json()
    assert loaded.placement.group_of(U.hex, 0).incarnations == ()
    assert (
        PlacementTable.from_json({"next": 2, "groups": [[1, T.hex, 0, [1, 2]]]})
        .groups[1]
        .incarnations
        == ()
    )  # a snapshot from before sealed starts


@pytest.mark.parametrize("bad", [[1], {"a": 1}, {"-1": 1}, {"1": 0}, {"1": 2**63}, {"1": 1.5}])
def test_malformed_incarnations_refuse_the_placement(bad):
    body = json.loads(encode_place_topic("t", 1, T, None, [(1, 2)])[1:])
    body["incarnations"] = bad
    data = b"W" + json.dumps(body).encode()
    with pytest.raises(ValueError):
        decode_place_topic(data)
    c = Ctl()
    assert c.apply(data).error == ErrorCode.invalid_config and c.fsm.topic("t") is None
