"""kio's request/response schemas walked in pure Python, for the fuzzer and the
conformance harness.

Three jobs, all driven by the same per-class field list (`field_specs`):
- `walk`: a bounds-checking pass over encoded bytes of one entity. Every length
  read from the wire (array count, string/bytes length, tag size) is checked
  against the bytes that remain BEFORE anything is skipped, so arbitrary server
  or fuzz output can be walked without allocating. It also records where each
  length prefix and tagged-field section sits, which the fuzzer mutates.
- `strict_decode`: walk first, then hand the bytes to kio's native reader (which
  allocates whatever a length claims and aborts the process on failure: the
  walk is what makes calling it on a server's answer safe) and require that it
  consumed exactly the bytes there are.
- `encode`: header + body of a request, with the size prefix.

Value generation for requests lives in tests/helpers/kafka_values.py.
"""

from __future__ import annotations

import dataclasses
import functools
import io
import struct
import types
import typing
from dataclasses import dataclass
from typing import Any

from kio.serial import entity_reader, entity_writer

from sink.kafka.protocol import request_schema, response_schema

FIXED_WIDTH = {
    "int8": 1,
    "uint8": 1,
    "bool": 1,
    "int16": 2,
    "uint16": 2,
    "error_code": 2,
    "int32": 4,
    "uint32": 4,
    "timedelta_i32": 4,
    "int64": 8,
    "uint64": 8,
    "float64": 8,
    "timedelta_i64": 8,
    "datetime_i64": 8,
    "uuid": 16,
}


class WireError(ValueError):
    """Bytes that do not follow the schema (or claim more bytes than there are)."""


@dataclass(frozen=True)
class FieldSpec:
    name: str
    kind: str  # "prim" | "prim_array" | "entity" | "entity_array"
    ktype: str | None  # kafka_type of a primitive (or of an array's elements)
    nested: type | None  # the entity class of "entity" / "entity_array"
    optional: bool  # nullable on the wire (never for tagged fields, as in kio)
    tag: int | None
    default: Any  # dataclasses.MISSING when the field has no default


@functools.cache
def field_specs(cls: type) -> tuple[FieldSpec, ...]:
    hints = typing.get_type_hints(cls)
    out = []
    for f in dataclasses.fields(cls):
        tp = hints[f.name]
        optional = False
        if typing.get_origin(tp) in (typing.Union, types.UnionType):
            args = [a for a in typing.get_args(tp) if a is not type(None)]
            optional = len(args) < len(typing.get_args(tp))
            tp = args[0]
        is_array = typing.get_origin(tp) is tuple
        inner = typing.get_args(tp)[0] if is_array else tp
        nested = inner if dataclasses.is_dataclass(inner) else None
        kind = ("entity" if nested else "prim") + ("_array" if is_array else "")
        tag = f.metadata.get("tag")
        default = f.default
        if default is dataclasses.MISSING and f.default_factory is not dataclasses.MISSING:
            default = f.default_factory()
        out.append(
            FieldSpec(
                f.name,
                kind,
                f.metadata.get("kafka_type"),
                nested,
                optional and tag is None,
                tag,
                default,
            )
        )
    return tuple(out)


@dataclass
class Landmark:
    """Where a length prefix or a tag section sits in an encoded entity."""

    pos: int  # offset of the prefix in the buffer
    width: int  # bytes it takes (varints: its encoded length)
    kind: str  # "int16" | "int32" | "uvarint" (a length), "tags" (a tag-count uvarint)
    value: int
    path: str  # field path, for messages


def read_uvarint(buf: bytes | memoryview, pos: int, end: int) -> tuple[int, int]:
    """(value, new pos); at most 5 bytes (a 32-bit value) as Kafka allows."""
    value = shift = 0
    for i in range(5):
        if pos + i >= end:
            raise WireError(f"varint runs past the end at {pos}")
        b = buf[pos + i]
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return value, pos + i + 1
        shift += 7
    raise WireError(f"varint longer than 5 bytes at {pos}")


def uvarint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


class _Walker:
    def __init__(self, buf: bytes | memoryview, end: int, marks: list[Landmark] | None):
        self.buf, self.end, self.marks = buf, end, marks

    def need(self, pos: int, n: int, what: str) -> None:
        if n < 0 or pos + n > self.end:
            raise WireError(f"{what}: {n} bytes at {pos}, only {self.end - pos} remain")

    def mark(self, pos: int, width: int, kind: str, value: int, path: str) -> None:
        if self.marks is not None:
            self.marks.append(Landmark(pos, width, kind, value, path))

    def length(self, pos: int, flexible: bool, legacy_width: int, path: str) -> tuple[int, int]:
        """A length prefix: (length, -1 for null; new pos)."""
        if flexible:
            v, p = read_uvarint(self.buf, pos, self.end)
            self.mark(pos, p - pos, "uvarint", v, path)
            return v - 1, p
        self.need(pos, legacy_width, path)
        fmt = ">h" if legacy_width == 2 else ">i"
        (v,) = struct.unpack_from(fmt, self.buf, pos)
        self.mark(pos, legacy_width, f"int{8 * legacy_width}", v, path)
        return v, pos + legacy_width

    def prim(self, ktype: str, pos: int, flexible: bool, optional: bool, path: str) -> int:
        if ktype in FIXED_WIDTH:
            self.need(pos, FIXED_WIDTH[ktype], path)
            return pos + FIXED_WIDTH[ktype]
        if ktype in ("string", "bytes", "records"):
            width = 2 if ktype == "string" else 4
            n, pos = self.length(pos, flexible, width, path)
            if n < 0:
                if n < -1 or not optional:
                    raise WireError(f"{path}: length {n} (null not allowed here)")
                return pos
            self.need(pos, n, path)
            return pos + n
        raise WireError(f"{path}: unknown kafka type {ktype!r}")

    def field(self, spec: FieldSpec, pos: int, flexible: bool, path: str) -> int:
        path = f"{path}.{spec.name}"
        if spec.kind.endswith("_array"):
            n, pos = self.length(pos, flexible, 4, path)
            if n < 0:
                if n < -1 or not spec.optional:
                    raise WireError(f"{path}: array length {n} (null not allowed here)")
                return pos
            # Each element costs at least one byte: bound the count before looping.
            self.need(pos, n, f"{path} ({n} elements)")
            for i in range(n):
                if spec.kind == "prim_array":
                    pos = self.prim(spec.ktype or "", pos, flexible, False, f"{path}[{i}]")
                else:
                    pos = self.entity(spec.nested, pos, f"{path}[{i}]")
            return pos
        if spec.kind == "entity":
            if spec.optional:
                self.need(pos, 1, path)
                marker = struct.unpack_from(">b", self.buf, pos)[0]
                pos += 1
                if marker == -1:
                    return pos
                if marker != 1:
                    raise WireError(f"{path}: nullable struct marker {marker}")
            return self.entity(spec.nested, pos, path)
        return self.prim(spec.ktype or "", pos, flexible, spec.optional, path)

    def entity(self, cls: Any, pos: int, path: str = "") -> int:
        flexible = bool(cls.__flexible__)
        tagged = {}
        for spec in field_specs(cls):
            if spec.tag is not None:
                tagged[spec.tag] = spec
            elif cls.__name__ == "RequestHeader" and spec.name == "client_id":
                pos = self.prim("string", pos, False, True, f"{path}.client_id")
            else:
                pos = self.field(spec, pos, flexible, path)
        if not flexible:
            return pos
        start = pos
        count, pos = read_uvarint(self.buf, pos, self.end)
        self.mark(start, pos - start, "tags", count, f"{path}.<tags>")
        self.need(pos, count, f"{path} ({count} tagged fields)")
        last = -1
        for _ in range(count):
            tag, pos = read_uvarint(self.buf, pos, self.end)
            size, pos = read_uvarint(self.buf, pos, self.end)
            self.need(pos, size, f"{path}.<tag {tag}>")
            if tag <= last:
                raise WireError(f"{path}: tag {tag} after tag {last}")
            last = tag
            if tag in tagged:
                # A known tag's value must fill its size exactly.
                inner = _Walker(self.buf, pos + size, self.marks)
                got = inner.field(tagged[tag], pos, True, path)
                if got != pos + size:
                    raise WireError(
                        f"{path}.<tag {tag}>: value ends at {got}, size says {pos + size}"
                    )
            pos += size
        return pos


def walk(cls: type, buf: bytes | memoryview, pos: int = 0, end: int | None = None) -> int:
    """Bounds-check one `cls` entity at buf[pos:end]; returns where it ends."""
    return _Walker(buf, len(buf) if end is None else end, None).entity(cls, pos)


def landmarks(cls: type, buf: bytes, pos: int = 0) -> list[Landmark]:
    """Every length prefix and tag section of a (valid) encoded entity."""
    marks: list[Landmark] = []
    _Walker(buf, len(buf), marks).entity(cls, pos)
    return marks


def strict_decode(cls: type, frame: bytes, pos: int = 0) -> Any:
    """Decode with kio, after a bounds walk; the entity must end where the frame ends."""
    end = walk(cls, frame, pos)
    if end != len(frame):
        raise WireError(f"{cls.__qualname__}: {len(frame) - end} bytes left over")
    value, used = entity_reader(cls)(frame, pos)
    if pos + used != len(frame):
        raise WireError(f"kio read {used} bytes of {len(frame) - pos}")
    return value


def decode_response(api_key: int, version: int, frame: bytes) -> tuple[Any, Any]:
    """(header, body) of a response frame (without size prefix), strictly."""
    cls = response_schema(api_key, version)
    hdr_cls = cls.__header_schema__
    hdr_end = walk(hdr_cls, frame, 0)
    header, used = entity_reader(hdr_cls)(frame, 0)
    assert used == hdr_end, (used, hdr_end)
    return header, strict_decode(cls, frame, hdr_end)


def encode_header(
    api_key: int, version: int, corr: int, client_id: str | None = "harness"
) -> bytes:
    hdr_cls = request_schema(api_key, version).__header_schema__
    buf = io.BytesIO()
    values: dict[str, Any] = {
        "request_api_key": api_key,
        "request_api_version": version,
        "correlation_id": corr,
        "client_id": client_id,
    }
    names = {s.name for s in field_specs(hdr_cls)}
    entity_writer(hdr_cls)(buf, hdr_cls(**{k: v for k, v in values.items() if k in names}))
    return buf.getvalue()


def encode_body(entity: Any) -> bytes:
    buf = io.BytesIO()
    entity_writer(type(entity))(buf, entity)
    return buf.getvalue()


def frame(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


def encode_request(entity: Any, corr: int, client_id: str | None = "harness") -> bytes:
    """A whole request frame (size prefix + header + body)."""
    head = encode_header(entity.__api_key__, entity.__version__, corr, client_id)
    return frame(head + encode_body(entity))


def header_length(api_key: int, version: int, payload: bytes) -> int:
    """Where the body starts in a request payload (after the size prefix)."""
    return walk(request_schema(api_key, version).__header_schema__, payload, 0)


def inject_tag(
    payload: bytes, tags: Landmark, tag: int = 1000, value: bytes = b"\x01\x02\x03"
) -> bytes:
    """payload with one more tagged field (`tag`, after the existing ones, which
    keeps tags ascending) in the tag section at `tags` (a "tags" landmark)."""
    assert tags.kind == "tags"
    pos = tags.pos + tags.width
    for _ in range(tags.value):
        _t, pos = read_uvarint(payload, pos, len(payload))
        size, pos = read_uvarint(payload, pos, len(payload))
        pos += size
    extra = uvarint(tag) + uvarint(len(value)) + value
    count = uvarint(tags.value + 1)
    return (
        payload[: tags.pos] + count + payload[tags.pos + tags.width : pos] + extra + payload[pos:]
    )
