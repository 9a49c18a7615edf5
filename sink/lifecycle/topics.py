"""TopicLifecycle: DeleteTopics, CreatePartitions and DeleteRecords as Raft commands.

The leader (the controller: every topic lives in the one Raft group) validates,
proposes the command (sink/state/admin_commands.py) and answers with what the
state machine decided at apply time (sink/state/topic_admin.py), so a command that
raced with another (a second delete, a re-create) is decided once, in log order.
Elsewhere: NOT_CONTROLLER for the topic commands (clients send them to the
controller_id that Metadata names, the leader), NOT_LEADER_OR_FOLLOWER for
DeleteRecords (a partition request).
"""

from __future__ import annotations

import shutil
import uuid
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, NamedTuple

from sink.kafka.protocol.errors import ErrorCode
from sink.state import admin_commands as acmd
from sink.state.topic_admin import CreatePartitionsResult, DeleteRecordsResult

Propose = Callable[[bytes], Awaitable[Any]]
"""Propose a command through the log and await its applied result; raises the
runtime's errors (sink.service_errors._error_of maps them)."""


class DeleteOutcome(NamedTuple):
    error: ErrorCode
    name: str | None
    topic_id: uuid.UUID | None


class TopicLifecycle:
    def __init__(
        self,
        fsm: Any,
        propose: Propose,
        is_leader: Callable[[], bool],
        error_of: Callable[[BaseException], ErrorCode],
        *,
        max_partitions: int = 1024,
        log_dir: str = "",
    ) -> None:
        self.fsm = fsm
        self._propose = propose
        self._is_leader = is_leader
        self._error_of = error_of
        self.max_partitions = max_partitions
        self.log_dir = log_dir

    async def _apply(self, data: bytes, not_leader: ErrorCode) -> tuple[ErrorCode, Any]:
        if not self._is_leader():
            return not_leader, None
        try:
            return ErrorCode.none, await self._propose(data)
        except Exception as exc:
            err = self._error_of(exc)
            return (not_leader if err == ErrorCode.not_leader_or_follower else err), None

    async def delete_topic(self, name: str | None, topic_id: uuid.UUID | None) -> DeleteOutcome:
        """Delete by name, or by id (DeleteTopics v6) when name is None."""
        info = self.fsm.topic(name) if name else self.fsm.topic_by_id(topic_id)
        if info is None:
            code = ErrorCode.unknown_topic_or_partition if name else ErrorCode.unknown_topic_id
            return DeleteOutcome(code, name, topic_id)
        err, res = await self._apply(
            acmd.encode_delete_topic(info.name, info.topic_id), ErrorCode.not_controller
        )
        if err == ErrorCode.none:
            err = res
        return DeleteOutcome(err, info.name, info.topic_id)

    async def create_partitions(
        self,
        name: str,
        count: int,
        validate_only: bool,
        assignments: Sequence[Sequence[int]] | None = None,
        settle_by: float | None = None,
    ) -> tuple[ErrorCode, str | None]:
        """Grow name to count partitions -> (error, message). assignments (the
        request's replica lists) are ignored: every node holds every partition of the
        one group (with partition groups sink.node.routing honours them); so is
        settle_by (one group serves a partition once its entry applies)."""
        info = self.fsm.topic(name)
        if not self._is_leader():
            return ErrorCode.not_controller, "not the controller (Raft leader)"
        if info is None:
            return ErrorCode.unknown_topic_or_partition, f"topic {name!r} does not exist"
        if count < info.partitions:
            return (
                ErrorCode.invalid_partitions,
                f"topic {name!r} has {info.partitions} partitions; it cannot shrink to {count}",
            )
        if count == info.partitions:
            return ErrorCode.invalid_partitions, f"topic {name!r} already has {count} partitions"
        if count > self.max_partitions:
            return (
                ErrorCode.invalid_partitions,
                f"{count} partitions is more than kafka.max_create_partitions "
                f"({self.max_partitions})",
            )
        if validate_only:
            return ErrorCode.none, None
        err, res = await self._apply(
            acmd.encode_create_partitions(name, count), ErrorCode.not_controller
        )
        if err != ErrorCode.none:
            return err, None
        result: CreatePartitionsResult = res
        return result.error, None

    async def delete_records(
        self, topic: str, partition: int, offset: int
    ) -> tuple[ErrorCode, int]:
        """Move the partition's log start to offset (-1: the high watermark) ->
        (error, low watermark)."""
        if not self.fsm.has_partition(topic, partition):
            return ErrorCode.unknown_topic_or_partition, -1
        if not self._is_leader():
            return ErrorCode.not_leader_or_follower, -1
        hw = self.fsm.high_watermark(topic, partition)
        if offset > hw or offset < -1:
            # Kafka: OFFSET_OUT_OF_RANGE for an offset beyond the high watermark.
            return ErrorCode.offset_out_of_range, self.fsm.log_start_offset(topic, partition)
        err, res = await self._apply(
            acmd.encode_delete_records(topic, partition, offset),
            ErrorCode.not_leader_or_follower,
        )
        if err != ErrorCode.none:
            return err, -1
        result: DeleteRecordsResult = res
        return result.error, result.low_watermark

    def active_producers(self, topic: str, partition: int) -> list[tuple[int, int, int]]:
        """(producer id, epoch, last sequence) of each idempotent producer the partition
        still has state for (DescribeProducers; expired producers are gone)."""
        out = []
        for (pid, t, p), entry in self.fsm.producers.entries.items():
            if t == topic and p == partition:
                last = entry.batches[-1][1] if entry.batches else -1
                out.append((pid, entry.epoch, last))
        return sorted(out)

    def disk_usage(self) -> tuple[int, int]:
        """(total, usable) bytes of the volume holding the data directory; -1 unknown."""
        if not self.log_dir:
            return -1, -1
        try:
            usage = shutil.disk_usage(self.log_dir)
        except OSError:
            return -1, -1
        return usage.total, usage.free
