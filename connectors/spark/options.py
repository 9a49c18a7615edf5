"""Option parsing: Spark's string options -> a frozen, picklable SourceOptions.

Spark hands a case-insensitive dict with lower-cased keys; parse_options lower-cases again so a
plain dict works too. Every option and its default is documented in docs/spark.md.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from connectors.spark.errors import InvalidOptionError
from connectors.spark.offsets import (
    EARLIEST,
    LATEST,
    OffsetSpec,
    TopicPartition,
    parse_offset_spec,
)
from connectors.spark.timestamps import TimeSpec, parse_strategy, parse_time_spec

NODES = "raftsink.nodes"
SSL_PREFIX = "raftsink.ssl."


@dataclass(frozen=True)
class SslOptions:
    """TLS to the read API (`raftsink.ssl.*`). The files are read where the source runs
    (driver and every executor), like Spark's Kafka source's trust/key stores: the paths
    must exist on every host (ship them with --files or a shared volume)."""

    cafile: str = ""
    """PEM CA the nodes' certificates chain to (empty: the system's roots)."""
    certfile: str = ""
    """PEM client certificate (mutual TLS: the cluster's tls.read_api_client_auth)."""
    keyfile: str = ""
    """Its PEM private key."""


@dataclass(frozen=True)
class Subscription:
    """Which topic-partitions the query reads; exactly one of the three kinds."""

    kind: str  # "subscribe" | "subscribePattern" | "assign"
    topics: tuple[str, ...] = ()
    pattern: str = ""
    assigned: tuple[TopicPartition, ...] = ()

    def topic_filter(self) -> list[str] | None:
        """Topics to ask the cluster about (None = all topics)."""
        if self.kind == "subscribe":
            return list(self.topics)
        if self.kind == "assign":
            return sorted({t for t, _ in self.assigned})
        return None

    def matches(self, tp: TopicPartition) -> bool:
        if self.kind == "subscribe":
            return tp[0] in self.topics
        if self.kind == "assign":
            return tp in self.assigned
        return re.fullmatch(self.pattern, tp[0]) is not None

    def describe(self) -> str:
        if self.kind == "subscribe":
            return f"subscribe={','.join(self.topics)}"
        if self.kind == "assign":
            return f"assign={sorted(self.assigned)}"
        return f"subscribePattern={self.pattern}"


@dataclass(frozen=True)
class SourceOptions:
    nodes: tuple[str, ...]
    subscription: Subscription
    starting: OffsetSpec
    ending: OffsetSpec | None  # batch only
    max_offsets_per_trigger: int | None = None
    fail_on_data_loss: bool = True
    min_partitions: int | None = None
    max_records_per_partition: int | None = None
    include_headers: bool = True
    pipeline_id: str | None = None
    fetch_max_bytes: int = 4 * 1024 * 1024
    request_timeout_s: float = 10.0
    retry_timeout_s: float = 60.0
    starting_times: TimeSpec | None = None  # startingTimestamp / startingOffsetsByTimestamp
    ending_times: TimeSpec | None = None  # endingTimestamp / endingOffsetsByTimestamp (batch)
    timestamp_strategy: str = "error"  # startingOffsetsByTimestampStrategy
    ssl: SslOptions | None = None  # raftsink.ssl.*: TLS to the read API (None: plaintext)
    extra: dict[str, str] = field(default_factory=dict, compare=False)


def _positive_int(opts: Mapping[str, str], key: str) -> int | None:
    raw = opts.get(key.lower())
    if raw is None or str(raw).strip() == "":
        return None
    try:
        value = int(str(raw).strip())
    except ValueError:
        raise InvalidOptionError(f"option {key}={raw!r} must be a positive integer") from None
    if value <= 0:
        raise InvalidOptionError(f"option {key}={raw!r} must be a positive integer")
    return value


def _bool(opts: Mapping[str, str], key: str, default: bool) -> bool:
    raw = opts.get(key.lower())
    if raw is None:
        return default
    text = str(raw).strip().lower()
    if text in ("true", "1", "yes"):
        return True
    if text in ("false", "0", "no"):
        return False
    raise InvalidOptionError(f"option {key}={raw!r} must be true or false")


def _nodes(opts: Mapping[str, str]) -> tuple[str, ...]:
    raw = opts.get(NODES)
    if not raw:
        hint = ""
        if opts.get("kafka.bootstrap.servers"):
            hint = (
                " kafka.bootstrap.servers is not used: the Spark source reads through raftsink's"
                " read API (gRPC), a separate port from the Kafka listener; see `raftsink status`"
                " or cluster.json for each node's read_api address."
            )
        raise InvalidOptionError(
            f"option {NODES} is required: comma-separated read API addresses host:port.{hint}"
        )
    nodes = tuple(n.strip() for n in str(raw).split(",") if n.strip())
    for n in nodes:
        host, sep, port = n.rpartition(":")
        if not sep or not host or not port.isdigit():
            raise InvalidOptionError(f"option {NODES}: {n!r} is not host:port")
    if not nodes:
        raise InvalidOptionError(f"option {NODES} lists no address")
    return nodes


def _ssl(opts: Mapping[str, str]) -> SslOptions | None:
    """raftsink.ssl.enabled (default: on when any raftsink.ssl.* file is given),
    raftsink.ssl.cafile, raftsink.ssl.certfile, raftsink.ssl.keyfile."""
    known = {"enabled", "cafile", "certfile", "keyfile"}
    given = {k[len(SSL_PREFIX) :]: v.strip() for k, v in opts.items() if k.startswith(SSL_PREFIX)}
    unknown = sorted(set(given) - known)
    if unknown:
        raise InvalidOptionError(
            f"unknown option(s) {', '.join(SSL_PREFIX + u for u in unknown)}; "
            f"known: {', '.join(SSL_PREFIX + k for k in sorted(known))}"
        )
    files = {k: v for k, v in given.items() if k != "enabled" and v}
    enabled = _bool(opts, SSL_PREFIX + "enabled", bool(files))
    if not enabled:
        if files:
            raise InvalidOptionError(
                f"{SSL_PREFIX}enabled is false but {SSL_PREFIX}* files are set"
            )
        return None
    if bool(files.get("certfile")) != bool(files.get("keyfile")):
        raise InvalidOptionError(
            f"{SSL_PREFIX}certfile and {SSL_PREFIX}keyfile go together (mutual TLS)"
        )
    return SslOptions(**files)


def _subscription(opts: Mapping[str, str]) -> Subscription:
    given = [k for k in ("subscribe", "subscribepattern", "assign") if opts.get(k)]
    if len(given) != 1:
        raise InvalidOptionError(
            "exactly one of the options subscribe, subscribePattern, assign is required"
            f" (got {len(given)})"
        )
    kind = given[0]
    raw = str(opts[kind]).strip()
    if kind == "subscribe":
        topics = tuple(sorted({t.strip() for t in raw.split(",") if t.strip()}))
        if not topics:
            raise InvalidOptionError("option subscribe lists no topic")
        return Subscription("subscribe", topics=topics)
    if kind == "subscribepattern":
        try:
            re.compile(raw)
        except re.error as exc:
            raise InvalidOptionError(f"option subscribePattern={raw!r}: {exc}") from None
        return Subscription("subscribePattern", pattern=raw)
    try:
        parsed = json.loads(raw)
        assigned = tuple(sorted({(str(t), int(p)) for t, parts in parsed.items() for p in parts}))
    except (ValueError, AttributeError, TypeError):
        raise InvalidOptionError(
            f'option assign={raw!r} must be JSON like {{"topicA": [0, 1], "topicB": [0]}}'
        ) from None
    if not assigned:
        raise InvalidOptionError("option assign lists no partition")
    return Subscription("assign", assigned=assigned)


def parse_options(options: Mapping[str, str], streaming: bool) -> SourceOptions:
    """Validate and parse the source options (keys are case-insensitive)."""
    opts = {str(k).lower(): str(v) for k, v in options.items()}
    sub = _subscription(opts)
    starting_default = "latest" if streaming else "earliest"
    starting = parse_offset_spec(
        "startingOffsets", opts.get("startingoffsets", starting_default), EARLIEST
    )
    ending = None
    ending_times = parse_time_spec(opts, "ending")
    if streaming:
        if "endingoffsets" in opts:
            raise InvalidOptionError("option endingOffsets is for batch queries only")
        if ending_times is not None:
            raise InvalidOptionError(f"option {ending_times.option} is for batch queries only")
    else:
        ending = parse_offset_spec("endingOffsets", opts.get("endingoffsets", "latest"), LATEST)
        if starting.default == LATEST or LATEST in starting.specific.values():
            raise InvalidOptionError("startingOffsets latest (-1) is not allowed in batch queries")
        if ending.default == EARLIEST or EARLIEST in ending.specific.values():
            raise InvalidOptionError("endingOffsets earliest (-2) is not allowed in batch queries")
        if "maxoffsetspertrigger" in opts:
            raise InvalidOptionError("option maxOffsetsPerTrigger is for streaming queries only")
    pipeline = opts.get("pipelineid", "").strip() or None
    return SourceOptions(
        nodes=_nodes(opts),
        subscription=sub,
        starting=starting,
        ending=ending,
        max_offsets_per_trigger=_positive_int(opts, "maxOffsetsPerTrigger"),
        fail_on_data_loss=_bool(opts, "failOnDataLoss", True),
        min_partitions=_positive_int(opts, "minPartitions"),
        max_records_per_partition=_positive_int(opts, "maxRecordsPerPartition"),
        include_headers=_bool(opts, "includeHeaders", True),
        pipeline_id=pipeline,
        starting_times=parse_time_spec(opts, "starting"),
        ending_times=ending_times,
        timestamp_strategy=parse_strategy(opts),
        fetch_max_bytes=_positive_int(opts, "fetchMaxBytes") or 4 * 1024 * 1024,
        request_timeout_s=(_positive_int(opts, "requestTimeoutMs") or 10_000) / 1000,
        retry_timeout_s=(_positive_int(opts, "retryTimeoutMs") or 60_000) / 1000,
        ssl=_ssl(opts),
        extra=opts,
    )
