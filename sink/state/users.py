"""SASL users: their SCRAM credentials, replicated through the Raft log.

    ALTER_USERS  b"S" | JSON {"ops": [op, ...]}
      op  {"op": "upsert", "user": U, "mechanism": M, "salt": b64, "stored_key": b64,
           "server_key": b64, "iterations": N}
          {"op": "delete", "user": U, "mechanism": M}
          {"op": "bootstrap", ...upsert's fields}: an upsert applied only if (U, M)
          was never bootstrapped before (so a user from sasl.bootstrap_users is
          created once, and changing or deleting it later sticks across leader changes)

Only derived credentials travel and are kept (sink.security.scram): never a
password. Every op of an entry is checked when applied, in order; an op that is
refused (unknown mechanism, iterations out of range, deleting what does not
exist) gets its error and the others still apply, as AlterUserScramCredentials
answers per user. An entry that cannot be read is skipped and logged: never a
crashed node. The table is in the snapshot ("users").
"""

from __future__ import annotations

from collections.abc import Iterable

from kio.schema.errors import ErrorCode

from sink.security.scram import (
    MAX_ITERATIONS,
    MECHANISMS,
    MIN_ITERATIONS,
    ScramCredential,
)
from sink.security.user_ops import (
    Op,
    decode_alter_users,
    delete_op,
    encode_alter_users,
    upsert_op,
)

ALTER_USERS = 0x53  # "S"

__all__ = [
    "ALTER_USERS",
    "UserTable",
    "decode_alter_users",
    "delete_op",
    "encode_alter_users",
    "upsert_op",
]


class UserTable:
    """user -> mechanism -> ScramCredential; the (user, mechanism) pairs ever bootstrapped."""

    def __init__(self) -> None:
        self.users: dict[str, dict[str, ScramCredential]] = {}
        self.bootstrapped: set[tuple[str, str]] = set()

    def credential(self, user: str, mechanism: str) -> ScramCredential | None:
        return self.users.get(user, {}).get(mechanism)

    def describe(self) -> list[tuple[str, list[tuple[str, int]]]]:
        """[(user, [(mechanism, iterations)])] sorted: what DescribeUserScramCredentials says."""
        return [
            (u, sorted((m, c.iterations) for m, c in mechs.items()))
            for u, mechs in sorted(self.users.items())
        ]

    def apply(self, data: bytes) -> list[tuple[str, ErrorCode, str | None]]:
        """An ALTER_USERS entry -> (user, error, message) per op (ValueError if unreadable)."""
        return [self._apply_op(op) for op in decode_alter_users(data)]

    def _apply_op(self, op: Op) -> tuple[str, ErrorCode, str | None]:
        user = op.get("user")
        mech = op.get("mechanism")
        kind = op.get("op")
        if not isinstance(user, str) or not user:
            return "", ErrorCode.unacceptable_credential, "empty user name"
        if mech not in MECHANISMS:
            return user, ErrorCode.unsupported_sasl_mechanism, f"unknown mechanism {mech!r}"
        if kind == "delete":
            mechs = self.users.get(user, {})
            if mech not in mechs:
                return user, ErrorCode.resource_not_found, f"no {mech} credential for {user!r}"
            del mechs[mech]
            if not mechs:
                del self.users[user]
            return user, ErrorCode.none, None
        if kind not in ("upsert", "bootstrap"):
            return user, ErrorCode.invalid_request, f"unknown op {kind!r}"
        try:
            cred = ScramCredential.from_json(op)
        except (KeyError, ValueError, TypeError) as exc:
            return user, ErrorCode.unacceptable_credential, f"unreadable credential: {exc}"
        if not MIN_ITERATIONS <= cred.iterations <= MAX_ITERATIONS:
            return (
                user,
                ErrorCode.unacceptable_credential,
                f"iterations must be {MIN_ITERATIONS}..{MAX_ITERATIONS}",
            )
        if kind == "bootstrap":
            if (user, mech) in self.bootstrapped:
                return user, ErrorCode.none, "already bootstrapped"
            self.bootstrapped.add((user, mech))
        self.users.setdefault(user, {})[mech] = cred
        return user, ErrorCode.none, None

    def to_json(self) -> dict:
        return {
            "users": {
                u: {m: c.to_json() for m, c in mechs.items()} for u, mechs in self.users.items()
            },
            "bootstrapped": [list(p) for p in sorted(self.bootstrapped)],
        }

    @classmethod
    def from_json(cls, d: dict) -> UserTable:
        t = cls()
        for u, mechs in d.get("users", {}).items():
            t.users[u] = {m: ScramCredential.from_json(c) for m, c in mechs.items()}
        t.bootstrapped = {(u, m) for u, m in d.get("bootstrapped", ())}
        return t

    def names(self) -> Iterable[str]:
        return sorted(self.users)
