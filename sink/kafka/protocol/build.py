"""Build kio entities from plain dicts, for any version, and encode them.

Handlers describe a response once, as nested dicts/lists with plain Python
values; build() turns that into the version's frozen dataclass: keys the
version lacks are dropped, a field the version requires and the dict lacks is
an error (BuildError; defaults only where Kafka's schema documents one), lists of dicts become tuples of nested entities, and
the fields kio wants as real objects are converted (error codes -> ErrorCode,
timedelta fields from milliseconds, uuid from str/UUID). Used for the rare
responses only; Produce and Fetch are hand-rolled (sink.kafka.encoders).
"""

from __future__ import annotations

import dataclasses
import datetime
import functools
import io
import types
import typing
import uuid
from typing import Any

from kio.schema.errors import ErrorCode
from kio.serial import entity_writer

from sink.kafka.protocol.schemas import request_schema, response_schema


class BuildError(TypeError):
    """A response (or request) value lacks a field its version requires."""


@functools.cache
def _field_specs(cls: type) -> tuple[tuple[str, str | None, type | None, bool], ...]:
    """(name, kafka_type, nested entity class or None, required) for each field of
    cls. Required: kio's dataclass has no default for it, i.e. Kafka's schema
    documents none; every other field falls back to Kafka's documented default."""
    hints = typing.get_type_hints(cls)
    specs = []
    for f in dataclasses.fields(cls):
        nested = _nested_class(hints.get(f.name))
        required = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        specs.append((f.name, f.metadata.get("kafka_type"), nested, required))
    return tuple(specs)


def _nested_class(tp: Any) -> type | None:
    """tuple[X, ...] / X | None / X -> X when X is a kio entity dataclass."""
    if tp is None:
        return None
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        for arg in typing.get_args(tp):
            c = _nested_class(arg)
            if c is not None:
                return c
        return None
    if origin is tuple:
        args = typing.get_args(tp)
        return _nested_class(args[0]) if args else None
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        return tp
    return None


def build(cls: type, values: dict[str, Any]) -> Any:
    """cls (one version's entity) from values: keys the version lacks are ignored;
    a field the version requires and values lacks raises BuildError (never a
    silently missing or invented value)."""
    kwargs: dict[str, Any] = {}
    for name, ktype, nested, required in _field_specs(cls):
        if name not in values:
            if required:
                raise BuildError(
                    f"{cls.__qualname__} v{getattr(cls, '__version__', '?')} "
                    f"requires field {name!r}"
                )
            continue
        v = values[name]
        if nested is not None and v is not None:
            if isinstance(v, dict):
                v = build(nested, v)
            elif isinstance(v, list | tuple):
                v = tuple(build(nested, x) if isinstance(x, dict) else x for x in v)
        elif isinstance(v, list):
            v = tuple(v)
        elif ktype == "error_code":
            v = ErrorCode(v)
        elif ktype in ("timedelta_i32", "timedelta_i64") and isinstance(v, int):
            v = datetime.timedelta(milliseconds=v)
        elif ktype == "uuid" and isinstance(v, str):
            v = uuid.UUID(v)
        kwargs[name] = v
    return cls(**kwargs)


def encode_entity(correlation_id: int, entity: Any) -> bytes:
    """Response header (the version kio picks) + body, without the size prefix."""
    buf = io.BytesIO()
    hdr_cls = entity.__header_schema__
    entity_writer(hdr_cls)(buf, hdr_cls(correlation_id=correlation_id))
    entity_writer(type(entity))(buf, entity)
    return buf.getvalue()


def encode_request(
    api_key: int, version: int, correlation_id: int, client_id: str, values: dict
) -> bytes:
    """Request header + the request of (api_key, version) built from values, without the
    size prefix (what a client, the admin CLI or a relay sends)."""
    cls = request_schema(api_key, version)
    hdr_cls = cls.__header_schema__
    header = {
        "request_api_key": api_key,
        "request_api_version": version,
        "correlation_id": correlation_id,
        "client_id": client_id,
    }
    buf = io.BytesIO()
    entity_writer(hdr_cls)(buf, build(hdr_cls, header))
    entity_writer(cls)(buf, build(cls, values))
    return buf.getvalue()


def encode_response(api_key: int, version: int, correlation_id: int, values: dict) -> bytes:
    """Build the response of (api_key, version) from values and encode it."""
    cls = response_schema(api_key, version)
    return encode_entity(correlation_id, build(cls, values))
