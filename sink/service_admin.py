"""The admin operations of SinkService (a part of sink.service.SinkService, holding no
state of its own: every field is SinkService's, set in its __init__).

Producer-id allocation (the handlers' ProducerIds), topic creation and auto-create
(TopicAdmin), topic configs (TopicConfigAdmin) and client quotas (QuotaAdmin, and the
quota figures of `raftsink status`); the protocols are sink.kafka.handlers.services'.
Each change is a command through the log, proposed on the controller (the Raft
leader) only, and read back from the applied state.
"""

from __future__ import annotations

import asyncio
import re
import uuid
from collections.abc import Sequence
from typing import Any

from sink.kafka.protocol.errors import ErrorCode
from sink.quotas import Alteration, QuotaTable
from sink.service_errors import _error_of
from sink.state import CreateTopicResult, TopicInfo, quota_command
from sink.state import commands as cmd
from sink.topics import state as topic_state
from sink.topics.configs import TopicConfigError, TopicDefaults, validate_all

_TOPIC_RE = re.compile(r"^[a-zA-Z0-9._-]{1,249}$")


class AdminOps:
    """The admin part of SinkService (no state of its own)."""

    # --------------------------------------------------------- producer ids

    async def init_producer_id(self) -> tuple[ErrorCode, int, int]:
        """A new producer id (epoch 0) allocated through the log -> (error, pid, epoch)."""
        try:
            res = await self.node.apply(
                cmd.encode_alloc_pid(), timeout=self.options.produce_timeout_s
            )
        except Exception as exc:
            err = _error_of(exc)
            # InitProducerId speaks coordinator errors; leadership lost is
            # COORDINATOR_LOAD_IN_PROGRESS, retried as is (see the handler's docstring).
            return (
                (
                    ErrorCode.coordinator_load_in_progress
                    if err == ErrorCode.not_leader_or_follower
                    else err
                ),
                -1,
                -1,
            )
        return ErrorCode.none, res.result, 0

    # ---------------------------------------------------------------- topics

    def valid_topic_name(self, name: str) -> bool:
        return bool(_TOPIC_RE.match(name)) and name not in (".", "..")

    async def create_topic(
        self,
        name: str,
        partitions: int,
        configs: dict[str, str] | None = None,
        replication_factor: int = -1,
        assignments: Sequence[Sequence[int]] | None = None,
        settle_by: float | None = None,
    ) -> CreateTopicResult:
        """Create a topic through the log (leader only), with its configs (validated
        here and again at apply: INVALID_CONFIG, nothing created, if one is bad).
        replication_factor (-1: the default) and assignments (explicit replica lists,
        one per partition) matter with partition groups only: one group holds every
        replica otherwise. settle_by: a loop time the partition-groups settle wait
        ends by (the request's timeout)."""
        if not self.valid_topic_name(name):
            return CreateTopicResult(ErrorCode.invalid_topic_exception, None)
        if not 1 <= partitions <= self.options.max_create_partitions:
            return CreateTopicResult(ErrorCode.invalid_partitions, None)
        if not self.node.is_leader():
            return CreateTopicResult(ErrorCode.not_controller, None)
        if self.routing is not None:
            return await self.routing.create_topic(
                name, partitions, configs, replication_factor, assignments, settle_by
            )
        if configs:
            try:
                configs = validate_all(configs)
            except TopicConfigError:
                return CreateTopicResult(ErrorCode.invalid_config, None)
            data = topic_state.encode_create(name, partitions, uuid.uuid4(), configs)
        else:
            data = cmd.encode_create_topic(name, partitions, uuid.uuid4())
        try:
            res = await self.node.apply(data, timeout=self.options.produce_timeout_s)
        except Exception as exc:
            err = _error_of(exc)
            return CreateTopicResult(
                ErrorCode.not_controller if err == ErrorCode.not_leader_or_follower else err, None
            )
        return res.result

    async def ensure_topic(self, name: str) -> tuple[ErrorCode, TopicInfo | None]:
        """The topic, auto-creating it if allowed -> (error, info).

        Errors: UNKNOWN_TOPIC_OR_PARTITION (auto-create off), INVALID_TOPIC_EXCEPTION,
        LEADER_NOT_AVAILABLE (creation must happen on the leader; the client retries).
        """
        info = self.fsm.topic(name)
        if info is not None:
            return ErrorCode.none, info
        if not self.fsm.auto_create_topics:
            return ErrorCode.unknown_topic_or_partition, None
        if not self.valid_topic_name(name):
            return ErrorCode.invalid_topic_exception, None
        if not self.node.is_leader():
            return ErrorCode.leader_not_available, None
        fut = self._creating.get(name)
        if fut is None:
            fut = asyncio.ensure_future(self.create_topic(name, self.fsm.default_partitions))
            self._creating[name] = fut
            fut.add_done_callback(lambda _f: self._creating.pop(name, None))
        res: CreateTopicResult = await asyncio.shield(fut)
        if res.topic is not None:
            return ErrorCode.none, res.topic
        return (
            ErrorCode.leader_not_available
            if res.error in (ErrorCode.not_controller, ErrorCode.not_leader_or_follower)
            else res.error
        ), None

    # ---------------------------------------------------------- topic configs

    @property
    def topic_defaults(self) -> TopicDefaults:
        """This node's broker-level defaults of every topic config."""
        return self.fsm.topic_configs.defaults

    def topic_configs(self, topic: str) -> dict[str, str] | None:
        """The applied overrides of a topic (None: no such topic)."""
        if self.fsm.topic(topic) is None:
            return None
        return self.fsm.topic_configs.overrides(topic)

    async def alter_topic_configs(
        self, topic: str, ops: list[tuple[int, str, str | None]], replace: bool
    ) -> tuple[ErrorCode, str | None]:
        """AlterConfigs (replace=True) / IncrementalAlterConfigs through the log, on the
        controller (the Raft leader; NOT_CONTROLLER elsewhere) -> (error, message)."""
        if not self.node.is_leader():
            return ErrorCode.not_controller, "not the controller (Raft leader)"
        try:  # the same check apply makes, for an answer without a log entry
            topic_state.apply_ops(self.fsm.topic_configs.overrides(topic), ops, replace)
        except TopicConfigError as exc:
            return ErrorCode.invalid_config, str(exc)
        data = topic_state.encode_alter(topic, ops, replace)
        try:
            res = await self.node.apply(data, timeout=self.options.produce_timeout_s)
        except Exception as exc:
            err = _error_of(exc)
            err = ErrorCode.not_controller if err == ErrorCode.not_leader_or_follower else err
            return err, None
        return res.result

    # --------------------------------------------------------- client quotas

    def quota_status(self) -> dict[str, Any]:
        """For `raftsink status`: how many entities have quotas configured, and the
        clients this node has throttled (quota key, client label -> ms, since start)."""
        throttled = {
            f"{key}:{label}": ms
            for (key, label), ms in sorted(self.quotas.throttled_ms_by_client().items())
            if ms > 0
        }
        return {"entities": len(self.fsm.quotas.quotas), "throttled_ms": throttled}

    def client_quotas(self) -> QuotaTable:
        """The applied client quota configuration (this node's view)."""
        return self.fsm.quotas

    async def alter_client_quotas(self, alterations: list[Alteration]) -> ErrorCode:
        """Validated quota changes through the log (the controller, i.e. the leader,
        only: NOT_CONTROLLER elsewhere, as CreateTopics)."""
        if not self.node.is_leader():
            return ErrorCode.not_controller
        data = quota_command.encode_alter_quotas(alterations)
        try:
            res = await self.node.apply(data, timeout=self.options.produce_timeout_s)
        except Exception as exc:
            err = _error_of(exc)
            return ErrorCode.not_controller if err == ErrorCode.not_leader_or_follower else err
        return res.result
