"""raftlog.grpc_env: gRPC core's defaults for Raft processes, set before grpc is imported."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from raftlog import grpc_env


def test_apply_sets_missing_defaults_and_keeps_explicit_settings() -> None:
    env: dict[str, str] = {}
    grpc_env.apply(env)
    assert env == grpc_env.GRPC_DEFAULTS
    explicit = {"GRPC_EXPERIMENTS": ""}  # empty: gRPC's own defaults, on purpose
    grpc_env.apply(explicit)
    assert explicit == {"GRPC_EXPERIMENTS": ""}


def _fresh(code: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in grpc_env.GRPC_DEFAULTS}
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_the_module_does_not_import_grpc_and_applies_on_import() -> None:
    # gRPC core reads GRPC_EXPERIMENTS once, at import: the module must come first.
    got = _fresh(
        "import json, os, sys; import raftlog.grpc_env as g; "
        "print(json.dumps({'grpc': 'grpc' in sys.modules, 'applied': g.apply(), "
        "'env': os.environ.get('GRPC_EXPERIMENTS')}))"
    )
    assert got == {
        "grpc": False,
        "applied": True,
        "env": grpc_env.GRPC_DEFAULTS["GRPC_EXPERIMENTS"],
    }


def test_raft_process_entry_points_set_it_before_grpc_is_imported() -> None:
    for module in ("raftlog.node_process", "raftlog.host_process"):
        got = _fresh(
            "import json, os, sys; import importlib.abc\n"
            "seen = {}\n"
            "class Watch(importlib.abc.MetaPathFinder):\n"
            "    def find_spec(self, name, path=None, target=None):\n"
            "        if name == 'grpc' and 'env' not in seen:\n"
            "            seen['env'] = os.environ.get('GRPC_EXPERIMENTS')\n"
            "        return None\n"
            "sys.meta_path.insert(0, Watch())\n"
            f"import {module}\n"
            "print(json.dumps(seen))"
        )
        assert got == {"env": grpc_env.GRPC_DEFAULTS["GRPC_EXPERIMENTS"]}, module
