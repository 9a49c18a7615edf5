"""The changes to SASL users as the log carries them (sink.state.users applies them):
plain dicts, built here, and the ALTER_USERS entry's encoding (the format is
documented in sink.state.users), so that the Kafka handlers, the CLI and the user
service need nothing of sink.state. Only derived credentials appear (sink.security.scram), never a password."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from sink.security.scram import ScramCredential

Op = dict[str, Any]


def upsert_op(user: str, mechanism: str, cred: ScramCredential, bootstrap: bool = False) -> Op:
    """Set the user's credential for mechanism; bootstrap: only if the user was never
    bootstrapped before (sasl.bootstrap_users)."""
    op: Op = {"op": "bootstrap" if bootstrap else "upsert", "user": user, "mechanism": mechanism}
    return op | cred.to_json()


def delete_op(user: str, mechanism: str) -> Op:
    return {"op": "delete", "user": user, "mechanism": mechanism}


def encode_alter_users(ops: Sequence[Op]) -> bytes:
    return b"S" + json.dumps({"ops": list(ops)}, separators=(",", ":")).encode()


def decode_alter_users(data: bytes) -> list[Op]:
    if data[:1] != b"S":
        raise ValueError("not an ALTER_USERS entry")
    ops = json.loads(data[1:])["ops"]
    if not isinstance(ops, list) or not all(isinstance(o, dict) for o in ops):
        raise ValueError("ALTER_USERS: ops must be a list of objects")
    return ops
