"""Fixtures of the container tests: a Docker engine, the project's image, a 3-node cluster.

- No engine: with CI set the tests FAIL (after trying `docker/setup.sh engine`); locally
  they skip with the reason.
- The image is (re)built by `docker/setup.sh image` (about 0.1 s when nothing changed);
  RAFTSINK_TEST_IMAGE=TAG uses a prebuilt image instead.
- SIGTERM is turned into KeyboardInterrupt so that a terminated run still tears its
  containers down (docker/setup.sh sweeps what a SIGKILLed run leaves).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time

# Before testcontainers is imported anywhere: Ryuk cannot be pulled here, and /.dockerenv
# exists on these machines, which would make testcontainers talk to a gateway IP.
os.environ.setdefault("TESTCONTAINERS_RYUK_DISABLED", "true")
os.environ.setdefault("TESTCONTAINERS_CONNECTION_MODE", "docker_host")

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SETUP = os.path.join(ROOT, "docker", "setup.sh")


def _sigterm_to_keyboard_interrupt(signum, frame):
    raise KeyboardInterrupt(f"signal {signum}")


if signal.getsignal(signal.SIGTERM) in (signal.SIG_DFL, None):
    signal.signal(signal.SIGTERM, _sigterm_to_keyboard_interrupt)


def _engine_error() -> str | None:
    try:
        import docker
    except ImportError as exc:
        return f"docker (docker-py) is not installed: {exc}"
    try:
        client = docker.from_env(timeout=10)
        try:
            client.ping()
        finally:
            client.close()
    except Exception as exc:
        return f"no Docker engine answers: {type(exc).__name__}: {exc}"
    return None


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    setattr(item, f"rep_{rep.when}", rep)


@pytest.fixture(scope="session")
def docker_engine() -> None:
    err = _engine_error()
    if err and os.environ.get("CI"):
        # CI must run these tests: try to bring an engine up, then fail loudly if still none.
        proc = subprocess.run(["bash", SETUP, "engine"], capture_output=True, text=True)
        sys.stderr.write(proc.stderr)
        err = _engine_error()
        if err:
            pytest.fail(f"CI is set and {err} (docker/setup.sh engine: rc={proc.returncode})")
    if err:
        pytest.skip(f"{err}; run docker/setup.sh (as root on Debian it starts one)")


@pytest.fixture(scope="session")
def raftsink_image(docker_engine) -> str:
    prebuilt = os.environ.get("RAFTSINK_TEST_IMAGE")
    if prebuilt:
        return prebuilt
    t0 = time.monotonic()
    proc = subprocess.run(["bash", SETUP, "image"], capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.fail(f"building the image failed:\n{proc.stderr[-4000:]}")
    print(f"image raftsink:dev ready in {time.monotonic() - t0:.1f} s")
    return os.environ.get("RAFTSINK_IMAGE", "raftsink:dev")


@pytest.fixture(scope="session")
def client_image(raftsink_image) -> str:
    """The node image plus confluent-kafka, for clients inside the cluster's network (the
    node image has the server's base install only); `docker/setup.sh image` builds both."""
    return os.environ.get("RAFTSINK_CLIENT_IMAGE", "raftsink-client:dev")


@contextlib.contextmanager
def _started_cluster(request, image: str, **options):
    """A started 3-node ContainerCluster with an elected leader, torn down afterwards (logs
    of every node printed when starting or the test failed)."""
    from tests.containers.container_cluster import ContainerCluster

    t0 = time.monotonic()
    with contextlib.ExitStack() as stack:
        cluster = ContainerCluster(stack, image, **options)
        try:
            cluster.start()
            leader = cluster.wait_leader(timeout=60)
        except BaseException:
            for i in cluster.nodes:
                sys.stderr.write(f"--- node {i} log tail ---\n{cluster.logs(i)}\n")
            raise
        print(f"cluster ready in {time.monotonic() - t0:.1f} s, leader node {leader}")
        yield cluster
        rep = getattr(request.node, "rep_call", None)
        if rep is None or rep.failed:
            for i in cluster.nodes:
                sys.stderr.write(f"--- node {i} log tail ---\n{cluster.logs(i)}\n")


@pytest.fixture
def container_cluster(request, raftsink_image):
    """A started 3-node cluster with an elected leader; torn down after the test."""
    partitions = getattr(request, "param", None) or 3
    with _started_cluster(request, raftsink_image, partitions=partitions) as cluster:
        yield cluster


@pytest.fixture
def secure_container_cluster(request, raftsink_image, tmp_path):
    """The secure variant (docker/compose.secure.yaml's settings): docker/make-secure.sh
    makes its files into tmp_path/secure, as an operator runs it."""
    from tests.containers.container_cluster import MAKE_SECURE

    secure = tmp_path / "secure"
    proc = subprocess.run(["bash", MAKE_SECURE, str(secure)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    if os.getuid() != 0:  # make-secure.sh hands the node files to uid 10001 only as root
        for path in secure.glob("node*/*"):
            path.chmod(0o644)
        for path in secure.glob("node*"):
            path.chmod(0o755)
    with _started_cluster(request, raftsink_image, partitions=3, secure_dir=str(secure)) as c:
        yield c
