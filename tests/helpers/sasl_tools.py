"""What the SASL/ACL client tests share: waiting for a condition, and a bare SASL login."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import TypeVar

from sink.kafka.sasl_login import LoginError, sasl_login
from sink.security.sasl_client import Login

T = TypeVar("T")


def until(check: Callable[[], T], timeout: float = 30.0, what: str = "") -> T:
    """check()'s first truthy value, polled every 0.1 s; AssertionError at the deadline."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value or time.monotonic() > deadline:
            assert value, f"timed out waiting for {what}"
            return value
        time.sleep(0.1)


async def can_login(addr: str, login: Login) -> bool:
    """Whether a fresh connection to addr (HOST:PORT) authenticates as login."""
    host, port = addr.rsplit(":", 1)
    try:
        reader, writer = await asyncio.open_connection(host, int(port))
    except OSError:
        return False
    try:
        await sasl_login(reader, writer, login)
        return True
    except (LoginError, OSError, asyncio.IncompleteReadError):
        return False
    finally:
        writer.close()
