"""Settings for every test session.

Hypothesis: no per-example deadline. Its default (200 ms) fails a correct test when a
loaded CI machine stalls one example, and CI may not depend on timing luck; what the
property tests check is behaviour, and their wall time is bounded by their example count.
"""

from __future__ import annotations

import os

import pytest

# gRPC core's fork support off in the test processes (read once, before anything here
# imports grpc). With it on, a fork from a pytest worker whose earlier tests left gRPC
# threads running ran gRPC's fork handlers half-way ("Other threads are currently
# calling into gRPC, skipping fork() handlers", then "epoll_wait error: Bad file
# descriptor"), and the JVM pyspark forks for its gateway exited before it started
# (JAVA_GATEWAY_EXITED, twice in CI, sessions 24 and 25). No process a test starts
# uses gRPC across a fork: they exec a new program.
os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")

try:
    from hypothesis import settings
except ImportError:  # the tests that use it import it and say so
    pass
else:
    settings.register_profile("raftsink", deadline=None)
    settings.load_profile("raftsink")

pytest_plugins = ("tests.helpers.tls_certs",)
"""Fixtures shared by test modules: `certs` (a module's throw-away TLS certificates)."""


# `./run.sh test` runs the suite in two phases: everything not marked `serial` on two
# pytest-xdist workers (whole modules per worker: a module's cluster fixture is built once),
# then the `serial` tests alone. A test is serial when a second worker beside it would make
# it wrong, not merely slower: fixed ports, or a check of rates and budgets that a busy
# second core distorts.
SERIAL = {
    "tests/containers/": "containers publish fixed ports on 127.0.0.1",
    "tests/install/": "fresh virtualenvs and images: the heaviest pip and Docker work",
    "tests/integration/test_chaos_short.py": "the campaign's liveness windows assume the machine",
    "tests/integration/test_client_quotas.py": "throughput ratios and a consumer's p99",
    "tests/integration/test_disk_full.py": "a resume-time bound",
    "tests/integration/test_overload_memory.py": "a memory budget and a throughput floor",
    "tests/integration/test_quiescence_processes.py": "heartbeat rates per second",
    "tests/integration/test_topic_retention.py": "disk use under a steady load",
}


def pytest_collection_modifyitems(config, items) -> None:
    for item in items:
        path = item.nodeid.split("::", 1)[0]
        if any(path.startswith(prefix) for prefix in SERIAL):
            item.add_marker(pytest.mark.serial)
