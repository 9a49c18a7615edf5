"""Member addresses through the Raft log: the "M" command and the applied table.

Raft's configuration entries carry node ids (and, with node identity, incarnations),
not addresses. A node that joins later, and every node that becomes leader later,
must still reach the new member, and Kafka's Metadata must name its listener; so the
operator's add/replace writes the member's addresses into the log first:

    MEMBER_ADDRESSES  b"M" | JSON {"op": "set", "id": N, "raft": H:P, "kafka": H:P,
                                   "read_api": H:P}
                            | JSON {"op": "forget", "id": N}
                            | JSON {"op": "drain", "id": N}
                            | JSON {"op": "undrain", "id": N}
                            | JSON {"op": "host", "id": N, "host": LABEL}

Applied on every node into MemberTable (in the snapshot under "members"). Addresses
of the initial members come from the `peers` setting; a table entry overrides it
(replacing a node at a new address). An unreadable entry is logged and skipped,
never a crashed node.

"host" records the node's host label (`node.host`; "" for none: the node is its own
host), which each node registers itself at start and again when it changes (KRaft's
broker registration carries the rack the same way): placement on the controller's
leader reads every voter's label from here (sink/node/host_labels.py). "forget" clears
it. In the snapshot under "members_hosts".

"drain" marks a node being drained (partition groups: `raftsink members remove` moves
its data groups away first, sink/members/drain.py): placement gives it no new replica
from the apply on, on whichever node leads the controller later. "undrain" and
"forget" (the node removed) clear the mark. In the snapshot under "members_draining".
"""

from __future__ import annotations

import json
from typing import Any, NamedTuple

from sink.placement import is_host_label

MEMBER_ADDRESSES = 0x4D  # "M"


class MemberAddress(NamedTuple):
    raft: str
    kafka: str
    read_api: str


def _check_hostport(what: str, value: Any) -> str:
    if not isinstance(value, str):
        raise ValueError(f"{what}: expected HOST:PORT, got {value!r}")
    host, sep, port = value.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"{what}: expected HOST:PORT, got {value!r}")
    return value


def check_address(addr: MemberAddress) -> MemberAddress:
    """addr, if each of its three addresses is HOST:PORT; else ValueError naming it."""
    for name, value in zip(MemberAddress._fields, addr, strict=True):
        _check_hostport(name, value)
    return addr


def encode_set_member(node_id: int, addr: MemberAddress) -> bytes:
    check_address(addr)
    if node_id < 1:
        raise ValueError(f"node id must be >= 1, got {node_id}")
    body = {"op": "set", "id": node_id, **addr._asdict()}
    return b"M" + json.dumps(body, separators=(",", ":")).encode()


def encode_forget_member(node_id: int) -> bytes:
    return b"M" + json.dumps({"op": "forget", "id": node_id}).encode()


def encode_drain_member(node_id: int, draining: bool = True) -> bytes:
    """Mark node_id draining (or, draining False, clear the mark)."""
    if node_id < 1:
        raise ValueError(f"node id must be >= 1, got {node_id}")
    op = "drain" if draining else "undrain"
    return b"M" + json.dumps({"op": op, "id": node_id}).encode()


DRAIN_OPS = ("drain", "undrain")


def check_host_label(label: Any) -> str:
    """label if it is a host label (sink.placement.is_host_label: `node.host`'s rules);
    else ValueError."""
    if not is_host_label(label):
        raise ValueError(f"member command: bad host label {label!r}")
    return label


def encode_host_member(node_id: int, label: str) -> bytes:
    """Record node_id's host label ("" for none)."""
    if node_id < 1:
        raise ValueError(f"node id must be >= 1, got {node_id}")
    body = {"op": "host", "id": node_id, "host": check_host_label(label)}
    return b"M" + json.dumps(body, separators=(",", ":")).encode()


def decode_member_command(data: bytes) -> tuple[str, int, MemberAddress | str | None]:
    """(op, node id, address, host label or None); ValueError on anything else."""
    if data[:1] != b"M":
        raise ValueError("not a member command")
    try:
        body = json.loads(bytes(data[1:]))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"member command is not JSON: {exc}") from None
    if not isinstance(body, dict):
        raise ValueError("member command is not a JSON object")
    op, node_id = body.get("op"), body.get("id")
    if not isinstance(node_id, int) or isinstance(node_id, bool) or node_id < 1:
        raise ValueError(f"member command: bad node id {node_id!r}")
    if op == "forget" or op in DRAIN_OPS:
        return op, node_id, None
    if op == "host":
        return op, node_id, check_host_label(body.get("host"))
    if op != "set":
        raise ValueError(f"member command: unknown op {op!r}")
    addr = MemberAddress(body.get("raft"), body.get("kafka"), body.get("read_api"))
    return op, node_id, check_address(addr)


class MemberTable:
    """node id -> MemberAddress, as applied from the log (later entries win)."""

    def __init__(self, addresses: dict[int, MemberAddress] | None = None) -> None:
        self.addresses: dict[int, MemberAddress] = dict(addresses or {})
        self.draining: set[int] = set()
        """Nodes being drained: placement gives them no new replicas."""
        self.hosts: dict[int, str] = {}
        """Node id -> the host label it registered ("": none, its own host); a node
        missing here has not registered yet."""
        self.version = 0
        """Bumped on every applied change (the node's watcher compares it)."""

    def apply(self, data: bytes) -> int:
        """Apply one "M" entry; returns the node id it named. ValueError if unreadable."""
        op, node_id, arg = decode_member_command(data)
        if op == "drain":
            self.draining.add(node_id)
        elif op == "undrain":
            self.draining.discard(node_id)
        elif op == "host":
            assert isinstance(arg, str)
            self.hosts[node_id] = arg
        elif op == "forget":  # a removed node is drained no more, its label forgotten
            self.addresses.pop(node_id, None)
            self.draining.discard(node_id)
            self.hosts.pop(node_id, None)
        else:
            assert isinstance(arg, MemberAddress)
            self.addresses[node_id] = arg
        self.version += 1
        return node_id

    def get(self, node_id: int) -> MemberAddress | None:
        return self.addresses.get(node_id)

    def to_json(self) -> list[list[Any]]:
        return [[i, *a] for i, a in sorted(self.addresses.items())]

    def draining_json(self) -> list[int]:
        return sorted(self.draining)

    def hosts_json(self) -> dict[str, str]:
        return {str(n): h for n, h in sorted(self.hosts.items())}

    @classmethod
    def from_json(
        cls,
        data: list[list[Any]],
        draining: list[int] | None = None,
        hosts: dict[str, str] | None = None,
    ) -> MemberTable:
        table = cls({int(i): MemberAddress(r, k, ra) for i, r, k, ra in data})
        table.draining = {int(n) for n in draining or ()}
        table.hosts = {int(n): h for n, h in (hosts or {}).items()}
        table.version = 1
        return table
