"""Which ACL each Kafka request needs, as Kafka's KafkaApis asks them.

Two places check:
- the handlers of APIs answered per topic, partition or group, where Kafka hides or
  fails single items (Produce, Fetch, ListOffsets, Metadata, CreateTopics,
  DeleteTopics, CreatePartitions, DeleteRecords, DescribeProducers, ListGroups,
  DescribeGroups, DeleteGroups, DescribeConfigs, AlterConfigs,
  IncrementalAlterConfigs, OffsetFetch, OffsetCommit's and OffsetDelete's topics)
  check each item themselves with `allowed(ctx, call, ...)`: a denied item is
  answered TOPIC_/GROUP_AUTHORIZATION_FAILED and nothing is done for it, the others
  are served (Kafka's KafkaApis: filterByAuthorized);
- every other API is checked here, before its handler runs (`gate`, called by the
  connection's dispatch step): a request that needs anything the principal lacks
  is answered whole with its API's error_response and the code Kafka gives
  (GROUP_/TOPIC_/CLUSTER_/TRANSACTIONAL_ID_AUTHORIZATION_FAILED). OffsetDelete's
  group is checked here (Kafka refuses the whole request without DELETE on it),
  its topics in the handler.

`authorized_operations` (Metadata's topics and cluster, DescribeGroups,
DescribeCluster, when the request asks): the bit set of the operations Kafka
lists for the resource type that the principal is allowed (bit = AclOperation
code); NOT_REQUESTED (INT32_MIN) when not asked or not authorized to describe.

The gate runs on the node the client is connected to, before any relay to the
leader: a relayed request has already been authorized for its client's principal
(the leader sees the relay user, a super user).

No entry in GATES means no check (ApiVersions, SASL) or a check in the handler.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from kio.schema.alter_client_quotas.v1.request import AlterClientQuotasRequest
from kio.schema.alter_configs.v2.request import AlterConfigsRequest
from kio.schema.alter_partition_reassignments.v0.request import (
    AlterPartitionReassignmentsRequest,
)
from kio.schema.alter_user_scram_credentials.v0.request import AlterUserScramCredentialsRequest
from kio.schema.create_acls.v3.request import CreateAclsRequest
from kio.schema.create_partitions.v3.request import CreatePartitionsRequest
from kio.schema.delete_acls.v3.request import DeleteAclsRequest
from kio.schema.delete_groups.v2.request import DeleteGroupsRequest
from kio.schema.delete_records.v2.request import DeleteRecordsRequest
from kio.schema.describe_acls.v3.request import DescribeAclsRequest
from kio.schema.describe_client_quotas.v1.request import DescribeClientQuotasRequest
from kio.schema.describe_cluster.v1.request import DescribeClusterRequest
from kio.schema.describe_configs.v4.request import DescribeConfigsRequest
from kio.schema.describe_groups.v5.request import DescribeGroupsRequest
from kio.schema.describe_log_dirs.v4.request import DescribeLogDirsRequest
from kio.schema.describe_producers.v0.request import DescribeProducersRequest
from kio.schema.describe_quorum.v2.request import DescribeQuorumRequest
from kio.schema.describe_transactions.v0.request import DescribeTransactionsRequest
from kio.schema.describe_user_scram_credentials.v0.request import (
    DescribeUserScramCredentialsRequest,
)
from kio.schema.elect_leaders.v2.request import ElectLeadersRequest
from kio.schema.envelope.v0.request import EnvelopeRequest
from kio.schema.find_coordinator.v4.request import FindCoordinatorRequest
from kio.schema.heartbeat.v4.request import HeartbeatRequest
from kio.schema.incremental_alter_configs.v1.request import IncrementalAlterConfigsRequest
from kio.schema.init_producer_id.v4.request import InitProducerIdRequest
from kio.schema.join_group.v9.request import JoinGroupRequest
from kio.schema.leave_group.v5.request import LeaveGroupRequest
from kio.schema.list_config_resources.v1.request import ListConfigResourcesRequest
from kio.schema.list_partition_reassignments.v0.request import ListPartitionReassignmentsRequest
from kio.schema.list_transactions.v2.request import ListTransactionsRequest
from kio.schema.offset_commit.v9.request import OffsetCommitRequest
from kio.schema.offset_delete.v0.request import OffsetDeleteRequest
from kio.schema.offset_fetch.v8.request import OffsetFetchRequest
from kio.schema.offset_for_leader_epoch.v4.request import OffsetForLeaderEpochRequest
from kio.schema.sync_group.v5.request import SyncGroupRequest

from sink.kafka.protocol.errors import ErrorCode
from sink.security.acl import CLUSTER_NAME, Operation, ResourceType

if TYPE_CHECKING:  # only typed against: the handlers import this module
    from sink.kafka.handlers.api import Call
    from sink.kafka.handlers.services import HandlerContext

TOPIC = ResourceType.TOPIC
GROUP = ResourceType.GROUP
CLUSTER = ResourceType.CLUSTER
TXN = ResourceType.TRANSACTIONAL_ID

_CODE = {
    TOPIC: ErrorCode.topic_authorization_failed,
    GROUP: ErrorCode.group_authorization_failed,
    CLUSTER: ErrorCode.cluster_authorization_failed,
    TXN: ErrorCode.transactional_id_authorization_failed,
}

Need = tuple[ResourceType, str, Operation]
"""One permission a request needs: (resource type, name, operation)."""

_CONFIG_TOPIC = 2  # DescribeConfigs / AlterConfigs resource types (not ACL ones)


def host_of(call: Call) -> str:
    """The client's address as ACL hosts name it ("/127.0.0.1" -> "127.0.0.1")."""
    return call.client_host.lstrip("/")


def allowed(ctx: HandlerContext, call: Call, op: Operation, rtype: ResourceType, name: str) -> bool:
    """Is the request's principal allowed op on the resource? (Always, when
    authorization is off on this node.)"""
    az = ctx.authorizer
    if az is None:
        return True
    return az.allowed(call.principal, host_of(call), op, rtype, name)


def denial(ctx: HandlerContext, call: Call, needs: Iterable[Need]) -> ErrorCode | None:
    """The error of the first need refused (None: all allowed)."""
    for rtype, name, op in needs:
        if not allowed(ctx, call, op, rtype, name):
            return _CODE[rtype]
    return None


def _group(op: Operation) -> Callable[[Any], list[Need]]:
    return lambda req: [(GROUP, req.group_id, op)]


def _cluster(op: Operation) -> Callable[[Any], list[Need]]:
    return lambda req: [(CLUSTER, CLUSTER_NAME, op)]


def _find_coordinator(req: Any) -> list[Need]:
    keys = getattr(req, "coordinator_keys", None) or [getattr(req, "key", "")]
    rtype = TXN if int(req.key_type) == 1 else GROUP
    return [(rtype, k, Operation.DESCRIBE) for k in keys]


GATES: dict[int, Callable[[Any], list[Need]]] = {
    int(r.__api_key__): f
    for r, f in (
        (JoinGroupRequest, _group(Operation.READ)),
        (SyncGroupRequest, _group(Operation.READ)),
        (HeartbeatRequest, _group(Operation.READ)),
        (LeaveGroupRequest, _group(Operation.READ)),
        (OffsetCommitRequest, _group(Operation.READ)),  # its topics: in the handler
        (FindCoordinatorRequest, _find_coordinator),
        (OffsetDeleteRequest, _group(Operation.DELETE)),  # its topics: in the handler
        (DescribeClusterRequest, _cluster(Operation.DESCRIBE)),
        (DescribeLogDirsRequest, _cluster(Operation.DESCRIBE)),
        (DescribeQuorumRequest, _cluster(Operation.DESCRIBE)),
        (ElectLeadersRequest, _cluster(Operation.ALTER)),
        (EnvelopeRequest, _cluster(Operation.CLUSTER_ACTION)),
        (ListConfigResourcesRequest, _cluster(Operation.DESCRIBE_CONFIGS)),
        (DescribeClientQuotasRequest, _cluster(Operation.DESCRIBE_CONFIGS)),
        (AlterClientQuotasRequest, _cluster(Operation.ALTER_CONFIGS)),
        (DescribeUserScramCredentialsRequest, _cluster(Operation.DESCRIBE)),
        (AlterUserScramCredentialsRequest, _cluster(Operation.ALTER)),
        (DescribeAclsRequest, _cluster(Operation.DESCRIBE)),
        (CreateAclsRequest, _cluster(Operation.ALTER)),
        (DeleteAclsRequest, _cluster(Operation.ALTER)),
        (AlterPartitionReassignmentsRequest, _cluster(Operation.ALTER)),
        (ListPartitionReassignmentsRequest, _cluster(Operation.DESCRIBE)),
    )
}


def _init_producer_id(ctx: HandlerContext, call: Call) -> ErrorCode | None:
    """Transactional: WRITE on the transactional id. Idempotent: IDEMPOTENT_WRITE on
    the cluster, or WRITE on any topic (Kafka 2.8+, KIP-679)."""
    txn = getattr(call.req, "transactional_id", None)
    if txn:
        return denial(ctx, call, [(TXN, txn, Operation.WRITE)])
    az = ctx.authorizer
    assert az is not None
    host = host_of(call)
    if az.allowed(call.principal, host, Operation.IDEMPOTENT_WRITE, CLUSTER, CLUSTER_NAME):
        return None
    if az.allowed_on_some(call.principal, host, Operation.WRITE, TOPIC):
        return None
    return ErrorCode.cluster_authorization_failed


_INIT_PRODUCER_ID = int(InitProducerIdRequest.__api_key__)

CHECKED_IN_HANDLER = frozenset(
    int(r.__api_key__)
    for r in (
        DescribeConfigsRequest,
        AlterConfigsRequest,
        IncrementalAlterConfigsRequest,
        OffsetFetchRequest,
        CreatePartitionsRequest,
        DeleteRecordsRequest,
        DescribeProducersRequest,
        DescribeGroupsRequest,
        DeleteGroupsRequest,
        OffsetForLeaderEpochRequest,
        DescribeTransactionsRequest,
        ListTransactionsRequest,
    )
) | frozenset({0, 1, 2, 3, 16, 19, 20})
"""Produce, Fetch, ListOffsets, Metadata, ListGroups, CreateTopics, DeleteTopics, the
config APIs, OffsetFetch, CreatePartitions, DeleteRecords, DescribeProducers,
DescribeGroups, DeleteGroups, OffsetForLeaderEpoch, DescribeTransactions and
ListTransactions (its list is filtered: empty, nothing to check): the handlers check each
item themselves
(OffsetCommit's and OffsetDelete's topics too, their group in the gate)."""
OPEN = frozenset({17, 18, 36})
"""SaslHandshake, ApiVersions, SaslAuthenticate: answered to anyone (Kafka's too)."""


def gate(ctx: HandlerContext, api_key: int, call: Call) -> ErrorCode | None:
    """The error the whole request is answered with, or None: its handler runs
    (it may still refuse single items itself)."""
    if ctx.authorizer is None or call.req is None:
        return None
    if ctx.authorizer.is_super(call.principal):
        return None
    if api_key == _INIT_PRODUCER_ID:
        return _init_producer_id(ctx, call)
    needs = GATES.get(api_key)
    if needs is None:
        return None
    return denial(ctx, call, needs(call.req))


def config_denial(ctx: HandlerContext, call: Call, r: Any, alter: bool) -> ErrorCode | None:
    """DescribeConfigs / AlterConfigs per resource: DESCRIBE_CONFIGS / ALTER_CONFIGS on
    the topic (TOPIC_AUTHORIZATION_FAILED) or, for a broker, the cluster
    (CLUSTER_AUTHORIZATION_FAILED); None: allowed."""
    op = Operation.ALTER_CONFIGS if alter else Operation.DESCRIBE_CONFIGS
    if int(r.resource_type) == _CONFIG_TOPIC:
        return denial(ctx, call, [(TOPIC, r.resource_name, op)])
    return denial(ctx, call, [(CLUSTER, CLUSTER_NAME, op)])


def may_create_topic(ctx: HandlerContext, call: Call, name: str) -> bool:
    """CreateTopics and auto-creation: CREATE on the cluster or on the topic."""
    return allowed(ctx, call, Operation.CREATE, CLUSTER, CLUSTER_NAME) or allowed(
        ctx, call, Operation.CREATE, TOPIC, name
    )


def topic_allowed(ctx: HandlerContext, call: Call, op: Operation, name: str) -> bool:
    return allowed(ctx, call, op, TOPIC, name)


def topic_denied(ctx: HandlerContext, call: Call, op: Operation, name: str) -> bool:
    """A per-item check: is op on topic `name` refused (TOPIC_AUTHORIZATION_FAILED)?"""
    return not allowed(ctx, call, op, TOPIC, name)


def group_denied(ctx: HandlerContext, call: Call, op: Operation, group: str) -> bool:
    """A per-item check: is op on group `group` refused (GROUP_AUTHORIZATION_FAILED)?"""
    return not allowed(ctx, call, op, GROUP, group)


NOT_REQUESTED = -(2**31)
"""authorized_operations when the request did not ask for them (Kafka's INT32_MIN)."""

_SUPPORTED_OPERATIONS: dict[ResourceType, tuple[Operation, ...]] = {
    TOPIC: (
        Operation.READ,
        Operation.WRITE,
        Operation.CREATE,
        Operation.DELETE,
        Operation.ALTER,
        Operation.DESCRIBE,
        Operation.DESCRIBE_CONFIGS,
        Operation.ALTER_CONFIGS,
    ),
    GROUP: (Operation.READ, Operation.DESCRIBE, Operation.DELETE),
    CLUSTER: (
        Operation.CREATE,
        Operation.CLUSTER_ACTION,
        Operation.DESCRIBE_CONFIGS,
        Operation.ALTER_CONFIGS,
        Operation.IDEMPOTENT_WRITE,
        Operation.ALTER,
        Operation.DESCRIBE,
    ),
}
"""The operations Kafka reports per resource type (AclEntry.supportedOperations)."""


def authorized_operations(ctx: HandlerContext, call: Call, rtype: ResourceType, name: str) -> int:
    """The bit set (1 << AclOperation code) of the operations on (rtype, name) the
    request's principal is allowed, among those Kafka reports for rtype. With
    authorization off every one of them is allowed (as Kafka without an authorizer)."""
    bits = 0
    for op in _SUPPORTED_OPERATIONS[rtype]:
        if allowed(ctx, call, op, rtype, name):
            bits |= 1 << int(op)
    return bits
