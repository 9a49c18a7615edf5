"""Topic configurations: the one table of the configs a topic may carry.

Each `TopicConfigDef` names a Kafka topic config (`retention.ms`), its Kafka
broker-level synonym (`log.retention.ms`), its type as DescribeConfigs reports it,
the field of the node's broker defaults (`TopicDefaults`, the `topics` section of
the node configuration) and a validator. CreateTopics, AlterConfigs,
IncrementalAlterConfigs and the state machine's apply all validate through
`validate`, so a value accepted by one is accepted by all, and nothing is ever
stored that a later reader could not parse.

Kafka's behaviour, kept: an unknown config name is INVALID_CONFIG ("Unknown topic
config name"), a value out of range is INVALID_CONFIG naming the bound.
`cleanup.policy=compact` is INVALID_CONFIG: raftsink does not compact by key, and
accepting it silently would lose the records a compacted topic must keep.

This module is a leaf (standard library only): handlers, the state machine and
the node configuration all import it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from enum import IntEnum
from typing import Any

DAY_MS = 24 * 3600 * 1000


class ConfigType(IntEnum):
    """DescribeConfigs v3+ config_type."""

    UNKNOWN = 0
    BOOLEAN = 1
    STRING = 2
    INT = 3
    SHORT = 4
    LONG = 5
    DOUBLE = 6
    LIST = 7


class ConfigSource(IntEnum):
    """DescribeConfigs config_source / synonym source."""

    UNKNOWN = 0
    DYNAMIC_TOPIC_CONFIG = 1
    DYNAMIC_BROKER_CONFIG = 2
    DYNAMIC_DEFAULT_BROKER_CONFIG = 3
    STATIC_BROKER_CONFIG = 4
    DEFAULT_CONFIG = 5


class TopicConfigError(ValueError):
    """A config name or value Kafka would refuse with INVALID_CONFIG (the message says why)."""


@dataclass(frozen=True, slots=True)
class TopicDefaults:
    """Broker-level defaults of every topic config (Kafka's `log.*` broker settings);
    a topic's own config (CreateTopics, AlterConfigs) overrides them. Every node of a
    cluster should be configured alike: the leader applies its own defaults."""

    retention_ms: int = 7 * DAY_MS
    """Kafka `log.retention.ms`: records whose batch's max timestamp is older than this
    are removed from the start of each partition; -1: no time limit."""
    retention_bytes: int = -1
    """Kafka `log.retention.bytes`: each partition keeps at most this many bytes of
    record batches (the newest); -1: no size limit."""
    max_message_bytes: int = 1_048_588
    """Kafka `message.max.bytes`: the largest record batch a Produce may append
    (MESSAGE_TOO_LARGE above it)."""
    message_timestamp_type: str = "CreateTime"
    """Kafka `log.message.timestamp.type`: CreateTime (the producer's timestamps) or
    LogAppendTime (the leader stamps each batch with its clock)."""
    segment_bytes: int = 1 << 30
    """Kafka `log.segment.bytes`: accepted and reported, no effect (retention removes
    whole batches, not segments; the Raft log rolls at storage.segment_bytes)."""
    segment_ms: int = 7 * DAY_MS
    """Kafka `log.roll.ms`: accepted and reported, no effect (as segment_bytes: an idle
    topic's old batches expire without a segment roll)."""
    pipeline_hold_max_ms: int = -1
    """`raftsink.pipeline.hold.max.ms`: a registered pipeline (the Spark source's
    pipelineId) keeps data it has not committed past retention, but never older than
    this; -1: held until committed (the disk guard still protects the node)."""
    pipeline_hold_max_bytes: int = -1
    """`raftsink.pipeline.hold.max.bytes`: ... and never more than this many bytes per
    partition; -1: no size limit on the hold."""
    retention_check_ms: int = 30_000
    """Kafka `log.retention.check.interval.ms`: how often each node applies retention
    (moves log starts and lets the Raft log compact). A group hosting a topic with a
    short retention.ms is checked sooner: every thirty-second of the shortest window, at
    most once a second (a 3-minute topic: every 5.6 s)."""

    def __post_init__(self) -> None:
        for d in DEFS.values():
            try:
                if d.field:
                    d.parse(str(getattr(self, d.field)))
            except TopicConfigError as exc:
                raise ValueError(f"TopicDefaults.{d.field}: {exc}") from None
        if self.retention_check_ms < 100:
            raise ValueError(
                f"TopicDefaults.retention_check_ms must be >= 100, got {self.retention_check_ms}"
            )

    def value(self, name: str) -> str:
        """The broker default of topic config name, as a string."""
        f = DEFS[name].field
        return str(getattr(self, f)) if f else builtin_default(name)

    def is_set(self, name: str) -> bool:
        """True when the node configuration changed this default (STATIC_BROKER_CONFIG)."""
        f = DEFS[name].field
        return bool(f) and getattr(self, f) != _BUILTIN[f]


def _long(lo: int, hi: int = (1 << 63) - 1) -> Callable[[str], Any]:
    def parse(v: str) -> int:
        try:
            n = int(v.strip())
        except ValueError:
            raise TopicConfigError(f"{v!r} is not an integer") from None
        if not lo <= n <= hi:
            raise TopicConfigError(f"{n} is out of range [{lo}, {hi}]")
        return n

    return parse


def _choice(*allowed: str) -> Callable[[str], Any]:
    def parse(v: str) -> str:
        if v not in allowed:
            raise TopicConfigError(f"{v!r} is not one of {', '.join(allowed)}")
        return v

    return parse


def _bool(v: str) -> str:
    low = v.strip().lower()
    if low not in ("true", "false"):
        raise TopicConfigError(f"{v!r} is not a boolean (true, false)")
    return low


def _ratio(v: str) -> float:
    try:
        x = float(v.strip())
    except ValueError:
        raise TopicConfigError(f"{v!r} is not a number") from None
    if not 0.0 <= x <= 1.0:
        raise TopicConfigError(f"{x} is out of range [0, 1]")
    return x


def _message_format(v: str) -> str:
    parts = v.strip().split("-", 1)
    nums = parts[0].split(".")
    iv = parts[1] if len(parts) == 2 else "IV0"
    if not (2 <= len(nums) <= 4 and all(n.isdigit() for n in nums)) or not (
        iv.startswith("IV") and iv[2:].isdigit()
    ):
        raise TopicConfigError(f"{v!r} is not a Kafka version (like 2.8 or 0.10.0-IV1)")
    return v.strip()


def _cleanup_policy(v: str) -> str:
    items = [s.strip() for s in v.split(",") if s.strip()]
    if not items:
        raise TopicConfigError("cleanup.policy must not be empty")
    for item in items:
        if item == "compact":
            raise TopicConfigError(
                "cleanup.policy=compact is not supported: raftsink does not compact by key "
                "(only delete)"
            )
        if item != "delete":
            raise TopicConfigError(f"{item!r} is not a cleanup policy (delete)")
    return "delete"


@dataclass(frozen=True, slots=True)
class TopicConfigDef:
    name: str
    """The topic config name (Kafka's)."""
    broker_name: str
    """Kafka's broker-level synonym (DescribeConfigs synonyms, the broker resource)."""
    field: str
    """TopicDefaults field holding the broker default ("": fixed, not configurable)."""
    type: ConfigType
    parse: Callable[[str], Any]
    """str -> typed value; TopicConfigError when invalid."""
    doc: str
    effect: str = ""
    """What it does here when that differs from Kafka (docs)."""
    fixed_default: str = ""
    """The default of a config that has no TopicDefaults field (field == "")."""


_I32 = (1 << 31) - 1

DEFS: dict[str, TopicConfigDef] = {
    d.name: d
    for d in (
        TopicConfigDef(
            "cleanup.policy",
            "log.cleanup.policy",
            "",
            ConfigType.LIST,
            _cleanup_policy,
            "delete: old batches are removed by retention.ms / retention.bytes",
            "compact is refused with INVALID_CONFIG",
            fixed_default="delete",
        ),
        TopicConfigDef(
            "retention.ms",
            "log.retention.ms",
            "retention_ms",
            ConfigType.LONG,
            _long(-1),
            "remove batches whose max timestamp is older than this; -1: no time limit",
        ),
        TopicConfigDef(
            "retention.bytes",
            "log.retention.bytes",
            "retention_bytes",
            ConfigType.LONG,
            _long(-1),
            "keep at most this many bytes per partition; -1: no size limit",
        ),
        TopicConfigDef(
            "max.message.bytes",
            "message.max.bytes",
            "max_message_bytes",
            ConfigType.INT,
            _long(0, _I32),
            "largest record batch accepted (MESSAGE_TOO_LARGE above)",
        ),
        TopicConfigDef(
            "message.timestamp.type",
            "log.message.timestamp.type",
            "message_timestamp_type",
            ConfigType.STRING,
            _choice("CreateTime", "LogAppendTime"),
            "CreateTime: the producer's; LogAppendTime: stamped by the leader",
        ),
        TopicConfigDef(
            "segment.bytes",
            "log.segment.bytes",
            "segment_bytes",
            ConfigType.INT,
            _long(14, _I32),
            "Kafka's segment size",
            "no effect: retention works per batch; the Raft log has its own segments",
        ),
        TopicConfigDef(
            "segment.ms",
            "log.roll.ms",
            "segment_ms",
            ConfigType.LONG,
            _long(1),
            "Kafka's segment roll time",
            "no effect: an idle topic's batches expire without a roll",
        ),
        # Kafka configs that tools and frameworks set when they create topics, accepted
        # (validated as Kafka does), stored and reported; what each does here is in its
        # `effect`. Refusing them would fail a whole CreateTopics over a setting that
        # changes nothing a client can observe.
        TopicConfigDef(
            "compression.type",
            "compression.type",
            "",
            ConfigType.STRING,
            _choice("producer", "uncompressed", "gzip", "snappy", "lz4", "zstd"),
            "the codec Kafka's broker recompresses batches to; producer: keep the producer's",
            "batches are always stored as the producer compressed them (no broker-side "
            "recompression, as Redpanda); consumers decode either way",
            fixed_default="producer",
        ),
        TopicConfigDef(
            "min.insync.replicas",
            "min.insync.replicas",
            "",
            ConfigType.INT,
            _long(1, _I32),
            "acks=all needs this many in-sync replicas",
            "no effect: acks=all waits for a Raft majority of the partition's replicas "
            "(2 of 3, 3 of 5) and a partition without a majority takes no writes at all",
            fixed_default="1",
        ),
        TopicConfigDef(
            "unclean.leader.election.enable",
            "unclean.leader.election.enable",
            "",
            ConfigType.BOOLEAN,
            _bool,
            "may a replica outside the ISR become leader",
            "no effect: a Raft leader always holds every committed record",
            fixed_default="false",
        ),
        TopicConfigDef(
            "delete.retention.ms",
            "log.cleaner.delete.retention.ms",
            "",
            ConfigType.LONG,
            _long(0),
            "how long compaction keeps tombstones",
            "no effect: no compaction",
            fixed_default=str(DAY_MS),
        ),
        TopicConfigDef(
            "min.compaction.lag.ms",
            "log.cleaner.min.compaction.lag.ms",
            "",
            ConfigType.LONG,
            _long(0),
            "compaction's minimum age",
            "no effect: no compaction",
            fixed_default="0",
        ),
        TopicConfigDef(
            "max.compaction.lag.ms",
            "log.cleaner.max.compaction.lag.ms",
            "",
            ConfigType.LONG,
            _long(1),
            "compaction's maximum delay",
            "no effect: no compaction",
            fixed_default=str((1 << 63) - 1),
        ),
        TopicConfigDef(
            "min.cleanable.dirty.ratio",
            "log.cleaner.min.cleanable.ratio",
            "",
            ConfigType.DOUBLE,
            _ratio,
            "when compaction starts",
            "no effect: no compaction",
            fixed_default="0.5",
        ),
        TopicConfigDef(
            "flush.messages",
            "log.flush.interval.messages",
            "",
            ConfigType.LONG,
            _long(1),
            "fsync every this many messages",
            "no effect: every acknowledged batch is already fsynced on a majority",
            fixed_default=str((1 << 63) - 1),
        ),
        TopicConfigDef(
            "flush.ms",
            "log.flush.interval.ms",
            "",
            ConfigType.LONG,
            _long(0),
            "fsync at least this often",
            "no effect: every acknowledged batch is already fsynced on a majority",
            fixed_default=str((1 << 63) - 1),
        ),
        TopicConfigDef(
            "segment.jitter.ms",
            "log.roll.jitter.ms",
            "",
            ConfigType.LONG,
            _long(0),
            "random jitter of segment rolls",
            "no effect (as segment.ms)",
            fixed_default="0",
        ),
        TopicConfigDef(
            "segment.index.bytes",
            "log.index.size.max.bytes",
            "",
            ConfigType.INT,
            _long(4, _I32),
            "Kafka's offset index size",
            "no effect: the Raft log has its own index",
            fixed_default=str(10 << 20),
        ),
        TopicConfigDef(
            "index.interval.bytes",
            "log.index.interval.bytes",
            "",
            ConfigType.INT,
            _long(0, _I32),
            "Kafka's offset index density",
            "no effect: the Raft log has its own index",
            fixed_default="4096",
        ),
        TopicConfigDef(
            "file.delete.delay.ms",
            "log.segment.delete.delay.ms",
            "",
            ConfigType.LONG,
            _long(0),
            "delay before a removed segment's file is deleted",
            "no effect",
            fixed_default="60000",
        ),
        TopicConfigDef(
            "message.format.version",
            "log.message.format.version",
            "",
            ConfigType.STRING,
            _message_format,
            "the record format Kafka's broker once converted to",
            "no effect, as in Kafka 3.x (ignored from 3.0, removed in 4.0): batches are kept "
            "as produced and down-converted for old Fetch versions only",
            fixed_default="3.0-IV1",
        ),
        TopicConfigDef(
            "preallocate",
            "log.preallocate",
            "",
            ConfigType.BOOLEAN,
            _bool,
            "preallocate segment files",
            "no effect",
            fixed_default="false",
        ),
        TopicConfigDef(
            "raftsink.pipeline.hold.max.ms",
            "raftsink.pipeline.hold.max.ms",
            "pipeline_hold_max_ms",
            ConfigType.LONG,
            _long(-1),
            "a registered pipeline holds uncommitted data past retention at most this long; "
            "-1: until committed",
        ),
        TopicConfigDef(
            "raftsink.pipeline.hold.max.bytes",
            "raftsink.pipeline.hold.max.bytes",
            "pipeline_hold_max_bytes",
            ConfigType.LONG,
            _long(-1),
            "... and at most this many bytes per partition; -1: no limit",
        ),
    )
}
"""Every topic config raftsink knows, by name (the order DescribeConfigs lists them)."""

BY_BROKER_NAME: dict[str, TopicConfigDef] = {d.broker_name: d for d in DEFS.values()}

_BUILTIN: dict[str, Any] = {
    f.name: f.default for f in fields(TopicDefaults)
}  # the dataclass defaults (is_set compares with them)


def builtin_default(name: str) -> str:
    """Kafka's own default of a config (DEFAULT_CONFIG), before the node configuration."""
    f = DEFS[name].field
    return str(_BUILTIN[f]) if f else DEFS[name].fixed_default


def validate(name: str, value: str | None) -> str:
    """The canonical string of a topic config value; TopicConfigError for an unknown
    name or a bad value (Kafka: INVALID_CONFIG)."""
    d = DEFS.get(name)
    if d is None:
        raise TopicConfigError(f"Unknown topic config name: {name}")
    if value is None:
        raise TopicConfigError(f"{name}: a null value cannot be set (delete it instead)")
    try:
        return str(d.parse(value))
    except TopicConfigError as exc:
        raise TopicConfigError(f"Invalid value {value!r} for configuration {name}: {exc}") from None


def validate_all(configs: Mapping[str, str | None]) -> dict[str, str]:
    """validate() of every (name, value); the first error raises."""
    return {name: validate(name, value) for name, value in configs.items()}


@dataclass(frozen=True, slots=True)
class TopicPolicy:
    """The effective, typed configs of one topic (its overrides over the broker defaults):
    what produce and retention consult."""

    retention_ms: int
    retention_bytes: int
    max_message_bytes: int
    log_append_time: bool
    hold_max_ms: int
    hold_max_bytes: int

    @classmethod
    def of(cls, overrides: Mapping[str, str], defaults: TopicDefaults) -> TopicPolicy:
        def get(name: str) -> Any:
            raw = overrides.get(name)
            return DEFS[name].parse(raw if raw is not None else defaults.value(name))

        return cls(
            retention_ms=get("retention.ms"),
            retention_bytes=get("retention.bytes"),
            max_message_bytes=get("max.message.bytes"),
            log_append_time=get("message.timestamp.type") == "LogAppendTime",
            hold_max_ms=get("raftsink.pipeline.hold.max.ms"),
            hold_max_bytes=get("raftsink.pipeline.hold.max.bytes"),
        )


def describe(
    overrides: Mapping[str, str], defaults: TopicDefaults
) -> list[tuple[TopicConfigDef, str, ConfigSource, list[tuple[str, str, ConfigSource]]]]:
    """Every topic config as DescribeConfigs reports it: (def, value, source, synonyms),
    synonyms from the most to the least specific (topic, static broker, default)."""
    out = []
    for name, d in DEFS.items():
        synonyms: list[tuple[str, str, ConfigSource]] = []
        if name in overrides:
            synonyms.append((name, overrides[name], ConfigSource.DYNAMIC_TOPIC_CONFIG))
        if defaults.is_set(name):
            synonyms.append(
                (d.broker_name, defaults.value(name), ConfigSource.STATIC_BROKER_CONFIG)
            )
        synonyms.append((d.broker_name, builtin_default(name), ConfigSource.DEFAULT_CONFIG))
        _, value, source = synonyms[0]
        out.append((d, value, source, synonyms))
    return out


def describe_broker(
    defaults: TopicDefaults,
) -> list[tuple[str, str, ConfigSource, ConfigType, str]]:
    """The broker resource's configs: (broker name, value, source, type, doc)."""
    out = []
    for name, d in DEFS.items():
        src = (
            ConfigSource.STATIC_BROKER_CONFIG
            if defaults.is_set(name)
            else ConfigSource.DEFAULT_CONFIG
        )
        out.append((d.broker_name, defaults.value(name), src, d.type, d.doc))
    return out
