"""Typed configuration of a raftsink node, validated once at start-up.

Sources, later ones winning: a TOML file (`--config`), environment variables
(RAFTSINK_<NAME>, upper-case), command-line flags. Every field's default and
meaning is below; `raftsink serve --help` and docs/operations.md repeat them.

Cluster membership is a list of peers, each with three addresses:
    raft      where the other nodes reach its Raft transport (gRPC)
    kafka     the ADVERTISED Kafka address clients are told in Metadata
    read_api  where connectors (Spark) reach its read API (gRPC)
The peer list is written `ID=RAFT/KAFKA/READ_API,...` in the environment or
on the command line, e.g. `1=127.0.0.1:7001/127.0.0.1:9092/127.0.0.1:7101`.
"""

from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass, field, fields
from typing import Any


class ConfigError(ValueError):
    """A configuration value is missing or invalid; the message names it."""


@dataclass(frozen=True, slots=True)
class Peer:
    id: int
    raft: str
    kafka: str
    read_api: str


def _parse_hostport(name: str, value: str) -> tuple[str, int]:
    host, sep, port = value.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ConfigError(f"{name}: expected HOST:PORT, got {value!r}")
    return host, int(port)


def parse_peers(text: str) -> dict[int, Peer]:
    """`ID=RAFT/KAFKA/READ_API,...` -> {id: Peer}."""
    peers: dict[int, Peer] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        ident, sep, addrs = part.partition("=")
        pieces = addrs.split("/")
        if not sep or not ident.isdigit() or int(ident) < 1 or len(pieces) != 3:
            raise ConfigError(f"peers: expected ID=RAFT/KAFKA/READ_API, got {part!r}")
        for label, value in zip(("raft", "kafka", "read_api"), pieces, strict=True):
            _parse_hostport(f"peers[{ident}].{label}", value)
        peers[int(ident)] = Peer(int(ident), *pieces)
    return peers


def parse_addresses(name: str, text: str) -> dict[int, str]:
    """`ID=HOST:PORT,...` -> {id: "HOST:PORT"}."""
    out: dict[int, str] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        ident, sep, addr = part.partition("=")
        if not sep or not ident.isdigit():
            raise ConfigError(f"{name}: expected ID=HOST:PORT, got {part!r}")
        _parse_hostport(f"{name}[{ident}]", addr)
        out[int(ident)] = addr
    return out


def format_peers(peers: dict[int, Peer]) -> str:
    return ",".join(f"{p.id}={p.raft}/{p.kafka}/{p.read_api}" for p in peers.values())


EVENT_LOOPS = ("uvloop", "asyncio")


@dataclass(frozen=True, slots=True)
class SinkConfig:
    node_id: int
    """This node's id (>= 1); must appear in peers."""
    data_dir: str
    """Raft log, snapshots and LMDB index live here."""
    peers: dict[int, Peer] = field(default_factory=dict)
    """Every node of the cluster, this one included."""
    raft_listen: str = ""
    """Bind address of the Raft transport; default: this node's peers[].raft."""
    kafka_listen: str = ""
    """Bind address of the Kafka listener; default: this node's peers[].kafka."""
    read_api_listen: str = ""
    """Bind address of the read API; default: this node's peers[].read_api."""
    metrics_listen: str = ""
    """HOST:PORT of the Prometheus /metrics endpoint; empty: no endpoint."""
    kafka_external_listen: str = ""
    """Bind address of a second, EXTERNAL Kafka listener (e.g. for clients outside a
    container network); empty: none. Metadata on it advertises external_kafka."""
    external_kafka: dict[int, str] = field(default_factory=dict)
    """node id -> HOST:PORT of every node as seen by external clients
    (`1=127.0.0.1:19092,2=...`); required with kafka_external_listen."""
    cluster_id: str = "raftsink"
    """Reported to Kafka clients in Metadata."""
    default_partitions: int = 1
    """Partitions of an auto-created topic."""
    auto_create_topics: bool = True
    """Create unknown topics on Metadata/Produce (like Kafka's auto.create.topics.enable)."""
    tick_ms: int = 30
    """Raft tick; elections after election_ticks..2*election_ticks ticks of silence."""
    election_ticks: int = 10
    """Raft election timeout in ticks (300-600 ms by default)."""
    max_frame_bytes: int = 100 * 1024 * 1024
    """Largest Kafka request accepted (Kafka's socket.request.max.bytes)."""
    write_caching: bool = False
    """Relaxed durability (see docs/storage.md): OFF by default; a power cut can
    lose acknowledged records when on."""
    snapshot_every_entries: int = 0
    """Snapshot the sink state (and allow log compaction) every this many applied
    entries; 0: never, so the Raft log keeps every record."""
    retention_max_entries: int = 1_000_000
    """Soft retention: with snapshots on, compact the log down to this many entries,
    but never past data a registered pipeline has not committed."""
    retention_hard_max_entries: int = 0
    """Hard retention: the log never holds more than this many entries, even if a
    pipeline has not consumed them (the reader then reports data loss); 0: none."""
    log_level: str = "WARNING"
    """Python logging level of the node (INFO shows elections and connections)."""
    event_loop: str = "uvloop"
    """asyncio event loop of the node: "uvloop" (libuv; about 10% less CPU per
    record and a lower latency tail, see docs/operations.md) or "asyncio" (the
    standard library's loop)."""

    def __post_init__(self) -> None:
        if self.node_id < 1:
            raise ConfigError(f"node_id must be >= 1, got {self.node_id}")
        if not self.data_dir:
            raise ConfigError("data_dir is required")
        if self.node_id not in self.peers:
            raise ConfigError(f"peers must include this node (id {self.node_id})")
        if self.kafka_external_listen and set(self.external_kafka) != set(self.peers):
            raise ConfigError("external_kafka must give an address for every peer")
        for name in (
            "raft_listen",
            "kafka_listen",
            "read_api_listen",
            "metrics_listen",
            "kafka_external_listen",
        ):
            value = getattr(self, name)
            if value:
                _parse_hostport(name, value)
        if self.default_partitions < 1 or self.default_partitions > 10_000:
            raise ConfigError(f"default_partitions must be 1..10000, got {self.default_partitions}")
        if self.tick_ms < 1 or self.election_ticks < 2:
            raise ConfigError("tick_ms must be >= 1 and election_ticks >= 2")
        if min(self.snapshot_every_entries, self.retention_max_entries) < 0:
            raise ConfigError("snapshot_every_entries and retention_max_entries must be >= 0")
        if self.retention_hard_max_entries and (
            self.retention_hard_max_entries < self.retention_max_entries
        ):
            raise ConfigError("retention_hard_max_entries must be 0 or >= retention_max_entries")
        if self.max_frame_bytes < 1024:
            raise ConfigError("max_frame_bytes must be >= 1024")
        if self.event_loop not in EVENT_LOOPS:
            raise ConfigError(
                f"event_loop must be one of {', '.join(EVENT_LOOPS)}, got {self.event_loop!r}"
            )
        if self.log_level.upper() not in ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"):
            raise ConfigError(f"log_level: unknown level {self.log_level!r}")

    @property
    def me(self) -> Peer:
        return self.peers[self.node_id]

    def listen(self, which: str) -> str:
        """Bind address for raft / kafka / read_api (explicit, else the peer address)."""
        return getattr(self, f"{which}_listen") or getattr(self.me, which)


_INT_FIELDS = {
    "node_id",
    "default_partitions",
    "tick_ms",
    "election_ticks",
    "max_frame_bytes",
    "snapshot_every_entries",
    "retention_max_entries",
    "retention_hard_max_entries",
}
_BOOL_FIELDS = {"auto_create_topics", "write_caching"}


def _coerce(name: str, value: Any) -> Any:
    if name == "peers":
        if isinstance(value, str):
            return parse_peers(value)
        if isinstance(value, list):  # TOML [[peers]] tables
            try:
                return {
                    int(p["id"]): Peer(int(p["id"]), p["raft"], p["kafka"], p["read_api"])
                    for p in value
                }
            except (KeyError, TypeError, ValueError) as exc:
                raise ConfigError(
                    f"peers: each entry needs id, raft, kafka, read_api ({exc})"
                ) from None
        if isinstance(value, dict):
            return value
        raise ConfigError("peers: expected a string or a list of tables")
    if name == "external_kafka":
        if isinstance(value, str):
            return parse_addresses(name, value)
        if isinstance(value, dict):
            return {int(k): str(v) for k, v in value.items()}
        raise ConfigError("external_kafka: expected ID=HOST:PORT,... or a table")
    if name in _INT_FIELDS:
        try:
            return int(value)
        except (TypeError, ValueError):
            raise ConfigError(f"{name}: expected an integer, got {value!r}") from None
    if name in _BOOL_FIELDS:
        if isinstance(value, bool):
            return value
        text = str(value).strip().lower()
        if text in ("1", "true", "yes", "on"):
            return True
        if text in ("0", "false", "no", "off"):
            return False
        raise ConfigError(f"{name}: expected true/false, got {value!r}")
    return str(value)


def load_config(
    file: str | None = None,
    env: dict[str, str] | None = None,
    overrides: dict[str, Any] | None = None,
) -> SinkConfig:
    """Merge file < environment < overrides into a validated SinkConfig."""
    names = [f.name for f in fields(SinkConfig)]
    values: dict[str, Any] = {}
    if file:
        try:
            with open(file, "rb") as fh:
                data = tomllib.load(fh)
        except OSError as exc:
            raise ConfigError(f"cannot read config file {file}: {exc}") from None
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"config file {file}: {exc}") from None
        unknown = set(data) - set(names)
        if unknown:
            raise ConfigError(f"config file {file}: unknown keys {sorted(unknown)}")
        values.update(data)
    environ = os.environ if env is None else env
    for name in names:
        key = f"RAFTSINK_{name.upper()}"
        if key in environ:
            values[name] = environ[key]
    for name, value in (overrides or {}).items():
        if value is not None:
            values[name] = value
    missing = [n for n in ("node_id", "data_dir", "peers") if n not in values]
    if missing:
        raise ConfigError(
            "missing " + ", ".join(missing) + " (give them in the file, as RAFTSINK_* or as flags)"
        )
    return SinkConfig(**{k: _coerce(k, v) for k, v in values.items()})
