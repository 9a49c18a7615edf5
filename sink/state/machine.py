"""SinkStateMachine: the replicated state of the Kafka staging log, in one Raft group.

It is the controller's state plus one PartitionData (sink/state/partition_data.py)
holding the data-group state of every partition, and it delegates to it; the next step
runs a DataGroupMachine (data_group.py) per partition group instead.

Controller state (here): topics (name -> partitions, topic id) and their configs, the
next producer id, client quotas, consumer groups and their committed offsets, member
addresses, SASL users, ACLs. Data state (self.data, keyed by topic id + partition):
offset indexes, idempotent producers, leader epochs, retention rows, pipelines'
committed offsets. docs/state-machine.md has the table.

Applied state is identical on every node, a pure function of the log. Commands that
name a topic by name are resolved through the topic table *at apply time*; the
id-based data commands (data_commands.py) apply only while the topic still has that
id. Only applied (hence committed) batches are indexed, so everything served from here
is committed data, and high_watermark() never decreases on a node.

Snapshot format 2: the controller's keys and PartitionData's keys (rows by topic id)
side by side; format 1 (rows by topic name, before the split) still loads.
"""

from __future__ import annotations

import asyncio
import json
import logging
import struct
import uuid
import zlib
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

from raftlog.entry import LogEntry
from raftlog.runtime import StateMachine
from sink.groups import records as group_records
from sink.kafka.protocol.errors import ErrorCode, OffsetOutOfRange
from sink.quotas import QuotaTable
from sink.state import admin_commands as acmd
from sink.state import commands as cmd
from sink.state import data_commands as dcmd
from sink.state import offset_command, quota_command, time_lookup, topic_admin
from sink.state.acls import ALTER_ACLS, AclTable
from sink.state.group_offsets import GroupOffsetTable
from sink.state.groups import GroupStore
from sink.state.members import MEMBER_ADDRESSES, MemberTable
from sink.state.named_views import EpochsByName, ProducersByName
from sink.state.partition_data import (
    UNKNOWN_PARTITION,
    PartitionData,
    PartKey,
    ProduceResult,
    ReadEntries,
)
from sink.state.placement_table import (
    ADD_PARTITIONS,
    MOVE_DONE,
    MOVE_REPLICAS,
    PLACE_TOPIC,
    PlacementTable,
    decode_add_partitions,
    decode_move,
    decode_move_done,
    decode_place_topic,
)
from sink.state.users import ALTER_USERS, UserTable
from sink.topics import state as topic_state
from sink.topics.configs import TopicConfigError, TopicPolicy, validate_all

log = logging.getLogger("sink.state")


FIRST_PRODUCER_ID = 1000
_SNAPSHOT_VERSION = 2  # 1: data rows keyed by topic name (still loads)

__all__ = [
    "CreateTopicResult",
    "OffsetOutOfRange",
    "ProduceResult",
    "SinkStateMachine",
    "TopicInfo",
]


class TopicInfo(NamedTuple):
    name: str
    partitions: int
    topic_id: uuid.UUID


class CreateTopicResult(NamedTuple):
    error: ErrorCode
    topic: TopicInfo | None
    message: str | None = None  # why, for the client, when the code alone is vague


class SinkStateMachine(StateMachine):
    """The sink's raftlog StateMachine; also the read side for Fetch / ListOffsets.

    default_partitions / auto_create_topics are policy read by SinkService
    (they are not replicated state: every node should be configured alike).
    """

    def __init__(self, *, default_partitions: int = 1, auto_create_topics: bool = True) -> None:
        if default_partitions < 1:
            raise ValueError("default_partitions must be >= 1")
        self.default_partitions = default_partitions
        self.auto_create_topics = auto_create_topics
        self._topics: dict[str, TopicInfo] = {}
        # name -> topic id hex and back, for exactly the topics in _topics.
        self._tids: dict[str, str] = {}
        self._names: dict[str, str] = {}
        # The data-group part: every partition's data (today's single group).
        self.data = PartitionData()
        self.next_producer_id = FIRST_PRODUCER_ID
        self.applied_index = 0
        self.leader_term = 0  # term of on_leader_start while leading, else 0
        self.on_leader_change: list[Callable[[], None]] = []
        # Client quota configuration (ALTER_QUOTAS entries); rates are per node, not here.
        self.quotas = QuotaTable()
        # Committed consumer-group offsets (sink/state/group_offsets.py), by topic name.
        self.group_offsets = GroupOffsetTable()
        # Topic configs (K / U entries); the broker defaults are the node's (wiring).
        self.topic_configs = topic_state.TopicConfigTable()
        # Consumer groups' completed generations (sink.state.groups); the coordinator
        # loads them when this node becomes leader.
        self.groups = GroupStore()
        # Member addresses (MEMBER_ADDRESSES entries; sink.members).
        self.members = MemberTable()
        # SASL users' SCRAM credentials (ALTER_USERS entries; sink.state.users).
        self.users = UserTable()
        # ACL bindings (ALTER_ACLS entries; sink.state.acls).
        self.acls = AclTable()
        # Partition groups (PLACE_TOPIC entries): partition -> data group and replicas.
        # Empty on a one-group cluster (cluster.partition_groups off).
        self.placement = PlacementTable()
        # Name-keyed read views of the data part's tables (sink/state/named_views.py).
        self.producers = ProducersByName(
            lambda: self.data, lambda n: self._tids.get(n), lambda t: self._names.get(t)
        )
        self.epochs = EpochsByName(lambda: self.data, lambda n: self._tids.get(n))

    # ------------------------------------------------------------ wiring

    def attach_log(
        self, read_entries: ReadEntries, first_index: Callable[[], int] | None = None
    ) -> None:
        """read_entries(start, max_count, max_bytes) -> entries (node.read_committed).
        first_index() (node.first_index), if given, lets the read side notice log
        compaction up front instead of on a failed read."""
        self.data.attach_log(read_entries, first_index)

    def data_event(self) -> asyncio.Event:
        """An event set the next time new records are applied (Fetch long-poll)."""
        return self.data.data_event()

    def key_of(self, topic: str, partition: int) -> PartKey | None:
        """The data part's key of a topic-partition by name (None: no such topic)."""
        tid = self._tids.get(topic)
        return None if tid is None else (tid, partition)

    @property
    def pipelines(self) -> dict[str, dict[tuple[str, int], int]]:
        """A copy: pipeline -> (topic name, partition) -> next offset it will read."""
        return {
            name: {(self._names[t], p): o for (t, p), o in offs.items() if t in self._names}
            for name, offs in self.data.pipelines.items()
        }

    # ------------------------------------------------------------- apply

    def on_apply(self, entries: Sequence[LogEntry]) -> list[Any]:
        results: list[Any] = []
        new_data = False
        for e in entries:
            data = e.data
            tag = data[0] if data else -1
            if tag == cmd.PRODUCE or tag == dcmd.PRODUCE_TO:
                r = self._apply_produce(e, tag)
                new_data = new_data or (r.error == ErrorCode.none and not r.duplicate)
                results.append(r)
            elif tag == cmd.CREATE_TOPIC:
                results.append(self._apply_create(cmd.decode_create_topic(data)))
            elif tag == cmd.ALLOC_PID:
                results.append(self.next_producer_id)
                self.next_producer_id += 1
            elif tag == cmd.COMMIT_OFFSETS:
                results.append(self._apply_commit(cmd.decode_commit_offsets(data)))
            elif tag in (dcmd.DELETE_RECORDS_AT, dcmd.PIPELINE_COMMIT):
                results.append(self._apply_by_id(tag, e))
            elif tag == quota_command.ALTER_QUOTAS:
                results.append(self._apply_quotas(e))
            elif tag == offset_command.COMMIT_GROUP_OFFSETS:
                results.append(self.group_offsets.apply_commit(data, e.index, self.has_partition))
            elif tag == offset_command.DELETE_GROUP_OFFSETS:
                results.append(self.group_offsets.apply_delete(data, e.index))
            elif tag == topic_state.ALTER_CONFIGS:
                results.append(self._apply_alter_configs(e))
            elif tag == topic_state.CREATE_TOPIC_WITH_CONFIGS:
                results.append(self._apply_create_with_configs(e))
            elif tag == group_records.GROUP_GENERATION:
                results.append(self.groups.apply_generation(data, e.index))
            elif tag == group_records.DELETE_GROUPS:
                results.append(self._apply_delete_groups(data, e.index))
            elif tag == MEMBER_ADDRESSES:
                results.append(self._apply_members(e))
            elif tag in acmd.TAGS:
                results.append(self._apply_admin(tag, e))
            elif tag == ALTER_USERS:
                results.append(self._apply_users(e))
            elif tag == ALTER_ACLS:
                results.append(self._apply_acls(e))
            elif tag == PLACE_TOPIC:
                results.append(self._apply_place_topic(e))
            elif tag == ADD_PARTITIONS:
                results.append(self._apply_add_partitions(e))
            elif tag in (MOVE_REPLICAS, MOVE_DONE):
                results.append(self._apply_move(tag, e))
            else:  # never crash a node over one entry it cannot read
                log.error("sink.apply unknown command tag=%r index=%d", tag, e.index)
                results.append(None)
            self.applied_index = e.index
        if new_data:
            self.data.notify_data()
        return results

    def _apply_produce(self, e: LogEntry, tag: int) -> ProduceResult:
        """A produce by name (P: the topic the name denotes when it applies) or by id
        (p: only while the topic still has that id)."""
        if tag == cmd.PRODUCE:
            c = cmd.decode_produce(e.data)
            key = self.key_of(c.topic, c.partition)
            at = c.batch_offset
        else:
            try:
                c = dcmd.decode_produce_to(e.data)
            except ValueError as exc:
                log.error("sink.apply unreadable produce entry index=%d: %r", e.index, exc)
                return UNKNOWN_PARTITION
            tid = c.topic_id.hex
            key = (tid, c.partition) if tid in self._names else None
            at = dcmd.PRODUCE_TO_HEADER
        if key is None:
            return UNKNOWN_PARTITION
        return self.data.apply_produce(key, e, c.producer_id, c.producer_epoch, c.base_sequence, at)

    def _apply_by_id(self, tag: int, e: LogEntry) -> Any:
        """DELETE_RECORDS_AT / PIPELINE_COMMIT: rows of topics that no longer have that
        id are refused (DeleteRecords) or ignored (a pipeline's commit)."""
        try:
            if tag == dcmd.DELETE_RECORDS_AT:
                c = dcmd.decode_delete_records_at(e.data)
                tid = c.topic_id.hex
                key = (tid, c.partition) if tid in self._names else ("", c.partition)
                return self.data.apply_delete_records(key, c.offset)
            p = dcmd.decode_pipeline_commit(e.data)
            keys = [((t.hex, part), o) for t, part, o in p.offsets if t.hex in self._names]
            return self.data.apply_pipeline_commit(p.pipeline, keys)
        except (ValueError, struct.error, UnicodeDecodeError) as exc:
            log.error("sink.apply unreadable data entry index=%d: %r", e.index, exc)
            return None

    def _apply_delete_groups(self, data: bytes, index: int) -> int:
        """DeleteGroups forgets the groups' generations and, as Kafka, their committed
        offsets; returns how many groups had a generation."""
        n = self.groups.apply_delete(data, index)
        try:
            ids = group_records.decode_delete(data)
        except Exception:  # apply_delete logged it; nothing more to undo
            return n
        for g in ids:
            self.group_offsets.delete_group(g)
        return n

    def _apply_commit(self, c: cmd.CommitOffsetsCmd) -> int:
        """Record a pipeline's consumed offsets by name (they only move forward);
        returns how many partitions it now covers."""
        keys = []
        for topic, partition, offset in c.offsets:
            key = self.key_of(topic, partition)
            if key is not None:
                keys.append((key, offset))
        return self.data.apply_pipeline_commit(c.pipeline, keys)

    def _apply_quotas(self, e: LogEntry) -> ErrorCode:
        """Client quota changes: all of the entry's alterations, or none if unreadable."""
        try:
            alterations = quota_command.decode_alter_quotas(e.data)
        except Exception as exc:  # never crash a node over one entry it cannot read
            log.error("sink.apply unreadable quota entry index=%d: %r", e.index, exc)
            return ErrorCode.invalid_request
        self.quotas.apply(alterations)
        return ErrorCode.none

    def _apply_members(self, e: LogEntry) -> int | None:
        """A member's addresses (sink.members); an unreadable entry is skipped."""
        try:
            return self.members.apply(e.data)
        except ValueError as exc:
            log.error("sink.apply unreadable member entry index=%d: %r", e.index, exc)

    def _apply_users(self, e: LogEntry) -> list | None:
        """SASL user changes (sink.state.users): (user, error, message) per op."""
        try:
            return self.users.apply(e.data)
        except (ValueError, TypeError, UnicodeDecodeError) as exc:
            log.error("sink.apply unreadable users entry index=%d: %r", e.index, exc)
            return None

    def _apply_acls(self, e: LogEntry) -> list | None:
        """ACL changes (sink.state.acls): one answer per op."""
        try:
            return self.acls.apply(e.data)
        except (ValueError, TypeError, UnicodeDecodeError) as exc:
            log.error("sink.apply unreadable acls entry index=%d: %r", e.index, exc)
            return None

    def _apply_admin(self, tag: int, e: LogEntry) -> Any:
        """Topic admin and producer expiry (sink/state/topic_admin.py)."""
        try:
            if tag == acmd.DELETE_TOPIC:
                return topic_admin.apply_delete_topic(self, acmd.decode_delete_topic(e.data))
            if tag == acmd.CREATE_PARTITIONS:
                c = acmd.decode_create_partitions(e.data)
                return topic_admin.apply_create_partitions(self, c)
            if tag == acmd.DELETE_RECORDS:
                c = acmd.decode_delete_records(e.data)
                key = self.key_of(c.topic, c.partition) or ("", c.partition)
                return self.data.apply_delete_records(key, c.offset)
            return self.data.expire_producers(acmd.decode_expire_producers(e.data))
        except (ValueError, struct.error, UnicodeDecodeError) as exc:
            log.error("sink.apply unreadable admin entry index=%d: %r", e.index, exc)
            return None

    def _apply_create(self, c: cmd.CreateTopicCmd) -> CreateTopicResult:
        existing = self._topics.get(c.name)
        if existing is not None:
            return CreateTopicResult(ErrorCode.topic_already_exists, existing)
        if c.partitions < 1:
            return CreateTopicResult(ErrorCode.invalid_partitions, None)
        tid = c.topic_id.hex
        if tid in self._names:  # ids name one topic for ever (uuid4: never in practice)
            return CreateTopicResult(ErrorCode.topic_already_exists, None)
        info = TopicInfo(c.name, c.partitions, c.topic_id)
        self._add_topic(info)
        for p in range(c.partitions):
            self.data.add_partition((tid, p))
        return CreateTopicResult(ErrorCode.none, info)

    def _add_topic(self, info: TopicInfo) -> None:
        """The topic table and its two name <-> id maps change together."""
        self._topics[info.name] = info
        self._tids[info.name] = info.topic_id.hex
        self._names[info.topic_id.hex] = info.name

    def _remove_topic(self, name: str) -> TopicInfo:
        info = self._topics.pop(name)
        del self._tids[name]
        del self._names[info.topic_id.hex]
        return info

    def _apply_alter_configs(self, e: LogEntry) -> tuple[ErrorCode, str | None]:
        """A topic's configs changed (sink.topics.state) -> (error, message)."""
        try:
            c = topic_state.decode_alter(e.data)
        except Exception as exc:  # never crash a node over one entry it cannot read
            log.error("sink.apply unreadable config entry index=%d: %r", e.index, exc)
            return ErrorCode.invalid_request, "unreadable entry"
        if c.topic not in self._topics:
            return ErrorCode.unknown_topic_or_partition, f"unknown topic {c.topic!r}"
        msg, _ = self.topic_configs.apply_alter(c)
        return (ErrorCode.none, None) if msg is None else (ErrorCode.invalid_config, msg)

    def _apply_create_with_configs(self, e: LogEntry) -> CreateTopicResult:
        """CreateTopics with configs: the topic and its configs in one entry (all or none)."""
        try:
            c = topic_state.decode_create(e.data)
            configs = validate_all(c.configs)
        except (TopicConfigError, ValueError, KeyError) as exc:
            log.error("sink.apply refused create entry index=%d: %r", e.index, exc)
            return CreateTopicResult(ErrorCode.invalid_config, None)
        res = self._apply_create(cmd.CreateTopicCmd(c.name, c.partitions, c.topic_id))
        if res.error == ErrorCode.none:
            self.topic_configs.set(c.name, configs)
        return res

    def _apply_place_topic(self, e: LogEntry) -> CreateTopicResult:
        """A topic, its configs and its partitions' data groups in one entry (all or
        none; sink/state/placement_table.py). The controller keeps no partition data of
        a placed topic: its records live in the data groups."""
        try:
            c = decode_place_topic(e.data)
            configs = validate_all(c.configs) if c.configs else {}
        except (TopicConfigError, ValueError, KeyError, TypeError) as exc:
            log.error("sink.apply refused placement entry index=%d: %r", e.index, exc)
            return CreateTopicResult(ErrorCode.invalid_config, None)
        res = self._apply_create(cmd.CreateTopicCmd(c.name, c.partitions, c.topic_id))
        if res.error != ErrorCode.none:
            return res
        tid = c.topic_id.hex
        for p in range(c.partitions):
            self.data.drop_partition((tid, p))
        if configs:
            self.topic_configs.set(c.name, configs)
        self.placement.place(tid, c.replicas, incarnations=c.incarnations)
        return res

    def _apply_move(self, tag: int, e: LogEntry) -> str | None:
        """A replica move's start (MOVE_REPLICAS) or end (MOVE_DONE) -> None, or why it
        changed nothing (a compare-and-set that lost: the proposer reads the table
        again)."""
        try:
            if tag == MOVE_REPLICAS:
                return self.placement.move(decode_move(e.data))
            return self.placement.move_done(decode_move_done(e.data))
        except ValueError as exc:
            log.error("sink.apply refused move entry index=%d: %r", e.index, exc)
            return f"malformed entry: {exc}"

    def _apply_add_partitions(self, e: LogEntry) -> topic_admin.CreatePartitionsResult:
        """CreatePartitions of a placed topic: the new partitions and their data groups
        in one entry (sink/state/placement_table.py). Applies only while the topic has
        the entry's id and exactly `first` partitions, all placed: a replayed entry, or
        one placed from a stale count, changes nothing (INVALID_PARTITIONS with the
        topic as it is). Group ids come from the never-reused counter."""
        try:
            c = decode_add_partitions(e.data)
        except ValueError as exc:
            log.error("sink.apply refused add-partitions entry index=%d: %r", e.index, exc)
            return topic_admin.CreatePartitionsResult(ErrorCode.invalid_request, None)
        info = self.topic_by_id(c.topic_id)
        if info is None or info.name != c.name:
            return topic_admin.CreatePartitionsResult(ErrorCode.unknown_topic_or_partition, None)
        tid = c.topic_id.hex
        if len(self.placement.of_topic(tid)) != info.partitions:  # not a placed topic
            log.error("sink.apply add-partitions of unplaced topic %r index=%d", c.name, e.index)
            return topic_admin.CreatePartitionsResult(ErrorCode.invalid_request, info)
        if c.first != info.partitions:
            return topic_admin.CreatePartitionsResult(ErrorCode.invalid_partitions, info)
        self.placement.place(tid, c.replicas, first=c.first, incarnations=c.incarnations)
        new = info._replace(partitions=c.partitions)
        self._add_topic(new)
        return topic_admin.CreatePartitionsResult(ErrorCode.none, new)

    def apply_retention(self, now_ms: int) -> tuple[int | None, int]:
        """Retention by time and size (sink.topics.retention) with the topics' configs:
        moves log starts on this node -> (highest compactable log index or None: no
        partition retains data, batches removed)."""
        return self.data.apply_retention(now_ms, self._policy_by_id)

    def shortest_retention_ms(self) -> int | None:
        """The smallest retention.ms of any topic with partitions (None: all keep forever)."""
        return self.data.shortest_retention_ms(self._policy_by_id)

    def _policy_by_id(self, tid: str) -> TopicPolicy:
        name = self._names.get(tid)
        return self.topic_configs.policy(name if name is not None else "")

    def retention_floor_index(self) -> int | None:
        """Highest Raft log index that can be compacted without removing a record
        some registered pipeline has not committed; None: no pipeline constrains."""
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

    def topics(self) -> dict[str, TopicInfo]:
        return dict(self._topics)

    def topic(self, name: str) -> TopicInfo | None:
        return self._topics.get(name)

    def topic_by_id(self, topic_id: uuid.UUID | None) -> TopicInfo | None:
        if topic_id is None:  # (DeleteTopics naming neither a name nor an id)
            return None
        name = self._names.get(topic_id.hex)
        return None if name is None else self._topics[name]

    # The reads below pass the key straight on ("" is no topic id, so an unknown name
    # is an unknown key) and re-raise PartitionData's KeyError with the name: one dict
    # lookup more than before the split on the Fetch / ListOffsets path, no more.

    def has_partition(self, topic: str, partition: int) -> bool:
        """The partition exists: its data is here, or in a data group (placement)."""
        key = (self._tids.get(topic, ""), partition)
        return key in self.data.parts or key in self.placement.by_part

    def high_watermark(self, topic: str, partition: int) -> int:
        """Next offset of applied data (KeyError for an unknown partition)."""
        try:
            return self.data.high_watermark((self._tids.get(topic, ""), partition))
        except KeyError:
            raise _unknown(topic, partition) from None

    def log_start_offset(self, topic: str, partition: int) -> int:
        try:
            return self.data.log_start_offset((self._tids.get(topic, ""), partition))
        except KeyError:
            raise _unknown(topic, partition) from None

    def offset_for_timestamp(
        self, topic: str, partition: int, timestamp: int
    ) -> time_lookup.TimeMatch | None:
        """ListOffsets by time (PartitionData.offset_for_timestamp; KeyError on an
        unknown partition; OffsetOutOfRange if compacted under the lookup)."""
        key = (self._tids.get(topic, ""), partition)
        if key not in self.data.parts:
            raise _unknown(topic, partition)
        return self.data.offset_for_timestamp(key, timestamp, f"{topic}-{partition}")

    def partition_size(self, topic: str, partition: int) -> int:
        """Stored batch bytes of the partition's retained batches (DescribeLogDirs)."""
        try:
            return self.data.partition_size((self._tids.get(topic, ""), partition))
        except KeyError:
            raise _unknown(topic, partition) from None

    def read_parts(
        self, topic: str, partition: int, offset: int, max_bytes: int
    ) -> list[tuple[int, bytes, memoryview]]:
        """Whole batches from the one containing offset (PartitionData.read_parts)."""
        key = (self._tids.get(topic, ""), partition)
        if key not in self.data.parts:
            raise _unknown(topic, partition)
        return self.data.read_parts(key, offset, max_bytes)

    def read(
        self, topic: str, partition: int, offset: int, max_bytes: int
    ) -> list[tuple[int, bytes]]:
        """As read_parts, each batch joined into bytes (baseOffset and
        partitionLeaderEpoch patched; CRC still valid)."""
        return [
            (b, prefix + bytes(rest))
            for b, prefix, rest in self.read_parts(topic, partition, offset, max_bytes)
        ]

    # ------------------------------------------------------------ snapshots

    def on_snapshot_save(self) -> bytes:
        state = {
            "v": _SNAPSHOT_VERSION,
            "applied": self.applied_index,
            "next_pid": self.next_producer_id,
            "topics": [[t.name, t.partitions, str(t.topic_id)] for t in self._topics.values()],
            **self.data.to_json(),
            "quotas": self.quotas.to_json(),
            "group_offsets": self.group_offsets.to_json(),
            "topic_configs": self.topic_configs.to_json(),
            "groups": self.groups.to_json(),
            "members": self.members.to_json(),
            "members_draining": self.members.draining_json(),
            "members_hosts": self.members.hosts_json(),
            "users": self.users.to_json(),
            "acls": self.acls.to_json(),
        }
        if self.placement.next_group_id > 1:  # partition groups only: older loads unchanged
            state["placement"] = self.placement.to_json()
        return zlib.compress(json.dumps(state, separators=(",", ":")).encode(), 1)

    def on_snapshot_load(self, data: bytes) -> None:
        state = json.loads(zlib.decompress(data))
        version = state.get("v")
        if version not in (1, _SNAPSHOT_VERSION):
            raise ValueError(f"unsupported sink snapshot version {version!r}")
        self.applied_index = state["applied"]
        self.next_producer_id = state["next_pid"]
        self._topics.clear()
        self._tids.clear()
        self._names.clear()
        for name, n, tid in state["topics"]:
            self._add_topic(TopicInfo(name, n, uuid.UUID(tid)))
        # Format 1 keyed the data rows by topic name: rekey them by the topic's id.
        self.data.load_json(state, self._tids.get if version == 1 else None)
        self.quotas = QuotaTable.from_json(state.get("quotas", []))
        self.group_offsets = GroupOffsetTable.from_json(state.get("group_offsets", {}))
        self.topic_configs.load_json(state.get("topic_configs", {}))
        self.groups = GroupStore.from_json(state.get("groups", []))
        self.members = MemberTable.from_json(
            state.get("members", []), state.get("members_draining", []), state.get("members_hosts")
        )
        self.users = UserTable.from_json(state.get("users", {}))
        self.acls = AclTable.from_json(state.get("acls", []))
        self.placement = PlacementTable.from_json(state.get("placement"))


def _unknown(topic: str, partition: int) -> KeyError:
    return KeyError(f"unknown topic-partition {topic}-{partition}")
