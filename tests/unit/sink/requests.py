"""Valid request frames (without the size prefix) of every API and version served,
built with kio's writer from one superset of values per API (build() drops the keys
a version lacks)."""

from __future__ import annotations

import uuid

from sink.kafka.protocol.build import encode_request
from tests.unit.sink.batches import make_batch

TOPIC_ID = uuid.UUID(int=0x1234)


def request_values(api_key: int, records: bytes | None = None) -> dict:
    """A superset of field values for one API (every version)."""
    if records is None:
        records = make_batch([b"v" * 100] * 160)  # ~16 KiB
    if api_key == 0:
        return {
            "transactional_id": None,
            "acks": -1,
            "timeout": 5000,
            "topic_data": [{"name": "t", "partition_data": [{"index": 0, "records": records}]}],
        }
    if api_key == 1:
        return {
            "cluster_id": None,
            "replica_id": -1,
            "replica_state": {"replica_id": -1, "replica_epoch": -1},
            "max_wait": 100,
            "min_bytes": 1,
            "max_bytes": 1 << 20,
            "isolation_level": 0,
            "session_id": 0,
            "session_epoch": -1,
            "topics": [
                {
                    "topic": "t",
                    "topic_id": TOPIC_ID,
                    "partitions": [
                        {
                            "partition": i,
                            "current_leader_epoch": -1,
                            "fetch_offset": 0,
                            "last_fetched_epoch": -1,
                            "log_start_offset": -1,
                            "partition_max_bytes": 1 << 20,
                        }
                        for i in range(4)
                    ],
                }
            ],
            "forgotten_topics_data": [],
            "rack_id": "",
        }
    if api_key == 2:
        return {
            "replica_id": -1,
            "isolation_level": 0,
            "timeout": 30000,
            "topics": [
                {
                    "name": "t",
                    "partitions": [
                        {"partition_index": 0, "current_leader_epoch": -1, "timestamp": -1}
                    ],
                }
            ],
        }
    if api_key == 3:
        return {
            "topics": [{"topic_id": uuid.UUID(int=0), "name": "t"}],
            "allow_auto_topic_creation": True,
            "include_cluster_authorized_operations": False,
            "include_topic_authorized_operations": False,
        }
    if api_key == 8:
        return {
            "group_id": "g",
            "generation_id_or_member_epoch": -1,
            "member_id": "",
            "group_instance_id": None,
            "retention_time_ms": -1,
            "topics": [
                {
                    "name": "t",
                    "partitions": [
                        {
                            "partition_index": 0,
                            "committed_offset": 5,
                            "committed_leader_epoch": -1,
                            "commit_timestamp": -1,
                            "committed_metadata": "",
                        }
                    ],
                }
            ],
        }
    if api_key == 9:
        return {
            "group_id": "g",
            "topics": [{"name": "t", "partition_indexes": [0, 1]}],
            "require_stable": False,
            "groups": [
                {
                    "group_id": "g",
                    "member_id": None,
                    "member_epoch": -1,
                    "topics": [{"name": "t", "partition_indexes": [0]}],
                }
            ],
        }
    if api_key == 10:
        return {"key": "g", "key_type": 0, "coordinator_keys": ["g", "h"]}
    if api_key == 18:
        return {"client_software_name": "raftsink-test", "client_software_version": "1.0"}
    if api_key == 19:
        return {
            "topics": [
                {
                    "name": "t",
                    "num_partitions": 2,
                    "replication_factor": -1,
                    "assignments": [],
                    "configs": [{"name": "retention.ms", "value": "1000"}],
                }
            ],
            "timeout": 5000,
            "validate_only": False,
        }
    if api_key == 22:
        return {
            "transactional_id": None,
            "transaction_timeout": 60000,
            "producer_id": -1,
            "producer_epoch": -1,
        }
    if api_key == 23:
        return {
            "replica_id": -1,
            "topics": [
                {
                    "topic": "t",
                    "partitions": [
                        {"partition": i, "current_leader_epoch": -1, "leader_epoch": 1}
                        for i in range(2)
                    ],
                }
            ],
        }
    if api_key == 47:
        return {
            "group_id": "g",
            "topics": [{"name": "t", "partitions": [{"partition_index": 0}]}],
        }
    if api_key == 48:
        return {
            "components": [{"entity_type": "client-id", "match_type": 2, "match": None}],
            "strict": False,
        }
    if api_key == 49:
        return {
            "entries": [
                {
                    "entity": [{"entity_type": "client-id", "entity_name": "c"}],
                    "ops": [{"key": "producer_byte_rate", "value": 1024.0, "remove": False}],
                }
            ],
            "validate_only": False,
        }
    if api_key == 32:  # DescribeConfigs
        return {
            "resources": [
                {"resource_type": 2, "resource_name": "t", "configuration_keys": None},
                {"resource_type": 4, "resource_name": "1", "configuration_keys": ["x"]},
            ],
            "include_synonyms": True,
            "include_documentation": True,
        }
    if api_key == 33:  # AlterConfigs
        return {
            "resources": [
                {
                    "resource_type": 2,
                    "resource_name": "t",
                    "configs": [{"name": "retention.ms", "value": "1000"}],
                }
            ],
            "validate_only": False,
        }
    if api_key == 44:  # IncrementalAlterConfigs
        return {
            "resources": [
                {
                    "resource_type": 2,
                    "resource_name": "t",
                    "configs": [{"name": "retention.ms", "config_operation": 0, "value": "1000"}],
                }
            ],
            "validate_only": False,
        }
    group = _group_values(api_key)
    if group is not None:
        return group
    if api_key == 20:
        return {
            "topic_names": ["t"],
            "topics": [{"name": "t", "topic_id": uuid.UUID(int=0)}],
            "timeout": 5000,
        }
    if api_key == 21:
        return {
            "topics": [{"name": "t", "partitions": [{"partition_index": 0, "offset": 1}]}],
            "timeout": 5000,
        }
    if api_key == 35:
        return {"topics": [{"topic": "t", "partitions": [0]}]}
    if api_key == 37:
        return {
            "topics": [{"name": "t", "count": 3, "assignments": None}],
            "timeout": 5000,
            "validate_only": False,
        }
    if api_key == 61:
        return {"topics": [{"name": "t", "partition_indexes": [0, 1]}]}
    if api_key == 60:
        return {"include_cluster_authorized_operations": False, "endpoint_type": 1}
    if api_key == 17:
        return {"mechanism": "SCRAM-SHA-512"}
    if api_key == 36:
        return {"auth_bytes": b"n,,n=alice,r=abc"}
    if api_key == 50:
        return {"users": [{"name": "alice"}]}
    if api_key == 51:
        return {
            "deletions": [{"name": "bob", "mechanism": 1}],
            "upsertions": [
                {
                    "name": "alice",
                    "mechanism": 2,
                    "iterations": 4096,
                    "salt": b"s" * 16,
                    "salted_password": b"p" * 64,
                }
            ],
        }
    if api_key == 45:
        return {
            "timeout": 5000,
            "topics": [
                {
                    "name": "t",
                    "partitions": [
                        {"partition_index": 0, "replicas": [4, 2, 3]},
                        {"partition_index": 1, "replicas": None},
                    ],
                }
            ],
        }
    if api_key == 46:
        return {"timeout": 5000, "topics": [{"name": "t", "partition_indexes": [0, 1]}]}
    if api_key == 43:
        return {
            "election_type": 0,
            "topic_partitions": [{"topic": "t", "partitions": [0]}],
            "timeout": 5000,
        }
    if api_key == 58:
        return {
            "request_data": encode(55, 2, request_values(55), corr=3),
            "request_principal": b"User:alice",
            "client_host_address": bytes([127, 0, 0, 1]),
        }
    if api_key == 74:
        return {"resource_types": [2, 4]}
    if api_key == 65:
        return {"transactional_ids": ["tx-a", "tx-b"]}
    if api_key == 66:
        return {
            "state_filters": ["Ongoing", "Bogus"],
            "producer_id_filters": [],
            "duration_filter": -1,
            "transactional_id_pattern": None,
        }
    if api_key == 55:
        return {
            "topics": [{"topic_name": "__cluster_metadata", "partitions": [{"partition_index": 0}]}]
        }
    acl = _acl_values(api_key)
    if acl is not None:
        return acl
    raise KeyError(api_key)


def _acl_values(api_key: int) -> dict | None:
    """DescribeAcls 29, CreateAcls 30, DeleteAcls 31."""
    filt = {
        "resource_type_filter": 2,
        "resource_name_filter": "t",
        "pattern_type_filter": 3,
        "principal_filter": "User:alice",
        "host_filter": None,
        "operation": 3,
        "permission_type": 3,
    }
    if api_key == 29:
        return filt
    if api_key == 30:
        creation = {
            "resource_type": 2,
            "resource_name": "t",
            "resource_pattern_type": 3,
            "principal": "User:alice",
            "host": "*",
            "operation": 3,
            "permission_type": 3,
        }
        return {"creations": [creation, {**creation, "operation": 4}]}
    if api_key == 31:
        return {"filters": [filt, {**filt, "resource_name_filter": None}]}
    return None


# ConsumerProtocolSubscription v0: topics ["t"], no user data.
SUBSCRIPTION = b"\x00\x00\x00\x00\x00\x01\x00\x01t\xff\xff\xff\xff"


def _group_values(api_key: int) -> dict | None:
    """The classic group APIs (JoinGroup 11, Heartbeat 12, LeaveGroup 13, SyncGroup 14,
    DescribeGroups 15, ListGroups 16, DeleteGroups 42)."""
    member = {"member_id": "", "group_instance_id": None, "reason": None}
    return {
        11: {
            "group_id": "g",
            "session_timeout": 10_000,
            "rebalance_timeout": 30_000,
            "member_id": "",
            "group_instance_id": None,
            "protocol_type": "consumer",
            "protocols": [{"name": "range", "metadata": SUBSCRIPTION}],
            "reason": None,
        },
        12: {"group_id": "g", "generation_id": 1, "member_id": "m", "group_instance_id": None},
        13: {"group_id": "g", "member_id": "m", "members": [member | {"member_id": "m"}]},
        14: {
            "group_id": "g",
            "generation_id": 1,
            "member_id": "m",
            "group_instance_id": None,
            "protocol_type": "consumer",
            "protocol_name": "range",
            "assignments": [{"member_id": "m", "assignment": b"a"}],
        },
        15: {"groups": ["g"], "include_authorized_operations": False},
        16: {"states_filter": [], "types_filter": []},
        42: {"groups_names": ["g"]},
    }.get(api_key)


def encode(api_key: int, version: int, values: dict, corr: int = 7) -> bytes:
    """Header + body, no size prefix."""
    return encode_request(api_key, version, corr, "unit", values)


def valid_request(api_key: int, version: int, records: bytes | None = None) -> bytes:
    return encode(api_key, version, request_values(api_key, records))
