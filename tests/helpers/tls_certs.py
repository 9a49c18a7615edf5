"""Throw-away certificates for TLS tests, made by scripts/make-certs.sh (openssl).

`make_certs(dir)` -> a `Certs` with the cluster CA and node/client pairs; `rogue`
certificates come from a second, unrelated CA; `expired` ones from the cluster CA but
no longer valid. `certs`: the same as a module-scoped pytest fixture. Nothing is cached across tests: each test session makes its own keys.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "make-certs.sh"


@dataclass(frozen=True)
class Certs:
    dir: Path
    """The cluster CA's directory: ca.pem, NAME.pem, NAME.key."""
    rogue_dir: Path
    """Another CA's directory (ca.pem, rogue.pem/key: trusted by nobody here)."""

    @property
    def ca(self) -> str:
        return str(self.dir / "ca.pem")

    def cert(self, name: str) -> str:
        return str(self.dir / f"{name}.pem")

    def key(self, name: str) -> str:
        return str(self.dir / f"{name}.key")

    def pair(self, name: str) -> tuple[str, str]:
        return self.cert(name), self.key(name)

    @property
    def rogue(self) -> tuple[str, str]:
        return str(self.rogue_dir / "rogue.pem"), str(self.rogue_dir / "rogue.key")

    @property
    def rogue_ca(self) -> str:
        return str(self.rogue_dir / "ca.pem")

    def node_flags(self, name: str = "node1", **on: bool) -> list[str]:
        """`raftsink serve` flags: the pair `name`, the CA, and each listener in `on`
        (kafka / read_api / raft) turned on; kafka_client_auth=... style strings too."""
        flags = ["--tls-cert-file", self.cert(name), "--tls-key-file", self.key(name)]
        flags += ["--tls-ca-file", self.ca]
        for what, value in on.items():
            flag = "--tls-" + what.replace("_", "-")
            flags += [flag] if value is True else [flag, str(value)]
        return flags


def _run(args: list[str], env: dict[str, str] | None = None) -> None:
    r = subprocess.run(
        ["bash", str(SCRIPT), *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **(env or {})},
    )
    assert r.returncode == 0, f"make-certs.sh {args} failed: {r.stdout}\n{r.stderr}"


def make_certs(base: Path, names: tuple[str, ...] = ("node1", "node2", "node3", "client")) -> Certs:
    """The cluster CA with `names`, an expired `expired` pair, and a rogue CA's pair."""
    if shutil.which("openssl") is None:
        pytest.skip("openssl is not installed (apt-get install openssl)")
    base.mkdir(parents=True, exist_ok=True)
    good, rogue = base / "ca", base / "rogue"
    _run([str(good), *names])
    _run([str(good), "expired"], env={"DAYS": "-1"})
    _run([str(rogue), "rogue"])
    return Certs(good, rogue)


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    """One test module's certificates (make_certs' default names); registered for every
    test by tests/conftest.py (pytest_plugins)."""
    return make_certs(tmp_path_factory.mktemp("certs"))
