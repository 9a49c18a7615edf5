"""One request frame to kio entities, every length bounds-checked first.

The one sequence every reader of a request frame runs (the connection's, and the
Envelope handler's for the request it carries): the bounds check (framecheck: no length
from the wire reaches kio's native reader unchecked, which would allocate what the
frame claims and abort the process on failure), KIP-482's unknown tagged fields
stripped, then kio's readers. Trailing bytes are tolerated, as kio's reader tolerates
them.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from kio.serial import entity_reader

from sink.kafka.protocol.framecheck import FrameError, request_checker, strip_unknown_tags
from sink.kafka.protocol.schemas import request_schema

__all__ = ["UnreadableRequest", "parse_request"]


class UnreadableRequest(FrameError):
    """kio's reader refused a frame that passed the bounds check (a value its types do
    not allow); the message names kio's exception."""


@functools.lru_cache(maxsize=512)
def _readers(api_key: int, version: int) -> tuple[Callable, Callable]:
    """kio's (header, body) readers for one request version (kio resolves the
    schema module by name on every call; the cache takes that off each frame)."""
    req_cls = request_schema(api_key, version)
    return entity_reader(req_cls.__header_schema__), entity_reader(req_cls)


def parse_request(frame: bytes | memoryview, api_key: int, version: int) -> tuple[Any, Any]:
    """(header, body) of one request frame (the bytes after its size prefix), of a
    version the caller serves. Raises NullError (a null where the schema allows none:
    INVALID_REQUEST where the response can say so), FrameError (a length out of
    bounds) or UnreadableRequest (kio refused it)."""
    shape = request_checker(api_key, version)(frame)
    parsed = strip_unknown_tags(frame, shape.edits) if shape.edits else frame
    read_header, read_body = _readers(api_key, version)
    try:
        header, n = read_header(parsed, 0)
        body, _ = read_body(parsed, n)
    except Exception as exc:
        raise UnreadableRequest(f"{type(exc).__name__}: {exc}") from exc
    return header, body
