"""Request values generated from kio's schemas, for any (API, version).

`valid_request` fills every field of a request class with a value that makes
sense for a raftsink cluster (an existing topic, partition 0, short waits, a
valid record batch): the success path of the conformance harness and the
corpus the fuzzer mutates. `random_request` draws every field from a seeded
`random.Random` (small ints, short strings, 0-3 array elements, nulls where the
schema allows them), bounded so that no request can legitimately hold a node
for long (waits and timeouts at most 100 ms). Both work for an API that did not
exist when this file was written: fields are recognised by name and kafka type,
anything unknown gets a neutral value of its type.
"""

from __future__ import annotations

import dataclasses
import datetime
import random
import struct
import uuid
import zlib
from dataclasses import dataclass, field
from typing import Any

from kio.schema.errors import ErrorCode

from tests.helpers.kafka_schema import field_specs
from tests.unit.sink.batches import make_batch


@dataclass
class Context:
    """What a valid request refers to."""

    topic: str = "harness"
    topic_id: uuid.UUID = field(default_factory=lambda: uuid.UUID(int=0))
    partition: int = 0
    group: str = "harness-group"
    records: bytes = field(default_factory=lambda: make_batch([b"harness"]))
    node_id: int = 1
    message_set: bytes = field(default_factory=lambda: _message_v1(b"harness"))
    """What Produce v0-2 carry instead of a RecordBatch v2 (a MessageSet v1)."""


def _message_v1(value: bytes, timestamp: int = 1_700_000_000_000) -> bytes:
    """One uncompressed magic-1 message at offset 0, laid out from the protocol (offset,
    size, CRC-32 over magic..value, magic, attributes, timestamp, null key, value)."""
    body = struct.pack(">bbqi", 1, 0, timestamp, -1) + struct.pack(">i", len(value)) + value
    msg = struct.pack(">I", zlib.crc32(body)) + body
    return struct.pack(">qi", 0, len(msg)) + msg


def records_of(cls: type, ctx: Context) -> bytes:
    """The valid records of cls's records field: message sets below Produce v3."""
    legacy = getattr(cls, "__api_key__", None) == 0 and getattr(cls, "__version__", 9) < 3
    return ctx.message_set if legacy else ctx.records


# Arrays a valid request leaves empty (an element would ask for something else:
# a fetch session's forgotten topics, a manual replica assignment, topic configs).
EMPTY_ARRAYS = {"forgotten_topics_data", "assignments", "configs"}

_TIME_FIELDS = {"timestamp", "max_timestamp", "commit_timestamp", "retention_time"}


def _valid_prim(name: str, ktype: str, parent: str, ctx: Context) -> Any:
    lname = name.lower()
    if ktype == "string":
        if lname in ("topic", "topic_name", "name") and (
            "topic" in parent.lower() or lname != "name"
        ):
            return ctx.topic
        if "group" in lname or lname.endswith("key"):
            return ctx.group
        if lname == "member_id":
            return ""
        if lname == "group_instance_id":
            return None
        if lname in ("client_software_name",):
            return "raftsink-harness"
        if lname in ("client_software_version",):
            return "1.0"
        if "rack" in lname or lname in ("cluster_id",):
            return None
        return "harness"
    if ktype == "records":
        return ctx.records
    if ktype == "bytes":
        return b""
    if ktype == "uuid":
        return ctx.topic_id if "topic" in lname else uuid.UUID(int=0)
    if ktype == "bool":
        return lname in ("allow_auto_topic_creation",) and False
    if ktype == "error_code":
        return ErrorCode.none
    if ktype == "timedelta_i32" or ktype == "timedelta_i64":
        if "session" in lname or "rebalance" in lname:
            return datetime.timedelta(seconds=10)
        return datetime.timedelta(milliseconds=0 if "wait" in lname else 5000)
    if ktype == "datetime_i64":
        return None
    if ktype == "float64":
        return 0.0
    # integers
    if lname in ("partition_index", "partition", "index"):
        return ctx.partition
    if lname == "acks":
        return -1
    if lname in ("replica_id", "producer_id", "current_leader_epoch", "leader_epoch"):
        return -1
    if lname in ("log_start_offset", "last_fetched_epoch", "committed_leader_epoch"):
        return -1
    if lname in ("producer_epoch", "broker_epoch", "session_epoch", "replication_factor"):
        return -1
    if lname in _TIME_FIELDS:
        return -1  # ListOffsets: latest
    if lname in ("max_bytes", "partition_max_bytes"):
        return 1 << 20
    if lname == "min_bytes":
        return 0
    if lname == "num_partitions":
        return 1
    if lname == "fetch_offset" or lname == "committed_offset":
        return 0
    if lname == "key_type":
        return 0
    if lname == "generation_id_or_member_epoch" or lname == "generation_id":
        return -1
    if lname == "member_epoch":
        return -1
    return 0


def valid_value(cls: type, ctx: Context, parent: str = "") -> Any:
    """An instance of cls whose fields point at ctx (one element per array)."""
    kwargs: dict[str, Any] = {}
    for spec in field_specs(cls):
        if spec.tag is not None and spec.default is not dataclasses.MISSING:
            continue  # tagged fields keep their default (not sent)
        name = spec.name
        if spec.kind == "entity_array" and name in EMPTY_ARRAYS:
            kwargs[name] = ()
        elif spec.kind == "entity_array":
            kwargs[name] = (valid_value(spec.nested, ctx, spec.nested.__name__),)
        elif spec.kind == "entity":
            kwargs[name] = valid_value(spec.nested, ctx, spec.nested.__name__)
        elif spec.kind == "prim_array":
            v = _valid_prim(name.rstrip("s"), spec.ktype or "", parent, ctx)
            if name == "partitions" or name.endswith("_indexes") or name == "partition_indexes":
                v = ctx.partition
            kwargs[name] = (v,)
        else:
            v = _valid_prim(name, spec.ktype or "", parent, ctx)
            if spec.ktype == "records":
                v = records_of(cls, ctx)
            if v is None and not spec.optional and spec.ktype == "string":
                v = ""
            if v is None and spec.ktype == "datetime_i64" and not spec.optional:
                v = datetime.datetime.now(datetime.UTC)
            kwargs[name] = v
    return cls(**kwargs)


def valid_request(cls: type, ctx: Context) -> Any:
    req = valid_value(cls, ctx, cls.__name__)
    # A few request-level choices that "one of each" cannot express.
    names = {s.name for s in field_specs(cls)}
    changes: dict[str, Any] = {}
    specs = {s.name: s for s in field_specs(cls)}
    if "transactional_id" in names and specs["transactional_id"].optional:
        changes["transactional_id"] = None
    if "allow_auto_topic_creation" in names:
        changes["allow_auto_topic_creation"] = False
    if cls.__api_key__ == 18:  # ApiVersions: no fields besides the software name
        pass
    if cls.__api_key__ == 19 and "validate_only" in names:
        changes["validate_only"] = False
    return dataclasses.replace(req, **changes) if changes else req


# ---------------------------------------------------------------- random


def _rand_prim(rng: random.Random, spec_name: str, ktype: str, optional: bool, ctx: Context) -> Any:
    if optional and rng.random() < 0.15:
        return None
    if ktype in ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"):
        bits = {"int8": 7, "int16": 15, "int32": 31, "int64": 63}.get(ktype)
        pick = rng.random()
        if pick < 0.7:
            v = rng.choice([-1, 0, 0, 1, 2, 3])
        elif pick < 0.9 and bits:
            v = rng.choice([-(2**bits), 2**bits - 1])
        else:
            v = rng.randint(0, 1000)
        if ktype.startswith("u"):
            v = abs(v)
        if bits:
            v = max(-(2**bits), min(2**bits - 1, v))
        elif ktype == "uint8":
            v = min(v, 255)
        if spec_name in ("num_partitions", "replication_factor") and v > 3:
            v = 3  # never ask a node for millions of partitions
        return v
    if ktype == "bool":
        return rng.random() < 0.5
    if ktype == "float64":
        return rng.choice([0.0, 1.5, -1.0])
    if ktype == "string":
        return rng.choice([ctx.topic, ctx.group, "", "x" * rng.randint(1, 20), "bad/name"])
    if ktype in ("bytes", "records"):
        return rng.choice([b"", ctx.records, rng.randbytes(rng.randint(1, 30))])
    if ktype == "uuid":
        return rng.choice([uuid.UUID(int=0), ctx.topic_id, uuid.UUID(int=rng.getrandbits(128))])
    if ktype == "error_code":
        return ErrorCode.none
    if ktype in ("timedelta_i32", "timedelta_i64"):
        return datetime.timedelta(milliseconds=rng.choice([0, 1, 100]))
    if ktype == "datetime_i64":
        return datetime.datetime.now(datetime.UTC)
    raise ValueError(f"no generator for kafka type {ktype!r}")


def random_value(cls: type, rng: random.Random, ctx: Context, depth: int = 0) -> Any:
    kwargs: dict[str, Any] = {}
    for spec in field_specs(cls):
        tagged_default = spec.tag is not None and spec.default is not dataclasses.MISSING
        if tagged_default and rng.random() < 0.7:
            continue  # mostly leave a tagged field out, as clients do
        if spec.kind == "entity_array":
            if spec.optional and rng.random() < 0.15:
                kwargs[spec.name] = None
            else:
                n = rng.randint(0, 3 if depth < 2 else 1)
                kwargs[spec.name] = tuple(
                    random_value(spec.nested, rng, ctx, depth + 1) for _ in range(n)
                )
        elif spec.kind == "entity":
            if spec.optional and rng.random() < 0.15:
                kwargs[spec.name] = None
            else:
                kwargs[spec.name] = random_value(spec.nested, rng, ctx, depth + 1)
        elif spec.kind == "prim_array":
            if spec.optional and rng.random() < 0.15:
                kwargs[spec.name] = None
            else:
                kwargs[spec.name] = tuple(
                    _rand_prim(rng, spec.name, spec.ktype or "", False, ctx)
                    for _ in range(rng.randint(0, 3))
                )
        else:
            kwargs[spec.name] = _rand_prim(
                rng, spec.name, spec.ktype or "", spec.optional and spec.tag is None, ctx
            )
            if spec.ktype == "records" and kwargs[spec.name] == ctx.records:
                kwargs[spec.name] = records_of(cls, ctx)
    return cls(**kwargs)


def random_request(cls: type, rng: random.Random, ctx: Context) -> Any:
    req = random_value(cls, rng, ctx)
    names = {s.name for s in field_specs(cls)}
    changes: dict[str, Any] = {}
    # acks=0 has no response; a harness that waits for one would wait for ever.
    if "acks" in names and req.acks == 0:
        changes["acks"] = -1
    return dataclasses.replace(req, **changes) if changes else req
