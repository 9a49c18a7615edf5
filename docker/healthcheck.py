"""Docker HEALTHCHECK of a raftsink node: exit 0 when its read API answers Status.

The address is RAFTSINK_HEALTHCHECK_ADDR, else the node's read API bind address from its
RAFTSINK_* environment (0.0.0.0 is asked on 127.0.0.1).
"""

import asyncio
import os
import sys


def address() -> str:
    addr = os.environ.get("RAFTSINK_HEALTHCHECK_ADDR")
    if addr:
        return addr
    from sink.config import load_config

    addr = load_config().listen("read_api")
    host, _, port = addr.rpartition(":")
    if host in ("0.0.0.0", "::", "[::]", ""):
        host = "127.0.0.1"
    return f"{host}:{port}"


async def check(addr: str) -> dict:
    from sink.readapi import ReadApiClient

    client = ReadApiClient(addr)
    try:
        return await client.status(timeout=3.0)
    finally:
        await client.close()


def main() -> int:
    try:
        addr = address()
        st = asyncio.run(check(addr))
    except Exception as exc:
        print(f"unhealthy: {type(exc).__name__}: {exc}")
        return 1
    print(f"ok: {addr} role={st.get('role')} term={st.get('term')} leader={st.get('leader')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
