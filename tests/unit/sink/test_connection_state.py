"""The sans-I/O connection state machine, without sockets: bytes in, events out."""

from __future__ import annotations

import struct

from sink.kafka.handlers import API_VERSIONS_KEY, SUPPORTED
from sink.kafka.protocol.connection import (
    NEED_DATA,
    Answer,
    Close,
    CloseReason,
    ConnectionState,
    Request,
    raw_client_id,
)
from tests.unit.sink.killer_frames import metadata_v12
from tests.unit.sink.requests import encode, request_values, valid_request


def state(max_frame: int = 1 << 20) -> ConnectionState:
    return ConnectionState(
        max_frame_bytes=max_frame,
        supported=SUPPORTED,
        api_versions_key=API_VERSIONS_KEY,
        invalid_answer=lambda k, v, c: b"INVALID" if k == 1 else None,
        fallback=lambda corr: b"FALLBACK%d" % corr,
    )


def sized(frame: bytes) -> bytes:
    return struct.pack(">i", len(frame)) + frame


def test_frames_arrive_in_pieces_and_together():
    st = state()
    a, b = sized(valid_request(3, 12)), sized(valid_request(0, 9))
    data = a + b
    events = []
    for i in range(0, len(data), 7):  # 7-byte pieces
        st.receive_data(data[i : i + 7])
        while (ev := st.next_event()) is not NEED_DATA:
            events.append(ev)
    assert [(e.api_key, e.version, e.corr) for e in events] == [(3, 12, 7), (0, 9, 7)]
    assert all(isinstance(e, Request) for e in events)
    assert st.waiting_for == "size"
    st.receive_data(b"")
    assert st.next_event() == Close(CloseReason.EOF, "")


def test_size_checked_before_the_body_arrives():
    st = state(max_frame=1000)
    st.receive_data(struct.pack(">i", 1 << 30))
    ev = st.next_event()
    assert isinstance(ev, Close) and ev.reason is CloseReason.FRAME_TOO_LARGE
    assert st.next_event() is ev  # closed stays closed


def test_truncated_and_short_frames():
    st = state()
    st.receive_data(struct.pack(">i", 100) + b"\x00" * 10)
    assert st.next_event() is NEED_DATA and st.waiting_for == "body"
    st.receive_data(b"")
    assert st.next_event().reason is CloseReason.TRUNCATED
    st = state()
    st.receive_data(struct.pack(">i", 4) + b"\x00" * 4)
    assert st.next_event().reason is CloseReason.FRAME_TOO_SHORT


def test_unsupported_versions_and_apis():
    st = state()
    st.receive_data(sized(encode(18, 3, request_values(18))))
    assert isinstance(st.next_event(), Request)
    assert st.client_software == "raftsink-test/1.0"
    st.receive_data(sized(struct.pack(">hhih", 18, 9, 3, 1) + b"x"))
    ev = st.next_event()
    assert isinstance(ev, Answer) and ev.data == b"FALLBACK3"
    st.receive_data(sized(struct.pack(">hhih", 1, 99, 4, 1) + b"x"))
    ev = st.next_event()
    assert ev.reason is CloseReason.UNSUPPORTED_VERSION and "raftsink-test/1.0" in ev.detail
    st = state()
    st.receive_data(sized(struct.pack(">hhih", 999, 0, 4, 1) + b"x"))
    assert st.next_event().reason is CloseReason.UNSUPPORTED_API


def test_refusal_of_a_first_request_names_its_client():
    """The client id is read from the raw header before the version check (Sarama's
    retries open a new connection with a refused version first)."""
    st = state()
    st.receive_data(sized(struct.pack(">hhih", 1, 99, 4, 6) + b"sarama"))
    ev = st.next_event()
    assert ev.reason is CloseReason.UNSUPPORTED_VERSION and "client_id='sarama'" in ev.detail
    st = state()
    st.receive_data(sized(struct.pack(">hhih", 999, 0, 4, -1)))
    ev = st.next_event()
    assert ev.reason is CloseReason.UNSUPPORTED_API and "client_id=None" in ev.detail


def test_raw_client_id_is_bounds_checked():
    head = struct.pack(">hhi", 1, 99, 4)
    assert raw_client_id(head + struct.pack(">h", 3) + b"abc") == "abc"
    assert raw_client_id(head + struct.pack(">h", -1)) is None
    assert raw_client_id(head + struct.pack(">h", 40) + b"short") is None  # past the frame
    assert raw_client_id(head + struct.pack(">h", 2) + b"\xff\xfe") == "\ufffd\ufffd"
    assert raw_client_id(head[:5]) is None
    assert len(raw_client_id(head + struct.pack(">h", 1000) + b"x" * 1000) or "") == 256


def test_impossible_length_and_forbidden_null():
    st = state()
    st.receive_data(sized(metadata_v12()))
    ev = st.next_event()
    assert ev.reason is CloseReason.MALFORMED and "elements" in ev.detail
    # Fetch v12 with topics=null: the injected INVALID_REQUEST answer
    fetch = struct.pack(">hhih", 1, 12, 6, 1) + b"k" + b"\x00"
    fetch += struct.pack(">iiiibii", -1, 100, 1, 1 << 20, 0, 0, -1) + b"\x00\x01\x01\x00"
    st = state()
    st.receive_data(sized(fetch))
    ev = st.next_event()
    assert isinstance(ev, Answer) and ev.data == b"INVALID"


def test_response_accounting_and_framing():
    st = state()
    st.admit(100)
    st.admit(0)
    assert (st.inflight, st.pending_bytes) == (2, 100)
    assert not st.has_room(2, 1000) and not st.has_room(5, 100) and st.has_room(5, 101)
    assert st.send(b"abc", 100) == [b"\x00\x00\x00\x03abc"]
    assert st.send([b"ab", memoryview(b"cd")], 0)[0] == b"\x00\x00\x00\x04"
    assert (st.inflight, st.pending_bytes) == (0, 0)
    st.admit(0)
    assert st.send(None, 0) == []  # acks=0: nothing on the wire
