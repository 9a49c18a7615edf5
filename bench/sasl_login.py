"""What SASL costs (issue 15): deriving a SCRAM credential and checking a PLAIN password
(PBKDF2 at sasl.iterations), and a whole login (TCP connect, SaslHandshake,
SaslAuthenticate; SCRAM's client derivation included) against one node process.

    python -m bench.sasl_login [--logins 30] [--iterations 8192]

Prints one line per figure and a JSON object last. The per-request path after login
costs one gate check (sink.security.SaslSession.refusal) and is not measured here.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time

from sink.kafka.sasl_login import LoginError, sasl_login
from sink.process_cluster import SinkProcessCluster
from sink.security.sasl_client import Login
from sink.security.scram import make_credential, verify_password

USER = ("admin", "admin-secret")


def derivation(iterations: int) -> dict[str, float]:
    out = {}
    for mech in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
        t = time.perf_counter()
        cred = make_credential(mech, "pw", iterations)
        out[f"{mech}_derive_ms"] = (time.perf_counter() - t) * 1000
        t = time.perf_counter()
        for _ in range(20):
            verify_password(mech, cred, "pw")
        out[f"{mech}_plain_check_ms"] = (time.perf_counter() - t) / 20 * 1000
    return out


async def _login(host: str, port: int, login: Login) -> float:
    reader, writer = await asyncio.open_connection(host, port)
    try:
        t = time.perf_counter()
        await sasl_login(reader, writer, login)
        return time.perf_counter() - t
    finally:
        writer.close()


async def logins(host: str, port: int, n: int) -> dict[str, float]:
    deadline = time.monotonic() + 30
    while True:  # the bootstrap user is written by the leader shortly after start
        try:
            await _login(host, port, Login("PLAIN", *USER))
            break
        except (LoginError, OSError):
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.1)
    out = {}
    for mech in ("SCRAM-SHA-512", "SCRAM-SHA-256", "PLAIN"):
        ts = sorted([await _login(host, port, Login(mech, *USER)) for _ in range(n)])
        out[f"login_{mech}_median_ms"] = statistics.median(ts) * 1000
        out[f"login_{mech}_p90_ms"] = ts[int(0.9 * (n - 1))] * 1000
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--logins", type=int, default=30)
    ap.add_argument("--iterations", type=int, default=8192)
    args = ap.parse_args()
    result: dict[str, float] = derivation(args.iterations)
    c = SinkProcessCluster(
        tempfile.mkdtemp(prefix="sasl-bench-"),
        n=1,
        extra_args=[
            "--sasl-enabled",
            "--sasl-iterations",
            str(args.iterations),
            "--sasl-bootstrap-users",
            f"{USER[0]}:{USER[1]}",
        ],
    )
    c.start()
    try:
        asyncio.run(c.wait_ready())
        host, port = c.peers[1].kafka.rsplit(":", 1)
        result |= asyncio.run(logins(host, int(port), args.logins))
    finally:
        c.stop()
    for k, v in result.items():
        print(f"{k}: {v:.1f}")
    print(json.dumps({k: round(v, 2) for k, v in result.items()}))


if __name__ == "__main__":
    main()
