"""Topic configs: the table's validation, the K / U entries applied and snapshotted, and
DescribeConfigs / AlterConfigs / IncrementalAlterConfigs / CreateTopics against a real
in-memory node (requests parsed by kio, responses decoded with the version's schema)."""

from __future__ import annotations

import uuid

import pytest

from raftlog.entry import EntryType, LogEntry
from sink.kafka.protocol.errors import ErrorCode
from sink.state import SinkStateMachine, commands
from sink.topics import state as topic_state
from sink.topics.configs import (
    ConfigSource,
    TopicConfigError,
    TopicDefaults,
    TopicPolicy,
    describe,
    validate,
)
from tests.unit.sink.memory_services import MemoryNode
from tests.unit.sink.test_handlers import call

# ------------------------------------------------------------------ validation


@pytest.mark.parametrize(
    ("name", "value", "match"),
    [
        ("foo.bar", "1", "Unknown topic config name: foo.bar"),
        ("retention.ms", "-2", r"out of range \[-1,"),
        ("retention.ms", "soon", "not an integer"),
        ("retention.bytes", "-5", "out of range"),
        ("max.message.bytes", str(1 << 31), "out of range"),
        ("segment.bytes", "13", "out of range"),
        ("cleanup.policy", "compact", "compact is not supported"),
        ("cleanup.policy", "delete,compact", "compact is not supported"),
        ("cleanup.policy", "shred", "not a cleanup policy"),
        ("message.timestamp.type", "BrokerTime", "not one of CreateTime, LogAppendTime"),
        ("retention.ms", None, "null value"),
    ],
)
def test_bad_configs_are_refused_with_the_reason(name, value, match):
    with pytest.raises(TopicConfigError, match=match):
        validate(name, value)


def test_good_values_are_canonical():
    assert validate("retention.ms", " 60000 ") == "60000"
    assert validate("cleanup.policy", "delete") == "delete"
    assert validate("message.timestamp.type", "LogAppendTime") == "LogAppendTime"


def test_broker_defaults_are_validated_at_start_up():
    with pytest.raises(ValueError, match=r"TopicDefaults\.retention_ms"):
        TopicDefaults(retention_ms=-7)
    with pytest.raises(ValueError, match=r"TopicDefaults\.message_timestamp_type"):
        TopicDefaults(message_timestamp_type="Now")


def test_policy_and_sources_topic_over_broker_over_default():
    defaults = TopicDefaults(retention_bytes=5000)
    p = TopicPolicy.of({"retention.ms": "1000"}, defaults)
    assert (p.retention_ms, p.retention_bytes, p.log_append_time) == (1000, 5000, False)
    rows = {d.name: (v, s, syn) for d, v, s, syn in describe({"retention.ms": "1000"}, defaults)}
    assert rows["retention.ms"][:2] == ("1000", ConfigSource.DYNAMIC_TOPIC_CONFIG)
    assert rows["retention.ms"][2][-1] == (
        "log.retention.ms",
        str(7 * 24 * 3600 * 1000),
        ConfigSource.DEFAULT_CONFIG,
    )
    assert rows["retention.bytes"][:2] == ("5000", ConfigSource.STATIC_BROKER_CONFIG)
    assert rows["max.message.bytes"][:2] == ("1048588", ConfigSource.DEFAULT_CONFIG)


# ------------------------------------------------------------- apply / snapshot


def _entry(index: int, data: bytes) -> LogEntry:
    return LogEntry(index, 1, EntryType.DATA, data)


def test_alter_ops_apply_at_apply_time_and_survive_a_snapshot():
    fsm = SinkStateMachine()
    tid = uuid.uuid4()
    r = fsm.on_apply([_entry(1, topic_state.encode_create("t", 2, tid, {"retention.ms": "1000"}))])[
        0
    ]
    assert r.error == ErrorCode.none and r.topic.partitions == 2
    # Two incremental alters computed from the same state both land (applied in order).
    a = topic_state.encode_alter("t", [(topic_state.Op.SET, "retention.bytes", "10")], False)
    b = topic_state.encode_alter("t", [(topic_state.Op.DELETE, "retention.ms", None)], False)
    assert fsm.on_apply([_entry(2, a), _entry(3, b)]) == [(ErrorCode.none, None)] * 2
    assert fsm.topic_configs.overrides("t") == {"retention.bytes": "10"}
    # An invalid result changes nothing.
    bad = topic_state.encode_alter("t", [(topic_state.Op.APPEND, "retention.ms", "5")], False)
    err, msg = fsm.on_apply([_entry(4, bad)])[0]
    assert err == ErrorCode.invalid_config and "only for list configs" in msg
    unknown = topic_state.encode_alter("nope", [(0, "retention.ms", "5")], False)
    assert fsm.on_apply([_entry(5, unknown)])[0][0] == ErrorCode.unknown_topic_or_partition
    # AlterConfigs replaces the whole set.
    rep = topic_state.encode_alter("t", [(0, "max.message.bytes", "100")], True)
    fsm.on_apply([_entry(6, rep)])
    assert fsm.topic_configs.overrides("t") == {"max.message.bytes": "100"}
    assert fsm.topic_configs.policy("t").max_message_bytes == 100
    copy = SinkStateMachine()
    copy.on_snapshot_load(fsm.on_snapshot_save())
    assert copy.topic_configs.overrides("t") == {"max.message.bytes": "100"}
    assert copy.topic("t").topic_id == tid


def test_create_with_an_invalid_config_entry_creates_nothing():
    fsm = SinkStateMachine()
    data = topic_state.encode_create("t", 1, uuid.uuid4(), {"cleanup.policy": "compact"})
    assert fsm.on_apply([_entry(1, data)])[0].error == ErrorCode.invalid_config
    assert fsm.topic("t") is None


def test_append_subtract_on_list_config():
    cur = topic_state.apply_ops({}, [(topic_state.Op.APPEND, "cleanup.policy", "delete")], False)
    assert cur == {"cleanup.policy": "delete"}
    with pytest.raises(TopicConfigError, match="compact"):
        topic_state.apply_ops(cur, [(topic_state.Op.APPEND, "cleanup.policy", "compact")], False)
    assert (
        topic_state.apply_ops(cur, [(topic_state.Op.SUBTRACT, "cleanup.policy", "delete")], False)
        == {}
    )
    with pytest.raises(TopicConfigError, match="unknown config operation"):
        topic_state.apply_ops(cur, [(9, "cleanup.policy", "delete")], False)


# ----------------------------------------------------------------- handlers


def _create_values(configs: dict, validate_only: bool = False, name: str = "t") -> dict:
    return {
        "topics": [
            {
                "name": name,
                "num_partitions": 2,
                "replication_factor": -1,
                "assignments": [],
                "configs": [{"name": k, "value": v} for k, v in configs.items()],
            }
        ],
        "timeout": 5000,
        "validate_only": validate_only,
    }


def test_create_topics_with_configs_and_the_bad_ones():
    node = MemoryNode()
    r = call(node, 19, 7, _create_values({"retention.ms": "60000"}))
    t = r.topics[0]
    assert int(t.error_code) == 0
    got = {c.name: (c.value, c.config_source) for c in t.configs}
    assert got["retention.ms"] == ("60000", ConfigSource.DYNAMIC_TOPIC_CONFIG)
    assert got["cleanup.policy"] == ("delete", ConfigSource.DEFAULT_CONFIG)
    assert node.fsm.topic_configs.overrides("t") == {"retention.ms": "60000"}
    for configs, match in [
        ({"cleanup.policy": "compact"}, "compact is not supported"),
        ({"nope": "1"}, "Unknown topic config name: nope"),
        ({"retention.bytes": "-3"}, "out of range"),
    ]:
        t = call(node, 19, 7, _create_values(configs, name="u")).topics[0]
        assert int(t.error_code) == ErrorCode.invalid_config and match in t.error_message
        assert node.fsm.topic("u") is None
    # validate_only checks the configs too, and creates nothing.
    t = call(node, 19, 7, _create_values({"retention.ms": "x"}, True, "v")).topics[0]
    assert int(t.error_code) == ErrorCode.invalid_config
    t = call(node, 19, 7, _create_values({"retention.ms": "5"}, True, "v")).topics[0]
    assert int(t.error_code) == 0 and node.fsm.topic("v") is None


def _describe(node, version=4, name="t", rtype=2, keys=None, synonyms=True):
    values = {
        "resources": [{"resource_type": rtype, "resource_name": name, "configuration_keys": keys}],
        "include_synonyms": synonyms,
        "include_documentation": True,
    }
    return call(node, 32, version, values).results[0]


@pytest.mark.parametrize("version", [1, 2, 3, 4])
def test_describe_configs_every_version(version):
    node = MemoryNode()
    call(node, 19, 7, _create_values({"retention.ms": "60000"}))
    res = _describe(node, version)
    assert int(res.error_code) == 0
    got = {c.name: c for c in res.configs}
    assert got["retention.ms"].value == "60000"
    assert got["retention.ms"].config_source == ConfigSource.DYNAMIC_TOPIC_CONFIG
    assert [s.name for s in got["retention.ms"].synonyms] == ["retention.ms", "log.retention.ms"]
    assert got["retention.bytes"].value == "-1"
    if version >= 3:
        assert got["retention.ms"].config_type == 5  # LONG
        assert "max timestamp" in got["retention.ms"].documentation
    only = _describe(node, version, keys=["max.message.bytes", "not.a.config"])
    assert [c.name for c in only.configs] == ["max.message.bytes"]
    assert (
        int(_describe(node, version, name="nope").error_code)
        == ErrorCode.unknown_topic_or_partition
    )
    broker = _describe(node, version, name="1", rtype=4)
    assert int(broker.error_code) == 0
    assert {c.name for c in broker.configs} >= {"log.retention.ms", "message.max.bytes"}
    assert all(c.read_only for c in broker.configs)
    other = _describe(node, version, name="7", rtype=4)
    assert int(other.error_code) == ErrorCode.invalid_request


def _alter_values(configs: dict, validate_only=False, name="t", rtype=2) -> dict:
    return {
        "resources": [
            {
                "resource_type": rtype,
                "resource_name": name,
                "configs": [{"name": k, "value": v} for k, v in configs.items()],
            }
        ],
        "validate_only": validate_only,
    }


def _incr_values(ops: list, validate_only=False, name="t") -> dict:
    return {
        "resources": [
            {
                "resource_type": 2,
                "resource_name": name,
                "configs": [{"name": n, "config_operation": op, "value": v} for op, n, v in ops],
            }
        ],
        "validate_only": validate_only,
    }


def test_alter_configs_replaces_and_refuses_bad_input():
    node = MemoryNode()
    call(node, 19, 7, _create_values({"retention.ms": "60000"}))
    r = call(node, 33, 2, _alter_values({"retention.bytes": "1000"})).responses[0]
    assert int(r.error_code) == 0
    assert node.fsm.topic_configs.overrides("t") == {"retention.bytes": "1000"}  # replaced
    for configs, code in [
        ({"cleanup.policy": "compact"}, ErrorCode.invalid_config),
        ({"unknown.name": "1"}, ErrorCode.invalid_config),
        ({"retention.ms": "-9"}, ErrorCode.invalid_config),
    ]:
        r = call(node, 33, 0, _alter_values(configs)).responses[0]
        assert int(r.error_code) == code and r.error_message
    assert node.fsm.topic_configs.overrides("t") == {"retention.bytes": "1000"}
    r = call(node, 33, 1, _alter_values({"retention.ms": "5"}, validate_only=True)).responses[0]
    assert int(r.error_code) == 0 and node.fsm.topic_configs.overrides("t") == {
        "retention.bytes": "1000"
    }
    r = call(node, 33, 1, _alter_values({"retention.ms": "5"}, name="nope")).responses[0]
    assert int(r.error_code) == ErrorCode.unknown_topic_or_partition
    r = call(node, 33, 1, _alter_values({"log.retention.ms": "5"}, name="1", rtype=4)).responses[0]
    assert int(r.error_code) == ErrorCode.invalid_request


def test_incremental_alter_configs_ops():
    node = MemoryNode()
    call(node, 19, 7, _create_values({"retention.ms": "60000"}))
    r = call(node, 44, 1, _incr_values([(0, "retention.bytes", "99"), (1, "retention.ms", None)]))
    assert int(r.responses[0].error_code) == 0
    assert node.fsm.topic_configs.overrides("t") == {"retention.bytes": "99"}
    r = call(node, 44, 0, _incr_values([(2, "retention.ms", "5")])).responses[0]
    assert int(r.error_code) == ErrorCode.invalid_config and "list configs" in r.error_message
    r = call(node, 44, 1, _incr_values([(2, "cleanup.policy", "compact")])).responses[0]
    assert int(r.error_code) == ErrorCode.invalid_config
    # A follower (nowhere to relay in memory) answers NOT_CONTROLLER.
    node.lead = 2
    r = call(node, 44, 1, _incr_values([(0, "retention.ms", "5")])).responses[0]
    assert int(r.error_code) == ErrorCode.not_controller


def test_plain_create_command_still_applies():
    fsm = SinkStateMachine()
    r = fsm.on_apply([_entry(1, commands.encode_create_topic("t", 1, uuid.uuid4()))])[0]
    assert r.error == ErrorCode.none and fsm.topic_configs.overrides("t") == {}
