"""SASL users over Kafka's own admin APIs (DescribeUserScramCredentials /
AlterUserScramCredentials, KIP-554), with sink.kafka.admin's one-request
connections: what `raftsink users` speaks. The client salts: an upsertion sends
salt, iterations and the SaltedPassword, never the password."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Sequence
from typing import Any

from kio.schema.alter_user_scram_credentials.v0.request import AlterUserScramCredentialsRequest
from kio.schema.describe_user_scram_credentials.v0.request import (
    DescribeUserScramCredentialsRequest,
)

from sink.kafka.admin import AdminError, find_controller, request
from sink.kafka.protocol.errors import ErrorCode
from sink.security.scram import MECHANISM_TYPES, salted_password

_NAMES = {v: k for k, v in MECHANISM_TYPES.items()}


async def describe_users(
    bootstrap: Sequence[tuple[str, int]], users: Sequence[str] = (), login: Any = None
) -> list[tuple[str, ErrorCode, str | None, list[tuple[str, int]]]]:
    """[(user, error, message, [(mechanism, iterations)])] as the controller has them."""
    addr = await find_controller(bootstrap, login)
    resp = await request(
        addr,
        DescribeUserScramCredentialsRequest.__api_key__,
        0,
        {"users": [{"name": u} for u in users] or None},
        login=login,
    )
    if resp.error_code != ErrorCode.none:
        raise AdminError(f"{resp.error_code.name.upper()}: {resp.error_message}")
    return [
        (
            r.user,
            r.error_code,
            r.error_message,
            [
                (_NAMES.get(int(c.mechanism), str(c.mechanism)), int(c.iterations))
                for c in r.credential_infos
            ],
        )
        for r in resp.results
    ]


def upsertion(user: str, mechanism: str, password: str, iterations: int) -> dict:
    salt = os.urandom(32)
    return {
        "name": user,
        "mechanism": MECHANISM_TYPES[mechanism],
        "iterations": iterations,
        "salt": salt,
        "salted_password": salted_password(mechanism, password, salt, iterations),
    }


async def alter_users(
    bootstrap: Sequence[tuple[str, int]],
    deletions: Sequence[tuple[str, str]] = (),
    upsertions: Sequence[dict] = (),
    login: Any = None,
    attempts: int = 5,
) -> list[tuple[str, ErrorCode, str | None]]:
    """Delete (user, mechanism) pairs and apply upsertion() dicts through the
    controller; (user, error, message) per user."""
    values = {
        "deletions": [{"name": u, "mechanism": MECHANISM_TYPES[m]} for u, m in deletions],
        "upsertions": list(upsertions),
    }
    for attempt in range(attempts):
        addr = await find_controller(bootstrap, login)
        resp = await request(
            addr, AlterUserScramCredentialsRequest.__api_key__, 0, values, login=login
        )
        out = [(r.user, r.error_code, r.error_message) for r in resp.results]
        if all(code != ErrorCode.not_controller for _, code, _ in out) or attempt == attempts - 1:
            return out
        await asyncio.sleep(0.2 * (attempt + 1))  # leadership moved: look it up again
    raise AssertionError("unreachable")
