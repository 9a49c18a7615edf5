"""No length from the wire is trusted: a bounds-checking pass run before kio's reader.

kio's reader is native (Rust) and allocates whatever an array / string / bytes
length claims before reading an element; an allocation failure aborts the whole
process (SIGABRT, no Python exception). This pass walks header + body of a request
frame and checks, before kio sees it:

- every array count, string / bytes length and compact length against the bytes
  that remain (an array element costs at least its minimum wire size, never 0);
- every unsigned varint is at most 5 bytes (Kafka's lengths and tags are uvarint32);
- null only where the schema field is Optional (kio's own dataclass annotations);
- tagged sections (flexible versions): known tags' content fits their declared
  size exactly; unknown tags are recorded (KIP-482: they are skipped, see
  strip_unknown_tags) instead of reaching kio, which refuses them.

One checker per (api_key, version) is compiled once from kio's schema dataclasses
into straight-line Python source (one function per entity class) and exec'd: the
check runs on every request, so it must not interpret the schema per frame.

The checker never allocates in proportion to a wire length; everything it raises
is a FrameError. Trailing bytes after the body are allowed (kio allows them too).
"""

from __future__ import annotations

import dataclasses
import functools
import struct
import types
import typing
from collections.abc import Callable
from typing import Any, NamedTuple

from sink.kafka.protocol.encoders import uvarint
from sink.kafka.protocol.schemas import request_schema

__all__ = [
    "FrameError",
    "NullError",
    "RequestShape",
    "TagEdit",
    "check_request",
    "entity_checker",
    "request_checker",
    "strip_unknown_tags",
]

# Fixed wire sizes of kio's primitive kafka_types (uuid: 16 bytes, null = all zero).
_FIXED = {
    "int8": 1,
    "int16": 2,
    "int32": 4,
    "int64": 8,
    "uint8": 1,
    "uint16": 2,
    "uint32": 4,
    "uint64": 8,
    "float64": 8,
    "uuid": 16,
    "bool": 1,
    "error_code": 2,
    "timedelta_i32": 4,
    "timedelta_i64": 8,
    "datetime_i64": 8,
}
_LENGTH_PREFIXED = ("string", "bytes", "records")


class FrameError(ValueError):
    """The frame is not a well-formed request: a protocol error for the connection."""


class NullError(FrameError):
    """Null where the schema does not allow it (Kafka: INVALID_REQUEST)."""


@dataclasses.dataclass(frozen=True, slots=True)
class TagEdit:
    """One tagged section holding unknown tags: its count varint spans
    [count_start, count_end); known_count tags stay; drop lists (start, end) of
    the unknown tags' bytes (tag, size and data)."""

    count_start: int
    count_end: int
    known_count: int
    drop: tuple[tuple[int, int], ...]


class RequestShape(NamedTuple):
    """What the checker learned: where the body starts, and the tagged sections
    holding unknown tags (empty on every frame a known client sends)."""

    body_start: int
    body_end: int
    edits: tuple[TagEdit, ...]


def _uvarint(b: bytes, p: int, end: int) -> tuple[int, int]:
    """An unsigned varint of at most 5 bytes at b[p:end] -> (value, next position)."""
    value = 0
    shift = 0
    while True:
        if p >= end:
            raise FrameError(f"truncated varint at byte {p}")
        byte = b[p]
        p += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, p
        shift += 7
        if shift >= 35:
            raise FrameError(f"varint longer than 5 bytes at byte {p - 5}")


def _tags(b: bytes, p: int, end: int, known: dict[int, Callable], edits: list[TagEdit]) -> int:
    """A tagged-field section at p: known tags checked within their size, unknown
    ones recorded in edits (stripped before kio reads the frame)."""
    count_start = p
    count, p = _uvarint(b, p, end)
    if count > end - p:  # every tag costs at least 2 bytes (tag, size)
        raise FrameError(f"{count} tagged fields in {end - p} bytes at byte {count_start}")
    count_end = p
    drop: list[tuple[int, int]] = []
    for _ in range(count):
        start = p
        tag, p = _uvarint(b, p, end)
        size, p = _uvarint(b, p, end)
        if size > end - p:
            raise FrameError(f"tagged field {tag} of {size} bytes past the frame at byte {p}")
        stop = p + size
        check = known.get(tag)
        if check is None:
            drop.append((start, stop))
        else:
            before = len(edits)
            if check(b, p, stop, edits) != stop:
                raise FrameError(f"tagged field {tag} does not fill its {size} bytes at byte {p}")
            if len(edits) != before:  # stripping would change this field's size
                raise FrameError(f"unknown tags nested in tagged field {tag} at byte {p}")
        p = stop
    if drop:
        edits.append(TagEdit(count_start, count_end, count - len(drop), tuple(drop)))
    return p


def _merge_skips(body: list[str]) -> list[str]:
    """Consecutive fixed-size skips as one addition (checked by the next bound)."""
    out: list[str] = []
    for line in body:
        skip = line.startswith("p += ") and line[5:].isdigit()
        if skip and out and out[-1].startswith("p += ") and out[-1][5:].isdigit():
            out[-1] = f"p += {int(out[-1][5:]) + int(line[5:])}"
            continue
        out.append(line)
    return out


def _is_nullable(tp: Any) -> bool:
    return typing.get_origin(tp) in (typing.Union, types.UnionType) and type(None) in (
        typing.get_args(tp)
    )


def _strip_none(tp: Any) -> Any:
    if _is_nullable(tp):
        (inner,) = [a for a in typing.get_args(tp) if a is not type(None)]
        return inner
    return tp


def _entity_of(tp: Any) -> type | None:
    return tp if isinstance(tp, type) and dataclasses.is_dataclass(tp) else None


class _Compiler:
    """Emits one Python function per entity class; min_size memoises each class's
    smallest wire size (what one array element costs at least)."""

    def __init__(self) -> None:
        self.src: list[str] = []
        self.names: dict[type, str] = {}
        self.min_sizes: dict[type, int] = {}
        self.known_tags: dict[str, dict[int, Callable]] = {}
        self.pending_tags: list[tuple[str, dict[int, str]]] = []

    # -------------------------------------------------------------- sizes

    def min_size(self, cls: type, header: bool = False) -> int:
        if cls in self.min_sizes:
            return self.min_sizes[cls]
        hints = typing.get_type_hints(cls)
        flexible = cls.__flexible__
        total = 1 if flexible else 0  # the tagged-section count
        for f in dataclasses.fields(cls):
            if "tag" in f.metadata:
                continue
            total += self._field_min(hints[f.name], f, flexible, header)
        self.min_sizes[cls] = total
        return total

    def _field_min(self, tp: Any, f: dataclasses.Field, flexible: bool, header: bool) -> int:
        inner = _strip_none(tp)
        if typing.get_origin(inner) is tuple:
            return 1 if flexible else 4
        ent = _entity_of(inner)
        if ent is not None:
            return 1 if _is_nullable(tp) else self.min_size(ent)
        kt = f.metadata["kafka_type"]
        if kt in _FIXED:
            return _FIXED[kt]
        if header and f.name == "client_id":
            return 2
        if flexible:
            return 1
        return 2 if kt == "string" else 4

    # -------------------------------------------------------------- code

    def function(self, cls: type, header: bool = False) -> str:
        """The name of cls's checker, compiling it (and what it nests) first."""
        if cls in self.names:
            return self.names[cls]
        name = f"_c{len(self.names)}_{cls.__name__}"
        self.names[cls] = name
        hints = typing.get_type_hints(cls)
        flexible = cls.__flexible__
        body: list[str] = []
        tagged: dict[int, str] = {}
        for f in dataclasses.fields(cls):
            tp = hints[f.name]
            if "tag" in f.metadata:
                tagged[int(f.metadata["tag"])] = self._tag_function(cls, f, tp)
                continue
            self._emit_field(body, f, tp, flexible, header, f"{cls.__name__}.{f.name}")
        if flexible:
            tags_name = f"_T_{name}"
            self.pending_tags.append((tags_name, tagged))
            # An empty tagged section (one 0 byte) is what every known client sends.
            body.append("if p < end and b[p] == 0:")
            body.append("    p += 1")
            body.append("else:")
            body.append(f"    p = _tags(b, p, end, {tags_name}, ed)")
        lines = [f"def {name}(b, p, end, ed):"]
        lines += ["    " + line for line in _merge_skips(body)]
        lines.append("    if p > end:")
        lines.append(f"        raise FrameError('truncated {cls.__name__} at byte %d' % end)")
        lines.append("    return p")
        self.src.append("\n".join(lines))
        return name

    def _tag_function(self, cls: type, f: dataclasses.Field, tp: Any) -> str:
        """A checker for one known tagged field's content (tagged fields may hold
        a default-less value but are never null on the wire: kio's rule)."""
        fname = f"_tag_{cls.__name__}_{f.name}_{len(self.src)}"
        body: list[str] = []
        self._emit_field(body, f, _strip_none(tp), True, False, f"{cls.__name__}.{f.name}")
        lines = [f"def {fname}(b, p, end, ed):"] + ["    " + line for line in body]
        lines.append("    return p")
        self.src.append("\n".join(lines))
        return fname

    def _emit_field(
        self, out: list[str], f: dataclasses.Field, tp: Any, flexible: bool, header: bool, what: str
    ) -> None:
        nullable = _is_nullable(tp)
        inner = _strip_none(tp)
        if typing.get_origin(inner) is tuple:
            (elem_tp, _ell) = typing.get_args(inner)
            self._emit_array(out, f, elem_tp, nullable, flexible, what)
            return
        ent = _entity_of(inner)
        if ent is not None:
            fn = self.function(ent)
            if nullable:  # KIP-893: an int8 marker, -1 null
                out += [
                    "if p >= end:",
                    f"    raise FrameError('truncated {what}')",
                    "m = b[p]; p += 1",
                    "if m != 255:",
                    f"    p = {fn}(b, p, end, ed)",
                ]
            else:
                out.append(f"p = {fn}(b, p, end, ed)")
            return
        kt = f.metadata["kafka_type"]
        if kt in _FIXED:
            out.append(f"p += {_FIXED[kt]}")
            return
        if kt not in _LENGTH_PREFIXED:
            raise NotImplementedError(f"kafka_type {kt!r} ({what})")
        if header and f.name == "client_id":
            flexible, nullable = False, True  # always a legacy nullable string
        self._emit_length(out, kt, nullable, flexible, what)

    def _emit_length(self, out: list[str], kt: str, nullable: bool, flexible: bool, what: str):
        """A string / bytes / records length, then a skip over its content."""
        if flexible:
            out += [
                "if p < end and b[p] < 128:",
                "    n = b[p] - 1; p += 1",
                "else:",
                "    n, p = _uvarint(b, p, end); n -= 1",
            ]
        else:
            width, fmt = (2, "_I16") if kt == "string" else (4, "_I32")
            out += [
                f"if p + {width} > end:",
                f"    raise FrameError('truncated {what} length')",
                f"n = {fmt}(b, p)[0]; p += {width}",
            ]
        null_check = "n < 0" if flexible else "n == -1"
        if nullable:
            out.append(f"if {null_check}:")
            out.append("    n = 0")
        else:
            out.append(f"if {null_check}:")
            out.append(f"    raise NullError('null {what}')")
        out += [
            "if n < 0 or n > end - p:",
            f"    raise FrameError('{what}: length %d, %d bytes left' % (n, end - p))",
            "p += n",
        ]

    def _emit_array(
        self,
        out: list[str],
        f: dataclasses.Field,
        elem_tp: Any,
        nullable: bool,
        flexible: bool,
        what: str,
    ) -> None:
        ent = _entity_of(_strip_none(elem_tp))
        if ent is not None:
            cost = max(self.min_size(ent), 1)
        else:
            kt = f.metadata["kafka_type"]
            cost = _FIXED.get(kt, 1 if flexible else (2 if kt == "string" else 4))
        if flexible:
            out += [
                "if p < end and b[p] < 128:",
                "    n = b[p] - 1; p += 1",
                "else:",
                "    n, p = _uvarint(b, p, end); n -= 1",
            ]
            null_check = "n < 0"
        else:
            out += [
                "if p + 4 > end:",
                f"    raise FrameError('truncated {what} count')",
                "n = _I32(b, p)[0]; p += 4",
            ]
            null_check = "n == -1"
        out.append(f"if {null_check}:")
        out.append("    n = 0" if nullable else f"    raise NullError('null array {what}')")
        out += [
            f"if n < 0 or n * {cost} > end - p:",
            f"    raise FrameError('{what}: %d elements, %d bytes left' % (n, end - p))",
        ]
        if ent is not None:
            fn = self.function(ent)
            out += ["for _ in range(n):", f"    p = {fn}(b, p, end, ed)"]
        elif f.metadata["kafka_type"] in _FIXED:
            out.append(f"p += n * {cost}")
        else:
            loop: list[str] = []
            self._emit_length(loop, f.metadata["kafka_type"], False, flexible, what + "[]")
            out.append("for _ in range(n):")
            out += ["    " + line for line in loop]

    def finish(self) -> dict[str, Any]:
        ns: dict[str, Any] = {
            "FrameError": FrameError,
            "NullError": NullError,
            "_uvarint": _uvarint,
            "_tags": _tags,
            "_I16": struct.Struct(">h").unpack_from,
            "_I32": struct.Struct(">i").unpack_from,
        }
        exec(compile("\n\n".join(self.src), "<sink.kafka.framecheck>", "exec"), ns)
        for tags_name, tagged in self.pending_tags:
            ns[tags_name] = {tag: ns[fn] for tag, fn in tagged.items()}
        return ns


Checker = Callable[[bytes], RequestShape]


@functools.lru_cache(maxsize=1024)
def request_checker(api_key: int, version: int) -> Checker:
    """The compiled checker of one request version (kio's schema must know it)."""
    req_cls = request_schema(api_key, version)
    comp = _Compiler()
    header_fn = comp.function(req_cls.__header_schema__, header=True)
    body_fn = comp.function(req_cls)
    ns = comp.finish()
    check_header, check_body = ns[header_fn], ns[body_fn]

    def check(frame: bytes) -> RequestShape:
        edits: list[TagEdit] = []
        end = len(frame)
        body_start = check_header(frame, 0, end, edits)
        body_end = check_body(frame, body_start, end, edits)
        return RequestShape(body_start, body_end, tuple(edits) if edits else ())

    check.source = "\n\n".join(comp.src)  # type: ignore[attr-defined]
    return check


def entity_checker(cls: type) -> Callable[[bytes, int], tuple[int, tuple[TagEdit, ...]]]:
    """The checker of one kio entity class (any schema dataclass): (buffer, start)
    -> (end of the entity, unknown-tag edits). For tests and tools; requests use
    request_checker."""
    comp = _Compiler()
    fn = comp.function(cls)
    check_entity = comp.finish()[fn]

    def check(buf: bytes, start: int = 0) -> tuple[int, tuple[TagEdit, ...]]:
        edits: list[TagEdit] = []
        end = check_entity(buf, start, len(buf), edits)
        return end, tuple(edits)

    return check


def check_request(frame: bytes, api_key: int, version: int) -> RequestShape:
    """Check one request frame (bytes after the size prefix); raises FrameError."""
    return request_checker(api_key, version)(frame)


def strip_unknown_tags(frame: bytes, edits: tuple[TagEdit, ...]) -> bytes:
    """frame without the unknown tagged fields edits name (KIP-482: skipped), each
    section's count rewritten to the known tags it keeps."""
    if not edits:
        return frame
    cuts: list[tuple[int, int, bytes]] = []
    for e in edits:
        cuts.append((e.count_start, e.count_end, uvarint(e.known_count)))
        cuts.extend((s, t, b"") for s, t in e.drop)
    cuts.sort()
    out = bytearray()
    pos = 0
    for start, stop, repl in cuts:
        out += frame[pos:start]
        out += repl
        pos = stop
    out += frame[pos:]
    return bytes(out)
