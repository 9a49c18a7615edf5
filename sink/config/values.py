"""Value syntax shared by the configuration file, environment and flags.

Cluster membership is a list of peers, each with three addresses:
    raft      where the other nodes reach its Raft transport (gRPC)
    kafka     the ADVERTISED Kafka address clients are told in Metadata
    read_api  where connectors (Spark) reach its read API (gRPC)
The peer list is written `ID=RAFT/KAFKA/READ_API,...` in the environment or
on the command line, e.g. `1=127.0.0.1:7001/127.0.0.1:9092/127.0.0.1:7101`,
or as `[[peers]]` tables (id, raft, kafka, read_api) in the TOML file.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


class ConfigError(ValueError):
    """A configuration value is missing or invalid; the message names the key
    (`kafka.max_frame_bytes`) and, when loaded, where it came from."""


@dataclass(frozen=True, slots=True)
class Peer:
    id: int
    raft: str
    kafka: str
    read_api: str


def parse_hostport(name: str, value: str) -> tuple[str, int]:
    """`HOST:PORT` -> (host, port); port 0 (an ephemeral port) is allowed."""
    host, sep, port = value.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ConfigError(f"{name}: expected HOST:PORT, got {value!r}")
    return host, int(port)


def parse_peers(text: str, name: str = "node.peers") -> dict[int, Peer]:
    """`ID=RAFT/KAFKA/READ_API,...` -> {id: Peer}."""
    peers: dict[int, Peer] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        ident, sep, addrs = part.partition("=")
        pieces = addrs.split("/")
        if not sep or not ident.isdigit() or int(ident) < 1 or len(pieces) != 3:
            raise ConfigError(f"{name}: expected ID=RAFT/KAFKA/READ_API, got {part!r}")
        for label, value in zip(("raft", "kafka", "read_api"), pieces, strict=True):
            parse_hostport(f"{name}[{ident}].{label}", value)
        peers[int(ident)] = Peer(int(ident), *pieces)
    return peers


def parse_addresses(name: str, text: str) -> dict[int, str]:
    """`ID=HOST:PORT,...` -> {id: "HOST:PORT"}."""
    out: dict[int, str] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        ident, sep, addr = part.partition("=")
        if not sep or not ident.isdigit():
            raise ConfigError(f"{name}: expected ID=HOST:PORT, got {part!r}")
        parse_hostport(f"{name}[{ident}]", addr)
        out[int(ident)] = addr
    return out


def format_peers(peers: dict[int, Peer]) -> str:
    return ",".join(f"{p.id}={p.raft}/{p.kafka}/{p.read_api}" for p in peers.values())


def format_addresses(addresses: dict[int, str]) -> str:
    return ",".join(f"{i}={a}" for i, a in addresses.items())


def coerce_peers(name: str, value: Any) -> dict[int, Peer]:
    """A string, a list of TOML tables or an already parsed dict."""
    if isinstance(value, str):
        return parse_peers(value, name)
    if isinstance(value, list):  # TOML [[peers]] tables
        try:
            peers = {
                int(p["id"]): Peer(
                    int(p["id"]), str(p["raft"]), str(p["kafka"]), str(p["read_api"])
                )
                for p in value
            }
        except (KeyError, TypeError, ValueError) as exc:
            raise ConfigError(
                f"{name}: each entry needs id, raft, kafka, read_api ({exc})"
            ) from None
        return parse_peers(format_peers(peers), name)  # the same checks as the string form
    if isinstance(value, dict) and all(isinstance(p, Peer) for p in value.values()):
        return dict(value)
    raise ConfigError(f"{name}: expected ID=RAFT/KAFKA/READ_API,... or a list of tables")


def coerce_addresses(name: str, value: Any) -> dict[int, str]:
    """A string or a table {id: "HOST:PORT"}."""
    if isinstance(value, str):
        return parse_addresses(name, value)
    if isinstance(value, dict):
        try:
            text = format_addresses({int(k): str(v) for k, v in value.items()})
        except ValueError:
            raise ConfigError(f"{name}: expected ID=HOST:PORT,... or a table") from None
        return parse_addresses(name, text)
    raise ConfigError(f"{name}: expected ID=HOST:PORT,... or a table")


_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")


def coerce_scalar(name: str, kind: type, value: Any) -> Any:
    """Text (environment, flags) or a TOML value -> int / float / bool / str."""
    if kind is bool:
        if isinstance(value, bool):
            return value
        text = str(value).strip().lower()
        if text in _TRUE:
            return True
        if text in _FALSE:
            return False
        raise ConfigError(f"{name}: expected true/false, got {value!r}")
    if kind is int:
        if isinstance(value, bool | float):
            raise ConfigError(f"{name}: expected an integer, got {value!r}")
        try:
            return int(value)
        except (TypeError, ValueError):
            raise ConfigError(f"{name}: expected an integer, got {value!r}") from None
    if kind is float:
        if isinstance(value, bool):
            raise ConfigError(f"{name}: expected a number, got {value!r}")
        try:
            return float(value)
        except (TypeError, ValueError):
            raise ConfigError(f"{name}: expected a number, got {value!r}") from None
    if isinstance(value, dict | list):
        raise ConfigError(f"{name}: expected a string, got {value!r}")
    return str(value)
