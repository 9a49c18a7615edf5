"""sink.config: one table drives file, environment and flags; precedence; errors that
name the key and its source; the operations doc's table is the table."""

from __future__ import annotations

import json
import pathlib
from typing import Any

import pytest

from raftlog.runtime import NodeOptions
from raftlog.storage import StorageOptions
from sink.cli import build_parser
from sink.config import (
    BY_KEY,
    LEGACY,
    OPTIONS,
    ConfigError,
    Option,
    Peer,
    flag_overrides,
    format_peers,
    load_config,
    parse_addresses,
    parse_peers,
    render_table,
)
from sink.config.doc import BEGIN, END
from sink.kafka.limits import KafkaLimits
from sink.service import SinkOptions

PEERS = "1=127.0.0.1:7001/127.0.0.1:9092/127.0.0.1:7101,2=h2:7001/h2:9092/h2:7101"
BASE = {"node.id": "1", "node.data_dir": "/d", "node.peers": PEERS}
DOC = pathlib.Path(__file__).resolve().parents[2] / "docs" / "operations.md"


def test_peers_round_trip():
    peers = parse_peers(PEERS)
    assert peers[2] == Peer(2, "h2:7001", "h2:9092", "h2:7101")
    assert parse_peers(format_peers(peers)) == peers


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("x=a:1/b:2/c:3", "expected ID="),
        ("1=a:1/b:2", "expected ID="),
        ("1=a:1/b:x/c:3", "HOST:PORT"),
        ("0=a:1/b:2/c:3", "expected ID="),
    ],
)
def test_bad_peers(text, match):
    with pytest.raises(ConfigError, match=match):
        parse_peers(text)


# ------------------------------------------------------------------ the table


def test_every_setting_is_documented_and_every_part_is_reachable():
    for opt in OPTIONS:
        assert opt.doc, f"{opt.key} has no documentation (a docstring under its field)"
    keys = set(BY_KEY)
    for cls, section, skip in (
        (KafkaLimits, "kafka", set()),
        (SinkOptions, "kafka", set()),
        (NodeOptions, "raft", {"storage", "snapshot_every_entries", "snapshot_keep_entries"}),
        (StorageOptions, "storage", set()),
    ):
        for name in cls.__dataclass_fields__:
            if name not in skip:
                assert f"{section}.{name}" in keys, f"{cls.__name__}.{name} is not configurable"
    assert "retention.snapshot_every_entries" in keys  # NodeOptions' snapshot period
    assert set(LEGACY.values()) <= keys


def test_no_variable_or_flag_names_two_settings():
    for names in ("env_names", "flag_names"):
        all_names = [n for o in OPTIONS for n in getattr(o, names)]
        assert len(all_names) == len(set(all_names)), names


def test_max_frame_bytes_default_is_the_kafka_limits_one():
    # One default, in KafkaLimits: 16 MiB (below storage.max_entry_bytes, 64 MiB).
    assert BY_KEY["kafka.max_frame_bytes"].default == KafkaLimits().max_frame_bytes == 16 << 20
    assert KafkaLimits().max_frame_bytes < StorageOptions().max_entry_bytes
    cfg = load_config(None, env={}, overrides=BASE)
    assert cfg.kafka.limits.max_frame_bytes == 16 << 20


def test_operations_doc_table_is_generated_from_the_table():
    text = DOC.read_text()
    start, end = text.index(BEGIN), text.index(END) + len(END)
    assert text[start:end] == render_table(), (
        "docs/operations.md is stale: python -m sink.config --doc --write docs/operations.md"
    )


# ------------------------------------- every field from file, env and flag alike

_STR_SAMPLES = {
    "node.data_dir": "/elsewhere",
    "node.read_api_listen": "0.0.0.0:7102",
    "node.metrics_listen": "127.0.0.1:9400",
    "node.log_level": "INFO",
    "node.event_loop": "asyncio",
    "node.host": "rack-b",
    "storage.on_corruption": "stop",
    "kafka.listen": "0.0.0.0:9094",
    "kafka.external_listen": "0.0.0.0:9095",
    "kafka.cluster_id": "prod-eu",
    "raft.cluster_id": "raft-eu-1",
    "raft.listen": "0.0.0.0:7002",
    "kafka.max_connections_per_ip_overrides": "10.0.0.7=5000,::1=3",
    "topics.message_timestamp_type": "LogAppendTime",
    "tls.cert_file": "/etc/raftsink/node.pem",
    "tls.key_file": "/etc/raftsink/node.key",
    "tls.ca_file": "/etc/raftsink/ca.pem",
    "tls.kafka_client_auth": "required",
    "tls.read_api_client_auth": "none",
    "sasl.mechanisms": "SCRAM-SHA-512",
    "sasl.bootstrap_users": "admin:secret",
    "sasl.bootstrap_users_file": "/etc/raftsink/users",
    "sasl.relay_user": "admin",
    "authorization.super_users": "User:admin;User:CN=node1,O=acme",
    "authorization.tls_principal_rules": "RULE:^CN=([^,]*).*$/$1/L,DEFAULT",
}
_SPECIAL: dict[str, Any] = {
    "node.id": 2,
    "retention.hard_max_entries": 2_000_000,
    "node.peers": PEERS + ",3=h3:7001/h3:9092/h3:7101",
    "kafka.external_addresses": "1=e1:19092,2=e2:29092",
}


def _sample(opt: Option) -> Any:
    """A valid value different from the default (with BASE, which sets both peers'
    external addresses so that kafka.external_listen may be set alone)."""
    if opt.key in _SPECIAL:
        return _SPECIAL[opt.key]
    if opt.key in _STR_SAMPLES:
        return _STR_SAMPLES[opt.key]
    if opt.kind is bool:
        return not opt.default
    if opt.kind is int:
        return opt.default + 1
    if opt.kind is float:
        return opt.default * 2
    raise AssertionError(f"no sample for {opt.key}")


def _expected(opt: Option, value: Any) -> Any:
    if opt.kind == "peers":
        return parse_peers(value)
    if opt.kind == "addresses":
        return parse_addresses(opt.key, value)
    return value


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return repr(value) if isinstance(value, float) else str(value)


def _toml(value: Any) -> str:
    if isinstance(value, bool | int | float):
        return _text(value)
    return json.dumps(value)


# A tls.* switch is valid only with the files it needs (checked, not read, at load).
_TLS_FILES = {k: v for k, v in _STR_SAMPLES.items() if k.startswith("tls.") and "file" in k}


def _base_for(opt: Option) -> dict[str, str]:
    base = {**BASE, "kafka.external_addresses": "1=e:1,2=e:2"}
    if opt.section == "tls":
        base.update(_TLS_FILES)
    base.pop(opt.key, None)
    return base


def _via_file(tmp_path, opt: Option, name: str, value: Any, top_level: bool) -> Any:
    lines = []
    base = _base_for(opt)
    sections: dict[str, list[str]] = {}
    for key, text in base.items():
        section, field = key.split(".")
        sections.setdefault(section, []).append(f"{field} = {json.dumps(text)}")
    if top_level:
        lines.append(f"{name} = {_toml(value)}")
    else:
        section, field = name.split(".")
        sections.setdefault(section, []).append(f"{field} = {_toml(value)}")
    for section, entries in sections.items():
        lines += [f"[{section}]", *entries]
    f = tmp_path / f"{name}.toml"
    f.write_text("\n".join(lines) + "\n")
    # node.id is text in BASE: the file form of an int key must accept it too.
    return opt.get(load_config(str(f), env={}))


def _via_env(opt: Option, env_name: str, value: Any) -> Any:
    env = {BY_KEY[k].env: v for k, v in _base_for(opt).items()}
    env[env_name] = _text(value)
    return opt.get(load_config(None, env=env))


def _via_flag(opt: Option, flag: str, value: Any) -> Any:
    argv = ["serve"]
    for key, text in _base_for(opt).items():
        argv += [BY_KEY[key].flag, text]
    argv += [flag, _text(value)]
    overrides, sources = flag_overrides(build_parser().parse_args(argv))
    return opt.get(load_config(None, env={}, overrides=overrides, override_sources=sources))


@pytest.mark.parametrize("opt", OPTIONS, ids=lambda o: o.key)
def test_every_setting_from_file_env_and_flag_gives_the_same_value(tmp_path, opt):
    value = _sample(opt)
    want = _expected(opt, value)
    assert want != opt.default
    assert _via_file(tmp_path, opt, opt.key, value, top_level=False) == want
    assert _via_env(opt, opt.env, value) == want
    assert _via_flag(opt, opt.flag, value) == want
    for alias in opt.aliases:  # the first version's flat names
        assert _via_file(tmp_path, opt, alias, value, top_level=True) == want
        assert _via_env(opt, "RAFTSINK_" + alias.upper(), value) == want
        assert _via_flag(opt, "--" + alias.replace("_", "-"), value) == want


def test_precedence_flag_over_env_over_file_over_default(tmp_path):
    f = tmp_path / "node.toml"
    f.write_text(
        'node_id = 1\ndata_dir = "/from/file"\ndefault_partitions = 3\ntick_ms = 40\n'
        "[kafka]\nmax_connections = 11\nidle_timeout_s = 5.0\n"
        '[[peers]]\nid = 1\nraft = "a:1"\nkafka = "a:2"\nread_api = "a:3"\n'
    )
    env = {
        "RAFTSINK_DATA_DIR": "/from/env",
        "RAFTSINK_DEFAULT_PARTITIONS": "5",
        "RAFTSINK_KAFKA_MAX_CONNECTIONS": "12",
    }
    cfg = load_config(
        str(f),
        env=env,
        overrides={"default_partitions": 7, "tick_ms": None, "kafka.max_connections": "13"},
    )
    assert cfg.data_dir == "/from/env"  # env beats file
    assert cfg.kafka.default_partitions == 7  # flag beats env
    assert cfg.kafka.limits.max_connections == 13  # flag beats env beats file
    assert cfg.kafka.limits.idle_timeout_s == 5.0  # file beats default
    assert cfg.raft.options.tick_ms == 40  # an unset flag (None) does not override
    assert cfg.raft.options.election_ticks == 10  # default
    assert cfg.listen("kafka") == "a:2" and cfg.me.read_api == "a:3"
    assert cfg.storage.write_caching is False and cfg.kafka.auto_create_topics is True
    assert cfg.event_loop == "uvloop"


def test_node_options_join_raft_storage_and_retention():
    cfg = load_config(
        None,
        env={},
        overrides={
            **BASE,
            "write_caching": "true",
            "snapshot_every_entries": "500",
            "raft.pre_vote": "false",
        },
    )
    opts = cfg.node_options()
    assert opts.storage.write_caching is True and opts.snapshot_every_entries == 500
    assert opts.snapshot_keep_entries == 0  # retention decides what the log keeps
    assert opts.pre_vote is False and opts.tick_ms == 30


# ------------------------------------------------------------------- errors


@pytest.mark.parametrize(
    ("values", "match"),
    [
        ({}, r"missing node\.id \(node_id\), node\.data_dir \(data_dir\), node\.peers \(peers\)"),
        ({**BASE, "node.id": "3"}, r"node\.peers must include this node"),
        ({**BASE, "default_partitions": 0}, r"kafka\.default_partitions must be 1\.\.kafka"),
        ({**BASE, "default_partitions": 2000}, r"kafka\.max_create_partitions \(1024\)"),
        (
            {**BASE, "auto_create_topics": "maybe"},
            r"kafka\.auto_create_topics: expected true/false",
        ),
        ({**BASE, "node.id": "one"}, r"node\.id: expected an integer"),
        (
            {**BASE, "data_dir": "/x"},
            r"node\.data_dir is given twice: flag --node-data-dir and flag --data-dir",
        ),
        ({**BASE, "kafka_listen": "nope"}, r"kafka\.listen: expected HOST:PORT"),
        ({**BASE, "log_level": "LOUD"}, r"node\.log_level"),
        ({**BASE, "event_loop": "tokio"}, r"node\.event_loop"),
        ({**BASE, "max_frame_bytes": 10}, r"kafka\.max_frame_bytes must be at least 64"),
        ({**BASE, "raft.heartbeat_ticks": 10}, r"raft\.heartbeat_ticks must be below"),
        ({**BASE, "storage.segment_bytes": 100}, r"storage\.segment_bytes must be >= 4096"),
        ({**BASE, "kafka.produce_timeout_s": 0}, r"kafka\.produce_timeout_s must be positive"),
        ({**BASE, "node.shutdown_drain_ms": -1}, r"node\.shutdown_drain_ms must be >= 0"),
        (
            {**BASE, "kafka.sequence_gap_grace_ms": -1},
            r"kafka\.sequence_gap_grace_ms must be >= 0",
        ),
        ({**BASE, "transport.backoff_max_s": 0.01}, r"^transport: "),
        ({**BASE, "node.host": "rack a"}, r"node\.host must be printable text .* got 'rack a'"),
        ({**BASE, "node.host": "h1,h2"}, r"node\.host must be"),
        (
            {**BASE, "cluster.leader_balance_max_in_flight": 0},
            r"cluster\.leader_balance_max_in_flight must be >= 1, got 0 \(from flag",
        ),
        (
            {**BASE, "cluster.leader_balance_return_delay_s": -1},
            r"cluster\.leader_balance_return_delay_s must be >= 0",
        ),
        ({**BASE, "cluster.leader_balance_interval_s": 0}, r"cluster\.leader_balance_interval_s"),
        ({**BASE, "cluster.leader_balance": "sometimes"}, r"cluster\.leader_balance: expected"),
        (
            {**BASE, "raft.beats_yield_to_appends": "mostly"},
            r"raft\.beats_yield_to_appends: expected",
        ),
        (
            {**BASE, "retention_max_entries": 10, "retention_hard_max_entries": 5},
            r"retention\.hard_max_entries must be 0 or >= retention\.max_entries",
        ),
    ],
)
def test_invalid_values_name_the_key(values, match):
    with pytest.raises(ConfigError, match=match):
        load_config(None, env={}, overrides=values)


def test_errors_say_where_the_value_came_from(tmp_path):
    with pytest.raises(ConfigError) as err:
        load_config(None, env={**_env(BASE), "RAFTSINK_MAX_FRAME_BYTES": "10"})
    assert str(err.value) == (
        "kafka.max_frame_bytes must be at least 64 (from env RAFTSINK_MAX_FRAME_BYTES)"
    )
    f = tmp_path / "n.toml"
    f.write_text("[kafka]\nmax_frame_bytes = 10\n")
    with pytest.raises(ConfigError, match=rf"\(from file {f} key kafka\.max_frame_bytes\)$"):
        load_config(str(f), env=_env(BASE))
    argv = ["serve", "--max-frame-bytes", "lots"]
    overrides, sources = flag_overrides(build_parser().parse_args(argv))
    with pytest.raises(
        ConfigError, match=r"kafka\.max_frame_bytes: expected an integer.*\(from flag --max-frame"
    ):
        load_config(None, env=_env(BASE), overrides=overrides, override_sources=sources)


def _env(values: dict[str, str]) -> dict[str, str]:
    return {BY_KEY[k].env: v for k, v in values.items()}


def test_a_key_given_twice_in_one_source_is_refused(tmp_path):
    with pytest.raises(ConfigError, match=r"raft\.tick_ms is given twice"):
        load_config(None, env={**_env(BASE), "RAFTSINK_TICK_MS": "5", "RAFTSINK_RAFT_TICK_MS": "6"})
    f = tmp_path / "twice.toml"
    f.write_text("tick_ms = 5\n[raft]\ntick_ms = 6\n")
    with pytest.raises(ConfigError, match=r"raft\.tick_ms is given twice"):
        load_config(str(f), env=_env(BASE))


def test_other_raftsink_variables_are_ignored():
    # The tools' own variables (the Spark demo's RAFTSINK_NODES, ...) share the prefix.
    cfg = load_config(None, env={**_env(BASE), "RAFTSINK_NODES": "x", "RAFTSINK_BOOTSTRAP": "y"})
    assert cfg.node_id == 1


def test_unknown_file_keys_and_bad_toml(tmp_path):
    f = tmp_path / "bad.toml"
    f.write_text("node_idd = 1\n[kafka]\nmax_frame = 3\n")
    with pytest.raises(ConfigError, match=r"unknown keys \['kafka\.max_frame', 'node_idd'\]"):
        load_config(str(f), env={})
    f.write_text("node_id = \n")
    with pytest.raises(ConfigError, match=r"bad\.toml"):
        load_config(str(f), env={})
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(str(tmp_path / "absent.toml"), env={})


def test_serve_reports_configuration_errors(capsys):
    from sink.cli import main

    assert main(["serve", "--node-id", "1"]) == 2
    assert "configuration error" in capsys.readouterr().err


def test_the_launchers_flags_still_parse():
    # sink's process launchers and the chaos campaign start nodes with these.
    argv = (
        "serve --node-id 2 --data-dir /d --peers " + PEERS + " --default-partitions 3"
        " --log-level INFO --tick-ms 20 --election-ticks 8 --write-caching"
        " --no-auto-create-topics --snapshot-every-entries 100 --retention-max-entries 50"
        " --retention-hard-max-entries 60 --max-frame-bytes 2048 --event-loop asyncio"
        " --raft-listen 0.0.0.0:7001 --kafka-listen 0.0.0.0:9092 --read-api-listen 0.0.0.0:7101"
        " --metrics-listen 127.0.0.1:9400 --cluster-id c"
    ).split()
    overrides, sources = flag_overrides(build_parser().parse_args(argv))
    cfg = load_config(None, env={}, overrides=overrides, override_sources=sources)
    assert cfg.node_id == 2 and cfg.kafka.default_partitions == 3
    assert cfg.storage.write_caching is True and cfg.kafka.auto_create_topics is False
    assert cfg.raft.options.tick_ms == 20 and cfg.raft.options.election_ticks == 8
    assert cfg.retention.snapshot_every_entries == 100 and cfg.retention.hard_max_entries == 60
    assert cfg.kafka.limits.max_frame_bytes == 2048 and cfg.event_loop == "asyncio"
    assert cfg.listen("raft") == "0.0.0.0:7001" and cfg.listen("read_api") == "0.0.0.0:7101"
    assert sources["kafka.auto_create_topics"] == "flag --no-auto-create-topics"


def test_external_listener_needs_every_node():
    base = {**BASE, "kafka_external_listen": "0.0.0.0:9093"}
    cfg = load_config(
        None, env={}, overrides={**base, "external_kafka": "1=127.0.0.1:19092,2=127.0.0.1:29092"}
    )
    assert cfg.kafka.external_addresses == {1: "127.0.0.1:19092", 2: "127.0.0.1:29092"}
    with pytest.raises(ConfigError, match=r"every node of node\.peers"):
        load_config(None, env={}, overrides={**base, "external_kafka": "1=127.0.0.1:19092"})
    with pytest.raises(ConfigError, match="ID=HOST:PORT"):
        load_config(None, env={}, overrides={**base, "external_kafka": "one=x:1"})


def test_host_label_defaults_to_the_node_id_and_balancer_keys_map_to_its_options():
    from sink.placement import BalancerOptions

    cfg = load_config(None, env={}, overrides=BASE)
    assert cfg.node.host == "" and cfg.host == "1"  # every node its own host
    assert cfg.cluster.leader_balance is True
    assert cfg.cluster.balancer_options() == BalancerOptions()  # one set of defaults
    cfg = load_config(
        None,
        env={**_env(BASE), "RAFTSINK_NODE_HOST": "h2"},
        overrides={
            "cluster.leader_balance": "off",
            "cluster.leader_balance_return_delay_s": "5",
            "cluster.leader_balance_max_in_flight": "2",
        },
    )
    assert cfg.host == "h2"
    opts = cfg.cluster.balancer_options()
    assert (opts.enabled, opts.return_delay_s, opts.max_in_flight) == (False, 5.0, 2)


def test_partition_groups_switch_is_on_by_default_and_typed(tmp_path):
    from sink.config import ConfigError, load_config

    base = {
        "RAFTSINK_NODE_ID": "1",
        "RAFTSINK_NODE_DATA_DIR": str(tmp_path / "d"),
        "RAFTSINK_NODE_PEERS": "1=127.0.0.1:1/127.0.0.1:2/127.0.0.1:3",
    }
    assert load_config(env=base).cluster.partition_groups is True
    on = load_config(env={**base, "RAFTSINK_CLUSTER_PARTITION_GROUPS": "true"})
    assert on.cluster.partition_groups is True and on.cluster.default_replication_factor == 0
    off = load_config(env={**base, "RAFTSINK_CLUSTER_PARTITION_GROUPS": "false"})
    assert off.cluster.partition_groups is False
    toml = tmp_path / "n.toml"
    toml.write_text("[cluster]\npartition_groups = true\ndefault_replication_factor = 2\n")
    cfg = load_config(str(toml), env=base)
    assert cfg.cluster.partition_groups and cfg.cluster.default_replication_factor == 2
    with pytest.raises(ConfigError, match="default_replication_factor"):
        load_config(env={**base, "RAFTSINK_CLUSTER_DEFAULT_REPLICATION_FACTOR": "-1"})
    with pytest.raises(ConfigError):
        load_config(env={**base, "RAFTSINK_CLUSTER_PARTITION_GROUPS": "maybe"})
