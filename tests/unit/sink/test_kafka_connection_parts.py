"""sink.kafka.connection.Connection is one class in several modules (conn_input,
conn_memory, conn_dispatch, conn_responses), one part each: the parts hold no state
of their own, no name is defined by two of them (the MRO would silently pick one),
and every attribute a part uses is a method of Connection or a field connection_made
(or __init__) sets, so a field renamed in one place and not another fails here
rather than on the first connection that takes that path."""

from __future__ import annotations

from sink.kafka import conn_dispatch, conn_input, conn_memory, conn_responses, connection
from sink.kafka.connection import Connection
from tests.helpers.class_parts import assert_every_attribute_is_known, assert_parts_hold_no_state

PARTS = (
    (conn_input, conn_input.InputFlow),
    (conn_memory, conn_memory.MemoryShare),
    (conn_dispatch, conn_dispatch.Dispatcher),
    (conn_responses, conn_responses.ResponseQueue),
)


def test_connection_is_its_parts_and_asyncio_protocol():
    parts = [cls for _mod, cls in PARTS]
    assert Connection.__mro__[1 : 1 + len(parts)] == tuple(parts)
    assert issubclass(Connection, connection.asyncio.BufferedProtocol)


def test_parts_hold_no_state_and_define_disjoint_names():
    assert_parts_hold_no_state(Connection, [cls for _mod, cls in PARTS])


def test_every_attribute_a_part_uses_is_a_method_or_a_field():
    assert_every_attribute_is_known(
        Connection, [cls for _mod, cls in PARTS], ("__init__", "connection_made")
    )
