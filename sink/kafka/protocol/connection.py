"""One Kafka connection as a sans-I/O state machine (in h11's style).

The driver (sink.kafka.connection, asyncio) feeds bytes in with receive_data()
(b"" at EOF), takes events out with next_event(), and frames responses with
send(). This machine owns everything that needs no socket:

- the frame size check, done as soon as the 4-byte size is in (before the body
  is buffered), against max_frame_bytes;
- the header and version checks (an unsupported ApiVersions version is answered
  with Kafka's v0 fallback; any other unsupported API or version closes, as Kafka
  does), the bounds-checking pass (framecheck) and kio's parse;
- the accounting of the ordered response queue: requests admitted and not yet
  answered, and the produce bytes they hold (back-pressure reads has_room());
- the request-memory handshake (budgeted=True): once a frame's size passes the
  checks, NeedMemory(size) is returned until the driver has reserved it from the
  node's budget (sink.kafka.budget) and called grant(size); only then is the body
  read, into one buffer of exactly the frame's size (no growth, no copy when it is
  complete: the request is parsed from a read-only view of it). The Request (or
  Answer) carries the reservation (reserved), which the driver releases when the
  response is written;
- who the client is (client id, software name/version from ApiVersions v3+), for
  log lines;
- a closed set of reasons to close (CloseReason).

- the SASL gate (auth, a sink.security.SaslSession on a listener that requires
  SASL): before a request is parsed, auth.refusal(api_key) may close the
  connection (a request before authentication, after a failed one, or past the
  session's lifetime: Kafka closes there too); while auth.raw_tokens (after a v0
  SaslHandshake) a frame is a raw SASL token (SaslToken), not a request.
ACL checks will sit beside the gate.
"""

from __future__ import annotations

import enum
import mmap
import struct
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple, Protocol

from kio.schema.index import api_key_map

from sink.kafka.protocol.errors import ErrorCode
from sink.kafka.protocol.framecheck import FrameError, NullError
from sink.kafka.protocol.parse import parse_request

_SIZE = struct.Struct(">i")
_HEAD = struct.Struct(">hhi")
MIN_FRAME = _HEAD.size + 2  # api key, version, correlation id, client id length
_I16 = struct.Struct(">h")
_MAX_LOGGED_CLIENT_ID = 256  # characters of a client id a log line shows
_MMAP_MIN = 1 << 20
"""A granted frame at least this large is read into anonymous memory (mmap): its
pages exist only once written, so memory follows the bytes that arrived, not the
size announced (bytearray(n) writes all n bytes at once)."""


def _frame_buffer(size: int) -> bytearray | mmap.mmap:
    return mmap.mmap(-1, size) if size >= _MMAP_MIN else bytearray(size)


def raw_client_id(frame: bytes) -> str | None:
    """The client id of a request header v1+ (api_key, version, correlation_id, then a
    nullable int16-length string), read from the raw frame without its schema, so that
    a request refused for its version still names its client. None when null or when
    the length runs past the frame (bounds-checked: never trusts the length)."""
    if len(frame) < MIN_FRAME:
        return None
    (n,) = _I16.unpack_from(frame, _HEAD.size)
    start = _HEAD.size + 2
    if n < 0 or start + n > len(frame):
        return None
    return bytes(frame[start : start + min(n, _MAX_LOGGED_CLIENT_ID)]).decode("utf-8", "replace")


class CloseReason(enum.Enum):
    """Why a connection ends (the closed set; log lines name it)."""

    EOF = "eof"
    IDLE = "idle"
    FRAME_TIMEOUT = "frame read timeout"
    TRUNCATED = "truncated"
    FRAME_TOO_LARGE = "frame too large"
    FRAME_TOO_SHORT = "frame too short"
    UNSUPPORTED_API = "unsupported api"
    UNSUPPORTED_VERSION = "unsupported version"
    MALFORMED = "malformed request"
    NO_ERROR_ANSWER = "no error answer could be formed"
    SHUTDOWN = "server shutdown"
    AUTHENTICATION = "authentication"


class NeedData(NamedTuple):
    """Nothing complete buffered: feed more bytes."""


NEED_DATA = NeedData()


class NeedMemory(NamedTuple):
    """The next frame's size passed the checks: reserve size bytes of the node's
    request memory, then grant(size) (budgeted connections only)."""

    size: int


class Request(NamedTuple):
    """A parsed request for its handler."""

    api_key: int
    version: int
    corr: int
    req: Any
    frame: bytes | memoryview
    """The frame as received (a read-only view for frames that spanned reads)."""
    reserved: int = 0
    """Request-memory bytes granted for this frame (the driver releases them)."""


class Answer(NamedTuple):
    """A response the machine formed itself (the ApiVersions fallback,
    INVALID_REQUEST for a forbidden null): send it in order, like any response."""

    data: bytes
    note: str
    reserved: int = 0


class SaslToken(NamedTuple):
    """A raw SASL token (after a v0 SaslHandshake): the frame's bytes, no header.
    Answered with the raw challenge, size-prefixed (send())."""

    token: bytes | memoryview
    reserved: int = 0


class Close(NamedTuple):
    reason: CloseReason
    detail: str


class AuthGate(Protocol):
    """The SASL state the machine consults (sink.security.SaslSession)."""

    @property
    def raw_tokens(self) -> bool: ...
    def refusal(self, api_key: int) -> str | None: ...


Event = NeedData | NeedMemory | Request | Answer | SaslToken | Close


def api_name(api_key: int) -> str:
    return f"{api_key_map.get(api_key, 'unknown')}({api_key})"


# (version, corr, request or None, code) -> response bytes, or None if none can be formed
ErrorAnswer = Callable[[int, int, Any, ErrorCode], Any]


class ConnectionState:
    """supported: API key -> (min, max) served. invalid_answer(api_key, version,
    corr): that version's INVALID_REQUEST response without a request, or None.
    fallback(corr): the ApiVersions v0 UNSUPPORTED_VERSION answer."""

    def __init__(
        self,
        *,
        max_frame_bytes: int,
        supported: Mapping[int, tuple[int, int]],
        api_versions_key: int,
        invalid_answer: Callable[[int, int, int], bytes | None],
        fallback: Callable[[int], bytes],
        budgeted: bool = False,
        auth: AuthGate | None = None,
    ) -> None:
        """budgeted: ask for each frame's memory (NeedMemory) before reading its body.
        auth: the SASL gate of a listener that requires SASL (None: open)."""
        self.auth = auth
        self.max_frame_bytes = max_frame_bytes
        self.budgeted = budgeted
        self.supported = supported
        self.api_versions_key = api_versions_key
        self._invalid_answer = invalid_answer
        self._fallback = fallback
        # Unparsed input is self._data[self._pos:]. A chunk holding whole frames
        # stays the bytes object the socket gave (each frame is one slice, one
        # copy); only a frame split across chunks is accumulated in a bytearray.
        self._data: bytes | bytearray = b""
        self._pos = 0
        self._eof = False
        self.closed: Close | None = None
        self.client_id: str | None = None
        self.client_software: str | None = None
        self.inflight = 0
        self.pending_bytes = 0
        # Request memory. Invariant: _granted is 0 or the size of the frame at the
        # head of the input; _frame (when set) holds that frame's body, _fill bytes of it.
        self._granted = 0
        self._frame: bytearray | mmap.mmap | None = None
        self._fill = 0

    # ------------------------------------------------------------ input

    def receive_data(self, data: bytes) -> None:
        """Bytes from the socket; b"" means the peer closed its side."""
        if not data:
            self._eof = True
            return
        if self._frame is not None and self._fill < len(self._frame):
            take = min(len(data), len(self._frame) - self._fill)
            with memoryview(data) as mv:
                self._frame[self._fill : self._fill + take] = mv[:take]
            self._fill += take
            if take == len(data):
                return
            data = data[take:]  # the next frames' bytes, after this frame's end
        if self._pos >= len(self._data):
            self._data, self._pos = data, 0
        else:
            if not isinstance(self._data, bytearray):
                self._data = bytearray(memoryview(self._data)[self._pos :])
                self._pos = 0
            self._data += data

    @property
    def buffered(self) -> int:
        return len(self._data) - self._pos + (self._fill if self._frame is not None else 0)

    @property
    def waiting_for(self) -> str:
        """Between frames "size", inside one "body" (idleness is judged by it)."""
        return "body" if self._frame is not None or self.buffered >= 4 else "size"

    @property
    def frame_started(self) -> bool:
        """A frame's memory is granted and its body is being read (the driver's
        frame timeout runs)."""
        return self._granted > 0

    @property
    def frame_remaining(self) -> int:
        """Bytes of a granted frame's body still to come (0: none being read into its
        buffer); the driver reads no more than that, so the next frame's bytes wait
        in the kernel until that frame has its memory."""
        return len(self._frame) - self._fill if self._frame is not None else 0

    def frame_view(self) -> memoryview:
        """A writable view of the granted frame's missing bytes (frame_remaining > 0):
        a BufferedProtocol driver reads the socket straight into it (no copy), then
        calls frame_filled(n)."""
        assert self._frame is not None and self._fill < len(self._frame)
        return memoryview(self._frame)[self._fill :]

    def frame_filled(self, n: int) -> None:
        """n bytes were written into frame_view() (0 < n <= frame_remaining)."""
        self._fill += n

    def grant(self, size: int) -> None:
        """The driver reserved size bytes for the frame NeedMemory announced."""
        self._granted = size

    def _take_granted(self) -> int:
        n, self._granted = self._granted, 0
        return n

    def next_event(self) -> Event:
        if self.closed is not None:
            return self.closed
        if self._frame is not None:  # a granted frame that spanned reads
            if self._fill < len(self._frame):
                if self._eof:
                    return self._close(CloseReason.TRUNCATED, "truncated frame body")
                return NEED_DATA
            frame = memoryview(self._frame).toreadonly()
            self._frame, self._fill = None, 0
            return self._parse(frame, self._take_granted())
        avail = len(self._data) - self._pos
        if avail < 4:
            if self._eof:
                return self._close(
                    CloseReason.TRUNCATED if avail else CloseReason.EOF,
                    "truncated frame size" if avail else "",
                )
            return NEED_DATA
        data, pos = self._data, self._pos
        (size,) = _SIZE.unpack_from(data, pos)
        if size > self.max_frame_bytes:
            return self._close(
                CloseReason.FRAME_TOO_LARGE,
                f"frame of {size} bytes exceeds max_frame_bytes={self.max_frame_bytes}",
            )
        if size < MIN_FRAME and not (self.auth is not None and self.auth.raw_tokens):
            return self._close(
                CloseReason.FRAME_TOO_SHORT,
                f"frame of {size} bytes is too short for a request header",
            )
        if self.budgeted and not self._granted:
            return NeedMemory(size)
        if avail < 4 + size:
            if self._eof:
                return self._close(CloseReason.TRUNCATED, "truncated frame body")
            if self.budgeted:
                # Read the body into one buffer of exactly its size (granted memory).
                self._frame = _frame_buffer(size)
                have = avail - 4
                with memoryview(data) as mv:
                    self._frame[:have] = mv[pos + 4 : pos + 4 + have]
                self._fill = have
                self._data, self._pos = b"", 0
            return NEED_DATA
        end = pos + 4 + size
        if isinstance(data, bytes):
            frame = data[pos + 4 : end]
            self._pos = end
        else:  # accumulated: copy the frame out, drop it from the front
            with memoryview(data) as mv:
                frame = bytes(mv[pos + 4 : end])
            del data[:end]
            self._pos = 0
        if self._pos == len(self._data):
            self._data, self._pos = b"", 0
        return self._parse(frame, self._take_granted())

    def _parse(self, frame: bytes | memoryview, reserved: int) -> Event:
        ev = self._parse_frame(frame)
        if reserved and isinstance(ev, (Request, Answer, SaslToken)):
            ev = ev._replace(reserved=reserved)
        return ev

    def _parse_frame(self, frame: bytes | memoryview) -> Event:
        if self.auth is not None and self.auth.raw_tokens:
            return SaslToken(frame)
        api_key, version, corr = _HEAD.unpack_from(frame, 0)
        if self.client_id is None:  # the first request: name the client in any refusal
            self.client_id = raw_client_id(frame)
        if api_key == self.api_versions_key and not (0 <= version <= self.supported[api_key][1]):
            # Kafka's fallback: UNSUPPORTED_VERSION in a v0 body listing our APIs.
            return Answer(
                self._fallback(corr),
                f"unsupported version {version} of {api_name(api_key)} from {self.client()}: "
                "answered with the v0 fallback",
            )
        if self.auth is not None:
            why = self.auth.refusal(api_key)
            if why is not None:
                return self._close(
                    CloseReason.AUTHENTICATION, f"{why} ({api_name(api_key)}) from {self.client()}"
                )
        rng = self.supported.get(api_key)
        if rng is None:
            return self._close(
                CloseReason.UNSUPPORTED_API,
                f"unsupported API {api_name(api_key)} from {self.client()}",
            )
        if not rng[0] <= version <= rng[1]:
            # Kafka closes the connection (the client negotiated nothing, or ignored it).
            return self._close(
                CloseReason.UNSUPPORTED_VERSION,
                f"unsupported version {version} of API {api_name(api_key)} (served "
                f"v{rng[0]}-v{rng[1]}) from {self.client()}",
            )
        # No length from the wire reaches kio's native reader unchecked (parse_request).
        try:
            hdr, req = parse_request(frame, api_key, version)
        except NullError as exc:
            # INVALID_REQUEST where the version's response can say so without the
            # request (a top-level error code); else a protocol error, as Kafka's.
            answer = self._invalid_answer(api_key, version, corr)
            if answer is None:
                return self._close(
                    CloseReason.MALFORMED,
                    f"malformed request ({api_name(api_key)} v{version}): {exc}",
                )
            return Answer(
                answer,
                f"invalid request ({api_name(api_key)} v{version}) from {self.client()}: {exc}",
            )
        except FrameError as exc:
            return self._close(
                CloseReason.MALFORMED, f"malformed request ({api_name(api_key)} v{version}): {exc}"
            )
        self.client_id = hdr.client_id
        if api_key == self.api_versions_key and version >= 3:
            self.client_software = f"{req.client_software_name}/{req.client_software_version}"
        return Request(api_key, version, corr, req, frame)

    def _close(self, reason: CloseReason, detail: str) -> Close:
        self.closed = Close(reason, detail)
        return self.closed

    def close(self, reason: CloseReason, detail: str = "") -> Close:
        """The driver ends the connection (idle, shutdown, no error answer)."""
        if self.closed is None:
            self._close(reason, detail)
        assert self.closed is not None
        return self.closed

    def drop_buffers(self) -> None:
        """The connection is over: let go of buffered input now (a granted frame's
        buffer may be large; the driver releases its reservation at the same time,
        and must not leave the memory to the cyclic garbage collector)."""
        self._data, self._pos = b"", 0
        self._frame, self._fill = None, 0
        self._granted = 0

    def client(self) -> str:
        """The client as log lines name it: software name/version (ApiVersions v3+),
        else the header's client id."""
        if self.client_software:
            return f"{self.client_software} (client_id={self.client_id!r})"
        return f"client_id={self.client_id!r}"

    # ------------------------------------------------------------ output

    def admit(self, cost: int) -> None:
        """A response is owed (cost: produce bytes it holds until written)."""
        self.inflight += 1
        self.pending_bytes += cost

    def has_room(self, max_inflight: int, max_pending_bytes: int) -> bool:
        return self.inflight < max_inflight and self.pending_bytes < max_pending_bytes

    def send(self, data: bytes | list[bytes | memoryview] | None, cost: int) -> list:
        """The owed response at the head of the queue is done: its wire parts
        (size prefix first; [] for no response, acks=0)."""
        self.inflight -= 1
        self.pending_bytes -= cost
        if data is None:
            return []
        if isinstance(data, list):
            return [_SIZE.pack(sum(len(p) for p in data)), *data]
        return [_SIZE.pack(len(data)) + data]
