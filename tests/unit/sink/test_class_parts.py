"""SinkNode (sink.node.assemble) and SinkService (sink.service) are each one class in
several modules, one part each: the parts hold no state of their own, no name is
defined by two of them (the MRO would silently pick one), and every attribute a part
uses is a method or property of the class or a field its __init__ sets, so a field
renamed in one place and not another fails here rather than on the first request or
node start that takes that path (partition groups, SASL, TLS, an admin API).
sink.kafka.connection.Connection's parts: test_kafka_connection_parts.py."""

from __future__ import annotations

import pytest

from sink import service, service_admin
from sink.node import assemble, assemble_groups, assemble_listeners, assemble_security
from tests.helpers.class_parts import assert_every_attribute_is_known, assert_parts_hold_no_state

CLASSES: list[tuple[type, tuple[type, ...]]] = [
    (
        assemble.SinkNode,
        (
            assemble_groups.GroupsWiring,
            assemble_security.SecurityWiring,
            assemble_listeners.ListenerWiring,
        ),
    ),
    (service.SinkService, (service_admin.AdminOps,)),
]
IDS = [cls.__name__ for cls, _parts in CLASSES]


@pytest.mark.parametrize(("cls", "parts"), CLASSES, ids=IDS)
def test_the_class_is_its_parts(cls, parts):
    assert cls.__mro__[1:] == (*parts, object)


@pytest.mark.parametrize(("cls", "parts"), CLASSES, ids=IDS)
def test_parts_hold_no_state_and_define_disjoint_names(cls, parts):
    assert_parts_hold_no_state(cls, parts)


@pytest.mark.parametrize(("cls", "parts"), CLASSES, ids=IDS)
def test_every_attribute_a_part_uses_is_a_method_or_a_field(cls, parts):
    assert_every_attribute_is_known(cls, parts)
