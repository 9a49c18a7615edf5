"""The client side of a SASL login (sans-I/O): the tokens a client sends for PLAIN or
SCRAM-SHA-256/512, and the check of the server's final SCRAM signature. Used by
`raftsink users` / `quotas` (sink.kafka.admin), a follower's relay to the leader
(sink.kafka.forward) and the tests."""

from __future__ import annotations

from dataclasses import dataclass

from sink.security.sasl import PLAIN
from sink.security.scram import MECHANISMS, ScramClient, ScramError


@dataclass(frozen=True, slots=True)
class Login:
    """Who logs in, and how."""

    mechanism: str
    user: str
    password: str

    def __post_init__(self) -> None:
        if self.mechanism != PLAIN and self.mechanism not in MECHANISMS:
            raise ValueError(f"unknown SASL mechanism {self.mechanism!r}")


class LoginExchange:
    """step(None) -> first token; step(challenge) -> next token, or None when done.
    ScramError if the server's answer does not verify."""

    def __init__(self, login: Login, nonce: str | None = None) -> None:
        self.login = login
        self._scram = (
            ScramClient(login.mechanism, login.user, login.password, nonce)
            if login.mechanism != PLAIN
            else None
        )
        self._step = 0

    def step(self, challenge: bytes | None) -> bytes | None:
        self._step += 1
        if self._scram is None:
            if self._step == 1:
                return f"\0{self.login.user}\0{self.login.password}".encode()
            return None
        if self._step == 1:
            return self._scram.first()
        if self._step == 2:
            if challenge is None:
                raise ScramError("no server-first message")
            return self._scram.final(challenge)
        if challenge is None:
            raise ScramError("no server-final message")
        self._scram.verify(challenge)
        return None
