"""SCRAM-SHA-256 / SCRAM-SHA-512 (RFC 5802, RFC 7677), sans-I/O: credentials, the
server's exchange and a client (for `raftsink users`, the relay and tests).

What is stored (ScramCredential) is what RFC 5802 lets a server keep: salt,
iteration count, StoredKey = H(ClientKey) and ServerKey. The password and the
SaltedPassword are never kept; a stolen credential cannot log in (StoredKey is a
hash of the key that signs the proof) but can be brute-forced offline, which the
iteration count (>= 4096, RFC 7677) makes expensive.

The exchange, as Kafka's ScramSaslServer runs it:

    client-first  gs2-header "n,," (or "n,a=<authzid>,"), "n=<user>,r=<client nonce>"
    server-first  "r=<client nonce><server nonce>,s=<base64 salt>,i=<iterations>"
    client-final  "c=<base64 gs2-header>,r=<nonce>,p=<base64 ClientProof>"
    server-final  "v=<base64 ServerSignature>"

Checks: channel binding is refused ("p="; "y" is accepted: the client could bind
but thinks we cannot), an authzid must name the user itself, the client-final's
nonce must end with the combined nonce (Kafka's check: librdkafka 2.0.2 repeats
the client nonce) and its c= the client's own gs2-header,
the proof must verify. An unknown user is run through the exchange with a fake,
stable credential and fails at the proof with the same error as a wrong password,
so an attacker cannot list users (Kafka fails an unknown user at client-first).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import secrets
from dataclasses import dataclass

MECHANISMS: dict[str, str] = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}
"""Kafka's mechanism name -> hashlib name."""
MECHANISM_TYPES: dict[str, int] = {"SCRAM-SHA-256": 1, "SCRAM-SHA-512": 2}
"""Kafka's ScramMechanism enum (DescribeUserScramCredentials / Alter...): 0 is UNKNOWN."""
MIN_ITERATIONS = 4096  # RFC 7677 and Kafka's lower bound
MAX_ITERATIONS = 16384  # Kafka's upper bound (ScramMechanism.maxIterations)
DEFAULT_ITERATIONS = 8192


class ScramError(Exception):
    """The exchange failed; str() is what the client is told."""


@dataclass(frozen=True, slots=True)
class ScramCredential:
    """One user's credential for one mechanism: nothing that logs in by itself."""

    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int

    def to_json(self) -> dict:
        b64 = base64.b64encode
        return {
            "salt": b64(self.salt).decode(),
            "stored_key": b64(self.stored_key).decode(),
            "server_key": b64(self.server_key).decode(),
            "iterations": self.iterations,
        }

    @classmethod
    def from_json(cls, d: dict) -> ScramCredential:
        dec = base64.b64decode
        return cls(dec(d["salt"]), dec(d["stored_key"]), dec(d["server_key"]), int(d["iterations"]))


def _hmac(hash_name: str, key: bytes, msg: bytes) -> bytes:
    return hmac.new(key, msg, hash_name).digest()


def salted_password(mechanism: str, password: str, salt: bytes, iterations: int) -> bytes:
    """Hi(Normalize(password), salt, i) (PBKDF2-HMAC). SASLprep is not applied: ASCII
    passwords are unchanged by it, and Kafka's clients do not apply it either."""
    return hashlib.pbkdf2_hmac(MECHANISMS[mechanism], password.encode(), salt, iterations)


def credential_from_salted(
    mechanism: str, salted: bytes, salt: bytes, iterations: int
) -> ScramCredential:
    """The stored credential of a SaltedPassword (what AlterUserScramCredentials sends)."""
    h = MECHANISMS[mechanism]
    client_key = _hmac(h, salted, b"Client Key")
    stored_key = hashlib.new(h, client_key).digest()
    server_key = _hmac(h, salted, b"Server Key")
    return ScramCredential(salt, stored_key, server_key, iterations)


def make_credential(
    mechanism: str, password: str, iterations: int = DEFAULT_ITERATIONS, salt: bytes | None = None
) -> ScramCredential:
    check_iterations(iterations)
    salt = salt if salt is not None else os.urandom(32)
    return credential_from_salted(
        mechanism, salted_password(mechanism, password, salt, iterations), salt, iterations
    )


def check_iterations(iterations: int) -> None:
    if not MIN_ITERATIONS <= iterations <= MAX_ITERATIONS:
        raise ScramError(f"iterations must be {MIN_ITERATIONS}..{MAX_ITERATIONS}, got {iterations}")


def verify_password(mechanism: str, credential: ScramCredential, password: str) -> bool:
    """Does password match the credential? (SASL/PLAIN checked against SCRAM credentials.)"""
    derived = credential_from_salted(
        mechanism,
        salted_password(mechanism, password, credential.salt, credential.iterations),
        credential.salt,
        credential.iterations,
    )
    return hmac.compare_digest(derived.stored_key, credential.stored_key)


def _attrs(msg: str) -> list[tuple[str, str]]:
    out = []
    for part in msg.split(","):
        if len(part) < 2 or part[1] != "=":
            raise ScramError(f"malformed SCRAM attribute {part[:32]!r}")
        out.append((part[0], part[2:]))
    return out


def _unescape(name: str) -> str:
    """saslname: "=2C" is ",", "=3D" is "="; any other "=" is malformed (RFC 5802 5.1)."""
    out, i = [], 0
    while i < len(name):
        if name[i] == "=":
            esc = name[i : i + 3]
            if esc not in ("=2C", "=3D"):
                raise ScramError("malformed user name escape")
            out.append("," if esc == "=2C" else "=")
            i += 3
        else:
            out.append(name[i])
            i += 1
    return "".join(out)


def escape(name: str) -> str:
    return name.replace("=", "=3D").replace(",", "=2C")


def _valid_nonce(nonce: str) -> bool:
    # printable ASCII except "," (RFC 5802 7)
    return bool(nonce) and all(0x21 <= ord(c) <= 0x7E and c != "," for c in nonce)


class ScramServer:
    """One server-side exchange. lookup(user) -> the user's credential for this
    mechanism, or None. fake_key: a node secret for unknown users' fake credential."""

    def __init__(
        self,
        mechanism: str,
        lookup,
        *,
        fake_key: bytes,
        nonce: str | None = None,
    ) -> None:
        self.mechanism = mechanism
        self._hash = MECHANISMS[mechanism]
        self._lookup = lookup
        self._fake_key = fake_key
        # Alphanumeric, as Kafka's: librdkafka rejects a server nonce with "=" in it.
        self._server_nonce = nonce or secrets.token_hex(24)
        self.user: str | None = None
        self._cred: ScramCredential | None = None
        self._known = False
        self._gs2 = ""
        self._first_bare = ""
        self._server_first = ""
        self._nonce = ""
        self.done = False

    def _fake(self, user: str) -> ScramCredential:
        """A stable credential no password matches (the same user gets the same salt)."""
        seed = _hmac(self._hash, self._fake_key, user.encode())
        return ScramCredential(seed[:16], os.urandom(len(seed)), b"", DEFAULT_ITERATIONS)

    def first(self, data: bytes) -> bytes:
        """client-first -> server-first (ScramError if malformed)."""
        try:
            msg = data.decode("utf-8")
        except UnicodeDecodeError:
            raise ScramError("client-first message is not UTF-8") from None
        parts = msg.split(",", 2)
        if len(parts) != 3:
            raise ScramError("malformed client-first message")
        cbind, authzid, bare = parts
        if cbind == "p" or cbind.startswith("p="):
            raise ScramError("channel binding is not supported")
        if cbind not in ("n", "y"):
            raise ScramError("malformed gs2 header")
        if authzid and not authzid.startswith("a="):
            raise ScramError("malformed authzid")
        attrs = _attrs(bare)
        if attrs[0][0] == "m":
            raise ScramError("mandatory extension not supported")
        if len(attrs) < 2 or attrs[0][0] != "n" or attrs[1][0] != "r":
            raise ScramError("client-first message must start with n=<user>,r=<nonce>")
        for key, _ in attrs[2:]:
            if not key.isalpha():  # extensions (Kafka's tokenauth) are ignored
                raise ScramError("malformed extension")
        user = _unescape(attrs[0][1])
        if not user:
            raise ScramError("empty user name")
        if authzid and _unescape(authzid[2:]) != user:
            raise ScramError("authorization id must be the user itself")
        cnonce = attrs[1][1]
        if not _valid_nonce(cnonce):
            raise ScramError("malformed client nonce")
        cred = self._lookup(user)
        self._known = cred is not None
        self._cred = cred if cred is not None else self._fake(user)
        self.user = user
        self._gs2 = f"{cbind},{authzid},"
        self._first_bare = bare
        self._nonce = cnonce + self._server_nonce
        salt = base64.b64encode(self._cred.salt).decode()
        self._server_first = f"r={self._nonce},s={salt},i={self._cred.iterations}"
        return self._server_first.encode()

    def final(self, data: bytes) -> bytes:
        """client-final -> server-final; ScramError if malformed or the proof fails."""
        if self._cred is None or self.done:
            raise ScramError("client-final message out of order")
        try:
            msg = data.decode("utf-8")
        except UnicodeDecodeError:
            raise ScramError("client-final message is not UTF-8") from None
        attrs = _attrs(msg)
        if len(attrs) < 3 or attrs[0][0] != "c" or attrs[1][0] != "r" or attrs[-1][0] != "p":
            raise ScramError("client-final message must be c=...,r=...,p=...")
        try:
            cbind = base64.b64decode(attrs[0][1], validate=True).decode()
            proof = base64.b64decode(attrs[-1][1], validate=True)
        except (ValueError, UnicodeDecodeError):
            raise ScramError("malformed base64 in client-final message") from None
        if cbind != self._gs2:
            raise ScramError("channel binding data does not match the gs2 header")
        # Kafka checks that the nonce ENDS with the combined nonce (endsWith), and
        # librdkafka 2.0.2 (Debian's kcat) sends the client nonce twice: accept it too.
        # The server nonce, the part that makes the exchange fresh, must be there.
        if not attrs[1][1].endswith(self._nonce):
            raise ScramError("nonce mismatch")
        without_proof = msg[: msg.rindex(",p=")]
        auth_message = f"{self._first_bare},{self._server_first},{without_proof}".encode()
        cred = self._cred
        client_sig = _hmac(self._hash, cred.stored_key, auth_message)
        if len(proof) != len(client_sig):
            raise ScramError("invalid credentials")
        client_key = bytes(a ^ b for a, b in zip(proof, client_sig, strict=True))
        stored = hashlib.new(self._hash, client_key).digest()
        if not self._known or not hmac.compare_digest(stored, cred.stored_key):
            raise ScramError("invalid credentials")
        self.done = True
        server_sig = _hmac(self._hash, cred.server_key, auth_message)
        return b"v=" + base64.b64encode(server_sig)


class ScramClient:
    """The client side: first() -> client-first; final(server_first) -> client-final;
    verify(server_final) checks the server's signature (ScramError if wrong)."""

    def __init__(self, mechanism: str, user: str, password: str, nonce: str | None = None) -> None:
        self.mechanism = mechanism
        self._hash = MECHANISMS[mechanism]
        self.user = user
        self.password = password
        self._nonce = nonce or base64.b64encode(os.urandom(24)).decode()
        self._first_bare = f"n={escape(user)},r={self._nonce}"
        self._server_sig = b""

    def first(self) -> bytes:
        return f"n,,{self._first_bare}".encode()

    def final(self, server_first: bytes) -> bytes:
        attrs = dict(_attrs(server_first.decode()))
        nonce, salt, iterations = attrs["r"], base64.b64decode(attrs["s"]), int(attrs["i"])
        if not nonce.startswith(self._nonce) or len(nonce) == len(self._nonce):
            raise ScramError("server nonce does not extend the client nonce")
        if iterations < MIN_ITERATIONS:
            raise ScramError(f"server asks for {iterations} iterations (< {MIN_ITERATIONS})")
        salted = salted_password(self.mechanism, self.password, salt, iterations)
        without_proof = f"c=biws,r={nonce}"
        auth_message = f"{self._first_bare},{server_first.decode()},{without_proof}".encode()
        client_key = _hmac(self._hash, salted, b"Client Key")
        stored_key = hashlib.new(self._hash, client_key).digest()
        client_sig = _hmac(self._hash, stored_key, auth_message)
        proof = bytes(a ^ b for a, b in zip(client_key, client_sig, strict=True))
        server_key = _hmac(self._hash, salted, b"Server Key")
        self._server_sig = _hmac(self._hash, server_key, auth_message)
        return f"{without_proof},p={base64.b64encode(proof).decode()}".encode()

    def verify(self, server_final: bytes) -> None:
        if not hmac.compare_digest(server_final, b"v=" + base64.b64encode(self._server_sig)):
            raise ScramError("server signature does not verify")
