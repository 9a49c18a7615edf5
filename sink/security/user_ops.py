"""The changes to SASL users as the log carries them (sink.state.users applies them):
plain dicts, built here so that the Kafka handlers and the CLI need nothing of
sink.state. Only derived credentials appear (sink.security.scram), never a password."""

from __future__ import annotations

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
