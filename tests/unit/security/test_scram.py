"""SCRAM (RFC 5802 / 7677) without sockets: the RFC 7677 test vector from both sides,
malformed messages, wrong passwords, unknown users, nonce and binding checks."""

from __future__ import annotations

import base64

import pytest

from sink.security.scram import (
    ScramClient,
    ScramError,
    ScramServer,
    credential_from_salted,
    make_credential,
    salted_password,
    verify_password,
)

# RFC 7677 section 3: user "user", password "pencil".
SALT = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
CNONCE = "rOprNGfwEbeRWgbNEkqO"
SNONCE = "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"
CLIENT_FIRST = b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
SERVER_FIRST = (
    b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
)
CLIENT_FINAL = (
    b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
    b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
)
SERVER_FINAL = b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="
MECH = "SCRAM-SHA-256"


def rfc_cred():
    return make_credential(MECH, "pencil", 4096, SALT)


def server(cred=None, users=("user",)) -> ScramServer:
    cred = cred or rfc_cred()
    return ScramServer(MECH, lambda u: cred if u in users else None, fake_key=b"k", nonce=SNONCE)


def test_rfc7677_vector_server_side():
    s = server()
    assert s.first(CLIENT_FIRST) == SERVER_FIRST
    assert s.final(CLIENT_FINAL) == SERVER_FINAL
    assert s.user == "user" and s.done


def test_rfc7677_vector_client_side():
    c = ScramClient(MECH, "user", "pencil", nonce=CNONCE)
    assert c.first() == CLIENT_FIRST
    assert c.final(SERVER_FIRST) == CLIENT_FINAL
    c.verify(SERVER_FINAL)
    with pytest.raises(ScramError, match="signature"):
        c.verify(b"v=" + base64.b64encode(b"\0" * 32))


def test_stored_credential_holds_no_password():
    cred = rfc_cred()
    salted = salted_password(MECH, "pencil", SALT, 4096)
    assert cred == credential_from_salted(MECH, salted, SALT, 4096)
    blob = repr(cred.to_json()).encode()
    assert b"pencil" not in blob and base64.b64encode(salted) not in blob
    assert verify_password(MECH, cred, "pencil") and not verify_password(MECH, cred, "pencil!")


@pytest.mark.parametrize("mech", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_round_trip_and_wrong_password(mech):
    cred = make_credential(mech, "s3cret", 4096)
    for password, ok in (("s3cret", True), ("wrong", False)):
        c = ScramClient(mech, "alice", password)
        s = ScramServer(mech, lambda u: cred if u == "alice" else None, fake_key=b"k")
        final = c.final(s.first(c.first()))
        if ok:
            c.verify(s.final(final))
        else:
            with pytest.raises(ScramError, match="invalid credentials"):
                s.final(final)


def test_unknown_user_fails_like_a_wrong_password_with_a_stable_salt():
    """No user enumeration: an unknown user gets a server-first (same salt each time)
    and the same error as a wrong password, at the proof."""
    firsts = []
    for _ in range(2):
        s = server(users=())
        first = s.first(b"n,,n=mallory,r=abc")
        firsts.append(first.split(b",")[1])
        c = ScramClient(MECH, "mallory", "x", nonce="abc")
        with pytest.raises(ScramError, match="invalid credentials"):
            s.final(c.final(first))
    assert firsts[0] == firsts[1]


@pytest.mark.parametrize(
    "msg, why",
    [
        (b"", "malformed client-first"),
        (b"\xff\xfe", "UTF-8"),
        (b"n,,", "malformed SCRAM attribute"),
        (b"p=tls-unique,,n=user,r=abc", "channel binding"),
        (b"x,,n=user,r=abc", "gs2 header"),
        (b"n,b,n=user,r=abc", "authzid"),
        (b"n,a=other,n=user,r=abc", "authorization id"),
        (b"n,,r=abc,n=user", "must start with n="),
        (b"n,,m=ext,n=user,r=abc", "mandatory extension"),
        (b"n,,n=us=3Ger,r=abc", "escape"),
        (b"n,,n=,r=abc", "empty user"),
        (b"n,,n=user,r=a b", "nonce"),
    ],
)
def test_malformed_client_first(msg, why):
    with pytest.raises(ScramError, match=why):
        server().first(msg)


def test_escaped_user_name_and_matching_authzid():
    s = ScramServer(MECH, lambda u: rfc_cred() if u == "a,b=c" else None, fake_key=b"k")
    s.first(b"n,a=a=2Cb=3Dc,n=a=2Cb=3Dc,r=abc")
    assert s.user == "a,b=c"


@pytest.mark.parametrize(
    "final, why",
    [
        (b"c=biws,r=wrongnonce,p=AAAA", "nonce mismatch"),
        (b"c=eSws,r=" + SERVER_FIRST[2:].split(b",")[0] + b",p=AAAA", "channel binding data"),
        (b"r=x,c=biws,p=AAAA", "c=...,r=...,p="),
        (b"c=biws,r=" + SERVER_FIRST[2:].split(b",")[0] + b",p=!!!", "base64"),
        (b"c=biws,r=" + SERVER_FIRST[2:].split(b",")[0] + b",p=AAAA", "invalid credentials"),
    ],
)
def test_malformed_or_forged_client_final(final, why):
    s = server()
    s.first(CLIENT_FIRST)
    with pytest.raises(ScramError, match=why):
        s.final(final)


def test_final_before_first_and_twice():
    with pytest.raises(ScramError, match="out of order"):
        server().final(CLIENT_FINAL)
    s = server()
    s.first(CLIENT_FIRST)
    s.final(CLIENT_FINAL)
    with pytest.raises(ScramError, match="out of order"):
        s.final(CLIENT_FINAL)


def test_client_refuses_a_server_that_does_not_extend_its_nonce_or_iterates_too_little():
    c = ScramClient(MECH, "user", "pencil", nonce=CNONCE)
    with pytest.raises(ScramError, match="nonce"):
        c.final(b"r=other,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096")
    with pytest.raises(ScramError, match="iterations"):
        c.final(b"r=" + CNONCE.encode() + b"x,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=1")


def test_iterations_bounds():
    with pytest.raises(ScramError):
        make_credential(MECH, "p", 1000)
    with pytest.raises(ScramError):
        make_credential(MECH, "p", 20000)
