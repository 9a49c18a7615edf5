"""sink uses raftlog's runtime node only through its public surface: no module
under sink/ reads a node's `.core` (the RawNode) or `.queue` (the DiskQueue),
and none imports raftlog.core (the pure core is the runtime's business)."""

from __future__ import annotations

import ast
import pathlib

SINK = pathlib.Path(__file__).resolve().parents[3] / "sink"
INTERNAL = {"core", "queue"}


def _offences(path: pathlib.Path) -> list[str]:
    tree = ast.parse(path.read_text(), str(path))
    out: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in INTERNAL:
            base = node.value
            name = base.attr if isinstance(base, ast.Attribute) else getattr(base, "id", "")
            if "node" in name.lower() or name in ("leader", "follower"):
                out.append(f"{path.name}:{node.lineno} {ast.unparse(node)}")
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("raftlog.core"):
            out.append(f"{path.name}:{node.lineno} from {node.module} import ...")
        elif isinstance(node, ast.Import):
            out += [
                f"{path.name}:{node.lineno} import {a.name}"
                for a in node.names
                if a.name.startswith("raftlog.core")
            ]
    return out


def test_checker_sees_an_offence(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("def f(self):\n    return self.node.core.term, node.queue.read\n")
    assert len(_offences(bad)) == 2


def test_no_sink_module_reaches_into_the_runtime_node():
    offences = [o for p in sorted(SINK.rglob("*.py")) for o in _offences(p)]
    assert offences == []
