"""Docker HEALTHCHECK of a raftsink node: exit 0 when its read API answers Status.

The address is RAFTSINK_HEALTHCHECK_ADDR, else the node's read API bind address from its
RAFTSINK_* environment (0.0.0.0 is asked on 127.0.0.1). When the read API is TLS
(`tls.read_api`, the secure compose file) the check dials it with the node's own
certificate as the client's (it is of the cluster CA, for client use too, and names
127.0.0.1: scripts/make-certs.sh).
"""

import asyncio
import os
import sys


def address_and_credentials() -> tuple[str, object]:
    """(the read API address to ask, gRPC channel credentials or None for plaintext)."""
    from sink.config import load_config

    config = load_config()
    credentials = None
    if config.tls.read_api:
        from sink.readapi.client import tls_credentials

        tls = config.tls
        credentials = tls_credentials(tls.ca_file, tls.cert_file, tls.key_file)
    addr = os.environ.get("RAFTSINK_HEALTHCHECK_ADDR")
    if addr:
        return addr, credentials
    addr = config.listen("read_api")
    host, _, port = addr.rpartition(":")
    if host in ("0.0.0.0", "::", "[::]", ""):
        host = "127.0.0.1"
    return f"{host}:{port}", credentials


async def check(addr: str, credentials: object) -> dict:
    from sink.readapi import ReadApiClient

    client = ReadApiClient(addr, credentials=credentials)
    try:
        return await client.status(timeout=3.0)
    finally:
        await client.close()


def main() -> int:
    try:
        addr, credentials = address_and_credentials()
        st = asyncio.run(check(addr, credentials))
    except Exception as exc:
        print(f"unhealthy: {type(exc).__name__}: {exc}")
        return 1
    print(f"ok: {addr} role={st.get('role')} term={st.get('term')} leader={st.get('leader')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
