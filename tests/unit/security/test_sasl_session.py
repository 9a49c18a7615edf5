"""One connection's SASL state (sink.security.sasl) and the connection state
machine's gate on it, without sockets: what may be sent before authentication,
disabled mechanisms, PLAIN and SCRAM, re-authentication and session expiry (KIP-368),
v0 raw tokens."""

from __future__ import annotations

import struct

import pytest
from kio.schema.errors import ErrorCode

from sink.kafka.handlers import API_VERSIONS_KEY, SUPPORTED
from sink.kafka.protocol.connection import (
    NEED_DATA,
    Close,
    CloseReason,
    ConnectionState,
    Request,
    SaslToken,
)
from sink.security.sasl import Phase, SaslPolicy, SaslSession
from sink.security.sasl_client import Login, LoginExchange
from sink.security.scram import make_credential
from tests.unit.sink.requests import valid_request

USERS = {
    ("alice", m): make_credential(m, "alice-pw", 4096) for m in ("SCRAM-SHA-256", "SCRAM-SHA-512")
} | {("bob", "SCRAM-SHA-512"): make_credential("SCRAM-SHA-512", "bob-pw", 4096)}
METADATA, PRODUCE, HANDSHAKE, AUTHENTICATE, API_VERSIONS = 3, 0, 17, 36, 18


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def session(mechs=("SCRAM-SHA-256", "SCRAM-SHA-512", "PLAIN"), lifetime_ms=0, clock=None):
    policy = SaslPolicy(tuple(mechs), lifetime_ms, b"k")
    return SaslSession(policy, lambda u, m: USERS.get((u, m)), clock or Clock())


def login(s: SaslSession, mech: str, user: str, password: str, version: int = 1):
    """Run a client exchange against the session; the last AuthStep."""
    assert s.handshake(mech, 1) == ErrorCode.none
    ex = LoginExchange(Login(mech, user, password))
    step, challenge = None, None
    while (token := ex.step(challenge)) is not None:
        step = s.authenticate(token, version)
        if step.error != ErrorCode.none:
            return step
        challenge = step.challenge
    return step


def test_before_authentication_only_api_versions_and_the_handshake():
    s = session()
    assert s.refusal(API_VERSIONS) is None and s.refusal(HANDSHAKE) is None
    assert "before SASL authentication" in s.refusal(METADATA)
    assert "without a SaslHandshake" in s.refusal(AUTHENTICATE)
    assert s.handshake("SCRAM-SHA-512", 1) == ErrorCode.none
    assert s.refusal(AUTHENTICATE) is None
    assert "before SASL authentication" in s.refusal(PRODUCE)
    assert "during an authentication" in s.refusal(HANDSHAKE)


@pytest.mark.parametrize("mech", ["SCRAM-SHA-256", "SCRAM-SHA-512", "PLAIN"])
def test_each_mechanism_authenticates_and_keeps_the_principal(mech):
    s = session()
    step = login(s, mech, "alice", "alice-pw")
    assert step.error == ErrorCode.none, step
    assert s.principal == "User:alice" and s.phase is Phase.DONE
    assert s.refusal(PRODUCE) is None and s.refusal(METADATA) is None


@pytest.mark.parametrize("mech", ["SCRAM-SHA-256", "SCRAM-SHA-512", "PLAIN"])
@pytest.mark.parametrize("user, password", [("alice", "wrong"), ("nobody", "alice-pw")])
def test_wrong_password_and_unknown_user_fail_alike_and_the_session_is_over(mech, user, password):
    s = session()
    step = login(s, mech, user, password)
    assert step.error == ErrorCode.sasl_authentication_failed
    assert step.message == (
        "Authentication failed during authentication due to invalid credentials with SASL "
        f"mechanism {mech}"
    )
    assert s.failed and s.principal is None
    assert s.refusal(API_VERSIONS) is not None  # nothing more: the connection closes


def test_a_user_without_the_mechanism_credential_fails():
    s = session()
    assert login(s, "SCRAM-SHA-256", "bob", "bob-pw").error == ErrorCode.sasl_authentication_failed
    assert login(session(), "PLAIN", "bob", "bob-pw").error == ErrorCode.none


def test_disabled_mechanism_is_refused_and_ends_the_session():
    s = session(mechs=("SCRAM-SHA-512",))
    assert s.handshake("PLAIN", 1) == ErrorCode.unsupported_sasl_mechanism
    assert s.failed and s.enabled == ("SCRAM-SHA-512",)
    assert session().handshake("GSSAPI", 1) == ErrorCode.unsupported_sasl_mechanism


@pytest.mark.parametrize(
    "token",
    [
        b"",
        b"alice\0alice-pw",
        b"\0alice\0alice-pw\0x",
        b"bob\0alice\0alice-pw",
        b"\0\0alice-pw",
        b"\0alice\0\xff",
    ],
)
def test_malformed_plain(token):
    s = session()
    assert s.handshake("PLAIN", 1) == ErrorCode.none
    step = s.authenticate(token, 1)
    assert step.error == ErrorCode.sasl_authentication_failed and s.failed


def test_malformed_scram_first_message():
    s = session()
    s.handshake("SCRAM-SHA-512", 1)
    step = s.authenticate(b"garbage", 1)
    assert step.error == ErrorCode.sasl_authentication_failed
    assert "malformed" in step.message and s.failed


def test_session_lifetime_and_reauthentication():
    clock = Clock()
    s = session(lifetime_ms=60_000, clock=clock)
    step = login(s, "SCRAM-SHA-512", "alice", "alice-pw", version=2)
    assert step.session_lifetime_ms == 60_000
    clock.now += 59.9
    assert s.refusal(PRODUCE) is None
    clock.now += 0.2
    assert "expired" in s.refusal(PRODUCE)  # past its lifetime: the connection closes
    assert s.refusal(HANDSHAKE) is None  # ... unless it re-authenticates
    step = login(s, "SCRAM-SHA-512", "alice", "alice-pw", version=2)
    assert step.error == ErrorCode.none and s.refusal(PRODUCE) is None
    clock.now += 61
    assert s.refusal(PRODUCE) is not None


def test_reauthentication_keeps_principal_and_mechanism():
    s = session(lifetime_ms=1000)
    login(s, "SCRAM-SHA-512", "alice", "alice-pw")
    step = login(s, "SCRAM-SHA-512", "bob", "bob-pw")
    assert step.error == ErrorCode.sasl_authentication_failed and s.failed
    s = session(lifetime_ms=1000)
    login(s, "SCRAM-SHA-512", "alice", "alice-pw")
    assert s.handshake("PLAIN", 1) == ErrorCode.illegal_sasl_state and s.failed


def test_v0_authenticate_has_no_lifetime():
    s = session(lifetime_ms=1000)
    step = login(s, "PLAIN", "alice", "alice-pw", version=0)
    assert step.error == ErrorCode.none and step.session_lifetime_ms == 0
    assert s.expires_at is None


# ------------------------------------------------- the connection state machine's gate


def sized(frame: bytes) -> bytes:
    return struct.pack(">i", len(frame)) + frame


def gated(s: SaslSession) -> ConnectionState:
    return ConnectionState(
        max_frame_bytes=1 << 20,
        supported=SUPPORTED,
        api_versions_key=API_VERSIONS_KEY,
        invalid_answer=lambda k, v, c: None,
        fallback=lambda corr: b"FALLBACK",
        auth=s,
    )


def test_gate_closes_a_request_before_authentication():
    st = gated(session())
    st.receive_data(sized(valid_request(API_VERSIONS, 3)) + sized(valid_request(METADATA, 12)))
    assert isinstance(st.next_event(), Request)
    ev = st.next_event()
    assert isinstance(ev, Close) and ev.reason is CloseReason.AUTHENTICATION
    assert "metadata(3)" in ev.detail and "before SASL authentication" in ev.detail


def test_gate_lets_sasl_requests_through_then_everything():
    s = session()
    st = gated(s)
    st.receive_data(sized(valid_request(HANDSHAKE, 1)))
    ev = st.next_event()
    assert isinstance(ev, Request) and ev.api_key == HANDSHAKE
    login(s, "PLAIN", "alice", "alice-pw")
    st.receive_data(sized(valid_request(METADATA, 12)))
    ev = st.next_event()
    assert isinstance(ev, Request) and ev.api_key == METADATA


def test_v0_handshake_makes_the_next_frames_raw_tokens():
    """After SaslHandshake v0 a frame is a raw SASL token, however short (PLAIN's
    smallest is 4 bytes: less than a request header)."""
    s = session()
    st = gated(s)
    assert s.handshake("PLAIN", 0) == ErrorCode.none
    st.receive_data(sized(b"\0a\0b"))
    ev = st.next_event()
    assert ev == SaslToken(b"\0a\0b")
    s.authenticate(b"\0alice\0alice-pw", 0)
    assert not s.raw_tokens and s.authenticated
    st.receive_data(sized(valid_request(METADATA, 12)))
    assert isinstance(st.next_event(), Request)
    assert st.next_event() is NEED_DATA
