"""DataGroupMachine: a data group's state machine, fed only data-group commands.

Apply, reads, idempotent producers per partition, retention with the group's own
config copy and pipelines, SERVE / DROP / CONFIGS, snapshot save/load (and snapshot +
replay = live state), and agreement with the single group's data part."""

from __future__ import annotations

import json
import os
import random
import struct
import uuid
import zlib

import pytest
from crc32c import crc32c

from raftlog.entry import EntryType, LogEntry
from sink.state import SinkStateMachine, admin_commands, commands
from sink.state import data_commands as dcmd
from sink.state.data_group import DataGroupMachine
from sink.topics.configs import TopicDefaults
from tests.unit.sink.batches import make_batch

T = uuid.UUID(int=0xA1)
U = uuid.UUID(int=0xB2)
NOW = 1_800_000_000_000


def batch_at(ts: int, n: int = 1, **kw) -> bytes:
    """A valid batch of n records whose header's maxTimestamp is ts."""
    b = bytearray(make_batch([b"v" * 40] * n, **kw))
    struct.pack_into(">q", b, 35, ts)
    struct.pack_into(">I", b, 17, crc32c(bytes(b[21:])))
    return bytes(b)


class Group:
    """A DataGroupMachine over an in-memory log (entries applied one at a time)."""

    def __init__(self, parts=((T, 0, "t"),), configs=None) -> None:
        self.fsm = DataGroupMachine(group_id=7)
        self.entries: list[LogEntry] = []
        self.first = 1
        self.fsm.attach_log(self.read, lambda: self.first)
        if parts:
            assert self.apply(dcmd.encode_serve(list(parts), configs or {}))[0] == 0

    def apply(self, data: bytes, term: int = 1):
        e = LogEntry(len(self.entries) + 1, term, EntryType.DATA, data)
        self.entries.append(e)
        return self.fsm.on_apply([e])[0]

    def read(self, start: int, max_count: int, max_bytes: int) -> list[LogEntry]:
        from raftlog.storage.errors import LogRangeError

        if start < self.first:
            raise LogRangeError(start)
        return self.entries[start - 1 : start - 1 + max_count]

    def produce(self, batch: bytes, topic=T, partition=0, pid=-1, epoch=-1, seq=-1, term=1):
        return self.apply(dcmd.encode_produce_to(topic, partition, pid, epoch, seq, batch), term)


def _state(fsm) -> dict:
    return json.loads(zlib.decompress(fsm.on_snapshot_save()))


def test_produce_assigns_dense_offsets_and_reads_back_patched_batches():
    g = Group()
    r1 = g.produce(make_batch([b"a", b"b", b"c"]))
    r2 = g.produce(make_batch([b"d"]), term=4)
    assert [(int(r.error), r.base_offset) for r in (r1, r2)] == [(0, 0), (0, 3)]
    assert g.fsm.high_watermark(T, 0) == 4 and g.fsm.log_start_offset(T, 0) == 0
    got = g.fsm.read(T, 0, 1, 1 << 20)
    assert [b for b, _ in got] == [0, 3]
    assert struct.unpack_from(">qii", got[1][1])[0::2] == (3, 4)  # base offset, epoch = term
    assert g.fsm.end_offset_for(T, 0, 1, 4) == (1, 3)  # epoch 1 ends where term 4 starts
    assert g.fsm.partitions() == [(T, 0)] and g.fsm.topic_name(T) == "t"


def test_writes_for_partitions_the_group_does_not_host_are_refused():
    g = Group()
    assert int(g.produce(make_batch([b"x"]), partition=1).error) == 3
    assert int(g.produce(make_batch([b"x"]), topic=U).error) == 3
    assert int(g.apply(dcmd.encode_delete_records_at(U, 0, 0)).error) == 3
    assert g.apply(dcmd.encode_pipeline_commit("p", [(U, 0, 1)])) == 0
    assert g.fsm.high_watermark(T, 0) == 0
    with pytest.raises(KeyError):
        g.fsm.high_watermark(U, 0)


def test_idempotent_producer_dedupe_and_sequence_checks_are_per_partition():
    g = Group(parts=[(T, 0, "t"), (T, 1, "t")])

    def send(partition, seq, n=2, epoch=0):
        b = make_batch([b"r"] * n, producer_id=5, epoch=epoch, base_sequence=seq)
        return g.produce(b, partition=partition, pid=5, epoch=epoch, seq=seq)

    assert send(0, 0).base_offset == 0 and send(0, 2).base_offset == 2
    # The same pid starts at sequence 0 in partition 1: its own sequence space.
    assert send(1, 0).base_offset == 0
    dup = send(0, 0)  # a retry of partition 0's first batch
    assert (int(dup.error), dup.base_offset, dup.duplicate) == (0, 0, True)
    assert g.fsm.high_watermark(T, 0) == 4  # not appended twice
    assert int(send(0, 7).error) == 45  # a gap: OUT_OF_ORDER_SEQUENCE_NUMBER
    assert int(send(1, 4).error) == 45  # partition 1 expects 2
    assert send(1, 2).base_offset == 2
    assert int(send(0, 3, epoch=1).error) == 45  # a new epoch starts at 0
    assert send(0, 0, epoch=1).base_offset == 4
    assert int(send(0, 4, epoch=0).error) == 47  # fenced: INVALID_PRODUCER_EPOCH
    assert g.fsm.active_producers(T, 0) == [(5, 1, 1)]
    assert g.fsm.active_producers(T, 1) == [(5, 0, 3)]
    # The leader's pre-check sees the same table.
    assert g.fsm.check_producer(T, 1, 5, 0, 2, 3).duplicate
    # Expiry forgets the producer in every partition; it may then start anew.
    assert g.apply(admin_commands.encode_expire_producers([(5, len(g.entries))])) == 2
    assert g.fsm.active_producers(T, 0) == []
    assert send(0, 9).base_offset == 6


def test_snapshot_round_trip_keeps_data_producers_configs_and_pipelines():
    g = Group(configs={T: {"retention.ms": "60000"}})
    b = make_batch([b"a"], producer_id=3, epoch=0, base_sequence=0)
    g.produce(b, pid=3, epoch=0, seq=0)
    g.apply(dcmd.encode_pipeline_commit("spark", [(T, 0, 1)]))
    copy = DataGroupMachine()
    copy.attach_log(g.read, lambda: g.first)
    copy.on_snapshot_load(g.fsm.on_snapshot_save())
    assert _state(copy) == _state(g.fsm)
    assert copy.applied_index == g.fsm.applied_index == 3
    assert copy.read(T, 0, 0, 1 << 20) == g.fsm.read(T, 0, 0, 1 << 20)
    assert copy.policy(T).retention_ms == 60000
    e = LogEntry(9, 1, EntryType.DATA, dcmd.encode_produce_to(T, 0, 3, 0, 0, b))
    assert copy.on_apply([e])[0].duplicate  # producer state survived


def test_a_controller_snapshot_is_not_a_data_group_snapshot():
    with pytest.raises(ValueError, match="not a data-group snapshot"):
        DataGroupMachine().on_snapshot_load(SinkStateMachine().on_snapshot_save())


def test_retention_uses_the_groups_configs_and_pipelines_hold_data():
    g = Group(configs={T: {"retention.ms": "60000", "raftsink.pipeline.hold.max.ms": "-1"}})
    for i in range(6):  # one batch a minute, the newest at NOW
        g.produce(batch_at(NOW - (5 - i) * 60_000))
    g.apply(dcmd.encode_pipeline_commit("spark", [(T, 0, 2)]))
    assert g.fsm.retention_floor_index() == 4 - 1  # offset 2's batch is entry 4
    limit, removed = g.fsm.apply_retention(NOW)
    assert (g.fsm.log_start_offset(T, 0), removed) == (2, 2)  # held at the pipeline
    assert limit == 3
    g.apply(dcmd.encode_pipeline_commit("spark", [(T, 0, 6)]))
    g.fsm.apply_retention(NOW)
    assert g.fsm.log_start_offset(T, 0) == 4  # keeps what is >= NOW - 60 s
    # A CONFIGS entry changes the policy: 10 minutes keeps everything that is left.
    assert g.apply(dcmd.encode_configs({T: {"retention.ms": "600000"}})) == 0
    assert g.fsm.policy(T).retention_ms == 600_000
    # The node's defaults apply where the topic has no override (not replicated).
    g.fsm.set_defaults(TopicDefaults(retention_bytes=1))
    assert g.fsm.policy(T).retention_bytes == 1
    g.fsm.apply_retention(NOW)
    assert g.fsm.log_start_offset(T, 0) == 5  # at least retention.bytes kept: the last


def test_delete_records_moves_the_log_start_never_back():
    g = Group()
    for _ in range(3):
        g.produce(make_batch([b"x", b"y"]))
    r = g.apply(dcmd.encode_delete_records_at(T, 0, 3))
    assert (int(r.error), r.low_watermark) == (0, 3)
    assert g.apply(dcmd.encode_delete_records_at(T, 0, 1)).low_watermark == 3
    assert int(g.apply(dcmd.encode_delete_records_at(T, 0, 9)).error) == 1  # OUT_OF_RANGE
    assert g.apply(dcmd.encode_delete_records_at(T, 0, -1)).low_watermark == 6
    assert g.fsm.read(T, 0, 6, 100) == []


def test_serve_is_idempotent_and_drop_forgets_everything_of_the_partition():
    g = Group(configs={T: {"retention.ms": "1000"}})
    g.produce(make_batch([b"a"]), pid=-1)
    b = make_batch([b"b"], producer_id=1, epoch=0, base_sequence=0)
    g.produce(b, pid=1, epoch=0, seq=0)
    # Serving again (a retried placement) keeps the data; a new partition starts empty.
    assert g.apply(dcmd.encode_serve([(T, 0, "t"), (U, 0, "u")], {})) == (0, 1)
    assert g.fsm.high_watermark(T, 0) == 2 and g.fsm.high_watermark(U, 0) == 0
    assert g.fsm.policy(T).retention_ms == 1000  # configs not named stay
    assert g.apply(dcmd.encode_drop([(T, 0)])) == 1
    assert g.apply(dcmd.encode_drop([(T, 0)])) == 0  # idempotent
    assert not g.fsm.hosts(T, 0) and g.fsm.topic_name(T) is None
    assert g.fsm.topic_name(U) == "u"
    state = _state(g.fsm)
    assert T.hex not in json.dumps(state)  # no row of the dropped partition is left
    # Served again, the partition starts empty, with no producer state and defaults.
    g.apply(dcmd.encode_serve([(T, 0, "t")], {}))
    assert g.fsm.high_watermark(T, 0) == 0 and g.fsm.policy(T).retention_ms != 1000
    assert g.produce(b, pid=1, epoch=0, seq=0).duplicate is False


def test_invalid_configs_change_nothing():
    g = Group()
    assert g.apply(dcmd.encode_serve([(U, 0, "u")], {U: {"retention.ms": "soon"}})) == (40, 0)
    assert not g.fsm.hosts(U, 0)
    assert int(g.apply(dcmd.encode_configs({T: {"no.such.config": "1"}}))) == 40
    assert g.fsm.configs.overrides(T.hex) == {}


def test_foreign_or_unreadable_entries_are_answered_none_never_fatal():
    g = Group()
    out = [
        g.apply(commands.encode_create_topic("t", 1, U)),  # a controller command
        g.apply(commands.encode_produce("t", 0, -1, -1, -1, make_batch([b"x"]))),
        g.apply(b"v{broken"),
        g.apply(b""),
    ]
    assert out == [None, None, None, None]
    assert int(g.apply(b"p\x00").error) == 3
    assert g.fsm.applied_index == 6 and g.fsm.high_watermark(T, 0) == 0


def test_the_data_group_and_the_single_group_hold_the_same_data_state():
    """The same writes, by id, to a DataGroupMachine and to a SinkStateMachine: their
    data parts are equal (one code path, PartitionData)."""
    g = Group()
    single = SinkStateMachine()
    entries = [LogEntry(1, 1, EntryType.DATA, commands.encode_create_topic("t", 1, T))]
    for i in range(5):
        b = make_batch([b"r"] * 3, producer_id=2, epoch=0, base_sequence=3 * i)
        entries.append(
            LogEntry(i + 2, 1 + i, EntryType.DATA, dcmd.encode_produce_to(T, 0, 2, 0, 3 * i, b))
        )
    entries.append(LogEntry(7, 5, EntryType.DATA, dcmd.encode_delete_records_at(T, 0, 4)))
    entries.append(LogEntry(8, 5, EntryType.DATA, dcmd.encode_pipeline_commit("p", [(T, 0, 9)])))
    single.on_apply(entries)
    g.fsm.on_apply(entries[1:])
    assert g.fsm.data.to_json() == single.data.to_json()
    assert g.fsm.data.to_json()["parts"][0][2]["next"] == 15


def _random_group_log(rng: random.Random, n: int) -> list[bytes]:
    out = [dcmd.encode_serve([(T, 0, "t"), (T, 1, "t")], {T: {"retention.ms": "1000"}})]
    seqs: dict[tuple[int, int], int] = {}
    last: dict[tuple[int, int], bytes] = {}
    for _ in range(n):
        r, p = rng.random(), rng.randrange(2)
        if r < 0.75:
            pid = rng.choice([-1, 4, 8])
            if pid >= 0 and (pid, p) in last and rng.random() < 0.15:
                out.append(last[(pid, p)])  # a retry of the last batch: a duplicate
                continue
            seq = seqs.get((pid, p), 0)
            if pid >= 0 and rng.random() < 0.1:
                seq += rng.randrange(1, 4)  # a gap: OUT_OF_ORDER_SEQUENCE_NUMBER
            cnt = rng.randrange(1, 4)
            epoch = 0 if pid >= 0 else -1
            b = batch_at(
                rng.randrange(NOW - 10_000, NOW),
                cnt,
                producer_id=pid,
                epoch=epoch,
                base_sequence=seq if pid >= 0 else -1,
            )
            data = dcmd.encode_produce_to(T, p, pid, epoch, seq if pid >= 0 else -1, b)
            out.append(data)
            if pid >= 0 and seq == seqs.get((pid, p), 0):
                seqs[(pid, p)] = seq + cnt
                last[(pid, p)] = data
        elif r < 0.85:
            out.append(dcmd.encode_pipeline_commit("s", [(T, p, rng.randrange(20))]))
        elif r < 0.9:
            out.append(dcmd.encode_delete_records_at(T, p, rng.randrange(-1, 6)))
        elif r < 0.94:
            out.append(dcmd.encode_configs({T: {"retention.ms": str(rng.randrange(1, 9000))}}))
        elif r < 0.97:
            out.append(admin_commands.encode_expire_producers([(4, rng.randrange(n))]))
        else:
            out.append(
                dcmd.encode_serve([(U, p, "u")], {})
                if rng.random() < 0.5
                else dcmd.encode_drop([(U, p)])
            )
    return out


@pytest.mark.parametrize("run", range(4))
def test_snapshot_plus_replay_equals_the_live_state(run):
    seed = int(os.environ.get("RAFTSINK_DATA_GROUP_SEED", random.randrange(2**32))) + run
    print(f"seed={seed}")
    rng = random.Random(seed)
    datas = _random_group_log(rng, 300)
    entries = [LogEntry(i + 1, 1 + i // 50, EntryType.DATA, d) for i, d in enumerate(datas)]
    live = DataGroupMachine()
    live_results = [live.on_apply([e])[0] for e in entries]
    cut = rng.randrange(1, len(entries))
    early = DataGroupMachine()
    early.on_apply(entries[:cut])
    rebuilt = DataGroupMachine()
    rebuilt.on_snapshot_load(early.on_snapshot_save())
    assert rebuilt.on_apply(entries[cut:]) == live_results[cut:], f"seed={seed} cut={cut}"
    assert _state(rebuilt) == _state(live), f"seed={seed} cut={cut}"
    # The run exercised idempotence: some duplicates and some sequence errors.
    produced = [r for r in live_results if hasattr(r, "duplicate")]
    assert any(r.duplicate for r in produced), f"seed={seed}"
    assert any(int(r.error) == 45 for r in produced), f"seed={seed}"


def test_command_encodings_round_trip_and_tags_are_unique():
    from sink.groups import records as group_records
    from sink.state import acls, members, offset_command, quota_command, users
    from sink.topics import state as topic_state

    b = make_batch([b"x"])
    data = dcmd.encode_produce_to(T, 3, 9, 1, 5, b)
    assert dcmd.decode_produce_to(data) == (T, 3, 9, 1, 5)
    assert data[dcmd.PRODUCE_TO_HEADER :] == b
    assert commands.produce_batch_offset(data) == dcmd.PRODUCE_TO_HEADER
    assert dcmd.decode_delete_records_at(dcmd.encode_delete_records_at(T, 2, -1)) == (T, 2, -1)
    c = dcmd.decode_pipeline_commit(dcmd.encode_pipeline_commit("sp", [(T, 0, 4), (U, 1, 5)]))
    assert c == ("sp", [(T, 0, 4), (U, 1, 5)])
    s = dcmd.decode_serve(dcmd.encode_serve([(T, 0, "t")], {T: {"retention.ms": "5"}}))
    assert s == ([(T, 0, "t")], {T: {"retention.ms": "5"}})
    assert dcmd.decode_drop(dcmd.encode_drop([(U, 2)])) == [(U, 2)]
    assert dcmd.decode_configs(dcmd.encode_configs({U: {}})) == {U: {}}
    tags = [
        commands.PRODUCE, commands.CREATE_TOPIC, commands.ALLOC_PID, commands.COMMIT_OFFSETS,
        *admin_commands.TAGS, quota_command.ALTER_QUOTAS, offset_command.COMMIT_GROUP_OFFSETS,
        offset_command.DELETE_GROUP_OFFSETS, topic_state.ALTER_CONFIGS,
        topic_state.CREATE_TOPIC_WITH_CONFIGS, group_records.GROUP_GENERATION,
        group_records.DELETE_GROUPS, members.MEMBER_ADDRESSES, users.ALTER_USERS,
        acls.ALTER_ACLS, dcmd.PRODUCE_TO, dcmd.DELETE_RECORDS_AT, dcmd.PIPELINE_COMMIT,
        dcmd.SERVE, dcmd.DROP, dcmd.CONFIGS,
    ]  # fmt: skip
    assert len(tags) == len(set(tags)) == 24
