"""Replica moves in the controller's placement table: MOVE_REPLICAS starts one (a
compare-and-set on the group's replica list), MOVE_DONE ends it; both survive snapshots."""

from __future__ import annotations

import uuid

import pytest

from sink.state import SinkStateMachine
from sink.state.placement_table import (
    MOVE_DONE,
    MOVE_REPLICAS,
    decode_move,
    decode_move_done,
    encode_move,
    encode_move_done,
    encode_place_topic,
)
from tests.helpers.state_log import StateLog

T = uuid.UUID(int=0xA1)


Ctl = StateLog


def _placed() -> Ctl:
    c = Ctl()
    c.apply(encode_place_topic("t", 2, T, None, [(1, 2, 3), (2, 3, 1)]))
    return c


def test_codecs_round_trip_and_refuse_malformed_bodies():
    data = encode_move(1, [1, 2, 3], [4, 2, 3])
    assert data[0] == MOVE_REPLICAS
    assert decode_move(data) == (1, (1, 2, 3), (4, 2, 3))
    done = encode_move_done(1, [4, 2, 3])
    assert done[0] == MOVE_DONE and decode_move_done(done) == (1, (4, 2, 3))
    for bad in (
        b"V{not json",
        b'V{"group": 1, "replicas": [1]}',  # a key missing
        b'V{"group": 0, "replicas": [1], "target": [2]}',  # the controller
        b'V{"group": 1, "replicas": [1], "target": [2, 2]}',  # a node twice
        b'V{"group": 1, "replicas": [1], "target": []}',  # empty
        b'V{"group": true, "replicas": [1], "target": [2]}',  # a bool is no id
        b'V{"group": 1, "replicas": [1], "target": [0]}',  # node ids start at 1
        b'F{"group": 1, "target": [1], "x": 1}',  # an unknown key
        b'W{"group": 1, "target": [1]}',  # wrong tag
    ):
        with pytest.raises(ValueError):
            (decode_move if bad[:1] in (b"V", b"W") else decode_move_done)(bad)


def test_move_sets_the_target_and_done_makes_it_the_replicas():
    c = _placed()
    table = c.fsm.placement
    v0 = table.version
    assert c.apply(encode_move(1, [1, 2, 3], [4, 2, 3])) is None
    g = table.groups[1]
    assert g.replicas == (1, 2, 3) and g.target == (4, 2, 3)
    assert g.members == (1, 2, 3, 4) and g.adding == (4,) and g.removing == (1,)
    assert table.version > v0
    assert c.apply(encode_move_done(1, [4, 2, 3])) is None
    g = table.groups[1]
    assert g.replicas == (4, 2, 3) and g.target == () and g.members == (4, 2, 3)
    assert g.adding == () and g.removing == ()
    assert table.groups[2].replicas == (2, 3, 1)  # the other group is untouched


def test_compare_and_set_refusals_change_nothing():
    c = _placed()
    table = c.fsm.placement
    # Decided from a stale replica list: refused.
    assert "not [2, 3, 4]" in c.apply(encode_move(1, [2, 3, 4], [4, 2, 3]))
    assert "does not exist" in c.apply(encode_move(9, [1, 2, 3], [4, 2, 3]))
    # A done with no move pending, or for another target, is stale: refused.
    assert "move target" in c.apply(encode_move_done(1, [4, 2, 3]))
    c.apply(encode_move(1, [1, 2, 3], [4, 2, 3]))
    assert "move target" in c.apply(encode_move_done(1, [5, 2, 3]))
    assert table.groups[1].replicas == (1, 2, 3) and table.groups[1].target == (4, 2, 3)
    assert "malformed" in c.apply(b'F{"group": 1}')


def test_a_new_target_replaces_a_pending_one_and_the_current_list_cancels():
    c = _placed()
    table = c.fsm.placement
    assert c.apply(encode_move(1, [1, 2, 3], [1, 2, 3])) is None  # nothing pending
    assert table.groups[1].target == ()
    c.apply(encode_move(1, [1, 2, 3], [4, 2, 3]))
    c.apply(encode_move(1, [1, 2, 3], [5, 2, 3]))
    g = table.groups[1]
    # 4 may already be in the group's configuration: it hosts until the move is done.
    assert g.target == (5, 2, 3) and g.leaving == (4,) and g.members == (1, 2, 3, 5, 4)
    c.apply(encode_move(1, [1, 2, 3], [1, 2, 3]))  # cancel: a move back
    g = table.groups[1]
    assert g.target == (1, 2, 3) and g.leaving == (4, 5) and g.members == (1, 2, 3, 4, 5)
    assert g.adding == () and g.removing == ()
    assert c.apply(encode_move_done(1, [1, 2, 3])) is None
    g = table.groups[1]
    assert (g.replicas, g.target, g.leaving, g.members) == ((1, 2, 3), (), (), (1, 2, 3))
    # Only the order changes: the target is kept (done makes the new order current).
    c.apply(encode_move(1, [1, 2, 3], [3, 1, 2]))
    assert table.groups[1].target == (3, 1, 2) and table.groups[1].adding == ()


def test_a_pending_move_survives_a_snapshot_and_older_snapshots_still_load():
    c = _placed()
    c.apply(encode_move(1, [1, 2, 3], [4, 2, 3]))
    c.apply(encode_move(1, [1, 2, 3], [5, 2, 3]))
    blob = c.fsm.on_snapshot_save()
    other = SinkStateMachine()
    other.on_snapshot_load(blob)
    assert other.placement.groups[1].target == (5, 2, 3)
    assert other.placement.groups[1].leaving == (4,)
    assert other.placement.groups[2].target == ()
    state = c.fsm.placement.to_json()
    assert [len(row) for row in state["groups"]] == [6, 4]  # extras only while moving
    state["groups"] = [row[:4] for row in state["groups"]]  # as written before moves
    assert type(c.fsm.placement).from_json(state).groups[1].target == ()
