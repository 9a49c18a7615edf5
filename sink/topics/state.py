"""Replicated topic configs: the overrides of each topic, changed only through the log.

Two commands (tags allocated in sink/state/commands.py's table):

    ALTER_CONFIGS   b"K" | JSON {"t": topic, "r": replace, "ops": [[op, name, value], ...]}
    CREATE_TOPIC_C  b"U" | JSON {"n": name, "p": partitions, "id": uuid hex, "c": {name: value}}

JSON after the tag (not pickle): entries outlive processes and versions, and the
payload is small and rare. The operations are applied at apply time on the applied
overrides (not precomputed by the leader), so two concurrent incremental alters
never lose each other's change; the result is validated again at apply (pure,
deterministic), and an invalid result changes nothing and answers INVALID_CONFIG.

Invariant: every stored value passed `configs.validate` (canonical string).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping
from enum import IntEnum
from typing import Any, NamedTuple

from sink.topics.configs import DEFS, TopicConfigError, TopicDefaults, TopicPolicy, validate

ALTER_CONFIGS = 0x4B  # "K"
CREATE_TOPIC_WITH_CONFIGS = 0x55  # "U"


class Op(IntEnum):
    """IncrementalAlterConfigs config_operation; AlterConfigs is SET with replace=True."""

    SET = 0
    DELETE = 1
    APPEND = 2
    SUBTRACT = 3


class AlterCmd(NamedTuple):
    topic: str
    replace: bool
    """AlterConfigs (non-incremental): the ops are the topic's whole override set."""
    ops: list[tuple[int, str, str | None]]


class CreateCmd(NamedTuple):
    name: str
    partitions: int
    topic_id: uuid.UUID
    configs: dict[str, str]


def encode_alter(topic: str, ops: list[tuple[int, str, str | None]], replace: bool) -> bytes:
    body = {"t": topic, "r": replace, "ops": [[int(o), n, v] for o, n, v in ops]}
    return b"K" + json.dumps(body, separators=(",", ":")).encode()


def decode_alter(data: bytes) -> AlterCmd:
    d = json.loads(data[1:])
    return AlterCmd(d["t"], bool(d["r"]), [(int(o), n, v) for o, n, v in d["ops"]])


def encode_create(
    name: str, partitions: int, topic_id: uuid.UUID, configs: Mapping[str, str]
) -> bytes:
    body = {"n": name, "p": partitions, "id": topic_id.hex, "c": dict(configs)}
    return b"U" + json.dumps(body, separators=(",", ":")).encode()


def decode_create(data: bytes) -> CreateCmd:
    d = json.loads(data[1:])
    return CreateCmd(d["n"], int(d["p"]), uuid.UUID(hex=d["id"]), dict(d["c"]))


def apply_ops(
    current: Mapping[str, str], ops: list[tuple[int, str, str | None]], replace: bool
) -> dict[str, str]:
    """The overrides after ops (pure). TopicConfigError: unknown name, bad value, an
    APPEND/SUBTRACT on a non-list config, an unknown operation."""
    out: dict[str, str] = {} if replace else dict(current)
    for op, name, value in ops:
        d = DEFS.get(name)
        if d is None:
            raise TopicConfigError(f"Unknown topic config name: {name}")
        if op == Op.SET:
            out[name] = validate(name, value)
        elif op == Op.DELETE:
            out.pop(name, None)
        elif op in (Op.APPEND, Op.SUBTRACT):
            if d.type.name != "LIST":
                raise TopicConfigError(
                    f"{op.name if isinstance(op, Op) else op} is only for list configs, not {name}"
                )
            items = [s for s in out.get(name, "").split(",") if s]
            new = [s.strip() for s in (value or "").split(",") if s.strip()]
            if op == Op.APPEND:
                items += [s for s in new if s not in items]
            else:
                items = [s for s in items if s not in new]
            if items:
                out[name] = validate(name, ",".join(items))
            else:
                out.pop(name, None)
        else:
            raise TopicConfigError(f"unknown config operation {op}")
    return out


class TopicConfigTable:
    """topic -> its overrides (validated strings); the broker defaults are the node's
    (set by the wiring, not replicated); policy(topic) caches the typed effective view."""

    def __init__(self, defaults: TopicDefaults | None = None) -> None:
        self.defaults = defaults or TopicDefaults()
        self._overrides: dict[str, dict[str, str]] = {}
        self._policies: dict[str, TopicPolicy] = {}

    def set_defaults(self, defaults: TopicDefaults) -> None:
        self.defaults = defaults
        self._policies.clear()

    def overrides(self, topic: str) -> dict[str, str]:
        return dict(self._overrides.get(topic, {}))

    def policy(self, topic: str) -> TopicPolicy:
        p = self._policies.get(topic)
        if p is None:
            p = TopicPolicy.of(self._overrides.get(topic, {}), self.defaults)
            self._policies[topic] = p
        return p

    def set(self, topic: str, overrides: Mapping[str, str]) -> None:
        if overrides:
            self._overrides[topic] = dict(overrides)
        else:
            self._overrides.pop(topic, None)
        self._policies.pop(topic, None)

    def drop(self, topic: str) -> None:
        """Forget a deleted topic's configs."""
        self.set(topic, {})

    def apply_alter(self, c: AlterCmd) -> tuple[str | None, dict[str, str]]:
        """Apply an ALTER_CONFIGS entry -> (error message or None, the new overrides).
        The caller checks that the topic exists."""
        try:
            new = apply_ops(self._overrides.get(c.topic, {}), c.ops, c.replace)
        except TopicConfigError as exc:
            return str(exc), self.overrides(c.topic)
        self.set(c.topic, new)
        return None, new

    def to_json(self) -> dict[str, Any]:
        return {t: dict(c) for t, c in self._overrides.items()}

    def load_json(self, d: Mapping[str, Mapping[str, str]]) -> None:
        self._overrides = {t: dict(c) for t, c in d.items()}
        self._policies.clear()
