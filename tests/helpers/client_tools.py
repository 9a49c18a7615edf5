"""The non-Python Kafka clients of the version-window tests, found or built.

scripts/test-deps.sh installs them (kcat and Sarama from Debian, KafkaJS from npm). A client
that is missing fails its tests under CI=true (with what to install) and skips them elsewhere.
Sarama is compiled here, offline, from Debian's GOPATH tree (/usr/share/gocode; GOPROXY=off,
GO111MODULE=off: nothing is downloaded). The binary is cached under a key made of the program's
source, the Go version and the Sarama package version, so a test session builds it at most once
and later sessions not at all.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CLIENTS = ROOT / "tests" / "clients"
SARAMA_SRC = CLIENTS / "go" / "sarama_client"
GOPATH = Path("/usr/share/gocode")
SARAMA_PKG = GOPATH / "src" / "github.com" / "Shopify" / "sarama"
KAFKAJS_DIR = CLIENTS / "js"


def missing(what: str, install: str) -> None:
    """A test dependency is absent: fail under CI (it must be there), skip elsewhere."""
    msg = f"{what} is not installed ({install}; scripts/test-deps.sh does it)"
    if os.environ.get("CI"):
        pytest.fail(msg, pytrace=False)
    pytest.skip(msg)


def cache_dir() -> Path:
    base = os.environ.get("RAFTSINK_TEST_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "raftsink-tests"
    )
    path = Path(base)
    path.mkdir(parents=True, exist_ok=True)
    return path


def _sarama_key(go: str) -> str:
    h = hashlib.sha256()
    for f in sorted(SARAMA_SRC.glob("*.go")):
        h.update(f.name.encode() + b"\0" + f.read_bytes())
    h.update(subprocess.run([go, "version"], capture_output=True, check=True).stdout)
    pkg = subprocess.run(
        ["dpkg-query", "-W", "-f=${Version}", "golang-github-shopify-sarama-dev"],
        capture_output=True,
    )
    h.update(pkg.stdout)
    return h.hexdigest()[:16]


def sarama_binary() -> str:
    """Path of the built sarama_client (built now if no cached build matches)."""
    go = shutil.which("go")
    if go is None:
        missing("Go (golang-go)", "apt-get install golang-go")
    if not SARAMA_PKG.is_dir():
        missing("Sarama", "apt-get install golang-github-shopify-sarama-dev")
    cache = cache_dir()
    binary = cache / f"sarama_client-{_sarama_key(go)}"
    if binary.exists():
        return str(binary)
    env = {
        **os.environ,
        "GO111MODULE": "off",
        "GOPATH": str(GOPATH),
        "GOPROXY": "off",
        "GOFLAGS": "",
        "GOCACHE": str(cache / "go-build"),
    }
    tmp = binary.with_name(binary.name + f".tmp{os.getpid()}")
    r = subprocess.run(
        [go, "build", "-o", str(tmp), "."],
        cwd=SARAMA_SRC,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    if r.returncode != 0:
        # cgo's deprecation warnings from DataDog/zstd are noise; show only the end.
        tail = "\n".join((r.stdout + r.stderr).splitlines()[-25:])
        pytest.fail(f"building the Sarama client failed:\n{tail}", pytrace=False)
    os.replace(tmp, binary)  # atomic: a concurrent session sees a whole binary or none
    return str(binary)


def kafkajs_script() -> tuple[str, str]:
    """(node, path of kafkajs_client.js) with KafkaJS installed beside it."""
    node = shutil.which("node")
    if node is None:
        missing("Node.js", "apt-get install nodejs npm")
    if not (KAFKAJS_DIR / "node_modules" / "kafkajs" / "package.json").exists():
        missing("KafkaJS", "npm install in tests/clients/js")
    return node, str(KAFKAJS_DIR / "kafkajs_client.js")


def kcat_path() -> str:
    path = shutil.which("kcat")
    if path is None:
        missing("kcat", "apt-get install kcat")
    return path


def kcat_versions(kcat: str) -> str:
    """kcat's own version line, e.g. 'kcat - Apache Kafka producer and consumer tool ... 1.7.1'."""
    r = subprocess.run([kcat, "-V"], capture_output=True, text=True, timeout=10)
    return (r.stdout + r.stderr).strip()
