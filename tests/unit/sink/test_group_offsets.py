"""Committed group offsets and leader epochs as replicated state: the entries, their apply,
expiry, snapshots (rebuilt == live), memory, and coordinator placement."""

from __future__ import annotations

import asyncio
import gc
import json
import os
import random
import tracemalloc
import uuid
import zlib

import pytest

from raftlog.entry import EntryType, LogEntry
from raftlog.runtime import LeaderChangedError, NotLeaderError, ProposalTimeoutError
from raftlog.runtime.state_machine import ApplyResult
from sink.groups.membership import NO_GROUPS, GroupStatus
from sink.groups.placement import (
    COORDINATOR_SLOTS,
    coordinates,
    coordinator_node,
    coordinator_slot,
    java_string_hash,
)
from sink.kafka.protocol.errors import ErrorCode
from sink.offsets import GroupOffsetService, OffsetsOptions
from sink.state import SinkStateMachine, commands
from sink.state import offset_command as oc
from sink.state.epochs import EpochTable
from sink.state.group_offsets import GroupOffsetTable
from tests.unit.sink.batches import make_batch

T0 = 1_700_000_000_000
DAY = 86_400_000


def _item(topic="t", p=0, off=5, epoch=-1, md="", commit=T0, expire=-1):
    return oc.OffsetCommitItem(topic, p, off, epoch, md, commit, expire)


def _has(topics=("t",), parts=4):
    return lambda t, p: t in topics and 0 <= p < parts


# ----------------------------------------------------------------- entries


def test_commit_and_delete_entries_round_trip():
    items = [_item(), _item("u", 3, 9, 7, None, T0 + 1, T0 + 2), _item(md="é" * 10)]
    data = oc.encode_commit_group_offsets("grp", items)
    assert data[0] == oc.COMMIT_GROUP_OFFSETS == ord("O")
    assert oc.decode_commit_group_offsets(data) == oc.CommitGroupOffsetsCmd([("grp", items)])
    batch = oc.encode_commit_batch([("a", items[:1]), ("b", []), ("a", items[1:])])
    assert oc.decode_commit_group_offsets(batch).blocks == [
        ("a", items[:1]),
        ("b", []),
        ("a", items[1:]),
    ]
    groups = {"a": [("t", 0, -1), ("t", 1, 17)], "b": []}
    data = oc.encode_delete_group_offsets(oc.REASON_EXPIRE, groups)
    assert data[0] == oc.DELETE_GROUP_OFFSETS == ord("o")
    assert oc.decode_delete_group_offsets(data) == oc.DeleteGroupOffsetsCmd(1, groups)


@pytest.mark.parametrize("cut", [1, 3, 10, -1])
def test_malformed_entries_are_refused_and_never_crash_apply(cut):
    data = oc.encode_commit_group_offsets("g", [_item(md="meta")])
    with pytest.raises(ValueError):
        oc.decode_commit_group_offsets(data[:cut])
    with pytest.raises(ValueError):
        oc.decode_commit_group_offsets(data + b"x")  # trailing bytes
    table = GroupOffsetTable()
    assert table.apply_commit(data[:cut], 5, _has()) == []
    assert table.apply_delete(b"o\x00\xff", 6) == 0
    assert len(table) == 0
    with pytest.raises(ValueError, match="65535"):
        oc.encode_commit_group_offsets("g" * 70_000, [])


# ------------------------------------------------------------------- apply


def test_apply_stores_known_partitions_only():
    table = GroupOffsetTable()
    data = oc.encode_commit_group_offsets(
        "g", [_item(p=0, off=3, epoch=4, md="m"), _item("nope", 0), _item(p=9)]
    )
    (codes,) = table.apply_commit(data, 11, _has())
    assert codes == [
        ErrorCode.none,
        ErrorCode.unknown_topic_or_partition,
        ErrorCode.unknown_topic_or_partition,
    ]
    c = table.get("g", "t", 0)
    assert (c.offset, c.leader_epoch, c.metadata, c.commit_ms, c.index) == (3, 4, "m", T0, 11)
    assert table.partitions("g") == [("t", 0)] and table.has_group("g")
    # a group whose every item was refused is not created
    table.apply_commit(oc.encode_commit_group_offsets("h", [_item("x")]), 12, _has())
    assert not table.has_group("h") and table.groups() == ["g"]


def test_conditional_delete_never_erases_a_newer_commit():
    table = GroupOffsetTable()
    table.apply_commit(oc.encode_commit_group_offsets("g", [_item(p=0), _item(p=1)]), 5, _has())
    table.apply_commit(oc.encode_commit_group_offsets("g", [_item(p=1, off=8)]), 6, _has())
    # expiry decided on the commits at index 5 (partition 1 was re-committed since)
    gone = table.apply_delete(
        oc.encode_delete_group_offsets(oc.REASON_EXPIRE, {"g": [("t", 0, 5), ("t", 1, 5)]}), 7
    )
    assert gone == 1
    assert table.get("g", "t", 0) is None and table.get("g", "t", 1).offset == 8
    # unconditional (OffsetDelete) removes it; the emptied group goes with it
    table.apply_delete(oc.encode_delete_group_offsets(0, {"g": [("t", 1, -1)]}), 8)
    assert not table.has_group("g") and len(table) == 0


def test_delete_group_and_drop_topic():
    table = GroupOffsetTable()
    has = _has(("t", "u"))
    table.apply_commit(oc.encode_commit_group_offsets("a", [_item(), _item("u")]), 1, has)
    table.apply_commit(oc.encode_commit_group_offsets("b", [_item("u")]), 2, has)
    table.drop_topic("u")
    assert table.groups() == ["a"] and table.partitions("a") == [("t", 0)]
    assert table.delete_group("a") and not table.delete_group("a") and len(table) == 0


# ------------------------------------------------------------------ expiry


def _table_with(*commits):
    table = GroupOffsetTable()
    for i, (group, item) in enumerate(commits, 1):
        table.apply_commit(oc.encode_commit_group_offsets(group, [item]), i, _has())
    return table


def test_expiry_of_groups_the_coordinator_does_not_know():
    table = _table_with(("simple", _item(p=0, commit=T0)), ("simple", _item(p=1, commit=T0 + DAY)))
    ret = 7 * DAY
    assert table.expired(T0 + ret - 1, ret, NO_GROUPS.status) == {}
    assert table.expired(T0 + ret, ret, NO_GROUPS.status) == {"simple": [("t", 0, 1)]}
    assert table.expired(T0 + ret + DAY, ret, NO_GROUPS.status) == {
        "simple": [("t", 0, 1), ("t", 1, 2)]
    }


def test_expiry_follows_the_group_state():
    ret = DAY
    table = _table_with(
        ("empty", _item(commit=T0)),
        ("active", _item(p=0, commit=T0)),
        ("active", _item("t", 1, commit=T0)),
        ("unknown-sub", _item(commit=T0)),
        ("explicit", _item(commit=T0, expire=T0 + 10)),
    )
    status = {
        "empty": GroupStatus(True, empty_since_ms=T0 + DAY),
        "active": GroupStatus(False, subscribed=frozenset({"other"})),
        "unknown-sub": GroupStatus(False),
        "explicit": GroupStatus(True, empty_since_ms=T0),
    }
    now = T0 + DAY + 5
    due = table.expired(now, ret, status.get)
    # empty: retention counts from when it became empty (T0 + DAY): not yet
    # active, topic not subscribed: by commit time; unknown subscription: never
    # explicit expire_ms (OffsetCommit v2-v4 retention_time): due at T0 + 10
    assert due == {"active": [("t", 0, 2), ("t", 1, 3)], "explicit": [("t", 0, 5)]}
    due = table.expired(T0 + 2 * DAY, ret, status.get)
    assert set(due) == {"empty", "active", "explicit"}
    subscribed = {**status, "active": GroupStatus(False, subscribed=frozenset({"t"}))}
    assert "active" not in table.expired(T0 + 9 * DAY, ret, subscribed.get)
    assert sum(map(len, table.expired(T0 + 9 * DAY, ret, status.get, limit=2).values())) == 2


# --------------------------------------------------------------- the service


class _Log:
    """A leader's log for the service: apply at once, or fail like RaftNode.apply."""

    def __init__(self, fsm: SinkStateMachine) -> None:
        self.fsm = fsm
        self.index = 0
        self.fail: Exception | None = None

    async def propose(self, data: bytes) -> ApplyResult:
        if self.fail is not None:
            raise self.fail
        self.index += 1
        e = LogEntry(self.index, 1, EntryType.DATA, data)
        return ApplyResult(e.index, 1, self.fsm.on_apply([e])[0])


def _service(now: list[int], ready=lambda: True, **opts):
    fsm = SinkStateMachine()
    log = _Log(fsm)
    log.index = 1
    fsm.on_apply(
        [LogEntry(1, 1, EntryType.DATA, commands.encode_create_topic("t", 2, uuid.uuid4()))]
    )
    svc = GroupOffsetService(
        lambda: fsm.group_offsets,
        log.propose,
        ready=ready,
        options=OffsetsOptions(**opts),
        clock_ms=lambda: now[0],
    )
    return svc, log, fsm


def test_service_commit_answers_after_apply_and_maps_write_errors():
    now = [T0]
    svc, log, _fsm = _service(now)
    items = [("t", 0, 7, 3, "m", -1, -1), ("t", 1, 9, -1, None, T0 - 5, -1)]
    codes = asyncio.run(svc.commit_offsets("g", items, retention_ms=1000))
    assert codes == [ErrorCode.none, ErrorCode.none]
    c0, c1 = svc.committed_offset("g", "t", 0), svc.committed_offset("g", "t", 1)
    assert (c0.offset, c0.leader_epoch, c0.metadata, c0.commit_ms, c0.expire_ms) == (
        7,
        3,
        "m",
        T0,
        T0 + 1000,
    )
    assert (c1.metadata, c1.commit_ms) == (None, T0 - 5)  # v1's client commit time kept
    for exc, code in [
        (NotLeaderError(2, None), ErrorCode.not_coordinator),
        (LeaderChangedError(), ErrorCode.not_coordinator),
        (ProposalTimeoutError(), ErrorCode.coordinator_not_available),
    ]:
        log.fail = exc
        assert asyncio.run(svc.commit_offsets("g", items)) == code
        assert asyncio.run(svc.delete_offsets("g", [("t", 0)])) == code
    assert svc.committed_offset("g", "t", 0).offset == 7  # nothing changed


def test_commits_arriving_together_share_one_entry():
    """Requests in one event-loop turn: one entry, one block each (in arrival order: the
    same group's later request wins), each answered with its own codes."""
    now = [T0]
    svc, log, fsm = _service(now)

    async def burst(n: int):
        calls = [
            svc.commit_offsets(
                f"g{i % 3}", [("t", 0, i, -1, "", -1, -1), ("t", 5, 1, -1, "", -1, -1)]
            )
            for i in range(n)
        ]
        return await asyncio.gather(*calls)

    before = log.index
    answers = asyncio.run(burst(30))
    assert log.index == before + 1  # one log entry for 30 requests
    assert answers == [[ErrorCode.none, ErrorCode.unknown_topic_or_partition]] * 30
    assert [fsm.group_offsets.get(f"g{k}", "t", 0).offset for k in range(3)] == [27, 28, 29]
    assert (svc.commit_requests, svc.commit_entries) == (30, 1)
    # a failed entry fails every request in it
    log.fail = NotLeaderError(2, None)
    assert asyncio.run(burst(4)) == [ErrorCode.not_coordinator] * 4
    # the size cap starts a new entry
    log.fail = None
    svc.max_batch_bytes = 200
    before = log.index
    answers = asyncio.run(burst(6))
    assert all(a == [ErrorCode.none, ErrorCode.unknown_topic_or_partition] for a in answers)
    assert log.index - before >= 3


def test_service_expiry_runs_through_the_log_on_a_ready_leader_only():
    now = [T0]
    ready = [False]
    svc, log, _fsm = _service(now, ready=lambda: ready[0], retention_minutes=60)
    asyncio.run(svc.commit_offsets("g", [("t", 0, 1, -1, "", -1, -1)]))
    now[0] += 3_600_000
    assert asyncio.run(svc.expire_once()) == 0  # a follower (or unready leader) never expires
    ready[0] = True
    before = log.index
    assert asyncio.run(svc.expire_once()) == 1 and log.index == before + 1
    assert not svc.has_group("g") and svc.expired_total == 1
    assert asyncio.run(svc.expire_once()) == 0 and log.index == before + 1  # nothing due: no entry


def test_service_expiry_loop_runs_on_its_interval():
    now = [T0 + 10 * DAY]

    async def run() -> bool:
        svc, _log, _fsm = _service(now, retention_check_interval_ms=10)
        await svc.commit_offsets("g", [("t", 0, 1, -1, "", T0, -1)])
        svc.start()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 30
        while svc.has_group("g") and loop.time() < deadline:
            await asyncio.sleep(0.01)
        await svc.stop()
        return svc.has_group("g")

    assert asyncio.run(run()) is False


@pytest.mark.parametrize(
    "field, value",
    [
        ("retention_minutes", 0),
        ("retention_check_interval_ms", 0),
        ("metadata_max_bytes", -1),
        ("expire_batch", 0),
    ],
)
def test_offsets_options_refuse_bad_values(field, value):
    with pytest.raises(ValueError, match=f"offsets.{field}"):
        OffsetsOptions(**{field: value})


# ---------------------------------------------------- snapshot == live replay


def _random_log(rng: random.Random, n: int) -> list[LogEntry]:
    """A log mixing topics, produce entries in rising terms, commits, deletes, expiry."""
    entries: list[LogEntry] = []
    term = 1
    topics = ["a", "b"]

    def add(data: bytes) -> None:
        entries.append(LogEntry(len(entries) + 1, term, EntryType.DATA, data))

    for t in topics:
        add(commands.encode_create_topic(t, 3, uuid.UUID(int=rng.randrange(1 << 64))))
    groups = [f"g{i}" for i in range(6)]
    while len(entries) < n:
        if rng.random() < 0.05:
            term += rng.randint(1, 3)
        r = rng.random()
        topic, part = rng.choice([*topics, "gone"]), rng.randrange(4)
        if r < 0.35:
            batch = make_batch([b"x"] * rng.randint(1, 4))
            add(commands.encode_produce(topic, part, -1, -1, -1, batch))
        elif r < 0.75:
            items = [
                _item(
                    rng.choice([*topics, "gone"]),
                    rng.randrange(4),
                    rng.randrange(1000),
                    rng.randrange(-1, term + 1),
                    rng.choice([None, "", "meta", "ü" * rng.randrange(5)]),
                    T0 + rng.randrange(DAY),
                    rng.choice([-1, T0 + DAY]),
                )
                for _ in range(rng.randint(1, 4))
            ]
            add(oc.encode_commit_group_offsets(rng.choice(groups), items))
        else:
            victims = {
                rng.choice(groups): [
                    (rng.choice(topics), rng.randrange(3), rng.choice([-1, rng.randrange(n)]))
                    for _ in range(rng.randint(1, 3))
                ]
            }
            add(oc.encode_delete_group_offsets(rng.randrange(2), victims))
    return entries


def _state(fsm: SinkStateMachine) -> dict:
    return json.loads(zlib.decompress(fsm.on_snapshot_save()))


@pytest.mark.parametrize("run", range(5))
def test_state_rebuilt_from_snapshot_and_replay_equals_the_live_state(run):
    seed = int(os.environ.get("RAFTSINK_OFFSETS_SEED", random.randrange(2**32))) + run
    print(f"seed={seed}")
    rng = random.Random(seed)
    entries = _random_log(rng, 400)
    live = SinkStateMachine()
    for e in entries:  # live: one entry at a time, as a leader applies them
        live.on_apply([e])
    cut = rng.randrange(1, len(entries))
    early = SinkStateMachine()
    early.on_apply(entries[:cut])
    rebuilt = SinkStateMachine()
    rebuilt.on_snapshot_load(early.on_snapshot_save())
    rebuilt.on_apply(entries[cut:])  # replay after the snapshot, in one batch
    assert rebuilt.group_offsets == live.group_offsets, f"seed={seed} cut={cut}"
    assert rebuilt.epochs == live.epochs, f"seed={seed} cut={cut}"
    assert _state(rebuilt) == _state(live), f"seed={seed} cut={cut}"
    assert len(live.group_offsets) > 0  # the run exercised the table


def test_snapshot_without_the_new_keys_still_loads():
    fsm = SinkStateMachine()
    state = _state(fsm)
    del state["group_offsets"], state["epochs"]
    old = zlib.compress(json.dumps(state).encode())
    fsm.on_snapshot_load(old)
    assert len(fsm.group_offsets) == 0 and fsm.epochs == EpochTable()


# ------------------------------------------------------------------- memory


def test_thousands_of_groups_stay_small_and_expiry_frees_them():
    """5,000 groups x 4 partitions: bounded bytes per offset (topics interned, one
    tuple per offset), the snapshot grows linearly, and expiry empties the table."""
    has = _has(("topic-with-a-long-name",), 4)
    gc.collect()
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    table = GroupOffsetTable()
    for g in range(5_000):
        items = [_item("topic-with-a-long-name", p, 10 * g + p, 3, "") for p in range(4)]
        table.apply_commit(oc.encode_commit_group_offsets(f"group-{g:05d}", items), g + 1, has)
    used = tracemalloc.get_traced_memory()[0] - base
    tracemalloc.stop()
    assert len(table) == 20_000 and len(table.groups()) == 5_000
    per_offset = used / 20_000
    print(f"bytes per committed offset: {per_offset:.0f}")
    # About 300 alone; up to ~490 seen inside the whole unit suite (other tests' objects
    # freed and reallocated while tracing): the bound catches a doubling, not noise.
    assert per_offset < 600, per_offset
    snap = json.dumps(table.to_json())
    assert len(snap) / 20_000 < 120
    due = table.expired(T0 + 8 * DAY, 7 * DAY, NO_GROUPS.status, limit=100_000)
    table.apply_delete(oc.encode_delete_group_offsets(oc.REASON_EXPIRE, due), 10**6)
    assert len(table) == 0 and table.groups() == []


# -------------------------------------------------------------------- epochs


def test_epoch_table_answers_like_kafkas_leader_epoch_cache():
    e = EpochTable()
    for term, base in [(2, 0), (2, 5), (4, 10), (4, 12), (7, 20), (3, 99)]:
        e.note("t", 0, term, base)  # same or older term: no new row
    assert e.terms("t", 0) == [(2, 0), (4, 10), (7, 20)]
    current, end = 9, 30
    assert e.end_offset_for("t", 0, 9, current, end) == (9, 30)  # the current term: log end
    assert e.end_offset_for("t", 0, 7, current, end) == (7, 30)  # last term with data
    assert e.end_offset_for("t", 0, 8, current, end) == (7, 30)  # no data in 8: floor 7
    assert e.end_offset_for("t", 0, 4, current, end) == (4, 20)
    assert e.end_offset_for("t", 0, 3, current, end) == (2, 10)  # floor 2, ends where 4 began
    assert e.end_offset_for("t", 0, 1, current, end) == (1, 0)  # before any: first start
    assert e.end_offset_for("t", 0, -1, current, end) == (-1, -1)
    assert e.end_offset_for("t", 0, 10, current, end) == (-1, -1)  # above the current term
    assert e.end_offset_for("t", 1, 5, current, 0) == (5, 0)  # a partition without data
    assert [e.epoch_of("t", 0, o) for o in (0, 9, 10, 25)] == [2, 2, 4, 7]
    e.trim_below("t", 0, 15)
    assert e.terms("t", 0) == [(4, 10), (7, 20)]
    assert EpochTable.from_json(json.loads(json.dumps(e.to_json()))) == e


def test_applied_produce_entries_fill_the_epoch_rows():
    fsm = SinkStateMachine()
    idx = [0]

    def apply(data: bytes, term: int):
        idx[0] += 1
        return fsm.on_apply([LogEntry(idx[0], term, EntryType.DATA, data)])[0]

    apply(commands.encode_create_topic("t", 1, uuid.uuid4()), 1)
    for term, n in [(1, 2), (1, 1), (3, 4), (5, 1)]:
        apply(commands.encode_produce("t", 0, -1, -1, -1, make_batch([b"r"] * n)), term)
    assert fsm.epochs.terms("t", 0) == [(1, 0), (3, 3), (5, 7)]


# ----------------------------------------------------------------- placement


def test_coordinator_slot_is_kafkas_partition_for():
    assert [java_string_hash(s) for s in ("", "a", "hello")] == [0, 97, 99162322]
    assert java_string_hash("\U0001f600") == 0xD83D * 31 + 0xDE00  # UTF-16 surrogates
    assert java_string_hash("polygenelubricants") == -(2**31)  # Utils.abs -> 0
    assert coordinator_slot("polygenelubricants") == 0
    assert coordinator_slot("hello") == 99162322 % 50 == 22
    assert (
        coordinator_slot("console-consumer-1") == abs(java_string_hash("console-consumer-1")) % 50
    )
    rng = random.Random(7)
    for _ in range(200):
        g = "".join(rng.choice("abcXYZ-_.é😀") for _ in range(rng.randrange(30)))
        assert 0 <= coordinator_slot(g) < COORDINATOR_SLOTS
    with pytest.raises(ValueError):
        coordinator_slot("g", slots=0)


def test_coordinator_node_is_the_raft_leader_today():
    class Lead:
        def __init__(self, lead: int) -> None:
            self.lead = lead

        def leader_id(self) -> int:
            return self.lead

    assert coordinator_node(coordinator_slot("g"), Lead(2)) == 2
    assert coordinates("g", 2, Lead(2)) and not coordinates("g", 1, Lead(2))
    assert not coordinates("g", 1, Lead(-1))  # leaderless: nobody coordinates
    with pytest.raises(ValueError):
        coordinator_node(COORDINATOR_SLOTS, Lead(1))


def test_offsets_settings_load_and_bad_ones_name_the_key():
    from sink.config import ConfigError, load_config
    from tests.unit.test_config import BASE

    cfg = load_config(None, env={"RAFTSINK_OFFSETS_RETENTION_MINUTES": "60"}, overrides=BASE)
    assert cfg.offsets.retention_ms == 3_600_000 and cfg.offsets.metadata_max_bytes == 4096
    with pytest.raises(ConfigError, match=r"offsets\.retention_minutes must be >= 1, got 0"):
        load_config(None, env={}, overrides={**BASE, "offsets.retention_minutes": 0})
    with pytest.raises(ConfigError, match=r"offsets\.metadata_max_bytes"):
        load_config(None, env={}, overrides={**BASE, "offsets.metadata_max_bytes": "big"})


def test_a_delete_after_a_commit_in_the_same_turn_applies_after_it():
    """Pipelined OffsetCommit then OffsetDelete: the log keeps their order (the commit's
    batch is flushed first), so the offset ends deleted."""
    now = [T0]
    svc, log, fsm = _service(now)
    applied: list[bytes] = []
    propose = log.propose

    async def record(data: bytes) -> ApplyResult:
        applied.append(data[:1])
        return await propose(data)

    svc._propose = record

    async def both():
        commit = asyncio.ensure_future(svc.commit_offsets("g", [("t", 0, 3, -1, "", -1, -1)]))
        await asyncio.sleep(0)  # the commit's request is handled first
        delete = asyncio.ensure_future(svc.delete_offsets("g", [("t", 0)]))
        return await asyncio.gather(commit, delete)

    assert asyncio.run(both()) == [[ErrorCode.none], ErrorCode.none]
    assert applied == [b"O", b"o"]
    assert fsm.group_offsets.get("g", "t", 0) is None


def test_applied_delete_groups_deletes_their_committed_offsets():
    """Kafka's DeleteGroups removes the group and its offsets: the state machine's
    DELETE_GROUPS entry drops both, and leaves other groups alone."""
    from sink.groups import records as group_records

    fsm = SinkStateMachine()
    log = []

    def apply(data: bytes):
        log.append(LogEntry(len(log) + 1, 1, EntryType.DATA, data))
        return fsm.on_apply([log[-1]])[0]

    apply(commands.encode_create_topic("t", 2, uuid.uuid4()))
    for g in ("gone", "kept"):
        apply(oc.encode_commit_group_offsets(g, [_item(p=0, off=7)]))
    assert fsm.group_offsets.get("gone", "t", 0).offset == 7
    apply(group_records.encode_delete(["gone"]))
    assert fsm.group_offsets.get("gone", "t", 0) is None and not fsm.group_offsets.has_group("gone")
    assert fsm.group_offsets.get("kept", "t", 0).offset == 7
