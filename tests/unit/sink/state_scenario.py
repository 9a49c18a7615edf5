"""A fixed, deterministic history of sink commands touching every part of the state
machine: topics with configs, plain and idempotent produce over several terms, a
pipeline commit, DeleteRecords, CreatePartitions, a topic deleted and re-created under
its name, consumer-group offsets, producer ids, quotas-free controller entries.

Only encoders that existed before the controller / data-group split are used, so
tests/unit/sink/data/make_v1_snapshot.py can run it against the old code (git show
0ed6962) and write the v1 snapshot that test_state_split.py loads with today's code.
"""

from __future__ import annotations

import uuid

from raftlog.entry import EntryType, LogEntry
from sink.state import admin_commands as acmd
from sink.state import commands as cmd
from sink.state import offset_command as oc
from sink.topics import state as topic_state
from tests.unit.sink.batches import make_batch

T1 = uuid.UUID(int=0x11)
T2 = uuid.UUID(int=0x22)
T2_AGAIN = uuid.UUID(int=0x23)  # "b" deleted, then re-created under the same name


def entries() -> list[LogEntry]:
    """The history as log entries (index from 1; terms 1, 2 and 3)."""
    datas: list[tuple[bytes, int]] = []

    def add(data: bytes, term: int = 1) -> None:
        datas.append((data, term))

    add(topic_state.encode_create("a", 2, T1, {"retention.ms": "86400000"}))
    add(cmd.encode_create_topic("b", 1, T2))
    add(cmd.encode_alloc_pid())
    for i in range(4):  # idempotent producer 1000 on a-0, sequences 0..7
        b = make_batch([b"a%d" % i, b"b%d" % i], producer_id=1000, epoch=0, base_sequence=2 * i)
        add(cmd.encode_produce("a", 0, 1000, 0, 2 * i, b), term=1 + i // 2)
    for i in range(3):  # plain batches on a-1 and b-0, with timestamps
        b = make_batch([b"x%d" % i], timestamps=[5000 + i])
        add(cmd.encode_produce("a", 1, -1, -1, -1, b), term=2)
        add(cmd.encode_produce("b", 0, -1, -1, -1, b), term=2)
    add(cmd.encode_commit_offsets("spark", [("a", 0, 3), ("a", 1, 1), ("b", 0, 2)]), term=2)
    add(acmd.encode_delete_records("a", 1, 1), term=2)
    add(acmd.encode_create_partitions("a", 3), term=3)
    add(cmd.encode_produce("a", 2, -1, -1, -1, make_batch([b"new"])), term=3)
    items = [oc.OffsetCommitItem("a", 0, 5, 1, "m", 7000), oc.OffsetCommitItem("b", 0, 1)]
    add(oc.encode_commit_group_offsets("g1", items), term=3)
    add(acmd.encode_delete_topic("b", T2), term=3)
    add(cmd.encode_create_topic("b", 1, T2_AGAIN), term=3)
    b = make_batch([b"again"], producer_id=1001, epoch=2, base_sequence=0)
    add(cmd.encode_produce("b", 0, 1001, 2, 0, b), term=3)
    add(cmd.encode_alloc_pid(), term=3)
    return [LogEntry(i + 1, t, EntryType.DATA, d) for i, (d, t) in enumerate(datas)]


class ScenarioLog:
    """The scenario's entries as the state machine's attached log reads them."""

    def __init__(self, log: list[LogEntry]) -> None:
        self.log = log
        self.first = 1

    def read(self, start: int, max_count: int, max_bytes: int) -> list[LogEntry]:
        from raftlog.storage.errors import LogRangeError

        if start < self.first or start > len(self.log):
            raise LogRangeError(start)
        out, size = [], 0
        for e in self.log[start - 1 : start - 1 + max_count]:
            out.append(e)
            size += len(e.data)
            if size >= max_bytes:
                break
        return out
