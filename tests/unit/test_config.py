"""sink.config: precedence file < environment < flags, and clear errors."""

from __future__ import annotations

import pytest

from sink.config import ConfigError, Peer, format_peers, load_config, parse_peers

PEERS = "1=127.0.0.1:7001/127.0.0.1:9092/127.0.0.1:7101,2=h2:7001/h2:9092/h2:7101"


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


def test_precedence_file_env_flags(tmp_path):
    f = tmp_path / "node.toml"
    f.write_text(
        'node_id = 1\ndata_dir = "/from/file"\ndefault_partitions = 3\ntick_ms = 40\n'
        '[[peers]]\nid = 1\nraft = "a:1"\nkafka = "a:2"\nread_api = "a:3"\n'
    )
    env = {"RAFTSINK_DATA_DIR": "/from/env", "RAFTSINK_DEFAULT_PARTITIONS": "5"}
    cfg = load_config(str(f), env=env, overrides={"default_partitions": 7, "tick_ms": None})
    assert cfg.data_dir == "/from/env"  # env beats file
    assert cfg.default_partitions == 7  # flag beats env
    assert cfg.tick_ms == 40  # an unset flag (None) does not override
    assert cfg.listen("kafka") == "a:2" and cfg.me.read_api == "a:3"
    assert cfg.write_caching is False and cfg.auto_create_topics is True
    assert cfg.event_loop == "uvloop"


@pytest.mark.parametrize(
    ("values", "match"),
    [
        ({}, "missing node_id, data_dir, peers"),
        ({"node_id": 3, "data_dir": "/d", "peers": PEERS}, "must include this node"),
        (
            {"node_id": 1, "data_dir": "/d", "peers": PEERS, "default_partitions": 0},
            "default_partitions",
        ),
        (
            {"node_id": 1, "data_dir": "/d", "peers": PEERS, "auto_create_topics": "maybe"},
            "true/false",
        ),
        ({"node_id": "one", "data_dir": "/d", "peers": PEERS}, "integer"),
        ({"node_id": 1, "data_dir": "/d", "peers": PEERS, "kafka_listen": "nope"}, "HOST:PORT"),
        ({"node_id": 1, "data_dir": "/d", "peers": PEERS, "log_level": "LOUD"}, "log_level"),
        ({"node_id": 1, "data_dir": "/d", "peers": PEERS, "event_loop": "tokio"}, "event_loop"),
    ],
)
def test_invalid_configs_name_the_problem(values, match):
    with pytest.raises(ConfigError, match=match):
        load_config(None, env={}, overrides=values)


def test_unknown_file_keys_and_bad_toml(tmp_path):
    f = tmp_path / "bad.toml"
    f.write_text("node_idd = 1\n")
    with pytest.raises(ConfigError, match="unknown keys"):
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


def test_external_listener_needs_every_node():
    base = {"node_id": 1, "data_dir": "/d", "peers": PEERS, "kafka_external_listen": "0.0.0.0:9093"}
    cfg = load_config(
        None, env={}, overrides={**base, "external_kafka": "1=127.0.0.1:19092,2=127.0.0.1:29092"}
    )
    assert cfg.external_kafka == {1: "127.0.0.1:19092", 2: "127.0.0.1:29092"}
    with pytest.raises(ConfigError, match="every peer"):
        load_config(None, env={}, overrides={**base, "external_kafka": "1=127.0.0.1:19092"})
    with pytest.raises(ConfigError, match="ID=HOST:PORT"):
        load_config(None, env={}, overrides={**base, "external_kafka": "one=x:1"})
