"""The `sasl` configuration section, and the bootstrap users it names."""

from __future__ import annotations

import os
from dataclasses import dataclass

from sink.security.sasl import ALL_MECHANISMS
from sink.security.scram import MAX_ITERATIONS, MIN_ITERATIONS


class SaslConfigError(ValueError):
    """A `sasl.*` setting is invalid (the message names the key)."""


@dataclass(frozen=True, slots=True)
class SaslOptions:
    enabled: bool = False
    """Every Kafka listener of the node requires SASL authentication (SASL_PLAINTEXT;
    SASL_SSL where the listener has TLS): before it a connection may send only
    ApiVersions, SaslHandshake and SaslAuthenticate. Users live in the log
    (`raftsink users`); a fresh cluster needs sasl.bootstrap_users(_file)."""
    mechanisms: str = "SCRAM-SHA-256,SCRAM-SHA-512,PLAIN"
    """Mechanisms offered, comma-separated: SCRAM-SHA-256, SCRAM-SHA-512, PLAIN. PLAIN
    is checked against the user's SCRAM credentials (no password is stored); it sends
    the password itself, so use it only over TLS."""
    session_lifetime_ms: int = 0
    """KIP-368: a session lasts this long (told to clients in SaslAuthenticate v1+, which
    re-authenticate before it ends); a connection past it that sends anything else is
    closed, as Kafka's connections.max.reauth.ms. 0: sessions never expire."""
    bootstrap_users: str = ""
    """Users created once, through the log, when a leader first finds them missing:
    `NAME:PASSWORD,...` (both SCRAM mechanisms; PLAIN works too). Prefer
    sasl.bootstrap_users_file or the RAFTSINK_SASL_BOOTSTRAP_USERS variable to a
    command line. A user changed or deleted later stays so."""
    bootstrap_users_file: str = ""
    """A file of bootstrap users, one `NAME:PASSWORD` a line (# comments); read at
    start-up, as sasl.bootstrap_users."""
    relay_user: str = ""
    """The bootstrap user a follower authenticates as when it relays a request to the
    leader (InitProducerId, Metadata with auto-creation, DescribeConfigs, AlterConfigs); empty: the first
    bootstrap user. Without one, relays fail and the client retries elsewhere."""
    iterations: int = 8192
    """SCRAM iterations of the bootstrap users' credentials (4096..16384)."""

    def __post_init__(self) -> None:
        for m in self.mechanism_list():
            if m not in ALL_MECHANISMS:
                raise SaslConfigError(
                    f"sasl.mechanisms: unknown mechanism {m!r} (known: {', '.join(ALL_MECHANISMS)})"
                )
        if self.enabled and not self.mechanism_list():
            raise SaslConfigError("sasl.mechanisms must name a mechanism when sasl.enabled")
        if self.session_lifetime_ms < 0:
            raise SaslConfigError(
                f"sasl.session_lifetime_ms must be >= 0, got {self.session_lifetime_ms}"
            )
        if not MIN_ITERATIONS <= self.iterations <= MAX_ITERATIONS:
            raise SaslConfigError(
                f"sasl.iterations must be {MIN_ITERATIONS}..{MAX_ITERATIONS}, got {self.iterations}"
            )
        for item in filter(None, (s.strip() for s in self.bootstrap_users.split(","))):
            _pair("sasl.bootstrap_users", item)

    def mechanism_list(self) -> tuple[str, ...]:
        return tuple(m.strip().upper() for m in self.mechanisms.split(",") if m.strip())

    def users(self) -> list[tuple[str, str]]:
        """The bootstrap users [(name, password)]: the setting, then the file."""
        out = [
            _pair("sasl.bootstrap_users", item)
            for item in (s.strip() for s in self.bootstrap_users.split(","))
            if item
        ]
        if self.bootstrap_users_file:
            try:
                with open(self.bootstrap_users_file, encoding="utf-8") as f:
                    lines = f.read().splitlines()
            except OSError as exc:
                raise SaslConfigError(f"sasl.bootstrap_users_file: {exc}") from None
            for n, line in enumerate(lines, 1):
                line = line.strip()
                if line and not line.startswith("#"):
                    out.append(_pair(f"sasl.bootstrap_users_file line {n}", line))
        return out

    def relay_login(self) -> tuple[str, str] | None:
        """(user, password) a follower relays with, or None."""
        users = self.users()
        if self.relay_user:
            for name, password in users:
                if name == self.relay_user:
                    return name, password
            raise SaslConfigError(f"sasl.relay_user {self.relay_user!r} is no bootstrap user")
        return users[0] if users else None


def _pair(where: str, item: str) -> tuple[str, str]:
    name, sep, password = item.partition(":")
    if not sep or not name or not password:
        raise SaslConfigError(f"{where}: expected NAME:PASSWORD, got {item.split(':')[0]!r}:...")
    return name, password


def fake_key() -> bytes:
    """A per-process secret for unknown users' fake SCRAM salts (sink.security.scram)."""
    return os.urandom(32)
