"""DataGroupMachine: the raftlog StateMachine of one data group (partition group).

A data group replicates the data of the partitions it hosts (by default one) and
nothing else: PartitionData (partition_data.py) plus what its apply needs from the
controller, which the controller puts into the group's own log (data_commands.py):

  SERVE    the (topic id, partition)s the group hosts, with their topics' names and
           config overrides: the controller's placement decision, applied idempotently
           (a hosted partition keeps its data; re-applying changes nothing)
  DROP     partitions the group stops hosting (their topic was deleted)
  CONFIGS  a topic's whole override set after AlterConfigs
  PRODUCE_TO, DELETE_RECORDS_AT, PIPELINE_COMMIT, EXPIRE_PRODUCERS: the data writes,
           naming the topic id, so a write for a deleted topic never lands in a topic
           re-created under its name.

Why configs live here too: retention runs on each replica's clock with the topic's
retention.ms / retention.bytes / pipeline hold limits, and the group's leader needs
message.timestamp.type and max.message.bytes before it proposes (policy()); reading
them from the group's own applied state needs no controller round trip and no topic
table. Applying a produce needs no config at all: a LogAppendTime stamp is written
into the batch by the proposing leader, so the entry carries it and every replica
applies the same bytes. A config change reaches a group through its log, so for a
moment a group may act on the previous configs; Kafka's brokers learn configs
asynchronously as well.

Invariants: names and configs are kept only for topics with a hosted partition (DROP
of a topic's last partition forgets them); every hosted partition's topic has a name;
apply never raises (an unreadable entry is logged and answered None or an error
code); state is a pure function of the log, so a snapshot plus the log after it
rebuilds exactly the live state (tests/unit/sink/test_data_group.py).
"""

from __future__ import annotations

import asyncio
import json
import logging
import struct
import uuid
import zlib
from collections.abc import Callable, Sequence
from typing import Any

from raftlog.entry import LogEntry
from raftlog.runtime import StateMachine
from sink.kafka.protocol.errors import ErrorCode
from sink.state import admin_commands as acmd
from sink.state import data_commands as dcmd
from sink.state import time_lookup
from sink.state.partition_data import (
    UNKNOWN_PARTITION,
    DeleteRecordsResult,
    PartitionData,
    PartKey,
    ProduceResult,
    ReadEntries,
    part_key,
)
from sink.state.producers import Verdict
from sink.topics.configs import TopicConfigError, TopicDefaults, TopicPolicy, validate_all
from sink.topics.state import TopicConfigTable

log = logging.getLogger("sink.state")

_SNAPSHOT_KIND = "data-group"
_SNAPSHOT_VERSION = 1


class DataGroupMachine(StateMachine):
    """One data group's replicated state; also its read side (Fetch, ListOffsets)."""

    def __init__(self, group_id: int = 0) -> None:
        self.group_id = group_id  # for logs and status; not replicated state
        self.data = PartitionData()
        self.names: dict[str, str] = {}  # topic id hex -> topic name
        self.configs = TopicConfigTable()  # keyed by topic id hex; defaults: the node's
        self.applied_index = 0
        self.leader_term = 0  # term of on_leader_start while leading, else 0
        self.on_leader_change: list[Callable[[], None]] = []

    # ------------------------------------------------------------ wiring

    def attach_log(
        self, read_entries: ReadEntries, first_index: Callable[[], int] | None = None
    ) -> None:
        """This group's log: read_entries(start, max_count, max_bytes), first_index()."""
        self.data.attach_log(read_entries, first_index)

    def set_defaults(self, defaults: TopicDefaults) -> None:
        """The node's broker-level topic defaults (not replicated, as the controller's)."""
        self.configs.set_defaults(defaults)

    def data_event(self) -> asyncio.Event:
        return self.data.data_event()

    # ------------------------------------------------------------- apply

    def on_apply(self, entries: Sequence[LogEntry]) -> list[Any]:
        results: list[Any] = []
        new_data = False
        for e in entries:
            tag = e.data[0] if e.data else -1
            if tag == dcmd.PRODUCE_TO:
                r = self._apply_produce(e)
                new_data = new_data or (r.error == ErrorCode.none and not r.duplicate)
                results.append(r)
            else:
                results.append(self._apply_control(tag, e))
            self.applied_index = e.index
        if new_data:
            self.data.notify_data()
        return results

    def _apply_produce(self, e: LogEntry) -> ProduceResult:
        try:
            c = dcmd.decode_produce_to(e.data)
        except ValueError as exc:
            log.error("data group %d: unreadable produce index=%d: %r", self.group_id, e.index, exc)
            return UNKNOWN_PARTITION
        key = part_key(c.topic_id, c.partition)
        return self.data.apply_produce(
            key, e, c.producer_id, c.producer_epoch, c.base_sequence, dcmd.PRODUCE_TO_HEADER
        )

    def _apply_control(self, tag: int, e: LogEntry) -> Any:
        try:
            if tag == dcmd.DELETE_RECORDS_AT:
                c = dcmd.decode_delete_records_at(e.data)
                return self.data.apply_delete_records(part_key(c.topic_id, c.partition), c.offset)
            if tag == dcmd.PIPELINE_COMMIT:
                p = dcmd.decode_pipeline_commit(e.data)
                offsets = [(part_key(t, part), o) for t, part, o in p.offsets]
                return self.data.apply_pipeline_commit(p.pipeline, offsets)
            if tag == acmd.EXPIRE_PRODUCERS:
                return self.data.expire_producers(acmd.decode_expire_producers(e.data))
            if tag == dcmd.SERVE:
                return self._apply_serve(dcmd.decode_serve(e.data))
            if tag == dcmd.DROP:
                return self._apply_drop(dcmd.decode_drop(e.data))
            if tag == dcmd.CONFIGS:
                return self._apply_configs(dcmd.decode_configs(e.data))
        except (ValueError, KeyError, TypeError, struct.error, UnicodeDecodeError) as exc:
            log.error("data group %d: unreadable entry index=%d: %r", self.group_id, e.index, exc)
            return None
        # A controller command (a name-based produce, a topic creation...) proposed to a
        # data group is a wiring bug: answered None, never a crashed replica.
        log.error(
            "data group %d: not a data-group command tag=%r index=%d", self.group_id, tag, e.index
        )
        return None

    def _valid(self, configs: dict[uuid.UUID, dict[str, str]]) -> dict[str, dict[str, str]] | None:
        """The configs validated as the controller stored them, or None if any is not."""
        try:
            return {t.hex: validate_all(c) for t, c in configs.items()}
        except (TopicConfigError, ValueError, KeyError) as exc:
            log.error("data group %d: refused configs: %r", self.group_id, exc)
            return None

    def _apply_serve(self, c: dcmd.ServeCmd) -> tuple[ErrorCode, int]:
        """Host c's partitions (all or none) -> (error, how many were new)."""
        configs = self._valid(c.configs)
        if configs is None:
            return ErrorCode.invalid_config, 0
        added = 0
        for topic_id, partition, name in c.parts:
            added += self.data.add_partition(part_key(topic_id, partition))
            self.names[topic_id.hex] = name
        for tid, overrides in configs.items():
            if tid in self.names:  # configs only of topics the group hosts
                self.configs.set(tid, overrides)
        return ErrorCode.none, added

    def _apply_drop(self, parts: list[tuple[uuid.UUID, int]]) -> int:
        """Stop hosting parts; a topic with no partition left loses its name and configs."""
        dropped = sum(self.data.drop_partition(part_key(t, p)) for t, p in parts)
        still = {t for t, _ in self.data.hosted()}
        for tid in [t for t in self.names if t not in still]:
            del self.names[tid]
            self.configs.drop(tid)
        return dropped

    def _apply_configs(self, configs: dict[uuid.UUID, dict[str, str]]) -> ErrorCode:
        """Replace hosted topics' overrides (others ignored); all or none."""
        valid = self._valid(configs)
        if valid is None:
            return ErrorCode.invalid_config
        for tid, overrides in valid.items():
            if tid in self.names:
                self.configs.set(tid, overrides)
        return ErrorCode.none

    # ----------------------------------------------------- retention (local)

    def apply_retention(self, now_ms: int) -> tuple[int | None, int]:
        """Retention on this replica's clock with the group's configs (not a command:
        as in the single group, each node moves its own log starts; the compaction limit
        it returns bounds this group's log only)."""
        return self.data.apply_retention(now_ms, self.configs.policy)

    def shortest_retention_ms(self) -> int | None:
        return self.data.shortest_retention_ms(self.configs.policy)

    def retention_floor_index(self) -> int | None:
        return self.data.retention_floor_index()

    # ---------------------------------------------------------- leadership

    def on_leader_start(self, term: int) -> None:
        self.leader_term = term
        for cb in self.on_leader_change:
            cb()

    def on_leader_stop(self) -> None:
        self.leader_term = 0
        for cb in self.on_leader_change:
            cb()

    # ----------------------------------------------------------- read side
    # By (topic id, partition): the router resolves names through the controller.

    def partitions(self) -> list[tuple[uuid.UUID, int]]:
        return sorted((uuid.UUID(hex=t), p) for t, p in self.data.hosted())

    def hosts(self, topic_id: uuid.UUID, partition: int) -> bool:
        return self.data.has(part_key(topic_id, partition))

    def topic_name(self, topic_id: uuid.UUID) -> str | None:
        return self.names.get(topic_id.hex)

    def policy(self, topic_id: uuid.UUID) -> TopicPolicy:
        """The topic's effective configs here (the leader's stamp and size checks)."""
        return self.configs.policy(topic_id.hex)

    def high_watermark(self, topic_id: uuid.UUID, partition: int) -> int:
        return self.data.high_watermark(part_key(topic_id, partition))

    def log_start_offset(self, topic_id: uuid.UUID, partition: int) -> int:
        return self.data.log_start_offset(part_key(topic_id, partition))

    def partition_size(self, topic_id: uuid.UUID, partition: int) -> int:
        return self.data.partition_size(part_key(topic_id, partition))

    def offset_for_timestamp(
        self, topic_id: uuid.UUID, partition: int, timestamp: int
    ) -> time_lookup.TimeMatch | None:
        return self.data.offset_for_timestamp(part_key(topic_id, partition), timestamp)

    def read_parts(
        self, topic_id: uuid.UUID, partition: int, offset: int, max_bytes: int
    ) -> list[tuple[int, bytes, memoryview]]:
        return self.data.read_parts(part_key(topic_id, partition), offset, max_bytes)

    def read(
        self, topic_id: uuid.UUID, partition: int, offset: int, max_bytes: int
    ) -> list[tuple[int, bytes]]:
        return [
            (b, prefix + bytes(rest))
            for b, prefix, rest in self.read_parts(topic_id, partition, offset, max_bytes)
        ]

    def check_producer(
        self,
        topic_id: uuid.UUID,
        partition: int,
        pid: int,
        epoch: int,
        first_seq: int,
        last_seq: int,
    ) -> Verdict:
        """The leader's pre-check of an idempotent batch (apply decides again)."""
        tid = topic_id.hex
        return self.data.producers.check(pid, tid, partition, epoch, first_seq, last_seq)

    def active_producers(self, topic_id: uuid.UUID, partition: int) -> list[tuple[int, int, int]]:
        """(producer id, epoch, last sequence) per producer with state (DescribeProducers)."""
        key: PartKey = part_key(topic_id, partition)
        out = []
        for (pid, t, p), entry in self.data.producers.entries.items():
            if (t, p) == key:
                out.append((pid, entry.epoch, entry.batches[-1][1] if entry.batches else -1))
        return sorted(out)

    def end_offset_for(
        self, topic_id: uuid.UUID, partition: int, epoch: int, current_term: int
    ) -> tuple[int, int]:
        """OffsetForLeaderEpoch: (leader epoch, end offset) with this group's term."""
        key = part_key(topic_id, partition)
        hw = self.data.high_watermark(key)
        return self.data.epochs.end_offset_for(key[0], partition, epoch, current_term, hw)

    # ------------------------------------------------------------ snapshots

    def on_snapshot_save(self) -> bytes:
        state = {
            "kind": _SNAPSHOT_KIND,
            "v": _SNAPSHOT_VERSION,
            "applied": self.applied_index,
            "names": dict(self.names),
            "configs": self.configs.to_json(),
            **self.data.to_json(),
        }
        return zlib.compress(json.dumps(state, separators=(",", ":")).encode(), 1)

    def on_snapshot_load(self, data: bytes) -> None:
        state = json.loads(zlib.decompress(data))
        if state.get("kind") != _SNAPSHOT_KIND or state.get("v") != _SNAPSHOT_VERSION:
            raise ValueError(
                f"not a data-group snapshot (kind {state.get('kind')!r}, v {state.get('v')!r})"
            )
        self.applied_index = state["applied"]
        self.names = dict(state["names"])
        self.configs.load_json(state["configs"])
        self.data.load_json(state)

    def __repr__(self) -> str:
        return f"DataGroupMachine(group={self.group_id}, partitions={len(self.data.parts)})"


__all__ = ["DataGroupMachine", "DeleteRecordsResult", "ProduceResult"]
