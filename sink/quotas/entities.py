"""Quota entities and the replicated quota configuration (KIP-55 / KIP-546 model).

An entity is a set of (entity type, name) pairs, at most one per type, where the
name None is the type's default: `client-id=app`, `client-id=<default>`,
`user=alice, client-id=<default>`, ... Only the user and client-id types are
served; the user is always ANONYMOUS until the node authenticates clients (as
Kafka's principal on a PLAINTEXT listener), so `user=<default>` quotas already
apply to every client.

QuotaTable is the applied configuration (identical on every node: it changes only
by applying ALTER_CLIENT_QUOTAS entries). Each quota key resolves on its own, with
Kafka's precedence (most specific first):

    1 user=U, client-id=C     4 user=<default>, client-id=C     7 client-id=C
    2 user=U, client-id=<d>   5 user=<default>, client-id=<d>   8 client-id=<default>
    3 user=U                  6 user=<default>

and the first entity that sets the key gives both the bound and the sensor it is
measured by: clients that share the winning entity's names share one rate (two
client ids under one `user=U` quota share it; each client id under
`client-id=<default>` has its own).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

USER = "user"
CLIENT_ID = "client-id"
IP = "ip"
ENTITY_TYPES = (USER, CLIENT_ID)
"""Entity types served (ip quotas, KIP-612, are not: connection limits are kafka.* settings)."""

ANONYMOUS = "ANONYMOUS"
"""The user of every connection until authentication exists (Kafka's PLAINTEXT principal)."""

PRODUCER_BYTE_RATE = "producer_byte_rate"
CONSUMER_BYTE_RATE = "consumer_byte_rate"
REQUEST_PERCENTAGE = "request_percentage"
QUOTA_KEYS = (PRODUCER_BYTE_RATE, CONSUMER_BYTE_RATE, REQUEST_PERCENTAGE)
"""Keys served: bytes/s of Produce requests, bytes/s of Fetch responses, and percent of
one event-loop thread's time per quota window (Kafka's request_percentage)."""
_INTEGER_KEYS = (PRODUCER_BYTE_RATE, CONSUMER_BYTE_RATE)  # Kafka declares these LONG

Entity = tuple[tuple[str, str | None], ...]
"""Sorted (type, name-or-None) pairs, one per type: the key of a quota."""

# Precedence (user part, client part): "name" = the client's own, None = default, "-" = absent.
_LEVELS: tuple[tuple[str, str], ...] = (
    ("name", "name"),
    ("name", "default"),
    ("name", "-"),
    ("default", "name"),
    ("default", "default"),
    ("default", "-"),
    ("-", "name"),
    ("-", "default"),
)


class QuotaError(ValueError):
    """A quota request that cannot be served (answered INVALID_REQUEST with this text)."""


def entity_of(pairs: Iterable[tuple[str, str | None]]) -> Entity:
    """A validated entity from (type, name) pairs (None: the default)."""
    items = list(pairs)
    if not items:
        raise QuotaError("an entity needs at least one of user, client-id")
    seen: set[str] = set()
    for etype, _name in items:
        if etype == IP:
            raise QuotaError(
                "entity type 'ip' is not supported (connection limits are kafka.* settings)"
            )
        if etype not in ENTITY_TYPES:
            raise QuotaError(f"unknown entity type {etype!r} (known: user, client-id)")
        if etype in seen:
            raise QuotaError(f"entity type {etype!r} given twice")
        seen.add(etype)
    return tuple(sorted(items))


def check_value(key: str, value: float) -> None:
    """A quota key and a value to set it to (QuotaError if either is refused)."""
    if key not in QUOTA_KEYS:
        raise QuotaError(f"unknown quota key {key!r} (known: {', '.join(QUOTA_KEYS)})")
    if not math.isfinite(value) or value <= 0:
        raise QuotaError(f"{key} must be a positive number, got {value!r}")
    if key in _INTEGER_KEYS and value != int(value):
        raise QuotaError(f"{key} is a whole number of bytes per second, got {value!r}")


def entity_text(entity: Entity) -> str:
    """`user=<default>, client-id=app` (for the CLI and errors)."""
    return ", ".join(f"{t}={'<default>' if n is None else n}" for t, n in entity)


@dataclass(frozen=True, slots=True)
class Op:
    key: str
    value: float
    remove: bool


@dataclass(frozen=True, slots=True)
class Alteration:
    """One entity's changes (an AlterClientQuotas entry, validated)."""

    entity: Entity
    ops: tuple[Op, ...]


def alteration_of(entity: Entity, ops: Sequence[tuple[str, float, bool]]) -> Alteration:
    """A validated Alteration (QuotaError: unknown key, bad value, key given twice)."""
    seen: set[str] = set()
    out = []
    for key, value, remove in ops:
        if key not in QUOTA_KEYS:
            raise QuotaError(f"unknown quota key {key!r} (known: {', '.join(QUOTA_KEYS)})")
        if key in seen:
            raise QuotaError(f"quota key {key!r} given twice for {entity_text(entity)}")
        seen.add(key)
        if not remove:
            check_value(key, value)
        out.append(Op(key, 0.0 if remove else float(value), bool(remove)))
    return Alteration(entity, tuple(out))


@dataclass(frozen=True, slots=True)
class Resolved:
    """A client's quota for one key: its bound and the sensor (user tag, client tag)."""

    bound: float
    sensor: tuple[str, str]


@dataclass
class QuotaTable:
    """entity -> {key: value}; `version` rises with every applied change (resolution
    caches compare it). Defaults: empty, i.e. no quotas."""

    quotas: dict[Entity, dict[str, float]] = field(default_factory=dict)
    version: int = 0

    def __bool__(self) -> bool:
        return bool(self.quotas)

    def apply(self, alterations: Iterable[Alteration]) -> None:
        """Apply validated alterations (an entity left without keys disappears)."""
        for a in alterations:
            values = dict(self.quotas.get(a.entity, {}))
            for op in a.ops:
                if op.remove:
                    values.pop(op.key, None)
                else:
                    values[op.key] = op.value
            if values:
                self.quotas[a.entity] = values
            else:
                self.quotas.pop(a.entity, None)
        self.version += 1

    def resolve(self, user: str, client_id: str, key: str) -> Resolved | None:
        """The quota of `key` for this client (None: unlimited), by Kafka's precedence."""
        for user_part, client_part in _LEVELS:
            pairs: list[tuple[str, str | None]] = []
            if user_part != "-":
                pairs.append((USER, user if user_part == "name" else None))
            if client_part != "-":
                pairs.append((CLIENT_ID, client_id if client_part == "name" else None))
            values = self.quotas.get(tuple(sorted(pairs)))
            if values is not None and key in values:
                tags = (user if user_part != "-" else "", client_id if client_part != "-" else "")
                return Resolved(values[key], tags)
        return None

    def describe(
        self, components: Sequence[tuple[str, int, str | None]], strict: bool
    ) -> list[tuple[Entity, dict[str, float]]]:
        """DescribeClientQuotas' filter: components are (entity type, match type, match)
        with match type 0 = exact name, 1 = the default, 2 = any name (the default
        included); strict: the entity has no other types than the components'."""
        wanted: dict[str, tuple[int, str | None]] = {}
        for etype, match_type, match in components:
            if etype not in ENTITY_TYPES:
                raise QuotaError(f"unknown entity type {etype!r} in the filter")
            if etype in wanted:
                raise QuotaError(f"entity type {etype!r} given twice in the filter")
            if match_type not in (0, 1, 2):
                raise QuotaError(f"unknown match type {match_type} for {etype!r}")
            if match_type == 0 and match is None:
                raise QuotaError(f"an exact match on {etype!r} needs a name")
            wanted[etype] = (match_type, match)
        out = []
        for entity, values in sorted(self.quotas.items(), key=lambda kv: _sort_key(kv[0])):
            names: Mapping[str, str | None] = dict(entity)
            if strict and set(names) != set(wanted):
                continue
            if all(_matches(names, t, m) for t, m in wanted.items()):
                out.append((entity, dict(values)))
        return out

    def to_json(self) -> list:
        return [[[list(p) for p in entity], values] for entity, values in self.quotas.items()]

    @classmethod
    def from_json(cls, data: list) -> QuotaTable:
        quotas = {tuple((t, n) for t, n in entity): dict(values) for entity, values in data}
        return cls(quotas, version=1)


def _sort_key(entity: Entity) -> tuple:
    return tuple((t, n is not None, n or "") for t, n in entity)


def _matches(names: Mapping[str, str | None], etype: str, match: tuple[int, str | None]) -> bool:
    if etype not in names:
        return False
    match_type, name = match
    if match_type == 0:
        return names[etype] == name
    if match_type == 1:
        return names[etype] is None
    return True
