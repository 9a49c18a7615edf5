"""The configuration table: every setting of `SinkConfig`, derived from its classes.

`OPTIONS` lists one `Option` per leaf field, in declaration order. Each has a
canonical key `section.name`, and from it (never written by hand):
    TOML        `[section]` table, key `name` (the node section may also be `[node]`)
    environment RAFTSINK_<SECTION>_<NAME>   e.g. RAFTSINK_KAFKA_MAX_FRAME_BYTES
    flag        --<section>-<name>          e.g. --kafka-max-frame-bytes
Documentation and default come from the dataclass that declares the field: the
string literal under it (read with `ast`, so it is written once, in the code)
and its dataclass default.

`LEGACY` maps the flat names of the first, one-record configuration (TOML key,
RAFTSINK_<NAME>, --<name>) to their keys; they keep working everywhere, because
launchers, docker/compose.yaml, tests and the chaos campaign use them.
"""

from __future__ import annotations

import ast
import functools
import inspect
import itertools
import textwrap
import typing
from dataclasses import MISSING, dataclass, fields
from typing import Any

from sink.config.schema import SinkConfig

LEGACY: dict[str, str] = {
    "node_id": "node.id",
    "data_dir": "node.data_dir",
    "peers": "node.peers",
    "read_api_listen": "node.read_api_listen",
    "metrics_listen": "node.metrics_listen",
    "log_level": "node.log_level",
    "event_loop": "node.event_loop",
    "kafka_listen": "kafka.listen",
    "kafka_external_listen": "kafka.external_listen",
    "external_kafka": "kafka.external_addresses",
    "cluster_id": "kafka.cluster_id",
    "default_partitions": "kafka.default_partitions",
    "auto_create_topics": "kafka.auto_create_topics",
    "max_frame_bytes": "kafka.max_frame_bytes",
    "raft_listen": "raft.listen",
    "tick_ms": "raft.tick_ms",
    "election_ticks": "raft.election_ticks",
    "write_caching": "storage.write_caching",
    "snapshot_every_entries": "retention.snapshot_every_entries",
    "retention_max_entries": "retention.max_entries",
    "retention_hard_max_entries": "retention.hard_max_entries",
}
"""Flat name of the first configuration -> key. Only ever added to."""


@dataclass(frozen=True, slots=True)
class Option:
    key: str
    """`section.name`, e.g. "kafka.max_frame_bytes"."""
    section: str
    name: str
    path: tuple[str, ...]
    """Attribute path from SinkConfig, e.g. ("kafka", "limits", "max_frame_bytes")."""
    kind: Any
    """int, float, bool, str, or "peers" / "addresses" (sink.config.values syntax)."""
    default: Any
    """The declared default; MISSING for a required setting."""
    doc: str
    owner: type
    """The dataclass that declares the field (its errors say Owner.name)."""
    aliases: tuple[str, ...] = ()
    """Flat names (LEGACY) that set the same key."""

    @property
    def required(self) -> bool:
        return self.default is MISSING

    @property
    def env(self) -> str:
        return "RAFTSINK_" + self.key.replace(".", "_").upper()

    @property
    def env_names(self) -> tuple[str, ...]:
        names = [self.env] + ["RAFTSINK_" + a.upper() for a in self.aliases]
        return tuple(dict.fromkeys(names))

    @property
    def flag(self) -> str:
        return "--" + self.key.replace(".", "-").replace("_", "-")

    @property
    def flag_names(self) -> tuple[str, ...]:
        names = [self.flag] + ["--" + a.replace("_", "-") for a in self.aliases]
        return tuple(dict.fromkeys(names))

    def get(self, config: SinkConfig) -> Any:
        value: Any = config
        for attr in self.path:
            value = getattr(value, attr)
        return value


@functools.cache
def field_docs(cls: type) -> dict[str, str]:
    """Attribute docstrings of a dataclass: the string literal right under a field."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    body = tree.body[0].body  # type: ignore[attr-defined]
    docs: dict[str, str] = {}
    for prev, node in itertools.pairwise(body):
        if (
            isinstance(prev, ast.AnnAssign)
            and isinstance(prev.target, ast.Name)
            and isinstance(node, ast.Expr)
            and isinstance(node.value, ast.Constant)
            and isinstance(node.value.value, str)
        ):
            docs[prev.target.id] = " ".join(node.value.value.split())
    return docs


def _default(f: Any) -> Any:
    if f.default is not MISSING:
        return f.default
    if f.default_factory is not MISSING:
        return f.default_factory()
    return MISSING


def _walk(cls: type, section: str, path: tuple[str, ...], exclude: tuple[str, ...]) -> list[Option]:
    hints = typing.get_type_hints(cls)
    docs = field_docs(cls)
    out: list[Option] = []
    for f in fields(cls):
        if f.name in exclude:
            continue
        kind = hints[f.name]
        if f.metadata.get("embed"):
            out += _walk(kind, section, (*path, f.name), tuple(f.metadata.get("exclude", ())))
            continue
        kind = f.metadata.get("parse", kind)
        if kind not in (int, float, bool, str, "peers", "addresses"):
            # A nested dataclass or a new value type: decide embed / exclude / parse.
            raise TypeError(f"{cls.__name__}.{f.name}: no configuration syntax for {kind!r}")
        out.append(
            Option(
                key=f"{section}.{f.name}",
                section=section,
                name=f.name,
                path=(*path, f.name),
                kind=kind,
                default=_default(f),
                doc=docs.get(f.name, ""),
                owner=cls,
            )
        )
    return out


def _build_table() -> tuple[Option, ...]:
    hints = typing.get_type_hints(SinkConfig)
    options: list[Option] = []
    for f in fields(SinkConfig):
        options += _walk(hints[f.name], f.name, (f.name,), tuple(f.metadata.get("exclude", ())))
    aliases: dict[str, list[str]] = {}
    for flat, key in LEGACY.items():
        aliases.setdefault(key, []).append(flat)
    out = tuple(
        Option(
            **{
                **{s: getattr(o, s) for s in Option.__slots__},
                "aliases": tuple(aliases.get(o.key, ())),
            }
        )
        for o in options
    )
    keys = [o.key for o in out]
    if len(set(keys)) != len(keys):
        raise TypeError(
            f"duplicate configuration keys: {sorted(k for k in keys if keys.count(k) > 1)}"
        )
    unknown = set(LEGACY.values()) - set(keys)
    if unknown:
        raise TypeError(f"LEGACY names keys that do not exist: {sorted(unknown)}")
    return out


OPTIONS: tuple[Option, ...] = _build_table()
BY_KEY: dict[str, Option] = {o.key: o for o in OPTIONS}
SECTIONS: tuple[str, ...] = tuple(f.name for f in fields(SinkConfig))
