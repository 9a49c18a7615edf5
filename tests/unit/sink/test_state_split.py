"""SinkStateMachine = controller part + PartitionData: old snapshots load, the data part
is keyed by topic id (delete and re-create of a name never mixes the two topics), the
id-based data commands apply in the single group too, and snapshot + replay equals the
live state."""

from __future__ import annotations

import json
import os
import pathlib
import random
import uuid
import zlib

import pytest

from raftlog.entry import EntryType, LogEntry
from sink.state import SinkStateMachine, admin_commands, commands
from sink.state import data_commands as dcmd
from tests.unit.sink import state_scenario
from tests.unit.sink.batches import make_batch

V1_SNAPSHOT = pathlib.Path(__file__).parent / "data" / "v1_snapshot.bin"


def _state(fsm: SinkStateMachine) -> dict:
    return json.loads(zlib.decompress(fsm.on_snapshot_save()))


def _live() -> tuple[SinkStateMachine, state_scenario.ScenarioLog]:
    log = state_scenario.ScenarioLog(state_scenario.entries())
    fsm = SinkStateMachine()
    fsm.attach_log(log.read, lambda: log.first)
    fsm.on_apply(log.log)
    return fsm, log


def _observations(fsm: SinkStateMachine) -> dict:
    """Everything a client or a node can read of the state, by topic name."""
    out: dict = {"topics": fsm.topics(), "pipelines": fsm.pipelines}
    for name, info in fsm.topics().items():
        for p in range(info.partitions):
            start = fsm.log_start_offset(name, p)
            out[(name, p)] = (
                start,
                fsm.high_watermark(name, p),
                fsm.read(name, p, start, 1 << 20),
                fsm.offset_for_timestamp(name, p, 0),
                fsm.offset_for_timestamp(name, p, -3),
                fsm.partition_size(name, p),
                fsm.epochs.terms(name, p),
            )
    out["producers"] = sorted(
        (k, e.epoch, list(e.batches)) for k, e in fsm.producers.entries.items()
    )
    out["group_offsets"] = fsm.group_offsets.to_json()
    out["configs"] = fsm.topic_configs.to_json()
    out["floor"] = fsm.retention_floor_index()
    out["next_pid"] = fsm.next_producer_id
    return out


def test_a_v1_snapshot_saved_by_the_old_code_loads_as_the_live_state():
    """tests/unit/sink/data/v1_snapshot.bin: saved by 0ed6962 (before the split) after
    state_scenario's history. Loaded today it equals that history applied today."""
    old = json.loads(zlib.decompress(V1_SNAPSHOT.read_bytes()))
    assert old["v"] == 1 and old["parts"][0][:2] == ["a", 0]  # really the old format
    live, log = _live()
    loaded = SinkStateMachine()
    loaded.attach_log(log.read, lambda: log.first)
    loaded.on_snapshot_load(V1_SNAPSHOT.read_bytes())
    assert _observations(loaded) == _observations(live)
    assert _state(loaded) == _state(live)  # saved again: format 2, equal to the live one
    assert _state(loaded)["v"] == 2
    # Producer 1000's state survived the conversion: a retry is a duplicate.
    retry = make_batch([b"a3", b"b3"], producer_id=1000, epoch=0, base_sequence=6)
    e = LogEntry(100, 3, EntryType.DATA, commands.encode_produce("a", 0, 1000, 0, 6, retry))
    assert loaded.on_apply([e])[0].duplicate
    # The re-created "b" has the new id's rows only.
    assert loaded.epochs.terms("b", 0) == [(3, 0)]
    assert {k[1] for k in loaded.producers.entries} == {"a", "b"}


def test_format_2_round_trips_and_unknown_versions_are_refused():
    live, log = _live()
    copy = SinkStateMachine()
    copy.attach_log(log.read, lambda: log.first)
    copy.on_snapshot_load(live.on_snapshot_save())
    assert _observations(copy) == _observations(live)
    bad = _state(live)
    bad["v"] = 3
    with pytest.raises(ValueError, match="version 3"):
        copy.on_snapshot_load(zlib.compress(json.dumps(bad).encode()))


def test_data_rows_are_keyed_by_topic_id():
    live, _ = _live()
    state = _state(live)
    tids = {t[0] for t in state["parts"]}
    assert tids == {state_scenario.T1.hex, state_scenario.T2_AGAIN.hex}
    assert {row[1] for row in state["producers"]} <= tids
    assert live.key_of("b", 0) == (state_scenario.T2_AGAIN.hex, 0)
    assert live.key_of("nope", 0) is None


class Log:
    def __init__(self) -> None:
        self.fsm = SinkStateMachine()
        self.entries: list[LogEntry] = []
        self.fsm.attach_log(self.read, lambda: 1)

    def apply(self, data: bytes, term: int = 1):
        e = LogEntry(len(self.entries) + 1, term, EntryType.DATA, data)
        self.entries.append(e)
        return self.fsm.on_apply([e])[0]

    def read(self, start: int, max_count: int, max_bytes: int) -> list[LogEntry]:
        return self.entries[start - 1 : start - 1 + max_count]


def test_a_write_by_id_for_a_deleted_topic_never_lands_in_its_successor():
    log = Log()
    old, new = uuid.UUID(int=1), uuid.UUID(int=2)
    log.apply(commands.encode_create_topic("t", 1, old))
    b = make_batch([b"x"], producer_id=7, epoch=0, base_sequence=0)
    assert log.apply(dcmd.encode_produce_to(old, 0, 7, 0, 0, b)).base_offset == 0
    # Proposed for the old topic; the topic is deleted and re-created before they apply.
    late_produce = dcmd.encode_produce_to(old, 0, -1, -1, -1, make_batch([b"late"]))
    late_delete = dcmd.encode_delete_records_at(old, 0, -1)
    late_commit = dcmd.encode_pipeline_commit("spark", [(old, 0, 0)])
    assert int(log.apply(admin_commands.encode_delete_topic("t", old))) == 0
    log.apply(commands.encode_create_topic("t", 1, new))
    assert int(log.apply(late_produce).error) == 3  # UNKNOWN_TOPIC_OR_PARTITION
    assert int(log.apply(late_delete).error) == 3
    assert log.apply(late_commit) == 0 and log.fsm.pipelines == {"spark": {}}
    assert log.fsm.high_watermark("t", 0) == 0
    # Producer 7's state went with the old topic: sequence 0 again is new data, not a
    # duplicate of the old topic's batch.
    r = log.apply(dcmd.encode_produce_to(new, 0, 7, 0, 0, b))
    assert (int(r.error), r.base_offset, r.duplicate) == (0, 0, False)
    assert log.apply(dcmd.encode_produce_to(new, 0, 7, 0, 0, b)).duplicate
    assert log.fsm.read("t", 0, 0, 1 << 20)[0][1][61:] == b[61:]  # the same records


def test_id_commands_apply_in_the_single_group_as_their_name_twins():
    by_name, by_id = Log(), Log()
    tid = uuid.UUID(int=9)
    for log in (by_name, by_id):
        log.apply(commands.encode_create_topic("t", 2, tid))
    for i in range(4):  # sequences are per partition: 0, 0, 2, 2
        seq = 2 * (i // 2)
        b = make_batch([b"v%d" % i] * 2, producer_id=3, epoch=0, base_sequence=seq)
        r1 = by_name.apply(commands.encode_produce("t", i % 2, 3, 0, seq, b), term=1 + i)
        r2 = by_id.apply(dcmd.encode_produce_to(tid, i % 2, 3, 0, seq, b), term=1 + i)
        assert r1 == r2 and int(r1.error) == 0
    by_name.apply(admin_commands.encode_delete_records("t", 1, 1))
    by_id.apply(dcmd.encode_delete_records_at(tid, 1, 1))
    by_name.apply(commands.encode_commit_offsets("p", [("t", 0, 2), ("t", 1, 3)]))
    by_id.apply(dcmd.encode_pipeline_commit("p", [(tid, 0, 2), (tid, 1, 3)]))
    assert _state(by_name.fsm) == _state(by_id.fsm)
    assert by_id.fsm.high_watermark("t", 0) == 4 and by_id.fsm.log_start_offset("t", 1) == 1
    # The read side finds the batch inside both entry formats.
    assert by_id.fsm.read("t", 0, 0, 1 << 20) == by_name.fsm.read("t", 0, 0, 1 << 20)


def test_unreadable_id_commands_are_skipped_not_fatal():
    log = Log()
    log.apply(commands.encode_create_topic("t", 1, uuid.UUID(int=4)))
    assert int(log.apply(b"p\x00\x01").error) == 3
    assert log.apply(b"r\x00") is None and log.apply(b"c\x00\x05ab") is None
    assert log.fsm.applied_index == 4


def _random_history(rng: random.Random, n: int) -> list[LogEntry]:
    """Creates, deletes and re-creates, produce by name and by id, idempotent or not,
    DeleteRecords, pipeline commits, partitions added, producers expired."""
    out: list[LogEntry] = []
    live: dict[str, uuid.UUID] = {}
    seqs: dict[tuple[int, str, int], int] = {}

    def add(data: bytes) -> None:
        out.append(LogEntry(len(out) + 1, 1 + len(out) // 40, EntryType.DATA, data))

    for _ in range(n):
        r = rng.random()
        name = rng.choice("xyz")
        if name not in live or r < 0.04:
            if name in live:
                add(admin_commands.encode_delete_topic(name, live.pop(name)))
            live[name] = uuid.UUID(int=rng.getrandbits(128))
            add(commands.encode_create_topic(name, 2, live[name]))
            continue
        tid, p = live[name], rng.randrange(2)
        if r < 0.7:
            pid = rng.choice([-1, 5, 6])
            seq = seqs.get((pid, name, p), 0) if pid >= 0 else -1
            if pid >= 0 and rng.random() < 0.2:
                seq = max(seq - 1, 0)  # a retry (duplicate) or a gap
            cnt = rng.randrange(1, 4)
            b = make_batch(
                [b"r"] * cnt,
                producer_id=pid,
                epoch=0 if pid >= 0 else -1,
                base_sequence=seq,
                timestamps=[rng.randrange(10_000)] * cnt,
            )
            if pid >= 0:
                seqs[(pid, name, p)] = seq + cnt
            if rng.random() < 0.5:
                add(commands.encode_produce(name, p, pid, 0 if pid >= 0 else -1, seq, b))
            else:
                add(dcmd.encode_produce_to(tid, p, pid, 0 if pid >= 0 else -1, seq, b))
        elif r < 0.8:
            add(dcmd.encode_pipeline_commit("q", [(tid, p, rng.randrange(8))]))
        elif r < 0.9:
            add(admin_commands.encode_delete_records(name, p, rng.randrange(-1, 3)))
        elif r < 0.95:
            add(admin_commands.encode_expire_producers([(5, len(out))]))
        else:
            add(commands.encode_commit_offsets("q", [(name, p, rng.randrange(8))]))
    return out


@pytest.mark.parametrize("run", range(4))
def test_snapshot_plus_replay_equals_the_live_state(run):
    seed = int(os.environ.get("RAFTSINK_SPLIT_SEED", random.randrange(2**32))) + run
    print(f"seed={seed}")
    rng = random.Random(seed)
    entries = _random_history(rng, 300)
    live = SinkStateMachine()
    for e in entries:
        live.on_apply([e])
    cut = rng.randrange(1, len(entries))
    early = SinkStateMachine()
    early.on_apply(entries[:cut])
    rebuilt = SinkStateMachine()
    rebuilt.on_snapshot_load(early.on_snapshot_save())
    rebuilt.on_apply(entries[cut:])
    assert _state(rebuilt) == _state(live), f"seed={seed} cut={cut}"
    assert any(p[2]["next"] > 0 for p in _state(live)["parts"]), f"seed={seed}"


def test_topic_by_id_of_no_id_is_no_topic():
    """DeleteTopics may name neither a topic nor an id (the fuzzer sends it): no topic,
    never an AttributeError in the handler (test_kafka_fuzz, seed 1317737891)."""
    assert SinkStateMachine().topic_by_id(None) is None
