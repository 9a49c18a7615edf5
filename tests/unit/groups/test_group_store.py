"""The replicated group state: encodings, apply, snapshots. State rebuilt from a
snapshot plus log replay equals the state built live (Redpanda PR 31483 fixed
divergences between the two)."""

from __future__ import annotations

import random

import pytest

from raftlog.entry import EntryType, LogEntry
from sink.groups.records import (
    GroupRecord,
    MemberRecord,
    decode_delete,
    decode_generation,
    encode_delete,
    encode_generation,
)
from sink.state import SinkStateMachine
from sink.state.groups import GroupStore
from tests.unit.groups.harness import Harness


def _record(gid: str, gen: int, n: int = 2) -> GroupRecord:
    return GroupRecord(
        gid,
        "consumer",
        gen,
        "range",
        "m0",
        tuple(
            MemberRecord(f"m{i}", None if i else "inst", "c", "/h", 10_000, 30_000, b"s", b"a")
            for i in range(n)
        ),
    )


def test_record_round_trips_and_rejects_damage():
    r = _record("g", 7)
    data = encode_generation(r)
    assert decode_generation(data) == r
    assert GroupRecord.from_json(r.to_json()) == r
    assert decode_delete(encode_delete(["a", "b"])) == ["a", "b"]
    with pytest.raises(ValueError):
        decode_generation(data[:-1])
    with pytest.raises(ValueError):
        decode_generation(data + b"x")
    empty = GroupRecord("g", None, 1, None, None, ())
    assert decode_generation(encode_generation(empty)) == empty


def test_store_ignores_stale_generations_and_unreadable_entries():
    s = GroupStore()
    assert s.apply_generation(encode_generation(_record("g", 3)))
    assert not s.apply_generation(encode_generation(_record("g", 2)))  # stale writer
    assert s.groups["g"].generation == 3
    assert not s.apply_generation(b"G\x00\x00")  # logged and skipped, never a crash
    assert s.apply_delete(encode_delete(["g", "nope"])) == 1 and s.groups == {}


def test_live_state_equals_snapshot_plus_replay():
    seed = random.randrange(1 << 30)
    print(f"seed={seed}")
    rng = random.Random(seed)
    h = Harness()
    for _ in range(30):  # a random history of groups: joins, leaves, expiries, deletes
        gid = f"g{rng.randrange(6)}"
        op = rng.random()
        if op < 0.5 and h.core.state_of(gid) in (None, "Empty"):
            h.stable_group(rng.randrange(1, 4), group=gid)
        elif op < 0.8:
            h.advance(rng.choice([1_000, 11_000]))
        else:
            t = next(h.tokens)
            h._run(h.core.delete(h.now, t, [gid]))
    entries = [LogEntry(i + 1, 1, EntryType.DATA, d) for i, d in enumerate(h.log)]
    live = SinkStateMachine()
    live.on_apply(entries)
    assert live.groups.to_json() == h.store.to_json()
    cut = rng.randrange(len(entries) + 1)
    early = SinkStateMachine()
    early.on_apply(entries[:cut])
    rebuilt = SinkStateMachine()
    rebuilt.on_snapshot_load(early.on_snapshot_save())
    rebuilt.on_apply(entries[cut:])
    assert rebuilt.groups.to_json() == live.groups.to_json()
    # an older snapshot without the key still loads
    old = SinkStateMachine()
    old.on_snapshot_load(SinkStateMachine().on_snapshot_save())
    assert old.groups.groups == {}
