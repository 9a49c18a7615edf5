"""Consumer groups, classic protocol (JoinGroup/SyncGroup/Heartbeat/LeaveGroup and
the group admin APIs), and the offsets side of it.

Public surface:
    GroupCoordinator   the sans-I/O state machine over every group of a node
    GroupRuntime       its asyncio driver (timer, parked requests, proposals, leadership)
    GroupOptions       the `groups` configuration section
    coordinator_slot   group id -> coordinator slot (Kafka's partitionFor); placement also
                       has coordinator_node / coordinates (the node coordinating a slot)
    membership         GroupMembership: what OffsetCommit/OffsetDelete/expiry ask the
                       coordinator (GroupStatus, NO_GROUPS when there is none)
    records            the log's group commands (G: a completed generation, g: deletion)
    messages           the coordinator's requests, responses and effects

    placement/membership (offsets branch): coordinator_node, coordinates, and
                       GroupMembership, what OffsetCommit/OffsetDelete/expiry ask

Imports nothing of sink (kio's ErrorCode only): the state machine applies its records,
the Kafka handlers build its messages, the service wires its runtime.
"""

from sink.groups import messages, records
from sink.groups.coordinator import GroupCoordinator
from sink.groups.options import GroupOptions
from sink.groups.placement import coordinator_slot
from sink.groups.runtime import GroupRuntime

__all__ = [
    "GroupCoordinator",
    "GroupOptions",
    "GroupRuntime",
    "coordinator_slot",
    "messages",
    "records",
]
