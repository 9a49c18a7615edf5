"""One connection's SASL state (sans-I/O): which requests it may send, the handshake,
the authentication exchange, the principal, and the session's end (KIP-368).

A listener that requires SASL gives each connection a SaslSession; the connection
state machine asks refusal(api_key) before every request is dispatched
(sink.kafka.protocol.connection), and the SaslHandshake / SaslAuthenticate
handlers drive handshake() / authenticate(). Nothing here does I/O or imports
the Kafka server, so every path is testable without sockets.

States, as Kafka's SaslServerAuthenticator has them:

    HANDSHAKE     nothing chosen: ApiVersions and SaslHandshake only
    AUTHENTICATE  a mechanism chosen: SaslAuthenticate (v1+ handshake), or raw
                  tokens (v0 handshake: length-prefixed SASL bytes, no header)
    DONE          authenticated: everything; a new SaslHandshake starts a
                  re-authentication (KIP-368) of the same principal
    FAILED        authentication failed: the error is answered, then the
                  connection is closed (as Kafka does)

Any other request before DONE closes the connection (Kafka throws
IllegalSaslStateException: "Unexpected Kafka request of type X during SASL
handshake"). Past its session lifetime (sasl.session_lifetime_ms, told to the
client in SaslAuthenticate v1+) a connection may only re-authenticate; any other
request closes it, as Kafka closes expired sessions (KIP-368). A v0 client cannot
re-authenticate, so its session has no expiry (Kafka does the same).
"""

from __future__ import annotations

import enum
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from sink.security.scram import MECHANISMS, ScramCredential, ScramError, ScramServer
from sink.security.scram import verify_password as scram_verify

PLAIN = "PLAIN"
ALL_MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512", PLAIN)

API_VERSIONS = 18
SASL_HANDSHAKE = 17
SASL_AUTHENTICATE = 36

CredentialLookup = Callable[[str, str], ScramCredential | None]
"""(user, SCRAM mechanism) -> the user's stored credential, or None."""


class Phase(enum.Enum):
    HANDSHAKE = "handshake"
    AUTHENTICATE = "authenticate"
    DONE = "done"
    FAILED = "failed"


@dataclass(frozen=True, slots=True)
class SaslPolicy:
    """What a listener that requires SASL accepts (from the `sasl` section)."""

    mechanisms: tuple[str, ...]
    session_lifetime_ms: int = 0
    """0: sessions never expire (no re-authentication asked)."""
    fake_key: bytes = b"raftsink"
    """Node secret for the fake credential of unknown users (sink.security.scram)."""


@dataclass(frozen=True, slots=True)
class AuthStep:
    """One SaslAuthenticate answer: error (none: go on or done), message, challenge."""

    error: ErrorCode
    message: str | None
    challenge: bytes
    session_lifetime_ms: int = 0


def _failed_message(mechanism: str) -> str:
    # Kafka's text: clients show it, and it names no user (no user enumeration).
    return (
        "Authentication failed during authentication due to invalid credentials with "
        f"SASL mechanism {mechanism}"
    )


class SaslSession:
    """The SASL state of one connection (see the module docstring for the states)."""

    def __init__(
        self,
        policy: SaslPolicy,
        lookup: CredentialLookup,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.policy = policy
        self._lookup = lookup
        self._clock = clock
        self.phase = Phase.HANDSHAKE
        self.mechanism: str | None = None
        self.raw_tokens = False
        """v0 handshake: the next frames are raw SASL tokens, not Kafka requests."""
        self.principal: str | None = None
        """"User:<name>" once authenticated (kept through re-authentication)."""
        self.expires_at: float | None = None
        self._scram: ScramServer | None = None
        self._v0 = False
        self.failure: str | None = None

    @property
    def failed(self) -> bool:
        return self.phase is Phase.FAILED

    @property
    def authenticated(self) -> bool:
        return self.principal is not None

    def expired(self) -> bool:
        return self.expires_at is not None and self._clock() >= self.expires_at

    # ------------------------------------------------------------ the gate

    def refusal(self, api_key: int) -> str | None:
        """Why this request may not be served now (the connection closes), or None."""
        if self.phase is Phase.FAILED:
            return f"authentication failed: {self.failure}"
        if api_key == API_VERSIONS:
            return None
        if api_key == SASL_HANDSHAKE:
            if self.phase is Phase.AUTHENTICATE:
                return "SaslHandshake during an authentication exchange"
            return None
        if api_key == SASL_AUTHENTICATE:
            if self.phase is not Phase.AUTHENTICATE or self.raw_tokens:
                return "SaslAuthenticate without a SaslHandshake v1+ first"
            return None
        if not self.authenticated:
            return "a request before SASL authentication"
        if self.phase is Phase.AUTHENTICATE:
            return "a request during SASL re-authentication"
        if self.expired():
            return "SASL session expired (sasl.session_lifetime_ms) without re-authentication"
        return None

    # ----------------------------------------------------------- handshake

    def handshake(self, mechanism: str, version: int) -> ErrorCode:
        """SaslHandshake: choose the mechanism (UNSUPPORTED_SASL_MECHANISM if not
        enabled; the answer lists the enabled ones either way)."""
        if mechanism not in self.policy.mechanisms:
            # Kafka answers, then closes the connection.
            self._fail(f"mechanism {mechanism[:64]!r} is not enabled")
            return ErrorCode.unsupported_sasl_mechanism
        if self.authenticated and (version == 0 or mechanism != self.mechanism):
            # KIP-368: re-authentication keeps the mechanism (Kafka refuses a change).
            self._fail("re-authentication must use the same mechanism")
            return ErrorCode.illegal_sasl_state
        self.mechanism = mechanism
        self.phase = Phase.AUTHENTICATE
        self.raw_tokens = version == 0
        self._v0 = version == 0
        self._scram = None
        return ErrorCode.none

    @property
    def enabled(self) -> Sequence[str]:
        return self.policy.mechanisms

    # ------------------------------------------------------ authentication

    def authenticate(self, token: bytes, version: int = 1) -> AuthStep:
        """One client token (SaslAuthenticate's auth_bytes, or a raw v0 token)."""
        mech = self.mechanism
        if self.phase is not Phase.AUTHENTICATE or mech is None:
            self._fail("no SASL handshake")
            return AuthStep(ErrorCode.illegal_sasl_state, "no SaslHandshake before", b"")
        try:
            if mech == PLAIN:
                user = self._plain(token)
                return self._success(user, b"", version)
            if self._scram is None:
                self._scram = ScramServer(
                    mech, lambda u: self._lookup(u, mech), fake_key=self.policy.fake_key
                )
                return AuthStep(ErrorCode.none, None, self._scram.first(token))
            final = self._scram.final(token)
            assert self._scram.user is not None
            return self._success(self._scram.user, final, version)
        except ScramError as exc:
            why = str(exc)
            self._fail(why)
            if why == "invalid credentials":
                return AuthStep(ErrorCode.sasl_authentication_failed, _failed_message(mech), b"")
            return AuthStep(
                ErrorCode.sasl_authentication_failed, f"Authentication failed: {why}", b""
            )

    def _plain(self, token: bytes) -> str:
        """PLAIN (RFC 4616): authzid NUL authcid NUL passwd, checked against the user's
        SCRAM credentials (no plaintext password is ever stored)."""
        parts = token.split(b"\0")
        if len(parts) != 3:
            raise ScramError("malformed PLAIN message")
        try:
            authzid, user, password = (p.decode("utf-8") for p in parts)
        except UnicodeDecodeError:
            raise ScramError("PLAIN message is not UTF-8") from None
        if not user or not password:
            raise ScramError("PLAIN message without a user or password")
        if authzid and authzid != user:
            raise ScramError("authorization id must be the user itself")
        for mech in sorted(MECHANISMS, reverse=True):  # SHA-512 first
            cred = self._lookup(user, mech)
            if cred is not None:
                if scram_verify(mech, cred, password):
                    return user
                break
        raise ScramError("invalid credentials")

    def _success(self, user: str, challenge: bytes, version: int) -> AuthStep:
        principal = f"User:{user}"
        if self.principal is not None and principal != self.principal:
            self._fail("re-authentication must keep the principal")
            return AuthStep(
                ErrorCode.sasl_authentication_failed,
                "Cannot change principals during re-authentication",
                b"",
            )
        self.principal = principal
        self.phase = Phase.DONE
        self.raw_tokens = False
        lifetime = self.policy.session_lifetime_ms if version >= 1 and not self._v0 else 0
        self.expires_at = self._clock() + lifetime / 1000 if lifetime > 0 else None
        return AuthStep(ErrorCode.none, None, challenge, lifetime)

    def _fail(self, why: str) -> None:
        self.phase = Phase.FAILED
        self.raw_tokens = False
        self.failure = why
